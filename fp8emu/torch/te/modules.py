"""TE's layers (``Linear``, ``LayerNormLinear``, ``LayerNormMLP``, ``LayerNorm``, ``RMSNorm``) on a CPU.

Constructor arguments and forward signatures are those of ``transformer_engine.pytorch`` at
d0067d0da6cb01811b8072a7d304f0e00344ce2b; parameter names too (``weight``, ``layer_norm_weight``,
``fc1_weight``, ...), so the parameters of a TE ``state_dict`` of these modules load with
``load_state_dict(sd, strict=False)`` (not of ``TransformerLayer``: TE splits its QKV parameters into
``query_weight`` / ``key_weight`` / ``value_weight`` unless ``fuse_qkv_params``; here they are one ``weight``).
Its ``_extra_state`` (TE's FP8 metadata: delayed scaling's amax histories and scales) is not read, and the GEMM
state TE's has not (the ``fp8emu_*`` buffers: step counter, seed) starts new; ``strict=True`` is torch's error
naming both.  Inside an enabled
:func:`fp8emu.torch.te.autocast` the GEMMs are emulated (:mod:`fp8emu.torch.te.gemm`); outside, the
modules compute in high precision with torch (TE's semantics).

**Where the fused modules quantize** (checked in TE's source at that commit):

* ``LayerNormLinear`` / ``LayerNormMLP`` pass the input quantizer to the norm
  (``module/layernorm_linear.py``, ``_LayerNormLinear.forward``: ``with_quantized_norm``, false when
  the norm output is returned).  ``csrc/extensions/normalization.cpp`` (``layernorm_fwd`` /
  ``rmsnorm_fwd``) then picks FULLY_FUSED for a delayed-scaling quantizer: the kernel
  (``common/normalization/layernorm/ln_fwd_kernels.cuh``) computes in float32 and writes
  ``fp8(out * scale)``, no bfloat16 rounding in between, and records the amax of the float32 values.
  Current scaling (FUSED_NORM_AMAX_FP8) writes the bfloat16 output and its amax "on the value converted
  to output_t", then quantizes: the same as the unfused composition; MXFP8, block FP8 and NVFP4 with
  RHT take UNFUSED (bfloat16 norm output, then the quantizer).  So only delayed scaling differs.
* ``LayerNormMLP`` (``module/layernorm_mlp.py``, ``_LayerNormMLP.forward``): FC1's GEMM adds its
  bias in the epilogue and writes bfloat16 (with FP8 on, ``bias_gelu_fusion`` is asserted off and
  ``gemm_gelu_fusion`` is off unless asked), then ``activation_func(fc1_out, fc2_input_quantizer)``.
  ``csrc/extensions/activation.cpp`` (``activation_helper``) runs FULLY_FUSED for delayed scaling:
  ``common/cast/fp8/quantize_fp8.cuh`` / ``gated_fp8.cuh`` compute the activation in float32 and write
  ``fp8(act * scale)`` directly; for MXFP8 also FULLY_FUSED, but ``quantize_mxfp8.cuh`` /
  ``gated_mxfp8.cuh`` first "downcast to IType (BF16/FP16), then upcast" (bfloat16 rounding, as unfused);
  current scaling and NVFP4 compute into a bfloat16 tensor and quantize it; block FP8 calls
  ``tex.quantize`` on the bfloat16 activation.  So again only delayed scaling goes straight to FP8.
* Backward of ``LayerNormMLP``: for delayed scaling and MXFP8 with ``gelu``, ``qgelu``, ``relu``,
  ``srelu``, ``silu``, TE fuses dbias + dactivation + quantize (``tex.dbias_d*``): FC1's output
  gradient goes from float32 straight to FP8 (delayed; MXFP8's kernel again rounds to bfloat16
  first); other activations and recipes compute the bfloat16 dactivation, then quantize.

Emulated here: the norm in float32 from the bfloat16 input and gamma / beta (the stack's activation
dtype), the activation in float32 from FC1's bfloat16 output, each rounded to bfloat16 before its
quantizer unless TE writes it straight to FP8; derivatives of the norm and activation are torch's
autograd in float32.  Not bit-exact to TE's kernels: the norm's reductions and the activation's
``tanhf`` / ``expf`` are torch's.

**Arguments**: those that only matter across processes or for memory and speed (``tp_group``,
``sequence_parallel``, ``parallel_mode``, ``ub_*``, ``symmetric_ar_type``, ``get_rng_state_tracker``,
``checkpoint``, ``seq_length``, ``micro_batch_size``, ``name``, ``device``: parameters are made on the
CPU) are accepted and ignored; ``tp_size`` must be 1.  Those that would change the numerics or the
parameters in ways not emulated (``parameters_split``, ``fuse_wgrad_accumulation``,
``delay_wgrad_compute``, ``save_original_input``, ``activation_params``, ``fp8_output``,
``fp8_grad``) are refused by name unless they have TE's default value.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn

from .gemm import (
    GemmPlan, QuantGemm, check_fits_float32, check_input, primary_key, quantized_linear, recompute_scope,
    round_to_stack,
)
from .quantization import current_autocast, current_model_init

__all__ = ["Linear", "LayerNormLinear", "LayerNormMLP", "LayerNorm", "RMSNorm", "ACTIVATIONS", "FUSED_DACT",
           "refresh_primary_weights"]

#: TE's activations of ``LayerNormMLP`` / ``TransformerLayer`` (``_get_act_func_supported_list``);
#: gated ones (two halves, TE applies the function to the first) double FC1's outputs.
ACTIVATIONS = ("gelu", "geglu", "glu", "qgelu", "qgeglu", "relu", "reglu", "srelu", "sreglu", "silu", "swiglu")
#: Activations whose backward TE fuses with dbias and the FP8 quantizer for delayed scaling and MXFP8.
FUSED_DACT = ("gelu", "qgelu", "relu", "srelu", "silu")

_IGNORED = ("sequence_parallel", "tp_group", "parallel_mode", "get_rng_state_tracker", "rng_tracker_name",
            "ub_overlap_ag", "ub_overlap_rs", "ub_overlap_rs_dgrad", "ub_bulk_dgrad", "ub_bulk_wgrad", "ub_name",
            "symmetric_ar_type", "name", "device", "checkpoint", "seq_length", "micro_batch_size",
            "set_parallel_mode", "return_layernorm_output_gathered")
_REFUSED = {"tp_size": (1, "tensor parallelism splits the layer"),
            "parameters_split": (None, "split parameters"),
            "fuse_wgrad_accumulation": (False, "Megatron's main_grad accumulation"),
            "delay_wgrad_compute": (False, "deferred wgrad"),
            "save_original_input": (False, "re-quantized backward input"),
            "activation_params": (None, "clamped activations")}


def eager_under_compile(forward):
    """``forward`` run as it runs eagerly when ``torch.compile`` meets it (a graph break around the module).

    Dynamo cannot trace the emulated GEMMs (NumPy calls, recipe objects) nor guard on the autocast state (a
    ``contextvars.ContextVar``): a compiled model's first FP8 call raised its internal "NotImplementedError:
    argument of type: <class 'type'>".  Run eagerly, the module gives the eager bits, forward and backward.

    The reason is what ``fullgraph=True`` reports: without it Dynamo's "(reason: None)" came with its generic hint
    "Remove the `torch.compiler.disable` call", which names fp8emu's code, not what the user can do."""
    return torch.compiler.disable(forward, reason=(
        "fp8emu.torch.te's modules run eagerly under torch.compile (their emulated GEMMs are NumPy calls, a graph "
        "break): compile without fullgraph=True, or emulate torch.nn.Linear layers with fp8emu.torch.emulate, which "
        "compile to one custom op"))


