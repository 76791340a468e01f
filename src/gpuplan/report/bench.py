"""Rendering of bench runs: terminal tables (rich), JSON, the log-log chart, history and comparison.

Rendering only: every number comes from a :class:`~gpuplan.measure.BenchRun`; nothing here
measures or computes anything beyond ratios for display.
"""

from __future__ import annotations

import io
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, Callable, Iterable

from .._io import write_atomic
from ..errors import MissingDependencyError
from ..measure.bench.types import BANDWIDTH_KINDS, OVERHEAD_KINDS, BenchRun, Crossover
from ..units import format_bytes, format_rate, format_seconds

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["run_to_json", "render_run", "render_history", "render_compare", "plot_run"]

JSON_SCHEMA = "gpuplan.bench/1"


def _drop_none(d: dict) -> dict:
    return {k: v for k, v in d.items() if v is not None}


def run_to_json(run: BenchRun) -> dict:
    """The documented JSON form of a run (``gpuplan bench --json``).

    ``percent_of_peak`` (and ``peak_flops``/``peak_source``) are absent when the peak is unknown;
    ``end_to_end_*`` and ``device_median_s`` are present for GPU cases only.
    """
    matmul = []
    for m in run.matmul:
        d = {
            "device": m.device, "device_name": m.device_name, "dtype": m.dtype, "size": m.size,
            "flops": m.flops, "median_s": m.median_s, "iqr_s": m.iqr_s, "min_s": m.min_s,
            "samples": m.samples, "inner": m.inner, "noisy": m.noisy, "tflops": m.tflops,
            "percent_of_peak": m.percent_of_peak, "peak_flops": m.peak_flops,
            "peak_source": m.peak_source, "threads": m.threads, "tf32": m.tf32,
            "end_to_end_median_s": m.end_to_end_median_s, "end_to_end_iqr_s": m.end_to_end_iqr_s,
            "device_median_s": m.device_median_s,
        }
        matmul.append(_drop_none(d))
    return {
        "schema": JSON_SCHEMA,
        "run_id": run.run_id,
        "created_utc": run.created_utc,
        "machine": asdict(run.machine),
        "settings": dict(run.settings),
        "matmul": matmul,
        "crossover": [asdict(c) for c in run.crossovers],
        "bandwidth": [
            {"device": b.device, "kind": b.kind, "description": BANDWIDTH_KINDS.get(b.kind, b.kind),
             "bytes": b.nbytes, "bytes_moved": b.bytes_moved, "median_s": b.median_s,
             "iqr_s": b.iqr_s, "bytes_per_s": b.bytes_per_s, "gb_per_s": b.bytes_per_s / 1e9,
             "noisy": b.noisy}
            for b in run.bandwidth
        ],
        "launch_overhead": [
            {"device": o.device, "kind": o.kind, "description": OVERHEAD_KINDS.get(o.kind, o.kind),
             "median_s": o.median_s, "iqr_s": o.iqr_s, "noisy": o.noisy}
            for o in run.overhead
        ],
        "cpu_peak": {"fp32_flops": run.machine.cpu_peak_fp32_flops,
                     "basis": run.machine.cpu_peak_basis, "is_estimate": True},
        "notes": list(run.notes),
        "warnings": list(run.warnings),
    }


def _pct(p: float | None) -> str:
    if p is None:
        return "-"
    return f"{p:.1f}%" if p < 10 else f"{p:.0f}%"


def _tflops(x: float) -> str:
    return f"{x:.3f}" if x < 10 else f"{x:.1f}"


