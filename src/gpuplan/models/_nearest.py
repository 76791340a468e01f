"""An unlisted decoder ``model_type`` planned as its nearest supported family.

A config.json whose ``model_type`` has no reader here is still planned when its keys use the
common names (``hidden_size`` / ``n_embd`` / ``d_model``, ``num_hidden_layers`` / ``n_layer`` /
``num_layers``, ``num_attention_heads`` / ``n_head``, ``num_key_value_heads`` / ``num_kv_heads`` /
``multi_query``, ``intermediate_size`` / ``ffn_dim`` / ``n_inner``, ``vocab_size``, the expert
counts ...). The keys present choose the family:

==========================================  ===============  ===============================
keys present                                family           why
==========================================  ===============  ===============================
``kv_lora_rank`` (MLA)                      deepseek_v3      the only MLA reader
experts + a shared-expert width             qwen2_moe        routed + one gated shared expert
experts + a shared-expert count             glm4_moe         DeepSeek MoE with GQA attention
experts + QK-norm or sparse-layer lists     qwen3_moe        mlp_only_layers / sparse step
experts + first dense layers                glm4_moe         first_k_dense_replace
experts                                     mixtral          every layer routed
non-gated activation (gelu, relu), GQA      falcon           new decoder architecture
non-gated activation, MHA                   gpt_neox         biased LayerNorm decoder
QK-norm, or ``layer_types`` windows         qwen3            per-head q/k norms, layer_types
``sliding_window``                          mistral          a window on every layer
anything else                               llama            GQA, optional biases
==========================================  ===============  ===============================

The config is translated into the family's own keys, every value written out (no family
default is taken silently), and read by that family's reader. One note names every assumption:
the family and why, each default taken, each key present but not understood (and so ignored).
Encoder-decoder and encoder configs (T5, Whisper, BART, RoBERTa ...) are refused with one line.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ..errors import ModelFileError, shown
from ._config import ConfigReader

__all__ = ["nearest_config"]

_MISSING = object()

#: What an unlisted model_type must look like to be planned (transformers' names: granite,
#: granitemoe, ernie4_5_moe, mistral3 ...).
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}")

#: The common names of each quantity, in the order they are looked up.
_NAMES: dict[str, tuple[str, ...]] = {
    "hidden": ("hidden_size", "n_embd", "d_model", "n_embed", "dim", "model_dim"),
    "layers": ("num_hidden_layers", "n_layer", "num_layers", "n_layers"),
    "heads": ("num_attention_heads", "n_head", "n_heads", "num_heads"),
    "kv_heads": ("num_key_value_heads", "num_kv_heads", "n_kv_heads", "n_head_kv",
                 "num_kv_groups"),
    "inter": ("intermediate_size", "ffn_dim", "n_inner", "ffn_hidden_size", "d_ff",
              "ffn_dim_size"),
    "vocab": ("vocab_size", "n_vocab", "padded_vocab_size"),
    "head_dim": ("head_dim", "kv_channels", "attention_head_dim"),
    "max_pos": ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length",
                "max_sequence_length", "n_ctx"),
    "experts": ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts",
                "num_routed_experts"),
    "top_k": ("num_experts_per_tok", "top_k", "moe_top_k", "num_experts_per_token", "moe_k",
              "num_selected_experts"),
    "moe_inter": ("moe_intermediate_size", "expert_intermediate_size", "moe_ffn_hidden_size"),
    "shared_n": ("n_shared_experts", "num_shared_experts", "moe_num_shared_experts"),
    "shared_w": ("shared_expert_intermediate_size", "shared_intermediate_size"),
    "first_dense": ("first_k_dense_replace", "first_k_dense", "num_dense_layers",
                    "moe_layer_start_index"),
    "step": ("decoder_sparse_step", "moe_layer_freq", "interleave_moe_layer_step",
             "moe_layer_interval"),
    "attn_bias": ("attention_bias", "qkv_bias", "use_qkv_bias"),
    "all_bias": ("use_bias", "bias", "add_bias_linear"),
    "qk_norm": ("use_qk_norm", "qk_layernorm", "qk_norm", "use_qk_layernorm"),
    "act": ("hidden_act", "activation_function", "hidden_activation", "activation"),
    "parallel": ("parallel_attn", "use_parallel_residual", "parallel_residual"),
}

#: MLA's keys (DeepSeek-V2/V3's names); the translation carries them as they are.
_MLA_KEYS = ("q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")

#: Keys read and understood as changing no size the plan counts: metadata, token ids, norm
#: epsilons, rotary bases and scaling, dropout rates, initialisation, output switches.
_NO_EFFECT = frozenset({
    "model_type", "architectures", "torch_dtype", "dtype", "transformers_version",
    "_name_or_path", "auto_map", "bos_token_id", "eos_token_id", "pad_token_id",
    "sep_token_id", "unk_token_id", "decoder_start_token_id", "tokenizer_class",
    "initializer_range", "init_std", "norm_epsilon", "initializer_factor", "rms_norm_eps", "layer_norm_eps",
    "layer_norm_epsilon", "norm_eps", "rope_theta", "rope_scaling", "rope_parameters",
    "rotary_emb_base", "rope_type", "use_cache", "attention_dropout", "hidden_dropout",
    "resid_pdrop", "embd_pdrop", "attn_pdrop", "dropout", "embedding_dropout",
    "residual_dropout", "hidden_dropout_prob",
    "attention_probs_dropout_prob", "output_attentions", "output_hidden_states", "return_dict",
    "id2label", "label2id", "quantization_config", "use_sliding_window", "sliding_window",
    "multi_query", "tie_word_embeddings", "mlp_bias", "mlp_only_layers",
    "max_window_layers", "partial_rotary_factor", "rotary_pct", "norm_topk_prob",
    "is_decoder", "is_encoder_decoder", "pretraining_tp", "text_config",
    "output_router_logits", "router_aux_loss_coef", "router_jitter_noise", "aux_loss_alpha",
})

#: Activations that mark a two-matrix (non-gated) MLP unless a key says the MLP is gated.
_PLAIN_ACTS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast", "gelu_python",
               "quick_gelu", "relu", "gelu_accurate", "relu2")
_GATED_KEYS = ("gated_mlp", "use_glu", "glu", "mlp_type", "ffn_type")

#: Architecture names and keys of configs that are not decoder-only language models.
_NOT_DECODER_SUFFIXES = ("ForMaskedLM", "ForSequenceClassification", "ForTokenClassification",
                         "ForQuestionAnswering", "ForImageClassification", "ForCTC",
                         "ForSpeechSeq2Seq", "ForAudioClassification", "ForMultipleChoice",
                         "ForPreTraining", "ForObjectDetection", "ForSemanticSegmentation")
_ENC_DEC_KEYS = ("encoder_layers", "decoder_layers", "num_decoder_layers", "encoder_config",
                 "decoder_config", "d_kv")
#: Keys of state-space and linear-attention (recurrent) layers, which no family here has.
_RECURRENT_KEYS = ("state_size", "ssm_state_size", "mamba_d_state", "d_state", "ssm_cfg",
                   "conv_kernel", "mamba_d_conv", "linear_conv_kernel_dim", "attention_hidden_size")


class _Keys:
    """The unknown config read by common names; remembers the keys used and the defaults taken."""

    def __init__(self, config: Mapping[str, object], where: str) -> None:
        self.config = config
        self.r = ConfigReader(config, where)
        self.used: set[str] = set()
        self.defaults: list[str] = []

    def key(self, what: str) -> str | None:
        """The first of ``what``'s names the config holds (a JSON null counts as absent)."""
        for k in _NAMES[what]:
            if k in self.config:
                self.used.add(k)
                if self.config[k] is not None:
                    return k
        return None

    def int(self, what: str, default: object = _MISSING, *, why: str = "",
            minimum: int = 1) -> int:
        k = self.key(what)
        if k is not None:
            return self.r.integer(k, minimum=minimum)
        if default is _MISSING:
            names = " or ".join(f'"{n}"' for n in _NAMES[what][:3])
            raise self.r.fail(f"model_type {self.config.get('model_type')!r} is not "
                              f"supported, and without {names} it cannot be planned as its "
                              "nearest family; add the key")
        if why:
            self.defaults.append(f"{_NAMES[what][0]} = {default} ({why})")
        return default  # type: ignore[return-value]

    def flag(self, what: str, default: bool) -> bool | None:
        """True/false when a name of ``what`` is present, else None."""
        k = self.key(what)
        return None if k is None else self.r.boolean(k, default=default)

    def raw(self, key: str) -> object:
        if key in self.config:
            self.used.add(key)
        return self.config.get(key)


