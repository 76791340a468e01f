"""The KV cache: 2 (K and V) x kv_heads x head_dim x bytes per token and layer, sliding-window
layers capped at their window, quantized formats with the scales they keep."""

from __future__ import annotations

import math

from ..job import KV_DTYPES, Job
from ..models import Architecture, Model
from .shape import seq_for

__all__ = ["kv_cache_per_token", "kv_elem_bytes", "kv_cache_bytes"]


def kv_cache_per_token(arch: Architecture, elem_bytes: float, *, context: int) -> float:
    """KV-cache bytes of one sequence holding ``context`` tokens: 2 (K and V) * kv_heads *
    head_dim * bytes per token and layer, each sliding-window layer capped at its window
    (Mistral-7B v0.1: every layer, 4096; Gemma-2: every other layer)."""
    per_layer_tok = 2 * arch.num_kv_heads * arch.head_dim * elem_bytes
    window = arch.sliding_window
    sliding = len(arch.sliding_window_layers or ()) if window else 0
    full = arch.num_layers - sliding
    capped = min(context, window) if window else context
    return per_layer_tok * (full * context + sliding * capped)


#: KV-cache element formats: bytes per element including the scales common implementations keep.
#: fp8 (vLLM ``kv_cache_dtype="fp8"``, e4m3): one fp32 scale per layer for K and one for V --
#: 8 bytes a layer, counted. int8 (per-token, per-head asymmetric quantization, as LMDeploy's and
#: KIVI-style int8 caches keep it): an fp16 scale and an fp16 zero point per head and token, i.e.
#: 4 bytes per ``head_dim`` elements.
def kv_elem_bytes(kv_dtype: str, head_dim: int) -> float:
    base = KV_DTYPES[kv_dtype]
    if kv_dtype == "int8":
        return base + 4 / head_dim
    return float(base)


def kv_cache_bytes(model: Model, job: Job, elem_bytes: int | None = None, *,
                   kv_dtype: str | None = None, context: int | None = None) -> int:
    """KV-cache bytes of the job: ``batch`` sequences of ``context`` tokens (prompt + generated;
    default ``job.context`` or the sequence length)."""
    arch = model.architecture
    if arch is None or arch.kind != "decoder":
        return 0
    ctx = context if context is not None else (job.context or seq_for(model, job))
    eb = kv_elem_bytes(kv_dtype, arch.head_dim) if kv_dtype is not None else float(elem_bytes)
    total = kv_cache_per_token(arch, eb, context=ctx) * job.batch
    if kv_dtype == "fp8":
        total += 8 * arch.num_layers
    return math.ceil(total)