def _machine_lines(run: BenchRun) -> list[str]:
    mc = run.machine
    st = run.settings
    lines = [
        f"CPU: {mc.cpu_model}, {mc.physical_cores} cores / {mc.logical_cores} threads; torch used "
        f"{st.get('threads', '?')} threads ({st.get('threads_basis', '')})",
    ]
    if mc.cpu_peak_fp32_flops:
        lines.append(f"CPU peak fp32 ~ {format_rate(mc.cpu_peak_fp32_flops)} -- an ESTIMATE "
                     f"({mc.cpu_peak_basis.removeprefix('estimate: ')})")
    else:
        lines.append(f"CPU peak: unknown ({mc.cpu_peak_basis})")
    for g in mc.gpus:
        cat = f" = {g.catalog_name} in the catalog" if g.catalog_name else " (not in the catalog)"
        lines.append(f"cuda:{g.index}: {g.name}{cat}, {format_bytes(g.memory_bytes)}, "
                     f"compute capability {g.compute_capability}")
    soft = [f"torch {mc.torch}" if mc.torch else None, f"CUDA {mc.cuda}" if mc.cuda else None,
            f"driver {mc.driver}" if mc.driver else None, f"TF32 default: {st.get('tf32_default')}"
            if mc.gpus else None]
    lines.append(", ".join(s for s in soft if s))
    return lines


def _crossover_sentence(c: Crossover) -> str:
    def one(n: int | None) -> str:
        if n is None:
            return "never within the sizes measured (the CPU is faster at the largest)"
        if n == c.sizes[0]:
            return f"at every size measured (from N={n})"
        return f"from N={n}"
    text = f"{c.gpu} {c.dtype} vs CPU: the GPU wins {one(c.compute_crossover)} on compute alone"
    if any(e is not None for e in c.gpu_end_to_end_s):
        text += f", {one(c.end_to_end_crossover)} counting the copies in and out"
    return text + "."


def render_run(run: BenchRun, console: "Console", *, saved_to: str | None = None) -> None:
    """Print a run: machine, matmul table, crossover, bandwidth, overhead, notes and warnings."""
    from rich.table import Table

    for line in _machine_lines(run):
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    for n in run.notes:
        console.print(n, highlight=False, markup=False, soft_wrap=True)

    if run.matmul:
        has_gpu = any(m.device != "cpu" for m in run.matmul)
        t = Table(title="Matmul N x N @ N x N (2*N^3 FLOP; median per call, IQR)",
                  title_justify="left")
        for col in ("device", "dtype", "N", "median", "IQR", "TFLOP/s", "% of peak"):
            t.add_column(col, justify="left" if col in ("device", "dtype") else "right")
        if has_gpu:
            t.add_column("end-to-end", justify="right")
        t.add_column("samples", justify="right")
        for m in run.matmul:
            pct = _pct(m.percent_of_peak)
            if m.percent_of_peak is not None and m.device == "cpu":
                pct += " (est.)"
            row = [m.device, m.dtype, str(m.size), format_seconds(m.median_s),
                   format_seconds(m.iqr_s), _tflops(m.tflops), pct]
            if has_gpu:
                row.append("-" if m.end_to_end_median_s is None
                           else format_seconds(m.end_to_end_median_s))
            row.append(f"{m.samples}x{m.inner}" + (" noisy" if m.noisy else ""))
            t.add_row(*row)
        console.print(t)
        console.print("% of peak: GPU against the catalog's dense peak for that dtype; CPU against "
                      "the estimated fp32 peak." + (" end-to-end = copies to the GPU, matmul, copy "
                                                   "back." if has_gpu else ""),
                      highlight=False, markup=False, soft_wrap=True)

    cross = run.crossovers
    for c in cross:
        if len(c.sizes) == 1:
            n, cs, gs, es = c.sizes[0], c.cpu_s[0], c.gpu_s[0], c.gpu_end_to_end_s[0]
            text = (f"N={n} {c.dtype}: CPU {format_seconds(cs)}, {c.gpu} {format_seconds(gs)} -- "
                    f"{cs / gs:.1f}x {'faster' if gs < cs else 'SLOWER'} on the GPU")
            if es is not None:
                text += (f"; counting the copies {format_seconds(es)}, {cs / es:.1f}x "
                         f"{'faster' if es < cs else 'SLOWER'}")
            console.print(text + ".", highlight=False, markup=False, soft_wrap=True)
            continue
        t = Table(title=f"CPU vs {c.gpu}, {c.dtype}: where the GPU starts to win",
                  title_justify="left")
        for col in ("N", "CPU", "GPU compute", "GPU end-to-end", "faster (compute)",
                    "faster (end-to-end)"):
            t.add_column(col, justify="right")
        for n, cs, gs, es in zip(c.sizes, c.cpu_s, c.gpu_s, c.gpu_end_to_end_s):
            t.add_row(str(n), format_seconds(cs), format_seconds(gs),
                      "-" if es is None else format_seconds(es),
                      "GPU" if gs < cs else "CPU",
                      "-" if es is None else ("GPU" if es < cs else "CPU"))
        console.print(t)
        console.print(_crossover_sentence(c), highlight=False, markup=False, soft_wrap=True)

    if run.bandwidth:
        t = Table(title="Bandwidth", title_justify="left")
        for col in ("device", "what", "buffer", "GB/s", "median", "IQR"):
            t.add_column(col, justify="left" if col in ("device", "what") else "right")
        for b in run.bandwidth:
            t.add_row(b.device, BANDWIDTH_KINDS.get(b.kind, b.kind), format_bytes(b.nbytes),
                      f"{b.bytes_per_s / 1e9:.1f}", format_seconds(b.median_s),
                      format_seconds(b.iqr_s) + (" noisy" if b.noisy else ""))
        console.print(t)
    if run.overhead:
        t = Table(title="Fixed cost per operation", title_justify="left")
        for col in ("device", "what", "per op", "IQR"):
            t.add_column(col, justify="left" if col in ("device", "what") else "right")
        for o in run.overhead:
            t.add_row(o.device, OVERHEAD_KINDS.get(o.kind, o.kind), format_seconds(o.median_s),
                      format_seconds(o.iqr_s) + (" noisy" if o.noisy else ""))
        console.print(t)
    for w in run.warnings:
        console.print(f"warning: {w}", style="yellow", highlight=False, markup=False,
                      soft_wrap=True)
    if saved_to:
        console.print(saved_to, highlight=False, markup=False, soft_wrap=True)


