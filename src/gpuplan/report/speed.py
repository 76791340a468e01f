"""Rendering of the speed model: terminal tables (rich), JSON-ready dicts, and the roofline chart
(matplotlib, imported when drawn). Nothing here computes an estimate."""

from __future__ import annotations

import io
import math
from typing import TYPE_CHECKING, Any

from .._io import write_atomic
from ..errors import MissingDependencyError
from ..units import (format_bytes, format_count, format_flops, format_per_s, format_rate,
                     format_seconds)

if TYPE_CHECKING:  # pragma: no cover
    from ..compute import (
        BatchSweep, FlopsBreakdown, MatmulCount, MatmulTime, SmallWork, SpeedEstimate,
    )
    from ..job import Job

__all__ = ["render_speed", "render_matmul", "render_sweep", "render_flops_breakdown",
           "plot_roofline", "CLASS_LABELS"]

#: Display names of the op classes.
CLASS_LABELS = {
    "attention": "attention matmuls", "mlp": "MLP matmuls", "norm_elementwise": "norms/elementwise",
    "embedding": "embedding", "logits": "logits", "optimizer": "optimizer step",
}


def _console(console: Any = None) -> Any:
    if console is not None:
        return console
    from ._console import console_for
    return console_for(width=160)


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _intensity(x: float) -> str:
    return "inf" if math.isinf(x) else f"{x:,.1f}"


def render_speed(est: SpeedEstimate, *, console: Any = None, ops: bool = False) -> None:
    """Print an estimate as a few compact tables."""
    c = _console(console)
    c.print(_headline(est))
    c.print(_step_table(est))
    c.print(_roofline_table(est))
    if ops:
        c.print(_ops_table(est))
    if est.prefill is not None:
        c.print(_inference_table(est))
        c.print(f"TTFT (time to first token: the batch's prefill, end to end) "
                f"{format_seconds(est.ttft_s)}; TPOT (time per output token: one decode step) "
                f"{format_seconds(est.tpot_s)}")
        c.print(f"request: TTFT + {est.new_tokens} new tokens x TPOT = "
                f"{format_seconds(est.request_time_s)} per batch of {est.batch}")
    _print_input_copy(c, est)
    if est.layout is not None:
        _print_layout(c, est)
    if est.scaling is not None and est.gpus > 1:
        c.print(_scaling_table(est))
        for n in est.scaling.notes:
            c.print(f"  note: {n}")
    if est.training_time is not None:
        c.print(_training_time_line(est))
    if est.cpu is not None:
        c.print(f"[bold]CPU vs GPU[/bold]: {est.cpu.verdict}")
        c.print(f"  CPU: {est.cpu.cpu} ({est.cpu.cpu_dtype}); {est.cpu.cpu_peak_basis}")
        _print_measured_run(c, est.cpu.measured_run, indent="  CPU ")
    _print_basis(c, est)


def _print_layout(c: Any, est: SpeedEstimate) -> None:
    """The parallel layout's step, part by part (the numbers of ``est.layout.to_dict()``)."""
    d = est.layout.to_dict()
    lay = d["layout"]
    c.print(f"[bold]layout[/bold]: TP {lay['tp']} x PP {lay['pp']} x CP {lay['cp']} x DP "
            f"{lay['dp']}" + (f" (EP {lay['ep']})" if lay["ep"] > 1 else "")
            + (f" (HSDP: {lay['dp_replicas']} replicas of a shard group of {lay['dp_shard']})"
               if lay.get("dp_shard") else "")
            + f" = {lay['gpus']} GPUs")
    keys = ("compute_s", "bubble_s", "tp_comm_exposed_s", "cp_comm_exposed_s",
            "ep_comm_exposed_s", "pp_comm_exposed_s", "dp_comm_exposed_s", "optimizer_s",
            "decode_compute_s", "decode_comm_s", "prefill_comm_s")
    parts = [f"{k.removesuffix('_s').replace('_', ' ')} {format_seconds(d[k])}"
             for k in keys if d.get(k)]
    c.print("  " + "; ".join(parts))
    c.print(f"  topology: {d['topology']['stated']}")


