"""One transformer layer per family, op by op, each mirroring the transformers code it names.

The forward is recorded on a :class:`~.symbolic.Graph`; :func:`~.symbolic.simulate` replays it.
A layer is norms, attention (projections, positions, the KV cache a training forward builds, the
attention core of the configured kernel, the output projection) and an MLP or a sparse MoE block,
arranged pre-LN, post-LN or in parallel as the family does it.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from ...errors import InputError
from .spec import DECODER_ROPE, GEMMA, GPT2_LIKE, Opts, Spec
from .symbolic import BS, BSS, ONE, S, Form, Graph, Tensor

__all__ = ["Ctx", "norm", "layernorm", "activation", "transformer_layer"]

class Ctx:
    """What a block is recorded with: the graph, the architecture and the job's options."""

    def __init__(self, g: Graph, sp: Spec, o: Opts) -> None:
        self.g, self.sp, self.o = g, sp, o
        #: Token rows this rank holds of the residual stream: all of them, or 1/sp of the
        #: sequence under Megatron sequence parallelism (norms, dropout and residuals sharded).
        self.rows = BS if o.sp == 1 else BS * Fraction(1, o.sp)
        #: A narrow recipe's quantized copy of each linear input (q, k and v share one)
        self.narrow: dict[int, Tensor] = {}

    def gather(self, x: Tensor) -> Tensor:
        """Entering a column-parallel region: all-gather the sequence shard (SP), else ``x``."""
        if self.o.sp == 1:
            return x
        return self.g.sp_gather(x, BS * self.sp.h)

    def scatter(self, y: Tensor) -> Tensor:
        """Leaving a row-parallel region: reduce-scatter to the sequence shard (SP); without SP
        Megatron all-reduces in place (no buffer of its own)."""
        if self.o.sp == 1:
            return y
        return self.g.sp_scatter(y, self.rows * self.sp.h)

    def w(self, numel: int, name: str = "w") -> Tensor:
        return self.g.param(numel, name, trainable=not self.o.frozen)

    def linear(self, x: Tensor, fan_in: int, fan_out: int, module: str,
               original: bool = False) -> Tensor:
        """A block linear, with a LoRA adapter when targeted (PEFT's forward: base(x) +
        lora_B(lora_A(dropout(x))) * scaling). ``original``: it saves its 16-bit input, not a
        narrow recipe's quantized copy (Megatron-Core's set_save_original_input)."""
        g, o = self.g, self.o
        quant = fan_in * fan_out * o.quantized if (o.quantized and o.frozen) else 0
        x_in = x
        narrow = bool(o.narrow_inputs) and not o.frozen and not original
        if narrow and (x.gathered_from is None or o.narrow_gathered):
            # TE (its shard; gathered again in backward) and torchao's tensorwise up to 0.8 (the
            # gathered FP8 input under TP) save the quantized input for the weight gradient
            x = self.narrow.setdefault(id(x), g.to(x, o.narrow_inputs))
        elif narrow and o.narrow_shard:
            # TE under SP (EngineProfile.narrow_shard): the shard quantized, then gathered; the
            # quantized shard saved, gathered again for the weight gradient
            x = self.narrow.setdefault(id(x), g.sp_gather(g.to(x.gathered_from, o.narrow_inputs),
                                                          x.numel))
        if o.quantized > 2 and o.frozen:
            # bitsandbytes Linear4bit with an fp32 compute dtype: x.to(fp32), the matmul in
            # fp32 against the dequantized weight's fp32 copy, out.to(the input dtype)
            x = g.to(x, 4)
        y = g.linear(x, self.w(fan_in * fan_out, module), BS * fan_out, name=module,
                     quantized=quant)
        if y.dt != x_in.dt and o.quantized > 2:
            y = g.to(y, x_in.dt)
        x = x_in
        if o.lora_rank and (module in o.lora or "all-linear" in o.lora):
            r = o.lora_rank
            xd = g.dropout(x, o.lora_dropout, name=module + ".lora_dropout")
            a = g.linear(xd, g.param(fan_in * r, module + ".lora_A"), BS * r, name=module + ".A")
            bb = g.linear(a, g.param(r * fan_out, module + ".lora_B"), BS * fan_out,
                          name=module + ".B")
            y = g.add(y, g.scale(bb, module + ".scaling"), name=module + ".lora_add")
        return y


def _begin(g: Graph, module: str) -> str:
    """Open one instance of a recompute region named after Megatron-Core's
    ``--recompute-modules`` entry ``module`` (dropped only when the job names it: the profile's
    ``simulate(drop_region=...)``); returns the instance's name. Close it with
    ``g.region = ""``."""
    g.region = f"{module}#{len(g.ops)}"
    return g.region


def _rms_normed(c: Ctx, x: Tensor, name: str) -> Tensor:
    """The part every RMSNorm shares: x.float() * rsqrt(x.float().pow(2).mean(-1) + eps)."""
    g = c.g
    xf = g.to(x, 4)
    p = g.unary_saves_input(xf, name + ".pow", fp32=True)
    m = g.reduce(p, c.rows, name + ".mean")
    r = g.unary_saves_output(g.scale(m, name + ".eps"), name + ".rsqrt", fp32=True)
    return g.mul(xf, r, out=c.rows * c.sp.h, name=name + ".normed")


def _rmsnorm(c: Ctx, x: Tensor, name: str) -> Tensor:
    """LlamaRMSNorm: x.to(fp32); x * rsqrt(x.pow(2).mean(-1) + eps); weight * x.to(input dtype)."""
    g, h = c.g, c.sp.h
    nd = g.to(_rms_normed(c, x, name), x.dt)
    return g.mul(c.w(h, name), nd, out=c.rows * h, name=name)


def _gemma_rmsnorm(c: Ctx, x: Tensor, name: str) -> Tensor:
    """Gemma2RMSNorm: n = norm(x.float()); (n * (1 + weight.float())).type_as(x)."""
    g, h = c.g, c.sp.h
    n = _rms_normed(c, x, name)
    w1 = g.scale(g.to(c.w(h, name), 4), name + ".1+w")
    y = g.mul(n, w1, out=c.rows * h, name=name)
    return g.to(y, x.dt)


def _olmo2_rmsnorm(c: Ctx, x: Tensor, rows, width: int, name: str) -> Tensor:
    """Olmo2RMSNorm (modeling_olmo2.py, transformers 5.x): x.to(fp32); x * rsqrt(x.pow(2)
    .mean(-1) + eps); (weight * x).to(input dtype) -- the weight multiplies the fp32 normalized
    values (LlamaRMSNorm casts them back first), so the product saves them in fp32. Over ``width``
    values per row: the hidden size for the layer norms, heads x head_dim for ``q_norm`` and
    kv_heads x head_dim for ``k_norm``."""
    g = c.g
    xf = g.to(x, 4)
    p = g.unary_saves_input(xf, name + ".pow", fp32=True)
    m = g.reduce(p, rows, name + ".mean")
    r = g.unary_saves_output(g.scale(m, name + ".eps"), name + ".rsqrt", fp32=True)
    n = g.mul(xf, r, out=rows * width, name=name + ".normed")
    return g.to(g.mul(c.w(width, name), n, out=rows * width, name=name), x.dt)


def layernorm(c: Ctx, x: Tensor, name: str) -> Tensor:
    """nn.LayerNorm (native_layer_norm)."""
    return c.g.layer_norm(x, c.rows, c.w(c.sp.h, name), name=name)


def norm(c: Ctx, x: Tensor, name: str) -> Tensor:
    """The family's norm: Gemma-2's RMSNorm, LlamaRMSNorm, or LayerNorm."""
    if c.sp.family in GEMMA:
        return _gemma_rmsnorm(c, x, name)
    if c.sp.family == "olmo2":
        return _olmo2_rmsnorm(c, x, c.rows, c.sp.h, name)
    if c.sp.norm == "rmsnorm":
        return _rmsnorm(c, x, name)
    return layernorm(c, x, name)


