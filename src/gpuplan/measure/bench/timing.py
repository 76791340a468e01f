"""Trustworthy wall-clock timing: warm-up, synchronized blocks, adaptive repetitions, median + IQR.

Torch-free: the caller passes the work as a callable and, for an asynchronous device, a ``sync``
callable (``torch.cuda.synchronize``) and optionally an event factory (``torch.cuda.Event``).

How one measurement runs
------------------------
1. **Warm-up.** The work runs (synchronized) until it has run at least once and for at least
   ``warmup_s``; first calls pay for lazy initialization (library handles, kernel selection, page
   faults) that a steady-state figure must not include.
2. **Blocks.** Each sample is one *block* of ``inner`` back-to-back calls, sized from the warm-up
   so a block lasts at least ``min_block_s``: the clock's own cost and resolution then stay far
   below 1% of what is measured. A sample is the block's time divided by ``inner``.
3. **Synchronization.** ``sync()`` runs immediately before *every* clock read, so the clock is never
   read while work is still queued on the device: the first read does not absorb earlier work and
   the second read waits until the block has really finished (the source document's
   ``torch.cuda.synchronize()`` before and after).
4. **Adaptive repetitions.** Samples are taken until the spread -- interquartile range over median --
   is under ``target_spread`` (10%) with at least ``min_samples`` samples and ``min_time_s`` spent,
   or until ``budget_s`` is spent (at least ``floor_samples`` samples are always taken). A
   measurement that stopped on the budget with the spread still above the target is marked
   ``noisy``.
5. **Statistics.** Median and IQR (linear-interpolated quartiles, as ``numpy.percentile`` and
   ``torch.utils.benchmark`` compute them), not the mean: one preempted sample on a shared machine
   moves the mean but hardly the median.
"""

from __future__ import annotations

import math
from time import perf_counter
from typing import Callable, Literal, Protocol, Sequence

from ..._record import record
from ...compute.measured import NOISY_SPREAD

__all__ = ["Timing", "measure", "quantile", "TARGET_SPREAD"]

#: IQR / median under which a measurement is considered stable: the one threshold of a stored
#: run's quality, stated in :data:`gpuplan.compute.measured.NOISY_SPREAD`.
TARGET_SPREAD = NOISY_SPREAD


class _Event(Protocol):
    def record(self) -> None: ...
    def synchronize(self) -> None: ...
    def elapsed_time(self, end: "_Event") -> float: ...


@record
class Timing:
    """The result of one measurement. Times are seconds per call."""

    median_s: float
    """Median over samples of the per-call time."""
    iqr_s: float
    """Interquartile range (q3 - q1) of the per-call time."""
    q1_s: float
    """First quartile."""
    q3_s: float
    """Third quartile."""
    min_s: float
    """Fastest sample."""
    samples: int
    """Number of timed blocks."""
    inner: int
    """Calls per block."""
    warmup_calls: int
    """Calls run before timing started."""
    elapsed_s: float
    """Wall time the whole measurement took, warm-up included."""
    stop: Literal["converged", "budget", "max_samples"]
    """Why sampling stopped."""
    target_spread: float
    """The spread (IQR/median) the measurement aimed for."""
    device_median_s: float | None = None
    """Median per-call time by device events (GPU busy time, no host gaps); None without events."""
    times_s: tuple[float, ...] = ()
    """Every sample's per-call time, in the order taken."""

    @property
    def spread(self) -> float:
        """IQR / median (0 when the median is 0)."""
        return self.iqr_s / self.median_s if self.median_s > 0 else 0.0

    @property
    def noisy(self) -> bool:
        """The spread stayed at or above the target: the machine was too busy to measure well."""
        return self.spread >= self.target_spread


def quantile(sorted_xs: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile of already sorted values (numpy's default 'linear' method)."""
    if not sorted_xs:
        raise ValueError("quantile of no values")
    pos = q * (len(sorted_xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


def measure(
    fn: Callable[[], object],
    *,
    budget_s: float = 1.0,
    target_spread: float = TARGET_SPREAD,
    min_samples: int = 5,
    floor_samples: int = 3,
    max_samples: int = 10_000,
    min_block_s: float = 2e-3,
    warmup_s: float | None = None,
    min_time_s: float | None = None,
    sync: Callable[[], None] | None = None,
    event: Callable[[], _Event] | None = None,
    max_inner: int = 1_000_000,
) -> Timing:
    """Time ``fn`` (one call = one unit of work) and return median and IQR per call.

    ``sync`` is called before every clock read (pass ``torch.cuda.synchronize`` for CUDA work);
    ``event`` (``lambda: torch.cuda.Event(enable_timing=True)``) adds a device-side time per block,
    read only after the block is synchronized.
    """
    if not budget_s > 0:
        raise ValueError(f"budget_s must be > 0, got {budget_s!r}")
    warmup_s = min(0.25, 0.2 * budget_s) if warmup_s is None else warmup_s
    min_time_s = min(0.1, 0.25 * budget_s) if min_time_s is None else min_time_s

    def block(inner: int) -> tuple[float, float | None]:
        if sync is not None:
            sync()
        start_ev = end_ev = None
        if event is not None:
            start_ev, end_ev = event(), event()
        t0 = perf_counter()
        if start_ev is not None:
            start_ev.record()
        for _ in range(inner):
            fn()
        if end_ev is not None:
            end_ev.record()
        if sync is not None:
            sync()
        t1 = perf_counter()
        dev = None
        if start_ev is not None and end_ev is not None:
            end_ev.synchronize()
            dev = start_ev.elapsed_time(end_ev) / 1e3 / inner  # ms -> s
        return (t1 - t0) / inner, dev

    if sync is not None:
        sync()  # setup work (allocations, copies) must not leak into the first clock read
    t_start = perf_counter()
    warm = 0
    one = 0.0
    while True:
        one, _ = block(1)
        warm += 1
        if perf_counter() - t_start >= warmup_s:
            break
    inner = 1 if one >= min_block_s else min(max_inner, max(1, math.ceil(min_block_s / max(one, 1e-9))))

    times: list[float] = []
    dev_times: list[float] = []
    t_meas = perf_counter()
    stop: Literal["converged", "budget", "max_samples"]
    while True:
        t, d = block(inner)
        times.append(t)
        if d is not None:
            dev_times.append(d)
        n = len(times)
        now = perf_counter()
        if n >= min_samples and now - t_meas >= min_time_s:
            xs = sorted(times)
            med = quantile(xs, 0.5)
            if med > 0 and (quantile(xs, 0.75) - quantile(xs, 0.25)) / med < target_spread:
                stop = "converged"
                break
        if now - t_meas >= budget_s and n >= floor_samples:
            stop = "budget"
            break
        if n >= max_samples:
            stop = "max_samples"
            break

    xs = sorted(times)
    q1, med, q3 = quantile(xs, 0.25), quantile(xs, 0.5), quantile(xs, 0.75)
    return Timing(
        median_s=med, iqr_s=q3 - q1, q1_s=q1, q3_s=q3, min_s=xs[0], samples=len(xs), inner=inner,
        warmup_calls=warm, elapsed_s=perf_counter() - t_start, stop=stop,
        target_spread=target_spread,
        device_median_s=quantile(sorted(dev_times), 0.5) if dev_times else None,
        times_s=tuple(times),
    )