def _headline(est: SpeedEstimate) -> str:
    mode = "training" if est.mode == "train" else "inference"
    return (f"[bold]{est.model}[/bold] on [bold]{est.gpu}[/bold] x{est.gpus} -- {mode}, "
            f"{est.precision} ({est.dtype} matmuls), batch {est.batch} per GPU x seq {est.seq}"
            + (f", checkpointing {est.checkpointing}" if est.checkpointing != "none" else "")
            + f", {est.attention} attention")


def _step_table(est: SpeedEstimate) -> Any:
    from rich.table import Table

    t = Table(title="Step", show_header=False, title_justify="left")
    t.add_column("what")
    t.add_column("value", justify="right")
    what = {"train": "training step", "decode": "decode step (1 new token per sequence)",
            "forward": "forward pass", "prefill": "prefill"}[est.step.name]
    t.add_row("step", what)
    t.add_row("FLOPs per step (counted, recompute incl.)", format_flops(est.flops_per_step))
    t.add_row("model FLOPs per token (MFU)", format_flops(est.model_flops_per_token))
    t.add_row("bytes moved per step", format_bytes(est.step.bytes))
    t.add_row("kernel time (sum of max(compute, memory))", format_seconds(est.step.kernel_time_s))
    t.add_row(_launch_label(est.step), format_seconds(est.step.launch_time_s))
    if est.step.serve_host_s or est.step.serve_core_s:
        how = "beside the step, exposed" if est.step.serve_overlap else "after the kernels"
        if est.step.serve_core_s:  # the loop that drives the GPU (vLLM's EngineCore)
            how += ("; its scheduling loop beside the step" if est.step.serve_core_overlap
                    else "; its scheduling loop between steps")
        t.add_row(f"serving engine host work per step (its profile's; {how})",
                  format_seconds(est.step.serve_host_exposed_s))
    if est.transfer.exposed_s:
        t.add_row("exposed input copy", format_seconds(est.transfer.exposed_s))
    if est.comm_exposed_s:
        t.add_row(_comm_label(est), format_seconds(est.comm_exposed_s))
    t.add_row("[bold]step time[/bold]", f"[bold]{format_seconds(est.step_time_s)}[/bold]")
    t.add_row("tokens/s" + (" (all GPUs)" if est.gpus > 1 else ""),
              format_per_s(est.tokens_per_s))
    t.add_row("samples/s" + (" (whole requests)" if est.request_time_s is not None else ""),
              f"{est.samples_per_s:,.2f}")
    t.add_row("MFU / HFU", f"{_pct(est.mfu)} / {_pct(est.hfu)}")
    t.add_row("bound", est.bound)
    t.add_row(f"ridge point ({est.dtype})", f"{est.ridge_point:,.0f} FLOP/B (achievable "
              f"{est.achievable_ridge_point:,.0f})")
    return t


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f} us"


def _launch_label(step: Any) -> str:
    """What the step's time beyond its kernels is (``Phase.launch_time_s``, the row's value).

    On a GPU the host issues kernels ahead of the device and the slower of the two sets the pace
    (``Phase.time_s``): when the device is the slower, the host's issue time (kernels x its
    per-kernel cost) is hidden and only the device's gaps between kernels remain; when the host
    is the slower (dispatch-bound), the row is the host's issue time less the kernels it hides.
    On a CPU the dispatch of each op runs in turn with the ops: kernels x the launch cost."""
    n, o = step.kernels, step.overheads
    if o is None:
        return f"dispatch, in turn with the ops ({n:,} kernels x {_us(step.launch_s)})"
    host = step.host_time_s
    if n and host > o.host_fixed_s:
        per = (host - o.host_fixed_s) / n
        issue = f"{n:,} x {_us(per)} ({o.runtime}) = {format_seconds(host)}"
    else:  # a CUDA graph: one replay issues the whole step
        issue = f"1 graph replay ({o.runtime}) = {format_seconds(host)}"
    if step.host_bound:
        return (f"host issue, exposed: {issue} - {format_seconds(step.kernel_time_s)} of "
                "kernels")
    return f"launch gaps: {n:,} kernels x {_us(o.device_gap_s)} (host issue {issue}, hidden)"