def replayed_in_recompute(forward):
    """``forward`` of a module with GEMMs, its GEMM state recorded in a :func:`fp8emu.torch.te.checkpoint`
    segment's forward and replayed in its recompute (:func:`fp8emu.torch.te.gemm.recompute_scope`)."""
    @functools.wraps(forward)
    def run(self, *args, **kwargs):
        with recompute_scope(self, [getattr(self, f"fp8emu_{n}") for n in self._gemm_names]):
            return forward(self, *args, **kwargs)
    return run


def check_arguments(owner: str, args: dict) -> None:
    """Refuse, by name, an argument whose non-default value changes what is computed in a way not emulated.

    Examples
    --------
    >>> check_arguments("Linear", {"tp_size": 2})
    Traceback (most recent call last):
    ...
    ValueError: Linear: tp_size=2 is not emulated (tensor parallelism splits the layer); accepted: 1
    """
    for name, value in args.items():
        if name in _REFUSED and value != _REFUSED[name][0]:
            default, why = _REFUSED[name]
            raise ValueError(f"{owner}: {name}={value!r} is not emulated ({why}); accepted: {default!r}")


def _activation(name, x):
    """TE's activation in float32 (``common/util/math.h``; gated: the function of the first half times the second)."""
    if name in ("geglu", "glu", "qgeglu", "reglu", "sreglu", "swiglu"):
        a, b = x.chunk(2, dim=-1)
        base = {"geglu": "gelu", "glu": "sigmoid", "qgeglu": "qgelu", "reglu": "relu", "sreglu": "srelu",
                "swiglu": "silu"}[name]
        return _activation(base, a) * b
    if name == "gelu":       # TE's tanh form: x * (0.5 + 0.5 * tanh(x * (0.79788456 + 0.03567741 * x * x)))
        return x * (0.5 + 0.5 * torch.tanh(x * (0.79788456 + 0.03567741 * x * x)))
    if name == "sigmoid":
        return torch.sigmoid(x)
    if name == "qgelu":
        return x * torch.sigmoid(1.702 * x)
    if name == "relu":
        return torch.relu(x)
    if name == "srelu":
        return torch.relu(x) ** 2
    return x * torch.sigmoid(x)       # silu


