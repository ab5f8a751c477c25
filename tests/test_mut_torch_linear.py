"""fp8emu.torch's emulated linear layer: what the issue-53 mutation samples of ``fp8emu/torch/linear.py``
found untested (tests/MUTATION.md, "The torch adapter's layer, swap and torch's CPU GEMM").

Expectations are written out from the formats' definitions and torch's own behaviour, not taken
from the layer's code."""

import copy
import types
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ft = pytest.importorskip("fp8emu.torch")
from torch.utils.checkpoint import checkpoint  # noqa: E402

from fp8emu.formats import get_format  # noqa: E402
from fp8emu.torch.linear import LAYERS, EmulatedLinear, _rows, frac_clipped  # noqa: E402
from fp8emu.training.recipes import Operand  # noqa: E402

E4M3, E5M2, E2M1 = get_format("e4m3fn"), get_format("e5m2"), get_format("e2m1fn")


def _fp8(fmt, scale_inv, shape):
    return Operand("fp8", np.zeros(shape, np.uint8), fmt, np.asarray(scale_inv, np.float32))


def test_frac_clipped_counts_what_lies_beyond_the_largest_value_by_more_than_half_an_ulp():
    # E4M3FN: largest 448 = 1.75 * 2**8, its ulp 2**(8-3) = 32, so rounding reaches 448 up to 448 + 16 = 464
    # and clips beyond; with scale_inv 0.5 the input limit is 232 (a tie at the limit itself rounds, not clips)
    x = np.array([[232.0, np.nextafter(232.0, 300.0), -300.0, 0.0, np.inf, np.nan]])
    assert frac_clipped(x, _fp8(E4M3, 0.5, x.shape)) == pytest.approx(2 / 6)      # Inf and NaN are not clipping
    # E5M2: 57344 = 1.75 * 2**15, ulp 2**13, limit 57344 + 4096 = 61440
    y = np.array([[61440.0, 61441.0, -61442.0, 1.0]])
    assert frac_clipped(y, _fp8(E5M2, 1.0, y.shape)) == pytest.approx(2 / 4)
    # per-row scales (M, 1): each row against its own limit 464 * scale_inv
    r = np.array([[465.0, 464.0, 0, 0], [465.0, 929.0, 0, 0]])
    assert frac_clipped(r, _fp8(E4M3, [[1.0], [2.0]], r.shape)) == pytest.approx(2 / 8)
    # K-wise blocks of two columns (2, 2) over a 2 x 3 input (a partial last block)
    b = np.array([[465.0, 464.0, 929.0], [1857.0, 1856.0, 3713.0]])
    inv = [[1.0, 2.0], [4.0, 8.0]]             # limits: row 0: 464, 464, 928; row 1: 1856, 1856, 3712
    assert frac_clipped(b, _fp8(E4M3, inv, b.shape)) == pytest.approx(4 / 6)
    # block-scaled (E2M1: 6 = 1.5 * 2**2, ulp 2, limit 7): one scale per block of (1, 2)
    st = types.SimpleNamespace(fmt=E2M1, scale_inv=np.array([[1.0, 3.0]]), block=(1, 2), shape=(1, 4),
                               codes=np.zeros((1, 4), np.uint8), global_scale=None, scale=None)
    z = np.array([[7.0, 7.5, 21.0, 21.5]])
    assert frac_clipped(z, Operand("block", st=st)) == pytest.approx(2 / 4)
    assert np.isnan(frac_clipped(z, Operand("hp", hp=z)))
    assert frac_clipped(np.zeros((0, 4)), _fp8(E4M3, 1.0, (0, 4))) == 0.0
    assert frac_clipped(np.zeros((0, 4)), _fp8(E4M3, np.zeros((0, 1)), (0, 4))) == 0.0     # no rows, no row scales


def _caught(recipe, gpu, dtype):
    model = torch.nn.Sequential(torch.nn.Linear(16, 16))
    ft.emulate(model, recipe, gpu)
    x = torch.linspace(-2, 2, 256).reshape(16, 16).to(dtype).requires_grad_()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model(x).backward(torch.ones(16, 16, dtype=dtype))
    return [str(w.message) for w in caught if "high-precision wgrad" in str(w.message)]