def nearest_config(config: Mapping[str, object], where: str,
                   known: Mapping[str, object]) -> tuple[dict, str]:
    """``config`` (an unlisted ``model_type``) as the config.json of its nearest family in
    ``known``, with the note that names every assumption. Raises :class:`ModelFileError` (one
    line) for a config that is not a decoder-only language model or lacks a structural size."""
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or not _NAME.fullmatch(model_type):
        raise ModelFileError(where, f"model_type {shown(model_type)} is not supported, nor a "
                                    "model_type name (letters, digits, _ . -)")
    text = config.get("text_config")
    if isinstance(text, Mapping):
        return _text_config(config, text, where, known)
    _refuse_non_decoder(config, where, model_type)
    k = _Keys(config, where)
    dims = _dims(k)
    family, why = _choose(k, dims)
    out = _translate(k, family, dims)
    if family == "deepseek_v3":  # MLA's own ranks replace the KV heads and head_dim
        k.defaults = [x for x in k.defaults if not x.startswith(("num_key_value", "head_dim"))]
    for key in ("torch_dtype", "dtype", "quantization_config"):
        if config.get(key) is not None:
            out[key] = config[key]
    return out, _note(model_type, f"{family} ({known.get(family, family)})", why, k)


def _text_config(config: Mapping[str, object], text: Mapping[str, object], where: str,
                 known: Mapping[str, object]) -> tuple[dict, str]:
    """A multimodal config: its ``text_config`` planned (as itself when its model_type is
    supported, else as its nearest family); the vision and audio towers are not counted."""
    inner = dict(text)
    for key in ("torch_dtype", "dtype", "quantization_config", "tie_word_embeddings"):
        if key in config and key not in inner:
            inner[key] = config[key]
    head = (f"model_type {config.get('model_type')!r} is not supported: its text_config is "
            "planned (the vision/audio towers and the projector are not counted)")
    if isinstance(inner.get("model_type"), str) and inner["model_type"] in known:
        inner.pop("architectures", None)
        return inner, f"{head} as {inner['model_type']}, its own model_type"
    inner.setdefault("model_type", f"{config.get('model_type')}.text_config")
    out, note = nearest_config({k: v for k, v in inner.items() if k != "text_config"}, where,
                               known)
    return out, f"{head}; {note}"


