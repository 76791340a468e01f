"""The working set of serving, beyond the weights and the KV cache: the prefill (the prompt through
the model at once, replayed under ``torch.inference_mode()``) and one decode step."""

from __future__ import annotations

from functools import lru_cache

from ..._record import record
from ...job import Job
from ...models import Architecture, Model
from ...models._types import attention_for
from ..shape import seq_for
from ...engines.profiles import MLA_ABSORBING, resolve_engine
from .blocks import Ctx, transformer_layer
from .heads import embed_block, infer_head
from .spec import DECODER_ROPE, Opts, Spec, sliding_mask, spec_cached
from .symbolic import BS, Form, Graph, LayerProfile, Regime, simulate
from .timeline import fmt_gb

__all__ = ["InferActivations", "infer_activations"]

@record
class InferActivations:
    peak: int = 0
    """Working-set bytes at the inference peak (beyond weights and the KV cache)."""
    peak_phase: str = "decode"
    prefill_bytes: int = 0
    """Working set of the prefill (the prompt through the model at once)."""
    decode_bytes: int = 0
    """Working set of one decode step (one new token per sequence)."""
    summary: str = ""
    kv_summary: str = ""
    notes: tuple[str, ...] = ()


def _infer_regime(fmt) -> Regime:
    """The residual stream's dtype: fp32 weights compute in fp32; every other format runs 16-bit
    activations (bitsandbytes' fp32 compute dtype is inside each quantized linear, around the
    fp16 hidden states transformers loads such a model with)."""
    return Regime(param=4 if fmt.name == "fp32" else 2,
                  fp16=fmt.compute_dtype == "fp16" or fmt.name == "fp4")


@lru_cache(maxsize=256)
def _prefill_profile(sp: Spec, regime: Regime, attention: str, dequant: int, sdpa_mask: bool,
                     logits_all: bool) -> tuple[LayerProfile, LayerProfile, LayerProfile]:
    """Layer, embeddings and head replayed under torch.inference_mode(): nothing is saved, every
    tensor dies after its last use; what remains is each op's working set."""
    o = Opts(attention=attention, cache=False, lora=frozenset(), lora_rank=0, lora_dropout=0.0,
             quantized=dequant, frozen=True, sdpa_mask=sdpa_mask)
    g = Graph(regime)
    c = Ctx(g, sp, o)
    x = g.input(BS * sp.h, regime.param, grad=False, name="hidden")
    mask = g.constant(Form(bss=1), regime.param, "mask") if attention == "eager" else None
    y = transformer_layer(c, x, mask, sp.moe_layers[0] if sp.moe_layers else 0)
    layer = simulate(g, [y], param_grad_dt=0, inference=True)
    g = Graph(regime)
    c = Ctx(g, sp, o)
    e = simulate(g, [embed_block(c, g.constant(BS, 8, "input_ids"))], param_grad_dt=0,
                 inference=True)
    g = Graph(regime)
    c = Ctx(g, sp, o)
    hx = g.input(BS * sp.h, regime.param, grad=False, name="hidden")
    head = simulate(g, [infer_head(c, hx, logits_all)], param_grad_dt=0, inference=True)
    return layer, e, head


