"""fp8emu.torch.emulate, the swap: what the issue-53 mutation samples of ``fp8emu/torch/swap.py`` found
untested (tests/MUTATION.md, "The torch adapter's layer, swap and torch's CPU GEMM").

Expectations are written out from the documentation (Transformer Engine's HYBRID format, the stacks'
GEMM presets as listed in tests/test_torch_emulate.py), not taken from the swap's code."""

import warnings

import pytest

torch = pytest.importorskip("torch")
ft = pytest.importorskip("fp8emu.torch")

from fp8emu.torch.linear import EmulatedLinear  # noqa: E402


def _model():
    return torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.ReLU(), torch.nn.Linear(16, 10),
                               torch.nn.Linear(10, 16))


def test_the_report_prints_every_layer_and_its_state():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ft.HighPrecisionWarning)
        rep = ft.emulate(_model(), "te-current", "h100", module_filter_fn=lambda mod, fqn: fqn != "3")
    skipped = "out_features 10 is not a multiple of 16, which te-current on h100 needs"
    assert rep.high_precision == {"2": skipped, "3": "module_filter_fn returned False"}
    assert list(rep.high_precision) == ["2", "3"]                  # skipped first, then filtered
    assert str(rep).splitlines() == [
        "1 layer(s) emulated with te-current on h100",
        "  0: te-current: input e4m3fn, weight e4m3fn, grad_output e5m2; h100: fprop hopper-fast, dgrad hopper, "
        "wgrad hopper; bfloat16 activations, fp32 wgrad",
        f"  high precision 2: {skipped}",
        "  filtered 3: module_filter_fn returned False",
        "  first nn.Linear (registration order): '0', emulated",
        "  last nn.Linear (registration order): '3', high precision"]


def test_a_model_without_linear_layers_reports_no_first_or_last():
    with pytest.warns(UserWarning, match="holds no nn.Linear layer"):
        rep = ft.emulate(torch.nn.Sequential(torch.nn.ReLU()), "te-current", "h100")
    assert (rep.first, rep.last, rep.swapped, rep.high_precision) == (None, None, {}, {})
    assert str(rep) == "0 layer(s) emulated with te-current on h100"


def test_torchao_on_the_cpu_takes_any_size():
    """torchao's convert_to_float8_training converts every nn.Linear, and torch's CPU GEMMs take any M, K, N."""
    model = torch.nn.Sequential(torch.nn.Linear(10, 7))
    rep = ft.emulate(model, "torchao-tensorwise", "cpu")
    assert list(rep.swapped) == ["0"] and rep.skipped == {} and isinstance(model[0], EmulatedLinear)
    assert model(torch.ones(3, 10)).shape == (3, 7)


@pytest.mark.parametrize("version, ok", [("2.7.0", True), ("2.10.1+cpu", True), ("3.0", True), ("10.0.0", True),
                                         ("2.6.9", False), ("1.13.1", False), ("nightly", False)])
def test_the_torch_version_is_compared_as_numbers(monkeypatch, version, ok):
    monkeypatch.setattr(torch, "__version__", version)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16))
    if ok:
        assert list(ft.emulate(model, "te-current", "h100").swapped) == ["0"]
    else:
        with pytest.raises(RuntimeError, match=f"^fp8emu.torch needs torch >= 2.7; this is torch {version}$"):
            ft.emulate(model, "te-current", "h100")


@pytest.mark.parametrize("kwargs, exc, msg", [
    ({"seed": True}, ValueError, "seed must be an int >= 0, got True"),
    ({"seed": 1.0}, ValueError, "seed must be an int >= 0, got 1.0"),
    ({"autocast_only": 1}, TypeError, "autocast_only must be True or False, got 1"),
    ({"module_filter_fn": "0"}, TypeError, "module_filter_fn must be None or a callable"),
])
def test_bad_keywords_are_refused(kwargs, exc, msg):
    model = torch.nn.Sequential(torch.nn.Linear(16, 16))
    with pytest.raises(exc, match=msg):
        ft.emulate(model, "te-current", "h100", **kwargs)
    assert type(model[0]) is torch.nn.Linear
    assert list(ft.emulate(model, "te-current", "h100", seed=0).swapped) == ["0"]      # 0 is a seed


def test_diagnostics_are_copies_and_need_a_module():
    model = torch.nn.Sequential(torch.nn.Linear(16, 16))
    ft.emulate(model, "te-current", "exact", diagnostics=True)
    with torch.no_grad():
        model(torch.ones(16, 16))
    rows = ft.diagnostics(model)
    rows[0]["layer"] = "changed"
    assert ft.diagnostics(model)[0]["layer"] == "0"
    for fn in (ft.diagnostics, ft.reset_diagnostics):
        with pytest.raises(TypeError, match="model must be a torch.nn.Module, got list"):
            fn([model])


class _MyLinear(torch.nn.Linear):
    """A user's subclass: its forward may do more than nn.Linear's, so it is not swapped."""


def test_a_subclass_of_linear_is_left_as_it_is_and_warned_about():
    model = torch.nn.Sequential(_MyLinear(16, 16), torch.nn.Linear(16, 16))
    with pytest.warns(ft.HighPrecisionWarning, match=r"^1 layer\(s\) left in high precision .*'0' \(a subclass"):
        rep = ft.emulate(model, "te-current", "h100")
    assert rep.skipped == {"0": "a subclass of nn.Linear (_MyLinear), left as it is"}
    assert type(model[0]) is _MyLinear and list(rep.swapped) == ["1"]


def test_the_high_precision_warning_points_at_the_callers_line():
    with pytest.warns(ft.HighPrecisionWarning) as caught:
        ft.emulate(torch.nn.Sequential(torch.nn.Linear(16, 10)), "te-current", "h100")
    assert [w.filename for w in caught] == [__file__]