def _roofline_table(est: SpeedEstimate) -> Any:
    from rich.table import Table

    r = Table(title="Roofline by op class", title_justify="left")
    for col in ("class", "FLOPs", "bytes", "FLOP/B", "time", "share", "bound"):
        r.add_column(col, justify="left" if col == "class" else "right")
    total = est.step.kernel_time_s or 1.0
    for cl in est.step.classes:
        r.add_row(CLASS_LABELS.get(cl.op_class, cl.op_class), format_flops(cl.flops),
                  format_bytes(cl.bytes), _intensity(cl.intensity), format_seconds(cl.time_s),
                  _pct(cl.time_s / total), cl.bound)
    return r


def _ops_table(est: SpeedEstimate) -> Any:
    from rich.table import Table

    o = Table(title="Ops", title_justify="left")
    for col in ("op", "phase", "x", "FLOPs", "bytes", "FLOP/B", "occupancy", "time", "bound"):
        o.add_column(col, justify="left" if col in ("op", "phase") else "right")
    for ot in est.step.ops:
        o.add_row(f"{ot.op.group}:{ot.op.name}" if ot.op.group else ot.op.name,
                  ot.op.phase, str(ot.op.count), format_flops(ot.op.flops),
                  format_bytes(ot.op.bytes), _intensity(ot.op.intensity),
                  f"{ot.occupancy:.3f}", format_seconds(ot.total_s), ot.bound)
    return o


def _inference_table(est: SpeedEstimate) -> Any:
    from rich.table import Table

    p = Table(title="Inference phases", title_justify="left")
    for col in ("phase", "tokens", "time", "tokens/s", "MFU", "bound"):
        p.add_column(col, justify="left" if col == "phase" else "right")
    p.add_row(f"prefill ({est.batch} x {est.seq} prompt tokens)", f"{est.prefill.tokens:,}",
              format_seconds(est.prefill.time_s), format_per_s(est.prefill.tokens_per_s),
              _pct(est.prefill.mfu), est.prefill.bound)
    p.add_row(f"decode step = TPOT (context {est.step.kv_len})", f"{est.step.tokens:,}",
              format_seconds(est.step_time_s), f"{est.step.tokens / est.step_time_s:,.0f}",
              _pct(est.mfu), est.bound)
    return p


def _print_input_copy(c: Any, est: SpeedEstimate) -> None:
    x = est.transfer
    c.print(f"[bold]Input copy[/bold]: {format_bytes(x.bytes_per_step)} per step over {x.link} "
            f"({'pinned' if x.pinned else 'pageable'}, {format_rate(x.achievable_bandwidth, 'B/s')}"
            f") = {format_seconds(x.time_s)}, {x.ratio_to_compute:.1%} of the compute; "
            + ("overlapped" if x.overlapped else "not overlapped")
            + (f", adds {format_seconds(x.exposed_s)}" if x.exposed_s else ", adds nothing"))
    for a in x.advice:
        c.print(f"  - {a}")


def _comm_label(est: SpeedEstimate) -> str:
    """What the exposed communication of the step is: the data-parallel gradient all-reduce
    alone, a layout's collectives, or a serving replica's TP all-reduces and pipeline sends."""
    kind = type(est.layout).__name__
    if kind == "ServeTime":
        return "exposed TP all-reduces and pipeline sends"
    if kind == "LayoutTime":
        return "exposed communication (TP, CP, EP, pipeline sends, data parallel)"
    return "exposed gradient all-reduce"


