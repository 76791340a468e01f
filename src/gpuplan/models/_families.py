"""config.json -> :class:`Architecture`, family by family.

Each builder reads the keys its transformers configuration class reads (with that class's
defaults for optional keys; the structural sizes are required) and lists the exact parameter
tensors of the class the model is trained with:

==============  ==============================  ===============================================
family          class                           peculiarities
==============  ==============================  ===============================================
llama           LlamaForCausalLM                GQA, optional attention/MLP biases, head_dim
mistral         MistralForCausalLM              sliding window on every layer
mixtral         MixtralForCausalLM              8 experts (w1, w2, w3) + router per layer
qwen2           Qwen2ForCausalLM                q/k/v biases
qwen2_moe       Qwen2MoeForCausalLM             routed experts + shared expert + its gate
gemma2          Gemma2ForCausalLM               four norms per layer, tied, head_dim 256
phi3            Phi3ForCausalLM                 fused qkv_proj and gate_up_proj
gpt2            GPT2LMHeadModel                 Conv1D weights stored (in, out), tied
gpt_bigcode     GPTBigCodeForCausalLM           GPT-2 with nn.Linear, MQA in a fused c_attn, tied
gpt_neox        GPTNeoXForCausalLM              fused query_key_value, untied embed_out
opt             OPTForCausalLM                  positions offset by 2, project_in/out
falcon          FalconForCausalLM               MQA / new decoder architecture, parallel attn
bert            BertForMaskedLM                 token types, MLM transform, no pooler
vit             ViTForImageClassification       patch conv, class token, classifier
==============  ==============================  ===============================================

Names are the checkpoint names ``save_pretrained`` writes (the names in the published
safetensors files). transformers 5 fuses MoE experts in memory (``experts.gate_up_proj``) but
writes them per expert, so experts are listed per expert here (``{e}``). A tied output head is
not listed: the embedding is counted once, as ``embeddings``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType

from .._record import record
from ..errors import ModelFileError
from ..units import MAX_PARAMS
from ._config import ConfigReader
from ._modern import MODERN_BUILDERS, MODERN_CLASSES
from ._nearest import nearest_config
from ._tensors import (Tensors as _Tensors, dropout_of as _dropout, head_dim_of as _head_dim,
                       layer_groups as _layer_groups, layer_types_of as _layer_types_sliding,
                       torch_dtype_of as _torch_dtype)
from ._types import Architecture

__all__ = ["SUPPORTED_FAMILIES", "HF_CLASSES", "build_architecture"]

#: The transformers class whose parameters each family's tensor list reproduces.
HF_CLASSES: dict[str, str] = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "mixtral": "MixtralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen2_moe": "Qwen2MoeForCausalLM",
    "gemma2": "Gemma2ForCausalLM",
    "phi3": "Phi3ForCausalLM",
    "gpt2": "GPT2LMHeadModel",
    "gpt_bigcode": "GPTBigCodeForCausalLM",
    "gpt_neox": "GPTNeoXForCausalLM",
    "opt": "OPTForCausalLM",
    "falcon": "FalconForCausalLM",
    "bloom": "BloomForCausalLM",
    "bert": "BertForMaskedLM",
    "vit": "ViTForImageClassification",
    **MODERN_CLASSES,
}

SUPPORTED_FAMILIES: tuple[str, ...] = tuple(HF_CLASSES)


#: transformers' default ``num_key_value_heads`` when config.json omits the key (LlamaConfig and
#: Phi3Config use ``num_attention_heads``; these classes use a fixed number).
_KV_DEFAULTS = {"mistral": 8, "mixtral": 8, "qwen2": 32, "qwen2_moe": 16, "gemma2": 4}


def _kv_heads(r: ConfigReader, heads: int, family: str, key: str = "num_key_value_heads") -> int:
    default = _KV_DEFAULTS.get(family, heads)
    if not r.has(key) and default != heads:
        r.notes.append(f'"{key}" is missing: {default}, the default of transformers\' '
                       f'{HF_CLASSES[family].replace("ForCausalLM", "Config")}, is used')
    kv = r.integer(key, default=default)
    if heads % kv:
        raise r.fail(f'"num_attention_heads" {heads} is not a multiple of "{key}" {kv}')
    return kv


# --------------------------------------------------------------------------------------------
# Llama-style decoders: llama, mistral, mixtral, qwen2, qwen2_moe, gemma2, phi3
# --------------------------------------------------------------------------------------------

_LLAMA_MAX_POS = {"llama": 2048, "mistral": 131072, "mixtral": 131072, "qwen2": 32768,
                  "qwen2_moe": 32768, "gemma2": 8192, "phi3": 4096}


@record(kw_only=False)
class _Moe:
    """The MLP layout of a llama-style decoder (all zero / empty for a dense model)."""

    intermediate: int
    num_experts: int = 0
    top_k: int = 0
    moe_intermediate: int = 0
    shared_intermediate: int = 0
    layers: tuple[int, ...] = ()


def _llama_style(r: ConfigReader, family: str) -> dict:
    H = r.integer("hidden_size")
    L = r.integer("num_hidden_layers")
    NH = r.integer("num_attention_heads")
    V = r.integer("vocab_size")
    KV = _kv_heads(r, NH, family)
    hd = _head_dim(r, H, NH, default=256 if family == "gemma2" else None)
    max_pos = r.integer("max_position_embeddings", default=_LLAMA_MAX_POS[family])
    tie = r.boolean("tie_word_embeddings", default=(family == "gemma2"))
    qkv_bias, o_bias, mlp_bias = _llama_biases(r, family)
    moe = _llama_moe(r, family, L)
    window, sliding = _llama_sliding(r, family, L)

    T = _Tensors()
    T.embedding("model.embed_tokens.weight", V, H, "embed_tokens")
    _llama_attention_tensors(T, family, H, L, NH, KV, hd, qkv_bias=qkv_bias, o_bias=o_bias)
    _llama_mlp_tensors(T, family, H, L, moe, bias=mlp_bias)
    p = "model.layers.{i}"
    T.norm(f"{p}.input_layernorm", H, L, bias=False)
    T.norm(f"{p}.post_attention_layernorm", H, L, bias=False)
    if family == "gemma2":
        T.norm(f"{p}.pre_feedforward_layernorm", H, L, bias=False)
        T.norm(f"{p}.post_feedforward_layernorm", H, L, bias=False)
    T.norm("model.norm", H, 1, bias=False)
    if not tie:
        T.linear("lm_head", V, H, 1, "head", bias=False)

    activation = (r.string("hidden_activation", "hidden_act", default="gelu_pytorch_tanh")
                  if family == "gemma2" else r.string("hidden_act", default="silu"))
    return dict(
        kind="decoder", hidden_size=H, num_layers=L, num_heads=NH, num_kv_heads=KV, head_dim=hd,
        intermediate_size=moe.intermediate, vocab_size=V, max_position_embeddings=max_pos,
        tie_word_embeddings=tie, mlp="gated", activation=activation, norm="rmsnorm",
        position="rotary", attention_bias=qkv_bias or o_bias, mlp_bias=mlp_bias,
        num_experts=moe.num_experts, experts_per_token=moe.top_k,
        moe_intermediate_size=moe.moe_intermediate,
        shared_expert_intermediate_size=moe.shared_intermediate, moe_layers=moe.layers,
        sliding_window=window, sliding_window_layers=sliding,
        attention_dropout=_dropout(r, "attention_dropout"),
        hidden_dropout=_dropout(r, "resid_pdrop") if family == "phi3" else 0.0,
        tensors=T.items,
    )


def _llama_biases(r: ConfigReader, family: str) -> tuple[bool, bool, bool]:
    """(q/k/v bias, o_proj bias, MLP bias), as each family's config class defaults them."""
    qkv_bias = o_bias = mlp_bias = False
    if family == "llama":
        qkv_bias = o_bias = r.boolean("attention_bias", default=False)
        mlp_bias = r.boolean("mlp_bias", default=False)
    elif family == "gemma2":
        qkv_bias = o_bias = r.boolean("attention_bias", default=False)
    elif family == "qwen2":
        qkv_bias = True
    elif family == "qwen2_moe":
        qkv_bias = r.boolean("qkv_bias", default=True)
    return qkv_bias, o_bias, mlp_bias


