"""Activation memory, the KV cache and the transient buffers of a step, from the architecture.

The model describes what a *CUDA* run of the Hugging Face implementation holds. Each family's
forward pass is written out op by op below, following the transformers code it mirrors, and
replayed by :mod:`gpuplan._symbolic` (which knows what each op saves for backward, how autocast
casts, and how backward allocates and frees). The result for one layer is a set of formulas in
batch ``b`` and sequence ``s``; a model is embeddings + layers + head and loss, and the step
timeline (forward, start of backward, through backward, optimizer step) is assembled from them.

Conventions (what each category holds):

* **activations** -- tensors saved for backward and alive at that moment (the layers' saved
  tensors, the loss's fp32 log-probabilities, the input ids), plus the KV cache transformers builds
  during a training forward (``use_cache``) while the forward runs;
* **temporaries** -- everything else that is transient: tensors not saved but not yet freed (the
  logits and their fp32 upcast during the loss, gradients of activations during backward, kernel
  workspaces such as FlashAttention's fp32 dq accumulator, the 16-bit weight copies autocast
  caches, optimizer-step temporaries, the fp32 gradient copy of mixed-precision recipes);
* **gradients** -- parameter gradients (``.grad``) alive at that moment.

Measured basis: ``benchmarks/activation_probe.py`` runs real models (fp32, bf16, CUDA-autocast
emulation) and records every saved tensor and the live bytes op by op;
``tests/test_activations_probe.py`` holds this model to it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from ._symbolic import BS, BSS, ONE, ZERO, Form, Graph, LayerProfile, Regime, Tensor, simulate
from .errors import InputError
from .job import KV_DTYPES, Job, default_seq, seq_limit
from .models import Architecture, Model

__all__ = [
    "TrainActivations", "InferActivations", "StepProfile", "step_profile", "train_activations",
    "infer_activations", "kv_cache_bytes", "kv_cache_per_token", "optimizer_step_temporaries",
    "layer_activation_bytes", "regime_for", "seq_for", "check_seq",
]

#: Families whose forward is modeled op by op.
FAMILIES = ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "gemma2", "phi3", "gpt2",
            "gpt_neox", "opt", "falcon", "bert", "vit")

_DECODER_ROPE = ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "gemma2", "phi3")


# --------------------------------------------------------------------------------------------------
# The job's shape


def regime_for(precision: str) -> Regime:
    """How dtypes flow in a named training recipe."""
    if precision == "fp32":
        return Regime(param=4)
    if precision in ("amp-bf16", "amp-fp16"):
        return Regime(param=4, autocast=2, fp16=precision == "amp-fp16")
    return Regime(param=2, fp16=precision == "mixed-fp16")  # mixed-bf16, mixed-fp16, bf16


def seq_for(model: Model, job: Job) -> int | None:
    """The sequence length the job runs at: ``job.seq``, else :func:`gpuplan.job.default_seq`.
    None when no architecture is known."""
    if job.seq is not None:
        return job.seq
    if model.architecture is None:
        return None
    return default_seq(model.architecture)


def check_seq(model: Model, job: Job) -> None:
    """A sequence (or context) longer than the architecture supports is an error naming the limit."""
    arch = model.architecture
    if arch is None:
        return
    limit = seq_limit(arch)
    for name, v in (("seq", job.seq), ("context", job.context)):
        if v is not None and v > limit:
            what = ("tokens per image (patches + class token)" if arch.kind == "vision"
                    else "positions (max_position_embeddings)")
            raise InputError(f"{name} {v}: {model.name} supports at most {limit} {what}; "
                             f"use --{name} {limit} or less")


# --------------------------------------------------------------------------------------------------
# The architecture, as the forward code reads it


@dataclass(frozen=True)
class _Spec:
    family: str
    kind: str
    h: int
    heads: int
    kv: int
    d: int
    inter: int
    vocab: int
    act: str
    norm: str
    parallel: bool
    experts: int
    top_k: int
    moe_inter: int
    shared_inter: int
    attn_dropout: float
    hidden_dropout: float
    embd_dropout: float
    labels: int
    layers: int
    moe_layers: tuple[int, ...]
    softcap_attn: float
    softcap_final: float
    falcon_mqa_math: bool
    norm_topk: bool
    channels: int
    patch: int


_SPECS: dict[int, tuple[Architecture, _Spec]] = {}


def _spec_cached(arch: Architecture) -> _Spec:
    hit = _SPECS.get(id(arch))
    if hit is not None and hit[0] is arch:
        return hit[1]
    sp = _spec(arch)
    if len(_SPECS) > 256:
        _SPECS.clear()
    _SPECS[id(arch)] = (arch, sp)
    return sp


def _spec(arch: Architecture) -> _Spec:
    cfg = arch.config or {}
    fam = arch.family
    if fam not in FAMILIES:
        raise InputError(f"activation memory for family {fam!r} is not modeled; known families: "
                         + ", ".join(FAMILIES))
    moe_layers = tuple(getattr(arch, "moe_layers", ()) or ())
    if arch.num_experts and not moe_layers:
        moe_layers = tuple(range(arch.num_layers))
    embd_dropout = float(cfg.get("embd_pdrop", 0.0) or 0.0) if fam == "gpt2" else 0.0
    if fam == "gpt2":
        attn_dropout = float(cfg.get("attn_pdrop", arch.attention_dropout) or 0.0)
        hidden_dropout = float(cfg.get("resid_pdrop", arch.hidden_dropout) or 0.0)
    else:
        attn_dropout = arch.attention_dropout
        hidden_dropout = arch.hidden_dropout
    if fam in ("bert", "vit"):
        attn_dropout = float(cfg.get("attention_probs_dropout_prob", attn_dropout) or 0.0)
        hidden_dropout = float(cfg.get("hidden_dropout_prob", hidden_dropout) or 0.0)
    if fam == "opt":
        hidden_dropout = float(cfg.get("dropout", hidden_dropout) or 0.0)
        attn_dropout = float(cfg.get("attention_dropout", attn_dropout) or 0.0)
    new_arch = bool(cfg.get("new_decoder_architecture", False))
    return _Spec(
        family=fam, kind=arch.kind, h=arch.hidden_size, heads=arch.num_heads,
        kv=arch.num_kv_heads, d=arch.head_dim, inter=arch.intermediate_size,
        vocab=arch.vocab_size, act=arch.activation, norm=arch.norm,
        parallel=arch.parallel_attn_mlp,
        experts=arch.num_experts, top_k=arch.experts_per_token,
        moe_inter=arch.moe_intermediate_size or arch.intermediate_size,
        shared_inter=arch.shared_expert_intermediate_size,
        attn_dropout=attn_dropout, hidden_dropout=hidden_dropout, embd_dropout=embd_dropout,
        labels=arch.num_labels or 2, layers=arch.num_layers,
        moe_layers=moe_layers,
        softcap_attn=float(cfg.get("attn_logit_softcapping") or 0.0) if fam == "gemma2" else 0.0,
        softcap_final=float(cfg.get("final_logit_softcapping") or 0.0) if fam == "gemma2" else 0.0,
        falcon_mqa_math=(fam == "falcon" and not new_arch and arch.num_kv_heads < arch.num_heads),
        norm_topk=bool(cfg.get("norm_topk_prob", fam == "mixtral")),
        channels=arch.num_channels or 3, patch=arch.patch_size,
    )


@dataclass(frozen=True)
class _Opts:
    attention: str          # eager | sdpa
    cache: bool             # transformers builds a DynamicCache in the forward
    lora: frozenset         # targeted module names ("all-linear" = every block linear)
    lora_rank: int
    lora_dropout: float
    quantized: bool         # frozen base in 4 bits (QLoRA)
    frozen: bool            # base weights frozen (LoRA)
    sdpa_mask: bool = False  # an explicit mask reaches SDPA (sliding window shorter than s)


# --------------------------------------------------------------------------------------------------
# Building blocks, each mirroring the transformers code


class _Ctx:
    def __init__(self, g: Graph, sp: _Spec, o: _Opts) -> None:
        self.g, self.sp, self.o = g, sp, o

    def w(self, numel: int, name: str = "w") -> Tensor:
        return self.g.param(numel, name, trainable=not self.o.frozen)

    def linear(self, x: Tensor, fan_in: int, fan_out: int, module: str) -> Tensor:
        """A block linear, with a LoRA adapter when targeted (PEFT's forward: base(x) +
        lora_B(lora_A(dropout(x))) * scaling)."""
        g, o = self.g, self.o
        quant = fan_in * fan_out * 2 if (o.quantized and o.frozen) else 0
        y = g.linear(x, self.w(fan_in * fan_out, module), BS * fan_out, name=module,
                     quantized=quant)
        if o.lora_rank and (module in o.lora or "all-linear" in o.lora):
            r = o.lora_rank
            xd = g.dropout(x, o.lora_dropout, name=module + ".lora_dropout")
            a = g.linear(xd, g.param(fan_in * r, module + ".lora_A"), BS * r, name=module + ".A")
            bb = g.linear(a, g.param(r * fan_out, module + ".lora_B"), BS * fan_out,
                          name=module + ".B")
            y = g.add(y, g.scale(bb, module + ".scaling"), name=module + ".lora_add")
        return y


def _rms_normed(c: _Ctx, x: Tensor, name: str) -> Tensor:
    """The part every RMSNorm shares: x.float() * rsqrt(x.float().pow(2).mean(-1) + eps)."""
    g = c.g
    xf = g.to(x, 4)
    p = g.unary_saves_input(xf, name + ".pow", fp32=True)
    m = g.reduce(p, BS, name + ".mean")
    r = g.unary_saves_output(g.scale(m, name + ".eps"), name + ".rsqrt", fp32=True)
    return g.mul(xf, r, out=BS * c.sp.h, name=name + ".normed")


def _rmsnorm(c: _Ctx, x: Tensor, name: str) -> Tensor:
    """LlamaRMSNorm: x.to(fp32); x * rsqrt(x.pow(2).mean(-1) + eps); weight * x.to(input dtype)."""
    g, h = c.g, c.sp.h
    nd = g.to(_rms_normed(c, x, name), x.dt)
    return g.mul(c.w(h, name), nd, out=BS * h, name=name)


def _gemma_rmsnorm(c: _Ctx, x: Tensor, name: str) -> Tensor:
    """Gemma2RMSNorm: n = _norm(x.float()); (n * (1 + weight.float())).type_as(x)."""
    g, h = c.g, c.sp.h
    n = _rms_normed(c, x, name)
    w1 = g.scale(g.to(c.w(h, name), 4), name + ".1+w")
    y = g.mul(n, w1, out=BS * h, name=name)
    return g.to(y, x.dt)


def _layernorm(c: _Ctx, x: Tensor, name: str) -> Tensor:
    return c.g.layer_norm(x, BS, c.w(c.sp.h, name), name=name)


def _norm(c: _Ctx, x: Tensor, name: str) -> Tensor:
    if c.sp.family == "gemma2":
        return _gemma_rmsnorm(c, x, name)
    if c.sp.norm == "rmsnorm":
        return _rmsnorm(c, x, name)
    return _layernorm(c, x, name)


def _activation(c: _Ctx, x: Tensor, name: str) -> Tensor:
    """ACT2FN[hidden_act]: silu / exact gelu / tanh-gelu save their input; relu its output;
    gelu_new is composed of elementwise ops (transformers' NewGELUActivation)."""
    g, act = c.g, c.sp.act
    if c.sp.family == "falcon":
        act = "gelu"  # FalconMLP uses nn.GELU()
    if act in ("silu", "swish", "gelu", "gelu_pytorch_tanh", "gelu_python", "gelu_accurate"):
        return g.unary_saves_input(x, name)
    if act == "relu":
        return g.unary_saves_output(x, name)
    if act in ("gelu_new", "gelu_fast"):
        # 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x.pow(3)))), evaluated left to right:
        # 0.5 * x first, held while the bracket is computed; x is the function's argument
        t7 = g.scale(x, name + ".half")
        t1 = g.unary_saves_input(x, name + ".pow", fp32=True)
        t3 = g.add(x, g.scale(t1), name + ".inner")
        t5 = g.unary_saves_output(g.scale(t3), name + ".tanh")
        t6 = g.scale(t5, name + ".1+tanh")
        y = g.mul(t7, t6, name=name)
        g.touch(x)
        return y
    if act == "quick_gelu":
        s = g.unary_saves_output(g.scale(x), name + ".sigmoid")
        return g.mul(x, s, name=name)
    raise InputError(f"activation function {act!r} is not modeled (silu, gelu, gelu_new, "
                     "gelu_pytorch_tanh, relu, quick_gelu are)")


def _eager_core(c: _Ctx, q: Tensor, k: Tensor, v: Tensor, *, q_contig: bool, kv_contig: bool,
                softmax_fp32: bool, dropout: float, mask: Tensor | None) -> Tensor:
    """eager_attention_forward: repeat_kv, q @ k^T * scaling (+ mask), softmax, dropout, @ v.

    ``torch.matmul`` reshapes its 4-D operands to 3-D: an operand whose memory is not laid out
    (batch, heads, seq, dim) is copied, and that copy is what matmul saves. The output (batch,
    heads, seq, dim) is transposed and made contiguous for the output projection (a copy)."""
    g, sp = c.g, c.sp
    heads, d = sp.heads, sp.d
    groups = heads // max(sp.kv, 1)
    q2 = q if q_contig else g.contiguous(q, "q.bmm")
    if groups > 1:
        k2 = g.expand_copy(k, BS * (heads * d), "k.repeat_kv")
        v2 = g.expand_copy(v, BS * (heads * d), "v.repeat_kv")
    else:
        k2 = k if kv_contig else g.contiguous(k, "k.bmm")
        v2 = v if kv_contig else g.contiguous(v, "v.bmm")
    # the recompute region of selective checkpointing (Korthikanti et al. sec. 4.2): from the
    # batched-matmul-ready Q, K, V to the attention output; its s^2 tensors are not kept
    g.region = "attn_core"
    scores = g.matmul(q2, k2, BSS * heads, "scores")
    scores = g.scale(scores, "scores.scaled")
    if sp.softcap_attn:
        scores = g.unary_saves_output(g.scale(scores, "softcap.div"), "softcap.tanh")
        scores = g.scale(scores, "softcap.mul")
    if mask is not None:
        scores = g.add(scores, mask, "scores.masked")
    if softmax_fp32:
        probs = g.softmax(scores, dt=4, name="softmax")
        probs = g.to(probs, q2.dt if not g.r.autocast else g.r.autocast)
    else:
        probs = g.softmax(scores, name="softmax")
        if sp.family == "gpt2":
            probs = g.to(probs, v2.dt)  # attn_weights.type(value.dtype)
    probs = g.dropout(probs, dropout, "attn_dropout")
    g.keep(probs)  # returned as attn_weights; the layer unpacks it into a local (`x, _ = ...`)
    out = g.matmul(probs, v2, BS * (heads * d), "attn_out")
    g.region = ""
    return g.contiguous(out, "attn_out.t")


def _attention(c: _Ctx, x: Tensor, mask: Tensor | None, layer: int) -> Tensor:
    """Projections, positions, the KV cache update, the attention core and the output projection,
    per family."""
    g, sp, o = c.g, c.sp, c.o
    h, heads, kv, d = sp.h, sp.heads, sp.kv, sp.d
    fam = sp.family
    qd, kvd = heads * d, kv * d
    dropout = sp.attn_dropout
    # ---- projections -> q, k, v and whether each is laid out (b, heads, s, d) in memory
    if fam == "gpt2":
        qkv = c.linear(x, h, 3 * h, "c_attn")
        q, k, v = g.split(qkv, [BS * h, BS * h, BS * h])
        q_c = kv_c = False
    elif fam in ("gpt_neox", "phi3"):
        name = "query_key_value" if fam == "gpt_neox" else "qkv_proj"
        qkv = c.linear(x, h, qd + 2 * kvd, name)
        q, k, v = g.split(qkv, [BS * qd, BS * kvd, BS * kvd])
        # partial-rotary implementation: rotate a slice and torch.cat it back (a new tensor)
        q = g.cat([g.add(g.scale(q), g.scale(q), "q.rope")], "q.rope_cat")
        k = g.cat([g.add(g.scale(k), g.scale(k), "k.rope")], "k.rope_cat")
        q_c, kv_c = True, True
        v_c = False
    elif fam == "falcon":
        qkv = c.linear(x, h, qd + 2 * kvd, "query_key_value")
        q, k, v = g.split(qkv, [BS * qd, BS * kvd, BS * kvd])
        q = g.contiguous(q, "q.reshape")   # transpose(1, 2).reshape(...) of a strided view
        k = g.contiguous(k, "k.reshape")
        v = g.contiguous(v, "v.reshape")
        q = g.add(g.scale(q), g.scale(q), "q.rope")
        k = g.add(g.scale(k), g.scale(k), "k.rope")
        q_c = kv_c = True
    else:
        names = {"bert": ("query", "key", "value", "dense"),
                 "vit": ("query", "key", "value", "dense"),
                 "opt": ("q_proj", "k_proj", "v_proj", "out_proj")}.get(
                     fam, ("q_proj", "k_proj", "v_proj", "o_proj"))
        q = c.linear(x, h, qd, names[0])
        k = c.linear(x, h, kvd, names[1])
        v = c.linear(x, h, kvd, names[2])
        if fam == "opt":
            q = g.scale(q, "q.scaled")
        if fam in _DECODER_ROPE:
            q = g.add(g.scale(q), g.scale(q), "q.rope")   # (q * cos) + (rotate_half(q) * sin)
            k = g.add(g.scale(k), g.scale(k), "k.rope")
        q_c = kv_c = False
    if fam not in ("gpt_neox", "phi3"):
        v_c = kv_c
    # ---- the DynamicCache a training forward builds: K and V copied by torch.cat, held
    if o.cache and sp.kind == "decoder":
        k = g.cat([k], "k.cache")
        v = g.cat([v], "v.cache")
        g.hold(k)
        g.hold(v)
        kv_c = v_c = True
    # ---- core
    if o.attention == "eager" or sp.falcon_mqa_math:
        if sp.falcon_mqa_math and o.attention == "sdpa":
            out = _math_sdpa_mqa(c, q, k, v)
        elif fam == "falcon":
            out = _falcon_eager(c, q, k, v, mask)
        else:
            out = _eager_core(c, q, k, v, q_contig=q_c, kv_contig=kv_c and v_c,
                              softmax_fp32=fam not in ("gpt2", "bert"), dropout=dropout, mask=mask)
    elif o.sdpa_mask:
        # A sliding-window mask must be passed to SDPA: flash cannot take it, CUDA runs the
        # memory-efficient kernel, which saves the mask (once per forward, shared by the layers),
        # and transformers expands K/V with repeat_kv (GQA in SDPA needs a mask-free call).
        if kv < heads:
            k = g.expand_copy(k, BS * qd, "k.repeat_kv")
            v = g.expand_copy(v, BS * qd, "v.repeat_kv")
        # SDPA converts the boolean mask to an additive float mask in the query dtype on every
        # call (convert_boolean_attn_mask), and the memory-efficient kernel saves it.
        fmask = g.saved_const(Form(bss=1), g.r.autocast or q.dt, "sdpa.float_mask")
        g.region = "attn_core"
        out = g.sdpa_flash(q, k, v, heads, d, kv_heads=heads, out_copy_layout=q_c,
                           extra_saved=[fmask])
        g.region = ""
    else:
        g.region = "attn_core"
        out = g.sdpa_flash(q, k, v, heads, d, kv_heads=kv, out_copy_layout=q_c)
        g.region = ""
        if q_c:
            out = g.contiguous(out, "attn_out.t")  # flash's output follows q's memory layout
    oname = {"gpt2": "c_proj", "gpt_neox": "dense", "falcon": "dense", "bert": "dense",
             "vit": "dense", "opt": "out_proj"}.get(fam, "o_proj")
    y = c.linear(out, qd, h, oname)
    g.touch(q, k, v)  # the attention forward's locals live until it returns
    return y


def _math_sdpa_mqa(c: _Ctx, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """SDPA's math kernel (Falcon's one K/V head with an explicit mask rules out flash and
    memory-efficient attention): 16-bit inputs are computed in fp32; q, K and V broadcast to
    every head are copied in fp32 and saved with the fp32 softmax."""
    g, sp = c.g, c.sp
    heads, d = sp.heads, sp.d
    g.region = "attn_core"
    qf = g.contiguous(g.to(q, 4), "q.math")
    kf = g.expand_copy(g.to(k, 4), BS * (heads * d), "k.math")
    vf = g.expand_copy(g.to(v, 4), BS * (heads * d), "v.math")
    scores = g.matmul(qf, kf, BSS * heads, "scores", autocast=False)
    probs = g.softmax(g.add(scores, scores, "scores.masked"), dt=4, name="softmax")
    out = g.matmul(probs, vf, BS * (heads * d), "attn_out", autocast=False)
    g.region = ""
    out = g.to(out, g.r.autocast or q.dt)
    return g.contiguous(out, "attn_out.t")


def _falcon_eager(c: _Ctx, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
    """Falcon's own eager path: scores in the hidden dtype, broadcast over K/V heads."""
    g, sp = c.g, c.sp
    heads, d = sp.heads, sp.d
    g.region = "attn_core"
    if sp.kv < heads:  # broadcasting matmul: K and V expanded to every head and copied
        k = g.expand_copy(k, BS * (heads * d), "k.broadcast")
        v = g.expand_copy(v, BS * (heads * d), "v.broadcast")
    scores = g.matmul(q, k, BSS * heads, "scores")
    scores = g.add(scores, mask if mask is not None else scores, "scores.masked")
    probs = g.softmax(scores, dt=4 if g.r.autocast else q.dt, name="softmax")
    out = g.matmul(probs, v, BS * (heads * d), "attn_out")
    g.region = ""
    return g.contiguous(out, "attn_out.t")


def _mlp(c: _Ctx, x: Tensor) -> Tensor:
    g, sp = c.g, c.sp
    h, inter, fam = sp.h, sp.inter, sp.family
    if fam == "phi3":
        gu = c.linear(x, h, 2 * inter, "gate_up_proj")
        gate, up = g.split(gu, [BS * inter, BS * inter])
        y = g.mul(up, _activation(c, gate, "act"), name="act*up")
        return c.linear(y, inter, h, "down_proj")
    if fam in _DECODER_ROPE:
        gate = c.linear(x, h, inter, "gate_proj")
        up = c.linear(x, h, inter, "up_proj")
        y = g.mul(_activation(c, gate, "act"), up, name="act*up")
        return c.linear(y, inter, h, "down_proj")
    names = {"gpt2": ("c_fc", "c_proj"), "gpt_neox": ("dense_h_to_4h", "dense_4h_to_h"),
             "falcon": ("dense_h_to_4h", "dense_4h_to_h"), "opt": ("fc1", "fc2"),
             "bert": ("intermediate.dense", "output.dense"),
             "vit": ("intermediate.dense", "output.dense")}[fam]
    y = _activation(c, c.linear(x, h, inter, names[0]), "act")
    return c.linear(y, inter, h, names[1])


def _moe(c: _Ctx, x: Tensor) -> Tensor:
    """A sparse MoE block with transformers' default grouped_mm experts (dropless: the b*s*k
    token-expert pairs are gathered, sorted by expert, and run as grouped matmuls; the routed
    total is b*s*k rows however unevenly they fall on experts)."""
    g, sp = c.g, c.sp
    h, E, k, I = sp.h, sp.experts, sp.top_k, sp.moe_inter
    # router: F.linear(x, gate.weight), softmax in fp32, top-k (+ renormalize)
    logits = g.linear(x, c.w(E * h, "router"), BS * E, name="router")
    if sp.family == "mixtral":
        probs = g.softmax(g.to(logits, 4), name="router.softmax")
    else:
        probs = g.softmax(logits, dt=4, name="router.softmax")
    idx = g.saved_const(BS * k, 8, "topk.indices")
    top = g.index(probs, BS * k, idx, name="topk")
    if sp.family == "mixtral" or sp.norm_topk:
        # router_top_value /= router_top_value.sum(-1, keepdim=True): the in-place division
        # saves the sum and a clone of the values it overwrites
        ssum = g.reduce(top, BS, name="topk.sum")
        top_c = g.contiguous(top, "topk.clone")
        top = g.mul(top_c, ssum, out=BS * k, name="topk.renorm")
    if sp.family == "qwen2_moe":
        top = g.to(top, logits.dt)
    # experts (grouped_mm): gather each (token, expert) pair's row, sorted by expert
    S = BS * k
    gather_idx = g.saved_const(S, 8, "perm//k")
    sel = g.index(x, S * h, gather_idx, name="experts.gather")
    sel = g.to(sel, g.r.param)  # grouped_mm is not autocast-enabled: cast to the weight dtype
    offsets = g.saved_const(ONE * E, 4, "offsets")
    proj = g.linear(sel, c.w(E * 2 * I * h, "experts.gate_up_proj"), S * (2 * I),
                    name="experts.gate_up", autocast=False)
    g._op("offsets", [], [], saved=[offsets])
    gate, up = g.split(proj, [S * I, S * I])
    y = g.mul(_activation(c, gate, "experts.act"), up, name="experts.act*up")
    down = g.linear(y, c.w(E * I * h, "experts.down_proj"), S * h, name="experts.down",
                    autocast=False)
    sw = g.index(top, S, g.saved_const(S, 8, "perm"), name="experts.sample_weights")
    weighted = g.mul(down, sw, out=S * h, name="experts.weighted")
    weighted = g.index(weighted, S * h, g.saved_const(S, 8, "inv_perm"), name="experts.unpermute")
    out = g.reduce(weighted, BS * h, name="experts.sum")
    out = g.to(out, x.dt)
    if sp.shared_inter:
        si = sp.shared_inter
        sg = c.linear(x, h, si, "shared_expert.gate_proj")
        su = c.linear(x, h, si, "shared_expert.up_proj")
        sy = g.mul(_activation(c, sg, "shared.act"), su, name="shared.act*up")
        so = c.linear(sy, si, h, "shared_expert.down_proj")
        gate_logit = c.g.linear(x, c.w(h, "shared_expert_gate"), BS, name="shared_expert_gate")
        sgate = g.unary_saves_output(gate_logit, "shared.sigmoid")
        so = g.mul(sgate, so, out=BS * h, name="shared.gated")
        out = g.add(out, so, "moe.sum")
    return out


def _layer(c: _Ctx, x: Tensor, mask: Tensor | None, layer: int) -> Tensor:
    """One transformer block, pre-LN / post-LN / parallel as the family does it."""
    g, sp = c.g, c.sp
    fam = sp.family
    moe = sp.experts and layer in sp.moe_layers
    p = sp.hidden_dropout
    g.keep(x)  # the caller's loop variable holds the layer input until the layer returns
    if fam == "bert":  # post-LN
        a = g.dropout(_attention(c, x, mask, layer), p, "attn.dropout")
        x1 = _layernorm(c, g.add(a, x, "residual1"), "attention.output.LayerNorm")
        m = g.dropout(_mlp(c, x1), p, "mlp.dropout")
        return _layernorm(c, g.add(m, x1, "residual2"), "output.LayerNorm")
    if fam == "gpt_neox" and sp.parallel:
        a = g.dropout(_attention(c, _norm(c, x, "input_layernorm"), mask, layer), p, "attn.dropout")
        m = g.dropout(_mlp(c, _norm(c, x, "post_attention_layernorm")), p, "mlp.dropout")
        return g.add(g.add(m, a, "residual_am"), x, "residual")
    if fam == "falcon" and sp.parallel:
        n = _norm(c, x, "input_layernorm")
        a = _attention(c, n, mask, layer)
        m = _mlp(c, n)
        return g.add(g.add(m, a, "residual_am"), x, "residual")
    if fam == "gemma2":
        a = _attention(c, _norm(c, x, "input_layernorm"), mask, layer)
        x1 = g.add(x, _norm(c, a, "post_attention_layernorm"), "residual1")
        m = _mlp(c, _norm(c, x1, "pre_feedforward_layernorm"))
        return g.add(x1, _norm(c, m, "post_feedforward_layernorm"), "residual2")
    # pre-norm: llama family, gpt2, opt, vit, phi3, neox (sequential)
    n1 = _norm(c, x, "input_layernorm")
    a = _attention(c, n1, mask, layer)
    a = g.dropout(a, p, "attn.dropout")
    x1 = g.add(a, x, "residual1")
    n2 = _norm(c, x1, "post_attention_layernorm")
    if fam == "gpt2":
        g.keep(a)   # GPT2Block: attn_output and the ln_2 output stay bound to locals
        g.keep(n2)
    elif fam == "vit":
        g.keep(n1)  # ViTLayer: hidden_states_norm and attention_output stay bound to locals
        g.keep(a)
    m = _moe(c, n2) if moe else _mlp(c, n2)
    m = g.dropout(m, p, "mlp.dropout")
    return g.add(x1, m, "residual2")


# --------------------------------------------------------------------------------------------------
# Embeddings, head and loss


def _embed_block(c: _Ctx, ids: Tensor) -> Tensor:
    g, sp = c.g, c.sp
    h = sp.h
    if sp.kind == "vision":
        return _vit_embed(c)
    emb_trainable = not c.o.frozen
    x = g.embedding(ids, g.param(sp.vocab * h, "embed_tokens", trainable=emb_trainable), BS * h)
    if sp.family == "gemma2":
        x = g.scale(x, "embed.normalizer")
    if sp.family in ("gpt2", "opt"):
        pos = g.embedding(g.constant(BS, 8, "position_ids"),
                          g.param(h, "embed_positions", trainable=emb_trainable), BS * h, "wpe")
        x = g.add(x, pos, "embed+pos")
        x = g.dropout(x, sp.embd_dropout if sp.family == "gpt2" else sp.hidden_dropout,
                      "embed.dropout")
    if sp.family == "bert":
        tt = g.embedding(g.constant(BS, 8, "token_type_ids"), g.param(h, "token_type"), BS * h)
        pos = g.embedding(g.constant(BS, 8, "position_ids"), g.param(h, "positions"), BS * h)
        x = g.add(g.add(x, tt, "embed+tt"), pos, "embed+pos")
        x = _layernorm(c, x, "embeddings.LayerNorm")
        x = g.dropout(x, sp.hidden_dropout, "embed.dropout")
    return x


def _vit_embed(c: _Ctx) -> Tensor:
    """Conv patch embedding, class token, position embeddings, dropout. The image tensor is an
    input (counted as such); ``s`` is the number of tokens (patches + 1)."""
    g, sp = c.g, c.sp
    h = sp.h
    pix = g.input(BS * (sp.patch * sp.patch * sp.channels), g.r.param, grad=False, name="pixels")
    patches = g.linear(pix, c.w(sp.channels * sp.patch * sp.patch * h, "patch_embeddings"),
                       BS * h, name="patch_embeddings")
    x = g.cat([patches], "cls_cat")
    x = g.add(x, g.constant(BS * 0, 4, "pos"), "embed+pos")
    return g.dropout(x, sp.hidden_dropout, "embed.dropout")


def _final_norm(c: _Ctx, x: Tensor) -> Tensor:
    """The norm after the last layer of a decoder."""
    if c.sp.family in ("gpt_neox", "opt"):
        return _layernorm(c, x, "final_layer_norm")
    return _norm(c, x, "norm")


def _vit_classifier(c: _Ctx, x: Tensor) -> Tensor:
    """ViTForImageClassification's head: the final LayerNorm, the [CLS] row, the classifier."""
    g, sp = c.g, c.sp
    x = _layernorm(c, x, "layernorm")
    pooled = g.index(x, Form(b=sp.h), None, name="pooled")
    return g.linear(pooled, c.w(sp.h * sp.labels, "classifier"), Form(b=sp.labels),
                    name="classifier")


def _bert_transform(c: _Ctx, x: Tensor) -> Tensor:
    """BertPredictionHeadTransform: dense, activation, LayerNorm (before the MLM decoder)."""
    t = c.linear(x, c.sp.h, c.sp.h, "cls.transform.dense")
    t = _activation(c, t, "cls.transform.act")
    return _layernorm(c, t, "cls.transform.LayerNorm")


def _head_block(c: _Ctx, x: Tensor) -> Tensor:
    """Final norm, the output head and the loss."""
    g, sp = c.g, c.sp
    h, V = sp.h, sp.vocab
    if sp.kind == "vision":
        return g.cross_entropy(_vit_classifier(c, x), Form(b=1), sp.labels)
    if sp.family == "bert":
        g.hold(x)  # the encoder's last_hidden_state, held by its output
        logits = g.linear(_bert_transform(c, x), c.w(V * h, "decoder"), BS * V, name="decoder")
        g.hold(logits)
        return g.cross_entropy(logits, BS, V)
    x = _final_norm(c, x)
    g.hold(x)  # last_hidden_state: held by the base model's output until the forward returns
    logits = g.linear(x, c.w(V * h, "lm_head"), BS * V, name="lm_head")
    g.hold(logits)  # returned in the model output: alive until the forward returns
    if sp.softcap_final:
        logits = g.scale(g.unary_saves_output(g.scale(logits, "softcap.div"), "softcap.tanh"),
                         "softcap.mul")
    logits = g.to(logits, 4)           # ForCausalLMLoss: logits.float()
    return g.cross_entropy(logits, BS, V)


# --------------------------------------------------------------------------------------------------
# Profiles


@dataclass(frozen=True)
class StepProfile:
    """A model's step as formulas in (b, s): blocks, in order, with their profiles."""

    embed: LayerProfile
    layers: tuple[tuple[int, LayerProfile], ...]
    """(count, profile) runs of identical consecutive layers."""
    head: LayerProfile
    layer_input: Form
    """Bytes of one layer's input (what full checkpointing keeps per layer)."""
    inputs: Form
    """The batch tensors (input ids and labels, int64) or images."""
    mask: Form
    """An explicit attention mask the model builds once per forward (eager), held in forward."""
    checkpointing: str
    regime: Regime
    notes: tuple[str, ...] = ()


def _sliding_mask(arch: Architecture, sp: _Spec, attention: str, s: int) -> bool:
    return bool(attention == "sdpa" and sp.family in ("mistral", "qwen2", "mixtral", "phi3")
                and arch.sliding_window and s > arch.sliding_window)


def _opts(job: Job, sp: _Spec, lora_targets: frozenset, sdpa_mask: bool = False) -> _Opts:
    # transformers turns the cache off when gradient checkpointing is enabled (full checkpointing)
    cache = job.use_cache and job.checkpointing != "full" and sp.kind == "decoder"
    frozen = job.lora_rank is not None
    return _Opts(attention=job.attention, cache=cache, lora=lora_targets,
                 lora_rank=job.lora_rank or 0, lora_dropout=job.lora_dropout if frozen else 0.0,
                 quantized=frozen and job.lora_base is not None
                 and job.lora_base.startswith(("nf4", "fp4")),
                 frozen=frozen, sdpa_mask=sdpa_mask)


@lru_cache(maxsize=512)
def _profile_cached(sp: _Spec, regime: Regime, o: _Opts, checkpointing: str) -> StepProfile:
    notes: list[str] = []
    pdt = regime.param
    grad_dt = pdt
    # layers: group consecutive identical layers (MoE vs dense)
    kinds = [(sp.experts > 0 and i in sp.moe_layers) for i in range(sp.layers)]
    runs: list[tuple[int, bool]] = []
    for k in kinds:
        if runs and runs[-1][1] == k:
            runs[-1] = (runs[-1][0] + 1, k)
        else:
            runs.append((1, k))
    mask_form = ZERO
    if sp.kind == "decoder" and (o.attention == "eager" or sp.family == "falcon"):
        mask_form = Form(bss=pdt)  # eager_mask: a (b, 1, s, s) float mask in the model dtype
    if sp.kind == "decoder" and o.attention == "sdpa" and o.sdpa_mask:
        mask_form = Form(bss=1)  # sdpa_mask: a boolean (b, 1, s, s) mask, held in forward
    layer_profiles = []
    by_kind: dict[bool, LayerProfile] = {}
    for count, is_moe in runs:
        if is_moe not in by_kind:
            g = Graph(regime)
            c = _Ctx(g, sp, o)
            x = g.input(BS * sp.h, pdt, grad=True, name="hidden")
            mask = g.constant(Form(bss=1), pdt, "mask") if mask_form != ZERO else None
            layer_idx = sp.moe_layers[0] if is_moe else next(
                (i for i in range(sp.layers) if i not in sp.moe_layers), 0)
            y = _layer(c, x, mask, layer_idx)
            if checkpointing == "full":
                prof = simulate(g, [y], param_grad_dt=grad_dt, recompute=True)
                prof.fwd_points_nosave = simulate(g, [y], param_grad_dt=grad_dt,
                                                  inference=True).fwd_points
            elif checkpointing == "selective":
                prof = simulate(g, [y], param_grad_dt=grad_dt, drop_region="attn_core")
            else:
                prof = simulate(g, [y], param_grad_dt=grad_dt)
            by_kind[is_moe] = prof
        layer_profiles.append((count, by_kind[is_moe]))
    # embeddings
    g = Graph(regime)
    c = _Ctx(g, sp, o)
    ids = g.constant(BS, 8, "input_ids")
    x = _embed_block(c, ids)
    embed = simulate(g, [x], param_grad_dt=grad_dt)
    # head + loss
    g = Graph(regime)
    c = _Ctx(g, sp, o)
    hx = g.input(BS * sp.h, pdt, grad=True, name="hidden")
    loss = _head_block(c, hx)
    head = simulate(g, [loss], param_grad_dt=grad_dt)
    inputs = Form(bs=16) if sp.kind != "vision" else Form(b=8)
    if sp.kind == "vision":
        inputs = inputs + Form(bs=sp.channels * sp.patch * sp.patch * pdt)
    if checkpointing == "selective" and o.attention == "sdpa":
        notes.append("selective checkpointing recomputes the attention core; with SDPA/flash "
                     "that core already keeps only O(s) statistics, so it saves little")
    return StepProfile(embed=embed, layers=tuple(layer_profiles), head=head,
                       layer_input=BS * (sp.h * pdt), inputs=inputs, mask=mask_form,
                       checkpointing=checkpointing, regime=regime, notes=tuple(notes))


def _lora_targets(model: Model, job: Job) -> frozenset:
    if job.lora_rank is None:
        return frozenset()
    if job.lora_targets is not None:
        return frozenset(job.lora_targets)
    from .memory import DEFAULT_LORA_TARGETS
    return frozenset(DEFAULT_LORA_TARGETS.get(model.architecture.family, ()))


def step_profile(model: Model, job: Job, seq: int | None = None) -> StepProfile:
    """The step profile of ``job`` on ``model`` (its architecture must be known). ``seq``
    overrides the job's sequence length (it decides whether a sliding-window mask exists)."""
    arch = model.architecture
    sp = _spec_cached(arch)
    s = seq if seq is not None else seq_for(model, job)
    o = _opts(job, sp, _lora_targets(model, job), _sliding_mask(arch, sp, job.attention, s))
    return _profile_cached(sp, regime_for(job.precision), o, job.checkpointing)


def layer_activation_bytes(model: Model, job: Job, *, batch: int | None = None,
                           seq: int | None = None) -> int:
    """Bytes one (dense) layer saves for backward at this batch and sequence (no checkpointing)."""
    prof = step_profile(model, job.with_(checkpointing="none"))
    b = batch or job.batch
    s = seq or seq_for(model, job)
    return prof.layers[0][1].saved(b, s)


# --------------------------------------------------------------------------------------------------
# The training timeline


@dataclass(frozen=True, kw_only=True)
class TrainActivations:
    """Activation-dependent memory of one training micro-step, at the phases of the timeline."""

    known: bool
    """False when the architecture is unknown (the lines are then zero and a note says so)."""
    forward_peak: int = 0
    """Activations alive at the forward peak."""
    forward_temporaries: int = 0
    forward_detail: str = ""
    backward_peak: int = 0
    """Activations alive at the backward peak."""
    backward_temporaries: int = 0
    backward_grads: int = 0
    """Gradient bytes alive at the backward peak (all of them when accumulating)."""
    backward_detail: str = ""
    summary: str = ""
    saved_bytes: int = 0
    """Everything saved for backward at the end of the forward (the classic "activations")."""
    per_layer_bytes: tuple[int, ...] = ()
    """Saved bytes of each distinct layer kind (dense, MoE), no checkpointing."""
    notes: tuple[str, ...] = ()


def train_activations(model: Model, job: Job, *, grad_bytes: int,
                      seq: int | None = None, batch: int | None = None) -> TrainActivations:
    """Activations, temporaries and gradients at the forward and backward peaks of one micro-step.

    ``grad_bytes`` are the parameter-gradient bytes this GPU holds once backward is done (sharded
    by ZeRO-2 and up). Parameter gradients appear during backward in the order the layers'
    backward produces them; with ``grad_accum`` > 1 the last micro-step starts with all of them
    alive (earlier micro-steps made them) and each new gradient is summed into them.
    """
    arch = model.architecture
    if arch is None:
        return TrainActivations(
            known=False, summary="not included: architecture unknown",
            notes=("activations not included: only a parameter count is known; give a catalog "
                   "name or a config.json for batch/sequence-dependent memory",))
    s = seq if seq is not None else seq_for(model, job)
    b = batch if batch is not None else job.batch
    prof = step_profile(model, job, seq=s)
    key = (id(prof), b, s, grad_bytes, job.grad_accum > 1, arch.tie_word_embeddings,
           job.attention)
    hit = _TIMELINES.get(key)
    if hit is not None and hit[0] is prof:
        return hit[1]
    out = _train_from_profile(prof, b, s, grad_bytes=grad_bytes,
                              accumulating=job.grad_accum > 1, tied=arch.tie_word_embeddings,
                              attention=job.attention)
    if len(_TIMELINES) > 8192:
        _TIMELINES.clear()
    _TIMELINES[key] = (prof, out)
    return out


_TIMELINES: dict[tuple, tuple[StepProfile, "TrainActivations"]] = {}


def _train_from_profile(prof: StepProfile, b: int, s: int, *, grad_bytes: int, accumulating: bool,
                        tied: bool, attention: str) -> TrainActivations:
    ckpt = prof.checkpointing
    E, H = prof.embed, prof.head
    inputs = prof.inputs(b, s)
    mask = prof.mask(b, s)
    L = []
    for n, p in prof.layers:
        saved = p.saved(b, s)
        kept = prof.layer_input(b, s) if ckpt == "full" else saved
        L.append((n, p, saved, kept, p.autocast_copies(b, s), p.held(b, s), p.param_grads(b, s)))
    saved_layers = sum(n * kept for n, _, _, kept, _, _, _ in L)
    copies_layers = sum(n * c for n, _, _, _, c, _, _ in L)
    e_saved, h_saved = E.saved(b, s), H.saved(b, s)
    e_copies, h_copies = E.autocast_copies(b, s), H.autocast_copies(b, s)
    e_pg, h_pg = E.param_grads(b, s), H.param_grads(b, s)
    total_pg = e_pg + h_pg + sum(n * pg for n, *_, pg in L)
    scale = grad_bytes / total_pg if total_pg else 0.0
    grads_before = grad_bytes if accumulating else 0

    # ---- forward: inside the last layer, then the head (logits, loss) ----------------------
    best_f = (-1, 0, 0, "")
    act = inputs + e_saved
    tmp = mask + e_copies
    for n, p, saved, kept, copies, held, _ in L:
        a0 = act + (n - 1) * kept
        t0 = tmp + (n - 1) * (copies + held)
        for fa, ft in (p.fwd_points_nosave if ckpt == "full" else p.fwd_points):
            a, t = fa(b, s), ft(b, s)
            if a0 + a + t0 + t > best_f[0]:
                best_f = (a0 + a + t0 + t, a0 + a, t0 + t, "forward")
        act += n * kept
        tmp += n * (copies + held)
    for fa, ft in H.fwd_points:  # (the head's own autocast copies are in its points)
        a, t = act + fa(b, s), tmp + ft(b, s)
        if a + t > best_f[0]:
            best_f = (a + t, a, t, "forward, logits and loss")
    _, fwd_act, fwd_tmp, fwd_where = best_f

    # ---- backward: the loss (the logits spike), the layers in reverse, the embeddings -------
    # The KV cache and the masks die with the forward. Autocast's weight copies are saved by the
    # graph (freed layer by layer) -- unless the layers were checkpointed, then the recompute
    # makes them again one layer at a time.
    best = [-1, 0, 0, 0, ""]

    def consider(a, t, gr, where):
        if a + t + gr > best[0]:
            best[:] = [a + t + gr, a, t, gr, where]

    def walk(points_plain, points_acc, a0, t0, pg0, where, accumulate_into=False):
        if accumulating or accumulate_into:
            for ba, bt, _ in points_acc:
                consider(a0 + ba(b, s), t0 + bt(b, s),
                         grads_before + (0 if accumulating else round(pg0 * scale)), where)
        else:
            for ba, bt, bg in points_plain:
                consider(a0 + ba(b, s), t0 + bt(b, s), round((pg0 + bg(b, s)) * scale), where)

    act = inputs + e_saved + saved_layers + h_saved
    tmp = e_copies + h_copies + (0 if ckpt == "full" else copies_layers)
    pg = 0
    walk(H.bwd_points, H.bwd_points_acc, act, tmp, pg, "start of backward (logits gradient)")
    act -= h_saved
    tmp -= h_copies
    pg += h_pg
    flow = prof.layer_input(b, s)  # the hidden-state gradient passed down the layers
    for n, p, saved, kept, copies, held, lpg in reversed(L):
        for k in sorted({0, n - 1}):
            walk(p.bwd_points, p.bwd_points_acc, act - k * kept,
                 tmp + flow - (0 if ckpt == "full" else k * copies), pg + k * lpg,
                 "backward through the layers")
        act -= n * kept
        if ckpt != "full":
            tmp -= n * copies
        pg += n * lpg
    walk(E.bwd_points, E.bwd_points_acc, act, tmp + flow, pg,
         "end of backward (embedding gradient)", accumulate_into=tied)
    _, bwd_act, bwd_tmp, bwd_grads, bwd_where = best

    saved_all = inputs + e_saved + sum(n * saved for n, _, saved, *_ in L) + h_saved
    kept_all = inputs + e_saved + saved_layers + h_saved
    summary = (f"{_fmt_gb(saved_all)} saved for backward at batch {b} x seq {s}"
               + (f"; {ckpt} checkpointing keeps {_fmt_gb(kept_all)}" if ckpt != "none" else "")
               + f"; {attention} attention")
    return TrainActivations(
        known=True, forward_peak=fwd_act, forward_temporaries=fwd_tmp, forward_detail=fwd_where,
        backward_peak=bwd_act, backward_temporaries=bwd_tmp, backward_grads=bwd_grads,
        backward_detail=bwd_where, summary=summary, saved_bytes=saved_all,
        per_layer_bytes=tuple(saved for _, _, saved, *_ in L), notes=prof.notes)


def _fmt_gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB"


# --------------------------------------------------------------------------------------------------
# Optimizer step


def optimizer_step_temporaries(job: Job, recipe, opt, trainable: int, model: Model, *,
                               shard: int = 1) -> tuple[int, str]:
    """Bytes the optimizer step allocates on top of the states, and what they are.

    torch.optim on CUDA defaults to the ``foreach`` implementation, which works on whole lists of
    tensors: Adam/AdamW materialize ``exp_avg_sq.sqrt()`` for every parameter at once (one more
    state-sized buffer; torch/optim/adam.py ``_multi_tensor_adam``), Adagrad and RMSprop likewise
    (``_foreach_sqrt`` of their running sums). ``fused=True`` and bitsandbytes' 8-bit kernels
    update in place. Mixed-precision recipes step an fp32 master copy, which needs the gradients in
    fp32: a 4-byte copy per trainable parameter exists during the step (DeepSpeed/Megatron style).
    """
    n = -(-trainable // shard)
    parts = []
    total = 0
    state_b = recipe.state_bytes if job.optimizer_states == "auto" else (
        4 if job.optimizer_states == "fp32" else 2)
    if recipe.master_bytes and not job.offload_optimizer:
        total += 4 * n
        parts.append("fp32 gradient copy for the master step")
    if job.offload_optimizer:
        return total, "; ".join(parts) or "optimizer step runs on the host"
    name = opt.name
    if name in ("adam", "adamw", "adagrad", "rmsprop") and not job.fused_optimizer:
        total += state_b * n
        parts.append(f"foreach {name}: a sqrt of the second moment for every parameter")
    elif name == "lion":
        # lion-pytorch's update: exp_avg.clone().mul_(beta1).add(grad, ...).sign_() per tensor
        biggest = max((t.numel for t in model.tensors), default=0) if model.tensors else 0
        total += 2 * state_b * biggest
        parts.append("lion: an update buffer of the largest tensor")
    elif name == "adafactor" and not job.fused_optimizer:
        # torch.optim.Adafactor foreach: the update (grad^2 / row-col factors) per parameter
        total += state_b * n
        parts.append("foreach adafactor: a full-size update buffer")
    return total, "; ".join(parts)


# --------------------------------------------------------------------------------------------------
# Inference: KV cache and the prefill / decode working set


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


@dataclass(frozen=True, kw_only=True)
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
    return Regime(param=4 if fmt.compute_dtype == "fp32" else 2,
                  fp16=fmt.compute_dtype == "fp16")


@lru_cache(maxsize=256)
def _prefill_profile(sp: _Spec, regime: Regime, attention: str, dequant: bool, sdpa_mask: bool,
                     logits_all: bool) -> tuple[LayerProfile, LayerProfile, LayerProfile]:
    """Layer, embeddings and head replayed under torch.inference_mode(): nothing is saved, every
    tensor dies after its last use; what remains is each op's working set."""
    o = _Opts(attention=attention, cache=False, lora=frozenset(), lora_rank=0, lora_dropout=0.0,
              quantized=dequant, frozen=True, sdpa_mask=sdpa_mask)
    g = Graph(regime)
    c = _Ctx(g, sp, o)
    x = g.input(BS * sp.h, regime.param, grad=False, name="hidden")
    mask = g.constant(Form(bss=1), regime.param, "mask") if attention == "eager" else None
    y = _layer(c, x, mask, sp.moe_layers[0] if sp.moe_layers else 0)
    layer = simulate(g, [y], param_grad_dt=0, inference=True)
    g = Graph(regime)
    c = _Ctx(g, sp, o)
    e = simulate(g, [_embed_block(c, g.constant(BS, 8, "input_ids"))], param_grad_dt=0,
                 inference=True)
    g = Graph(regime)
    c = _Ctx(g, sp, o)
    hx = g.input(BS * sp.h, regime.param, grad=False, name="hidden")
    head = simulate(g, [_infer_head(c, hx, logits_all)], param_grad_dt=0, inference=True)
    return layer, e, head


def _infer_head(c: _Ctx, x: Tensor, logits_all: bool) -> Tensor:
    """Final norm and the output head; generate() keeps the last position's logits in fp32."""
    g, sp = c.g, c.sp
    h, V = sp.h, sp.vocab
    if sp.kind == "vision":
        return _vit_classifier(c, x)
    if sp.family == "bert":
        return g.linear(_bert_transform(c, x), c.w(V * h, "decoder"), BS * V, name="decoder")
    x = _final_norm(c, x)
    if logits_all:
        logits = g.linear(x, c.w(V * h, "lm_head"), BS * V, name="lm_head")
    else:
        last = g.index(x, Form(b=h), None, name="last_position")
        logits = g.linear(last, c.w(V * h, "lm_head"), Form(b=V), name="lm_head")
    return g.to(logits, 4)  # next_token_logits.to(float32) in generate()


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
    sp = _spec_cached(arch)
    b = job.batch
    prompt = seq_for(model, job)
    regime = _infer_regime(fmt)
    dequant = fmt.name in ("nf4", "nf4-dq")
    layer, emb, head = _prefill_profile(
        sp, regime, job.attention, dequant, _sliding_mask(arch, sp, job.attention, prompt),
        job.prefill_logits == "all" or sp.kind != "decoder")
    pre = max([a(b, prompt) + t(b, prompt) for a, t in layer.fwd_points]
              + [a(b, prompt) + t(b, prompt) for a, t in emb.fwd_points]
              + [a(b, prompt) + t(b, prompt) for a, t in head.fwd_points])
    if job.attention == "eager" and sp.kind == "decoder":
        pre += b * prompt * prompt * regime.param  # the (b, 1, s, s) mask, built once
    dec = 0
    if sp.kind == "decoder":
        ctx = job.context or prompt
        dec = _decode_working_set(sp, arch, b, ctx, regime.param, job.attention, dequant)
    if sp.kind != "decoder":
        peak, phase = pre, "forward"
    else:
        peak, phase = (pre, "prefill") if pre >= dec else (dec, "decode")
    summary = (f"prefill of {b} x {prompt} tokens {_fmt_gb(pre)}"
               + (f", decode {_fmt_gb(dec)}" if sp.kind == "decoder" else ""))
    notes = []
    if sp.kind == "decoder" and job.prefill_logits == "all":
        notes.append("prefill computes logits for every prompt position (a plain forward); "
                     "generate() and vLLM keep only the last")
    return InferActivations(peak=peak, peak_phase=phase, prefill_bytes=pre, decode_bytes=dec,
                            summary=summary, notes=tuple(notes))


def _decode_working_set(sp: _Spec, arch: Architecture, b: int, ctx: int, dt: int, attention: str,
                        dequant: bool) -> int:
    """One new token per sequence: the residual stream and a layer's intermediates for b tokens,
    the attention over ``ctx`` cached positions (eager: b*heads*ctx scores in fp32 and 16-bit;
    flash-decoding: O(b*heads) partials), transformers' DynamicCache update (torch.cat makes a
    new K/V tensor for the layer while the old one is alive: one layer's cache, duplicated), and
    the next-token logits (16-bit and fp32)."""
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
    w = 0
    if dequant:
        w = max(sp.inter, sp.moe_inter) * h * dt
    logits = b * sp.vocab * (dt + 4)
    return max(b * h * dt * 2 + max(mlp, att + kv_layer) + w, logits + b * h * dt)