def _best(run: BenchRun, gpu: bool) -> str:
    ms = [m for m in run.matmul if (m.device != "cpu") == gpu]
    if not ms:
        return "-"
    m = max(ms, key=lambda m: m.achieved_flops)
    return f"{_tflops(m.tflops)} ({m.dtype}, N={m.size})"


def render_history(runs: Iterable[BenchRun], console: "Console", *, this_key: str | None = None,
                   db: str = "") -> None:
    from rich.table import Table

    runs = list(runs)
    if not runs:
        console.print(f"No stored bench runs in {db}; `gpuplan bench` makes one.",
                      highlight=False, markup=False, soft_wrap=True)
        return
    t = Table(title=f"Stored bench runs ({db})", title_justify="left")
    for col in ("run", "when (UTC)", "host", "CPU", "GPUs", "cases", "best CPU TFLOP/s",
                "best GPU TFLOP/s"):
        t.add_column(col)
    for r in runs:
        gpus = ", ".join(g.name for g in r.machine.gpus) or "-"
        mark = " *" if this_key and r.machine.key == this_key else ""
        t.add_row(f"{r.run_id}{mark}", r.created_utc.replace("+00:00", ""), r.machine.hostname,
                  r.machine.cpu_model, gpus, str(len(r.matmul)), _best(r, False), _best(r, True))
    console.print(t)
    if this_key:
        console.print("* this machine", highlight=False, markup=False, soft_wrap=True)


def _change(a: float, b: float, *, higher_is_better: bool) -> str:
    if a <= 0:
        return "-"
    ratio = b / a
    pct = 100 * (ratio - 1)
    better = (ratio > 1) == higher_is_better
    word = "better" if better else "worse"
    if abs(pct) < 0.5:
        return "same"
    return f"{pct:+.0f}% ({word})"


