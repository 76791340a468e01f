"""Scaled dot-product attention as CUDA runs it, for CPU (fake or real) tensors.

CUDA's ``scaled_dot_product_attention`` picks a backend; the fused ones never store the s x s
matrix. This module reproduces the choice and the *allocations* of each backend as custom ops (the
values are computed on the CPU only in ``--real`` runs, inside the op, where the recorder does not
see them; only the tensors a CUDA kernel allocates are visible):

- **flash** (fp16/bf16, no mask, head_dim <= 256 and a multiple of 8, grouped-query allowed):
  forward allocates the output (``empty_like(q)``) and an fp32 logsumexp (B, H, Sq); backward
  allocates dq, dk, dv, plus ``softmax_d`` fp32 (B, H, round128(Sq)) and ``dq_accum`` fp32
  (B, round128(Sq), H, round32(D)), and for grouped-query attention dk/dv expanded to all heads.
  Source: PyTorch ``aten/src/ATen/native/transformers/cuda/flash_attn/flash_api.cpp`` (mha_fwd,
  mha_bwd).
- **memory-efficient** (fp16/bf16/fp32, masks allowed, no grouped-query): forward allocates the
  output as (B, Sq, H, D) and, when a gradient is needed, an fp32 logsumexp padded to a multiple of
  32 queries; backward allocates dq, dk, dv and ``delta`` fp32 (B, H, Sq). Its fp32 gradient
  accumulators are not modelled.
- **math**: torch's own ``_scaled_dot_product_attention_math`` composite, which is what CUDA runs.

Selection follows ``sdp_utils.cpp``'s default priority (flash, then memory-efficient, then math).
Dropout in the fused kernels is in-kernel (a Philox seed on the host), so no mask is stored.
"""

from __future__ import annotations

import math
from collections import Counter

import torch

_OPS: dict[str, object] = {}


def _round(x: int, m: int) -> int:
    return (x + m - 1) // m * m


