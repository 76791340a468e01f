"""The answer of a capacity simulation: latency percentiles, throughput, the system's occupancy,
KV use, preemptions, SLO attainment and cost -- a frozen record built from a :class:`SimTrace`."""

from __future__ import annotations

import math
from typing import Sequence

from .._record import record
from ._sim import SimTrace

__all__ = ["Stats", "CapacityResult", "stats_of", "weighted_stats", "summarize", "SLO"]


@record
class Stats:
    """Mean and percentiles of one latency, seconds."""

    mean: float
    p50: float
    p90: float
    p99: float

    def at(self, percentile: float) -> float:
        return {50.0: self.p50, 90.0: self.p90, 99.0: self.p99}.get(float(percentile),
                                                                    self.p99)

    def to_dict(self) -> dict:
        return {"mean": self.mean, "p50": self.p50, "p90": self.p90, "p99": self.p99}


def _pct(sorted_values: Sequence[float], q: float) -> float:
    """The q-th percentile with linear interpolation (numpy's default)."""
    n = len(sorted_values)
    if n == 0:
        return math.nan
    x = (n - 1) * q / 100.0
    lo = int(math.floor(x))
    hi = min(lo + 1, n - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (x - lo)


def stats_of(values: Sequence[float]) -> Stats:
    v = sorted(values)
    if not v:
        return Stats(mean=math.nan, p50=math.nan, p90=math.nan, p99=math.nan)
    return Stats(mean=sum(v) / len(v), p50=_pct(v, 50), p90=_pct(v, 90), p99=_pct(v, 99))


def weighted_stats(pairs: Sequence[tuple[float, int]]) -> Stats:
    """Stats of values given as (value, count), sorted by value (the lower empirical quantile)."""
    total = sum(c for _, c in pairs)
    if total == 0:
        return Stats(mean=math.nan, p50=math.nan, p90=math.nan, p99=math.nan)
    mean = sum(v * c for v, c in pairs) / total
    out = []
    for q in (50, 90, 99):
        need, acc = q / 100.0 * total, 0
        for v, c in pairs:
            acc += c
            if acc >= need:
                out.append(v)
                break
    return Stats(mean=mean, p50=out[0], p90=out[1], p99=out[2])


@record
class SLO:
    """Latency targets (seconds) at a percentile; None: no target on that latency."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None
    percentile: float = 99.0

    @property
    def given(self) -> bool:
        return any(x is not None for x in (self.ttft_s, self.tpot_s, self.e2e_s))

    def to_dict(self) -> dict:
        return {"ttft_s": self.ttft_s, "tpot_s": self.tpot_s, "e2e_s": self.e2e_s,
                "percentile": self.percentile}


@record
class CapacityResult:
    """One deployment serving one workload, as simulated."""

    model: str
    gpu: str
    engine: str
    engine_version: str
    layout: dict
    """tp, pp, ep per replica, replicas, and gpus (all of them)."""
    gpus: int
    workload: dict
    scheduler: dict
    ttft_s: Stats
    tpot_s: Stats
    itl_s: Stats
    e2e_s: Stats
    queue_s: Stats
    throughput: dict
    """``requests_per_s``, ``input_tokens_per_s``, ``output_tokens_per_s`` (all replicas)."""
    concurrency_mean: float
    """Mean requests in the system per replica (waiting or running)."""
    running_mean: float
    waiting_mean: float
    kv: dict
    """``kv_tokens``, ``block_size``, ``kv_blocks``, ``utilization_mean``, ``utilization_peak``."""
    preemptions: int
    steps: int
    slo: SLO | None = None
    attainment: float | None = None
    """Share of requests meeting every SLO target."""
    goodput_requests_per_s: float | None = None
    meets_slo: bool | None = None
    price_per_gpu_hour: float | None = None
    cost_per_m_output_tokens: float | None = None
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {"model": self.model, "gpu": self.gpu, "engine": self.engine,
                "engine_version": self.engine_version, "layout": dict(self.layout),
                "gpus": self.gpus, "workload": dict(self.workload),
                "scheduler": dict(self.scheduler), "ttft_s": self.ttft_s.to_dict(),
                "tpot_s": self.tpot_s.to_dict(), "itl_s": self.itl_s.to_dict(),
                "e2e_s": self.e2e_s.to_dict(), "queue_s": self.queue_s.to_dict(),
                "throughput": dict(self.throughput), "concurrency_mean": self.concurrency_mean,
                "running_mean": self.running_mean, "waiting_mean": self.waiting_mean,
                "kv": dict(self.kv), "preemptions": self.preemptions, "steps": self.steps,
                "slo": None if self.slo is None else self.slo.to_dict(),
                "attainment": self.attainment,
                "goodput_requests_per_s": self.goodput_requests_per_s,
                "meets_slo": self.meets_slo, "price_per_gpu_hour": self.price_per_gpu_hour,
                "cost_per_m_output_tokens": self.cost_per_m_output_tokens,
                "notes": list(self.notes)}


def summarize(tr: SimTrace, *, replicas: int, gpus: int, slo: SLO | None,
              price: float | None, **fields) -> CapacityResult:
    """The result of one replica's trace, scaled to ``replicas`` identical replicas."""
    ttft = [f - a for f, a in zip(tr.first_token_s, tr.arrival_s)]
    e2e = [d - a for d, a in zip(tr.done_s, tr.arrival_s)]
    tpot = [(e - f) / (o - 1) for e, f, o in zip(e2e, ttft, tr.output_tokens) if o > 1]
    queue = [s - a for s, a in zip(tr.scheduled_s, tr.arrival_s)]
    span = tr.span_s if tr.span_s > 0 else math.nan
    n = len(ttft)
    rps = replicas * n / span
    thr = {"requests_per_s": rps, "input_tokens_per_s": replicas * sum(tr.input_tokens) / span,
           "output_tokens_per_s": replicas * sum(tr.output_tokens) / span}
    attain = goodput = meets = None
    st = {"ttft": stats_of(ttft), "tpot": stats_of(tpot), "e2e": stats_of(e2e)}
    if slo is not None and slo.given:
        ok = 0
        for i in range(n):
            good = (slo.ttft_s is None or ttft[i] <= slo.ttft_s) and \
                   (slo.e2e_s is None or e2e[i] <= slo.e2e_s) and \
                   (slo.tpot_s is None or tr.output_tokens[i] <= 1 or
                    (e2e[i] - ttft[i]) / (tr.output_tokens[i] - 1) <= slo.tpot_s)
            ok += good
        attain = ok / n
        goodput = rps * attain
        meets = all(lim is None or _pct(sorted(v), slo.percentile) <= lim
                    for lim, v in ((slo.ttft_s, ttft), (slo.tpot_s, tpot), (slo.e2e_s, e2e)))
    cost = None
    if price is not None:
        cost = gpus * price / 3600.0 / thr["output_tokens_per_s"] * 1e6
    kv = dict(fields.pop("kv"))
    kv["utilization_mean"] = tr.kv_used_s / (tr.kv_blocks * span) if tr.kv_blocks else 0.0
    kv["utilization_peak"] = tr.kv_peak_blocks / tr.kv_blocks if tr.kv_blocks else 0.0
    return CapacityResult(
        **fields, gpus=gpus, ttft_s=st["ttft"], tpot_s=st["tpot"],
        itl_s=weighted_stats(tr.itl), e2e_s=st["e2e"], queue_s=stats_of(queue), throughput=thr,
        concurrency_mean=tr.in_system_s / span, running_mean=tr.running_s / span,
        waiting_mean=tr.waiting_s / span, kv=kv, preemptions=tr.preemptions, steps=tr.steps,
        slo=slo, attainment=attain, goodput_requests_per_s=goodput, meets_slo=meets,
        price_per_gpu_hour=price, cost_per_m_output_tokens=cost)
