"""Rendering of a training-loop profile: text, JSON and the per-step stacked chart.

Rendering only: every number comes from :class:`gpuplan.measure.profile.types.ProfileReport`.
"""

from __future__ import annotations

import io
import json
import os
from typing import Any

from ..units import format_bytes, format_rate, format_seconds

__all__ = ["render_text", "render_json", "plot_profile", "PHASE_LABELS", "PHASE_COLORS"]

PHASE_LABELS = {
    "data_wait": "data wait",
    "transfer": "transfer",
    "forward": "forward",
    "backward": "backward",
    "optimizer": "optimizer",
    "other": "other",
}
#: Colour per phase in the chart (colour-blind-safe Okabe-Ito palette).
PHASE_COLORS = {
    "data_wait": "#E69F00",
    "transfer": "#CC79A7",
    "forward": "#56B4E9",
    "backward": "#0072B2",
    "optimizer": "#009E73",
    "other": "#999999",
}
_VERDICT_TEXT = {
    "data-loading": "DATA-LOADING bound: the loop waits for batches",
    "transfer": "TRANSFER bound: host<->device copies take the time",
    "host-overhead": "HOST-OVERHEAD bound: the host, not the model's arithmetic, sets the pace",
    "compute": "COMPUTE bound: the model's own forward/backward/optimizer work takes the time",
}


def _pct(x: float | None) -> str:
    if x is None:
        return "unknown"
    return f"{x * 100:.1f}%"


def _secs(x: float | None) -> str:
    return "unknown" if x is None else format_seconds(x)


def render_text(r: Any) -> str:
    """A plain-text report (no colour codes), a few dozen lines."""
    out = _head_lines(r)
    out.extend(_estimate_lines(r))
    out.append("")
    out.extend(_phase_lines(r))
    out.append("")
    out.extend(_machine_lines(r))
    out.extend(_rank_lines(r))
    if r.advice:
        out += ["", "Advice"] + [f"  {i}. {a}" for i, a in enumerate(r.advice, 1)]
    if r.notes:
        out += ["", "Notes"] + [f"  - {n}" for n in r.notes]
    out.append("")
    out.append(f"profiler overhead: {_pct(r.overhead_fraction)} of the measured step time "
               "(time inside gpuplan's hooks)")
    return "\n".join(out)


def _head_lines(r: Any) -> list[str]:
    """What was measured where, the verdict and its evidence, step time and throughput."""
    out: list[str] = []
    where = r.device if r.device_name in ("", r.device) else f"{r.device} ({r.device_name})"
    status = {"complete": "", "stopped": ", then stopped the script",
              "error": " -- PARTIAL: the loop raised", "interrupted": " -- PARTIAL: interrupted"}
    out.append(f"gpuplan profile: {r.steps} step(s) measured after {r.warmup_steps} warm-up on "
               f"{where}{status.get(r.status, '')}")
    if r.world_size > 1:
        out.append(f"distributed: {r.world_size} ranks; the numbers below are rank {r.rank}'s, the "
                   f"slowest (see notes); median step times spread {_pct(r.rank_spread)}")
    out.append("")
    out.append(f"Verdict: {_VERDICT_TEXT.get(r.verdict, r.verdict)}")
    for line in r.evidence:
        out.append(f"  - {line}")
    out.append("")
    out.append(f"step time   median {format_seconds(r.step_time_s)} "
               f"(p10 {format_seconds(r.step_time_p10_s)}, p90 {format_seconds(r.step_time_p90_s)})")
    if r.samples_per_s is not None:
        line = f"throughput  {r.samples_per_s:,.1f} samples/s"
        if r.samples_per_step is not None:
            line += f" ({r.samples_per_step:g} per step)"
        if r.tokens_per_s is not None:
            line += f", {r.tokens_per_s:,.0f} tokens/s [{r.tokens_source}]"
        out.append(line)
    else:
        out.append("throughput  unknown (batch size not found in the batch)")
    return out


