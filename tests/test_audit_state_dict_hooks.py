"""A layer with state-dict hooks is left as it is and named, not swapped and stripped of them.

``emulate`` replaces each ``nn.Linear`` by a new module.  Forward and backward hooks already kept a layer out;
state-dict hooks (``register_load_state_dict_pre_hook``, ``register_state_dict_post_hook``, ...) were dropped
silently: a load pre-hook that renames an old checkpoint's keys stopped running, and
``load_state_dict(..., strict=False)`` (the guide's way to load after ``emulate``) left the weight as initialised,
silently; a save hook's key vanished from the state dict.  A layer without hooks is emulated as before.
"""

import warnings

import pytest

torch = pytest.importorskip("torch")
import fp8emu.torch as ft  # noqa: E402


def _rename(module, state_dict, prefix, local_metadata, strict, missing, unexpected, error_msgs):
    if prefix + "w_old" in state_dict:              # an old checkpoint's name for the weight
        state_dict[prefix + "weight"] = state_dict.pop(prefix + "w_old")


def _emulate(model):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = ft.emulate(model, "te-current", "h100")
    return report, [str(w.message) for w in caught]


def test_a_load_pre_hook_keeps_running():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32))
    model[0]._register_load_state_dict_pre_hook(_rename, with_module=True)
    report, warned = _emulate(model)
    assert "0" not in report.swapped and "state-dict hook" in report.skipped["0"]
    assert list(report.swapped) == ["2"]
    assert any("'0'" in w and "state-dict hook" in w for w in warned)
    sd = {"0.w_old": torch.full((32, 32), 2.0), "0.bias": torch.zeros(32)}
    model.load_state_dict(sd, strict=False)
    assert torch.equal(model[0].weight, torch.full((32, 32), 2.0))     # loaded through the hook


@pytest.mark.parametrize("kind", ["state_dict_post", "state_dict_pre", "load_post"])
def test_other_state_dict_hooks(kind):
    model = torch.nn.Sequential(torch.nn.Linear(32, 32))
    calls = []
    if kind == "state_dict_post":
        model[0].register_state_dict_post_hook(lambda mod, sd, prefix, meta: sd.update({prefix + "extra": 1}))
    elif kind == "state_dict_pre":
        model[0].register_state_dict_pre_hook(lambda mod, prefix, keep_vars: calls.append(1))
    else:
        model[0].register_load_state_dict_post_hook(lambda mod, keys: calls.append(1))
    report, _ = _emulate(model)
    assert report.swapped == {} and "state-dict hook" in report.skipped["0"]
    sd = model.state_dict()
    if kind == "state_dict_post":
        assert "0.extra" in sd
    else:
        model.load_state_dict(sd)
        assert calls == [1]


def test_a_layer_without_hooks_is_emulated_as_before():
    model = torch.nn.Sequential(torch.nn.Linear(32, 32))
    report, warned = _emulate(model)
    assert list(report.swapped) == ["0"] and report.skipped == {} and warned == []
    assert isinstance(model[0], ft.EmulatedLinear)