def _llama_moe(r: ConfigReader, family: str, L: int) -> _Moe:
    """The experts of mixtral (every layer) and qwen2_moe (``decoder_sparse_step`` layers not in
    ``mlp_only_layers``); a dense MLP for the other families."""
    if family == "mixtral":
        num_experts = r.integer("num_local_experts", default=8)
        top_k = r.integer("num_experts_per_tok", default=2)
        I = r.integer("intermediate_size")
        moe = _Moe(I, num_experts, top_k, I, 0, tuple(range(L)))
    elif family == "qwen2_moe":
        I = r.integer("intermediate_size")
        num_experts = r.integer("num_experts", default=60, minimum=0)
        top_k = r.integer("num_experts_per_tok", default=4)
        moe_I = r.integer("moe_intermediate_size", default=1408)
        shared_I = r.integer("shared_expert_intermediate_size", default=5632, minimum=0)
        step = r.integer("decoder_sparse_step", default=1)
        mlp_only = set(r.int_list("mlp_only_layers", maximum=L))
        layers: tuple[int, ...] = ()
        if num_experts > 0:
            layers = tuple(i for i in range(L) if i not in mlp_only and (i + 1) % step == 0)
        moe = _Moe(I, num_experts, top_k, moe_I, shared_I, layers) if layers else _Moe(I)
    else:
        moe = _Moe(r.integer("intermediate_size"))
    if moe.num_experts and moe.top_k > moe.num_experts:
        raise r.fail(f'"num_experts_per_tok" {moe.top_k} is more than the {moe.num_experts} '
                     'experts')
    return moe


def _llama_sliding(r: ConfigReader, family: str, L: int) -> tuple[int | None, tuple[int, ...]]:
    """The sliding window and the layers that use it ((None, ()) when no layer slides)."""
    window: int | None = None
    sliding: tuple[int, ...] = ()
    explicit = _layer_types_sliding(r, L)
    if family in ("mistral", "mixtral", "phi3"):
        window = r.optional_integer("sliding_window", default=4096 if family == "mistral" else None)
        sliding = tuple(range(L)) if window is not None else ()
    elif family in ("qwen2", "qwen2_moe"):
        if r.boolean("use_sliding_window", default=False):
            window = r.optional_integer("sliding_window", default=4096)
            mwl = r.integer("max_window_layers", default=28, minimum=0)
            if explicit is not None:
                sliding = explicit
            elif family == "qwen2":
                sliding = tuple(i for i in range(L) if i >= mwl)
            else:
                sliding = tuple(i for i in range(L) if (i + 1) % 2 and i < mwl)
    elif family == "gemma2":
        window = r.optional_integer("sliding_window", default=4096)
        sliding = explicit if explicit is not None else tuple(range(0, L, 2))
    return (window, sliding) if sliding else (None, sliding)


