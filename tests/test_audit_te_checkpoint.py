"""Sixteenth audit, part A (audit27): ``fp8emu.torch.te.checkpoint`` after its first release.

The reference is the same model without checkpointing (bit-identical outputs, gradients and module state) and TE's
``checkpoint`` (``transformer_engine/pytorch/distributed.py`` at d0067d0) where the two differ:

* a segment returning a parameter (``return_bias=True``): torch's reentrant checkpoint made the bias a non-leaf and
  its backward never ended;
* ``context_fn`` in the non-reentrant mode under ``torch.no_grad()``: its forward context was skipped (TE enters it,
  as the reentrant mode does);
* one module shared by threads, one of them checkpointing: steps and amax records lost to the recompute's replay;
* ``torch.compile`` of a function calling ``te.checkpoint``: Dynamo's internal errors, where TE runs it eagerly.
"""

import warnings

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import fp8emu.torch.te as te  # noqa: E402
from test_audit_layer_threads import _run, switch_often  # noqa: E402, F401  (threads started together)
from test_te_checkpoint import _assert_same, _pair  # noqa: E402  (the model twice; outputs, grads, state equal)

W = 64


@pytest.mark.parametrize("reentrant", [True, False])
@pytest.mark.parametrize("make,bias", [(lambda: te.Linear(W, W, return_bias=True), "bias"),
                                       (lambda: te.LayerNormMLP(W, W, return_bias=True), "fc2_bias")])
def test_a_segment_returning_its_bias(make, bias, reentrant):
    """TE's ``return_bias=True`` hands back the bias parameter for a later bias-dropout-add (Megatron's pattern).
    Through the reentrant checkpoint the parameter became a non-leaf (its ``grad_fn`` the checkpoint's node) and the
    backward recursed without end; the gradients are now those without checkpointing."""
    plain, ckpt = _pair(make)
    x = torch.randn(W, W)
    res = []
    for m, use in ((plain, False), (ckpt, True)):
        xi = x.clone().requires_grad_(True)
        with te.autocast(recipe=te.recipe.DelayedScaling()):
            y, b = te.checkpoint(m, xi, use_reentrant=reentrant) if use else m(xi)
        # checked before the backward, which never ended before the fix
        assert getattr(m, bias).is_leaf and getattr(m, bias).grad_fn is None
        assert torch.equal(b, getattr(m, bias))
        (y + 2 * b).square().mean().backward()
        res.append((y.detach(), xi.grad))
    assert torch.equal(res[0][0], res[1][0]) and torch.equal(res[0][1], res[1][1])
    _assert_same(plain, ckpt)


class _Mark:
    def __init__(self, seen, name):
        self.seen, self.name = seen, name

    def __enter__(self):
        self.seen.append(self.name)

    def __exit__(self, *exc):
        return False


@pytest.mark.filterwarnings("ignore:None of the inputs have requires_grad")
@pytest.mark.parametrize("grad_off", [torch.no_grad, torch.inference_mode])
@pytest.mark.parametrize("reentrant", [True, False])
def test_context_fn_s_forward_context_without_grad(reentrant, grad_off):
    """TE enters ``context_fn``'s forward context whatever the grad mode (its non-reentrant checkpoint is its own);
    torch's non-reentrant checkpoint skips it when grad is off, where the reentrant mode entered it."""
    seen = []
    plain, ckpt = _pair(lambda: te.LayerNormMLP(W, 2 * W))
    x = torch.randn(W, W)
    with grad_off(), te.autocast(recipe=te.recipe.DelayedScaling()):
        y = te.checkpoint(ckpt, x, use_reentrant=reentrant,
                          context_fn=lambda: (_Mark(seen, "forward"), _Mark(seen, "recompute")))
        assert torch.equal(y, plain(x))
    assert seen == ["forward"]
    _assert_same(plain, ckpt)


def test_threads_sharing_a_checkpointed_module_keep_every_step(switch_often):
    """One ``te.Linear`` called by three threads, one of them through ``te.checkpoint``: the recompute put the
    forward's state in the module for its call, and the other threads' steps (and delayed scaling's amax records)
    taken meanwhile were dropped when the module's own state came back (38 of 45 steps kept, silently)."""
    torch.manual_seed(0)
    lin, n = te.Linear(W, W), 15

    def call(i):
        if i == 0:
            x = torch.randn(W, W, requires_grad=True)
            with te.autocast(recipe=te.recipe.DelayedScaling()):
                y = te.checkpoint(lin, x)
            y.sum().backward()
        else:
            with torch.no_grad(), te.autocast(recipe=te.recipe.DelayedScaling()):
                lin(torch.randn(W, W))
    _run(3, n, call)
    g = lin.fp8emu_gemm
    assert int(g.fp8emu_step) == 3 * n
    # each forward records its input's amax once (random normal inputs: never 0), the recompute none
    assert int((g.amax_history_input != 0).sum()) == 3 * n