def _norm(x, weight, bias, eps, normalization, zero_centered_gamma):
    g = weight + 1 if zero_centered_gamma else weight
    if normalization == "LayerNorm":
        return F.layer_norm(x, (x.shape[-1],), g, bias, eps)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g


def _check_normalization(owner, normalization):
    if normalization not in ("LayerNorm", "RMSNorm"):
        raise ValueError(f"{owner}: normalization must be 'LayerNorm' or 'RMSNorm', got {normalization!r}")


def check_activation(owner, activation):
    if activation not in ACTIVATIONS:
        raise ValueError(f"{owner}: activation {activation!r} is not emulated; accepted: {', '.join(ACTIVATIONS)}")


def _amp_input(inp):
    """The FP8 path's input in ``torch.autocast``'s dtype where it is on (TE's ``set_activation_dtype``: "native AMP
    gets highest priority"; the activations, the output and the norm output returned are in it).  Outside
    ``te.autocast`` torch's autocast casts ``F.linear`` itself; inside, the output was the input's float32 where the
    high-precision path and TE give bfloat16.  float64 is left as torch's autocast leaves it."""
    if not isinstance(inp, torch.Tensor) or not inp.is_floating_point() or inp.dtype == torch.float64:
        return inp
    dev = inp.device.type
    if dev != "meta" and torch.is_autocast_enabled(dev):
        return inp.to(torch.get_autocast_dtype(dev))
    return inp


def _init_weight(out_features, in_features, dtype, init_method):
    w = nn.Parameter(torch.empty(out_features, in_features, dtype=dtype))
    with torch.no_grad():
        (init_method or (lambda t: nn.init.normal_(t, 0.0, 0.023)))(w)    # TE's default: N(0, 0.023)
    return w


