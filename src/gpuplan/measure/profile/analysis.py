"""From measured steps to the report: breakdown, verdict, evidence and advice. Pure Python.

Each rule below states the number it reads; the thresholds are named constants so the docs and
the tests can quote them.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import field, replace
from typing import Mapping, Sequence

from ..._record import record
from ...errors import GpuplanError
from ...units import format_bytes, format_rate, format_seconds
from ..bench.timing import quantile
from .types import (
    COMPUTE_PHASES, PHASES, GpuInfo, LoaderInfo, ProfileReport, RankSummary, Status, StepRecord,
    TransferInfo, Verdict,
)

__all__ = ["RunInfo", "NoStepsError", "analyze", "combine_ranks",
           "ADVICE_SHARE", "NEAR_MEMORY_LIMIT", "LAUNCH_BOUND_PACED", "PAGEABLE_MAJORITY",
           "LOCKSTEP_SPREAD"]

#: A non-compute part gets its advice once it takes this share of the step.
ADVICE_SHARE = 0.10
#: Peak reserved / device memory at or above this is "near the memory limit".
NEAR_MEMORY_LIMIT = 0.90
#: Peak reserved / device memory below this leaves room for a larger batch.
MEMORY_HEADROOM = 0.50
#: On CUDA, forward/backward/optimizer count as host-paced (launch-bound) when the GPU was proven
#: busy for less than this share of their time.
LAUNCH_BOUND_PACED = 0.50
#: Ranks whose mean step times are within this share of each other run in lock-step (in data
#: parallel training they cannot drift apart by more than a step over the run).
LOCKSTEP_SPREAD = 0.10
#: pin_memory advice when at least this share of host->device bytes came from pageable memory.
PAGEABLE_MAJORITY = 0.50


class NoStepsError(GpuplanError):
    """The profile holds no measured step (the loop never completed one after the warm-up)."""


@record
class RunInfo:
    """What the profiler knows about the run besides the steps."""

    device: str = "cpu"
    device_name: str = "cpu"
    warmup_steps: int = 0
    data_wait_known: bool = True
    loader: LoaderInfo | None = None
    status: Status = "complete"
    tokens_source: str | None = None
    param_dtype: str | None = None
    """dtype of the model's first parameter (e.g. ``float32``), None when unknown."""
    autocast: bool = False
    """Whether torch.autocast was active during a root forward."""
    cpu_count: int | None = None
    """CPUs available to this process (a node's CPUs divided among its ranks under torchrun)."""
    torch_threads: int | None = None
    gpu_index: int = 0
    gpu_total_memory_bytes: int | None = None
    gpu_peak_allocated_bytes: int | None = None
    gpu_peak_reserved_bytes: int | None = None
    expected_step_time_s: float | None = None
    notes: tuple[str, ...] = field(default=())


def _pct(x: float) -> str:
    if x >= 0.095:
        return f"{x * 100:.0f}%"
    return f"{x * 100:.1f}%"


def _times(x: float) -> str:
    return f"{x:.2f}x" if x >= 0.1 else f"{x:.2g}x"


def _ceil(x: float) -> int:
    """Ceiling that ignores float noise (8.0000000001 -> 8)."""
    return math.ceil(x - 1e-9)


def _median(xs: Sequence[float]) -> float:
    return statistics.median(xs)