def activation(c: Ctx, x: Tensor, name: str) -> Tensor:
    """ACT2FN[hidden_act]: silu / exact gelu / tanh-gelu save their input; relu its output;
    gelu_new is composed of elementwise ops (transformers' NewGELUActivation)."""
    g, act = c.g, c.sp.act
    if c.sp.family == "falcon":
        act = "gelu"  # FalconMLP uses nn.GELU()
    if act == "swiglu_oai":
        act = "silu"  # gpt-oss has no dense MLP; its experts take _swiglu_oai (exact)
    if act in ("silu", "swish", "gelu", "gelu_pytorch_tanh", "gelu_python", "gelu_accurate"):
        return g.unary_saves_input(x, name)
    if act == "relu":
        return g.unary_saves_output(x, name)
    if act == "relu2":
        # ReLUSquaredActivation: relu (saves its output r), then torch.square(r), which is
        # aten::pow(r, 2): on autocast's fp32 list, so under autocast an fp32 copy of r is what
        # it saves and its output is fp32 (down_proj then casts it back)
        r = g.unary_saves_output(x, name + ".relu")
        y = g.unary_saves_input(r, name, fp32=True)
        g.touch(x)  # forward's ``input`` argument stays bound until it returns
        return y
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
    if act == "bloom_gelu":
        # BloomGelu: an autograd.Function that saves its input and computes the tanh GeLU in
        # elementwise ops, x * 0.5 * (1 + tanh(0.79788456 x (1 + 0.044715 x x))): four
        # input-sized temporaries alive at once in the forward (x*0.5, 0.798x, 0.0447x and its
        # product with x), five in bloom_gelu_back (tanh_out, 0.5x, 1 - tanh^2, 0.107x and its
        # product with x) -- three and four beyond the output / the input gradient
        return g.unary_saves_input(x, name, temps=(3, 4))
    if act == "quick_gelu":
        s = g.unary_saves_output(g.scale(x), name + ".sigmoid")
        return g.mul(x, s, name=name)
    raise InputError(f"activation function {act!r} is not modeled (silu, gelu, gelu_new, "
                     "gelu_pytorch_tanh, relu, relu2, quick_gelu are)")