class _TEModule(nn.Module):
    """What every TE module here shares: the autocast state it runs under and its FP8 primary weights."""

    def _setup_gemms(self, *names):
        self._gemm_names = names
        init = current_model_init()
        for n in names:
            g = QuantGemm(f"{type(self).__name__}.{n}")
            if init is not None and init.enabled:
                g.primary = (init.training, init.stack)
            setattr(self, f"fp8emu_{n}", g)

    @property
    def primary_weights(self) -> bool:
        """Whether the weights are FP8 / FP4 primary weights (built inside ``quantized_model_init``)."""
        return any(getattr(self, f"fp8emu_{n}").primary is not None for n in self._gemm_names)

    def _refuse_meta(self):
        """One error naming the parameters and GEMM state that are meta tensors (a model built under
        ``torch.device("meta")`` and called before ``to_empty``): the FP8 path read them with NumPy or ``int()``,
        torch's bare "Tensor.item() cannot be called on meta tensors" or "Tensor on device meta is not on the
        expected device cpu!", naming no module."""
        meta = [n for n, t in (*self.named_parameters(), *self.named_buffers()) if t.is_meta]
        if meta:
            are = "are meta tensors" if len(meta) > 1 else "is a meta tensor"
            raise ValueError(f"{type(self).__name__}: its {', '.join(meta)} {are} (a shape without values): a model "
                             "built on the meta device needs model.to_empty(device=...) and its weights loaded "
                             "(load_state_dict) or initialized before it is called")

    def _check_dtypes(self, inp):
        """TE's ``set_activation_dtype`` (``module/base.py``, every GEMM module's ``prepare_forward``): outside
        ``torch.autocast`` the input's dtype must be each parameter's ("Data types for parameters must match when
        outside of autocasted region").  Checked on the high-precision path, where a float32 input to bfloat16
        parameters was torch's bare "mat1 and mat2 must have the same dtype" / "mixed dtype (CPU)", naming no
        module.  The FP8 path takes such inputs (its output in the input's dtype), as it did before; TE refuses
        them there too."""
        if not isinstance(inp, torch.Tensor) or not inp.is_floating_point():
            return                          # check_input / torch name what is wrong with it
        dev = inp.device.type
        if dev != "meta" and torch.is_autocast_enabled(dev):
            return                          # TE: "native AMP gets highest priority", the input is cast
        for name, p in self.named_parameters():
            if p.dtype != inp.dtype:
                raise TypeError(f"{type(self).__name__}: the input is {inp.dtype} and its parameter {name!r} is "
                                f"{p.dtype}; outside torch.autocast they must match (Transformer Engine asserts "
                                f"the same); cast the input (x.to({p.dtype})) or the module (module.to"
                                f"({inp.dtype})), or run it under torch.autocast")

    def _mode(self, inp):
        """(recipe, stack) to run FP8 with, or None for high precision (where ``inp``'s dtype must be the
        parameters', :meth:`_check_dtypes`)."""
        st = current_autocast()
        if st is None or not st.enabled:
            self._check_dtypes(inp)
            return None
        self._refuse_meta()
        for n in self._gemm_names:
            p = getattr(self, f"fp8emu_{n}").primary
            if p is not None and p[0] != st.training:
                raise ValueError(f"{type(self).__name__}: its weights were made FP8 primary weights with "
                                 f"{p[0].name!r} (quantized_model_init); autocast asks for {st.training.name!r}")
        return st.training, st.stack

    def _plan(self, n, weight, mode, is_first_microbatch, **rounding):
        g = getattr(self, f"fp8emu_{n}")
        if g.primary is not None:
            key = primary_key(weight)      # re-quantized when the master weight's values changed
        elif is_first_microbatch is None:
            key, g._mb_key = None, None
        elif is_first_microbatch or g._mb_key is None or g._mb_key[2] != mode[0]:
            # TE caches the FP8 weight from here.  The copy is the recipe's: a later micro-batch under another
            # recipe (a module reused in a second autocast block) computed with the first recipe's codes and
            # scales (te-block's GEMM with te-current's per-tensor copy), silently; it quantizes its own
            key = g._mb_key = ("microbatch", int(g.fp8emu_step), mode[0])
        else:
            key = g._mb_key
        return GemmPlan(g, *mode, weight_key=key, name=g.gemm_name, **rounding)

    def _hp_weight(self, n, weight):
        """The weight a high-precision forward uses: an FP8 primary weight's dequantized copy (its
        gradient still goes to the master weight)."""
        g = getattr(self, f"fp8emu_{n}")
        if g.primary is None:
            return weight
        self._refuse_meta()         # the quantized copy is made from the master weight's values
        return weight + (g.dequantized_weight(weight) - weight).detach()


def refresh_primary_weights(model: nn.Module) -> int:
    """Re-quantize every FP8 primary weight of ``model`` from its master weight now (as Megatron-LM's
    ``cast_master_weights_to_fp8`` after an optimizer step); returns how many were refreshed.  Not
    needed in a training loop: a forward re-quantizes a weight whose master changed.

    Examples
    --------
    >>> import fp8emu.torch.te as te
    >>> with te.quantized_model_init(recipe=te.recipe.Float8CurrentScaling()):
    ...     model = te.LayerNormMLP(32, 64)
    >>> refresh_primary_weights(model)
    2
    """
    count = 0
    for mod in model.modules():
        if isinstance(mod, _TEModule):
            for n in mod._gemm_names:
                g = getattr(mod, f"fp8emu_{n}")
                if g.primary is not None:
                    mod._refuse_meta()      # torch's bare "Tensor.item() cannot be called on meta tensors"
                    w = getattr(mod, "weight" if n == "gemm" else f"{n}_weight")
                    g._weight_copy = None
                    g.cached_weight(g.primary[0], w, int(g.fp8emu_step), primary_key(w))
                    count += 1
    return count