def infer_activations(model: Model, job: Job, fmt) -> InferActivations:
    """The working set of serving, beyond the weights and the KV cache.

    Prefill runs the prompt (``seq`` tokens x ``batch`` sequences) through the model at once: its
    largest transient is a layer's (the MLP intermediates, or eager attention's b*heads*s*s
    scores) or the head's logits. Decode runs one token per sequence against the cache. Weight
    formats that dequantize to 16-bit for each matmul (bitsandbytes nf4) hold one dequantized
    linear at a time; fused int8/fp8/GPTQ/AWQ kernels do not materialize the weight.
    """
    arch = model.architecture
    if arch is None:
        return InferActivations(summary="not included: architecture unknown",
                                notes=("inference activations not included: only a parameter "
                                       "count is known",))
    sp = spec_cached(arch)
    b = job.batch
    prompt = seq_for(model, job)
    regime = _infer_regime(fmt)
    dequant = fmt.matmul_weight_bytes
    attention = attention_for(sp.family, job.attention, job.engine)
    layer, emb, head = _prefill_profile(
        sp, regime, attention, dequant, sliding_mask(arch, sp, job.attention, prompt),
        job.prefill_logits == "all" or sp.kind != "decoder")
    # BloomModel's loop keeps ``outputs = block(...)`` -- (hidden states, attention weights) --
    # bound until the next block returns: the previous layer's (b, heads, s, s) weights are
    # alive while a layer runs (transformers 5 returns a bare tensor from the other families)
    prev = (b * sp.heads * prompt * prompt * regime.param
            if sp.family == "bloom" and sp.layers > 1 else 0)
    if (sp.experts or sp.family in DECODER_ROPE) and sp.layers > 1:
        # <Family>Model.forward (LlamaModel's and every llama-style decoder's) binds the embeddings' output to ``inputs_embeds`` and keeps it
        # until it returns: from the second layer on it is alive beside the layer's input
        prev += b * prompt * sp.h * regime.param
        # and the rotary table, (cos, sin) of (1, s, rotary dim) in the model dtype: MLA rotates
        # only qk_rope_head_dim of each head (DeepseekV3RotaryEmbedding's dim)
        # (OLMo 2's in fp32: Olmo2RotaryEmbedding returns them uncast)
        table_dt = 4 if sp.family == "olmo2" else regime.param
        prev += 2 * prompt * (sp.mla[2] if sp.mla else sp.d) * table_dt
    if sp.window_mask and attention == "sdpa":
        prev += prompt * prompt  # the unused (s, s) boolean window mask (Spec.window_mask)
    pre = max([a(b, prompt) + t(b, prompt) + prev for a, t in layer.fwd_points]
              + [a(b, prompt) + t(b, prompt) for a, t in emb.fwd_points]
              + [a(b, prompt) + t(b, prompt) for a, t in head.fwd_points])
    if attention == "sdpa" and sp.local_layers and sliding_mask(arch, sp, job.attention, prompt):
        pre += b * prompt * prompt  # the local layers' boolean (b, 1, s, s) mask, built once
    if attention == "eager" and sp.kind == "decoder":
        # the (b, 1, s, s) mask, built once (two: local and global layers)
        pre += b * prompt * prompt * regime.param * (2 if sp.local_layers else 1)
    if sp.family == "bloom":
        pre += b * sp.heads * prompt * regime.param  # the (b heads, 1, s) ALiBi tensor
    dec = 0
    if sp.kind == "decoder":
        ctx = job.context or prompt
        # transformers' DeepseekV2/V3 attention re-expands the cached latent every decode step;
        # vLLM, SGLang and TensorRT-LLM run the absorbed form (engines.profiles.MLA_ABSORBING)
        expand = bool(sp.mla) and resolve_engine(job.engine) not in MLA_ABSORBING
        dec = _decode_working_set(sp, arch, b, ctx, regime.param, attention, dequant,
                                  expand_mla=expand)
    if sp.kind != "decoder":
        peak, phase = pre, "forward"
    else:
        peak, phase = (pre, "prefill") if pre >= dec else (dec, "decode")
    summary = (f"prefill of {b} x {prompt} tokens {fmt_gb(pre)}"
               + (f", decode {fmt_gb(dec)}" if sp.kind == "decoder" else ""))
    notes = []
    if sp.kind == "decoder" and job.prefill_logits == "all":
        notes.append("prefill computes logits for every prompt position (a plain forward); "
                     "generate() and vLLM keep only the last")
    return InferActivations(peak=peak, peak_phase=phase, prefill_bytes=pre, decode_bytes=dec,
                            summary=summary, notes=tuple(notes))