def analyze(steps: Sequence[StepRecord], run: RunInfo) -> ProfileReport:
    """Build the report of one process's measured steps."""
    if not steps:
        raise NoStepsError(
            "no training step completed after the warm-up "
            f"({run.warmup_steps} step(s)); run more steps or lower the warm-up"
        )
    total = sum(s.duration_s for s in steps)
    if total <= 0:
        raise NoStepsError("the measured steps took no measurable time")
    sums, breakdown, medians = _phases(steps, run, total)
    durations = [s.duration_s for s in steps]
    step_med = _median(durations)
    by_duration = sorted(durations)
    # Median over steps of the share spent in the profiler's hooks: robust to a step in which the
    # process was preempted inside a hook (which would otherwise inflate a plain sum).
    overhead = _median([s.overhead_s / s.duration_s if s.duration_s > 0 else 0.0 for s in steps])

    samples_per_s, samples_per_step, tokens_per_s = _throughput(steps, total)

    transfer = _transfer_info(steps, sums["transfer"])
    gpu = _gpu_info(steps, run, total)

    shares = _verdict_shares(breakdown, steps, total, gpu)
    verdict: Verdict = max(shares, key=lambda k: shares[k])  # type: ignore[assignment]

    ratio = None
    if run.expected_step_time_s:
        ratio = step_med / run.expected_step_time_s

    report = ProfileReport(
        verdict=verdict,
        steps=len(steps),
        step_time_s=step_med,
        step_time_p10_s=quantile(by_duration, 0.10),
        step_time_p90_s=quantile(by_duration, 0.90),
        overhead_fraction=overhead,
        breakdown=breakdown,
        breakdown_median_s=medians,
        breakdown_mean_s=_means(sums, breakdown, len(steps)),
        step_time_mean_s=total / len(steps),
        device=run.device,
        device_name=run.device_name,
        warmup_steps=run.warmup_steps,
        status=run.status,
        samples_per_s=samples_per_s,
        tokens_per_s=tokens_per_s,
        samples_per_step=samples_per_step,
        tokens_source=run.tokens_source if tokens_per_s is not None else None,
        transfer=transfer,
        gpu=gpu,
        loader=run.loader,
        expected_step_time_s=run.expected_step_time_s,
        measured_over_expected=ratio,
        notes=tuple(run.notes) + _auto_notes(run, steps),
        per_step=tuple(steps),
    )
    return replace(report, evidence=_evidence(report, shares), advice=_advice(report, run, shares))


def _phases(steps: Sequence[StepRecord], run: RunInfo, total: float
            ) -> tuple[dict[str, float], dict[str, float | None], dict[str, float | None]]:
    """(seconds per phase over all steps, share of each phase, median seconds per step)."""
    sums = {p: sum(s.parts_s.get(p, 0.0) for s in steps) for p in PHASES}
    part_total = sum(sums.values()) or total
    breakdown: dict[str, float | None] = {p: sums[p] / part_total for p in PHASES}
    medians: dict[str, float | None] = {p: _median([s.parts_s.get(p, 0.0) for s in steps]) for p in PHASES}
    if not run.data_wait_known:
        # Batches were made outside any loader we saw: their time is inside "other".
        breakdown["data_wait"] = None
        medians["data_wait"] = None
    return sums, breakdown, medians


def _means(sums: dict[str, float], breakdown: Mapping[str, float | None], n: int
           ) -> dict[str, float | None]:
    """Mean seconds per step per phase: the same totals the shares are taken of, so a phase's
    share is its mean over the mean step (None where the share is unknown)."""
    return {p: None if breakdown.get(p) is None else sums[p] / n for p in PHASES}


def _throughput(steps: Sequence[StepRecord], total: float
                ) -> tuple[float | None, float | None, float | None]:
    """(samples/s, samples per step, tokens/s); None where a step's batch did not show them."""
    samples = [s.samples for s in steps]
    samples_per_s = sum(samples) / total if all(x is not None for x in samples) else None  # type: ignore[arg-type]
    samples_per_step = (sum(samples) / len(samples)) if samples_per_s is not None else None  # type: ignore[arg-type]
    tokens = [s.tokens for s in steps]
    tokens_per_s = sum(tokens) / total if all(x is not None for x in tokens) else None  # type: ignore[arg-type]
    return samples_per_s, samples_per_step, tokens_per_s


# -- pieces ------------------------------------------------------------------------------------

def _transfer_info(steps: Sequence[StepRecord], transfer_s: float) -> TransferInfo | None:
    n = len(steps)
    h2d = sum(s.h2d_bytes for s in steps)
    d2h = sum(s.d2h_bytes for s in steps)
    copies = sum(s.copies for s in steps)
    if copies == 0:
        return None
    return TransferInfo(
        h2d_bytes_per_step=h2d / n,
        d2h_bytes_per_step=d2h / n,
        copies_per_step=copies / n,
        pageable_fraction=(sum(s.pageable_bytes for s in steps) / h2d) if h2d else None,
        non_blocking_fraction=(sum(s.non_blocking_bytes for s in steps) / h2d) if h2d else None,
        bandwidth_bytes_per_s=((h2d + d2h) / transfer_s) if transfer_s > 0 else None,
    )