class Linear(_TEModule):
    """TE's ``Linear(in_features, out_features, ...)``: ``y = x W^T + b``, FP8 inside ``autocast``.

    Examples
    --------
    >>> import fp8emu.torch.te as te
    >>> layer = te.Linear(64, 32, params_dtype=torch.float32)
    >>> with te.autocast(recipe=te.recipe.DelayedScaling()):
    ...     y = layer(torch.randn(16, 64))
    >>> y.shape, sorted(n for n, _ in layer.named_parameters())
    (torch.Size([16, 32]), ['bias', 'weight'])
    """

    def __init__(self, in_features, out_features, sequence_parallel=False, fuse_wgrad_accumulation=False,
                 tp_group=None, tp_size=1, get_rng_state_tracker=None, rng_tracker_name=None, init_method=None,
                 bias=True, return_bias=False, params_dtype=None, parallel_mode=None, parameters_split=None,
                 device="cuda", ub_overlap_ag=False, ub_overlap_rs=False, ub_overlap_rs_dgrad=False,
                 ub_bulk_dgrad=False, ub_bulk_wgrad=False, ub_name=None, delay_wgrad_compute=False,
                 symmetric_ar_type=None, save_original_input=False, name=None):
        super().__init__()
        check_arguments("Linear", dict(tp_size=tp_size, parameters_split=parameters_split,
                                       fuse_wgrad_accumulation=fuse_wgrad_accumulation,
                                       delay_wgrad_compute=delay_wgrad_compute,
                                       save_original_input=save_original_input))
        dtype = params_dtype or torch.get_default_dtype()
        self.in_features, self.out_features, self.return_bias = in_features, out_features, return_bias
        self.weight = _init_weight(out_features, in_features, dtype, init_method)
        self.bias = nn.Parameter(torch.zeros(out_features, dtype=dtype)) if bias else None
        self._setup_gemms("gemm")

    @eager_under_compile
    @replayed_in_recompute
    def forward(self, inp, is_first_microbatch=None, fp8_output=False, fp8_grad=False):
        if fp8_output or fp8_grad:
            raise ValueError("Linear: fp8_output / fp8_grad (FP8 tensors handed to the next module) are not "
                             "emulated; accepted: False")
        mode = self._mode(inp)
        gemm_bias = None if self.return_bias else self.bias
        if mode is None:
            out = F.linear(inp, self._hp_weight("gemm", self.weight), gemm_bias)
        else:
            out = quantized_linear(_amp_input(inp), self.weight, gemm_bias,
                                   self._plan("gemm", self.weight, mode, is_first_microbatch))
        return (out, self.bias) if self.return_bias else out


class _Norm(_TEModule):
    def __init__(self, normalization, normalized_shape=None, eps=1e-5, sequence_parallel=None, params_dtype=None,
                 zero_centered_gamma=False, hidden_size=None, **kwargs):
        super().__init__()
        size = normalized_shape if normalized_shape is not None else hidden_size
        if size is None:
            raise ValueError(f"{normalization}: normalized_shape (or hidden_size) is required")
        unknown = sorted(set(kwargs) - {"device"})
        if unknown:
            raise TypeError(f"{normalization}: unexpected arguments {unknown}; accepted: normalized_shape, eps, "
                            "sequence_parallel, params_dtype, zero_centered_gamma, hidden_size, device")
        dtype = params_dtype or torch.get_default_dtype()
        self.normalization, self.eps, self.zero_centered_gamma = normalization, eps, zero_centered_gamma
        self.weight = nn.Parameter((torch.zeros if zero_centered_gamma else torch.ones)(size, dtype=dtype))
        self.bias = nn.Parameter(torch.zeros(size, dtype=dtype)) if normalization == "LayerNorm" else None
        self._gemm_names = ()

    @eager_under_compile
    def forward(self, inp):
        st = current_autocast()
        if st is None or not st.enabled:
            return _norm(inp, self.weight, self.bias, self.eps, self.normalization, self.zero_centered_gamma)
        # inside FP8 the activations are the stack's dtype: TE's kernel reads bf16 input and parameters,
        # computes in float32 and writes a bf16 output (what a following te.Linear quantizes)
        self._refuse_meta()
        check_input(type(self).__name__, inp, self.weight.shape[-1])
        for what, t in (("its weight", self.weight), ("its bias", self.bias)):
            check_fits_float32(type(self).__name__, what, t)      # the kernel reads them as float32 (bfloat16)
        S = st.stack
        x, g = (round_to_stack(t.to(torch.float32), S) for t in (inp, self.weight))
        b = None if self.bias is None else round_to_stack(self.bias.to(torch.float32), S)
        out = _norm(x, g, b, self.eps, self.normalization, self.zero_centered_gamma)
        return round_to_stack(out, S).to(inp.dtype)


