"""config.json -> parameter tensors for the families of 2025-2026.

Each reader reads the keys its transformers 5 configuration class reads, with that class's
defaults, and lists the tensors of the class the model is counted with (checkpoint names, as
``save_pretrained`` writes them):

==============  ======================  ====================================================
family          class                   peculiarities
==============  ======================  ====================================================
qwen3           Qwen3ForCausalLM        q_norm / k_norm (RMSNorm of head_dim), head_dim 128
qwen3_moe       Qwen3MoeForCausalLM     Qwen3 attention; 128 experts top-8, no shared expert,
                                        ``mlp_only_layers`` / ``decoder_sparse_step``
deepseek_v3     DeepseekV3ForCausalLM   MLA (q_a/q_b, kv_a_proj_with_mqa, kv_b_proj), the
                                        first ``first_k_dense_replace`` layers dense, routed +
                                        shared experts, sigmoid group-limited router
deepseek_v2     DeepseekV2ForCausalLM   the same MLA (``q_lora_rank`` may be null) and MoE
glm4_moe        Glm4MoeForCausalLM      q/k/v biases, optional QK-norm, partial rotary, the
                                        DeepSeek-V3 MoE
gpt_oss         GptOssForCausalLM       biased q/k/v/o, a learned sink per head, alternating
                                        sliding (128) / full layers, fused biased experts
                                        (E, in, out), a biased router
gemma3_text     Gemma3ForCausalLM       Gemma-2's four norms, QK-norm, 5 local : 1 global
                                        layers, a 262k vocabulary, tied
llama4_text     Llama4ForCausalLM       MoE every ``interleave_moe_layer_step`` layers (fused
                                        experts + a shared expert), chunked local attention,
                                        NoPE global layers with an unweighted L2 QK-norm
nemotron        NemotronForCausalLM     Nemotron-3/4 (NeMo): biased LayerNorm1P, a two-matrix
                                        squared-ReLU MLP (``relu2``, no gate), partial rotary
                                        (0.5), unbiased linears, untied head
olmo2           Olmo2ForCausalLM        post-norm: no input norm, an RMSNorm on the
                                        attention's and the MLP's outputs before each
                                        residual add; q_norm / k_norm over the whole q (k)
                                        projection (heads x head_dim), untied head
==============  ======================  ====================================================

The multi-token-prediction layers DeepSeek-V3 and GLM-4.5 checkpoints hold are not built by
transformers; they are counted apart (``mtp_params``) and said in a note.
"""

from __future__ import annotations

from collections.abc import Callable

from ._config import ConfigReader
from ._tensors import Tensors, dropout_of, head_dim_of, layer_groups, layer_type_list
from ._types import MLA

__all__ = ["MODERN_CLASSES", "MODERN_BUILDERS"]

MODERN_CLASSES: dict[str, str] = {
    "qwen3": "Qwen3ForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
    "deepseek_v3": "DeepseekV3ForCausalLM",
    "deepseek_v2": "DeepseekV2ForCausalLM",
    "glm4_moe": "Glm4MoeForCausalLM",
    "gpt_oss": "GptOssForCausalLM",
    "gemma3_text": "Gemma3ForCausalLM",
    "llama4_text": "Llama4ForCausalLM",
    "nemotron": "NemotronForCausalLM",
    "olmo2": "Olmo2ForCausalLM",
}

#: Each configuration class's defaults for the keys a config.json may leave out.
_MAX_POS = {"qwen3": 32768, "qwen3_moe": 32768, "deepseek_v3": 4096, "deepseek_v2": 2048,
            "glm4_moe": 131072, "gpt_oss": 131072, "gemma3_text": 131072, "llama4_text": 131072,
            "nemotron": 4096, "olmo2": 2048}
_KV_DEFAULT = {"qwen3": 32, "qwen3_moe": 4, "glm4_moe": 8, "gpt_oss": 8, "gemma3_text": 4,
               "llama4_text": 8}
_HEAD_DIM = {"qwen3": 128, "gpt_oss": 64, "gemma3_text": 256, "llama4_text": 128}
_BIAS_DEFAULT = {"gpt_oss": True}

_L = "model.layers.{i}"