def _gpu_info(steps: Sequence[StepRecord], run: RunInfo, total: float) -> GpuInfo | None:
    if not run.device.startswith("cuda"):
        return None
    lo = sum(s.gpu_busy_min_s or 0.0 for s in steps)
    hi = sum(s.gpu_busy_max_s or 0.0 for s in steps)
    paced = sum(s.host_paced_s or 0.0 for s in steps)
    return GpuInfo(
        name=run.device_name,
        index=run.gpu_index,
        total_memory_bytes=run.gpu_total_memory_bytes,
        peak_allocated_bytes=run.gpu_peak_allocated_bytes,
        peak_reserved_bytes=run.gpu_peak_reserved_bytes,
        busy_fraction_min=lo / total,
        busy_fraction_max=hi / total,
        host_paced_fraction=paced / total,
    )


def _verdict_shares(breakdown, steps, total, gpu: GpuInfo | None) -> dict[str, float]:
    """Shares of the step behind each verdict. On CUDA, forward/backward/optimizer time that the
    host paced counts as host overhead when it is most of that time (launch-bound), and GPU work
    proven busy inside 'other' counts as compute."""
    compute = sum(breakdown[p] or 0.0 for p in COMPUTE_PHASES)
    host = breakdown["other"] or 0.0
    if gpu is not None:
        if _launch_bound(breakdown, gpu):
            host += gpu.host_paced_fraction
            compute -= gpu.host_paced_fraction
        other_busy = min(breakdown["other"] or 0.0, sum(s.other_gpu_busy_s or 0.0 for s in steps) / total)
        host -= other_busy
        compute += other_busy
    return {
        "data-loading": breakdown["data_wait"] or 0.0,
        "transfer": breakdown["transfer"] or 0.0,
        "host-overhead": max(0.0, host),
        "compute": max(0.0, compute),
    }


def _launch_bound(breakdown: Mapping[str, float | None], gpu: GpuInfo | None) -> bool:
    """On CUDA: the host paced most of the forward/backward/optimizer time."""
    if gpu is None:
        return False
    compute = sum(breakdown[p] or 0.0 for p in COMPUTE_PHASES)
    return compute > 0 and gpu.host_paced_fraction > (1 - LAUNCH_BOUND_PACED) * compute


def _auto_notes(run: RunInfo, steps: Sequence[StepRecord]) -> tuple[str, ...]:
    notes = []
    if not run.data_wait_known:
        notes.append("data wait unknown: no DataLoader (or prof.wrap(loader)) was seen, so the time "
                     "spent making batches is counted in 'other'")
    if any(s.samples is None for s in steps):
        notes.append("batch size unknown for some steps: samples/s not reported")
    return tuple(notes)