def _scaling_table(est: SpeedEstimate) -> Any:
    from rich.table import Table

    s = est.scaling
    over = f"{s.link} ({format_rate(s.link_bandwidth, 'B/s')} per direction"
    topo = s.topology
    if topo is not None and est.gpus > topo.gpus_per_node:
        over = (f"{topo.within(topo.gpus_per_node).name} within a node, {topo.inter.name} per "
                f"GPU across nodes ({format_rate(s.link_bandwidth, 'B/s')} ring bandwidth")
    st = Table(title=f"Data parallel over {over}, bus {_pct(s.bus_efficiency)}), gradients "
                     f"{format_bytes(s.gradient_bytes)}, "
                     + ("overlapped with backward" if s.overlap else "after backward"),
               title_justify="left")
    for col in ("GPUs", "all-reduce", "exposed", "step", "speed-up", "efficiency"):
        st.add_column(col, justify="right")
    for row in s.rows:
        st.add_row(str(row.gpus), format_seconds(row.allreduce_s),
                   format_seconds(row.exposed_comm_s), format_seconds(row.step_time_s),
                   f"{row.speedup:.2f}x", _pct(row.efficiency))
    return st


def _training_time_line(est: SpeedEstimate) -> str:
    tt = est.training_time
    hours = f"{tt.gpu_hours:,.0f}" if tt.gpu_hours >= 100 else f"{tt.gpu_hours:.3g}"
    line = (f"[bold]Time to train[/bold]: {format_count(tt.work)} {tt.unit} at "
            f"{tt.rate_per_s:,.0f} {tt.unit}/s = {format_seconds(tt.seconds)}"
            + f" on {tt.gpus} GPU{'s' if tt.gpus > 1 else ''} ({hours} GPU-hours)")
    if tt.cost is not None:
        cost = f"{tt.cost:,.0f}" if tt.cost >= 100 else f"{tt.cost:,.2f}"
        line += f", ${cost} at ${tt.price_per_gpu_hour:g}/GPU-hour"
    return line


def _print_basis(c: Any, est: SpeedEstimate) -> None:
    eff = est.efficiency
    c.print(f"Achievable fractions: matmul {_pct(eff.matmul_fraction(est.dtype))}, attention "
            f"{_pct(eff.attention)}, memory {_pct(eff.memory)}, launch "
            f"{eff.launch_s * 1e6:.1f} us"
            + (f"; measured: {', '.join(eff.measured)}" if eff.measured else
               " (defaults; `gpuplan bench` on this machine replaces them)"))
    _print_measured_run(c, est.measured_run)
    lo, hi = est.tokens_per_s_range
    rb = est.to_dict(ops=False)["range_basis"]
    rt = est.step.overheads.runtime if est.step.overheads else "-"
    c.print(f"Runtime: {rt}{' (auto: the default of this mode)' if est.runtime_auto else ''}; "
            f"{'dispatch-bound' if est.step.host_bound else 'device-bound'} (host "
            f"{format_seconds(est.step.host_time_s)}, device {format_seconds(est.step.device_time_s)}"
            " per step)")
    c.print(f"Expected range: {format_per_s(lo)}-{format_per_s(hi)} tokens/s (the estimate over "
            f"the p90-p10 of predicted/measured, {rb['p10_ratio']:.2f}-{rb['p90_ratio']:.2f}, on "
            f"{rb['runs']} published runs; docs/speed.md, Calibration)")
    for cav in est.caveats:
        c.print(f"caveat: {cav}")
    for n in est.engine_notes:  # which engine, and so which runtime and kernels, was timed
        c.print(f"note: {n}")
    for n in est.notes:
        c.print(f"note: {n}")


def _print_measured_run(c: Any, use: Any, indent: str = "") -> None:
    """The stored bench run an estimate read (:class:`~gpuplan.compute.RunUse`): which, its
    quality, used or left out; nothing when none was read."""
    if use is not None:
        c.print(indent + (use.line if use.used else f"note: {use.line}"), highlight=False,
                markup=False, soft_wrap=True)