#: Gemma3TextConfig's defaults: Gemma 3's published multimodal configs leave them out of their
#: text_config (the 4B's names neither its heads nor its vocabulary).
_GEMMA3_SIZES = {"hidden_size": 2304, "num_hidden_layers": 26, "num_attention_heads": 8,
                 "vocab_size": 262208}


def _sizes(r: ConfigReader, family: str) -> tuple[int, int, int, int]:
    keys = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
    if family == "gemma3_text":
        return tuple(r.integer(k, default=_GEMMA3_SIZES[k]) for k in keys)  # type: ignore
    return tuple(r.integer(k) for k in keys)  # type: ignore[return-value]


def _kv(r: ConfigReader, family: str, heads: int) -> int:
    default = _KV_DEFAULT.get(family, heads)
    if not r.has("num_key_value_heads") and default != heads:
        r.notes.append(f'"num_key_value_heads" is missing: {default}, the default of '
                       f"transformers' {MODERN_CLASSES[family].replace('ForCausalLM', 'Config')}"
                       ", is used")
    kv = r.optional_integer("num_key_value_heads", default=default) or heads
    if heads % kv:
        raise r.fail(f'"num_attention_heads" {heads} is not a multiple of '
                     f'"num_key_value_heads" {kv}')
    return kv


def _common(r: ConfigReader, family: str, H: int, L: int, NH: int, V: int) -> dict:
    """The fields every decoder here shares (RMSNorm, gated MLP, rotary)."""
    tie = r.boolean("tie_word_embeddings", default=family == "gemma3_text")
    act = (r.string("hidden_activation", "hidden_act", default="gelu_pytorch_tanh")
           if family == "gemma3_text" else r.string("hidden_act", default="silu"))
    return dict(kind="decoder", hidden_size=H, num_layers=L, num_heads=NH, vocab_size=V,
                max_position_embeddings=r.integer("max_position_embeddings",
                                                  default=_MAX_POS[family]),
                tie_word_embeddings=tie, mlp="gated", activation=act, norm="rmsnorm",
                position="rotary", attention_dropout=dropout_of(r, "attention_dropout"))


def _head(T: Tensors, H: int, V: int, tie: bool) -> None:
    T.norm("model.norm", H, 1, bias=False)
    if not tie:
        T.linear("lm_head", V, H, 1, "head", bias=False)


def _gqa_tensors(T: Tensors, H: int, L: int, NH: int, KV: int, hd: int, *, qkv_bias: bool,
                 o_bias: bool, qk_norm: bool, sinks: bool = False) -> None:
    p = f"{_L}.self_attn"
    if sinks:
        T.add(f"{p}.sinks", (NH,), L, "attention", "sinks")
    T.linear(f"{p}.q_proj", NH * hd, H, L, "attention", bias=qkv_bias)
    T.linear(f"{p}.k_proj", KV * hd, H, L, "attention", bias=qkv_bias)
    T.linear(f"{p}.v_proj", KV * hd, H, L, "attention", bias=qkv_bias)
    T.linear(f"{p}.o_proj", H, NH * hd, L, "attention", bias=o_bias)
    if qk_norm:
        T.norm(f"{p}.q_norm", hd, L, bias=False)
        T.norm(f"{p}.k_norm", hd, L, bias=False)


def _layer_norms(T: Tensors, H: int, L: int, *, gemma: bool = False) -> None:
    T.norm(f"{_L}.input_layernorm", H, L, bias=False)
    T.norm(f"{_L}.post_attention_layernorm", H, L, bias=False)
    if gemma:
        T.norm(f"{_L}.pre_feedforward_layernorm", H, L, bias=False)
        T.norm(f"{_L}.post_feedforward_layernorm", H, L, bias=False)


def _gated(T: Tensors, prefix: str, H: int, I: int, count: int, component: str,
           layer: int | None = None) -> None:
    T.linear(f"{prefix}.gate_proj", I, H, count, component, bias=False, layer=layer)
    T.linear(f"{prefix}.up_proj", I, H, count, component, bias=False, layer=layer)
    T.linear(f"{prefix}.down_proj", H, I, count, component, bias=False, layer=layer)


