"""``probes.exact_accumulation`` decides by the stack's accumulation fields, not by its name.

A stack named ``...+exact-acc`` was returned as it was (the function's way of being idempotent), so a
stack of the user's so named, ``dataclasses.replace(get_stack("h100"), name="mine+exact-acc")``, kept
Hopper's split and fast accumulation: the "exact accumulation" reference accumulated on the hardware's
datapath, silently.  The expectations are the fields the docstring states.
"""

import dataclasses

import pytest

pytest.importorskip("torch")
from fp8emu.torch import get_stack, probes  # noqa: E402


@pytest.mark.parametrize("base", ["h100", "b200"])
def test_a_stack_named_like_an_exact_one_is_made_exact(base):
    mine = dataclasses.replace(get_stack(base), name="mine+exact-acc")
    got = probes.exact_accumulation(mine)
    assert (got.split, got.fast, got.torchao) == ("exact", "exact", None)
    for f in ("block_fp8", "mx", "nvfp4"):
        assert getattr(got, f) == ("exact" if getattr(mine, f) is not None else None)
    assert got.name == "mine+exact-acc" and got.dtype == mine.dtype


@pytest.mark.parametrize("base", ["h100", "b200"])
def test_it_is_still_idempotent_and_names_once(base):
    once = probes.exact_accumulation(base)
    assert once.name == f"{base}+exact-acc"
    assert probes.exact_accumulation(once) == once