def render_matmul(mm: MatmulCount, *, small: SmallWork | None = None,
                  times: list[MatmulTime] | None = None, verdict: str | None = None,
                  console: Any = None, measured: list[str] | None = None) -> None:
    """The worked example of one matmul: exact counts, and on a GPU how much of it the work fills;
    ``measured``: the lines naming the stored bench runs read (RunUse.line)."""
    from rich.table import Table

    c = _console(console)
    shape = f"{mm.m}x{mm.k} @ {mm.k}x{mm.n}" + (f" (batch {mm.batch})" if mm.batch > 1 else "")
    t = Table(title=f"matmul {shape}", show_header=False, title_justify="left")
    t.add_column("what")
    t.add_column("value", justify="right")
    t.add_row("multiplies (M*K*N)", f"{mm.multiplies:,}")
    t.add_row("additions (M*(K-1)*N" + (" + bias" if mm.bias else "") + ")", f"{mm.additions:,}")
    t.add_row("multiply-adds per row (one example: K*N)", f"{mm.k * mm.n:,}")
    t.add_row("FLOPs (2*M*K*N convention)", f"{mm.flops:,}")
    t.add_row("output elements (independent dot products)", f"{mm.output_elements:,}")
    if small is not None:
        t.add_row("resident threads (SMs x threads/SM)", f"{small.resident_threads:,}")
        t.add_row("work shortfall (resident threads / outputs)", f"{small.work_shortfall:,.1f}x"
                  if small.work_shortfall >= 1 else f"{small.work_shortfall:.3f} (enough work)")
        t.add_row(f"tiles of {small.tile[0]}x{small.tile[1]} vs {small.sm_count} SMs",
                  f"{small.tiles:,} tiles, {small.waves} wave(s), "
                  f"{_pct(small.wave_efficiency)} of SM-rounds busy")
    c.print(t)
    if times:
        tt = Table(title="estimated time", title_justify="left")
        for col in ("device", "dtype", "kernel", "launches", "copies", "total", "bound"):
            tt.add_column(col, justify="left" if col == "device" else "right")
        for m in times:
            tt.add_row(m.device, m.dtype, format_seconds(m.compute_s), format_seconds(m.launch_s),
                       format_seconds(m.transfer_s), format_seconds(m.total_s), m.bound)
        c.print(tt)
    if verdict:
        c.print(verdict)
    for line in measured or ():
        c.print(line, highlight=False, markup=False, soft_wrap=True)


def render_flops_breakdown(model: str, fb: FlopsBreakdown, job: Job, *,
                           console: Any = None) -> None:
    """Per-layer and per-model counted FLOPs of one step (``gpuplan flops model``)."""
    from rich.table import Table

    c = _console(console)
    train = job.mode == "train"
    batch = job.batch
    c.print(f"[bold]{model}[/bold]: {'train' if train else 'forward'}, batch {batch} x seq "
            f"{fb.tokens // batch} = {fb.tokens:,} tokens (matmul FLOPs; attention over the full "
            "s x s square)")
    for layer in fb.layers:
        t = Table(title=f"one {layer.kind} layer (x{layer.count}), forward", title_justify="left")
        t.add_column("op")
        t.add_column("FLOPs", justify="right")
        for name, f in layer.by_op:
            t.add_row(name, format_flops(f))
        t.add_row("[bold]layer[/bold]", f"[bold]{format_flops(layer.forward_flops)}[/bold]")
        c.print(t)
    t = Table(title="model", show_header=False, title_justify="left")
    t.add_column("what")
    t.add_column("FLOPs", justify="right")
    t.add_row("embedding (forward)", format_flops(fb.embedding_forward_flops))
    t.add_row("head (forward)", format_flops(fb.head_forward_flops))
    t.add_row("forward", format_flops(fb.forward_flops))
    if train:
        t.add_row("backward (2x forward)", format_flops(fb.backward_flops))
        t.add_row(f"recompute (checkpointing {job.checkpointing})",
                  format_flops(fb.recompute_flops))
    t.add_row("model FLOPs (MFU)", format_flops(fb.model_flops))
    t.add_row("hardware FLOPs (HFU)", format_flops(fb.hardware_flops))
    t.add_row("model FLOPs per token", format_flops(fb.model_flops_per_token))
    t.add_row("weights multiplied per token (N)", f"{fb.matmul_params:,}")
    c.print(t)