def _llama_attention_tensors(T: _Tensors, family: str, H: int, L: int, NH: int, KV: int,
                             hd: int, *, qkv_bias: bool, o_bias: bool) -> None:
    p = "model.layers.{i}.self_attn"
    if family == "phi3":
        T.linear(f"{p}.qkv_proj", NH * hd + 2 * KV * hd, H, L, "attention", bias=False)
        T.linear(f"{p}.o_proj", H, NH * hd, L, "attention", bias=False)
        return
    T.linear(f"{p}.q_proj", NH * hd, H, L, "attention", bias=qkv_bias)
    T.linear(f"{p}.k_proj", KV * hd, H, L, "attention", bias=qkv_bias)
    T.linear(f"{p}.v_proj", KV * hd, H, L, "attention", bias=qkv_bias)
    T.linear(f"{p}.o_proj", H, NH * hd, L, "attention", bias=o_bias)


def _llama_mlp_tensors(T: _Tensors, family: str, H: int, L: int, moe: _Moe, *,
                       bias: bool) -> None:
    I = moe.intermediate
    if family == "phi3":
        T.linear("model.layers.{i}.mlp.gate_up_proj", 2 * I, H, L, "mlp", bias=False)
        T.linear("model.layers.{i}.mlp.down_proj", H, I, L, "mlp", bias=False)
    elif family == "mixtral":
        E, moe_I = moe.num_experts, moe.moe_intermediate
        q = "model.layers.{i}.block_sparse_moe"
        T.linear(f"{q}.gate", E, H, L, "router", bias=False)
        T.linear(f"{q}.experts.{{e}}.w1", moe_I, H, L * E, "experts", bias=False)
        T.linear(f"{q}.experts.{{e}}.w2", H, moe_I, L * E, "experts", bias=False)
        T.linear(f"{q}.experts.{{e}}.w3", moe_I, H, L * E, "experts", bias=False)
    elif family == "qwen2_moe":
        _qwen2_moe_tensors(T, H, L, moe)
    else:
        T.linear("model.layers.{i}.mlp.gate_proj", I, H, L, "mlp", bias=bias)
        T.linear("model.layers.{i}.mlp.up_proj", I, H, L, "mlp", bias=bias)
        T.linear("model.layers.{i}.mlp.down_proj", H, I, L, "mlp", bias=bias)


def _qwen2_moe_tensors(T: _Tensors, H: int, L: int, moe: _Moe) -> None:
    """Dense MLP layers first, then the sparse ones (router, experts, shared expert and gate)."""
    I, E, moe_I, shared_I = (moe.intermediate, moe.num_experts, moe.moe_intermediate,
                             moe.shared_intermediate)
    dense = tuple(i for i in range(L) if i not in moe.layers)
    for idx, n, layer in _layer_groups(dense, L) if dense else []:
        q = f"model.layers.{idx}.mlp"
        T.linear(f"{q}.gate_proj", I, H, n, "mlp", bias=False, layer=layer)
        T.linear(f"{q}.up_proj", I, H, n, "mlp", bias=False, layer=layer)
        T.linear(f"{q}.down_proj", H, I, n, "mlp", bias=False, layer=layer)
    for idx, n, layer in _layer_groups(moe.layers, L) if moe.layers else []:
        q = f"model.layers.{idx}.mlp"
        T.linear(f"{q}.gate", E, H, n, "router", bias=False, layer=layer)
        for proj, shape in (("gate_proj", (moe_I, H)), ("up_proj", (moe_I, H)),
                            ("down_proj", (H, moe_I))):
            T.linear(f"{q}.experts.{{e}}.{proj}", shape[0], shape[1], n * E, "experts",
                     bias=False, layer=layer)
        for proj, shape in (("gate_proj", (shared_I, H)), ("up_proj", (shared_I, H)),
                            ("down_proj", (H, shared_I))):
            T.linear(f"{q}.shared_expert.{proj}", shape[0], shape[1], n, "mlp", bias=False,
                     layer=layer)
        T.linear(f"{q}.shared_expert_gate", 1, H, n, "router", bias=False, layer=layer)


# --------------------------------------------------------------------------------------------
# GPT-2, GPT-NeoX, OPT, Falcon
# --------------------------------------------------------------------------------------------

def _gpt2(r: ConfigReader, family: str) -> dict:
    H = r.integer("n_embd", "hidden_size")
    L = r.integer("n_layer", "num_hidden_layers")
    NH = r.integer("n_head", "num_attention_heads")
    V = r.integer("vocab_size")
    P = r.integer("n_positions", "max_position_embeddings", default=1024)
    I = r.integer("n_inner", default=4 * H)
    if H % NH:
        raise r.fail(f'"n_embd" {H} is not divisible by "n_head" {NH}')
    if r.boolean("add_cross_attention", default=False):
        raise r.fail('"add_cross_attention" is true; gpuplan models GPT-2 as a decoder-only LM')
    tie = r.boolean("tie_word_embeddings", default=True)
    T = _Tensors()
    T.embedding("transformer.wte.weight", V, H, "wte")
    T.embedding("transformer.wpe.weight", P, H, "wpe")
    p = "transformer.h.{i}"
    T.norm(f"{p}.ln_1", H, L, bias=True)
    T.conv1d(f"{p}.attn.c_attn", H, 3 * H, L, "attention")
    T.conv1d(f"{p}.attn.c_proj", H, H, L, "attention")
    T.norm(f"{p}.ln_2", H, L, bias=True)
    T.conv1d(f"{p}.mlp.c_fc", H, I, L, "mlp")
    T.conv1d(f"{p}.mlp.c_proj", I, H, L, "mlp")
    T.norm("transformer.ln_f", H, 1, bias=True)
    if not tie:
        T.linear("lm_head", V, H, 1, "head", bias=False)
    return dict(
        kind="decoder", hidden_size=H, num_layers=L, num_heads=NH, num_kv_heads=NH,
        head_dim=H // NH, intermediate_size=I, vocab_size=V, max_position_embeddings=P,
        tie_word_embeddings=tie, mlp="gelu",
        activation=r.string("activation_function", default="gelu_new"), norm="layernorm",
        position="learned", attention_bias=True, mlp_bias=True,
        attention_dropout=_dropout(r, "attn_pdrop", default=0.1),
        hidden_dropout=_dropout(r, "resid_pdrop", default=0.1),
        tensors=T.items,
    )


