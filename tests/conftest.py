"""Shared pytest configuration: Hypothesis profiles.

``ci`` (the default) keeps the property tests to a few seconds; ``thorough`` is run by hand::

    HYPOTHESIS_PROFILE=thorough python3 -m pytest tests/test_properties.py
"""

import importlib.util
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from fp8emu.cli import main

settings.register_profile(
    "ci", max_examples=25, deadline=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "thorough", max_examples=1000, deadline=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session")
def demo_study(tmp_path_factory):
    """``fp8emu study --demo`` run once per session (10 s on 2 cores): test_study checks its files and
    report, test_docs the study guide's numbers against its results."""
    out = tmp_path_factory.mktemp("demo")
    assert main(["study", "--demo", "--out", str(out), "--quiet"]) == 0
    return out


@pytest.fixture
def fresh_dynamo():
    """torch.compile's caches emptied before and after a test: each test compiles other recipes (and graphs
    with hooks recompile module frames), so no test meets another's recompile limit."""
    import torch
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture
def record_tool():
    """``tools/record_cpu_order.py`` loaded as a module, afresh for each test (it imports torch, as the tool
    does), so a test can call its functions and patch its names."""
    pytest.importorskip("torch")
    path = Path(__file__).resolve().parents[1] / "tools" / "record_cpu_order.py"
    spec = importlib.util.spec_from_file_location("record_cpu_order", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
