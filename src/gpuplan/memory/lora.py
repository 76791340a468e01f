"""LoRA / QLoRA: which linears get adapters, and the adapter tensors they add."""

from __future__ import annotations

from ..errors import InputError
from ..models import Model, ParamTensor

__all__ = ["DEFAULT_LORA_TARGETS", "lora_tensors"]

#: PEFT's default LoRA target modules per model family (peft.utils.constants,
#: TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING).
DEFAULT_LORA_TARGETS: dict[str, tuple[str, ...]] = {
    "llama": ("q_proj", "v_proj"), "mistral": ("q_proj", "v_proj"),
    "mixtral": ("q_proj", "v_proj"), "qwen2": ("q_proj", "v_proj"),
    "qwen2_moe": ("q_proj", "v_proj"), "gemma2": ("q_proj", "v_proj"),
    "phi3": ("qkv_proj",), "gpt2": ("c_attn",),
    "gpt_bigcode": ("c_attn",), "gpt_neox": ("query_key_value",),
    "opt": ("q_proj", "v_proj"), "falcon": ("query_key_value",), "bert": ("query", "value"),
    "vit": ("query", "value"),
}


def lora_tensors(model: Model, rank: int, targets: tuple[str, ...] | None) -> tuple[ParamTensor, ...]:
    """The adapter tensors LoRA adds: for each targeted linear (out, in), A (r, in) and B (out, r)."""
    if not model.tensors:
        raise InputError(
            f"LoRA needs the model's layer shapes, but {model.name!r} is only a parameter count; "
            "give a catalog name, a config.json or a model directory")
    family = model.architecture.family if model.architecture else ""
    if targets is None:
        targets = DEFAULT_LORA_TARGETS.get(family, ())
        if not targets:
            raise InputError(f"no default LoRA targets for family {family!r}; give --lora-targets")
    linears = [t for t in model.tensors if t.linear and len(t.shape) == 2]
    if targets == ("all-linear",):
        chosen = [t for t in linears if t.component not in ("head", "embeddings")]
    else:
        known = sorted({t.module for t in linears})
        unknown = [m for m in targets if m not in known]
        if unknown:
            raise InputError(
                f"LoRA target {unknown[0]!r} is not a linear module of {model.name}; "
                f"its linear modules are: {', '.join(known)} (or all-linear)")
        chosen = [t for t in linears if t.module in targets]
    out: list[ParamTensor] = []
    for t in chosen:
        o, i = t.out_features, t.in_features
        base = t.name.rsplit(".weight", 1)[0]
        out.append(ParamTensor(f"{base}.lora_A.weight", (rank, i), t.count, t.component,
                               "lora_A", True))
        out.append(ParamTensor(f"{base}.lora_B.weight", (o, rank), t.count, t.component,
                               "lora_B", True))
    return tuple(out)