def render_compare(a: BenchRun, b: BenchRun, console: "Console") -> None:
    """Differences between two runs: machine, matmul medians, bandwidths, overheads."""
    from rich.table import Table

    console.print(f"A = run {a.run_id} ({a.created_utc}), B = run {b.run_id} ({b.created_utc})",
                  highlight=False, markup=False, soft_wrap=True)
    ma, mb = asdict(a.machine), asdict(b.machine)
    for k in ma:
        if k not in ("key",) and ma[k] != mb.get(k):
            console.print(f"machine {k}: A {ma[k]!r} -> B {mb.get(k)!r}", highlight=False,
                          markup=False, soft_wrap=True)
    ta = {(m.device, m.dtype, m.size): m for m in a.matmul}
    tb = {(m.device, m.dtype, m.size): m for m in b.matmul}
    keys = sorted(set(ta) | set(tb), key=lambda k: (k[0] != "cpu", k[0], k[1], k[2]))
    if keys:
        t = Table(title="Matmul median time (lower is better)", title_justify="left")
        for col in ("device", "dtype", "N", "A", "B", "B vs A", "A TFLOP/s", "B TFLOP/s"):
            t.add_column(col, justify="left" if col in ("device", "dtype") else "right")
        for k in keys:
            x, y = ta.get(k), tb.get(k)
            t.add_row(k[0], k[1], str(k[2]),
                      format_seconds(x.median_s) if x else "only in B",
                      format_seconds(y.median_s) if y else "only in A",
                      _change(x.median_s, y.median_s, higher_is_better=False) if x and y else "-",
                      _tflops(x.tflops) if x else "-", _tflops(y.tflops) if y else "-")
        console.print(t)
    _compare_table(console, "Bandwidth GB/s (higher is better)", a.bandwidth, b.bandwidth,
                   BANDWIDTH_KINDS, lambda r: r.bytes_per_s, lambda v: f"{v / 1e9:.1f}",
                   higher_is_better=True)
    _compare_table(console, "Fixed cost per operation (lower is better)", a.overhead, b.overhead,
                   OVERHEAD_KINDS, lambda r: r.median_s, format_seconds, higher_is_better=False)


def _compare_table(console: "Console", title: str, rows_a: Iterable, rows_b: Iterable,
                   kinds: dict[str, str], value: Callable[[Any], float],
                   fmt: Callable[[float], str], *, higher_is_better: bool) -> None:
    """A vs B for results keyed by (device, kind): the bandwidths, the fixed costs."""
    from rich.table import Table

    ra = {(r.device, r.kind): r for r in rows_a}
    rb = {(r.device, r.kind): r for r in rows_b}
    if not (ra or rb):
        return
    t = Table(title=title, title_justify="left")
    for col in ("device", "what", "A", "B", "B vs A"):
        t.add_column(col, justify="left" if col in ("device", "what") else "right")
    for k in sorted(set(ra) | set(rb)):
        x, y = ra.get(k), rb.get(k)
        t.add_row(k[0], kinds.get(k[1], k[1]),
                  fmt(value(x)) if x else "-",
                  fmt(value(y)) if y else "-",
                  _change(value(x), value(y), higher_is_better=higher_is_better)
                  if x and y else "-")
    console.print(t)