def test_torchaos_high_precision_wgrad_of_a_low_precision_gradient_is_warned_about():
    """torchao's rowwise_with_gw_hp wgrad of bfloat16 tensors is torch's oneDNN bfloat16 mm, emulated as a
    float32 sgemm: warned, on torchao's emulated GEMM only, and only for a gradient that is not float32."""
    msgs = _caught("torchao-rowwise-gw-hp", "cpu", torch.bfloat16)
    assert len(msgs) == 1 and msgs[0].startswith("layer '0': torchao's high-precision wgrad of torch.bfloat16")
    assert _caught("torchao-rowwise-gw-hp", "cpu", torch.float32) == []
    assert _caught("torchao-rowwise-gw-hp", "h100", torch.bfloat16) == []      # a GPU stack: no torch mm
    assert _caught("torchao-rowwise", "cpu", torch.bfloat16) == []             # an FP8 wgrad


def test_a_padded_forward_only_step_reports_the_scales_of_its_real_rows():
    """Three tokens forward-only on a stack whose multiple is 16: zero rows pad the GEMM, and the
    diagnostics are of the three real rows, their row-wise scales included.  torchao's rowwise recipe
    scales each row by 448 / amax rounded down to a power of two: amax 1, 3, 100 give 256, 128, 4
    (the padding's zero rows would give the largest scale there is), so the median scale is 128."""
    model = torch.nn.Sequential(torch.nn.Linear(128, 128))
    ft.emulate(model, "torchao-rowwise", "h100", diagnostics=True)
    x = torch.zeros(3, 128)
    x[0, 0], x[1, 5], x[2, 7] = 1.0, -3.0, 100.0
    with torch.no_grad():
        model(x)
    row = ft.diagnostics(model)[0]
    assert (row["tensor"], row["amax"], row["scale"]) == ("input", 100.0, 128.0)


def test_rows_of_an_unquantized_operand_are_its_first_rows():
    hp = np.arange(12, dtype=np.float32).reshape(4, 3)
    assert np.array_equal(_rows(Operand("hp", hp=hp), 2).hp, hp[:2])


def test_a_layer_built_directly_records_no_diagnostics_by_default():
    layer = EmulatedLinear(torch.nn.Linear(16, 16), ft.get_recipe("te-current"), ft.get_stack("exact"), "l", 0)
    assert (layer.diagnostics_enabled, layer.autocast_only, layer.seed, layer.multiple) == (False, False, 0, 1)
    with torch.no_grad():
        layer(torch.ones(16, 16))
    assert layer.diagnostic_rows == []


def _rel(got, ref):
    ref = np.asarray(ref, np.float64)
    return np.linalg.norm(np.asarray(got, np.float64) - ref) / np.linalg.norm(ref)


def test_each_passs_gemm_error_is_the_relative_frobenius_error_against_float64():
    """gemm_rel_err as documented (fp8emu.torch.diagnostics): ||out - ref||_F / ||ref||_F, ref the float64
    product of the unquantized operands (fprop plus the bias its epilogue adds); NaN where ref is zero."""
    rng = np.random.default_rng(55)
    x = rng.standard_normal((32, 32)).astype(np.float32)
    dy = rng.standard_normal((32, 16)).astype(np.float32)
    model = torch.nn.Sequential(torch.nn.Linear(32, 16))
    ft.emulate(model, "te-current", "exact", diagnostics=True)
    w, b = (p.detach().numpy().astype(np.float64) for p in (model[0].weight, model[0].bias))
    xt = torch.from_numpy(x).requires_grad_()
    y = model(xt)
    y.backward(torch.from_numpy(dy))
    err = {r["pass"]: r["gemm_rel_err"] for r in ft.diagnostics(model)}
    x64, dy64 = x.astype(np.float64), dy.astype(np.float64)
    assert err["fprop"] == pytest.approx(_rel(y.detach().numpy(), x64 @ w.T + b), rel=1e-9)
    assert err["dgrad"] == pytest.approx(_rel(xt.grad.numpy(), dy64 @ w), rel=1e-9)
    assert err["wgrad"] == pytest.approx(_rel(model[0].weight.grad.numpy(), dy64.T @ x64), rel=1e-9)
    assert 0 < err["fprop"] < 0.1
    ft.reset_diagnostics(model)
    zero = torch.nn.Sequential(torch.nn.Linear(32, 16, bias=False))
    ft.emulate(zero, "te-current", "exact", diagnostics=True)
    with torch.no_grad():
        zero(torch.zeros(32, 32))
    assert np.isnan(ft.diagnostics(zero)[0]["gemm_rel_err"])


