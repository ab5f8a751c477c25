"""Shared pytest configuration: Hypothesis profiles.

``ci`` (the default) keeps the property tests to a few seconds; ``thorough`` is run by hand::

    HYPOTHESIS_PROFILE=thorough python3 -m pytest tests/test_properties.py
"""

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=25, deadline=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "thorough", max_examples=1000, deadline=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
