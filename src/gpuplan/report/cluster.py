"""Rendering of the cluster search (``gpuplan cluster``): the best layouts with their memory and
time breakdowns, why the runner-up loses, and (``--plot``) memory against throughput of every
layout whose memory was checked, the chosen one marked. matplotlib is imported when drawn."""

from __future__ import annotations

import io
from typing import Any

from .._io import write_atomic
from ..cluster import ClusterPlan
from ..compute.parallel import LayoutTime
from ..errors import MissingDependencyError
from ..units import format_per_s

__all__ = ["render_cluster", "plot_cluster"]


def _time_parts(t: Any) -> str:
    if not isinstance(t, LayoutTime):
        return (f"decode {t.decode_s * 1e3:.2f} ms/token (comm {t.decode_comm_s * 1e3:.2f} ms), "
                f"prefill {t.prefill_s:.3f} s")
    parts = (("compute", t.compute_s), ("bubble", t.bubble_s), ("TP", t.tp_comm_s),
             ("CP", t.cp_comm_s), ("EP", t.ep_comm_s), ("PP p2p", t.pp_comm_s),
             ("DP exposed", t.dp_exposed_s), ("optimizer", t.optimizer_s))
    return ", ".join(f"{name} {v:.3g} s" for name, v in parts if v > 0)


def render_cluster(p: ClusterPlan, out: io.TextIOBase) -> None:
    """The plan as text: the search, the best layouts, the runner-up's loss, the notes."""
    what = (f"global batch {p.global_batch} x seq {p.seq}" if p.mode == "train"
            else f"concurrency {p.concurrency}, context {p.seq}")
    out.write(f"{p.model} on {p.gpus} x {p.gpu} ({p.mode}, {what})\n")
    out.write(f"topology: {p.topology.stated}\n")
    out.write(f"searched {p.enumerated} layouts in {p.elapsed_s:.2f} s; memory checked for "
              f"{len(p.tried)} (fastest first)\n\n")
    if not p.best:
        out.write("no layout fits in the memory checked. Closest tried:\n")
        for c in p.tried[:3]:
            mem = "?" if c.memory_bytes is None else f"{c.memory_bytes / 1e9:.1f} GB"
            out.write(f"  {c.layout.label()}: {mem}{' -- ' + c.memory_note if c.memory_note else ''}\n")
        return
    for i, c in enumerate(p.best, 1):
        t = c.timed
        mfu = f", MFU {t.mfu:.1%}" if isinstance(t, LayoutTime) else ""
        step = f"step {t.step_s:.3g} s, " if isinstance(t, LayoutTime) else ""
        out.write(f"{i}. {c.layout.label()}\n   {step}{format_per_s(c.tokens_per_s)} tokens/s "
                  f"({t.tokens_per_s_per_gpu:,.0f} per GPU){mfu}; memory "
                  f"{c.memory_bytes / 1e9:.1f} of {p.usable_bytes / 1e9:.1f} GB per GPU\n"
                  f"   time: {_time_parts(t)}\n")
    if p.why_runner_up_loses:
        out.write(f"\nwhy not #2: {p.why_runner_up_loses}\n")
    for n in p.notes:
        out.write(f"note: {n}\n")


def plot_cluster(p: ClusterPlan, path: str) -> None:
    """Memory per GPU against tokens/s of every layout whose memory was checked; the GPU's
    memory as a line; the chosen layout marked."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise MissingDependencyError("matplotlib", "plot", "gpuplan cluster --plot") from e
    pts = [(c.memory_bytes / 1e9, c.tokens_per_s) for c in p.tried if c.memory_bytes]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    if pts:
        ax.scatter([m for m, _ in pts], [t for _, t in pts], s=10, alpha=0.6,
                   label="layouts tried")
    if p.best:
        b = p.best[0]
        ax.scatter([b.memory_bytes / 1e9], [b.tokens_per_s], s=90, marker="*", color="red",
                   label=f"chosen: {b.layout.label()}")
    ax.axvline(p.usable_bytes / 1e9, color="gray", linestyle="--", label=f"{p.gpu} memory")
    ax.set_xlabel("memory per GPU (GB)")
    ax.set_ylabel("tokens/s (all GPUs)")
    ax.set_title(f"{p.model} on {p.gpus} x {p.gpu}: layouts")
    ax.legend(fontsize=7)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120, bbox_inches="tight")
    plt.close(fig)
    write_atomic(path, buf.getvalue())