@pytest.mark.parametrize("recipe, gpu", [("te-current", "h100"), ("te-mxfp8", "b200"), ("te-nvfp4", "b200"),
                                         ("torchao-rowwise", "cpu"), ("te-delayed", "exact")])
def test_no_tokens_give_nn_linears_empty_output_and_zero_gradients(recipe, gpu):
    """nn.Linear maps a (2, 0, 64) input to (2, 0, 64) and leaves zero gradients; no emulated step is taken."""
    model = torch.nn.Sequential(torch.nn.Linear(64, 64))
    ft.emulate(model, recipe, gpu)
    x = torch.zeros(2, 0, 64, requires_grad=True)
    y = model(x)
    assert y.shape == (2, 0, 64)
    y.sum().backward()
    assert not model[0].weight.grad.any() and not model[0].bias.grad.any()
    assert int(model[0].fp8emu_step) == 0


def test_forward_only_with_more_tokens_than_features_equals_the_training_forward():
    """64 tokens (a multiple of 16, no padding) through a 16-feature layer: inference gives training's bits."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16))
    ft.emulate(model, "te-current", "h100")
    x = torch.randn(4, 16, 16)
    train = model(x).detach()
    with torch.no_grad():
        infer = model(x)
    assert infer.shape == (4, 16, 16) and torch.equal(infer.view(torch.int16), train.view(torch.int16))


def test_on_the_cpu_stack_the_bias_gradient_is_torchs_own_reduction():
    """On torch's CPU (the ``cpu`` stack) autograd sums the bias gradient with torch's own reduction, so an
    emulated layer's bias.grad is bit for bit a plain nn.Linear's; 256 random rows: the order matters
    (NumPy's pairwise float32 sum differs from torch's in most columns)."""
    torch.manual_seed(0)
    plain = torch.nn.Linear(16, 16)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16))
    model[0].load_state_dict(plain.state_dict())
    ft.emulate(model, "te-current", "cpu")
    x, dy = torch.randn(256, 16), torch.randn(256, 16)
    model(x).backward(dy)
    plain(x).backward(dy)
    assert torch.equal(model[0].bias.grad.view(torch.int32), plain.bias.grad.view(torch.int32))
    assert not np.array_equal(dy.numpy().sum(axis=0, dtype=np.float32), plain.bias.grad.numpy())


# ----------------------------------------------------------------------------- seed 60 (fresh sample)
def test_frac_clipped_of_a_tall_operand_and_of_a_single_element():
    """Scales repeated over their rows, not their columns: a (3, 2) input with one scale per row has
    the row limits 464 * scale_inv = 464, 928, 1856; one element beyond its limit is a fraction of 1."""
    x = np.array([[465.0, 0.0], [929.0, 928.0], [1856.0, 1857.0]])
    assert frac_clipped(x, _fp8(E4M3, [[1.0], [2.0], [4.0]], x.shape)) == pytest.approx(3 / 6)
    # one (1, 1) block scale repeated over a (3, 2) input: every row against 464
    assert frac_clipped(x, _fp8(E4M3, [[1.0]], x.shape)) == pytest.approx(5 / 6)
    assert frac_clipped(np.array([[465.0]]), _fp8(E4M3, 1.0, (1, 1))) == 1.0
    assert frac_clipped(np.array([[464.0]]), _fp8(E4M3, 1.0, (1, 1))) == 0.0


def test_each_layer_and_each_copy_has_its_own_non_persistent_key():
    """The compiled op finds its layer by the ``fp8emu_key`` buffer (a key of its own, never reused): a buffer, so
    that it moves with the module and is not saved; a copy (shallow or deep) is a layer of its own."""
    layer = EmulatedLinear(torch.nn.Linear(16, 16), ft.get_recipe("te-current"), ft.get_stack("exact"), "l", 0)
    assert "fp8emu_key" in dict(layer.named_buffers())
    key = int(layer.fp8emu_key)
    assert LAYERS[key] is layer
    assert "fp8emu_key" not in layer.state_dict()
    for other in (copy.copy(layer), copy.deepcopy(layer)):
        assert int(other.fp8emu_key) != key and LAYERS[int(other.fp8emu_key)] is other
        assert int(layer.fp8emu_key) == key and LAYERS[key] is layer      # the original's key is its own still


def test_a_gemm_error_against_a_zero_reference_is_nan_even_when_the_emulated_product_is_not_zero():
    """x . w = 1 + 16 - 17 = 0 exactly in float64, but current scaling puts 17 at E4M3's 448, where 16 and 1
    round to 416 and 26 (16 * 448 / 17 = 421.6 between 416 and 448, 26.35 between 26 and 28): the
    emulated product is not zero, and an error relative to a zero reference is NaN, not Inf."""
    model = torch.nn.Sequential(torch.nn.Linear(16, 16, bias=False))
    ft.emulate(model, "te-current", "exact", diagnostics=True)
    x, w = torch.zeros(16, 16), torch.zeros(16, 16)
    x[:, :3] = torch.tensor([1.0, 16.0, 17.0])
    w[:, :3] = torch.tensor([1.0, 1.0, -1.0])
    assert not (x.double() @ w.double().T).any()
    with torch.no_grad():
        model[0].weight.copy_(w)
        y = model(x)
    assert (y != 0).all()
    assert np.isnan(ft.diagnostics(model)[0]["gemm_rel_err"])


def test_an_input_that_is_no_float_tensor_is_refused_naming_what_it_got():
    """nn.Linear itself refuses an integer input; the layer casts its output to the input's dtype, so it
    must refuse one too rather than hand back truncated values."""
    model = torch.nn.Sequential(torch.nn.Linear(16, 16))
    ft.emulate(model, "te-current", "exact")
    with pytest.raises(RuntimeError):
        torch.nn.Linear(16, 16)(torch.ones(16, 16, dtype=torch.int64))
    for bad, got in ((torch.ones(16, 16, dtype=torch.int64), "torch.int64"),
                     (torch.ones(16, 16, dtype=torch.bool), "torch.bool"), ([[1.0] * 16] * 16, "list")):
        with pytest.raises(TypeError, match=f"layer '0': input must be a float32, bfloat16, float16 or float64 "
                                            f"tensor, got {got}"):
            model(bad)


# ----------------------------------------------------------------------------- seed 73 (fresh sample)
def test_a_copy_taken_while_a_compiled_call_awaits_its_backward_holds_no_pending_call():
    """The op a compiled graph runs keeps the eager call's graph (non-leaf tensors) for the backward op; a
    deep copy taken before that backward gets no pending calls (torch refuses to deep-copy a non-leaf tensor)
    and the original keeps its own.  The op is called here as the compiled graph calls it, without compiling."""
    torch.manual_seed(9)
    layer = EmulatedLinear(torch.nn.Linear(16, 16), ft.get_recipe("te-current"), ft.get_stack("exact"), "l", 0)
    x = torch.randn(16, 16)
    # the returned handle (out[1]) keeps the pending call: dropping it drops the call's graph
    out = torch.ops.fp8emu.emulated_linear(x, layer.weight, layer.bias, [layer.fp8emu_step], layer.fp8emu_key,
                                           True, None)
    assert len(layer.compiled_pending) == 1
    twin = copy.deepcopy(layer)
    assert twin.compiled_pending == {} and len(layer.compiled_pending) == 1
    assert twin.recompute_states == {} and int(out[1]) in layer.compiled_pending


def test_a_one_dimensional_input_is_one_token_as_nn_linear_takes_it():
    """nn.Linear maps (in_features,) to (out_features,); only a 0-D input is refused."""
    torch.manual_seed(10)
    plain = torch.nn.Linear(16, 16)
    model = torch.nn.Sequential(copy.deepcopy(plain))
    ft.emulate(model, "te-current", "exact")
    assert isinstance(model[0], EmulatedLinear)
    v = torch.randn(16)
    with torch.no_grad():
        y, one = model(v), model(v[None])
    assert y.shape == (16,) == plain(v).shape
    assert torch.equal(y, one[0])           # the same token as a (1, 16) batch
    with pytest.raises(ValueError, match="layer '0': input is a 0-D tensor"):
        model(torch.tensor(1.0))


def test_a_float64_input_beyond_float32s_range_is_refused():
    """The layer computes in float32: 1e39 would become Inf there (te-current then gave finite garbage)."""
    model = torch.nn.Sequential(torch.nn.Linear(16, 16))
    ft.emulate(model, "te-current", "exact")
    x = torch.ones(16, 16, dtype=torch.float64)
    x[3, 4] = 1e39
    with pytest.raises(ValueError, match=r"layer '0': input overflows float32.* 1 finite float64 value\(s\)"):
        model(x)
    x[3, 4] = 3e38                                                # within float32's range: runs
    assert torch.isfinite(model(x)).all()


def _loop(model, x, n):
    for _ in range(n):
        x = torch.tanh(model(x))
    return x


@pytest.mark.parametrize("calls", [1, 16])
def test_checkpointings_recompute_replays_the_kept_calls_with_the_same_state_and_gradients(calls):
    """Activation checkpointing runs the segment's forward again in the backward: each recompute of one of
    the layer's last 16 calls gives that call's bits from its own state (delayed scaling's amax history and
    scale, the step) and leaves the state as the forward left it, so the gradients, the step count and the
    state equal those of the same step without checkpointing, with no warning."""
    torch.manual_seed(11)
    base = torch.nn.Sequential(torch.nn.Linear(32, 32))
    ft.emulate(base, "te-delayed", "h100")
    plain, ckpt = copy.deepcopy(base), copy.deepcopy(base)
    x = torch.randn(32, 32)
    _loop(plain, x, calls).square().mean().backward()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        checkpoint(lambda v: _loop(ckpt, v, calls), x, use_reentrant=False).square().mean().backward()
    assert int(ckpt[0].fp8emu_step) == int(plain[0].fp8emu_step) == calls
    for (n, a), (_, b) in zip(plain.named_parameters(), ckpt.named_parameters()):
        assert torch.equal(a.grad, b.grad), n
    for n in ("amax_history_input", "scale_input", "amax_history_weight", "scale_weight"):
        assert torch.equal(getattr(plain[0], n), getattr(ckpt[0], n)), n


# ----------------------------------------------------------------------------- seed 75 (fresh sample)
def test_a_meta_input_is_refused_naming_it():
    """A meta tensor has a shape and no values, which the NumPy GEMMs read."""
    model = torch.nn.Sequential(torch.nn.Linear(16, 16))
    ft.emulate(model, "te-current", "exact")
    with pytest.raises(ValueError, match=r"layer '0': input is a meta tensor \(a shape without values\)"):
        model(torch.empty(16, 16, device="meta"))


def test_checkpointings_replay_leaves_a_buffer_slot_holding_none_alone():
    """torch lets a module hold a buffer slot of None (``register_buffer(name, None)``): the replay saves and
    restores the layer's tensors only, and the step is the one without checkpointing."""
    torch.manual_seed(15)
    base = torch.nn.Sequential(torch.nn.Linear(32, 32))
    ft.emulate(base, "te-delayed", "h100")
    base[0].register_buffer("unused", None)
    plain, ckpt = copy.deepcopy(base), copy.deepcopy(base)
    x = torch.randn(32, 32)
    plain(x).square().mean().backward()
    checkpoint(ckpt, x, use_reentrant=False).square().mean().backward()
    assert ckpt[0].unused is None and int(ckpt[0].fp8emu_step) == int(plain[0].fp8emu_step) == 1
    assert torch.equal(ckpt[0].weight.grad, plain[0].weight.grad)


