"""TE's attention modules and transformer layer: ``DotProductAttention``, ``MultiheadAttention``,
``TransformerLayer`` (``transformer_engine/pytorch/attention/...`` and ``transformer.py`` at d0067d0).

``DotProductAttention`` computes softmax attention in plain float math (torch's
``scaled_dot_product_attention`` on the tensors' dtype), as TE's modules do outside FP8 attention.
With a recipe whose ``fp8_dpa`` is True inside ``autocast`` it runs FP8 attention through
:func:`fp8emu.torch.fp8_sdpa` (the kernel recipe ``fp8_attention_recipe``, FlashAttention-3's by
default: TE's own FP8 attention is cuDNN's, whose kernel is not modelled), forward only.

``MultiheadAttention`` projects with a ``LayerNormLinear`` (``input_layernorm=True``) or ``Linear``
into TE's fused QKV layout (``qkv_weight_interleaved``: ``[.., groups, heads/groups + 2, head_dim]``)
and back with ``Linear`` ``proj``.  ``TransformerLayer`` is TE's pre-norm encoder layer:
``x + dropout(attention(x) + proj bias)``, then ``+ dropout(mlp(x) + fc2 bias)`` (TE's
``_bias_dropout_add``: the two output biases are added after the GEMM, not in its epilogue).
Features refused by name: cross attention / ``layer_type="decoder"``, rotary embeddings, sliding
windows, ``qk_norm_type``, post-layernorm residuals, ``output_layernorm``, ``parallel_attention_mlp``,
``drop_path_rate``, other softmax types, the ``thd`` format.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..attention import fp8_sdpa
from .modules import LayerNormLinear, LayerNormMLP, Linear, check_activation, check_arguments, eager_under_compile
from .quantization import current_autocast

__all__ = ["DotProductAttention", "MultiheadAttention", "TransformerLayer"]

_MASKS = ("no_mask", "causal", "padding", "padding_causal", "arbitrary")


def _refuse(owner, **given):
    for name, (value, ok) in given.items():
        if value not in ok:
            raise ValueError(f"{owner}: {name}={value!r} is not emulated; accepted: "
                             f"{', '.join(repr(v) for v in ok)}")


class DotProductAttention(nn.Module):
    """TE's ``DotProductAttention(num_attention_heads, kv_channels, num_gqa_groups, attention_dropout,
    qkv_format="sbhd", attn_mask_type="causal", ...)``.

    ``attention_mask`` follows TE: True marks a position that is masked out.

    Examples
    --------
    >>> import torch, fp8emu.torch.te as te
    >>> dpa = te.DotProductAttention(4, 16, attention_dropout=0.0)
    >>> q = k = v = torch.randn(32, 2, 4, 16)          # [seq, batch, heads, head_dim]
    >>> out = dpa(q, k, v)
    >>> out.shape
    torch.Size([32, 2, 64])
    >>> ref = F.scaled_dot_product_attention(*(t.permute(1, 2, 0, 3) for t in (q, k, v)), is_causal=True)
    >>> torch.allclose(out, ref.permute(2, 0, 1, 3).reshape(32, 2, 64))
    True
    """

    def __init__(self, num_attention_heads, kv_channels, num_gqa_groups=None, attention_dropout=0.0,
                 qkv_format="sbhd", attn_mask_type="causal", window_size=None, bottom_right_diagonal=None,
                 sequence_parallel=False, tp_size=1, get_rng_state_tracker=None, tp_group=None, layer_number=None,
                 attention_type="self", cp_group=None, cp_global_ranks=None, cp_stream=None, cp_comm_type="p2p",
                 softmax_scale=None, softmax_type="vanilla", return_max_logit=False, name=None, *,
                 fp8_attention_recipe="fa3-fp8"):
        super().__init__()
        check_arguments("DotProductAttention", dict(tp_size=tp_size))
        _refuse("DotProductAttention", qkv_format=(qkv_format, ("sbhd", "bshd")),
                attn_mask_type=(attn_mask_type, _MASKS), window_size=(window_size, (None, (-1, -1), (-1, 0))),
                softmax_type=(softmax_type, ("vanilla",)), return_max_logit=(return_max_logit, (False,)),
                cp_group=(cp_group, (None,)))
        if isinstance(kv_channels, tuple):
            if len(set(kv_channels)) != 1:
                raise ValueError(f"DotProductAttention: kv_channels={kv_channels!r} (different key and value head "
                                 "sizes) is not emulated; accepted: one int")
            kv_channels = kv_channels[0]
        self.num_attention_heads, self.kv_channels = num_attention_heads, kv_channels
        self.num_gqa_groups = num_gqa_groups or num_attention_heads
        if num_attention_heads % self.num_gqa_groups:
            raise ValueError(f"DotProductAttention: num_attention_heads {num_attention_heads} is not a multiple "
                             f"of num_gqa_groups {self.num_gqa_groups}")
        self.attention_dropout, self.qkv_format, self.attn_mask_type = attention_dropout, qkv_format, attn_mask_type
        self.softmax_scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(kv_channels)
        self.fp8_attention_recipe = fp8_attention_recipe

    @eager_under_compile      # its FP8 attention is NumPy (fp8_sdpa): run eagerly under torch.compile
    def forward(self, query_layer=None, key_layer=None, value_layer=None, attention_mask=None, qkv_format=None,
                cu_seqlens_q=None, cu_seqlens_kv=None, cu_seqlens_q_padded=None, cu_seqlens_kv_padded=None,
                max_seqlen_q=None, max_seqlen_kv=None, attn_mask_type=None, window_size=None,
                bottom_right_diagonal=None, checkpoint_core_attention=False, core_attention_bias_type="no_bias",
                core_attention_bias=None, alibi_slopes=None, fast_zero_fill=True, inference_params=None,
                pad_between_seqs=None, fp8_output=False, bf16_backward=False, num_splits=1, score_mod=None,
                score_mod_bprop=None, score_mod_tensors=None, score_mod_bprop_tensors=None, qkv_layer=None,
                kv_layer=None, qkv_interleave_dim=-3):
        fmt = qkv_format or self.qkv_format
        mask_type = attn_mask_type or self.attn_mask_type
        _refuse("DotProductAttention", qkv_format=(fmt, ("sbhd", "bshd")), attn_mask_type=(mask_type, _MASKS),
                core_attention_bias_type=(core_attention_bias_type, ("no_bias",)),
                alibi_slopes=(alibi_slopes, (None,)), inference_params=(inference_params, (None,)),
                cu_seqlens_q=(cu_seqlens_q, (None,)), cu_seqlens_kv=(cu_seqlens_kv, (None,)),
                fp8_output=(fp8_output, (False,)), score_mod=(score_mod, (None,)), qkv_layer=(qkv_layer, (None,)),
                kv_layer=(kv_layer, (None,)), window_size=(window_size, (None, (-1, -1), (-1, 0))))
        # [s, b, h, d] or [b, s, h, d] -> [b, h, s, d]
        perm = (1, 2, 0, 3) if fmt == "sbhd" else (0, 2, 1, 3)
        q, k, v = (t.permute(*perm) for t in (query_layer, key_layer, value_layer))
        mask = None
        if mask_type in ("padding", "padding_causal", "arbitrary"):
            if attention_mask is None:
                raise ValueError(f"DotProductAttention: attn_mask_type={mask_type!r} needs attention_mask "
                                 "(True where masked out)")
            if isinstance(attention_mask, tuple):
                raise ValueError("DotProductAttention: a (query, key) mask pair is cross attention, not emulated")
            mask = ~attention_mask.to(torch.bool)
            if mask_type == "padding_causal":
                sq, sk = q.shape[-2], k.shape[-2]
                mask = mask & torch.ones(sq, sk, dtype=torch.bool).tril()
        causal = mask_type == "causal"
        st = current_autocast()
        fp8 = st is not None and st.enabled and getattr(st.recipe, "fp8_dpa", False)
        if fp8:
            if mask is not None:
                raise ValueError(f"DotProductAttention: FP8 attention ({self.fp8_attention_recipe}) takes causal or "
                                 f"no masks; got attn_mask_type={mask_type!r}")
            if self.training and self.attention_dropout:
                # fp8_sdpa has no dropout: the high-precision path drops (training mode), this one silently did not
                raise ValueError(f"DotProductAttention: FP8 attention ({self.fp8_attention_recipe}) has no dropout, "
                                 f"and attention_dropout={self.attention_dropout} in training mode would be ignored; "
                                 "call .eval() for inference (FP8 attention is forward only), or give "
                                 "attention_dropout=0.0")
            out = fp8_sdpa(self.fp8_attention_recipe)(q, k, v, is_causal=causal, scale=self.softmax_scale,
                                                      enable_gqa=k.shape[1] != q.shape[1])
        else:
            if k.shape[1] != q.shape[1]:
                k, v = (t.repeat_interleave(q.shape[1] // t.shape[1], dim=1) for t in (k, v))
            p = self.attention_dropout if self.training else 0.0
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, is_causal=causal,
                                                 scale=self.softmax_scale)
        out = out.permute(2, 0, 1, 3) if fmt == "sbhd" else out.permute(0, 2, 1, 3)
        return out.reshape(*out.shape[:2], out.shape[2] * out.shape[3])      # not -1: an empty batch or sequence


class MultiheadAttention(nn.Module):
    """TE's ``MultiheadAttention(hidden_size, num_attention_heads, kv_channels, ..., input_layernorm,
    qkv_weight_interleaved=True, return_bias=False)``: QKV projection, :class:`DotProductAttention`, ``proj``.

    Examples
    --------
    >>> import torch, fp8emu.torch.te as te
    >>> mha = te.MultiheadAttention(64, 4, input_layernorm=True, attention_dropout=0.0)
    >>> sorted(n for n, _ in mha.named_parameters())[:3]
    ['layernorm_qkv.bias', 'layernorm_qkv.layer_norm_bias', 'layernorm_qkv.layer_norm_weight']
    >>> with te.autocast(recipe=te.recipe.Float8CurrentScaling()):
    ...     mha(torch.randn(16, 2, 64)).shape
    torch.Size([16, 2, 64])
    """

    def __init__(self, hidden_size, num_attention_heads, kv_channels=None, attention_dropout=0.1,
                 layernorm_epsilon=1e-5, init_method=None, output_layer_init_method=None, layer_number=None,
                 attn_mask_type="causal", window_size=None, bottom_right_diagonal=None, tp_group=None, tp_size=1,
                 num_gqa_groups=None, fuse_wgrad_accumulation=False, get_rng_state_tracker=None,
                 sequence_parallel=False, params_dtype=None, return_bias=False, return_layernorm_output=False,
                 input_layernorm=False, attention_type="self", set_parallel_mode=False, fuse_qkv_params=False,
                 zero_centered_gamma=False, qkv_weight_interleaved=True, ub_overlap_ag=False, ub_overlap_rs=False,
                 ub_overlap_rs_dgrad=False, ub_bulk_dgrad=False, ub_bulk_wgrad=False, bias=True,
                 normalization="LayerNorm", device="cuda", qkv_format="sbhd", name=None, qk_norm_type=None,
                 qk_norm_eps=1e-6, qk_norm_before_rope=False, seq_length=None, micro_batch_size=None,
                 softmax_type="vanilla", **kwargs):
        super().__init__()
        check_arguments("MultiheadAttention", dict(tp_size=tp_size, fuse_wgrad_accumulation=fuse_wgrad_accumulation))
        _refuse("MultiheadAttention", attention_type=(attention_type, ("self",)), qk_norm_type=(qk_norm_type, (None,)),
                return_layernorm_output=(return_layernorm_output, (False,)))
        unknown = sorted(set(kwargs) - {"ub_name", "symmetric_ar_type", "cp_group", "rng_tracker_name"})
        if unknown:
            raise TypeError(f"MultiheadAttention: unexpected arguments {unknown}")
        self.hidden_size, self.num_attention_heads = hidden_size, num_attention_heads
        self.head_dim = kv_channels or hidden_size // num_attention_heads
        self.num_gqa_groups = num_gqa_groups or num_attention_heads
        self.qkv_weight_interleaved, self.input_layernorm, self.return_bias = (qkv_weight_interleaved,
                                                                               input_layernorm, return_bias)
        qkv_out = (num_attention_heads + 2 * self.num_gqa_groups) * self.head_dim
        common = dict(init_method=init_method, bias=bias, params_dtype=params_dtype)
        if input_layernorm:
            self.layernorm_qkv = LayerNormLinear(hidden_size, qkv_out, eps=layernorm_epsilon,
                                                 normalization=normalization,
                                                 zero_centered_gamma=zero_centered_gamma, **common)
        else:
            self.qkv = Linear(hidden_size, qkv_out, **common)
        self.core_attention = DotProductAttention(num_attention_heads, self.head_dim, self.num_gqa_groups,
                                                  attention_dropout, qkv_format, attn_mask_type, window_size,
                                                  softmax_type=softmax_type)
        self.proj = Linear(num_attention_heads * self.head_dim, hidden_size, return_bias=return_bias,
                           init_method=output_layer_init_method, bias=bias, params_dtype=params_dtype)

    def forward(self, hidden_states, attention_mask=None, encoder_output=None, attn_mask_type=None, window_size=None,
                is_first_microbatch=None, checkpoint_core_attention=False, inference_params=None,
                rotary_pos_emb=None, core_attention_bias_type="no_bias", core_attention_bias=None, alibi_slopes=None,
                cu_seqlens_q=None, cu_seqlens_kv=None, max_seqlen_q=None, max_seqlen_kv=None, fast_zero_fill=True,
                pad_between_seqs=None, **kwargs):
        _refuse("MultiheadAttention", rotary_pos_emb=(rotary_pos_emb, (None,)),
                encoder_output=(encoder_output, (None,)), inference_params=(inference_params, (None,)))
        proj_in = self.layernorm_qkv if self.input_layernorm else self.qkv
        mixed = proj_in(hidden_states, is_first_microbatch=is_first_microbatch)
        ng, per = self.num_gqa_groups, self.num_attention_heads // self.num_gqa_groups
        if self.qkv_weight_interleaved:        # [.., ng, np/ng + 2, hn], split along -2
            mixed = mixed.view(*mixed.shape[:-1], ng, per + 2, self.head_dim)
            q, k, v = mixed.split([per, 1, 1], dim=-2)
        else:                                  # [.., np/ng + 2, ng, hn], split along -3
            mixed = mixed.view(*mixed.shape[:-1], per + 2, ng, self.head_dim)
            q, k, v = mixed.split([per, 1, 1], dim=-3)
        # the heads counted, not -1: an empty batch or sequence was torch's "cannot reshape tensor of 0 elements
        # into shape [0, 2, -1, 16] because the unspecified dimension size -1 can be any value"
        q, k, v = (t.reshape(*t.shape[:2], t.shape[-3] * t.shape[-2], self.head_dim) for t in (q, k, v))
        ctx = self.core_attention(q, k, v, attention_mask=attention_mask, attn_mask_type=attn_mask_type,
                                  window_size=window_size, core_attention_bias_type=core_attention_bias_type,
                                  alibi_slopes=alibi_slopes, cu_seqlens_q=cu_seqlens_q, cu_seqlens_kv=cu_seqlens_kv)
        return self.proj(ctx, is_first_microbatch=is_first_microbatch)


class TransformerLayer(nn.Module):
    """TE's ``TransformerLayer(hidden_size, ffn_hidden_size, num_attention_heads, ...)``: pre-norm self
    attention and MLP (``self_attention``: :class:`MultiheadAttention` with ``input_layernorm``,
    ``layernorm_mlp``: :class:`~fp8emu.torch.te.LayerNormMLP`), TE's bias-dropout-add residuals.

    Examples
    --------
    >>> import torch, fp8emu.torch.te as te
    >>> layer = te.TransformerLayer(64, 128, 4, hidden_dropout=0.0, attention_dropout=0.0)
    >>> x = torch.randn(16, 2, 64, requires_grad=True)     # [seq, batch, hidden]
    >>> with te.autocast(recipe=te.recipe.DelayedScaling()):
    ...     y = layer(x)
    >>> y.sum().backward()
    >>> y.shape, x.grad.shape
    (torch.Size([16, 2, 64]), torch.Size([16, 2, 64]))
    """

    def __init__(self, hidden_size, ffn_hidden_size, num_attention_heads, num_gqa_groups=None,
                 layernorm_epsilon=1e-5, hidden_dropout=0.1, attention_dropout=0.1, init_method=None,
                 output_layer_init_method=None, layer_number=None, kv_channels=None, self_attn_mask_type="causal",
                 window_size=None, bottom_right_diagonal=None, enc_dec_attn_mask_type="no_mask",
                 enc_dec_bottom_right_diagonal=None, enc_dec_window_size=None, tp_group=None, tp_size=1,
                 params_dtype=None, get_rng_state_tracker=None, fuse_wgrad_accumulation=False, seq_length=None,
                 micro_batch_size=None, sequence_parallel=False, apply_residual_connection_post_layernorm=False,
                 output_layernorm=False, parallel_attention_mlp=False, layer_type="encoder", drop_path_rate=0.0,
                 set_parallel_mode=False, fuse_qkv_params=False, rotary_pos_interleaved=False,
                 zero_centered_gamma=False, qkv_weight_interleaved=True, ub_tp_comm_overlap=False,
                 ub_overlap_ag=True, ub_overlap_rs=True, ub_overlap_rs_dgrad=False, ub_bulk_dgrad=True,
                 ub_bulk_wgrad=True, bias=True, activation="gelu", activation_params=None,
                 normalization="LayerNorm", device="cuda", attn_input_format="sbhd", name=None, qk_norm_type=None,
                 qk_norm_eps=1e-6, qk_norm_before_rope=False, softmax_type="vanilla"):
        super().__init__()
        check_arguments("TransformerLayer", dict(tp_size=tp_size, fuse_wgrad_accumulation=fuse_wgrad_accumulation,
                                                 activation_params=activation_params))
        _refuse("TransformerLayer", layer_type=(layer_type, ("encoder",)),
                apply_residual_connection_post_layernorm=(apply_residual_connection_post_layernorm, (False,)),
                output_layernorm=(output_layernorm, (False,)), parallel_attention_mlp=(parallel_attention_mlp, (False,)),
                drop_path_rate=(drop_path_rate, (0.0, 0)), qk_norm_type=(qk_norm_type, (None,)))
        check_activation("TransformerLayer", activation)
        self.hidden_dropout = hidden_dropout
        common = dict(params_dtype=params_dtype, bias=bias, init_method=init_method)
        self.self_attention = MultiheadAttention(
            hidden_size, num_attention_heads, kv_channels, attention_dropout, layernorm_epsilon,
            output_layer_init_method=output_layer_init_method, attn_mask_type=self_attn_mask_type,
            window_size=window_size, num_gqa_groups=num_gqa_groups, return_bias=True, input_layernorm=True,
            zero_centered_gamma=zero_centered_gamma, qkv_weight_interleaved=qkv_weight_interleaved,
            normalization=normalization, qkv_format=attn_input_format, softmax_type=softmax_type, **common)
        self.layernorm_mlp = LayerNormMLP(hidden_size, ffn_hidden_size, eps=layernorm_epsilon, return_bias=True,
                                          normalization=normalization, activation=activation,
                                          output_layer_init_method=output_layer_init_method,
                                          zero_centered_gamma=zero_centered_gamma, **common)

    def _bias_dropout_add(self, x, bias, residual):
        if bias is not None:
            x = x + bias
        return residual + F.dropout(x, p=self.hidden_dropout, training=self.training)

    def forward(self, hidden_states, attention_mask=None, self_attn_mask_type=None, window_size=None,
                bottom_right_diagonal=None, encoder_output=None, enc_dec_attn_mask=None, enc_dec_attn_mask_type=None,
                enc_dec_window_size=None, enc_dec_bottom_right_diagonal=None, is_first_microbatch=None,
                checkpoint_core_attention=False, inference_params=None, rotary_pos_emb=None,
                core_attention_bias_type="no_bias", core_attention_bias=None, alibi_slopes=None, cu_seqlens_q=None,
                cu_seqlens_kv=None, cu_seqlens_q_padded=None, cu_seqlens_kv_padded=None, max_seqlen_q=None,
                max_seqlen_kv=None, fast_zero_fill=True, pad_between_seqs=None):
        out, bias = self.self_attention(hidden_states, attention_mask=attention_mask, attn_mask_type=self_attn_mask_type,
                                        window_size=window_size, is_first_microbatch=is_first_microbatch,
                                        inference_params=inference_params, rotary_pos_emb=rotary_pos_emb,
                                        core_attention_bias_type=core_attention_bias_type, alibi_slopes=alibi_slopes,
                                        cu_seqlens_q=cu_seqlens_q, cu_seqlens_kv=cu_seqlens_kv)
        x = self._bias_dropout_add(out, bias, hidden_states)
        mlp_out, mlp_bias = self.layernorm_mlp(x, is_first_microbatch=is_first_microbatch)
        return self._bias_dropout_add(mlp_out, mlp_bias, x)
