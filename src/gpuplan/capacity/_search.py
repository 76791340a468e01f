"""The fewest GPUs (or, with a price, the lowest cost per million output tokens) that serve a
workload within an SLO: replicas x TP (x PP where one replica's TP cannot hold the model) per
replica, each candidate simulated; the same workload split round robin over the replicas."""

from __future__ import annotations

from ..errors import InputError, opt
from ..hardware import GPU
from ..job import Job
from ._plan import Deployment, max_rate, sweep_dict
from ._plan import sweep as run_sweep
from ._result import SLO, CapacityResult
from ._workload import Workload

__all__ = ["search", "solve", "answer_dict", "Candidate", "TP_CHOICES"]

TP_CHOICES = (1, 2, 4, 8)


class Candidate:
    """One layout tried: its result at the fewest replicas that met the SLO (or at the most
    tried, when none did)."""

    def __init__(self, tp: int, pp: int, result: CapacityResult) -> None:
        self.tp, self.pp, self.result = tp, pp, result

    def to_dict(self) -> dict:
        r = self.result
        return {"tp": self.tp, "pp": self.pp, "replicas": r.layout["replicas"], "gpus": r.gpus,
                "meets_slo": r.meets_slo, "ttft_p99_s": r.ttft_s.p99, "tpot_p99_s": r.tpot_s.p99,
                "cost_per_m_output_tokens": r.cost_per_m_output_tokens}


def _deployments(model, gpu: GPU, job: Job, engine: str, max_gpus: int, kw: dict):
    """(tp, pp, a one-replica deployment) for each layout whose KV cache holds a request."""
    heads = getattr(getattr(model, "architecture", None), "num_attention_heads", 0) or 0
    out = []
    for tp in TP_CHOICES:
        if tp > max_gpus or (heads and heads % tp):
            continue
        for pp in (1, 2, 4):
            if tp * pp > max_gpus or (pp > 1 and tp < max(TP_CHOICES)):
                continue  # PP only beyond a full node of TP
            try:
                dep = Deployment(model, gpu, job.with_(tp=tp, pp=pp, gpus=tp * pp),
                                 engine=engine, **kw)
            except InputError:
                continue
            out.append((tp, pp, dep))
            break
    return out