def _refuse_non_decoder(config: Mapping[str, object], where: str, model_type: object) -> None:
    archs = config.get("architectures")
    archs = [a for a in archs if isinstance(a, str)] if isinstance(archs, list) else []
    why = ""
    if config.get("is_encoder_decoder") is True:
        why = "is_encoder_decoder is true"
    elif any(k in config for k in _ENC_DEC_KEYS):
        why = "it has " + next(f'"{k}"' for k in _ENC_DEC_KEYS if k in config)
    elif archs and all(a.endswith(_NOT_DECODER_SUFFIXES) for a in archs):
        why = f"its architectures are {', '.join(archs)}"
    elif any(k in config for k in _RECURRENT_KEYS):
        why = ("it has state-space or linear-attention layers ("
               + next(f'"{k}"' for k in _RECURRENT_KEYS if k in config) + ")")
    elif config.get("is_decoder") is False:
        why = "is_decoder is false"
    elif "vision_config" in config or "audio_config" in config:
        why = "it has a vision/audio tower and no text_config"
    if why:
        raise ModelFileError(where, f"model_type {model_type!r} is not supported and is not a "
                                    f"decoder-only transformer language model ({why}); gpuplan "
                                    "plans an unlisted model_type only as one")


def _dims(k: _Keys) -> dict:
    """The sizes every family needs, with the defaults taken."""
    H, L, NH, V = k.int("hidden"), k.int("layers"), k.int("heads"), k.int("vocab")
    mq = k.raw("multi_query")
    if k.key("kv_heads") is not None:
        KV = k.int("kv_heads")
    elif mq is True:
        KV = 1
    else:
        KV = k.int("kv_heads", NH, why="no KV-head count: multi-head attention")
    if NH % KV and k.config.get("kv_lora_rank") is None:  # MLA has no KV heads
        raise k.r.fail(f"{NH} attention heads are not a multiple of {KV} key/value heads")
    hd_default = H // NH if H % NH == 0 else _MISSING
    hd = k.int("head_dim", hd_default, why="hidden / heads")
    inter = k.int("inter", 4 * H, why="4 x hidden")
    act = k.r.string(k.key("act") or "hidden_act", default=None)
    gated_hint = any(k.raw(g) is not None for g in _GATED_KEYS if g in k.config)
    gated = act is None or gated_hint or act not in _PLAIN_ACTS
    if act is None:
        k.defaults.append("hidden_act = silu (a gated MLP)")
    return dict(H=H, L=L, NH=NH, KV=KV, hd=hd, I=inter, V=V, act=act or "silu", gated=gated,
                P=k.int("max_pos", 2048, why="no context length; it sets only the default "
                                                  "sequence"),
                tie=_tie(k))