def _reference(q, k, v, mask, is_causal, scale):
    """Attention values (real runs only), with grouped-query heads expanded."""
    hq, hk = q.shape[-3], k.shape[-3]
    if hq != hk:
        k = k.repeat_interleave(hq // hk, dim=-3)
        v = v.repeat_interleave(hq // hk, dim=-3)
    qf, kf, vf = q.float(), k.float(), v.float()
    s = (qf @ kf.transpose(-2, -1)) * scale
    if is_causal:
        sq, sk = s.shape[-2], s.shape[-1]
        s = s.masked_fill(torch.ones(sq, sk, dtype=torch.bool).triu(1), float("-inf"))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask.float()
    p = torch.softmax(s, -1)
    return p, k, v, (p @ vf)


def _reference_grads(g, q, k, v, mask, is_causal, scale):
    p, ke, ve, o = _reference(q, k, v, mask, is_causal, scale)
    gf = g.float()
    dv = p.transpose(-2, -1) @ gf
    dp = gf @ ve.float().transpose(-2, -1)
    ds = p * (dp - (gf * o).sum(-1, keepdim=True))
    dq = (ds @ ke.float()) * scale
    dk = (ds.transpose(-2, -1) @ q.float()) * scale
    hq, hk = q.shape[-3], k.shape[-3]
    if hq != hk:
        b, _, s, d = dk.shape
        dk = dk.view(b, hk, hq // hk, s, d).sum(2)
        dv = dv.view(b, hk, hq // hk, s, dv.shape[-1]).sum(2)
    return dq, dk, dv


def ops() -> dict[str, object]:
    """Define the custom ops once (lazily: no registration at import)."""
    if not _OPS:
        _OPS.update(_define_flash())
        _OPS.update(_define_efficient())
    return _OPS


def _define_flash() -> dict[str, object]:
    """``gpuplan::flash_fwd`` / ``flash_bwd`` and the autograd rule that joins them."""

    @torch.library.custom_op("gpuplan::flash_fwd", mutates_args=())
    def flash_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool,
                  scale: float) -> tuple[torch.Tensor, torch.Tensor]:
        out = torch.empty_like(q)
        lse = torch.empty(q.shape[0], q.shape[1], q.shape[2], dtype=torch.float32)
        _, _, _, o = _reference(q, k, v, None, is_causal, scale)
        out.copy_(o)
        lse.zero_()
        return out, lse

    @flash_fwd.register_fake
    def _(q, k, v, is_causal, scale):
        return (torch.empty_like(q),
                q.new_empty((q.shape[0], q.shape[1], q.shape[2]), dtype=torch.float32))

    @torch.library.custom_op("gpuplan::flash_bwd", mutates_args=())
    def flash_bwd(g: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  out: torch.Tensor, lse: torch.Tensor, is_causal: bool, scale: float
                  ) -> list[torch.Tensor]:
        res = _flash_bwd_alloc(q, k, v, torch.empty)
        dq, dk, dv = _reference_grads(g, q, k, v, None, is_causal, scale)
        res[0].copy_(dq), res[1].copy_(dk), res[2].copy_(dv)
        for t in res[3:]:
            t.zero_()
        return res

    @flash_bwd.register_fake
    def _(g, q, k, v, out, lse, is_causal, scale):
        return _flash_bwd_alloc(q, k, v, q.new_empty)

    def flash_setup(ctx, inputs, output):
        q, k, v, is_causal, scale = inputs
        out, lse = output
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.is_causal, ctx.scale = is_causal, scale

    def flash_backward(ctx, g_out, g_lse):
        q, k, v, out, lse = ctx.saved_tensors
        res = flash_bwd(g_out, q, k, v, out, lse, ctx.is_causal, ctx.scale)
        dq, dk, dv = res[0], res[1], res[2]
        del res  # the workspaces (softmax_d, dq_accum, expanded dk/dv) die with the kernel
        return dq, dk, dv, None, None

    flash_fwd.register_autograd(flash_backward, setup_context=flash_setup)
    return {"flash_fwd": flash_fwd, "flash_bwd": flash_bwd}


def _define_efficient() -> dict[str, object]:
    """``gpuplan::efficient_fwd`` / ``efficient_bwd`` and the autograd rule that joins them."""

    @torch.library.custom_op("gpuplan::efficient_fwd", mutates_args=())
    def efficient_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      mask: torch.Tensor | None, is_causal: bool, scale: float,
                      compute_lse: bool) -> tuple[torch.Tensor, torch.Tensor]:
        out, lse = _efficient_fwd_alloc(q, v, compute_lse, torch.empty)
        _, _, _, o = _reference(q, k, v, mask, is_causal, scale)
        out.copy_(o)
        lse.zero_()
        return out, lse

    @efficient_fwd.register_fake
    def _(q, k, v, mask, is_causal, scale, compute_lse):
        return _efficient_fwd_alloc(q, v, compute_lse, q.new_empty)

    @torch.library.custom_op("gpuplan::efficient_bwd", mutates_args=())
    def efficient_bwd(g: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      mask: torch.Tensor | None, out: torch.Tensor, lse: torch.Tensor,
                      is_causal: bool, scale: float) -> list[torch.Tensor]:
        res = _efficient_bwd_alloc(q, k, v, torch.empty)
        dq, dk, dv = _reference_grads(g, q, k, v, mask, is_causal, scale)
        res[0].copy_(dq), res[1].copy_(dk), res[2].copy_(dv)
        res[3].zero_()
        return res

    @efficient_bwd.register_fake
    def _(g, q, k, v, mask, out, lse, is_causal, scale):
        return _efficient_bwd_alloc(q, k, v, q.new_empty)

    def eff_setup(ctx, inputs, output):
        q, k, v, mask, is_causal, scale, compute_lse = inputs
        out, lse = output
        ctx.save_for_backward(q, k, v, mask, out, lse)
        ctx.is_causal, ctx.scale = is_causal, scale

    def eff_backward(ctx, g_out, g_lse):
        q, k, v, mask, out, lse = ctx.saved_tensors
        res = efficient_bwd(g_out, q, k, v, mask, out, lse, ctx.is_causal, ctx.scale)
        dq, dk, dv = res[0], res[1], res[2]
        del res
        return dq, dk, dv, None, None, None, None

    efficient_fwd.register_autograd(eff_backward, setup_context=eff_setup)
    return {"efficient_fwd": efficient_fwd, "efficient_bwd": efficient_bwd}


def _flash_bwd_alloc(q, k, v, empty) -> list[torch.Tensor]:
    b, h, sq, d = q.shape
    hk, sk = k.shape[1], k.shape[2]
    sq_r = _round(sq, 128)
    res = [torch.empty_like(q), torch.empty_like(k), torch.empty_like(v),
           empty((b, h, sq_r), dtype=torch.float32),
           empty((b, sq_r, h, _round(d, 32)), dtype=torch.float32)]
    if hk != h:
        res.append(empty((b, sk, h, d), dtype=q.dtype))
        res.append(empty((b, sk, h, v.shape[-1]), dtype=q.dtype))
    return res


def _efficient_fwd_alloc(q, v, compute_lse, empty):
    b, h, sq, _ = q.shape
    out = empty((b, sq, h, v.shape[-1]), dtype=q.dtype).transpose(1, 2)
    lse = empty((b, h, _round(sq, 32) if compute_lse else 0), dtype=torch.float32)
    return out, lse


def _efficient_bwd_alloc(q, k, v, empty) -> list[torch.Tensor]:
    b, h, sq, _ = q.shape
    return [torch.empty_like(q), torch.empty_like(k), torch.empty_like(v),
            empty((b, h, sq), dtype=torch.float32)]


def choose_backend(q, k, v, attn_mask, enable_gqa: bool) -> str:
    """The backend CUDA's SDPA dispatcher would pick (sm80+, default priorities)."""
    dtypes = {q.dtype, k.dtype, v.dtype}
    d = q.shape[-1]
    same_dims = k.shape[-1] == d and v.shape[-1] == d
    gqa = q.shape[-3] != k.shape[-3]
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        return "math"
    if (len(dtypes) == 1 and dtypes <= {torch.float16, torch.bfloat16} and attn_mask is None
            and same_dims and d <= 256 and d % 8 == 0
            and (not gqa or (enable_gqa and q.shape[-3] % k.shape[-3] == 0))):
        return "flash"
    align = 4 if torch.float32 in dtypes else 8
    if (len(dtypes) == 1 and dtypes <= {torch.float16, torch.bfloat16, torch.float32}
            and not gqa and d % align == 0 and v.shape[-1] % align == 0):
        return "efficient"
    return "math"


def sdpa_kernel(counts: Counter, fake: bool):
    """A CompositeImplicitAutograd kernel for ``aten::scaled_dot_product_attention``."""
    o = ops()

    def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
             enable_gqa=False):
        backend = choose_backend(query, key, value, attn_mask, enable_gqa)
        counts[f"sdpa-cuda-backend:{backend}"] += 1
        sc = scale if scale is not None else 1.0 / math.sqrt(query.shape[-1])
        if backend == "flash":
            if is_causal and query.shape[-2] != key.shape[-2]:
                backend = "math"
            else:
                out, _ = o["flash_fwd"](query, key, value, bool(is_causal), float(sc))
                return out
        if backend == "efficient":
            mask = attn_mask
            if mask is not None and mask.dtype != torch.bool and mask.dtype != query.dtype:
                mask = mask.to(query.dtype)
            need = torch.is_grad_enabled() and any(
                t.requires_grad for t in (query, key, value))
            out, _ = o["efficient_fwd"](query, key, value, mask, bool(is_causal), float(sc),
                                        bool(need))
            return out
        return torch.ops.aten._scaled_dot_product_attention_math.default(
            query, key, value, attn_mask, dropout_p, is_causal, None, scale=scale,
            enable_gqa=enable_gqa)[0]

    return sdpa


def flop_formulas() -> dict:
    """FlopCounterMode ``custom_mapping`` entries for the emulated kernels (torch's own SDPA
    formulas: 4*b*h*sq*sk*d forward, 2.5x that backward)."""
    from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count

    ops()  # registers torch.ops.gpuplan.*

    def _expand(q, k):
        # FLOPs count every query head against the (shared) key/value heads.
        return (k[0], q[1], k[2], k[3])

    def fwd(q, k, v, *args, out_shape=None, **kwargs):
        return sdpa_flop_count(q, _expand(q, k), _expand(q, v))

    def bwd(g, q, k, v, *args, out_shape=None, **kwargs):
        return sdpa_backward_flop_count(g, q, _expand(q, k), _expand(q, v))

    # FlopCounterMode looks formulas up by overload packet.
    return {
        torch.ops.gpuplan.flash_fwd: fwd,
        torch.ops.gpuplan.efficient_fwd: fwd,
        torch.ops.gpuplan.flash_bwd: bwd,
        torch.ops.gpuplan.efficient_bwd: bwd,
    }