def _evidence(r: ProfileReport, shares: dict[str, float]) -> tuple[str, ...]:
    b, m = r.breakdown, r.breakdown_median_s
    step = format_seconds(r.step_time_s)
    ev = []
    if b["data_wait"] is not None and (r.verdict == "data-loading" or b["data_wait"] >= ADVICE_SHARE):
        ev.append(f"waiting for the next batch takes {_pct(b['data_wait'])} of the step time "
                  f"(median {format_seconds(m['data_wait'])} of a {step} step)")
    if r.verdict == "transfer" or (b["transfer"] or 0) >= ADVICE_SHARE:
        t = r.transfer
        line = (f"host<->device copies take {_pct(b['transfer'])} of the step time "
                f"(median {format_seconds(m['transfer'])} per step)")
        if t is not None:
            line += (f": {format_bytes(t.h2d_bytes_per_step + t.d2h_bytes_per_step)} in "
                     f"{t.copies_per_step:.0f} copies per step")
            if t.bandwidth_bytes_per_s:
                line += f" at {format_rate(t.bandwidth_bytes_per_s, 'B/s')}"
            if t.pageable_fraction is not None:
                line += f"; {_pct(t.pageable_fraction)} of host->device bytes from pageable memory"
        ev.append(line)
    compute = sum(b[p] or 0.0 for p in COMPUTE_PHASES)
    other = b["other"] or 0.0
    if r.verdict == "host-overhead" or other >= ADVICE_SHARE:
        ev.append(f"{_pct(other)} of the step is outside data loading, copies, forward, backward and "
                  f"the optimizer step (median {format_seconds(m['other'])} per step)")
    if r.gpu is not None and compute > 0:
        g = r.gpu
        proven = max(0.0, compute - g.host_paced_fraction)
        ev.append(f"forward+backward+optimizer take {_pct(compute)} of the step; the GPU was busy "
                  f"between {_pct(g.busy_fraction_min)} and {_pct(g.busy_fraction_max)} of the step "
                  f"and proven busy for {_pct(proven / compute)} of forward+backward+optimizer")
        if _launch_bound(b, r.gpu):
            ev.append("the GPU finished each phase soon after the host issued it: the host's launches "
                      "(or synchronizing calls such as .item()) set the pace")
    elif compute > 0 and (r.verdict == "compute" or compute >= ADVICE_SHARE):
        parts = ", ".join(f"{p} {_pct(b[p] or 0.0)}" for p in COMPUTE_PHASES)
        ev.append(f"forward+backward+optimizer take {_pct(compute)} of the step ({parts})")
    if r.step_time_p10_s > 0 and r.step_time_p90_s / r.step_time_p10_s > 1.5:
        ev.append(f"step times vary: p10 {format_seconds(r.step_time_p10_s)}, "
                  f"p90 {format_seconds(r.step_time_p90_s)}")
    if r.expected_step_time_s and r.measured_over_expected is not None:
        ev.append(f"measured step {step} vs {format_seconds(r.expected_step_time_s)} estimated "
                  f"({_times(r.measured_over_expected)})")
    return tuple(ev)


Advice = list[tuple[float, str]]
"""(weight, text) pairs: the weight is the share of the step the advice addresses."""


def _advice(r: ProfileReport, run: RunInfo, shares: dict[str, float]) -> tuple[str, ...]:
    out = [*_data_advice(r, run.cpu_count), *_transfer_advice(r), *_host_advice(r, shares),
           *_compute_advice(r, run)]
    out.sort(key=lambda x: -x[0])
    seen: set[str] = set()
    return tuple(text for _, text in out if not (text in seen or seen.add(text)))


def _data_advice(r: ProfileReport, cpus: int | None) -> Advice:
    out: Advice = []
    b, m = r.breakdown, r.breakdown_median_s
    wait = b["data_wait"]
    if wait is not None and (wait >= ADVICE_SHARE or r.verdict == "data-loading"):
        L = r.loader
        busy = max(r.step_time_s - (m["data_wait"] or 0.0), 1e-9)  # the step without the wait
        if L is not None and L.num_workers is not None:
            w = L.num_workers
            # One worker makes one batch in `load` seconds; W workers deliver W/load batches per
            # second; the rest of the step takes `busy`, so W >= load / busy keeps up.
            load = (m["data_wait"] or 0.0) if w == 0 else w * r.step_time_s
            need = max(2, _ceil(load / busy)) if w == 0 else max(w + 1, _ceil(load / busy))
            cpu_txt = f" ({cpus} CPU{'s' if cpus != 1 else ''} available to this process)" if cpus else ""
            if cpus and need > cpus:
                out.append((wait, f"loading a batch takes ~{format_seconds(load)} of CPU work but the "
                                  f"rest of the step only {format_seconds(busy)}: {need} workers would be "
                                  f"needed{cpu_txt}; make per-item work cheaper (pre-process and cache "
                                  "offline, decode on the GPU) or use more CPU cores"))
            if w == 0:
                out.append((wait, f"the DataLoader loads in the main process (num_workers=0): set "
                                  f"num_workers={min(need, cpus) if cpus else need}{cpu_txt} so batches "
                                  "are prepared while the model computes"))
            elif not (cpus and need > cpus):
                out.append((wait, f"raise num_workers from {w} to {need}{cpu_txt}: each batch takes "
                                  f"~{format_seconds(load)} to make and the rest of the step "
                                  f"{format_seconds(busy)}"))
            if w > 0:
                pf = L.prefetch_factor if L.prefetch_factor is not None else 2
                out.append((wait * 0.5, f"prefetch_factor={pf} keeps {pf * w} batches in flight; raise "
                                        "it when batch times are uneven"))
                if not L.persistent_workers:
                    out.append((wait * 0.3, "persistent_workers=True keeps the workers alive between "
                                            "epochs instead of restarting them"))
        else:
            out.append((wait, f"batches take {format_seconds(m['data_wait'] or 0.0)} to arrive: make them "
                              "in a torch.utils.data.DataLoader with num_workers > 0 so they are "
                              "prepared while the model computes"))

    return out