def _tie(k: _Keys) -> bool:
    if "tie_word_embeddings" in k.config:
        k.used.add("tie_word_embeddings")
        return k.r.boolean("tie_word_embeddings", default=False)
    k.defaults.append("tie_word_embeddings = false (an output head of its own)")
    return False


def _choose(k: _Keys, d: dict) -> tuple[str, str]:
    """The nearest family and why, from the keys present."""
    experts = k.int("experts", 0, minimum=0)
    d["E"] = experts
    qk = k.flag("qk_norm", False)
    window = k.raw("sliding_window")
    use_window = k.raw("use_sliding_window")
    d["window"] = window if isinstance(window, int) and window > 0 and use_window is not False \
        else None
    types = k.config.get("layer_types")
    if k.raw("kv_lora_rank") is not None:
        return "deepseek_v3", "kv_lora_rank: Multi-head Latent Attention"
    if experts:
        if k.key("shared_w") is not None:
            return "qwen2_moe", "routed experts and a shared-expert width"
        if k.key("shared_n") is not None:
            return "glm4_moe", "routed experts and shared experts with GQA attention"
        if qk or k.key("step") is not None or "mlp_only_layers" in k.config:
            return "qwen3_moe", ("routed experts and QK-norm" if qk else
                                 "routed experts with dense layers between")
        if k.key("first_dense") is not None:
            return "glm4_moe", "routed experts after first dense layers"
        return "mixtral", "routed experts on every layer"
    if not d["gated"]:
        if d["KV"] < d["NH"]:
            return "falcon", f"a two-matrix {d['act']} MLP with grouped KV heads"
        return "gpt_neox", f"a two-matrix {d['act']} MLP"
    if qk:
        return "qwen3", "QK-norm"
    if d["window"] and isinstance(types, list):
        return "qwen3", "sliding windows on the layers layer_types names"
    if d["window"]:
        return "mistral", "a sliding window"
    return "llama", "a gated MLP decoder with no other distinguishing key"


def _biases(k: _Keys) -> tuple[bool | None, bool | None]:
    """(attention bias, MLP bias); None where no key says."""
    every = k.flag("all_bias", False)
    attn = k.flag("attn_bias", False)
    mlp = k.r.boolean("mlp_bias", default=False) if k.raw("mlp_bias") is not None else None
    return (attn if attn is not None else every), (mlp if mlp is not None else every)