def _phase_lines(r: Any) -> list[str]:
    """Where the time goes: each phase's share of the total time of the measured steps and its
    mean per step -- one statistic, so share = mean / mean step (the medians, which need not add
    up, are in the JSON's ``breakdown_median_s``)."""
    means = r.breakdown_mean_s or {}
    mean_step = r.step_time_mean_s
    out = [f"Where the time goes ({r.steps} step(s): share of the total time, mean per step)",
           f"  {'phase':<11}{'share':>8}  {'mean/step':>12}"]
    for p, label in PHASE_LABELS.items():
        share = r.breakdown.get(p)
        bar = "#" * int(round((share or 0.0) * 30))
        out.append(f"  {label:<11}{_pct(share):>8}  {_secs(means.get(p)):>12}  {bar}")
    out.append(f"  {'step':<11}{'100.0%':>8}  {_secs(mean_step):>12}")
    return out


def _machine_lines(r: Any) -> list[str]:
    """GPU busy and memory, transfers, the loader."""
    out: list[str] = []
    if r.gpu is not None:
        g = r.gpu
        out.append(f"GPU         busy {_pct(g.busy_fraction_min)}-{_pct(g.busy_fraction_max)} of the "
                   "step (bounds from CUDA events)")
        if g.peak_allocated_bytes is not None:
            mem = (f"memory      peak {format_bytes(g.peak_allocated_bytes)} allocated, "
                   f"{format_bytes(g.peak_reserved_bytes or 0)} reserved")
            if g.total_memory_bytes:
                mem += f" of {format_bytes(g.total_memory_bytes)}"
            out.append(mem)
    if r.transfer is not None:
        t = r.transfer
        line = (f"transfers   {format_bytes(t.h2d_bytes_per_step)} to the device, "
                f"{format_bytes(t.d2h_bytes_per_step)} back per step in {t.copies_per_step:.1f} copies")
        if t.pageable_fraction is not None:
            line += f"; {_pct(t.pageable_fraction)} from pageable memory"
        if t.bandwidth_bytes_per_s:
            line += f"; {format_rate(t.bandwidth_bytes_per_s, 'B/s')}"
        out.append(line)
    if r.loader is not None:
        L = r.loader
        if L.kind == "DataLoader":
            out.append(f"loader      DataLoader(batch_size={L.batch_size}, num_workers={L.num_workers}, "
                       f"prefetch_factor={L.prefetch_factor}, pin_memory={L.pin_memory}, "
                       f"persistent_workers={L.persistent_workers})")
        else:
            out.append(f"loader      {L.kind}")
    return out


def _rank_lines(r: Any) -> list[str]:
    """One row per rank of a distributed run (none otherwise)."""
    if not r.ranks:
        return []
    out = ["", f"  {'rank':<5}{'steps':>6}  {'median step':>12}  {'verdict':<14}"
               f"{'data wait':>10}{'compute':>9}{'other':>8}  status"]
    for s in r.ranks:
        comp = None
        if s.step_time_s is not None:
            comp = sum((s.breakdown.get(p) or 0.0) for p in ("forward", "backward", "optimizer"))
        mark = " <- slowest" if s.rank == r.slowest_rank else ""
        out.append(f"  {s.rank:<5}{s.steps:>6}  {_secs(s.step_time_s):>12}  {str(s.verdict or '-'):<14}"
                   f"{_pct(s.breakdown.get('data_wait')) if s.step_time_s else '-':>10}"
                   f"{_pct(comp) if comp is not None else '-':>9}"
                   f"{_pct(s.breakdown.get('other')) if s.step_time_s else '-':>8}  {s.status}{mark}")
    return out


_BASIS_TEXT = {
    "architecture": "per-op FLOPs and bytes of the architecture",
    "parameter-count": ("parameter count only: 6·N FLOPs per token (2·N forward, 4·N backward), "
                        "weights read once, no attention term -- rough and optimistic"),
}


def _times(x: float) -> str:
    return f"{x:.2f}x" if x >= 0.1 else f"{x:.2g}x"