def test_a_recompute_and_another_thread_s_forward(switch_often):
    """The same with stochastic rounding (NVFP4): the recompute of every checkpointed call gives its forward's
    bits, and no step is lost (``recompute_scope`` holds the state lock for the call)."""
    torch.manual_seed(0)
    mlp, n, differ = te.LayerNormMLP(W, W), 8, []
    recipe = te.recipe.NVFP4BlockScaling(disable_stochastic_rounding=False)

    def call(i):
        if i == 0:
            outs = []

            def f(x):
                y = mlp(x)
                outs.append(y.detach().clone())
                return y
            x = torch.randn(W, W, requires_grad=True)
            with te.autocast(recipe=recipe, gpu="b200"):
                y = te.checkpoint(f, x)
            y.sum().backward()
            differ.append(not torch.equal(outs[0], outs[1]))
        else:
            with torch.no_grad(), te.autocast(recipe=recipe, gpu="b200"):
                mlp(torch.randn(W, W))
    _run(2, n, call)
    assert len(differ) == n and not any(differ)
    assert int(mlp.fp8emu_fc1.fp8emu_step) == int(mlp.fp8emu_fc2.fp8emu_step) == 2 * n


class _Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = te.Linear(W, W)
        self.mlp = te.LayerNormMLP(W, 2 * W)

    def forward(self, x):
        return self.mlp(self.lin(x))


@pytest.mark.parametrize("reentrant", [True, False])
def test_under_torch_compile(reentrant):
    """TE's ``checkpoint`` is ``torch._disable_dynamo``: run eagerly.  Traced, the non-reentrant mode was Dynamo's
    "InternalTorchDynamoError: NotImplementedError: checkpoint not implemented for ... NestedUserFunctionVariable
    context_fn"; now both modes give the eager bits, and ``fullgraph=True`` says why it cannot."""
    torch._dynamo.reset()
    plain, ckpt = _pair(_Block)
    x = torch.randn(W, W)
    res = []
    for m, use in ((plain, False), (ckpt, True)):
        xi = x.clone().requires_grad_(True)

        def f(t):
            return te.checkpoint(m, t, use_reentrant=reentrant) if use else m(t)
        g = torch.compile(f, backend="eager") if use else f
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")         # Dynamo's graph-break notes
            with te.autocast(recipe=te.recipe.DelayedScaling()):
                y = g(xi)
        y.square().mean().backward()
        res.append((y.detach(), xi.grad))
    assert torch.equal(res[0][0], res[1][0]) and torch.equal(res[0][1], res[1][1])
    _assert_same(plain, ckpt)
    torch._dynamo.reset()
    full = torch.compile(lambda t: te.checkpoint(ckpt, t, use_reentrant=reentrant), backend="eager", fullgraph=True)
    with pytest.raises(Exception, match="te.checkpoint runs eagerly under torch.compile"):
        with te.autocast(recipe=te.recipe.DelayedScaling()):
            full(x.clone().requires_grad_(True))
    torch._dynamo.reset()


def test_warnings_point_at_the_caller():
    """The eager wrapper adds frames: TE's deprecation warning and ``distribute_saved_activations``' warning still
    name the line that called ``te.checkpoint``."""
    class Tracker:
        def get_states(self):
            return {}

        def set_states(self, states):
            pass

    layer, x = te.Linear(W, W), torch.randn(W, W, requires_grad=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        te.checkpoint(layer, False, lambda: Tracker(), None, x)
        te.checkpoint(layer, x, distribute_saved_activations=True, use_reentrant=False)
    assert [w.filename for w in caught] == [__file__, __file__]


@pytest.mark.parametrize("reentrant", [True, False])
def test_every_keyword_goes_to_the_function(reentrant):
    """TE sends every keyword it does not take to the function, in both modes.  The non-reentrant mode gave them to
    torch's checkpoint, which kept its own: ``preserve_rng_state=False`` recomputed with other dropout masks than the
    forward's (other gradients than without checkpointing, silently) and never reached the function."""
    plain, ckpt = _pair(lambda: te.Linear(W, W))
    x = torch.randn(W, W)
    res, seen = [], []
    for m, use in ((plain, False), (ckpt, True)):
        def f(t, preserve_rng_state=True, scale=1.0):
            seen.append((preserve_rng_state, scale))
            return torch.nn.functional.dropout(m(t), p=0.5) * scale
        torch.manual_seed(1)
        xi = x.clone().requires_grad_(True)
        with te.autocast(recipe=te.recipe.DelayedScaling()):
            y = (te.checkpoint(f, xi, preserve_rng_state=False, scale=3.0, use_reentrant=reentrant) if use
                 else f(xi, False, 3.0))
        y.square().mean().backward()
        res.append((y.detach(), xi.grad))
    assert torch.equal(res[0][0], res[1][0]) and torch.equal(res[0][1], res[1][1])
    _assert_same(plain, ckpt)
    assert set(seen) == {(False, 3.0)}
    # a module that takes no such keyword: Python's error, as in TE
    with pytest.raises(TypeError, match="preserve_rng_state"):
        te.checkpoint(ckpt, x.clone().requires_grad_(True), preserve_rng_state=False, use_reentrant=reentrant)