def _top_k(r: ConfigReader, E: int, default: int) -> int:
    k = r.integer("num_experts_per_tok", default=default)
    if k > E:
        raise r.fail(f'"num_experts_per_tok" {k} is more than the {E} experts')
    return k


def _sliding(r: ConfigReader, L: int, window_default: int | None,
             pattern: Callable[[int], bool]) -> tuple[int | None, tuple[int, ...]]:
    """(window, sliding layers) from ``layer_types`` or the family's default ``pattern``."""
    types = layer_type_list(r, L, ("full_attention", "sliding_attention"))
    sliding = (tuple(i for i, t in enumerate(types) if t == "sliding_attention")
               if types is not None else tuple(i for i in range(L) if pattern(i)))
    if not sliding:
        return None, ()
    window = r.optional_integer("sliding_window", default=window_default)
    return (window, sliding) if window is not None else (None, ())


# --------------------------------------------------------------------------------------------
# Qwen3 (dense and MoE), Gemma 3
# --------------------------------------------------------------------------------------------

def _qwen3(r: ConfigReader, family: str) -> dict:
    H, L, NH, V = _sizes(r, family)
    KV = _kv(r, family, NH)
    hd = head_dim_of(r, H, NH, default=_HEAD_DIM.get(family))
    out = _common(r, family, H, L, NH, V)
    bias = r.boolean("attention_bias", default=False)
    window, sliding = None, ()
    if r.boolean("use_sliding_window", default=False):
        mwl = r.integer("max_window_layers", default=28, minimum=0)
        if family == "qwen3":
            window, sliding = _sliding(r, L, 4096, lambda i: i >= mwl)
        else:  # Qwen3MoeAttention slides on every layer when a window is set
            window = r.optional_integer("sliding_window", default=4096)
            sliding = tuple(range(L)) if window is not None else ()
    T = Tensors()
    T.embedding("model.embed_tokens.weight", V, H, "embed_tokens")
    _gqa_tensors(T, H, L, NH, KV, hd, qkv_bias=bias, o_bias=bias, qk_norm=True)
    moe: dict = {}
    if family == "qwen3":
        _gated(T, f"{_L}.mlp", H, r.integer("intermediate_size"), L, "mlp")
        inter = r.integer("intermediate_size")
    else:
        inter, moe = _qwen3_moe(r, T, H, L)
    _layer_norms(T, H, L)
    _head(T, H, V, out["tie_word_embeddings"])
    return dict(out, num_kv_heads=KV, head_dim=hd, intermediate_size=inter, qk_norm="rmsnorm",
                attention_bias=bias, sliding_window=window, sliding_window_layers=sliding,
                tensors=T.items, **moe)


def _qwen3_moe(r: ConfigReader, T: Tensors, H: int, L: int) -> tuple[int, dict]:
    I = r.integer("intermediate_size")
    E = r.integer("num_experts", default=128, minimum=0)
    k = _top_k(r, max(E, 1), 8) if E else 0
    moe_I = r.integer("moe_intermediate_size", default=768)
    step = r.integer("decoder_sparse_step", default=1)
    mlp_only = set(r.int_list("mlp_only_layers", maximum=L))
    layers = tuple(i for i in range(L) if E and i not in mlp_only and (i + 1) % step == 0)
    dense = tuple(i for i in range(L) if i not in layers)
    for idx, n, layer in layer_groups(dense, L) if dense else []:
        _gated(T, f"model.layers.{idx}.mlp", H, I, n, "mlp", layer)
    for idx, n, layer in layer_groups(layers, L) if layers else []:
        q = f"model.layers.{idx}.mlp"
        T.linear(f"{q}.gate", E, H, n, "router", bias=False, layer=layer)
        _gated(T, f"{q}.experts.{{e}}", H, moe_I, n * E, "experts", layer)
    if not layers:
        return I, {}
    return I, dict(num_experts=E, experts_per_token=k, moe_intermediate_size=moe_I,
                   moe_layers=layers)