def _decode_working_set(sp: Spec, arch: Architecture, b: int, ctx: int, dt: int, attention: str,
                        dequant: int, *, expand_mla: bool = False) -> int:
    """One new token per sequence: the residual stream and a layer's intermediates for b tokens,
    the attention over ``ctx`` cached positions (eager: b*heads*ctx scores in fp32 and 16-bit;
    flash-decoding: O(b*heads) partials), transformers' DynamicCache update (torch.cat makes a
    new K/V tensor for the layer while the old one is alive: one layer's cache, duplicated), and
    the next-token logits (16-bit and fp32). ``expand_mla``: transformers' MLA attention, which
    re-expands the cached latent every step (:func:`_mla_expanded_attention`)."""
    h = sp.h
    inter = (sp.moe_inter * sp.top_k + sp.shared_inter) if sp.experts else sp.inter
    mlp = b * (3 * inter + 2 * h) * dt
    kv_layer = 2 * sp.kv * sp.d * dt * b * ctx
    if attention == "eager":
        att = b * sp.heads * ctx * (4 + dt) + b * 4 * sp.heads * sp.d * dt
        if sp.kv < sp.heads:
            att += kv_layer * sp.heads // sp.kv  # repeat_kv copies the cached K and V
    else:
        att = b * 4 * sp.heads * sp.d * dt
    if expand_mla:
        att = _mla_expanded_attention(sp, b, ctx, dt, attention)
        kv_layer = 0  # the latent's torch.cat is freed before the expansion (see below)
    w = 0
    if dequant:
        w = max(sp.inter, sp.moe_inter) * h * dequant
    logits = b * sp.vocab * (dt + 4)
    return max(b * h * dt * 2 + max(mlp, att + kv_layer) + w, logits + b * h * dt)


def _mla_expanded_attention(sp: Spec, b: int, ctx: int, dt: int, attention: str) -> int:
    """transformers 5's DeepseekV3Attention / DeepseekV2Attention in a decode step (one token per
    sequence, ``ctx`` cached positions including it). The cache holds the latent -- kv_a_proj's
    normed ``kv_lora_rank`` part and the rotated ``qk_rope_head_dim`` key, (b, 1, ctx, .) each --
    and ``cache.update`` returns the whole of it (its torch.cat's old tensor is freed on
    assignment, before the expansion). ``expand_kv`` then runs kv_b_proj over every cached
    position: a (b, ctx, heads, qk_nope + v) output whose split gives the values as a view, and
    a new (b, heads, ctx, qk_nope + qk_rope) key tensor the nope part and the broadcast rotary
    key are copied into. Both are locals of ``forward`` and stay alive through o_proj, the
    step's peak; beside them the token's own q (q_b_proj's output and the concatenated query),
    kv_a_proj's output, the attention output and o_proj's (transformers 5.25,
    models/deepseek_v3/modeling_deepseek_v3.py, DeepseekV3Attention.expand_kv / forward).
    Eager attention adds the (b, 1, 1, ctx) 16-bit mask and the larger of two moments: the
    softmax (the 16-bit masked scores, their fp32 copy for ``softmax(dtype=float32)`` and its
    fp32 output), or ``torch.matmul(attn_weights, value_states)``, which folds (b, heads) into
    one batch dimension with a reshape: for b > 1 the strided value view cannot merge them and
    is copied, a contiguous (b, heads, ctx, v) tensor beside the 16-bit weights (at::matmul's
    reshape; for b = 1 the reshape is a view)."""
    _q_lora, kv_lora, rope, nope, v = sp.mla
    expanded = b * ctx * sp.heads * (nope + v) * dt
    keys = b * ctx * sp.heads * (nope + rope) * dt
    token = b * (sp.heads * (2 * (nope + rope) + v) + kv_lora + rope + sp.h) * dt
    att = expanded + keys + token
    if attention == "eager":
        softmax = b * sp.heads * ctx * (dt + 8)
        value = b * sp.heads * ctx * ((v if b > 1 else 0) + 1) * dt
        att += b * ctx * dt + max(softmax, value)
    return att
