"""The KV cache: 2 (K and V) x kv_heads x head_dim x bytes per token and layer, sliding-window
layers capped at their window, quantized formats with the scales they keep."""

from __future__ import annotations

import math

from ..engines.budget import BUDGET_RULES, budget_rule
from ..engines.profiles import get_engine
from ..job import KV_DTYPES, Job
from ..models import Architecture, Model
from .shape import seq_for

__all__ = ["kv_cache_per_token", "kv_elem_bytes", "kv_cache_bytes"]


def kv_cache_per_token(arch: Architecture, elem_bytes: float, *, context: int,
                       sliding_held: str = "window", block: int = 1) -> float:
    """KV-cache bytes of one sequence holding ``context`` tokens: per token and layer 2 (K and
    V) * kv_heads * head_dim * bytes (MLA: the latent and the rotary key,
    ``kv_lora_rank + qk_rope_head_dim``), each sliding-window layer (Mistral-7B v0.1: every
    layer, 4096; Gemma-2: every other; Gemma 3: five of six; gpt-oss: every other, 128) and each
    chunked layer (Llama 4: 8,192) capped at what the engine keeps of its window:
    ``sliding_held`` ``window`` (paged serving engines) or ``window - 1`` (transformers 5's
    DynamicSlidingWindowLayer), or ``prompt`` (nothing capped: the storage transformers' cache
    holds right after a prefill, see :func:`kv_cache_bytes`). ``block``: tokens per KV block or
    page (a paged engine's sequence holds whole blocks: vLLM 16, SGLang 1, TensorRT-LLM 32)."""
    if sliding_held == "prompt":
        return arch.kv_elements_per_layer * elem_bytes * arch.num_layers * context
    per_layer_tok = arch.kv_elements_per_layer * elem_bytes
    cap = (lambda w: w - 1) if sliding_held == "window - 1" else (lambda w: w)

    def keep(w: int) -> int:  # a windowed layer's tokens, in whole blocks (at most the context)
        return min(-(-cap(w) // block) * block, context)

    context = -(-context // block) * block  # a paged engine hands out whole blocks
    capped_layers = 0
    tokens = 0.0
    if arch.sliding_window:
        n = len(arch.sliding_window_layers or ())
        capped_layers += n
        tokens += n * min(context, keep(arch.sliding_window))
    if arch.attention_chunk and arch.chunked_layers:
        n = len(arch.chunked_layers)
        capped_layers += n
        tokens += n * min(context, keep(arch.attention_chunk))
    full = arch.num_layers - capped_layers
    return per_layer_tok * (full * context + tokens)


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
                   kv_dtype: str | None = None, context: int | None = None,
                   prefill: bool = False) -> int:
    """KV-cache bytes of the job: ``batch`` sequences of ``context`` tokens (prompt + generated;
    default ``job.context`` or the sequence length), each sequence in whole blocks of the
    job's serving engine (:data:`gpuplan.engines.budget.BUDGET_RULES` at its default version).
    MLA (DeepSeek-V2/V3, Kimi-K2) caches one latent per token and layer, ``kv_lora_rank +
    qk_rope_head_dim`` elements, at the KV dtype's bytes: fp8 is 1 byte each (vLLM's
    ``--kv-cache-dtype fp8`` on its FlashMLA / Triton / CUTLASS MLA backends, SGLang's
    ``fp8_e4m3`` MLATokenToKVPool, stored as uint8), plus the fp32 K and V scale per layer.

    ``prefill``: the storage alive at the end of the prompt's forward. transformers 5's
    DynamicSlidingWindowLayer.update keeps ``full_key_states[:, :, -window + 1:, :]``, a *view*
    of the whole prompt's torch.cat (cache_utils.py, transformers 5.25), so every sliding or
    chunked layer holds the prompt's K/V storage uncapped until the first decode step replaces
    it; paged engines write the window's blocks only."""
    arch = model.architecture
    if arch is None or arch.kind != "decoder":
        return 0
    ctx = context if context is not None else (job.context or seq_for(model, job))
    eb = kv_elem_bytes(kv_dtype, arch.head_dim) if kv_dtype is not None else float(elem_bytes)
    held = get_engine(job.engine).sliding_kv
    if prefill and held == "window - 1":
        held = "prompt"
    block = budget_rule(job.engine).block_size if job.engine in BUDGET_RULES else 1
    total = kv_cache_per_token(arch, eb, context=ctx, sliding_held=held, block=block) * job.batch
    if kv_dtype == "fp8":
        total += 8 * arch.num_layers
    return math.ceil(total)