def _translate(k: _Keys, family: str, d: dict) -> dict:
    """The family's own keys, every value written out."""
    attn_bias, mlp_bias = _biases(k)
    out: dict = dict(model_type=family, hidden_size=d["H"], num_hidden_layers=d["L"],
                     num_attention_heads=d["NH"], vocab_size=d["V"],
                     max_position_embeddings=d["P"], tie_word_embeddings=d["tie"])
    gqa = dict(num_key_value_heads=d["KV"], head_dim=d["hd"], intermediate_size=d["I"],
               hidden_act=d["act"])
    if d["window"] and family not in ("mistral", "mixtral", "qwen3", "qwen3_moe"):
        k.defaults.append(f"sliding_window {d['window']} not modeled ({family} has none): "
                          "the KV cache and attention span every token")
    if family in ("gpt_neox", "falcon"):
        return _plain_mlp(k, family, d, out, attn_bias, mlp_bias)
    if family == "deepseek_v3":
        return _mla_family(k, d, dict(out, intermediate_size=d["I"], hidden_act=d["act"],
                                      attention_bias=bool(attn_bias)))
    out.update(gqa)
    if family in ("mistral", "mixtral") and (attn_bias or mlp_bias):
        k.defaults.append(f"biases not counted ({family} has none)")
    if family == "llama":
        out.update(attention_bias=bool(attn_bias), mlp_bias=bool(mlp_bias))
    elif family == "mistral":
        out.update(sliding_window=d["window"])
    elif family == "qwen3":
        out.update(_qwen3_window(k, d), attention_bias=bool(attn_bias))
    else:
        out.update(_experts(k, family, d, attn_bias))
    if family in ("qwen3", "qwen3_moe") and not k.flag("qk_norm", False):
        k.defaults.append(f"q_norm/k_norm counted ({family} has them; the config names none)")
    return out


def _qwen3_window(k: _Keys, d: dict) -> dict:
    types = k.raw("layer_types")
    if isinstance(types, list) and not all(t in ("full_attention", "sliding_attention")
                                           for t in types):
        k.defaults.append("layer_types' other kinds planned as full attention")
        types = ["sliding_attention" if t == "sliding_attention" else "full_attention"
                 for t in types]
    out: dict = dict(use_sliding_window=d["window"] is not None, sliding_window=d["window"],
                     max_window_layers=0)
    if isinstance(types, list):
        out["layer_types"] = types
    return out


def _moe_sizes(k: _Keys, d: dict) -> tuple[int, int]:
    top_k = k.int("top_k", min(2, d["E"]), why="no experts-per-token key")
    moe_I = k.int("moe_inter", d["I"], why="no expert width: the intermediate size")
    if top_k > d["E"]:
        raise k.r.fail(f"routes each token to {top_k} experts of {d['E']}")
    return top_k, moe_I


def _dense_layers(k: _Keys, d: dict) -> tuple[int, list[int], int]:
    """(first dense layers, mlp_only_layers, sparse step)."""
    first = k.int("first_dense", 0, minimum=0)
    only = k.raw("mlp_only_layers")
    only = list(only) if isinstance(only, list) else []
    return min(first, d["L"]), only, k.int("step", 1)


def _experts(k: _Keys, family: str, d: dict, attn_bias: bool | None) -> dict:
    top_k, moe_I = _moe_sizes(k, d)
    first, only, step = _dense_layers(k, d)
    if family == "mixtral":
        return dict(num_local_experts=d["E"], num_experts_per_tok=top_k,
                    intermediate_size=moe_I, sliding_window=d["window"])
    sparse = dict(num_experts_per_tok=top_k, moe_intermediate_size=moe_I,
                  decoder_sparse_step=step,
                  mlp_only_layers=sorted(set(only) | set(range(first))))
    if family == "qwen3_moe":
        return dict(sparse, num_experts=d["E"], attention_bias=bool(attn_bias),
                    use_sliding_window=d["window"] is not None, sliding_window=d["window"])
    if family == "qwen2_moe":
        k.defaults.append("a shared_expert_gate (hidden x 1) counted per MoE layer")
        return dict(sparse, num_experts=d["E"], qkv_bias=bool(attn_bias),
                    use_sliding_window=False,
                    shared_expert_intermediate_size=k.int("shared_w", 0, minimum=0))
    if only or step != 1:
        k.defaults.append("mlp_only_layers / sparse step ignored: experts on every layer "
                          "after the first dense ones")
    return dict(_deepseek_moe(k, d, top_k, moe_I, first), attention_bias=bool(attn_bias),
                use_qk_norm=bool(k.flag("qk_norm", False)),
                partial_rotary_factor=_rotary(k))


