"""Which linears LoRA adapts: the one selection that the memory accounting (the adapter tensors
and their states) and the speed model (the adapter passes) both read."""

from __future__ import annotations

from typing import Sequence

from ..errors import InputError, opt
from ._types import ParamTensor

#: PEFT's default LoRA target modules per model family (peft.utils.constants,
#: TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING).
DEFAULT_LORA_TARGETS: dict[str, tuple[str, ...]] = {
    "llama": ("q_proj", "v_proj"), "mistral": ("q_proj", "v_proj"),
    "mixtral": ("q_proj", "v_proj"), "qwen2": ("q_proj", "v_proj"),
    "qwen2_moe": ("q_proj", "v_proj"), "gemma2": ("q_proj", "v_proj"),
    "phi3": ("qkv_proj",), "gpt2": ("c_attn",),
    "gpt_bigcode": ("c_attn",), "gpt_neox": ("query_key_value",),
    "opt": ("q_proj", "v_proj"), "falcon": ("query_key_value",), "bert": ("query", "value"),
    "vit": ("query", "value"), "bloom": ("query_key_value",),
    "qwen3": ("q_proj", "v_proj"), "gemma3_text": ("q_proj", "v_proj"),
}

#: Families PEFT 0.21 has no default for (get_peft_model asks for target_modules): deepseek_v2/v3,
#: qwen3_moe, glm4_moe, gpt_oss, llama4_text (PEFT's mapping keys the multimodal "llama4"),
#: nemotron and olmo2 (not in TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING either,
#: huggingface/peft src/peft/utils/constants.py @00073fe8).
NO_PEFT_DEFAULT = ("deepseek_v2", "deepseek_v3", "qwen3_moe", "glm4_moe", "gpt_oss",
                   "llama4_text", "nemotron", "olmo2")


#: Megatron-Core's fused QKV projection as a LoRA target: NeMo's ``attention_qkv`` (its default
#: target, and its "nemo" variant: ONE adapter, hidden -> r -> (heads + 2 query groups) x
#: head_dim, over the fused output; NVIDIA/NeMo@579983fb nemo/collections/nlp/parts/
#: peft_config.py LoraPEFTConfig, get_target_modules default ('attention_qkv',)). On a model
#: whose q, k and v projections are apart it is their concatenation: one (q + k + v outputs,
#: hidden) linear a layer.
FUSED_QKV_TARGET = "linear_qkv"
_QKV = ("q_proj", "k_proj", "v_proj")


def _fused_qkv(linears: Sequence[ParamTensor]) -> ParamTensor | None:
    """q, k and v of one layer pattern as Megatron's one fused linear_qkv, or None where the
    model has no separate (untransposed, same input, same count) q_proj, k_proj and v_proj."""
    parts = [next((t for t in linears if t.module == m), None) for m in _QKV]
    if any(t is None or t.transposed for t in parts) or \
            len({(t.shape[1], t.count) for t in parts}) != 1:
        return None
    q = parts[0]
    return ParamTensor(q.name.replace("q_proj", FUSED_QKV_TARGET),
                       (sum(t.shape[0] for t in parts), q.shape[1]), q.count, q.component,
                       FUSED_QKV_TARGET, True)


def lora_linears(tensors: Sequence[ParamTensor], family: str, name: str,
                 targets: Sequence[str] | None) -> tuple[ParamTensor, ...]:
    """The linear weights that get adapters: ``targets`` by module name (``all-linear``: every
    linear but the head and the embeddings; ``linear_qkv``: q, k and v as one fused linear,
    :data:`FUSED_QKV_TARGET`), or the family's PEFT default when None."""
    if not tensors:
        raise InputError(
            f"LoRA needs the model's layer shapes, but {name!r} is only a parameter count; "
            "give a catalog name, a config.json or a model directory")
    if targets is None:
        targets = DEFAULT_LORA_TARGETS.get(family, ())
        if not targets:
            raise InputError(f"no default LoRA targets for family {family!r} (PEFT has none "
                             f"either); give {opt('lora_targets')}, e.g. q_proj,v_proj or "
                             "all-linear", field="lora_targets")
    targets = tuple(targets)
    linears = [t for t in tensors if t.linear and len(t.shape) == 2]
    if targets == ("all-linear",):
        return tuple(t for t in linears if t.component not in ("head", "embeddings"))
    if FUSED_QKV_TARGET in targets and all(t.module != FUSED_QKV_TARGET for t in linears):
        fused = _fused_qkv(linears)
        if fused is not None:
            linears.append(fused)
    known = sorted({t.module for t in linears})
    unknown = [m for m in targets if m not in known]
    if unknown:
        raise InputError(
            f"LoRA target {unknown[0]!r} is not a linear module of {name}; "
            f"its linear modules are: {', '.join(known)} (or all-linear)")
    return tuple(t for t in linears if t.module in targets)
