"""Rendering of a :class:`~gpuplan.trace.TraceResult`: terminal tables, JSON, the timeline chart.
Nothing here computes (the chart only stacks the recorded categories)."""

from __future__ import annotations

import io
from typing import IO

from .._io import json_text
from .._io import write_atomic
from ..errors import MissingDependencyError
from ..trace import TIMELINE_CATEGORIES, TraceResult
from ..units import ByteUnits, format_bytes, format_count, format_flops, format_seconds
from ._console import console_for

__all__ = ["render_trace", "trace_json", "plot_timeline"]

_TRAIN_ROWS = (("weights_bytes", "weights (parameters + buffers)"),
               ("gradients_bytes", "gradients"),
               ("master_weights_bytes", "fp32 master weights"),
               ("optimizer_bytes", "optimizer states"),
               ("activations_bytes", "activations (saved in forward, working set of backward)"),
               ("temporaries_bytes", "temporaries (autocast weight copies, optimizer-step "
                                     "buffers)"))
_INFER_ROWS = (("weights_bytes", "weights (parameters + buffers)"),
               ("kv_cache_bytes", "KV cache"),
               ("activations_bytes", "activations and working buffers"))
_FINE = {
    "parameters": "parameters", "buffers": "buffers", "master_weights": "fp32 master weights",
    "gradients": "gradients", "optimizer_state": "optimizer states", "kv_cache": "KV cache",
    "activations": "allocated in forward (saved activations, inputs, logits, loss)",
    "backward": "allocated in backward (activation gradients, recomputed layers)",
    "autocast_cache": "autocast 16-bit weight copies",
    "optimizer_temporaries": "optimizer-step temporaries",
    "other": "other",
}


def _bpp(n: int, params: int) -> str:
    return f"{n / params:.2f}" if params else ""


def render_trace(r: TraceResult, *, units: ByteUnits = "GB", file: IO[str] | None = None) -> None:
    """Print the trace as tables."""
    con = console_for(file)
    for line in _header(r):
        con.print(line)
    con.print(_peak_table(r, units))
    con.print(_fine_table(r, units))
    con.print("Peak by phase: " + ", ".join(f"{p} {format_bytes(v, units)}"
                                            for p, v in r.phase_peaks.items()))
    con.print(_flops_line(r))
    if r.measured is not None:
        con.print(_measured_line(r, units))
    con.print(_emulation_table(r))
    for note in r.notes:
        con.print(f"[dim]note: {note}[/dim]")


def _header(r: TraceResult) -> tuple[str, str]:
    what = (f"{r.mode}, {r.precision}" + (f", {r.optimizer} ({r.optimizer_impl})"
                                          if r.optimizer else "")
            + f", batch {r.batch} x seq {r.seq}, attention {r.attention}"
            + (f", checkpointing {r.checkpointing}" if r.mode == "train" else ""))
    step = ("the second of two iterations is reported" if r.mode == "train"
            else "prefill of the prompt, then one decode step")
    return (f"[bold]Trace of {r.model}[/bold]: {what}",
            f"{format_count(r.params)} parameters; traced on fake tensors (no storage) in "
            f"{format_seconds(r.seconds)}; {step}")


def _peak_table(r: TraceResult, units: ByteUnits):
    """The per-GPU fields of ``gpuplan fit`` at the traced peak."""
    from rich.table import Table

    table = Table(title=f"Memory at the peak ({r.peak_phase}, in {r.peak_module})",
                  title_justify="left", show_footer=True)
    table.add_column("category", footer="total (traced peak)")
    table.add_column("bytes per parameter", justify="right", footer=_bpp(r.total_bytes, r.params))
    table.add_column("bytes", justify="right", footer=format_bytes(r.total_bytes, units, digits=2))
    for key, label in (_TRAIN_ROWS if r.mode == "train" else _INFER_ROWS):
        n = int(r.per_gpu.get(key, 0))
        table.add_row(label, _bpp(n, r.params), format_bytes(n, units, digits=2))
    return table