def _rotary(k: _Keys) -> float:
    for key in ("partial_rotary_factor", "rotary_pct"):
        v = k.raw(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
    return 1.0


def _deepseek_moe(k: _Keys, d: dict, top_k: int, moe_I: int, first: int) -> dict:
    """The DeepSeek MoE keys (glm4_moe, deepseek_v3): n_group/topk_group as given, else 1."""
    return dict(n_routed_experts=d["E"], num_experts_per_tok=top_k,
                moe_intermediate_size=moe_I, first_k_dense_replace=first,
                n_shared_experts=k.int("shared_n", 0, minimum=0),
                n_group=k.r.integer("n_group", default=1) if k.raw("n_group") else 1,
                topk_group=k.r.integer("topk_group", default=1) if k.raw("topk_group") else 1,
                num_nextn_predict_layers=k.r.integer("num_nextn_predict_layers", default=0,
                                                     minimum=0)
                if k.raw("num_nextn_predict_layers") is not None else 0)


def _mla_family(k: _Keys, d: dict, out: dict) -> dict:
    for key in _MLA_KEYS:
        if key in k.config:
            k.used.add(key)
            out[key] = k.config[key]
        elif key != "q_lora_rank":
            raise k.r.fail(f'has "kv_lora_rank" (Multi-head Latent Attention) but no "{key}"; '
                           "add it")
        else:
            out[key] = None
            k.defaults.append("q_lora_rank = null (queries projected directly)")
    if d["E"]:
        top_k, moe_I = _moe_sizes(k, d)
        first, only, step = _dense_layers(k, d)
        out.update(_deepseek_moe(k, d, top_k, moe_I, first))
    else:
        out.update(n_routed_experts=1, num_experts_per_tok=1, moe_intermediate_size=d["I"],
                   first_k_dense_replace=d["L"], n_shared_experts=0, n_group=1, topk_group=1,
                   num_nextn_predict_layers=0)
    return out


def _plain_mlp(k: _Keys, family: str, d: dict, out: dict, attn_bias: bool | None,
               mlp_bias: bool | None) -> dict:
    """gpt_neox (MHA) and falcon (GQA): LayerNorm decoders with a two-matrix MLP."""
    if d["hd"] * d["NH"] != d["H"]:
        raise k.r.fail(f"has head_dim {d['hd']} x {d['NH']} heads != hidden {d['H']}: no "
                       "supported non-gated family has that shape")
    parallel = k.flag("parallel", False)
    if parallel is None:
        k.defaults.append("attention then MLP (no parallel-residual key)")
    if family == "gpt_neox":
        if attn_bias is None:
            k.defaults.append("biased linears (as gpt_neox)")
        return dict(out, intermediate_size=d["I"], hidden_act=d["act"],
                    attention_bias=attn_bias is not False, use_parallel_residual=bool(parallel))
    bias = bool(attn_bias or mlp_bias)
    if attn_bias is None and mlp_bias is None:
        k.defaults.append("no linear biases (as falcon)")
    return dict(out, new_decoder_architecture=True, num_kv_heads=d["KV"], bias=bias,
                parallel_attn=bool(parallel), num_ln_in_parallel_attn=1,
                ffn_hidden_size=d["I"], activation=d["act"], alibi=False)


def _note(model_type: object, family: str, why: str, k: _Keys) -> str:
    parts = [f"model_type {model_type!r} is not supported: planned as its nearest family, "
             f"{family}, for {why}"]
    if k.defaults:
        parts.append("assumed " + "; ".join(k.defaults))
    ignored = sorted(key for key in k.config if key not in k.used and key not in _NO_EFFECT)
    if ignored:
        shown = ", ".join(ignored[:12]) + (f" and {len(ignored) - 12} more"
                                           if len(ignored) > 12 else "")
        parts.append(f"not understood, so ignored: {shown}")
    parts.append(f"the counts follow {family.split()[0]}'s tensor list (norms, biases or "
                 "layers it lacks are not counted)")
    return "; ".join(parts)