def _gpt_bigcode(r: ConfigReader, family: str) -> dict:
    """StarCoder / SantaCoder (transformers' GPTBigCodeConfig and modeling_gpt_bigcode): GPT-2's
    block with nn.Linear projections, learned positions, and multi-query attention -- one K/V
    head (``multi_query``, the default) fused into ``c_attn`` (out = hidden + 2 x head_dim)."""
    H = r.integer("n_embd", "hidden_size")
    L = r.integer("n_layer", "num_hidden_layers")
    NH = r.integer("n_head", "num_attention_heads")
    V = r.integer("vocab_size")
    P = r.integer("n_positions", "max_position_embeddings", default=1024)
    I = r.integer("n_inner", default=4 * H)
    if H % NH:
        raise r.fail(f'"n_embd" {H} is not divisible by "n_head" {NH}')
    if r.boolean("add_cross_attention", default=False):
        raise r.fail('"add_cross_attention" is true; gpuplan models GPTBigCode as a decoder-only '
                     'LM')
    KV = 1 if r.boolean("multi_query", default=True) else NH
    hd = H // NH
    tie = r.boolean("tie_word_embeddings", default=True)
    T = _Tensors()
    T.embedding("transformer.wte.weight", V, H, "wte")
    T.embedding("transformer.wpe.weight", P, H, "wpe")
    p = "transformer.h.{i}"
    T.norm(f"{p}.ln_1", H, L, bias=True)
    T.linear(f"{p}.attn.c_attn", H + 2 * KV * hd, H, L, "attention", bias=True)
    T.linear(f"{p}.attn.c_proj", H, H, L, "attention", bias=True)
    T.norm(f"{p}.ln_2", H, L, bias=True)
    T.linear(f"{p}.mlp.c_fc", I, H, L, "mlp", bias=True)
    T.linear(f"{p}.mlp.c_proj", H, I, L, "mlp", bias=True)
    T.norm("transformer.ln_f", H, 1, bias=True)
    if not tie:
        T.linear("lm_head", V, H, 1, "head", bias=False)
    return dict(
        kind="decoder", hidden_size=H, num_layers=L, num_heads=NH, num_kv_heads=KV, head_dim=hd,
        intermediate_size=I, vocab_size=V, max_position_embeddings=P, tie_word_embeddings=tie,
        mlp="gelu", activation=r.string("activation_function", default="gelu_pytorch_tanh"),
        norm="layernorm", position="learned", attention_bias=True, mlp_bias=True,
        attention_dropout=_dropout(r, "attn_pdrop", default=0.1),
        hidden_dropout=_dropout(r, "resid_pdrop", default=0.1),
        # GPTBigCodeModel registers a (n_positions, n_positions) bool causal mask as a
        # non-persistent buffer: on the device with the weights, in no checkpoint
        buffer_bytes=P * P,
        tensors=T.items,
    )


def _gpt_neox(r: ConfigReader, family: str) -> dict:
    H = r.integer("hidden_size")
    L = r.integer("num_hidden_layers")
    NH = r.integer("num_attention_heads")
    V = r.integer("vocab_size")
    I = r.integer("intermediate_size")
    P = r.integer("max_position_embeddings", default=2048)
    if H % NH:
        raise r.fail(f'"hidden_size" {H} is not divisible by "num_attention_heads" {NH}')
    bias = r.boolean("attention_bias", default=True)
    tie = r.boolean("tie_word_embeddings", default=False)
    T = _Tensors()
    T.embedding("gpt_neox.embed_in.weight", V, H, "embed_in")
    p = "gpt_neox.layers.{i}"
    T.norm(f"{p}.input_layernorm", H, L, bias=True)
    T.norm(f"{p}.post_attention_layernorm", H, L, bias=True)
    T.linear(f"{p}.attention.query_key_value", 3 * H, H, L, "attention", bias=bias)
    T.linear(f"{p}.attention.dense", H, H, L, "attention", bias=bias)
    T.linear(f"{p}.mlp.dense_h_to_4h", I, H, L, "mlp", bias=True)
    T.linear(f"{p}.mlp.dense_4h_to_h", H, I, L, "mlp", bias=True)
    T.norm("gpt_neox.final_layer_norm", H, 1, bias=True)
    if not tie:
        T.linear("embed_out", V, H, 1, "head", bias=False)
    return dict(
        kind="decoder", hidden_size=H, num_layers=L, num_heads=NH, num_kv_heads=NH,
        head_dim=H // NH, intermediate_size=I, vocab_size=V, max_position_embeddings=P,
        tie_word_embeddings=tie, mlp="gelu", activation=r.string("hidden_act", default="gelu"),
        norm="layernorm", position="rotary",
        parallel_attn_mlp=r.boolean("use_parallel_residual", default=True),
        attention_bias=bias, mlp_bias=True,
        attention_dropout=_dropout(r, "attention_dropout"),
        hidden_dropout=_dropout(r, "hidden_dropout"),
        tensors=T.items,
    )


