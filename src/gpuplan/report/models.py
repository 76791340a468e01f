"""Rendering of models: the ``gpuplan models`` catalog table, one model in detail, and the JSON
forms. Pure presentation over :mod:`gpuplan.models`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..errors import printable
from ..models import COMPONENTS, Architecture, Model, ParamCounts, ParamTensor
from ..units import format_count

if TYPE_CHECKING:  # rich is only imported when something is rendered
    from rich.console import RenderableType
    from rich.table import Table

__all__ = ["model_json", "architecture_json", "tensor_json", "catalog_json", "catalog_table",
           "model_detail"]

_ABSENT = "—"

#: Architecture fields written to JSON (scalars; tensors and the raw config are separate).
_ARCH_FIELDS = (
    "family", "kind", "hf_class", "hidden_size", "num_layers", "num_heads", "num_kv_heads",
    "head_dim", "intermediate_size", "vocab_size", "max_position_embeddings",
    "tie_word_embeddings", "mlp", "activation", "norm", "position", "parallel_attn_mlp",
    "attention_bias", "mlp_bias", "num_experts", "experts_per_token", "moe_intermediate_size",
    "shared_expert_intermediate_size", "moe_layers", "sliding_window", "sliding_window_layers",
    "attention_dropout", "hidden_dropout", "torch_dtype", "image_size", "patch_size",
    "num_channels", "num_labels", "source",
)


def tensor_json(t: ParamTensor) -> dict[str, object]:
    return {"name": t.name, "shape": list(t.shape), "count": t.count, "numel": t.numel,
            "params": t.total, "component": t.component, "module": t.module,
            "linear": t.linear, "transposed": t.transposed, "dtype": t.dtype, "layer": t.layer}


def architecture_json(arch: Architecture) -> dict[str, object]:
    out: dict[str, object] = {}
    for f in _ARCH_FIELDS:
        v = getattr(arch, f)
        out[f] = list(v) if isinstance(v, tuple) else v
    out["kv_elements_per_token"] = arch.kv_elements_per_token
    return out


def model_json(model: Model, *, tensors: bool = True) -> dict[str, object]:
    """One model: counts by component, the architecture (null for a bare count or headers
    without config.json), the tensor list and notes."""
    p = model.params
    out: dict[str, object] = {
        "name": model.name,
        "source": model.source,
        "params": {"total": p.total, "active": p.active, "embedding": p.embedding,
                   "non_embedding": p.total - p.embedding,
                   "by_component": {c: p.by_component.get(c, 0) for c in COMPONENTS}},
        "checkpoint_dtype": model.checkpoint_dtype,
        "architecture": architecture_json(model.architecture) if model.architecture else None,
        "notes": list(model.notes),
    }
    if tensors:
        out["tensors"] = [tensor_json(t) for t in model.tensors]
    return out


def catalog_json(models: Sequence[Model], aliases: dict[str, Sequence[str]]) -> dict[str, object]:
    """``gpuplan models --json``: one summary record per catalog model."""
    rows = []
    for m in models:
        a = m.architecture
        assert a is not None
        rows.append({
            "name": m.name, "aliases": list(aliases.get(m.name, ())), "family": a.family,
            "hf_class": a.hf_class, "params": m.params.total, "active_params": m.params.active,
            "embedding_params": m.params.embedding, "layers": a.num_layers,
            "hidden_size": a.hidden_size, "heads": a.num_heads, "kv_heads": a.num_kv_heads,
            "head_dim": a.head_dim, "intermediate_size": a.intermediate_size,
            "num_experts": a.num_experts, "experts_per_token": a.experts_per_token,
            "vocab_size": a.vocab_size, "context": a.max_position_embeddings,
            "tie_word_embeddings": a.tie_word_embeddings, "source": a.source,
        })
    return {"models": rows}


def _count(n: int) -> str:
    return format_count(n) if n >= 1000 else str(n)


def catalog_table(models: Sequence[Model], *, sources: bool = False) -> Table:
    from rich.table import Table

    t = Table(title="gpuplan model catalog (config.json numbers; exact parameter counts)",
              title_justify="left")
    for col, just in (("model", "left"), ("family", "left"), ("params", "right"),
                      ("active", "right"), ("layers", "right"), ("hidden", "right"),
                      ("heads / kv", "right"), ("vocab", "right"), ("context", "right")):
        t.add_column(col, justify=just, no_wrap=True)  # type: ignore[arg-type]
    if sources:
        t.add_column("source", overflow="fold")
    for m in models:
        a = m.architecture
        assert a is not None
        active = _count(m.params.active) if m.params.active != m.params.total else _ABSENT
        row = [m.name, a.family, _count(m.params.total), active, str(a.num_layers),
               f"{a.hidden_size:,}", f"{a.num_heads} / {a.num_kv_heads}",
               f"{a.vocab_size:,}" if a.vocab_size else _ABSENT,
               f"{a.max_position_embeddings:,}"]
        if sources:
            row.append(a.source)
        t.add_row(*row)
    return t


def _shape(shape: tuple[int, ...]) -> str:
    if len(shape) == 1:
        return f"({shape[0]:,},)"
    return "(" + ", ".join(f"{d:,}" for d in shape) + ")"


def model_detail(model: Model) -> list[RenderableType]:
    """The parts of ``gpuplan models NAME``: summary, split by component, tensors, notes."""
    from rich.text import Text

    parts: list[RenderableType] = [_summary(model), _component_table(model.params)]
    if model.tensors:
        parts.append(_tensor_table(model.tensors))
    for note in model.notes:
        parts.append(Text(f"note: {printable(note)}"))
    return parts


def _summary(model: Model) -> RenderableType:
    """The name and source, then the architecture in a few lines."""
    from rich.text import Text

    head = Text()
    head.append(printable(model.name), style="bold")
    head.append(f"  ({model.source})\n")
    a = model.architecture
    if a is not None:
        head.append(_architecture_line(a))
        head.append(_architecture_extras(a))
    if model.checkpoint_dtype:
        head.append(f"\ncheckpoint dtype: {model.checkpoint_dtype}")
    return head


def _architecture_line(a: Architecture) -> str:
    line = (f"{a.hf_class}, {a.family} {a.kind}: {a.num_layers} layers, hidden "
            f"{a.hidden_size:,}, {a.num_heads} heads / {a.num_kv_heads} KV heads x "
            f"{a.head_dim}, MLP {a.mlp} {a.intermediate_size:,}, {a.norm}, "
            f"{a.position} positions")
    if a.vocab_size:
        line += f", vocab {a.vocab_size:,}"
    line += f", context {a.max_position_embeddings:,}"
    return line + (", tied embeddings" if a.tie_word_embeddings else "")


def _architecture_extras(a: Architecture) -> str:
    """MoE, sliding window, image and config lines (each starting a new line), where they apply."""
    out = ""
    if a.is_moe:
        out += (f"\nMoE: {a.num_experts} experts x {a.moe_intermediate_size:,}, top-"
                f"{a.experts_per_token}, in {len(a.moe_layers)} of {a.num_layers} layers")
        if a.shared_expert_intermediate_size:
            out += f", shared expert {a.shared_expert_intermediate_size:,}"
    if a.sliding_window is not None:
        out += (f"\nsliding window {a.sliding_window:,} tokens in "
                f"{len(a.sliding_window_layers)} of {a.num_layers} layers")
    if a.kind == "vision":
        out += (f"\nimages {a.image_size}x{a.image_size}, patches {a.patch_size}x"
                f"{a.patch_size} ({a.num_patches} + class token), {a.num_labels} labels")
    if a.source:
        out += f"\nconfig: {a.source}"
    return out


def _component_table(p: ParamCounts) -> Table:
    from rich.table import Table

    split = Table(title="parameters by component", title_justify="left")
    split.add_column("component")
    split.add_column("params", justify="right")
    split.add_column("exact", justify="right")
    split.add_column("share", justify="right")
    for c in COMPONENTS:
        n = p.by_component.get(c, 0)
        if n:
            split.add_row(c, _count(n), f"{n:,}", f"{100 * n / p.total:.1f}%")
    split.add_row("total", _count(p.total), f"{p.total:,}", "100.0%", style="bold")
    if p.active != p.total:
        split.add_row("active per token", _count(p.active), f"{p.active:,}",
                      f"{100 * p.active / p.total:.1f}%")
    split.add_row("non-embedding", _count(p.total - p.embedding), f"{p.total - p.embedding:,}",
                  f"{100 * (p.total - p.embedding) / p.total:.1f}%")
    return split


def _tensor_table(tensors: Sequence[ParamTensor]) -> Table:
    from rich.table import Table

    tt = Table(title="parameter tensors ({i} = layer, {e} = expert)", title_justify="left")
    tt.add_column("name", overflow="fold")
    tt.add_column("shape", justify="right", no_wrap=True)
    tt.add_column("x", justify="right")
    tt.add_column("params", justify="right")
    tt.add_column("component")
    tt.add_column("module")
    with_dtype = any(t.dtype for t in tensors)
    if with_dtype:
        tt.add_column("dtype")
    for t in tensors:
        row = [printable(t.name), _shape(t.shape), str(t.count), _count(t.total), t.component,
               printable(t.module) + (" (linear)" if t.linear else "")]
        if with_dtype:
            row.append(t.dtype or "")
        tt.add_row(*row)
    return tt
