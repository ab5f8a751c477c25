"""FP8 attention for inference studies: a drop-in for ``torch.nn.functional.scaled_dot_product_attention``
that runs :func:`fp8emu.attention.attention` (FA3 FP8, FlashInfer, vLLM FP8 KV cache, ...)."""

from __future__ import annotations

import math

import numpy as np
import torch

from .. import attention as _attention
from .tensors import check_eager, float32_overflow

__all__ = ["fp8_sdpa"]


def fp8_sdpa(recipe="fa3-fp8"):
    """A function with ``scaled_dot_product_attention``'s signature that emulates ``recipe``.

    Forward only (inference): calling it on tensors that require grad with grad enabled is an
    error.  Query / key / value are float tensors ``(..., heads, tokens, head_dim)`` with the same
    leading dimensions; each leading index runs :func:`fp8emu.attention.attention` on its heads
    (keys and values may have fewer heads with ``enable_gqa=True``, as torch's).
    No ``attn_mask`` and no dropout (the recipes model causal and padding masks only).

    Parameters
    ----------
    recipe : str or fp8emu.attention.AttentionRecipe
        A name of ``fp8emu.attention.RECIPES`` (e.g. ``"fa3-fp8"``, ``"flashinfer-fp8-prefill"``,
        ``"vllm-fp8-kv-decode"``) or a recipe.

    Examples
    --------
    >>> import torch
    >>> sdpa = fp8_sdpa("fa3-fp8")
    >>> q = k = v = torch.randn(2, 4, 64, 32)
    >>> with torch.no_grad():
    ...     out = sdpa(q, k, v, is_causal=True)
    >>> out.shape, out.dtype
    (torch.Size([2, 4, 64, 32]), torch.float32)
    """
    rec = _attention.get_recipe(recipe)

    def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        if attn_mask is not None or dropout_p:
            raise ValueError(f"fp8 attention ({rec.name}) takes no attn_mask and no dropout; use is_causal")
        if torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value)):
            raise RuntimeError(f"fp8 attention ({rec.name}) is forward only (inference): run it under "
                               "torch.no_grad()")
        check_eager(f"fp8 attention ({rec.name})")
        lead = _check(rec.name, query, key, value, is_causal, enable_gqa)
        shape = (*lead, *query.shape[-3:-1], value.shape[-1])
        if math.prod(shape) == 0:
            # an empty batch or query sequence: nothing to attend, as torch returns it (an empty sequence reached the
            # NumPy path: torch's "cannot reshape tensor of 0 elements into shape [-1, 4, 0, 16]")
            return query.new_zeros(shape)
        q, k, v = (t.detach().to(torch.float32).reshape(-1, *t.shape[-3:]).numpy() for t in (query, key, value))
        outs = [_attention.attention(q[i], k[i], v[i], rec, causal=is_causal, softmax_scale=scale,
                                     reference=False).out for i in range(q.shape[0])]
        out = np.stack(outs).reshape(*lead, *outs[0].shape)
        return torch.from_numpy(np.ascontiguousarray(out, np.float32)).to(query.dtype)

    sdpa.recipe = rec
    return sdpa


_FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def _check(name, query, key, value, is_causal, enable_gqa):
    """The leading (batch) shape of the call, or one error naming what ``scaled_dot_product_attention``
    accepts that this call is not."""
    for what, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, torch.Tensor) or t.dtype not in _FLOATS:
            got = t.dtype if isinstance(t, torch.Tensor) else type(t).__name__
            raise TypeError(f"fp8 attention ({name}): {what} must be a float32, float64, float16 or bfloat16 "
                            f"tensor, got {got}")
        if t.ndim < 3:
            raise ValueError(f"fp8 attention ({name}): {what} must be (..., heads, tokens, head_dim), got shape "
                             f"{tuple(t.shape)}")
        if t.is_meta:       # NumPy's bare "can't convert meta device type tensor to numpy"
            raise ValueError(f"fp8 attention ({name}): {what} is a meta tensor (a shape without values); the "
                             "emulated attention computes on its values")
        # computed in float32: a finite float64 value past its range was refused as "q must be finite"
        if (over := float32_overflow(t)) is not None:
            raise ValueError(f"fp8 attention ({name}): {what} overflows float32, the type the emulated attention "
                             f"computes in: {over[0]} finite float64 value(s) round to Inf in float32 "
                             f"(largest magnitude given {over[1]:.6g}); scale it")
    for what, v in (("is_causal", is_causal), ("enable_gqa", enable_gqa)):
        if not isinstance(v, bool):
            raise TypeError(f"fp8 attention ({name}): {what} must be True or False, got {v!r}")
    lead = tuple(query.shape[:-3])
    if tuple(key.shape[:-3]) != lead or tuple(value.shape[:-3]) != lead:
        raise ValueError(f"fp8 attention ({name}): query, key and value must share their leading (batch) "
                         f"dimensions, got {tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}")
    if not enable_gqa and (key.shape[-3] != query.shape[-3] or value.shape[-3] != query.shape[-3]):
        raise ValueError(f"fp8 attention ({name}): key/value have {key.shape[-3]}/{value.shape[-3]} heads and "
                         f"query {query.shape[-3]}; pass enable_gqa=True for grouped-query attention")
    return lead