def _opt(r: ConfigReader, family: str) -> dict:
    H = r.integer("hidden_size")
    L = r.integer("num_hidden_layers")
    NH = r.integer("num_attention_heads")
    V = r.integer("vocab_size")
    I = r.integer("ffn_dim")
    P = r.integer("max_position_embeddings", default=2048)
    D = r.integer("word_embed_proj_dim", default=H)
    if H % NH:
        raise r.fail(f'"hidden_size" {H} is not divisible by "num_attention_heads" {NH}')
    bias = r.boolean("enable_bias", default=True)
    affine = r.boolean("layer_norm_elementwise_affine", default=True)
    pre_ln = r.boolean("do_layer_norm_before", default=True)
    final_ln = pre_ln and not r.boolean("_remove_final_layer_norm", default=False)
    tie = r.boolean("tie_word_embeddings", default=True)
    T = _Tensors()
    T.embedding("model.decoder.embed_tokens.weight", V, D, "embed_tokens")
    # OPTLearnedPositionalEmbedding keeps 2 extra rows (position ids are offset by 2).
    T.embedding("model.decoder.embed_positions.weight", P + 2, H, "embed_positions")
    if D != H:
        T.linear("model.decoder.project_in", H, D, 1, "embeddings", bias=False)
        T.linear("model.decoder.project_out", D, H, 1, "head", bias=False)
    if final_ln and affine:
        T.norm("model.decoder.final_layer_norm", H, 1, bias=True)
    p = "model.decoder.layers.{i}"
    for proj in ("k_proj", "v_proj", "q_proj", "out_proj"):
        T.linear(f"{p}.self_attn.{proj}", H, H, L, "attention", bias=bias)
    if affine:
        T.norm(f"{p}.self_attn_layer_norm", H, L, bias=True)
    T.linear(f"{p}.fc1", I, H, L, "mlp", bias=bias)
    T.linear(f"{p}.fc2", H, I, L, "mlp", bias=bias)
    if affine:
        T.norm(f"{p}.final_layer_norm", H, L, bias=True)
    if not tie:
        T.linear("lm_head", V, D, 1, "head", bias=False)
    return dict(
        kind="decoder", hidden_size=H, num_layers=L, num_heads=NH, num_kv_heads=NH,
        head_dim=H // NH, intermediate_size=I, vocab_size=V, max_position_embeddings=P,
        tie_word_embeddings=tie, mlp="gelu",
        activation=r.string("activation_function", default="relu"), norm="layernorm",
        position="learned", attention_bias=bias, mlp_bias=bias,
        attention_dropout=_dropout(r, "attention_dropout"),
        hidden_dropout=_dropout(r, "dropout", default=0.1),
        tensors=T.items,
    )


def _falcon(r: ConfigReader, family: str) -> dict:
    H = r.integer("hidden_size", "n_embed")
    L = r.integer("num_hidden_layers", "n_layer")
    NH = r.integer("num_attention_heads", "n_head")
    V = r.integer("vocab_size")
    P = r.integer("max_position_embeddings", default=2048)
    if H % NH:
        raise r.fail(f'"hidden_size" {H} is not divisible by "num_attention_heads" {NH}')
    hd = H // NH
    new_arch = r.boolean("new_decoder_architecture", default=False)
    multi_query = r.boolean("multi_query", default=True)
    cfg_kv = r.integer("num_kv_heads", "n_head_kv", default=NH)
    if new_arch:
        if NH % cfg_kv:
            raise r.fail(f'"num_attention_heads" {NH} is not a multiple of "num_kv_heads" {cfg_kv}')
        KV = cfg_kv
        qkv_out = (2 * KV + NH) * hd
    elif multi_query:
        KV = 1
        qkv_out = H + 2 * hd
    else:
        KV = NH
        qkv_out = 3 * H
    bias = r.boolean("bias", default=False)
    parallel = r.boolean("parallel_attn", default=True)
    I = r.integer("ffn_hidden_size", default=4 * H)
    n_ln = r.integer("num_ln_in_parallel_attn", default=2 if new_arch else 1)
    tie = r.boolean("tie_word_embeddings", default=True)
    T = _Tensors()
    T.embedding("transformer.word_embeddings.weight", V, H, "word_embeddings")
    p = "transformer.h.{i}"
    T.linear(f"{p}.self_attention.query_key_value", qkv_out, H, L, "attention", bias=bias)
    T.linear(f"{p}.self_attention.dense", H, H, L, "attention", bias=bias)
    T.linear(f"{p}.mlp.dense_h_to_4h", I, H, L, "mlp", bias=bias)
    T.linear(f"{p}.mlp.dense_4h_to_h", H, I, L, "mlp", bias=bias)
    if not parallel:
        T.norm(f"{p}.post_attention_layernorm", H, L, bias=True)
        T.norm(f"{p}.input_layernorm", H, L, bias=True)
    elif n_ln == 2:
        T.norm(f"{p}.ln_attn", H, L, bias=True)
        T.norm(f"{p}.ln_mlp", H, L, bias=True)
    else:
        T.norm(f"{p}.input_layernorm", H, L, bias=True)
    T.norm("transformer.ln_f", H, 1, bias=True)
    if not tie:
        T.linear("lm_head", V, H, 1, "head", bias=False)
    alibi = r.boolean("alibi", default=False)
    return dict(
        kind="decoder", hidden_size=H, num_layers=L, num_heads=NH, num_kv_heads=KV, head_dim=hd,
        intermediate_size=I, vocab_size=V, max_position_embeddings=P, tie_word_embeddings=tie,
        mlp="gelu", activation=r.string("activation", default="gelu"), norm="layernorm",
        position="alibi" if alibi else "rotary", parallel_attn_mlp=parallel,
        attention_bias=bias, mlp_bias=bias,
        attention_dropout=_dropout(r, "attention_dropout"),
        hidden_dropout=_dropout(r, "hidden_dropout"),
        tensors=T.items,
    )