def plot_run(run: BenchRun, path: str) -> None:
    """Write a PNG: time and TFLOP/s vs N, log-log, CPU vs GPU, crossovers marked (atomic write)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise MissingDependencyError("matplotlib", "plot", "--plot") from None

    fig = Figure(figsize=(13, 5.2), layout="constrained")
    FigureCanvasAgg(fig)
    ax_t, ax_f = fig.subplots(1, 2)
    series: dict[tuple[str, str], list] = {}
    for m in run.matmul:
        series.setdefault((m.device, m.dtype), []).append(m)
    series_sizes = {m.size for m in run.matmul} or {1}
    colors: dict[str, str] = {}
    palette = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown"]
    for (dev, dtype), ms in series.items():
        ms.sort(key=lambda m: m.size)
        color = colors.setdefault(dtype, palette[len(colors) % len(palette)])
        style = "-" if dev == "cpu" else "--"
        marker = "o" if dev == "cpu" else "s"
        label = f"{dev} {dtype}"
        sizes = [m.size for m in ms]
        ax_t.plot(sizes, [m.median_s for m in ms], style, marker=marker, color=color, label=label)
        ax_f.plot(sizes, [m.tflops for m in ms], style, marker=marker, color=color, label=label)
        e2e = [(m.size, m.end_to_end_median_s) for m in ms if m.end_to_end_median_s is not None]
        if e2e:
            xs, ys = zip(*e2e)
            ax_t.plot(xs, ys, ":", marker="^", color=color, label=f"{label} end-to-end")
            ax_f.plot(xs, [2 * n**3 / y / 1e12 for n, y in e2e], ":", marker="^", color=color,
                      label=f"{label} end-to-end")
        if dev != "cpu" and ms[-1].peak_flops:
            ax_f.axhline(ms[-1].peak_flops / 1e12, color=color, lw=0.8, alpha=0.5)
            ax_f.annotate(f"{dtype} dense peak", (sizes[0], ms[-1].peak_flops / 1e12),
                          fontsize=7, color=color, va="bottom")
    marks: dict[tuple[int, str], list[str]] = {}
    for c in run.crossovers:
        for n, kind in ((c.compute_crossover, "compute only"),
                        (c.end_to_end_crossover, "with copies")):
            if n is not None and n != c.sizes[0]:
                marks.setdefault((n, kind), []).append(f"{c.gpu} {c.dtype}")
    top = ax_t.get_ylim()[1]
    for (n, kind), who in sorted(marks.items()):
        ls = "-." if kind == "compute only" else ":"
        for ax in (ax_t, ax_f):
            ax.axvline(n, color="black", ls=ls, lw=1, alpha=0.7)
        ax_t.annotate(f"GPU wins from N={n} ({kind}): {', '.join(who)}", (n, top), fontsize=7,
                      rotation=90, va="top", ha="right")
    cpu_peaks = [m.peak_flops for m in run.matmul if m.device == "cpu" and m.peak_flops]
    cpu_peak = cpu_peaks[0] if cpu_peaks else run.machine.cpu_peak_fp32_flops
    if cpu_peak:
        ax_f.axhline(cpu_peak / 1e12, color="gray", lw=0.8, ls="-")
        ax_f.annotate("CPU fp32 peak (estimate, cores used)", (min(series_sizes), cpu_peak / 1e12),
                      fontsize=7, color="gray", va="bottom")
    ticks: list[int] = []
    for n in sorted(series_sizes, reverse=True):  # drop a label crowding its neighbour (4000/4096)
        if not ticks or ticks[-1] / n >= 1.3:
            ticks.append(n)
    ticks.sort()
    for ax, ylabel in ((ax_t, "seconds per matmul (median)"), (ax_f, "achieved TFLOP/s")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(ticks, [str(n) for n in ticks], fontsize=7)
        ax.set_xlabel("N (N x N @ N x N)")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
    ax_f.legend(fontsize=7, loc="lower right")
    gpus = ", ".join(g.name for g in run.machine.gpus) or "no GPU"
    th = run.settings.get("threads")
    fig.suptitle(f"gpuplan bench: {run.machine.cpu_model} ({th} thread{'' if th == 1 else 's'}) "
                 f"vs {gpus}  [solid: CPU, dashed: GPU compute, dotted: GPU end-to-end]",
                 fontsize=9)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120)
    write_atomic(path, buf.getvalue())