def _gemma3(r: ConfigReader, family: str) -> dict:
    H, L, NH, V = _sizes(r, family)
    KV = _kv(r, family, NH)
    hd = head_dim_of(r, H, NH, default=256)
    out = _common(r, family, H, L, NH, V)
    bias = r.boolean("attention_bias", default=False)
    pattern = r.integer("sliding_window_pattern", default=6)
    window, sliding = _sliding(r, L, 4096, lambda i: bool((i + 1) % pattern))
    I = r.integer("intermediate_size")
    T = Tensors()
    T.embedding("model.embed_tokens.weight", V, H, "embed_tokens")
    _gqa_tensors(T, H, L, NH, KV, hd, qkv_bias=bias, o_bias=bias, qk_norm=True)
    _gated(T, f"{_L}.mlp", H, I, L, "mlp")
    _layer_norms(T, H, L, gemma=True)
    _head(T, H, V, out["tie_word_embeddings"])
    return dict(out, num_kv_heads=KV, head_dim=hd, intermediate_size=I, qk_norm="rmsnorm",
                attention_bias=bias, sliding_window=window, sliding_window_layers=sliding,
                tensors=T.items)


# --------------------------------------------------------------------------------------------
# DeepSeek-V2/V3 (and Kimi-K2), GLM-4.5: the DeepSeek MoE
# --------------------------------------------------------------------------------------------

def _mla(r: ConfigReader, family: str) -> MLA:
    q_rank = r.optional_integer("q_lora_rank", default=1536)
    return MLA(q_lora_rank=q_rank or 0,
               kv_lora_rank=r.integer("kv_lora_rank", default=512),
               qk_rope_head_dim=r.integer("qk_rope_head_dim", default=64),
               qk_nope_head_dim=r.integer("qk_nope_head_dim", default=128),
               v_head_dim=r.integer("v_head_dim", default=128))


def _mla_tensors(T: Tensors, H: int, L: int, NH: int, m: MLA, bias: bool) -> None:
    p = f"{_L}.self_attn"
    if m.q_lora_rank:
        T.linear(f"{p}.q_a_proj", m.q_lora_rank, H, L, "attention", bias=bias)
        T.norm(f"{p}.q_a_layernorm", m.q_lora_rank, L, bias=False)
        T.linear(f"{p}.q_b_proj", NH * m.qk_head_dim, m.q_lora_rank, L, "attention", bias=False)
    else:
        T.linear(f"{p}.q_proj", NH * m.qk_head_dim, H, L, "attention", bias=False)
    T.linear(f"{p}.kv_a_proj_with_mqa", m.kv_lora_rank + m.qk_rope_head_dim, H, L, "attention",
             bias=bias)
    T.norm(f"{p}.kv_a_layernorm", m.kv_lora_rank, L, bias=False)
    T.linear(f"{p}.kv_b_proj", NH * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank, L,
             "attention", bias=False)
    T.linear(f"{p}.o_proj", H, NH * m.v_head_dim, L, "attention", bias=bias)


def _deepseek_moe(r: ConfigReader, family: str, T: Tensors, H: int, L: int) -> dict:
    """Dense MLPs on the first ``first_k_dense_replace`` layers, then routed + shared experts."""
    I = r.integer("intermediate_size")
    E = r.integer("n_routed_experts", default={"deepseek_v2": 64, "glm4_moe": 128}.get(family, 256))
    k = _top_k(r, E, {"deepseek_v2": 6}.get(family, 8))
    moe_I = r.integer("moe_intermediate_size",
                      default={"deepseek_v2": 1407, "glm4_moe": 1408}.get(family, 2048))
    shared = r.integer("n_shared_experts", default=2 if family == "deepseek_v2" else 1,
                       minimum=0)
    first = r.integer("first_k_dense_replace", default={"deepseek_v2": 0, "glm4_moe": 1}
                      .get(family, 3), minimum=0)
    g_default, tg_default = {"deepseek_v3": (8, 4)}.get(family, (1, 1))
    groups = (r.optional_integer("n_group", default=g_default) or 1,
              r.optional_integer("topk_group", default=tg_default) or 1)
    if family == "deepseek_v2":
        groups = _v2_groups(r, E)
    if E % groups[0] or groups[1] > groups[0]:
        raise r.fail(f'"n_group" {groups[0]} / "topk_group" {groups[1]} do not divide the {E} '
                     'experts into groups')
    layers = tuple(range(min(first, L), L))
    dense = tuple(range(min(first, L)))
    for idx, n, layer in layer_groups(dense, L) if dense else []:
        _gated(T, f"model.layers.{idx}.mlp", H, I, n, "mlp", layer)
    for idx, n, layer in layer_groups(layers, L) if layers else []:
        q = f"model.layers.{idx}.mlp"
        T.linear(f"{q}.gate", E, H, n, "router", bias=False, layer=layer)
        _gated(T, f"{q}.experts.{{e}}", H, moe_I, n * E, "experts", layer)
        if shared:
            _gated(T, f"{q}.shared_experts", H, moe_I * shared, n, "mlp", layer)
    if not layers:
        return dict(intermediate_size=I)
    # DeepSeek-V3 / GLM-4.5 keep an fp32 e_score_correction_bias buffer per MoE layer
    buffers = 4 * E * len(layers) if family in ("deepseek_v3", "glm4_moe") else 0
    return dict(intermediate_size=I, num_experts=E, experts_per_token=k,
                moe_intermediate_size=moe_I, shared_expert_intermediate_size=moe_I * shared,
                moe_layers=layers, router="softmax" if family == "deepseek_v2" else "sigmoid",
                router_groups=groups, buffer_bytes=buffers)