def test_a_forward_without_autograd_quantizes_only_the_fprop_operands(monkeypatch):
    """Without autograd no backward GEMM runs, so its column-wise copies are not made (the forward-only
    path's documented saving), whether the token count is a whole multiple or padded to one; a training
    forward makes them (so the count below can see them)."""
    torch.manual_seed(16)
    model = torch.nn.Sequential(torch.nn.Linear(64, 32))
    ft.emulate(model, "te-mxfp8", "b200")
    mult = model[0].multiple
    recipe = type(model[0].recipe)
    passes = []
    real = recipe.operand

    def spy(self, role, arr, k_axis, pass_, **kw):
        passes.append((role, pass_))
        return real(self, role, arr, k_axis, pass_, **kw)

    monkeypatch.setattr(recipe, "operand", spy)
    for tokens in (mult, 2 * mult, mult + 1):
        passes.clear()
        with torch.no_grad():
            y = model(torch.randn(tokens, 64))
        assert y.shape == (tokens, 32)
        assert sorted(passes) == [("input", "fprop"), ("weight", "fprop")], tokens
    passes.clear()
    model(torch.randn(mult, 64, requires_grad=True))
    assert {p for _, p in passes} == {"fprop", "wgrad", "dgrad"}


def test_a_layer_pickled_before_recipe_stack_and_multiple_became_properties_unpickles():
    """An earlier fp8emu kept a layer's recipe, stack and token multiple under the names ``recipe``, ``stack`` and
    ``multiple`` in its ``__dict__``; such a pickle's state still restores a layer that runs as the original."""
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(32, 32))
    ft.emulate(model, "te-current", "h100")
    layer = model[0]
    state = layer.__getstate__()
    old = dict(state)
    for k in ("recipe", "stack", "multiple"):
        old[k] = old.pop("_" + k)
    again = EmulatedLinear.__new__(EmulatedLinear)
    again.__setstate__(old)
    assert (again.recipe, again.stack, again.multiple) == (layer.recipe, layer.stack, layer.multiple)
    assert not {"recipe", "stack", "multiple"} & set(vars(again))
    x = torch.randn(16, 32)
    want = copy.deepcopy(layer)(x)
    assert torch.equal(again(x), want)