def _fine_table(r: TraceResult, units: ByteUnits):
    """The recorder's own categories at the peak, and what the 512-byte rounding added."""
    from rich.table import Table

    fine = Table(title="Finer split at the peak", title_justify="left")
    fine.add_column("what")
    fine.add_column("bytes", justify="right")
    for key, label in _FINE.items():
        n = int(r.categories.get(key, 0))
        if n:
            fine.add_row(label, format_bytes(n, units, digits=2))
    fine.add_row("[dim]512-byte allocator rounding included above[/dim]",
                 f"[dim]{format_bytes(r.total_bytes - r.unrounded_peak_bytes, units)}[/dim]")
    return fine


def _flops_line(r: TraceResult) -> str:
    if r.mode == "train":
        return (f"FLOPs: forward {format_flops(r.flops_forward)}, backward "
                f"{format_flops(r.flops_backward)} (torch FlopCounterMode)")
    flops = f"FLOPs: forward {format_flops(r.flops_forward)}"
    if r.flops_decode:
        flops += f", one decode step {format_flops(r.flops_decode)}"
    return flops + " (torch FlopCounterMode)"


def _measured_line(r: TraceResult, units: ByteUnits) -> str:
    m = r.measured
    traced = format_bytes(r.total_bytes, units, digits=2)
    if m.reserved_bytes is not None:
        return (f"[bold]Measured on {m.device}[/bold]: max_memory_allocated "
                f"{format_bytes(m.peak_bytes, units)}, max_memory_reserved "
                f"{format_bytes(m.reserved_bytes, units)}; traced "
                f"{traced}; allocated / traced = {m.ratio:.4f}")
    return (f"[bold]Measured with real tensors on the {m.device}[/bold]: peak "
            f"{format_bytes(m.peak_bytes, units)} ({m.peak_phase}); traced "
            f"{traced}; measured / traced = {m.ratio:.4f}")


def _emulation_table(r: TraceResult):
    from rich.table import Table

    em = Table(title="CUDA behaviour emulated on the CPU", title_justify="left")
    em.add_column("emulation")
    em.add_column("count", justify="right")
    em.add_column("what it does")
    for e in r.emulations:
        em.add_row(e.name, str(e.count), e.detail)
    return em


def trace_json(r: TraceResult) -> str:
    return json_text(r.to_dict(), indent=2)


def plot_timeline(r: TraceResult, path, *, units: ByteUnits = "GB") -> None:
    """Stacked memory timeline by category, peak marked; written atomically."""
    try:
        import matplotlib
    except ImportError:
        raise MissingDependencyError("matplotlib", "plot", "--plot") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scale = 1e9 if units == "GB" else 2**30
    xs = [int(p["event"]) for p in r.timeline]
    cats = [c for c in TIMELINE_CATEGORIES if any(p[c] for p in r.timeline)]
    ys = [[p[c] / scale for p in r.timeline] for c in cats]
    fig, ax = plt.subplots(figsize=(10, 5), dpi=110)
    if cats:
        ax.stackplot(xs, ys, labels=[c.replace("_", " ") for c in cats], step="post", alpha=0.85)
    # phase boundaries
    last = None
    for p in r.timeline:
        if p["phase"] != last:
            ax.axvline(int(p["event"]), color="0.6", lw=0.6, ls=":")
            ax.text(int(p["event"]), 0, f" {p['phase']}", rotation=90, va="bottom", fontsize=7,
                    color="0.35")
            last = p["phase"]
    ax.axvline(r.peak_event, color="red", lw=1)
    ax.annotate(f"peak {format_bytes(r.total_bytes, units, digits=2)}\n({r.peak_phase})",
                xy=(r.peak_event, r.total_bytes / scale), xytext=(5, -5),
                textcoords="offset points", color="red", fontsize=8, va="top")
    ax.set_xlabel("allocation events in the reported iteration")
    ax.set_ylabel(f"live memory ({units})")
    ax.set_title(f"{r.model}: {r.mode}, {r.precision}, batch {r.batch} x seq {r.seq}")
    ax.legend(loc="upper left", fontsize=8)
    ax.set_ylim(0, r.total_bytes / scale * 1.08 if r.total_bytes else 1)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    write_atomic(path, buf.getvalue())