#: DeepseekV2TopkRouter's ``topk_method`` values (transformers 5.25,
#: models/deepseek_v2/modeling_deepseek_v2.py): a softmax over every expert, then top-k of all
#: of them, or of the experts of the ``topk_group`` groups whose best score is highest.
V2_TOPK_METHODS = ("greedy", "group_limited_greedy")


def _v2_groups(r: ConfigReader, E: int) -> tuple[int, int]:
    """DeepSeek-V2's routing: (1, 1) for ``greedy`` (V2-Lite; ``n_group`` unused), else the
    ``n_group`` / ``topk_group`` its group-limited greedy needs (DeepSeek-V2: 8 / 3). V2 has no
    ``e_score_correction_bias``."""
    method = r.string("topk_method", default="greedy")
    if method not in V2_TOPK_METHODS:
        raise r.fail(f'"topk_method" {method!r} is not one of DeepSeek-V2\'s routers '
                     f'({", ".join(V2_TOPK_METHODS)}); use one of those')
    if method == "greedy":
        return (1, 1)
    n = r.optional_integer("n_group", default=None)
    t = r.optional_integer("topk_group", default=None)
    if n is None or t is None:
        raise r.fail('"topk_method" group_limited_greedy needs "n_group" and "topk_group"; '
                     'set both (DeepSeek-V2: 8 and 3)')
    return (n, t)


def _mtp(r: ConfigReader, T: Tensors, L: int, H: int, V: int, moe: dict) -> dict:
    """DeepSeek-V3's multi-token-prediction module as its checkpoint holds it, per layer: a copy
    of the last (MoE) decoder layer -- its tensors read off ``T`` -- plus ``enorm`` and
    ``hnorm``, ``eh_proj`` (2H -> H), ``shared_head.norm``, and copies of the embedding and the
    head."""
    n = r.integer("num_nextn_predict_layers", default=0, minimum=0)
    if not n or not moe.get("num_experts"):
        return dict(mtp_layers=n)
    # a ``{i}`` pattern holds every layer's copy (``count`` = L x experts for a routed one)
    layer = sum(t.total // L if t.layer is None else t.total for t in T.items
                if t.layer == L - 1 or (t.layer is None and t.per_layer))
    return dict(mtp_layers=n, mtp_params=n * (layer + 3 * H + 2 * H * H + 2 * V * H))


