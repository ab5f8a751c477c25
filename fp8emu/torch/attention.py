"""FP8 attention for inference studies: a drop-in for ``torch.nn.functional.scaled_dot_product_attention``
that runs :func:`fp8emu.attention.attention` (FA3 FP8, FlashInfer, vLLM FP8 KV cache, ...)."""

from __future__ import annotations

import numpy as np
import torch

from .. import attention as _attention

__all__ = ["fp8_sdpa"]


def fp8_sdpa(recipe="fa3-fp8"):
    """A function with ``scaled_dot_product_attention``'s signature that emulates ``recipe``.

    Forward only (inference): calling it on tensors that require grad with grad enabled is an
    error.  Query / key / value are ``(..., heads, tokens, head_dim)``; each leading index runs
    :func:`fp8emu.attention.attention` on its heads (keys and values may have fewer heads, GQA).
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
        lead = query.shape[:-3]
        q, k, v = (t.detach().to(torch.float32).reshape(-1, *t.shape[-3:]).numpy() for t in (query, key, value))
        outs = [_attention.attention(q[i], k[i], v[i], rec, causal=bool(is_causal), softmax_scale=scale,
                                     reference=False).out for i in range(q.shape[0])]
        out = np.stack(outs).reshape(*lead, *outs[0].shape)
        return torch.from_numpy(np.ascontiguousarray(out, np.float32)).to(query.dtype)

    sdpa.recipe = rec
    return sdpa