def _bloom(r: ConfigReader, family: str) -> dict:
    """BLOOM (transformers' BloomConfig and modeling_bloom): fused query_key_value interleaved
    per head, ALiBi instead of position embeddings, a LayerNorm on the word embeddings, a 4h
    GeLU MLP, biases everywhere, the head tied to the embeddings. BloomConfig maps
    ``num_hidden_layers`` / ``num_attention_heads`` to ``n_layer`` / ``n_head``, and a legacy
    ``n_embed`` overrides ``hidden_size``."""
    H = r.integer("n_embed", "hidden_size")
    L = r.integer("n_layer", "num_hidden_layers")
    NH = r.integer("n_head", "num_attention_heads")
    V = r.integer("vocab_size", default=250880)
    if H % NH:
        raise r.fail(f'"hidden_size" {H} is not divisible by "n_head" {NH}')
    tie = r.boolean("tie_word_embeddings", default=True)
    r.boolean("apply_residual_connection_post_layernorm", default=False)  # checked; the
    # activation replay reads it from the config
    if r.integer("pretraining_tp", default=1) > 1 and r.boolean("slow_but_exact", default=False):
        r.notes.append("slow_but_exact with pretraining_tp > 1 (BLOOM's sliced linears) is "
                       "planned as the plain linears it sums to")
    T = _Tensors()
    T.embedding("transformer.word_embeddings.weight", V, H, "word_embeddings")
    T.norm("transformer.word_embeddings_layernorm", H, 1, bias=True)
    p = "transformer.h.{i}"
    T.norm(f"{p}.input_layernorm", H, L, bias=True)
    T.linear(f"{p}.self_attention.query_key_value", 3 * H, H, L, "attention", bias=True)
    T.linear(f"{p}.self_attention.dense", H, H, L, "attention", bias=True)
    T.norm(f"{p}.post_attention_layernorm", H, L, bias=True)
    T.linear(f"{p}.mlp.dense_h_to_4h", 4 * H, H, L, "mlp", bias=True)
    T.linear(f"{p}.mlp.dense_4h_to_h", H, 4 * H, L, "mlp", bias=True)
    T.norm("transformer.ln_f", H, 1, bias=True)
    if not tie:
        T.linear("lm_head", V, H, 1, "head", bias=False)
    return dict(
        kind="decoder", hidden_size=H, num_layers=L, num_heads=NH, num_kv_heads=NH,
        head_dim=H // NH, intermediate_size=4 * H, vocab_size=V,
        # ALiBi has no position table; the config has no max_position_embeddings (BLOOM
        # trained at 2,048 tokens, its default sequence here)
        max_position_embeddings=r.integer("seq_length", "max_position_embeddings", default=2048),
        tie_word_embeddings=tie, mlp="gelu", activation="bloom_gelu", norm="layernorm",
        position="alibi", parallel_attn_mlp=False,
        attention_bias=True, mlp_bias=True,
        attention_dropout=_dropout(r, "attention_dropout"),
        hidden_dropout=_dropout(r, "hidden_dropout"),
        tensors=T.items,
    )


# --------------------------------------------------------------------------------------------
# Encoders: BERT (masked LM) and ViT (image classification)
# --------------------------------------------------------------------------------------------