def search(model, gpu: GPU, job: Job, wl: Workload, slo: SLO, *, engine: str = "vllm",
           max_gpus: int = 64, price: float | None = None, prefix_hit: float = 0.0,
           progress=None, progress_total=None, **kw) -> tuple[CapacityResult, list[Candidate]]:
    """The best deployment meeting ``slo`` at ``wl`` (fewest GPUs; with ``price``, lowest cost
    per million output tokens) and every layout tried. No deployment meets it: one line saying
    the best p99 latencies reached. ``progress()`` is called after each simulation;
    ``progress_total(n)`` once, before the first, with the most simulations the search can run
    (a bisection over 1..m replicas runs at most ``m.bit_length()``)."""
    if not slo.given:
        raise InputError(f"a search needs an SLO: give {opt('slo_ttft')}, {opt('slo_tpot')} or "
                         f"{opt('slo_e2e')}, or a layout ({opt('tp')}, {opt('replicas')})", field="slo_ttft")
    cands: list[Candidate] = []
    layouts = _deployments(model, gpu, job, engine, max_gpus, kw)
    if progress_total:
        progress_total(sum((max_gpus // (tp * pp)).bit_length() for tp, pp, _ in layouts))
    for tp, pp, base in layouts:
        per = tp * pp
        lo, hi, best = 1, max_gpus // per, None
        last = None
        while lo <= hi:  # fewest replicas meeting the SLO (latency falls as replicas grow)
            mid = (lo + hi) // 2
            base.replicas, base.gpus = mid, per * mid
            r = base.run(wl, slo=slo, price=price, prefix_hit=prefix_hit)
            if progress:
                progress()
            last = r
            if r.meets_slo:
                best, hi = r, mid - 1
            else:
                lo = mid + 1
        cands.append(Candidate(tp, pp, best or last))
    if not cands:
        raise InputError(f"no layout of up to {max_gpus} {gpu.name} holds {getattr(model, 'name', model)} "
                         f"with room for one request; give more {opt('max_gpus')} or a lower-bit "
                         f"{opt('precision')}", field="max_gpus")
    ok = [c for c in cands if c.result.meets_slo]
    if not ok:
        best = min(cands, key=lambda c: (c.result.ttft_s.p99, c.result.tpot_s.p99))
        r = best.result
        raise InputError(
            f"no layout of up to {max_gpus} GPUs meets the SLO; the best reached is p"
            f"{slo.percentile:g} TTFT {r.ttft_s.at(slo.percentile):.3g} s, TPOT "
            f"{r.tpot_s.at(slo.percentile) * 1e3:.3g} ms, E2E {r.e2e_s.at(slo.percentile):.3g} s "
            f"on TP {best.tp} x PP {best.pp} x {r.layout['replicas']} replicas: relax the SLO "
            "or lower the rate", field="slo_ttft")
    if price is not None:
        key = lambda c: (c.result.cost_per_m_output_tokens, c.result.gpus)  # noqa: E731
    else:
        key = lambda c: (c.result.gpus, c.result.ttft_s.p99)  # noqa: E731
    return min(ok, key=key).result, cands


def solve(model, gpu: GPU, job: Job, wl: Workload, slo: SLO, *, engine: str = "vllm",
          layout_given: bool = False, replicas: int | None = None, max_gpus: int = 64,
          price: float | None = None, prefix_hit: float = 0.0, find_max_rate: bool = False,
          make=None, progress=None, progress_total=None, sweep: bool = False,
          sweep_base: float | None = None, closed: bool = False, sweep_make=None,
          **kw) -> dict:
    """What ``gpuplan capacity --json`` and ``POST /api/capacity`` answer: without a layout and
    with an SLO, the search's best deployment and every layout tried (``searched``); with
    ``find_max_rate``, the highest rate within the SLO (``max_rate_requests_per_s``; ``make(rate)``
    builds the workload); else the given deployment at ``wl``. ``progress`` (and, for a search,
    ``progress_total``): as :func:`search` takes them. Also returns the deployment
    (``"_deployment"``, None after a search) and the result (``"_result"``) for renderers.
    ``sweep``: also the chosen deployment at :data:`SWEEP_FACTORS` times ``sweep_base`` (a rate,
    or with ``closed`` a concurrency; by default the max rate found, else 1 request/s;
    ``sweep_make(load)`` builds each workload) as ``"sweep"`` (:func:`sweep_dict`)."""
    def _sweep(dep, found=None):
        base = sweep_base or found or 1.0
        rows = run_sweep(dep, sweep_make, base, slo=slo, closed=closed, prefix_hit=prefix_hit)
        return sweep_dict(rows, closed=closed)

    if not layout_given and replicas is None and slo.given and not find_max_rate:
        res, cands = search(model, gpu, job, wl, slo, engine=engine, max_gpus=max_gpus,
                            price=price, prefix_hit=prefix_hit, progress=progress,
                            progress_total=progress_total, **kw)
        out = {"_result": res, "_deployment": None, "searched": cands, "max_rate": None}
        if sweep:
            lay = res.layout
            dep = Deployment(model, gpu, job.with_(tp=lay["tp"], pp=lay["pp"],
                                                   gpus=lay["tp"] * lay["pp"]),
                             engine=engine, replicas=lay["replicas"], **kw)
            out["sweep"] = _sweep(dep)
        return out
    dep = Deployment(model, gpu, job, engine=engine, replicas=replicas or 1, **kw)
    best = None
    if find_max_rate:
        if not slo.given or make is None:
            raise InputError("max rate needs an SLO (slo_ttft, slo_tpot or slo_e2e) and a "
                             "synthetic workload (input, output)", field="max_rate")
        best, res = max_rate(dep, slo, make=make, progress=progress)
        if best == 0.0:
            raise InputError(f"the deployment misses the SLO even at 0.01 req/s (p"
                             f"{slo.percentile:g} TTFT {res.ttft_s.at(slo.percentile):.3g} s, "
                             f"TPOT {res.tpot_s.at(slo.percentile) * 1e3:.3g} ms): relax the "
                             "SLO or add GPUs", field="max_rate")
    else:
        res = dep.run(wl, slo=slo, price=price, prefix_hit=prefix_hit)
    out = {"_result": res, "_deployment": dep, "searched": None, "max_rate": best}
    if sweep:
        out["sweep"] = _sweep(dep, best)
    return out


def answer_dict(out: dict) -> dict:
    """The JSON answer of :func:`solve`'s outcome."""
    d = out["_result"].to_dict()
    if out["searched"] is not None:
        d["searched"] = [c.to_dict() for c in out["searched"]]
    if out["max_rate"] is not None:
        d["max_rate_requests_per_s"] = out["max_rate"]
    if out.get("sweep") is not None:
        d["sweep"] = out["sweep"]
    return d