def _deepseek(r: ConfigReader, family: str) -> dict:
    H, L, NH, V = _sizes(r, family)
    m = _mla(r, family)
    out = _common(r, family, H, L, NH, V)
    bias = r.boolean("attention_bias", default=False)
    T = Tensors()
    T.embedding("model.embed_tokens.weight", V, H, "embed_tokens")
    _mla_tensors(T, H, L, NH, m, bias)
    moe = _deepseek_moe(r, family, T, H, L)
    _layer_norms(T, H, L)
    _head(T, H, V, out["tie_word_embeddings"])
    extra = _mtp(r, T, L, H, V, moe) if family == "deepseek_v3" else {}
    if family == "deepseek_v3" and not r.boolean("rope_interleave", default=True):
        r.notes.append("rope_interleave is false: rotary positions applied to halves")
    return dict(out, num_kv_heads=NH, head_dim=m.qk_head_dim, mla=m, attention_bias=bias,
                tensors=T.items, **moe, **extra)


def _glm4_moe(r: ConfigReader, family: str) -> dict:
    H, L, NH, V = _sizes(r, family)
    KV = _kv(r, family, NH)
    hd = head_dim_of(r, H, NH)
    out = _common(r, family, H, L, NH, V)
    bias = r.boolean("attention_bias", default=False)
    qk_norm = r.boolean("use_qk_norm", default=False)
    rope = r.config.get("rope_parameters")
    frac = r.number("partial_rotary_factor", default=float(
        rope.get("partial_rotary_factor", 0.5)) if isinstance(rope, dict) else 0.5,
        minimum=0.0, maximum=1.0)
    T = Tensors()
    T.embedding("model.embed_tokens.weight", V, H, "embed_tokens")
    _gqa_tensors(T, H, L, NH, KV, hd, qkv_bias=bias, o_bias=False, qk_norm=qk_norm)
    moe = _deepseek_moe(r, family, T, H, L)
    _layer_norms(T, H, L)
    _head(T, H, V, out["tie_word_embeddings"])
    n_mtp = r.integer("num_nextn_predict_layers", default=0, minimum=0)
    return dict(out, num_kv_heads=KV, head_dim=hd, attention_bias=bias,
                qk_norm="rmsnorm" if qk_norm else "none", rotary_fraction=frac,
                mtp_layers=n_mtp, tensors=T.items, **moe)


# --------------------------------------------------------------------------------------------
# gpt-oss, Llama 4: fused expert tensors
# --------------------------------------------------------------------------------------------

def _gpt_oss(r: ConfigReader, family: str) -> dict:
    H, L, NH, V = _sizes(r, family)
    KV = _kv(r, family, NH)
    hd = head_dim_of(r, H, NH, default=64)
    out = _common(r, family, H, L, NH, V)
    E = r.integer("num_local_experts", default=128)
    k = _top_k(r, E, 4)
    I = r.integer("intermediate_size", default=2880)
    bias = r.boolean("attention_bias", default=True)
    window, sliding = _sliding(r, L, 128, lambda i: bool((i + 1) % 2))
    T = Tensors()
    T.embedding("model.embed_tokens.weight", V, H, "embed_tokens")
    _gqa_tensors(T, H, L, NH, KV, hd, qkv_bias=bias, o_bias=bias, qk_norm=False, sinks=True)
    q = f"{_L}.mlp"
    T.linear(f"{q}.router", E, H, L, "router", bias=True)
    T.add(f"{q}.experts.gate_up_proj", (E, H, 2 * I), L, "experts", "experts", linear=True,
          transposed=True)
    T.add(f"{q}.experts.gate_up_proj_bias", (E, 2 * I), L, "experts", "experts")
    T.add(f"{q}.experts.down_proj", (E, I, H), L, "experts", "experts", linear=True,
          transposed=True)
    T.add(f"{q}.experts.down_proj_bias", (E, H), L, "experts", "experts")
    _layer_norms(T, H, L)
    _head(T, H, V, out["tie_word_embeddings"])
    return dict(out, num_kv_heads=KV, head_dim=hd, intermediate_size=I, attention_bias=bias,
                attention_sinks=True, sliding_window=window, sliding_window_layers=sliding,
                num_experts=E, experts_per_token=k, moe_intermediate_size=I,
                moe_layers=tuple(range(L)), expert_bias=True, activation="swiglu_oai",
                tensors=T.items)