class LayerNorm(_Norm):
    """TE's ``LayerNorm(normalized_shape, eps=1e-5, ..., zero_centered_gamma=False)``.

    Inside an enabled ``autocast`` on a bfloat16 stack it reads its input and parameters as bfloat16,
    computes in float32 and returns bfloat16 values (TE's kernel on the bf16 activations a GPU run has);
    outside, plain torch math in the tensors' dtype.  Same for :class:`RMSNorm`.

    Examples
    --------
    >>> import fp8emu.torch.te as te
    >>> te.LayerNorm(8)(torch.arange(8.0).reshape(1, 8)).mean().abs().item() < 1e-6
    True
    """

    def __init__(self, normalized_shape=None, eps=1e-5, sequence_parallel=None, params_dtype=None,
                 zero_centered_gamma=False, hidden_size=None, **kwargs):
        super().__init__("LayerNorm", normalized_shape, eps, sequence_parallel, params_dtype, zero_centered_gamma,
                         hidden_size, **kwargs)


class RMSNorm(_Norm):
    """TE's ``RMSNorm(normalized_shape, eps=1e-5, ..., zero_centered_gamma=False)``.

    Examples
    --------
    >>> import fp8emu.torch.te as te
    >>> te.RMSNorm(4, eps=0.0)(torch.full((1, 4), 2.0)).tolist()
    [[1.0, 1.0, 1.0, 1.0]]
    """

    def __init__(self, normalized_shape=None, eps=1e-5, sequence_parallel=None, params_dtype=None,
                 zero_centered_gamma=False, hidden_size=None, **kwargs):
        super().__init__("RMSNorm", normalized_shape, eps, sequence_parallel, params_dtype, zero_centered_gamma,
                         hidden_size, **kwargs)


class _NormGemm(_TEModule):
    """The norm of a fused module: its parameters and how its output reaches the first GEMM."""

    def _make_norm(self, size, eps, normalization, zero_centered_gamma, dtype):
        self.eps, self.normalization, self.zero_centered_gamma = eps, normalization, zero_centered_gamma
        self.layer_norm_weight = nn.Parameter((torch.zeros if zero_centered_gamma else torch.ones)(size, dtype=dtype))
        self.layer_norm_bias = (nn.Parameter(torch.zeros(size, dtype=dtype)) if normalization == "LayerNorm"
                                else None)

    def _norm_out(self, inp, mode):
        """The norm's output: high precision (``mode`` None), else float32 from the stack-dtype input and
        parameters (TE casts them to the activation dtype and computes in float32)."""
        if mode is None:
            return _norm(inp, self.layer_norm_weight, self.layer_norm_bias, self.eps, self.normalization,
                         self.zero_centered_gamma)
        check_input(type(self).__name__, inp, self.layer_norm_weight.shape[-1])
        for what, t in (("its layer_norm_weight", self.layer_norm_weight),
                        ("its layer_norm_bias", self.layer_norm_bias)):
            check_fits_float32(type(self).__name__, what, t)      # the norm computes in float32 (bfloat16 gamma)
        S = mode[1]
        x = round_to_stack(inp.to(torch.float32), S)
        g = round_to_stack(self.layer_norm_weight.to(torch.float32), S)
        b = None if self.layer_norm_bias is None else round_to_stack(self.layer_norm_bias.to(torch.float32), S)
        return _norm(x, g, b, self.eps, self.normalization, self.zero_centered_gamma)