def _transfer_advice(r: ProfileReport) -> Advice:
    out: Advice = []
    b = r.breakdown
    tr = b["transfer"] or 0.0
    t = r.transfer
    if (tr >= ADVICE_SHARE or r.verdict == "transfer") and t is not None:
        if t.pageable_fraction is not None and t.pageable_fraction >= PAGEABLE_MAJORITY:
            out.append((tr, f"{_pct(t.pageable_fraction)} of the bytes copied to the GPU come from "
                            "pageable memory: use DataLoader(pin_memory=True) (or tensor.pin_memory()) "
                            "and .to(device, non_blocking=True) so copies run at full PCIe speed and "
                            "overlap with compute"))
        elif t.non_blocking_fraction is not None and t.non_blocking_fraction < 0.5:
            out.append((tr, "the copies come from pinned memory but block the host: pass "
                            "non_blocking=True to .to()/.cuda()"))
        else:
            out.append((tr, f"{format_bytes(t.h2d_bytes_per_step + t.d2h_bytes_per_step)} cross the "
                            "host-device link every step: keep data on the GPU, send compact dtypes "
                            "(e.g. uint8 images, converted on the GPU) or fewer, larger copies"))
        if t.d2h_bytes_per_step > 0:
            out.append((tr * 0.5, "device->host copies (.cpu(), .item(), .tolist()) wait for the GPU: "
                                  "accumulate metrics on the GPU and read them every N steps"))

    return out


def _host_advice(r: ProfileReport, shares: dict[str, float]) -> Advice:
    out: Advice = []
    b, m = r.breakdown, r.breakdown_median_s
    other = b["other"] or 0.0
    if _launch_bound(b, r.gpu):
        out.append((shares["host-overhead"], "the GPU waits for the host's kernel launches: torch.compile "
                    "(mode='reduce-overhead' adds CUDA graphs) or CUDA graphs cut launch overhead, and "
                    "a larger batch gives every launch more work; also look for synchronizing calls "
                    "(.item(), .cpu(), data-dependent shapes) inside forward/backward"))
    if other >= ADVICE_SHARE or (r.verdict == "host-overhead" and not _launch_bound(b, r.gpu)):
        out.append((other, f"{format_seconds(m['other'] or 0.0)} per step is spent outside the model and "
                           "optimizer: look for per-step Python work, logging, metric computation and "
                           "synchronizing calls (.item(), printing tensors) and do them every N steps"))

    return out


def _compute_advice(r: ProfileReport, run: RunInfo) -> Advice:
    out: Advice = []
    b, cpus = r.breakdown, run.cpu_count
    compute = sum(b[p] or 0.0 for p in COMPUTE_PHASES)
    if r.verdict == "compute" or compute >= 0.5:
        g = r.gpu
        if g is not None:
            if run.param_dtype == "float32" and not run.autocast:
                out.append((compute, "parameters are fp32 and no autocast was active: mixed precision "
                                     "(torch.autocast('cuda', dtype=torch.bfloat16)) runs the matmuls on "
                                     "tensor cores, typically several times faster"))
            total_mem = g.total_memory_bytes
            peak = g.peak_reserved_bytes
            if total_mem and peak is not None:
                if peak >= NEAR_MEMORY_LIMIT * total_mem:
                    out.append((compute * 0.8, f"memory is near the limit (peak reserved "
                                f"{format_bytes(peak)} of {format_bytes(total_mem)}): gradient "
                                "checkpointing frees activation memory for a larger batch at the cost of "
                                "one extra forward (~1/3 more compute)"))
                elif peak < MEMORY_HEADROOM * total_mem and (g.busy_fraction_max < 0.9 or _launch_bound(b, r.gpu)):
                    out.append((compute * 0.7, f"peak reserved memory is {format_bytes(peak)} of "
                                f"{format_bytes(total_mem)}: a larger batch gives the GPU more work per "
                                "kernel"))
            out.append((compute * 0.5, "torch.compile fuses elementwise kernels and saves memory traffic "
                                       "in compute-bound steps"))
        else:
            threads = run.torch_threads
            if threads and cpus and threads < cpus:
                out.append((compute, f"torch uses {threads} of {cpus} CPU threads: "
                                     "torch.set_num_threads() can use the rest"))
            out.append((compute * 0.5, "the step is the model's own arithmetic on the CPU: a GPU, a "
                                       "smaller model or torch.compile are the ways to make it faster "
                                       "(`gpuplan speed` estimates a GPU)"))
    return out