def test_torchao_rowwise_on_the_cpu_equals_real_torchao_where_bfloat16_outputs_are_subnormal():
    """torchao runs the output GEMM with ``use_fast_accum=True`` (row-wise scales inside ``_scaled_mm``) and the
    gradients' without (the scales multiplied into its bfloat16 output afterwards): two roundings where an output
    is subnormal in bfloat16.  Real torchao (``emulate=False``, on this CPU) is the reference, on outputs most of
    which are subnormal.  (fp8emu's two paths both give these bits here: on this CPU the output GEMM's
    ``use_fast_accum`` changed no output; tests/MUTATION.md, seed 87.)"""
    f8 = pytest.importorskip("torchao.float8")
    import dataclasses
    torch.manual_seed(0)
    base = torch.nn.Sequential(torch.nn.Linear(64, 40, bias=False))
    with torch.no_grad():
        base[0].weight.mul_(2.0 ** -64)
    ref, emu = copy.deepcopy(base), copy.deepcopy(base)
    cfg = f8.Float8LinearConfig.from_recipe_name("rowwise")
    f8.convert_to_float8_training(ref, config=dataclasses.replace(cfg, emulate=False))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ft.emulate(emu, "torchao-rowwise", dataclasses.replace(ft.get_stack("cpu"), torchao=None))
    x = torch.randn(32, 64) * 2.0 ** -66
    with torch.no_grad():
        want, got = ref(x), emu(x)
    tiny = want.abs() < 2.0 ** -126
    assert want.dtype == got.dtype and int(tiny.sum()) > 100         # most outputs subnormal in bfloat16
    assert torch.equal(got, want)