def _llama4(r: ConfigReader, family: str) -> dict:
    H, L, NH, V = _sizes(r, family)
    KV = _kv(r, family, NH)
    hd = head_dim_of(r, H, NH, default=128)
    out = _common(r, family, H, L, NH, V)
    E = r.integer("num_local_experts", default=16)
    k = _top_k(r, E, 1)
    I = r.integer("intermediate_size", default=8192)
    I_mlp = r.integer("intermediate_size_mlp", default=16384)
    step = r.integer("interleave_moe_layer_step", default=1)
    moe_layers = (tuple(sorted(set(r.int_list("moe_layers", maximum=L))))
                  if r.has("moe_layers") else tuple(range(step - 1, L, step)))
    interval = r.integer("no_rope_layer_interval", default=4)
    rope_flags = r.int_list("no_rope_layers", maximum=2)
    if rope_flags and len(rope_flags) != L:
        raise r.fail(f'"no_rope_layers" has {len(rope_flags)} entries for {L} layers')
    if not rope_flags:  # 1 = the layer uses rotary positions (transformers' naming)
        rope_flags = tuple(int((i + 1) % interval != 0) for i in range(L))
    nope = tuple(i for i in range(L) if not rope_flags[i])
    chunk = r.optional_integer("attention_chunk_size", default=8192)
    chunked = tuple(i for i in range(L) if rope_flags[i]) if chunk else ()
    bias = r.boolean("attention_bias", default=False)
    qk_norm = r.boolean("use_qk_norm", default=True)
    T = Tensors()
    T.embedding("model.embed_tokens.weight", V, H, "embed_tokens")
    _gqa_tensors(T, H, L, NH, KV, hd, qkv_bias=bias, o_bias=bias, qk_norm=False)
    dense = tuple(i for i in range(L) if i not in moe_layers)
    for idx, n, layer in layer_groups(dense, L) if dense else []:
        _gated(T, f"model.layers.{idx}.feed_forward", H, I_mlp, n, "mlp", layer)
    for idx, n, layer in layer_groups(moe_layers, L) if moe_layers else []:
        q = f"model.layers.{idx}.feed_forward"
        T.add(f"{q}.experts.gate_up_proj", (E, H, 2 * I), n, "experts", "experts", linear=True,
              transposed=True, layer=layer)
        T.add(f"{q}.experts.down_proj", (E, I, H), n, "experts", "experts", linear=True,
              transposed=True, layer=layer)
        T.linear(f"{q}.router", E, H, n, "router", bias=False, layer=layer)
        _gated(T, f"{q}.shared_expert", H, I, n, "mlp", layer)
    _layer_norms(T, H, L)
    _head(T, H, V, out["tie_word_embeddings"])
    moe = dict(num_experts=E, experts_per_token=k, moe_intermediate_size=I,
               shared_expert_intermediate_size=I, moe_layers=moe_layers,
               router="sigmoid") if moe_layers else {}
    return dict(out, num_kv_heads=KV, head_dim=hd, intermediate_size=I_mlp,
                attention_bias=bias, qk_norm="l2" if qk_norm else "none",
                attention_chunk=chunk if chunked else None, chunked_layers=chunked,
                nope_layers=nope, tensors=T.items, **moe)


# --------------------------------------------------------------------------------------------
# Nemotron (NeMo's Nemotron-3 / Nemotron-4 GPT)
# --------------------------------------------------------------------------------------------