def _bert(r: ConfigReader, family: str) -> dict:
    H = r.integer("hidden_size")
    L = r.integer("num_hidden_layers")
    NH = r.integer("num_attention_heads")
    V = r.integer("vocab_size")
    I = r.integer("intermediate_size")
    P = r.integer("max_position_embeddings", default=512)
    TV = r.integer("type_vocab_size", default=2, minimum=0)
    if H % NH:
        raise r.fail(f'"hidden_size" {H} is not divisible by "num_attention_heads" {NH}')
    pos = r.string("position_embedding_type", default="absolute")
    if pos != "absolute":
        raise r.fail(f'"position_embedding_type" is {pos!r}; gpuplan supports "absolute" only')
    if r.boolean("add_cross_attention", default=False):
        raise r.fail('"add_cross_attention" is true; gpuplan models BERT as an encoder')
    tie = r.boolean("tie_word_embeddings", default=True)
    T = _Tensors()
    T.embedding("bert.embeddings.word_embeddings.weight", V, H, "word_embeddings")
    T.embedding("bert.embeddings.position_embeddings.weight", P, H, "position_embeddings")
    T.embedding("bert.embeddings.token_type_embeddings.weight", TV, H, "token_type_embeddings")
    T.norm("bert.embeddings.LayerNorm", H, 1, bias=True)
    p = "bert.encoder.layer.{i}"
    for proj in ("query", "key", "value"):
        T.linear(f"{p}.attention.self.{proj}", H, H, L, "attention", bias=True)
    T.linear(f"{p}.attention.output.dense", H, H, L, "attention", bias=True)
    T.norm(f"{p}.attention.output.LayerNorm", H, L, bias=True)
    T.linear(f"{p}.intermediate.dense", I, H, L, "mlp", bias=True)
    T.linear(f"{p}.output.dense", H, I, L, "mlp", bias=True)
    T.norm(f"{p}.output.LayerNorm", H, L, bias=True)
    # The MLM head: a dense transform + LayerNorm, then the decoder (tied to the word
    # embeddings unless untied) with its own bias.
    T.linear("cls.predictions.transform.dense", H, H, 1, "head", bias=True)
    T.norm("cls.predictions.transform.LayerNorm", H, 1, bias=True)
    T.add("cls.predictions.bias", (V,), 1, "head", "decoder")
    if not tie:
        # Untied (transformers 5 unties every tied pair): the decoder keeps its own bias too.
        T.add("cls.predictions.decoder.weight", (V, H), 1, "head", "decoder", linear=True)
        T.add("cls.predictions.decoder.bias", (V,), 1, "head", "decoder")
    return dict(
        kind="encoder", hidden_size=H, num_layers=L, num_heads=NH, num_kv_heads=NH,
        head_dim=H // NH, intermediate_size=I, vocab_size=V, max_position_embeddings=P,
        tie_word_embeddings=tie, mlp="gelu", activation=r.string("hidden_act", default="gelu"),
        norm="layernorm", position="learned", attention_bias=True, mlp_bias=True,
        attention_dropout=_dropout(r, "attention_probs_dropout_prob", default=0.1),
        hidden_dropout=_dropout(r, "hidden_dropout_prob", default=0.1),
        tensors=T.items,
    )


def _num_labels(r: ConfigReader) -> int:
    """transformers: len(id2label) when given, else num_labels, else 2."""
    id2label = r.config.get("id2label")
    if id2label is not None:
        if not isinstance(id2label, Mapping):
            raise r.fail('"id2label" must be an object mapping class ids to names')
        return len(id2label)
    return r.integer("num_labels", default=2, minimum=0)