def _estimate_lines(r: Any) -> list[str]:
    """The estimate block: measured vs estimated, the estimate's inputs and basis; or why none."""
    e = getattr(r, "estimate", None)
    pad = " " * 12
    if e is None:
        why = getattr(r, "estimate_unavailable", None)
        return [f"estimate    none: {why}"] if why else []
    ratio = r.measured_over_expected
    head = (f"estimate    {format_seconds(e.step_time_s)} per step"
            + (" (given)" if e.source == "given" else " by gpuplan's speed model")
            + (f": measured is {_times(ratio)} the estimate" if ratio is not None else ""))
    if e.source == "given":
        return [head]
    lines = [head]
    shape = f"batch {e.batch}" + (f" x seq {e.seq}" if e.seq is not None else "")
    lines.append(f"{pad}{e.model} [{e.model_source}] on {e.device} [{e.device_source}]")
    recipe = f"{e.precision} [{e.precision_source}]" + (", TF32" if e.tf32 else "")
    what = "training step" if e.mode == "train" else "forward pass"
    opt = f", {e.optimizer} [{e.optimizer_source}]" if e.optimizer else ""
    lines.append(f"{pad}{what}, {shape}, {recipe}{opt}"
                 + (f", attention {e.attention}" if e.attention else "")
                 + (f", recompute {e.recompute}" if e.recompute else ""))
    if e.compute_s is not None and e.measured_compute_s is not None:
        line = (f"{pad}forward+backward+optimizer {format_seconds(e.measured_compute_s)} measured vs "
                f"{format_seconds(e.compute_s)} estimated")
        if e.measured_compute_over_expected is not None:
            line += f" ({_times(e.measured_compute_over_expected)})"
        if e.transfer_exposed_s:
            line += f"; estimated exposed copy {format_seconds(e.transfer_exposed_s)}"
        lines.append(line)
    if e.measured_mfu is not None:
        bound = f"; the estimated step is {e.bound}-bound" if e.bound else ""
        lines.append(f"{pad}measured MFU {e.measured_mfu * 100:.1f}% of the {e.device}'s "
                     f"{format_rate(e.peak_flops, 'FLOP/s')} {e.precision} peak{bound}")
    eff = e.efficiency or {}
    fr = [f"matmul {eff['matmul']:.2f}" if "matmul" in eff else "",
          f"memory {eff['memory']:.2f}" if "memory" in eff else "",
          f"launch {eff['launch_s'] * 1e6:.0f} us" if "launch_s" in eff else ""]
    measured = eff.get("measured") or []
    src = ("measured by gpuplan bench: " + ", ".join(measured)) if measured else "defaults, docs/speed.md"
    lines.append(f"{pad}basis: {_BASIS_TEXT.get(e.basis, e.basis)}; achievable "
                 f"{', '.join(x for x in fr if x)} ({src})")
    for n in e.notes:
        lines.append(f"{pad}note: {n}")
    return lines


def render_json(r: Any, *, indent: int | None = 2) -> str:
    return json.dumps(r.to_dict(), indent=indent, allow_nan=False)


def plot_profile(r: Any, path: str | os.PathLike) -> None:
    """Per-step stacked time breakdown, written atomically to ``path`` (PNG, SVG or PDF)."""
    try:
        import matplotlib
    except ImportError as e:
        from ..errors import MissingDependencyError

        raise MissingDependencyError("matplotlib", "plot", "--plot") from e
    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    from .._io import write_atomic

    steps = r.per_step
    fig = Figure(figsize=(10, 4.8), dpi=120)
    ax = fig.add_subplot(1, 1, 1)
    xs = list(range(len(steps)))
    bottom = [0.0] * len(steps)
    unknown_wait = not r.data_wait_known
    for p, label in PHASE_LABELS.items():
        if p == "data_wait" and unknown_wait:
            continue
        ys = [s.parts_s.get(p, 0.0) * 1e3 for s in steps]
        if not any(ys):
            continue
        ax.bar(xs, ys, bottom=bottom, width=0.85, label=label, color=PHASE_COLORS[p], linewidth=0)
        bottom = [b + y for b, y in zip(bottom, ys)]
    ax.set_xlabel("measured step")
    ax.set_ylabel("time (ms)")
    title = f"{r.verdict} bound - median step {format_seconds(r.step_time_s)} on {r.device}"
    if r.world_size > 1:
        title += f" (rank {r.rank} of {r.world_size})"
    ax.set_title(title)
    ax.legend(loc="upper right", fontsize="small", ncols=3)
    if unknown_wait:
        ax.text(0.01, 0.98, "data wait unknown (no DataLoader seen): batch making is in 'other'",
                transform=ax.transAxes, va="top", fontsize="small")
    ax.margins(x=0.01)
    fig.tight_layout()
    suffix = os.fspath(path).rsplit(".", 1)[-1].lower() if "." in os.fspath(path) else "png"
    fmt = suffix if suffix in ("png", "svg", "pdf") else "png"
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt)
    write_atomic(path, buf.getvalue())
