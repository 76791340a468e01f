"""LoRA / QLoRA: the adapter tensors LoRA adds to the linears it adapts (the selection lives in
:mod:`gpuplan.models`, shared with the speed model)."""

from __future__ import annotations

from ..models import DEFAULT_LORA_TARGETS, Model, ParamTensor, lora_linears

__all__ = ["DEFAULT_LORA_TARGETS", "lora_tensors"]


def lora_tensors(model: Model, rank: int, targets: tuple[str, ...] | None) -> tuple[ParamTensor, ...]:
    """The adapter tensors LoRA adds: for each targeted linear (out, in), A (r, in) and B (out, r)."""
    family = model.architecture.family if model.architecture else ""
    out: list[ParamTensor] = []
    for t in lora_linears(model.tensors, family, model.name, targets):
        o, i = t.out_features, t.in_features
        base = t.name.rsplit(".weight", 1)[0]
        out.append(ParamTensor(f"{base}.lora_A.weight", (rank, i), t.count, t.component,
                               "lora_A", True))
        out.append(ParamTensor(f"{base}.lora_B.weight", (o, rank), t.count, t.component,
                               "lora_B", True))
    return tuple(out)