class LayerNormLinear(_NormGemm):
    """TE's ``LayerNormLinear(in_features, out_features, eps, ..., normalization, return_layernorm_output)``.

    With delayed scaling inside ``autocast`` the norm's float32 output is quantized straight to FP8
    (TE's fused norm kernel); otherwise it is rounded to the stack's dtype first (module docstring).

    Examples
    --------
    >>> import fp8emu.torch.te as te
    >>> layer = te.LayerNormLinear(64, 32, return_layernorm_output=True)
    >>> with te.autocast(recipe=te.recipe.DelayedScaling()):
    ...     y, ln_out = layer(torch.randn(16, 64))
    >>> y.shape, ln_out.shape
    (torch.Size([16, 32]), torch.Size([16, 64]))
    """

    def __init__(self, in_features, out_features, eps=1e-5, sequence_parallel=False, fuse_wgrad_accumulation=False,
                 tp_group=None, tp_size=1, get_rng_state_tracker=None, init_method=None, bias=True,
                 normalization="LayerNorm", return_bias=False, params_dtype=None, parallel_mode=None,
                 return_layernorm_output=False, return_layernorm_output_gathered=False, parameters_split=None,
                 zero_centered_gamma=False, device="cuda", ub_overlap_ag=False, ub_overlap_rs=False,
                 ub_overlap_rs_dgrad=False, ub_bulk_wgrad=False, ub_bulk_dgrad=False, ub_name=None,
                 delay_wgrad_compute=False, symmetric_ar_type=None, name=None):
        super().__init__()
        check_arguments("LayerNormLinear", dict(tp_size=tp_size, parameters_split=parameters_split,
                                                fuse_wgrad_accumulation=fuse_wgrad_accumulation,
                                                delay_wgrad_compute=delay_wgrad_compute))
        _check_normalization("LayerNormLinear", normalization)
        dtype = params_dtype or torch.get_default_dtype()
        self.in_features, self.out_features, self.return_bias = in_features, out_features, return_bias
        self.return_layernorm_output = return_layernorm_output or return_layernorm_output_gathered
        self._make_norm(in_features, eps, normalization, zero_centered_gamma, dtype)
        self.weight = _init_weight(out_features, in_features, dtype, init_method)
        self.bias = nn.Parameter(torch.zeros(out_features, dtype=dtype)) if bias else None
        self._setup_gemms("gemm")

    @eager_under_compile
    @replayed_in_recompute
    def forward(self, inp, is_first_microbatch=None, fp8_output=False, fp8_grad=False, *, fused=None):
        """``fused``: None (TE's choice), or False to round the norm output before its quantizer
        whatever the recipe (the unfused composition, for comparisons)."""
        if fp8_output or fp8_grad:
            raise ValueError("LayerNormLinear: fp8_output / fp8_grad are not emulated; accepted: False")
        mode = self._mode(inp)
        if mode is not None:
            inp = _amp_input(inp)
        ln = self._norm_out(inp, mode)
        gemm_bias = None if self.return_bias else self.bias
        if mode is None:
            out = F.linear(ln, self._hp_weight("gemm", self.weight), gemm_bias)
        else:
            # TE's with_quantized_norm: off when the norm output is returned; FULLY_FUSED only for delayed scaling
            straight = mode[0].delayed() and not self.return_layernorm_output and fused is not False
            out = quantized_linear(ln, self.weight, gemm_bias,
                                   self._plan("gemm", self.weight, mode, is_first_microbatch, round_x=not straight)
                                   ).to(inp.dtype)
            ln = round_to_stack(ln, mode[1]).to(inp.dtype)
        outs = (out,) + ((self.bias,) if self.return_bias else ()) + ((ln,) if self.return_layernorm_output else ())
        return outs[0] if len(outs) == 1 else outs