# -- distributed -------------------------------------------------------------------------------

def combine_ranks(reports: dict[int, ProfileReport | None], world_size: int,
                  failures: dict[int, str] | None = None) -> ProfileReport:
    """One report for a distributed run: the slowest rank's numbers, every rank's summary.

    In synchronous data-parallel training every rank waits for the slowest one, so its breakdown
    is the one that names the bottleneck.
    """
    failures = dict(failures or {})
    have = {r: rep for r, rep in reports.items() if rep is not None}
    if not have:
        raise NoStepsError("no rank completed a measured step: " +
                           "; ".join(f"rank {r}: {why}" for r, why in sorted(failures.items())))
    slowest_by_time = max(have, key=lambda r: have[r].step_time_s)
    fastest = min(have, key=lambda r: have[r].step_time_s)
    spread = (have[slowest_by_time].step_time_s - have[fastest].step_time_s) / have[fastest].step_time_s
    rule_note = "numbers above are rank {r}'s, the slowest rank"
    slowest = slowest_by_time
    means = {r: sum(s.duration_s for s in have[r].per_step) / max(1, len(have[r].per_step)) for r in have}
    mean_spread = (max(means.values()) - min(means.values())) / min(means.values()) if means else 0.0
    if len(have) > 1 and mean_spread < LOCKSTEP_SPREAD:
        # Lock-step ranks (data parallel): all step times match because the others wait for the
        # straggler inside forward/backward collectives. The straggler waits least there.
        def waiting(r: int) -> float:
            med = have[r].breakdown_median_s
            return (med.get("forward") or 0.0) + (med.get("backward") or 0.0)

        slowest = min(have, key=waiting)
        rule_note = ("ranks run in lock-step (mean step times within {spread}); numbers above are rank {r}'s, "
                     "the straggler: it spends the least time in forward+backward, where the other "
                     "ranks wait for it in collectives")
    summaries = []
    for r in range(world_size):
        rep = have.get(r)
        if rep is None:
            summaries.append(RankSummary(rank=r, steps=0, step_time_s=None, verdict=None,
                                         breakdown=dict.fromkeys(PHASES), samples_per_s=None,
                                         status=failures.get(r, "no result")))
        else:
            summaries.append(RankSummary(rank=r, steps=rep.steps, step_time_s=rep.step_time_s,
                                         verdict=rep.verdict, breakdown=dict(rep.breakdown),
                                         samples_per_s=rep.samples_per_s, status=rep.status))
    notes = list(have[slowest].notes)
    for r in range(world_size):
        if r not in have:
            notes.append(f"rank {r}: {failures.get(r, 'sent no result')}")
    notes.append(rule_note.format(r=slowest, spread=_pct(LOCKSTEP_SPREAD)))
    total_sps = None
    if all(have[r].samples_per_s is not None for r in have) and len(have) == world_size:
        total_sps = sum(have[r].samples_per_s for r in have)  # type: ignore[misc]
        notes.append(f"all ranks together: {total_sps:,.1f} samples/s")
    return replace(
        have[slowest], rank=slowest, world_size=world_size, ranks=tuple(summaries),
        slowest_rank=slowest, rank_spread=spread, notes=tuple(notes),
    )