def render_sweep(sweep: BatchSweep, *, console: Any = None) -> None:
    from rich.table import Table

    c = _console(console)
    t = Table(title="Batch sweep", title_justify="left")
    for col in ("batch", "step", "tokens/s", "samples/s", "MFU", "bound"):
        t.add_column(col, justify="right")
    for p in sweep.points:
        mark = " <" if p.batch == sweep.saturation_batch else ""
        t.add_row(f"{p.batch}{mark}", format_seconds(p.step_time_s), format_per_s(p.tokens_per_s),
                  f"{p.samples_per_s:,.2f}", _pct(p.mfu), p.bound)
    c.print(t)
    c.print(f"throughput saturates at batch {sweep.saturation_batch} "
            f"({_pct(sweep.threshold)} of the best in this sweep); memory is not checked here "
            "(see gpuplan fit)")


def plot_roofline(est: SpeedEstimate, path: str) -> None:
    """Draw the roofline of ``est``'s step with its ops on it; written atomically to ``path``."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise MissingDependencyError("matplotlib", "plot", "--plot") from None

    peak = est.step.peak_flops
    eff = est.efficiency
    bw = peak / est.ridge_point
    ach_peak = peak * eff.matmul_fraction(est.dtype)
    ach_bw = bw * eff.memory
    pts = [t for t in est.step.ops if t.op.bytes > 0 and t.op.flops > 0 and t.time_s > 0]
    xs = [t.op.intensity for t in pts]
    lo = min([0.1] + [x / 3 for x in xs])
    hi = max([est.ridge_point * 30] + [x * 3 for x in xs])
    grid = [lo * (hi / lo) ** (i / 200) for i in range(201)]

    fig = Figure(figsize=(8, 5.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    ax.loglog(grid, [min(peak, bw * x) for x in grid], color="black", lw=1.5,
              label=f"peak: {format_rate(peak)} {est.dtype}, {format_rate(bw, 'B/s')}")
    ax.loglog(grid, [min(ach_peak, ach_bw * x) for x in grid], color="gray", lw=1, ls="--",
              label=f"achievable: {_pct(eff.matmul_fraction(est.dtype))} compute, "
                    f"{_pct(eff.memory)} bandwidth")
    ax.axvline(est.ridge_point, color="black", lw=0.5, ls=":")
    ax.annotate(f"ridge {est.ridge_point:,.0f} FLOP/B", (est.ridge_point, peak),
                textcoords="offset points", xytext=(4, -12), fontsize=8)
    colors = {"attention": "tab:blue", "mlp": "tab:orange", "norm_elementwise": "tab:green",
              "embedding": "tab:purple", "logits": "tab:red", "optimizer": "tab:brown"}
    seen = set()
    for t in pts:
        cls = t.op.op_class
        label = CLASS_LABELS.get(cls, cls) if cls not in seen else None
        seen.add(cls)
        ax.scatter([t.op.intensity], [max(t.achieved_flops, peak * 1e-6)],
                   s=14 + 60 * t.total_s / max(est.step.kernel_time_s, 1e-30),
                   color=colors.get(cls, "gray"), alpha=0.75, label=label, zorder=3)
    ax.set_xlabel("arithmetic intensity (FLOP per byte of device memory traffic)")
    ax.set_ylabel("FLOP/s")
    ax.set_title(f"{est.model} on {est.gpu}: {est.step.name} step, batch {est.batch} x seq "
                 f"{est.seq} ({est.bound}-bound, MFU {_pct(est.mfu)})", fontsize=10)
    ax.grid(True, which="both", lw=0.3, alpha=0.5)
    ax.legend(fontsize=8, loc="lower right")
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120, bbox_inches="tight")
    write_atomic(path, buf.getvalue())