def _eager_core(c: Ctx, q: Tensor, k: Tensor, v: Tensor, *, q_contig: bool, kv_contig: bool,
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


def _sinks_eager(c: Ctx, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
    """gpt-oss's ``eager_attention_forward``: repeat_kv, the scaled scores (+ mask), the learned
    sinks concatenated as one more column (torch.cat promotes to the sinks' dtype), the row max
    subtracted, softmax in that dtype (saved), the sink column dropped (a strided slice, copied
    by ``.to(value.dtype)`` or by matmul's reshape: that copy is what the matmul saves)."""
    g, sp = c.g, c.sp
    heads, d = sp.heads, sp.d
    if heads > sp.kv:
        k = g.expand_copy(k, BS * (heads * d), "k.repeat_kv")
        v = g.expand_copy(v, BS * (heads * d), "v.repeat_kv")
    g.region = "attn_core"
    scores = g.scale(g.matmul(q, k, BSS * heads, "scores"), "scores.scaled")
    if mask is not None:
        scores = g.add(scores, mask, "scores.masked")
    sinks = g.view(c.w(heads, "sinks"), BS * heads)  # expanded over (b, heads, s, 1): a view
    combined = g.cat([scores, sinks], "sinks.cat")
    _made(g, BS * heads, 8, "logits.max_indices")
    shifted = g.scale(combined, "logits-max")
    probs = g.softmax(shifted, dt=shifted.dt, name="softmax")
    p = g.contiguous(probs, "probs[..., :-1]") if probs.dt == v.dt else g.to(probs, v.dt)
    # ``attn_weights`` (the masked scores) is rebound only by that copy's assignment, and
    # ``combined_logits`` (shifted) stays bound until the function returns
    g.touch(scores, shifted)
    g.keep(p)  # returned as attn_weights
    out = g.matmul(p, v, BS * (heads * d), "attn_out", autocast=False)
    g.region = ""
    return g.contiguous(out, "attn_out.t")


@dataclass
class _QKV:
    """Query, key and value, and whether each is laid out (b, heads, s, d) in memory (a batched
    matmul then needs no copy of it)."""

    q: Tensor
    k: Tensor
    v: Tensor
    q_contig: bool
    k_contig: bool
    v_contig: bool
    locals: tuple = ()
    """Other tensors the attention's forward binds to locals (alive until it returns)."""
    region: str = ""
    """MLA: the ``mla_up_proj`` region instance that made q, k and v."""


def _attention(c: Ctx, x: Tensor, mask: Tensor | None, layer: int) -> Tensor:
    """Projections, positions, the KV cache update, the attention core and the output projection,
    per family."""
    g, sp = c.g, c.sp
    if sp.mla:
        qkv = _project_mla(c, c.gather(x))
        out = _mla_core(c, qkv, mask)
        # its outputs are recomputed when the core attention's output gradient arrives
        # (``discard_output_and_register_recompute(core_attn_out)``)
        g.recompute_at_last_op(qkv.region)
        y = c.linear(out, sp.heads * sp.mla[4], sp.h, "o_proj",
                     original=c.o.proj_original or bool(c.o.attn_out_bytes))
        g.touch(qkv.q, qkv.k, qkv.v, out, *qkv.locals)
        return c.scatter(y)
    qkv = _project_qkv(c, c.gather(x), layer)
    if c.o.cache and sp.kind == "decoder":
        _cache_kv(g, qkv)
    out = _attention_core(c, qkv, mask, layer)
    oname = {"gpt2": "c_proj", "gpt_bigcode": "c_proj", "gpt_neox": "dense", "falcon": "dense",
             "bert": "dense", "vit": "dense", "opt": "out_proj",
             "bloom": "dense"}.get(sp.family, "o_proj")
    y = c.linear(out, sp.heads * sp.d, sp.h, oname, original=c.o.proj_original)
    g.touch(qkv.q, qkv.k, qkv.v)  # the attention forward's locals live until it returns
    return c.scatter(y)


def _project_qkv(c: Ctx, x: Tensor, layer: int = 0) -> _QKV:
    """Each family's projections and rotary positions."""
    g, sp = c.g, c.sp
    h, fam = sp.h, sp.family
    qd, kvd = sp.heads * sp.d, sp.kv * sp.d
    if fam == "gpt2":
        qkv = c.linear(x, h, 3 * qd, "c_attn")  # (qd = h, or h / tp on a TP rank)
        q, k, v = g.split(qkv, [BS * qd, BS * qd, BS * qd])
        return _QKV(q, k, v, q_contig=False, k_contig=False, v_contig=False)
    if fam == "gpt_bigcode":
        # c_attn(x).unsqueeze(1).split((embed_dim, kv_dim, kv_dim), dim=3): strided views of the
        # fused projection (one K/V head under multi_query); SDPA takes them as they are
        qkv = c.linear(x, h, qd + 2 * kvd, "c_attn")
        q, k, v = g.split(qkv, [BS * qd, BS * kvd, BS * kvd])
        return _QKV(q, k, v, q_contig=False, k_contig=False, v_contig=False)
    if fam in ("gpt_neox", "phi3"):
        name = "query_key_value" if fam == "gpt_neox" else "qkv_proj"
        qkv = c.linear(x, h, qd + 2 * kvd, name)
        q, k, v = g.split(qkv, [BS * qd, BS * kvd, BS * kvd])
        # partial-rotary implementation: rotate a slice and torch.cat it back (a new tensor)
        q = g.cat([g.add(g.scale(q), g.scale(q), "q.rope")], "q.rope_cat")
        k = g.cat([g.add(g.scale(k), g.scale(k), "k.rope")], "k.rope_cat")
        return _QKV(q, k, v, q_contig=True, k_contig=True, v_contig=False)
    if fam == "bloom":
        # fused_qkv.view(b, s, heads, 3, d)[..., i, :].transpose(1, 2): strided views
        qkv = c.linear(x, h, 3 * qd, "query_key_value")
        q, k, v = g.split(qkv, [BS * qd, BS * qd, BS * qd])
        return _QKV(q, k, v, q_contig=False, k_contig=False, v_contig=False)
    if fam == "falcon":
        # transformers >= 5.25: fused_qkv.view(b, s, -1, d) split into heads (or per K/V group),
        # transposed: strided views of the fused projection; the rotary embedding makes new q and
        # k in that layout, v stays a view (the interface of every other decoder)
        qkv = c.linear(x, h, qd + 2 * kvd, "query_key_value")
        q, k, v = g.split(qkv, [BS * qd, BS * kvd, BS * kvd])
        q = g.add(g.scale(q), g.scale(q), "q.rope")
        k = g.add(g.scale(k), g.scale(k), "k.rope")
        return _QKV(q, k, v, q_contig=False, k_contig=False, v_contig=False)
    names = {"bert": ("query", "key", "value", "dense"),
             "vit": ("query", "key", "value", "dense"),
             "opt": ("q_proj", "k_proj", "v_proj", "out_proj")}.get(
                 fam, ("q_proj", "k_proj", "v_proj", "o_proj"))
    q = c.linear(x, h, qd, names[0])
    k = c.linear(x, h, kvd, names[1])
    v = c.linear(x, h, kvd, names[2])
    if fam == "opt":
        q = g.scale(q, "q.scaled")
    if sp.qk_norm == "rmsnorm":  # Qwen3 / Gemma 3 / GLM-4.5: q_norm, k_norm per head
        q = _head_norm(c, q, sp.heads, "q_norm")
        k = _head_norm(c, k, sp.kv, "k_norm")
    elif sp.qk_norm == "rmsnorm_full":  # OLMo 2: q_norm(q_proj(x)), k_norm(k_proj(x)), whole
        q = _olmo2_rmsnorm(c, q, BS, qd, "q_norm")
        k = _olmo2_rmsnorm(c, k, BS, kvd, "k_norm")
    rope = layer not in sp.nope_layers
    if fam == "llama4_text":
        if rope:  # Llama 4's complex RoPE, then Llama4TextL2Norm (both on RoPE layers only)
            q, k = _complex_rope(g, q, "q.rope"), _complex_rope(g, k, "k.rope")
            if sp.qk_norm == "l2":
                q = _head_norm(c, q, sp.heads, "q_l2norm")
                k = _head_norm(c, k, sp.kv, "k_l2norm")
        elif c.sp.attn_temp:
            # attn_temperature_tuning on NoPE layers: (q * fp32 scales).to(q.dtype)
            scales = g.constant(S, 4, "attn_scales")
            q = g.to(g.mul(q, scales, out=q.numel, name="q.attn_temp"), q.dt)
    elif fam == "olmo2":
        q, k = _fp32_rope(g, q, "q.rope"), _fp32_rope(g, k, "k.rope")
    elif fam in DECODER_ROPE:
        q = g.add(g.scale(q), g.scale(q), "q.rope")   # (q * cos) + (rotate_half(q) * sin)
        k = g.add(g.scale(k), g.scale(k), "k.rope")
    elif fam == "nemotron":
        # NemotronAttention: rotary on the first partial_rotary_factor of each head, then
        # torch.cat((q_embed, q_pass)): a new tensor, as gpt_neox's partial rotary
        q = g.cat([g.add(g.scale(q), g.scale(q), "q.rope")], "q.rope_cat")
        k = g.cat([g.add(g.scale(k), g.scale(k), "k.rope")], "k.rope_cat")
    return _QKV(q, k, v, q_contig=False, k_contig=False, v_contig=False)


def _fp32_rope(g: Graph, x: Tensor, name: str) -> Tensor:
    """OLMo 2's rotary embedding (modeling_olmo2.py, transformers 5.x): Olmo2RotaryEmbedding
    returns cos and sin in fp32 (LlamaRotaryEmbedding casts them to the input's dtype), so
    ``(x * cos) + (rotate_half(x) * sin)`` promotes to fp32 -- two fp32 products (each saves
    only its table), the 16-bit ``rotate_half`` copy between them -- and
    ``apply_rotary_pos_emb`` casts the sum back (``.to(q_type)``)."""
    xc = g.to(x, 4)                       # x * cos: fp32
    xs = g.to(g.scale(x, name + ".rotate_half"), 4)  # rotate_half(x) * sin: fp32
    return g.to(g.add(xc, xs, name), x.dt)


def _rms_width(c: Ctx, x: Tensor, width: int, name: str) -> Tensor:
    """LlamaRMSNorm over ``width`` values per token (MLA's q_a_layernorm, kv_a_layernorm)."""
    g = c.g
    xf = g.to(x, 4)
    p = g.unary_saves_input(xf, name + ".pow", fp32=True)
    m = g.reduce(p, BS, name + ".mean")
    r = g.unary_saves_output(g.scale(m, name + ".eps"), name + ".rsqrt", fp32=True)
    n = g.to(g.mul(xf, r, out=BS * width, name=name + ".normed"), x.dt)
    return g.mul(c.w(width, name), n, out=BS * width, name=name)


def _interleaved_rope(g: Graph, x: Tensor, name: str) -> Tensor:
    """``apply_rotary_pos_emb_interleave``: the even and odd halves (strided views) times cos
    and sin (constants: nothing saved), combined, concatenated into a new tensor."""
    a, b = g.split(x, [x.numel * Fraction(1, 2), x.numel * Fraction(1, 2)])
    lo = g.add(g.scale(a, name + ".a*cos"), g.scale(b, name + ".b*sin"), name + ".lo")
    hi = g.add(g.scale(b, name + ".b*cos"), g.scale(a, name + ".a*sin"), name + ".hi")
    return g.cat([lo, hi], name)


def _project_mla(c: Ctx, x: Tensor) -> _QKV:
    """``DeepseekV3Attention.forward`` up to the attention call: the query through its low-rank
    pair (``q_a_proj``, ``q_a_layernorm``, ``q_b_proj``) or ``q_proj``; the compressed latent and
    the shared rotary key from ``kv_a_proj_with_mqa``, the latent normed; interleaved RoPE on
    the rotary parts; the latents cached as they are (a training forward's DynamicCache); the
    query concatenated; ``expand_kv``: ``kv_b_proj`` of the latent, split into the key's nope
    part and the value (a strided view), the key assembled in a new tensor (two ``copy_``)."""
    g, sp = c.g, c.sp
    h, H = sp.h, sp.heads
    qr, kvr, rope, nope, vd = sp.mla
    # the region of Megatron-Core's ``mla_up_proj`` recompute (multi_latent_attention.py,
    # ``qkv_up_proj_and_rope_apply`` under ``CheckpointWithoutOutput``, NVIDIA/Megatron-LM@
    # d98e8a64): the q and kv up projections with their norms (fused into them:
    # gpt_layer_specs.py, ``column_parallel_layer_norm_linear`` when qk_layernorm), the RoPE
    # and the concatenations, from the compressed latents; q_proj when there is no q_lora_rank
    if qr:
        qa0 = c.linear(x, h, qr, "q_a_proj")
        up = _begin(g, "mla_up_proj")
        q = c.linear(_rms_width(c, qa0, qr, "q_a_layernorm"), qr, H * (nope + rope), "q_b_proj")
    else:
        up = _begin(g, "mla_up_proj")
        q = c.linear(x, h, H * (nope + rope), "q_proj")
    q_pass, q_rot = g.split(q, [BS * (H * nope), BS * (H * rope)])
    g.region = ""
    ckv = c.linear(x, h, kvr + rope, "kv_a_proj_with_mqa")
    latent, k_rot = g.split(ckv, [BS * kvr, BS * rope])
    g.region = up
    latent = _rms_width(c, latent, kvr, "kv_a_layernorm")
    q_rot = _interleaved_rope(g, q_rot, "q.rope")
    k_rot = _interleaved_rope(g, k_rot, "k.rope")
    g.region = ""
    if c.o.cache and sp.kind == "decoder":
        latent, k_rot = g.cat([latent], "latent.cache"), g.cat([k_rot], "k_rot.cache")
        g.hold(latent)
        g.hold(k_rot)
    g.region = up
    query = g.cat([q_pass, q_rot], "query.cat")
    kv = c.linear(latent, kvr, H * (nope + vd), "kv_b_proj")
    k_nope, v = g.split(kv, [BS * (H * nope), BS * (H * vd)])
    # new_empty + copy_ of k_nope and of k_rot expanded to every head
    key = g.expand_copy(k_nope, BS * (H * (nope + rope)), "key.copy_")
    g.ops[-1].inputs.append(k_rot)
    g.region = ""
    return _QKV(query, key, v, q_contig=True, k_contig=True, v_contig=False,
                locals=(q, ckv, q_rot, kv), region=up)  # (the latents are the cache: counted there)


def _mla_core(c: Ctx, t: _QKV, mask: Tensor | None) -> Tensor:
    """MLA's attention: eager through the generic core, or SDPA with the query/key head size
    ``nope + rope`` and the value's ``v_head_dim`` (the output has the value's size).

    CUDA's flash kernel needs one head size for q, k and v (``check_head_dim_size_flash`` in
    PyTorch's ``sdp_utils.cpp``), so where ``v_head_dim`` differs from ``nope + rope`` (every
    DeepSeek config: 128 against 192) SDPA runs the memory-efficient kernel: no fp32 dq
    accumulator in its backward, and an output already laid out (b, s, heads, v), which
    transformers' ``transpose(1, 2).contiguous()`` does not copy."""
    g, sp = c.g, c.sp
    _, _, rope, nope, vd = sp.mla
    if c.o.attention == "eager":
        return _eager_core(c, t.q, t.k, t.v, q_contig=True, kv_contig=False, softmax_fp32=True,
                           dropout=sp.attn_dropout, mask=mask)
    g.region = "attn_core"
    if vd != nope + rope:
        out = g.sdpa_efficient(t.q, t.k, t.v, sp.heads, vd, out_dt=c.o.attn_out_bytes)
        g.region = ""
        return out
    out = g.sdpa_flash(t.q, t.k, t.v, sp.heads, vd, kv_heads=sp.heads, out_copy_layout=True)
    g.region = ""
    return g.contiguous(out, "attn_out.t")


def _complex_rope(g: Graph, x: Tensor, name: str) -> Tensor:
    """Llama 4's ``apply_rotary_emb``: ``view_as_complex(x.float())`` times the complex
    ``freqs_cis`` (a constant: the product saves only it), ``view_as_real``, ``type_as(x)``."""
    xf = g.to(x, 4)
    freqs = g.constant(ONE, 8, name + ".freqs_cis")
    y = g.mul(xf, freqs, out=x.numel, name=name)
    return g.to(y, x.dt)


def _head_norm(c: Ctx, x: Tensor, heads: int, name: str) -> Tensor:
    """An RMSNorm over each head's ``head_dim`` values (the rows are b*s*heads): Qwen3's
    ``q_norm``/``k_norm`` (LlamaRMSNorm's ops, a weight of head_dim), Gemma 3's (Gemma's
    ``(1 + weight)`` in fp32) or Llama 4's weightless ``Llama4TextL2Norm``
    (``x.float() * rsqrt(mean(x^2) + eps)``, then ``type_as(x)``)."""
    g, d = c.g, c.sp.d
    rows, out = BS * heads, BS * (heads * d)
    xf = g.to(x, 4)
    p = g.unary_saves_input(xf, name + ".pow", fp32=True)
    m = g.reduce(p, rows, name + ".mean")
    r = g.unary_saves_output(g.scale(m, name + ".eps"), name + ".rsqrt", fp32=True)
    n = g.mul(xf, r, out=out, name=name + ".normed")
    if c.sp.qk_norm == "l2":
        return g.to(n, x.dt)
    if c.sp.family in GEMMA:
        y = g.mul(n, g.scale(g.to(c.w(d, name), 4), name + ".1+w"), out=out, name=name)
        return g.to(y, x.dt)
    return g.mul(c.w(d, name), g.to(n, x.dt), out=out, name=name)


def _cache_kv(g: Graph, t: _QKV) -> None:
    """The DynamicCache a training forward builds: K and V copied by torch.cat, held."""
    t.k = g.cat([t.k], "k.cache")
    t.v = g.cat([t.v], "v.cache")
    g.hold(t.k)
    g.hold(t.v)
    t.k_contig = t.v_contig = True


def _attention_core(c: Ctx, t: _QKV, mask: Tensor | None, layer: int = 0) -> Tensor:
    """The attention core of the configured kernel: eager (or a math path), SDPA with an explicit
    mask, or SDPA/flash."""
    g, sp, o = c.g, c.sp, c.o
    if o.attention == "eager":
        if sp.family == "bloom":  # the only path (models.EAGER_ONLY)
            return _bloom_eager(c, t, mask)
        if sp.sinks:
            return _sinks_eager(c, t.q, t.k, t.v, mask)
        return _eager_core(c, t.q, t.k, t.v, q_contig=t.q_contig,
                           kv_contig=t.k_contig and t.v_contig,
                           softmax_fp32=sp.family not in ("gpt2", "bert"),
                           dropout=sp.attn_dropout, mask=mask)
    if o.sdpa_mask and (not sp.local_layers or layer in sp.local_layers):
        return _sdpa_masked(c, t)
    if (sp.kv < sp.heads and not g.r.autocast and g.r.param == 4
            and o.model_code != "torchtune"):
        return _math_sdpa_gqa(c, t.q, t.k, t.v)
    kv_heads = sp.kv
    if o.model_code == "torchtune" and sp.kv < sp.heads:
        # torchtune's MultiHeadAttention: k.unsqueeze(2).expand(...).flatten(1, 2) (and v):
        # K and V copied to every query head before the attention kernel, which saves them
        t.k = g.expand_copy(t.k, BS * (sp.heads * sp.d), "k.expand")
        t.v = g.expand_copy(t.v, BS * (sp.heads * sp.d), "v.expand")
        kv_heads = sp.heads
    g.region = "attn_core"
    out = g.sdpa_flash(t.q, t.k, t.v, sp.heads, sp.d, kv_heads=kv_heads,
                       out_copy_layout=t.q_contig)
    g.region = ""
    if t.q_contig:
        out = g.contiguous(out, "attn_out.t")  # flash's output follows q's memory layout
    return out


def _sdpa_masked(c: Ctx, t: _QKV) -> Tensor:
    """A sliding-window mask must be passed to SDPA: flash cannot take it, CUDA runs the
    memory-efficient kernel, which saves the mask (once per forward, shared by the layers), and
    transformers expands K/V with repeat_kv (GQA in SDPA needs a mask-free call)."""
    g, sp = c.g, c.sp
    qd = sp.heads * sp.d
    kv_heads = sp.heads
    if sp.kv == 1:
        # one K/V head: repeat_kv's expand(...).reshape(...) merges a size-1 dimension with the
        # expanded one, a view (no copy); the kernel's dK/dV are per query head in its backward
        kv_heads = 1
    elif sp.kv < sp.heads:
        t.k = g.expand_copy(t.k, BS * qd, "k.repeat_kv")
        t.v = g.expand_copy(t.v, BS * qd, "v.repeat_kv")
    # SDPA converts the boolean mask to an additive float mask in the query dtype on every
    # call (convert_boolean_attn_mask), and the memory-efficient kernel saves it.
    fmask = g.saved_const(Form(bss=1), g.r.autocast or t.q.dt, "sdpa.float_mask")
    g.region = "attn_core"
    out = g.sdpa_flash(t.q, t.k, t.v, sp.heads, sp.d, kv_heads=kv_heads,
                       out_copy_layout=t.q_contig, extra_saved=[fmask])
    g.region = ""
    return out


def _math_sdpa_gqa(c: Ctx, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """fp32 grouped-query attention through SDPA: flash takes only 16-bit inputs and the
    memory-efficient kernel only equal head counts (``check_batch_size_and_num_heads_dense``
    in ``sdp_utils.cpp``), so CUDA runs the math composite (``_scaled_dot_product_attention_
    math`` in ``attention.cpp``) with ``enable_gqa``: q scaled, K and V repeated to every query
    head, the scaled K transposed and copied for the batched matmul, the causal mask added in
    place, the softmax saved; transformers then copies the output back to (b, s, heads, d)."""
    g, sp = c.g, c.sp
    heads, d = sp.heads, sp.d
    g.region = "attn_core"
    qs = g.scale(q, "q.math_scale")
    kr = g.expand_copy(k, BS * (heads * d), "k.repeat_interleave")
    vr = g.expand_copy(v, BS * (heads * d), "v.repeat_interleave")
    kt = g.contiguous(g.scale(kr, "k.math_scale"), "k.math_t")
    scores = g.matmul(qs, kt, BSS * heads, "scores", autocast=False)
    probs = g.softmax(scores, dt=4, name="softmax")
    out = g.matmul(probs, vr, BS * (heads * d), "attn_out", autocast=False)
    g.region = ""
    return g.contiguous(out, "attn_out.t")


def _bloom_eager(c: Ctx, t: _QKV, mask: Tensor | None) -> Tensor:
    """BloomAttention: Q, K and V reshaped to (b heads, s, d) -- a copy of each strided view
    (K and V are the cache's contiguous copies when one is built) -- ``alibi.baddbmm(q, k^T)``
    (the ALiBi bias added in the matmul; it saves q and k), the mask added, the softmax in fp32
    (saved), cast back to the query dtype, dropout, ``bmm`` with V (saves both), the heads
    merged by a copy. The (b heads, 1, s) ALiBi tensor is built once per forward (the mask
    line of the profile)."""
    g, sp = c.g, c.sp
    heads, d = sp.heads, sp.d
    q = g.contiguous(t.q, "q.reshape")
    k = t.k if t.k_contig else g.contiguous(t.k, "k.reshape")
    v = t.v if t.v_contig else g.contiguous(t.v, "v.reshape")
    g.region = "attn_core"
    raw = scores = g.matmul(q, k, BSS * heads, "alibi.baddbmm")
    if mask is not None:
        scores = g.add(scores, mask, "scores.masked")
    probs = g.softmax(scores, dt=4, name="softmax")
    probs = g.to(probs, q.dt)  # .to(query_layer.dtype)
    probs = g.dropout(probs, sp.attn_dropout, "attn_dropout")
    g.keep(probs)  # returned as attn_weights, bound in BloomBlock.forward until it returns
    out = g.matmul(probs, v, BS * (heads * d), "attn_out")
    g.region = ""
    # attention_scores and the masked attn_weights stay bound until the forward returns
    g.touch(q, k, v, raw, scores)
    return g.contiguous(out, "merge_heads")


def _mlp(c: Ctx, x: Tensor) -> Tensor:
    """The dense MLP (column-parallel up/gate, row-parallel down under TP), the region of
    Megatron-Core's ``mlp`` recompute (transformer_layer.py, ``tensor_parallel.checkpoint`` of
    the whole MLP from the pre-MLP norm's output, dense layers only; NVIDIA/Megatron-LM@d98e8a64)."""
    g = c.g
    _begin(g, "mlp")
    y = _mlp_body(c, c.gather(x))
    g.region = ""
    return c.scatter(y)


def _mlp_body(c: Ctx, x: Tensor) -> Tensor:
    g, sp = c.g, c.sp
    h, inter, fam = sp.h, sp.inter, sp.family
    if fam == "phi3":
        gu = c.linear(x, h, 2 * inter, "gate_up_proj")
        gate, up = g.split(gu, [BS * inter, BS * inter])
        y = g.mul(up, activation(c, gate, "act"), name="act*up")
        return c.linear(y, inter, h, "down_proj")
    if fam in DECODER_ROPE:
        gate = c.linear(x, h, inter, "gate_proj")
        up = c.linear(x, h, inter, "up_proj")
        y = g.mul(activation(c, gate, "act"), up, name="act*up")
        return c.linear(y, inter, h, "down_proj")
    names = {"gpt2": ("c_fc", "c_proj"), "gpt_bigcode": ("c_fc", "c_proj"),
             "gpt_neox": ("dense_h_to_4h", "dense_4h_to_h"),
             "falcon": ("dense_h_to_4h", "dense_4h_to_h"), "opt": ("fc1", "fc2"),
             "bloom": ("dense_h_to_4h", "dense_4h_to_h"),
             "bert": ("intermediate.dense", "output.dense"),
             "vit": ("intermediate.dense", "output.dense"),
             "nemotron": ("up_proj", "down_proj")}[fam]
    y = activation(c, c.linear(x, h, inter, names[0]), "act")
    return c.linear(y, inter, h, names[1])


def _moe(c: Ctx, x: Tensor) -> Tensor:
    """The MoE block (gathered and scattered like the MLP under SP)."""
    return c.scatter(_moe_body(c, c.gather(x)))


def _llama4_moe(c: Ctx, x: Tensor) -> Tensor:
    """``Llama4TextMoe.forward``: every token through every expert, weighted before the experts.

    ``Llama4Router``: the logits, top-k of them, scattered into a ``full_like(-inf)`` (the
    scatter saves the indices), sigmoid of its fp32 copy (saved) cast back; the tokens repeated
    once per expert and multiplied by their (mostly zero) scores -- the product saves the
    repeated copy and the scores; two ``torch.bmm`` over all (expert, token) rows around the
    gated activation; the shared expert, and the experts' rows summed into its output in place.
    """
    g, sp = c.g, c.sp
    h, E, k, I = sp.h, sp.experts, sp.top_k, sp.moe_inter
    E_rank = E // c.o.ep
    logits = g.linear(x, c.w(E * h, "router"), BS * E, name="router")
    idx = _made(g, BS * k, 8, "router.topk_indices")
    top = g.index(logits, BS * k, idx, name="router.topk")
    full = g.index(top, BS * E, idx, name="router.scatter")
    scores = g.to(g.unary_saves_output(g.to(full, 4), "router.sigmoid"), full.dt)
    rep = g.expand_copy(x, BS * (E_rank * h), "experts.repeat")
    routed = g.mul(rep, scores, out=BS * (E_rank * h), name="experts.routed_in")
    gu = g.linear(routed, c.w(E_rank * h * 2 * I, "experts.gate_up_proj"), BS * (E_rank * 2 * I),
                  name="experts.bmm_gate_up")
    gate, up = g.split(gu, [BS * (E_rank * I), BS * (E_rank * I)])
    act = _begin(g, "moe_act")  # as in _grouped_mm_experts
    y = g.mul(up, activation(c, gate, "experts.act"), name="experts.up*act")
    g.region = ""
    down = g.linear(y, c.w(E_rank * I * h, "experts.down_proj"), BS * (E_rank * h),
                    name="experts.bmm_down")
    g.recompute_at_last_op(act)
    shared = _shared_expert(c, x)
    out = g.add(shared, g.reduce(down, BS * h, name="experts.sum"), "moe.add_")
    # ``routed_in`` is bound in Llama4TextMoe.forward (and is the experts' argument) until it
    # returns; so are the router's outputs and the experts' rows
    g.touch(x, logits, scores, routed, down)
    return out


def _moe_body(c: Ctx, x: Tensor) -> Tensor:
    """A sparse MoE block as transformers 5 runs it (``<Family>SparseMoeBlock.forward``): the
    router, the routed experts (the default ``grouped_mm`` implementation, dropless: every
    token's k choices are computed, however unevenly they fall on experts -- transformers has no
    capacity factor), and a shared expert before (Qwen-MoE) or after (DeepSeek-V3) them.

    The block's input, the router logits (bound to ``_``) and the top-k weights and indices are
    locals of the block's forward, alive until it returns."""
    g, sp = c.g, c.sp
    if sp.family == "llama4_text":
        return _llama4_moe(c, x)
    shared = _shared_expert(c, x) if sp.shared_inter and sp.shared_first else None
    logits, top, idx = _router(c, x)
    experts = _megatron_experts if c.o.experts == "megatron" else _grouped_mm_experts
    out = experts(c, x, top, idx)
    if sp.shared_inter:
        if shared is None:
            shared = _shared_expert(c, x)
        if sp.shared_gate:
            # F.sigmoid(self.shared_expert_gate(x)) * shared_expert_output, after the experts
            # (inside Megatron-Core's SharedExpertMLP: part of its shared_experts recompute)
            _begin(g, "shared_experts")
            gate_logit = g.linear(x, c.w(sp.h, "shared_expert_gate"), BS,
                                  name="shared_expert_gate")
            sgate = g.unary_saves_output(gate_logit, "shared.sigmoid")
            shared = g.mul(sgate, shared, out=BS * sp.h, name="shared.gated")
            g.region = ""
        out = g.add(out, shared, "moe.sum")
    g.touch(x, logits, top, idx)
    return out


def _made(g: Graph, numel, dt: int, name: str) -> Tensor:
    """A tensor an op makes that no gradient flows through (indices, counts, masks)."""
    t = g.saved_const(numel, dt, name)
    g._op(name, [], [t])
    return t


def _router(c: Ctx, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``<Family>TopKRouter.forward``: the logits, the top-k weights and their indices.

    softmax (Mixtral, Qwen-MoE): F.linear, softmax in fp32 (of ``logits.float()``, or with
    ``dtype=float32``), torch.topk, the optional in-place renormalization (autograd saves the
    sum and a clone of the values it overwrites), the optional cast back to the logits' dtype.
    sigmoid (DeepSeek-V3, GLM-4.5): fp32 logits, sigmoid scores, + the correction bias, the
    group mask (top-2 per group summed, top ``topk_group`` groups, scattered, expanded and
    masked_fill'ed over the scores), top-k, the weights gathered from the scores, renormalized
    and scaled by ``routed_scaling_factor``. topk_softmax (gpt-oss): top-k of the logits, softmax
    over the k in their dtype."""
    g, sp = c.g, c.sp
    E, k = sp.experts, sp.top_k
    # Megatron-Core's router_gating_linear saves the input as it comes (16-bit) and runs the
    # GEMM in moe_router_dtype: fp32 logits from a 16-bit saved input (moe/router.py gating,
    # moe/moe_utils.py RouterGatingLinearFunction.forward, NVIDIA/Megatron-LM@0d8e0714 lines
    # 945-975; the same at b0cc2706)
    megatron = c.o.experts == "megatron"
    xin = g.to(x, 4) if sp.router_fp32 == "input" and not megatron else x
    w = c.w(E * sp.h, "router")
    # (DeepSeek-V2 keeps gate.weight in fp32, _keep_in_fp32_modules_strict: no copy)
    cast_w = sp.router_fp32 == "input" and sp.router != "softmax_v2" and not megatron
    logits = g.linear(xin, g.to(w, 4) if cast_w else w, BS * E, name="router")
    if megatron and sp.router_fp32 == "input":
        logits = g.to(logits, 4)
    if sp.router == "topk_softmax":
        idx = _made(g, BS * k, 8, "topk.indices")
        top = g.index(logits, BS * k, idx, name="topk")
        return logits, g.softmax(top, dt=top.dt, name="router.softmax"), idx
    if sp.router == "softmax_v2":
        return (logits, *_router_v2(g, sp, logits))
    if sp.router == "sigmoid":
        scores = g.unary_saves_output(logits, "router.sigmoid")
        choice = g.scale(scores, "router.score_bias") if sp.score_bias else scores
        choice = _group_limit(g, choice, sp.groups)  # run whatever n_group is (n_group 1 too)
        idx = _made(g, BS * k, 8, "topk.indices")
        top = g.index(scores, BS * k, idx, name="router.gather")
    else:
        f32 = g.to(logits, 4) if sp.router_fp32 == "logits" else logits
        probs = g.softmax(f32, dt=4, name="router.softmax")
        idx = _made(g, BS * k, 8, "topk.indices")
        top = g.index(probs, BS * k, idx, name="topk")
    if sp.norm_topk:
        # router_top_value /= router_top_value.sum(-1, keepdim=True): an in-place division
        ssum = g.reduce(top, BS, name="topk.sum")
        if sp.router == "sigmoid":
            ssum = g.scale(ssum, "topk.sum+eps")
        if top.grad:
            top = g.contiguous(top, "topk.clone")
        top = g.mul(top, ssum, out=BS * k, name="topk.renorm")
    if sp.routed_scale:
        top = g.scale(top, "topk.routed_scale")
    if sp.router_cast_back:
        top = g.to(top, logits.dt)
    return logits, top, idx


def _router_v2(g: Graph, sp: Spec, logits: Tensor) -> tuple[Tensor, Tensor]:
    """``DeepseekV2TopkRouter.forward`` after its fp32 logits: softmax in fp32; greedy: top-k of
    every expert; ``group_limited_greedy``: each group's best score (``max``: values and
    indices), the top ``topk_group`` groups (values and indices), ``zeros_like`` scattered in
    place, expanded to every expert (a copy), ``.bool()`` and its negation, masked_fill (a new
    tensor), then top-k; the weights always times ``routed_scaling_factor`` (a new tensor)."""
    scores = g.softmax(logits, dt=4, name="router.softmax")
    n_group, topk_group = sp.groups
    choice = scores
    if n_group:
        E = sp.experts
        gmax = _made(g, BS * n_group, 4, "group.max")
        _made(g, BS * n_group, 8, "group.max.indices")
        _made(g, BS * topk_group, 4, "group.topk")
        _made(g, BS * topk_group, 8, "group.topk.indices")
        gm = g.scale(gmax, "group.mask")
        sm = g.expand_copy(gm, BS * E, "group.score_mask")
        sb = _made(g, BS * E, 1, "group.score_mask.bool")
        neg = _made(g, BS * E, 1, "group.not_mask")
        g.touch(sm, sb, neg)
        choice = g.scale(scores, "group.masked_fill")
    idx = _made(g, BS * sp.top_k, 8, "topk.indices")
    top = g.index(choice, BS * sp.top_k, idx, name="topk")
    return g.scale(top, "topk.routed_scale"), idx


def _group_limit(g: Graph, choice: Tensor, groups: tuple[int, int]) -> Tensor:
    """DeepSeek-V3's group-limited choice: the best two scores of each group summed, the top
    groups picked, their mask scattered, expanded to every expert (a copy) and applied with
    masked_fill (a new tensor); the boolean mask and its negation are made on the way."""
    n_group, topk_group = groups
    E = choice.numel
    pair = _made(g, BS * (2 * n_group), choice.dt, "group.top2")
    _made(g, BS * (2 * n_group), 8, "group.top2.indices")
    gs = g.reduce(pair, BS * n_group, name="group.sum")
    _made(g, BS * (2 * topk_group), 8, "group.topk")
    gm = g.scale(gs, "group.mask")
    sm = g.expand_copy(gm, E, "group.score_mask")
    neg = _made(g, E * 1, 1, "group.not_mask")
    g.touch(pair, sm, neg)
    return g.scale(choice, "group.masked_fill")


def _grouped_mm_experts(c: Ctx, x: Tensor, top: Tensor, idx: Tensor) -> Tensor:
    """``grouped_mm_experts_forward`` (transformers/integrations/moe.py): the b*s*k
    (token, expert) pairs sorted by expert (torch.sort: ids and permutation), each pair's token
    row gathered (``hidden_states[perm // k]``) and its weight (``sample_weights[perm]``), the
    histogram and cumulative offsets of the ids, two grouped matmuls around the gated
    activation (the input cast to the weights' dtype: grouped_mm is not autocast-enabled), the
    weighting, the inverse permutation (``empty_like`` + an ``arange`` scattered into it), the
    rows put back in token order, summed over k and cast to the input dtype. Its locals -- the
    sorted ids, the permutation, the gathered rows, their weights, the histogram input, the
    down projection and the re-ordered rows -- live until it returns. Under expert parallelism
    a rank holds experts / ep of the weights (its dispatch and combine buffers are counted with
    the parallel layout, :mod:`gpuplan.memory.parallel`). Under a capacity factor (Megatron's
    drop-and-pad) every row-wise tensor of the experts has ``b x s x k x cf`` rows, the padded
    capacity (the ceiling's at most one row per expert is left out of the formula)."""
    g, sp = c.g, c.sp
    h, E, k, I = sp.h, sp.experts, sp.top_k, sp.moe_inter
    E_rank = E // c.o.ep
    cf = c.o.capacity_factor
    S = BS * k if cf is None else BS * (k * cf)
    ids_g = _made(g, S, 8, "experts.sorted_ids")
    perm = _made(g, S, 8, "perm")
    pk = _made(g, S, 8, "perm//k")
    sel = g.index(x, S * h, pk, name="experts.gather")
    g.ops[-1].live = (pk,)
    sw = g.index(top, S, perm, name="experts.sample_weights")
    hist = _made(g, S, 4, "experts.histc_input")
    counts = _made(g, ONE * E, 4, "experts.tokens_per_expert")
    offsets = _made(g, ONE * E, 4, "offsets")
    sel_w = g.to(sel, g.r.param)  # grouped_mm is not autocast-enabled: the weights' dtype
    proj = g.linear(sel_w, c.w(E_rank * 2 * I * h, "experts.gate_up_proj"), S * (2 * I),
                    name="experts.gate_up", autocast=False)
    g._op("offsets", [], [], saved=[offsets])
    bias = None
    if sp.expert_bias:  # gate_up_proj_bias[expert_ids_g]: gathered per row, added in place
        bias = g.index(c.w(E_rank * 2 * I, "experts.gate_up_proj_bias"), S * (2 * I), ids_g,
                       name="experts.gate_up_bias")
    gate, up = g.split(proj, [S * I, S * I])
    act, y = _experts_act(c, gate, up)
    # the projection is bound to ``proj_out`` until the gate returns; the bias to
    # ``selected_biases`` until the down projection's bias replaces it
    g.touch(proj, *([bias] if bias is not None else []))
    down = g.linear(y, c.w(E_rank * I * h, "experts.down_proj"), S * h, name="experts.down",
                    autocast=False)
    g.recompute_at_last_op(act)
    if sp.expert_bias:
        bias = g.index(c.w(E_rank * h, "experts.down_proj_bias"), S * h, ids_g,
                       name="experts.down_bias")
        g.touch(bias)
    weighted = g.mul(down, sw, out=S * h, name="experts.weighted")
    inv_perm = _made(g, S, 8, "inv_perm")
    ar = _made(g, S, 8, "arange")
    g.touch(ar)
    back = g.index(weighted, S * h, inv_perm, name="experts.unpermute")
    out = g.to(g.reduce(back, BS * h, name="experts.sum"), x.dt)
    g.touch(sel, ids_g, perm, sw, hist, counts, offsets, down, inv_perm, back)
    return out


def _megatron_experts(c: Ctx, x: Tensor, top: Tensor, idx: Tensor) -> Tensor:
    """Megatron-Core's routed experts under the megatron engine (``EngineProfile.moe_experts``,
    at NVIDIA/Megatron-LM@0d8e0714, the Megatron-Bridge v0.2.0 pin): the dispatcher's permute
    of the ``b*s*k`` (token, expert) rows and their probs (moe_utils.permute, fused or not,
    saves only its index map), Transformer Engine's GroupedLinear fc1 (saving its input for the
    weight gradient: quantized under a narrow recipe, else the 16-bit rows), the fused weighted
    SwiGLU (the probs applied in the activation: WeightedSwiGLUFunction saves its input and the
    probs; experts.py TEGroupedMLP.forward), fc2 saving its input the same way, and the
    unpermute, which saves nothing but the map: no copy of the gathered rows and no fc2 output
    is kept, unlike transformers' (:func:`_grouped_mm_experts`). Under ``moe_act`` recompute
    (CheckpointWithoutOutput of the activation) fc2's input is discarded and recomputed. The
    all-to-all buffers are the layout's (:mod:`gpuplan.memory.parallel`)."""
    g, sp, o = c.g, c.sp, c.o
    h, k, I = sp.h, sp.top_k, sp.moe_inter
    E_rank = sp.experts // o.ep
    cf = o.capacity_factor
    S = BS * k if cf is None else BS * (k * cf)
    row_map = _made(g, S, 4, "experts.row_id_map")  # int32, one entry a permuted row
    rows = g.index(x, S * h, row_map, name="experts.permute")
    probs = g.index(top, S, row_map, name="experts.permuted_probs")
    fc1_in = g.to(rows, o.narrow_inputs) if o.narrow_inputs else rows
    proj = g.linear(fc1_in, c.w(E_rank * 2 * I * h, "experts.linear_fc1"), S * (2 * I),
                    name="experts.linear_fc1", autocast=False)
    if proj.dt != rows.dt:
        proj = g.to(proj, rows.dt)
    if o.moe_act_narrow:  # DeepSeek-V3's storage: the SwiGLU input cached narrow (sec. 3.3.3)
        proj = g.quantize(proj, o.moe_act_narrow)
    gate, up = g.split(proj, [S * I, S * I])
    act, y = _experts_act(c, gate, up)
    g.region = act  # the weighting is part of the fused activation (and of its recompute)
    # (in fp32 where the probs are, cast back to the activation's dtype: one fused kernel)
    y = g.to(g.mul(y, probs, out=S * I, name="experts.weighted"), y.dt)
    # under moe_act with a narrow recipe fc2 saves the 16-bit input it is given
    # (set_save_original_input(linear_fc2), experts.py lines 826-833 @0d8e0714), which the
    # recompute discards: its quantized copy is part of the region, never kept
    fc2_in = g.to(y, o.narrow_inputs) if o.narrow_inputs else y
    g.region = ""
    down = g.linear(fc2_in, c.w(E_rank * I * h, "experts.linear_fc2"), S * h,
                    name="experts.linear_fc2", autocast=False)
    g.recompute_at_last_op(act)
    out = g.index(down, BS * h, row_map, name="experts.unpermute")
    return out if out.dt == x.dt else g.to(out, x.dt)


def _experts_act(c: Ctx, gate: Tensor, up: Tensor) -> tuple[str, Tensor]:
    """The experts' gated activation, the region of Megatron-Core's ``moe_act`` recompute
    (moe/experts.py, ``CheckpointWithoutOutput`` of the activation and the GLU product; its
    output, the down projection's input, discarded and recomputed when that projection's
    output gradient arrives; NVIDIA/Megatron-LM@d98e8a64). Returns the region and the output."""
    g = c.g
    act = _begin(g, "moe_act")
    if c.sp.act == "swiglu_oai":
        y = _swiglu_oai(g, gate, up)
    else:
        y = g.mul(activation(c, gate, "experts.act"), up, name="experts.act*up")
    g.region = ""
    return act, y


def _swiglu_oai(g: Graph, gate: Tensor, up: Tensor) -> Tensor:
    """gpt-oss's ``GptOssExperts._apply_gate``: gate and up are strided halves of the grouped
    projection; ``clamp`` of each saves its input (the projection), then ``gate *
    sigmoid(gate * alpha)`` (the sigmoid saves its output, the product both factors) and
    ``(up + 1) * glu`` (saves both); the clamped halves and ``glu`` are locals, alive until the
    gate returns."""
    gc = g.unary_saves_input(gate, "experts.gate.clamp")
    uc = g.unary_saves_input(up, "experts.up.clamp")
    sig = g.unary_saves_output(g.scale(gc, "experts.gate*alpha"), "experts.sigmoid")
    glu = g.mul(gc, sig, name="experts.glu")
    out = g.mul(g.scale(uc, "experts.up+1"), glu, name="experts.gated")
    g.touch(gc, uc, glu)  # the locals ``gate``, ``up`` and ``glu`` are bound until it returns
    return out


def _shared_expert(c: Ctx, x: Tensor) -> Tensor:
    """The shared expert: a dense gated MLP over every token (``<Family>MLP``)."""
    g, sp = c.g, c.sp
    h, si = sp.h, sp.shared_inter
    # Megatron-Core's ``shared_experts`` recompute: ``tensor_parallel.checkpoint`` of the
    # shared expert MLP (moe_layer.py, NVIDIA/Megatron-LM@d98e8a64), its gate included
    _begin(g, "shared_experts")
    sg = c.linear(x, h, si, "shared_expert.gate_proj")
    su = c.linear(x, h, si, "shared_expert.up_proj")
    if c.o.moe_act_narrow:  # DeepSeek-V3's storage: the MoE's SwiGLU inputs cached narrow
        sg, su = g.quantize(sg, c.o.moe_act_narrow), g.quantize(su, c.o.moe_act_narrow)
    sy = g.mul(activation(c, sg, "shared.act"), su, name="shared.act*up")
    out = c.linear(sy, si, h, "shared_expert.down_proj")
    g.region = ""
    return out


def transformer_layer(c: Ctx, x: Tensor, mask: Tensor | None, layer: int) -> Tensor:
    """One transformer block, pre-LN / post-LN / parallel as the family does it."""
    g, sp = c.g, c.sp
    fam = sp.family
    moe = sp.experts and layer in sp.moe_layers
    p = sp.hidden_dropout
    g.keep(x)  # the caller's loop variable holds the layer input until the layer returns
    if fam == "bert":  # post-LN
        a = g.dropout(_attention(c, x, mask, layer), p, "attn.dropout")
        x1 = layernorm(c, g.add(a, x, "residual1"), "attention.output.LayerNorm")
        m = g.dropout(_mlp(c, x1), p, "mlp.dropout")
        return layernorm(c, g.add(m, x1, "residual2"), "output.LayerNorm")
    if fam == "gpt_neox" and sp.parallel:
        a = g.dropout(_attention(c, norm(c, x, "input_layernorm"), mask, layer), p, "attn.dropout")
        m = g.dropout(_mlp(c, norm(c, x, "post_attention_layernorm")), p, "mlp.dropout")
        return g.add(g.add(m, a, "residual_am"), x, "residual")
    if fam == "falcon" and sp.parallel:
        n = norm(c, x, "input_layernorm")
        a = _attention(c, n, mask, layer)
        m = _mlp(c, n)
        return g.add(g.add(m, a, "residual_am"), x, "residual")
    if fam == "bloom":
        # BloomBlock: dropout_add(dense(...), residual) in attention and MLP; the residual is the
        # LN's input (output: apply_residual_connection_post_layernorm); attention_output bound
        n1 = layernorm(c, x, "input_layernorm")
        a = g.dropout(_attention(c, n1, mask, layer), p, "attn.dropout")
        x1 = g.add(n1 if sp.post_ln_residual else x, a, "residual1")
        g.keep(x1)
        n2 = layernorm(c, x1, "post_attention_layernorm")
        m = g.dropout(_mlp(c, n2), p, "mlp.dropout")
        return g.add(n2 if sp.post_ln_residual else x1, m, "residual2")
    if fam in GEMMA:
        n1 = norm(c, x, "input_layernorm")
        a = _attention(c, n1, mask, layer)
        g.touch(n1)  # bound to the callee's parameter until it returns
        x1 = g.add(x, norm(c, a, "post_attention_layernorm"), "residual1")
        n2 = norm(c, x1, "pre_feedforward_layernorm")
        m = _mlp(c, n2)
        g.touch(n2)
        return g.add(x1, norm(c, m, "post_feedforward_layernorm"), "residual2")
    if fam == "olmo2":
        # Olmo2DecoderLayer: no norm before the attention or the MLP; each output normed, then
        # residual + normed output
        x1 = g.add(x, norm(c, _attention(c, x, mask, layer), "post_attention_layernorm"),
                   "residual1")
        g.keep(x1)  # bound to ``residual`` while the MLP runs
        return g.add(x1, norm(c, _mlp(c, x1), "post_feedforward_layernorm"), "residual2")
    return _pre_norm_layer(c, x, mask, layer, moe)


def _norm_narrow(c: Ctx, n: Tensor) -> Tensor:
    """DeepSeek-V3's storage with the norms recomputed (:attr:`Opts.norm_out_narrow`): the
    norm's quantized copy, which the next linears save for their weight gradient, is made
    inside the norm's recompute region, so it is recomputed with the norm, not kept (report
    sec. 3.2.3: the norms recomputed, "eliminating the need to persistently store their output
    activations"). ``n`` unchanged otherwise."""
    if c.o.norm_out_narrow and c.o.narrow_inputs and c.o.sp == 1:
        c.narrow[id(n)] = c.g.to(n, c.o.narrow_inputs)
    return n


def _pre_norm_layer(c: Ctx, x: Tensor, mask: Tensor | None, layer: int, moe: bool) -> Tensor:
    """The pre-norm block: llama family, gpt2, opt, vit, phi3, neox (sequential)."""
    g, fam, p = c.g, c.sp.family, c.sp.hidden_dropout
    # Megatron-Core's
    # ``layernorm`` recompute (transformer_layer.py, NVIDIA/Megatron-LM@d98e8a64): each norm
    # under ``CheckpointWithoutOutput``, its output discarded and recomputed when the
    # attention's (the MLP's) output gradient arrives
    ln1 = _begin(g, "layernorm")
    n1 = _norm_narrow(c, norm(c, x, "input_layernorm"))
    g.region = ""
    a = _attention(c, n1, mask, layer)
    g.recompute_at_last_op(ln1)
    g.touch(n1)
    a = g.dropout(a, p, "attn.dropout")
    x1 = g.add(a, x, "residual1")
    ln2 = _begin(g, "layernorm")
    n2 = _norm_narrow(c, norm(c, x1, "post_attention_layernorm"))
    g.region = ""
    if fam in GPT2_LIKE:
        g.keep(a)   # GPT2Block / GPTBigCodeBlock: attn_output and the ln_2 output stay bound
        g.keep(n2)
    elif fam == "vit":
        g.keep(n1)  # ViTLayer: hidden_states_norm and attention_output stay bound to locals
        g.keep(a)
    elif fam == "llama4_text":
        g.keep(a)  # Llama4TextDecoderLayer binds the attention's output to attention_states
    m = _moe(c, n2) if moe else _mlp(c, n2)
    g.recompute_at_last_op(ln2)
    # the block's argument is bound to the callee's parameter until the callee returns
    g.touch(n2)
    m = g.dropout(m, p, "mlp.dropout")
    return g.add(x1, m, "residual2")