def _vit(r: ConfigReader, family: str) -> dict:
    H = r.integer("hidden_size")
    L = r.integer("num_hidden_layers")
    NH = r.integer("num_attention_heads")
    I = r.integer("intermediate_size")
    image = r.integer("image_size", default=224)
    patch = r.integer("patch_size", default=16)
    C = r.integer("num_channels", default=3)
    if image < patch:
        raise r.fail(f'"patch_size" {patch} is larger than "image_size" {image}')
    hd = _head_dim(r, H, NH)
    qkv_bias = r.boolean("qkv_bias", default=True)
    labels = _num_labels(r)
    patches = (image // patch) ** 2
    T = _Tensors()
    T.add("vit.embeddings.cls_token", (1, 1, H), 1, "embeddings", "cls_token")
    T.add("vit.embeddings.position_embeddings", (1, patches + 1, H), 1, "embeddings",
          "position_embeddings")
    T.add("vit.embeddings.patch_embeddings.projection.weight", (H, C, patch, patch), 1,
          "embeddings", "projection")
    T.add("vit.embeddings.patch_embeddings.projection.bias", (H,), 1, "embeddings", "projection")
    p = "vit.encoder.layer.{i}"
    for proj in ("query", "key", "value"):
        T.linear(f"{p}.attention.attention.{proj}", NH * hd, H, L, "attention", bias=qkv_bias)
    T.linear(f"{p}.attention.output.dense", H, NH * hd, L, "attention", bias=True)
    T.linear(f"{p}.intermediate.dense", I, H, L, "mlp", bias=True)
    T.linear(f"{p}.output.dense", H, I, L, "mlp", bias=True)
    T.norm(f"{p}.layernorm_before", H, L, bias=True)
    T.norm(f"{p}.layernorm_after", H, L, bias=True)
    T.norm("vit.layernorm", H, 1, bias=True)
    if labels > 0:
        T.linear("classifier", labels, H, 1, "head", bias=True)
    return dict(
        kind="vision", hidden_size=H, num_layers=L, num_heads=NH, num_kv_heads=NH, head_dim=hd,
        intermediate_size=I, vocab_size=0, max_position_embeddings=patches + 1,
        tie_word_embeddings=False, mlp="gelu", activation=r.string("hidden_act", default="gelu"),
        norm="layernorm", position="learned", attention_bias=qkv_bias, mlp_bias=True,
        attention_dropout=_dropout(r, "attention_probs_dropout_prob"),
        hidden_dropout=_dropout(r, "hidden_dropout_prob"),
        image_size=image, patch_size=patch, num_channels=C, num_labels=labels,
        tensors=T.items,
    )


_BUILDERS: dict[str, Callable[[ConfigReader, str], dict]] = {
    "llama": _llama_style, "mistral": _llama_style, "mixtral": _llama_style,
    "qwen2": _llama_style, "qwen2_moe": _llama_style, "gemma2": _llama_style,
    "phi3": _llama_style, "gpt2": _gpt2, "gpt_bigcode": _gpt_bigcode, "gpt_neox": _gpt_neox, "opt": _opt, "falcon": _falcon,
    "bloom": _bloom,
    "bert": _bert, "vit": _vit,
    **MODERN_BUILDERS,
}

#: Multimodal configs whose text part is planned (the vision tower is not counted).
_MULTIMODAL_TEXT = {"gemma3": "gemma3_text", "llama4": "llama4_text"}

#: ``quantization_config`` methods a checkpoint ships in -> gpuplan's weight format.
_CHECKPOINT_FORMATS = {"fp8": "fp8-block", "mxfp4": "mxfp4"}


def _freeze(v: object) -> object:
    if isinstance(v, Mapping):
        return MappingProxyType({k: _freeze(x) for k, x in v.items()})
    if isinstance(v, list):
        return tuple(_freeze(x) for x in v)
    return v


def build_architecture(config: Mapping[str, object], *, name: str, source: str = "",
                       where: str | None = None) -> tuple[Architecture, tuple[str, ...]]:
    """Parse ``config`` into an :class:`Architecture`; also returns notes worth showing.

    ``where`` names the config in error messages (the file path; defaults to ``name``).
    """
    config, pre_notes = _text_part(config, where or name)
    r = ConfigReader(config, where or name)
    r.notes.extend(pre_notes)
    model_type = r.string("model_type")
    if model_type is None:
        raise r.fail('missing required key "model_type" (one of ' + ", ".join(SUPPORTED_FAMILIES)
                     + ")")
    nearest = ""
    if model_type not in _BUILDERS:  # planned as its nearest family, with one note
        config, nearest = nearest_config(config, r.where, HF_CLASSES)
        r = ConfigReader(config, r.where)
        model_type = str(config["model_type"])
    fields = _BUILDERS[model_type](r, model_type)
    hf_class = HF_CLASSES[model_type]
    notes: list[str] = ["; ".join([nearest, *r.notes])] if nearest else list(r.notes)
    archs = r.str_list("architectures")
    if archs and hf_class not in archs:
        notes.append(f"config.json lists {', '.join(archs)}; gpuplan counts the parameters of "
                     f"{hf_class}")
    fmt, fmt_note = _checkpoint_format(r)
    if fmt_note:
        notes.append(fmt_note)
    if fields.get("mtp_layers"):
        n, extra = fields["mtp_layers"], fields.get("mtp_params", 0)
        notes.append(f"the checkpoint also holds {n} multi-token-prediction layer"
                     f"{'s' if n > 1 else ''}" + (f" ({extra:,} parameters)" if extra else "")
                     + f"; {hf_class} builds none, so they are not counted (vLLM and SGLang "
                     "load them only for MTP speculative decoding)")
    tensors = tuple(fields.pop("tensors"))
    total = sum(t.total for t in tensors)
    if total > MAX_PARAMS:
        raise r.fail(f"describes {total:.3e} parameters, more than the {MAX_PARAMS:.0e} limit")
    arch = Architecture(
        name=name, family=model_type, hf_class=hf_class, tensors=tensors,
        checkpoint_format=fmt, checkpoint_kernel=_checkpoint_kernel(r),
        torch_dtype=_torch_dtype(r), config=_freeze(dict(config)),  # type: ignore[arg-type]
        source=source, **fields,
    )
    return arch, tuple(notes)


def _text_part(config: Mapping[str, object], where: str) -> tuple[Mapping[str, object], list[str]]:
    """A multimodal config (Gemma 3, Llama 4) planned as its text model: the ``text_config``
    block, with a note; any other config unchanged."""
    mt = config.get("model_type")
    text = config.get("text_config")
    if not isinstance(mt, str) or mt not in _MULTIMODAL_TEXT or not isinstance(text, Mapping):
        return config, []
    inner = dict(text)
    inner.setdefault("model_type", _MULTIMODAL_TEXT[str(mt)])
    if inner["model_type"] != _MULTIMODAL_TEXT[str(mt)]:
        raise ModelFileError(where, f'"text_config" has model_type {inner["model_type"]!r}; '
                                    f'expected {_MULTIMODAL_TEXT[str(mt)]!r}')
    for key in ("torch_dtype", "dtype", "quantization_config", "tie_word_embeddings"):
        if key in config and key not in inner:
            inner[key] = config[key]
    return inner, [f"the text model of this {mt} multimodal config is planned; its vision "
                   "tower and projector are not counted"]


def _checkpoint_kernel(r: ConfigReader) -> str | None:
    """An AWQ checkpoint's kernel: ``quantization_config`` ``version`` (AutoAWQ's quant_config
    writes it, e.g. "GEMM") or ``format`` (transformers 5's AwqConfig, which reads ``version``
    as the legacy name of ``format``, lowercased; default "gemm": utils/quantization_config.py
    ``AwqConfig.__init__``, transformers 5.25.0); None for any other checkpoint."""
    q = r.config.get("quantization_config")
    if not isinstance(q, Mapping) or str(q.get("quant_method") or "").lower() != "awq":
        return None
    v = q.get("version") if q.get("version") is not None else q.get("format", "gemm")
    if not isinstance(v, str) or not v:
        raise r.fail(f'quantization_config "version" {v!r}: expected a kernel name such as '
                     '"gemm" or "gemv"')
    return v.lower()


def _checkpoint_format(r: ConfigReader) -> tuple[str | None, str]:
    """The weight format the checkpoint ships in, from ``quantization_config``."""
    q = r.config.get("quantization_config")
    if q is None:
        return None, ""
    if not isinstance(q, Mapping):
        raise r.fail('"quantization_config" must be an object')
    method = q.get("quant_method")
    fmt = _CHECKPOINT_FORMATS.get(method) if isinstance(method, str) else None
    if method == "fp8" and q.get("weight_block_size") is None:
        fmt = "fp8"
    if fmt is None:
        return None, (f"quantization_config names {method!r}, a format gpuplan does not read "
                      "from a config; plan it with --infer-precision")
    return fmt, f"the checkpoint ships in {fmt} (quantization_config: {method})"