class LayerNormMLP(_NormGemm):
    """TE's ``LayerNormMLP(hidden_size, ffn_hidden_size, eps, ..., activation="gelu", normalization)``:
    norm, FC1 (+ bias), activation, FC2 (+ bias).

    Inside ``autocast`` the quantization points are TE's (module docstring): delayed scaling writes the
    norm output, the activation output and (for :data:`FUSED_DACT` activations) FC1's output gradient
    straight from float32 to FP8; the other recipes round them to the stack's dtype first.

    Examples
    --------
    >>> import fp8emu.torch.te as te
    >>> mlp = te.LayerNormMLP(32, 64, activation="swiglu")
    >>> mlp.fc1_weight.shape, mlp.fc2_weight.shape
    (torch.Size([128, 32]), torch.Size([32, 64]))
    >>> with te.autocast(recipe=te.recipe.MXFP8BlockScaling(), gpu="b200"):
    ...     mlp(torch.randn(32, 32)).shape
    torch.Size([32, 32])
    """

    def __init__(self, hidden_size, ffn_hidden_size, eps=1e-5, sequence_parallel=False, return_bias=False,
                 get_rng_state_tracker=None, tp_group=None, tp_size=1, init_method=None, bias=True,
                 normalization="LayerNorm", activation="gelu", activation_params=None, output_layer_init_method=None,
                 fuse_wgrad_accumulation=False, params_dtype=None, return_layernorm_output=False,
                 return_layernorm_output_gathered=False, seq_length=None, micro_batch_size=None,
                 set_parallel_mode=False, zero_centered_gamma=False, device="cuda", ub_overlap_ag=False, name=None,
                 ub_overlap_rs=False, ub_overlap_rs_dgrad=False, ub_bulk_dgrad=False, ub_bulk_wgrad=False,
                 delay_wgrad_compute=False, symmetric_ar_type=None, checkpoint=False):
        super().__init__()
        check_arguments("LayerNormMLP", dict(tp_size=tp_size, fuse_wgrad_accumulation=fuse_wgrad_accumulation,
                                             delay_wgrad_compute=delay_wgrad_compute,
                                             activation_params=activation_params))
        _check_normalization("LayerNormMLP", normalization)
        check_activation("LayerNormMLP", activation)
        dtype = params_dtype or torch.get_default_dtype()
        self.hidden_size, self.ffn_hidden_size, self.activation = hidden_size, ffn_hidden_size, activation
        self.return_bias = return_bias
        self.return_layernorm_output = return_layernorm_output or return_layernorm_output_gathered
        fc1_out = 2 * ffn_hidden_size if activation.endswith("glu") else ffn_hidden_size
        self._make_norm(hidden_size, eps, normalization, zero_centered_gamma, dtype)
        self.fc1_weight = _init_weight(fc1_out, hidden_size, dtype, init_method)
        self.fc1_bias = nn.Parameter(torch.zeros(fc1_out, dtype=dtype)) if bias else None
        self.fc2_weight = _init_weight(hidden_size, ffn_hidden_size, dtype, output_layer_init_method or init_method)
        self.fc2_bias = nn.Parameter(torch.zeros(hidden_size, dtype=dtype)) if bias else None
        self._setup_gemms("fc1", "fc2")

    @eager_under_compile
    @replayed_in_recompute
    def forward(self, inp, is_first_microbatch=None, *, fused=None):
        """``fused``: None (TE's choice), or False to round every tensor before its quantizer (unfused)."""
        mode = self._mode(inp)
        if mode is not None:
            inp = _amp_input(inp)
        ln = self._norm_out(inp, mode)
        fc2_bias = None if self.return_bias else self.fc2_bias
        if mode is None:
            h = F.linear(ln, self._hp_weight("fc1", self.fc1_weight), self.fc1_bias)
            out = F.linear(_activation(self.activation, h), self._hp_weight("fc2", self.fc2_weight), fc2_bias)
        else:
            R, S = mode
            straight = R.delayed() and fused is not False
            fc1 = quantized_linear(ln, self.fc1_weight, self.fc1_bias, self._plan(
                "fc1", self.fc1_weight, mode, is_first_microbatch,
                round_x=not (straight and not self.return_layernorm_output),
                round_dy=not (straight and self.activation in FUSED_DACT)))
            act = _activation(self.activation, fc1.to(torch.float32))
            out = quantized_linear(act, self.fc2_weight, fc2_bias, self._plan(
                "fc2", self.fc2_weight, mode, is_first_microbatch, round_x=not straight)).to(inp.dtype)
            ln = round_to_stack(ln, S).to(inp.dtype)
        outs = (out,) + ((self.fc2_bias,) if self.return_bias else ()) + ((ln,) if self.return_layernorm_output else ())
        return outs[0] if len(outs) == 1 else outs