def _nemotron(r: ConfigReader, family: str) -> dict:
    """transformers' NemotronConfig / modeling_nemotron.py (5.25): NemotronLayerNorm1P (an
    nn.LayerNorm, weight and bias, applied as weight + 1) before attention and MLP and at the
    end; q/k/v/o projections (``attention_bias``, default false); NemotronMLP is up_proj ->
    ACT2FN[hidden_act] (default ``relu2``, relu(x)^2) -> down_proj, no gate (``mlp_bias``,
    default false); rotary on ``partial_rotary_factor`` (default 0.5) of each head; the head
    untied by default. It is Megatron GPT with NeMo's Nemotron options (normalization
    layernorm1p, activation squared-relu, bias false, rope 0.5)."""
    H, L, NH, V = _sizes(r, family)
    KV = _kv(r, family, NH)
    hd = head_dim_of(r, H, NH)
    I = r.integer("intermediate_size")
    attn_bias = r.boolean("attention_bias", default=False)
    mlp_bias = r.boolean("mlp_bias", default=False)
    tie = r.boolean("tie_word_embeddings", default=False)
    frac = r.number("partial_rotary_factor", default=0.5, minimum=0.0, maximum=1.0)
    T = Tensors()
    T.embedding("model.embed_tokens.weight", V, H, "embed_tokens")
    _gqa_tensors(T, H, L, NH, KV, hd, qkv_bias=attn_bias, o_bias=attn_bias, qk_norm=False)
    T.linear(f"{_L}.mlp.up_proj", I, H, L, "mlp", bias=mlp_bias)
    T.linear(f"{_L}.mlp.down_proj", H, I, L, "mlp", bias=mlp_bias)
    T.norm(f"{_L}.input_layernorm", H, L, bias=True)
    T.norm(f"{_L}.post_attention_layernorm", H, L, bias=True)
    T.norm("model.norm", H, 1, bias=True)
    if not tie:
        T.linear("lm_head", V, H, 1, "head", bias=False)
    return dict(kind="decoder", hidden_size=H, num_layers=L, num_heads=NH, num_kv_heads=KV,
                head_dim=hd, intermediate_size=I, vocab_size=V,
                max_position_embeddings=r.integer("max_position_embeddings",
                                                  default=_MAX_POS[family]),
                tie_word_embeddings=tie, mlp="gelu", activation=r.string("hidden_act",
                                                                         default="relu2"),
                norm="layernorm", position="rotary", rotary_fraction=frac,
                attention_bias=attn_bias, mlp_bias=mlp_bias,
                attention_dropout=dropout_of(r, "attention_dropout"), tensors=T.items)


# --------------------------------------------------------------------------------------------
# OLMo 2 (AI2): post-norm, QK-norm over the whole projection
# --------------------------------------------------------------------------------------------

def _olmo2(r: ConfigReader, family: str) -> dict:
    """transformers' Olmo2Config / modeling_olmo2.py (5.x): Olmo2Attention's q/k/v/o
    (``attention_bias``, default false) with ``q_norm`` = Olmo2RMSNorm(heads x head_dim) and
    ``k_norm`` = Olmo2RMSNorm(kv_heads x head_dim) applied to the projections before they are
    split into heads; Olmo2DecoderLayer has no input norm: ``post_attention_layernorm`` normalizes
    the attention's output and ``post_feedforward_layernorm`` the MLP's, each before its residual
    add; a Llama MLP (gate, up, down; no bias); ``num_key_value_heads`` defaults to the heads;
    the head untied by default."""
    H, L, NH, V = _sizes(r, family)
    KV = _kv(r, family, NH)
    hd = head_dim_of(r, H, NH)
    I = r.integer("intermediate_size")
    out = _common(r, family, H, L, NH, V)
    bias = r.boolean("attention_bias", default=False)
    T = Tensors()
    T.embedding("model.embed_tokens.weight", V, H, "embed_tokens")
    _gqa_tensors(T, H, L, NH, KV, hd, qkv_bias=bias, o_bias=bias, qk_norm=False)
    T.norm(f"{_L}.self_attn.q_norm", NH * hd, L, bias=False)
    T.norm(f"{_L}.self_attn.k_norm", KV * hd, L, bias=False)
    _gated(T, f"{_L}.mlp", H, I, L, "mlp")
    T.norm(f"{_L}.post_attention_layernorm", H, L, bias=False)
    T.norm(f"{_L}.post_feedforward_layernorm", H, L, bias=False)
    _head(T, H, V, out["tie_word_embeddings"])
    return dict(out, num_kv_heads=KV, head_dim=hd, intermediate_size=I, attention_bias=bias,
                qk_norm="rmsnorm_full", tensors=T.items)


MODERN_BUILDERS: dict[str, Callable[[ConfigReader, str], dict]] = {
    "qwen3": _qwen3, "qwen3_moe": _qwen3, "gemma3_text": _gemma3,
    "deepseek_v3": _deepseek, "deepseek_v2": _deepseek, "glm4_moe": _glm4_moe,
    "gpt_oss": _gpt_oss, "llama4_text": _llama4, "nemotron": _nemotron, "olmo2": _olmo2,
}
