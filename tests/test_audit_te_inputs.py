"""Inputs the FP8 (``autocast``) path of ``fp8emu.torch.te``'s modules cannot take are one clear error.

Outside ``te.autocast`` torch's own functions refuse them; inside, the emulated GEMMs took an integer input
and cast the output back to it (zeros: truncated, silently), computed a float64 input beyond float32's range
as Inf (te.Linear: finite garbage; the norms: NaN), and raised NumPy's "shape mismatch: a is (64, 48) and b
is (64, 64)" for a wrong feature count, Python's "tuple index out of range" for a 0-D input, "can't convert
meta device type tensor to numpy" for a meta tensor and torch's "must override the setup_context
staticmethod" under ``torch.vmap``.  Each is one line naming the module; what ran before runs as before.
"""

import pytest

torch = pytest.importorskip("torch")
import fp8emu.torch.te as te  # noqa: E402

RECIPE = te.recipe.Float8CurrentScaling


def _modules():
    torch.manual_seed(0)
    return {"Linear": te.Linear(64, 64), "LayerNormLinear": te.LayerNormLinear(64, 64),
            "LayerNormMLP": te.LayerNormMLP(64, 64), "LayerNorm": te.LayerNorm(64), "RMSNorm": te.RMSNorm(64)}


def _fp8(mod, x):
    with te.autocast(recipe=RECIPE()):
        return mod(x)


def _big64():
    x = torch.randn(64, 64, dtype=torch.float64)
    x[0, 0] = 1e39
    return x


CASES = {
    "int": (lambda: torch.full((64, 64), 3, dtype=torch.int64), TypeError, "input must be a float32"),
    "bool": (lambda: torch.ones(64, 64, dtype=torch.bool), TypeError, "got torch.bool"),
    "features": (lambda: torch.randn(64, 48), ValueError, "input has 48 features, expected 64"),
    "0-D": (lambda: torch.tensor(1.0), ValueError, "input is a 0-D tensor"),
    "meta": (lambda: torch.empty(64, 64, device="meta"), ValueError, "input is a meta tensor"),
    "float64 beyond float32": (_big64, ValueError, "input overflows float32"),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("name", ["Linear", "LayerNormLinear", "LayerNormMLP", "LayerNorm", "RMSNorm"])
def test_an_input_the_fp8_path_cannot_take_is_named(name, case):
    make, exc, text = CASES[case]
    mod = _modules()[name]
    with pytest.raises(exc, match=rf"^{name}(\.gemm|\.fc1)?: .*{text}"):
        _fp8(mod, make())


@pytest.mark.parametrize("name", ["Linear", "LayerNormLinear", "LayerNormMLP"])
def test_vmap_of_the_fp8_path_is_named(name):
    mod = _modules()[name]
    with pytest.raises(RuntimeError, match="torch.func transforms .* cannot run the emulated GEMMs"):
        with te.autocast(recipe=RECIPE()):
            torch.vmap(mod)(torch.randn(2, 64, 64))


@pytest.mark.parametrize("name", ["Linear", "LayerNormLinear", "LayerNormMLP", "LayerNorm"])
def test_what_ran_before_runs_as_before(name):
    x = torch.randn(64, 64, dtype=torch.float64)
    mod = _modules()[name]
    y64 = _fp8(mod, x)                      # a float64 input float32 holds: computed, returned as float64
    assert y64.dtype == torch.float64 and bool(torch.isfinite(y64).all())
    # float64 values that float32 holds exactly give the float32 input's bits
    x32 = torch.randn(64, 64)
    assert torch.equal(_fp8(_modules()[name], x32.double()).float(), _fp8(_modules()[name], x32))
    assert _fp8(_modules()[name], torch.randn(0, 64)).shape == (0, 64)
    with torch.no_grad():                  # outside autocast torch runs the module, as before
        assert mod(torch.randn(3, 64)).shape == (3, 64)
