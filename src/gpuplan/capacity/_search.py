"""The fewest GPUs (or, with a price, the lowest cost per million output tokens) that serve a
workload within an SLO: replicas x TP (x PP where one replica's TP cannot hold the model) per
replica, each candidate simulated; the same workload split round robin over the replicas. Then,
for the KV dtype and the batch budgets the user left unset, each layout is tried again with the
other choices (:func:`_variants`: fp8 KV where the engine and the GPU take it, the token
budgets of :data:`gpuplan.bounds.CAPACITY_BATCH_TOKENS`), looking only for fewer replicas than
that layout needed at the defaults -- a bounded number of simulations. With ``disaggregated``,
also the split into prefill and decode pools (:mod:`._disagg`), compared with the best
aggregated deployment."""

from __future__ import annotations

from ..bounds import CAPACITY_BATCH_TOKENS, MAX_CAPACITY_VARIANTS
from ..errors import InputError, opt
from ..hardware import GPU
from ..job import Job
from ._disagg import search_disaggregated
from ._plan import SWEEP_FACTORS, Deployment, max_rate, sweep_dict
from ._plan import sweep as run_sweep
from ._result import SLO, CapacityResult
from ._workload import Workload

__all__ = ["search", "solve", "answer_dict", "Candidate", "TP_CHOICES"]

TP_CHOICES = (1, 2, 4, 8)


class Candidate:
    """One layout tried: its result at the fewest replicas that met the SLO (or at the most
    tried, when none did)."""

    def __init__(self, tp: int, pp: int, result: CapacityResult, variant: dict | None = None
                 ) -> None:
        self.tp, self.pp, self.result = tp, pp, result
        self.variant = dict(variant or {})
        """The knobs this candidate changed from the defaults (kv_dtype, batch budgets)."""

    def to_dict(self) -> dict:
        r = self.result
        return {"tp": self.tp, "pp": self.pp, "replicas": r.layout["replicas"], "gpus": r.gpus,
                "meets_slo": r.meets_slo, "ttft_p99_s": r.ttft_s.p99, "tpot_p99_s": r.tpot_s.p99,
                "cost_per_m_output_tokens": r.cost_per_m_output_tokens,
                "kv_dtype": r.layout.get("kv_dtype"),
                "max_num_seqs": r.scheduler.get("max_num_seqs"),
                "max_num_batched_tokens": r.scheduler.get("max_num_batched_tokens"),
                "variant": dict(self.variant)}


#: Engines whose KV cache can be fp8 (each engine's KV-cache dtype option): vLLM
#: ``--kv-cache-dtype fp8`` (vllm/config/cache.py CacheConfig.cache_dtype), SGLang
#: ``--kv-cache-dtype fp8_e4m3`` (python/sglang/srt/server_args.py), TensorRT-LLM
#: ``KvCacheConfig(dtype="fp8")`` (tensorrt_llm/llmapi/llm_args.py).
FP8_KV_ENGINES = ("vllm", "sglang", "trt-llm")


def _variants(gpu: GPU, job: Job, engine: str, kw: dict) -> list[dict]:
    """The knob settings tried beside the defaults: fp8 KV (when no KV dtype was given, the
    engine takes it and the GPU computes fp8), and each token budget of
    :data:`CAPACITY_BATCH_TOKENS` (when ``max_num_batched_tokens`` was not given), alone and
    with fp8; at most :data:`MAX_CAPACITY_VARIANTS`."""
    kvs = [None]
    if job.kv_dtype is None and engine in FP8_KV_ENGINES and gpu.supports("fp8"):
        kvs.append("fp8")
    budgets = [None]
    if kw.get("max_num_batched_tokens") is None:
        budgets += list(CAPACITY_BATCH_TOKENS)
    out = []
    for kv in kvs:
        for b in budgets:
            v = {}
            if kv is not None:
                v["kv_dtype"] = kv
            if b is not None:
                v["max_num_batched_tokens"] = b
            if v:
                out.append(v)
    return out[:MAX_CAPACITY_VARIANTS]


def _fewest(base: Deployment, per: int, hi: int, wl, slo, price, prefix_hit, progress):
    """(result at the fewest replicas in 1..hi meeting ``slo`` or None, the last result); never
    more replicas than ``wl`` has requests (or clients) to deal out."""
    lo, best, last, hi = 1, None, None, min(hi, wl.most_replicas)
    while lo <= hi:  # latency falls as replicas grow
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
    return best, last


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



def _try_variants(model, gpu, job, engine, max_gpus, kw, layouts, cands, wl, slo, price,
                  prefix_hit, progress) -> list[Candidate]:
    """The candidates :func:`_variants`' settings add: each layout with another KV dtype or
    token budget at fewer replicas than it needed at the defaults (when it missed at the most
    replicas, only if it meets there), and fp8 KV's layouts whose bf16 cache held no request."""
    out: list[Candidate] = []
    costs = {(tp, pp, None): base.cost for tp, pp, base in layouts}
    for v in _variants(gpu, job, engine, kw):  # fewer replicas with another KV dtype / budget
        for (tp, pp, base), cand in zip(layouts, list(cands)):
            per = tp * pp
            hi = (cand.result.layout["replicas"] - 1 if cand.result.meets_slo
                  else min(max_gpus // per, wl.most_replicas))
            if hi < 1:
                continue
            try:
                dep = Deployment(model, gpu, base.job.with_(kv_dtype=v.get("kv_dtype",
                                                                            job.kv_dtype)),
                                 engine=engine, **{**kw, **{k: x for k, x in v.items()
                                                            if k != "kv_dtype"}})
            except InputError:
                continue
            if "kv_dtype" not in v and (dep.sched.max_num_batched_tokens
                                        == base.sched.max_num_batched_tokens):
                continue  # the default's budget: tried already
            # one step-cost cache per (layout, KV dtype): a budget moves only the scheduler
            dep.cost = costs.setdefault((tp, pp, v.get("kv_dtype")), dep.cost)
            if not cand.result.meets_slo:  # missed at the most replicas: probe those first
                dep.replicas, dep.gpus = hi, per * hi
                if not dep.run(wl, slo=slo, price=price, prefix_hit=prefix_hit).meets_slo:
                    continue
            best, last = _fewest(dep, per, hi, wl, slo, price, prefix_hit, progress)
            if best is not None:
                out.append(Candidate(tp, pp, best, v))
        if set(v) == {"kv_dtype"}:  # layouts whose KV cache held no request at the default dtype
            held = {(tp, pp) for tp, pp, _ in layouts}
            for tp, pp, dep in _deployments(model, gpu, job.with_(kv_dtype=v["kv_dtype"]),
                                            engine, max_gpus, kw):
                if (tp, pp) in held:
                    continue
                best, last = _fewest(dep, tp * pp, max_gpus // (tp * pp), wl, slo, price,
                                     prefix_hit, progress)
                out.append(Candidate(tp, pp, best or last, v))
    return out


def _most_simulations(layouts, variants: list[dict], max_gpus: int, most: int) -> int:
    """The most simulations :func:`search` can run: a bisection over 1..m replicas of each
    layout runs at most ``m.bit_length()``; each variant of a layout at most one more (the probe
    at the most replicas); fp8 KV's extra layouts at most one bisection per TP not held. ``most``:
    the most replicas the workload deals requests to."""
    first = sum(min(max_gpus // (tp * pp), most).bit_length() for tp, pp, _ in layouts)
    held = {tp for tp, _, _ in layouts}
    extra = sum(min(max_gpus // tp, most).bit_length() for tp in TP_CHOICES
                if tp <= max_gpus and tp not in held)
    return first + sum(first + len(layouts) + (extra if set(v) == {"kv_dtype"} else 0)
                       for v in variants)


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
        progress_total(_most_simulations(layouts, _variants(gpu, job, engine, kw), max_gpus,
                                         wl.most_replicas))
    for tp, pp, base in layouts:
        best, last = _fewest(base, tp * pp, max_gpus // (tp * pp), wl, slo, price, prefix_hit,
                             progress)
        cands.append(Candidate(tp, pp, best or last))
    cands += _try_variants(model, gpu, job, engine, max_gpus, kw, layouts, cands, wl, slo,
                           price, prefix_hit, progress)
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


def check_replicas(replicas: int | None, wl: Workload) -> None:
    """``replicas`` given for ``wl`` (None: none given): at most one a request (and a closed
    loop's client). Each replica is simulated alone on its round-robin share and the result
    scaled by the count (:class:`Deployment`), so a replica with no request would multiply one
    request's 1 / E2E (10^6 replicas on 40 requests: 8.76e6 req/s for 4 offered), and one with
    no client would still get one (the share is at least one), adding load never given."""
    if replicas is None:
        return
    n = len(wl.requests)
    if replicas > n:
        raise InputError(f"{opt('replicas')} {replicas} with {opt('requests')} {n}: each replica "
                         f"is simulated on its round-robin share, and {replicas - n} would "
                         f"serve none; give {opt('replicas')} {n} or fewer, or more "
                         f"{opt('requests')}", field="replicas", value=replicas,
                         fix={"replicas": n})
    c = wl.concurrency
    if c is not None and replicas > c:
        raise InputError(f"{opt('replicas')} {replicas} with {opt('concurrency')} {c}: the "
                         f"clients are shared out, so {replicas - c} replica(s) would get none; "
                         f"give {opt('concurrency')} {replicas} or more, or fewer replicas",
                         field="replicas", value=replicas, fix={"replicas": c})


def _check_sweep_rate(base: float, closed: bool) -> None:
    """A sweep's top rate within the 10^6 a rate may be; only the rate a --max-rate search found
    can be past it here (a given one is checked where it enters) (qa43)."""
    top = max(SWEEP_FACTORS)
    if not closed and base * top > 1e6:
        raise InputError(f"{opt('sweep')} runs up to {top:g}x the highest rate found, "
                         f"{base:g} req/s, past the 10^6 a rate may be; give {opt('rate')} R "
                         f"as the sweep's load, or drop {opt('sweep')}", field="sweep")


def solve(model, gpu: GPU, job: Job, wl: Workload, slo: SLO, *, engine: str = "vllm",
          layout_given: bool = False, replicas: int | None = None, max_gpus: int = 64,
          price: float | None = None, prefix_hit: float = 0.0, find_max_rate: bool = False,
          make=None, progress=None, progress_total=None, sweep: bool = False,
          sweep_base: float | None = None, closed: bool = False, sweep_make=None,
          disaggregated: bool = False, **kw) -> dict:
    """What ``gpuplan capacity --json`` and ``POST /api/capacity`` answer: without a layout and
    with an SLO, the search's best deployment and every layout tried (``searched``); with
    ``find_max_rate``, the highest rate within the SLO (``max_rate_requests_per_s``; ``make(rate)``
    builds the workload); else the given deployment at ``wl``. ``progress`` (and, for a search,
    ``progress_total``): as :func:`search` takes them. Also returns the deployment
    (``"_deployment"``: after a search the one it chose; None for a disaggregated split) and the
    result (``"_result"``) for renderers.
    ``sweep``: also the chosen deployment at :data:`SWEEP_FACTORS` times ``sweep_base`` (a rate,
    or with ``closed`` a concurrency; by default the max rate found, else 1 request/s;
    ``sweep_make(load)`` builds each workload) as ``"sweep"`` (:func:`sweep_dict`).
    ``disaggregated``: :func:`_solve_disaggregated`."""
    check_replicas(replicas, wl)
    if disaggregated:
        return _solve_disaggregated(model, gpu, job, wl, slo, engine=engine, sweep=sweep,
                                    layout_given=layout_given or replicas is not None,
                                    max_gpus=max_gpus, price=price, prefix_hit=prefix_hit,
                                    find_max_rate=find_max_rate, **kw)

    def _sweep(dep, found=None):
        base = sweep_base or found or 1.0
        _check_sweep_rate(base, closed)
        rows = run_sweep(dep, sweep_make, base, slo=slo, closed=closed, prefix_hit=prefix_hit)
        return sweep_dict(rows, closed=closed)

    if not layout_given and replicas is None and slo.given and not find_max_rate:
        res, cands = search(model, gpu, job, wl, slo, engine=engine, max_gpus=max_gpus,
                            price=price, prefix_hit=prefix_hit, progress=progress,
                            progress_total=progress_total, **kw)
        dep = _chosen(model, gpu, job, engine, res, cands, kw)
        out = {"_result": res, "_deployment": dep, "searched": cands, "max_rate": None}
        if sweep:
            out["sweep"] = _sweep(dep)
        return out
    dep = Deployment(model, gpu, job, engine=engine, replicas=replicas or 1, **kw)
    best = None
    if find_max_rate:
        if not slo.given or make is None:
            raise InputError(f"{opt('max_rate')} needs an SLO ({opt('slo_ttft')}, {opt('slo_tpot')}"
                             f" or {opt('slo_e2e')}) and a synthetic workload ({opt('input')}, "
                             f"{opt('output')}; not {opt('workload')})", field="max_rate")
        best, res = max_rate(dep, slo, make=make, progress=progress)
        if best == 0.0:
            raise InputError(f"the deployment misses the SLO even at 0.01 req/s (p"
                             f"{slo.percentile:g} TTFT {res.ttft_s.at(slo.percentile):.3g} s, "
                             f"TPOT {res.tpot_s.at(slo.percentile) * 1e3:.3g} ms): relax the "
                             "SLO or add GPUs", field="max_rate")
    else:
        res = dep.run(wl, slo=slo, price=price, prefix_hit=prefix_hit)
    return {"_result": res, "_deployment": dep, "searched": None, "max_rate": best,
            **({"sweep": _sweep(dep, best)} if sweep else {})}


def _chosen(model, gpu, job, engine, res, cands, kw) -> Deployment:
    """The deployment a search chose (its layout, replicas, KV dtype and the knobs of its
    variant), for a sweep or a plot around it."""
    lay = res.layout
    won = next((c.variant for c in cands if c.result is res), {})
    knobs = {**kw, **{k: x for k, x in won.items() if k != "kv_dtype"}}
    return Deployment(model, gpu, job.with_(tp=lay["tp"], pp=lay["pp"], gpus=lay["tp"] * lay["pp"],
                                            kv_dtype=lay.get("kv_dtype", job.kv_dtype)),
                      engine=engine, replicas=lay["replicas"], **knobs)


def _solve_disaggregated(model, gpu, job, wl, slo, *, engine, layout_given, max_gpus, price,
                         prefix_hit, find_max_rate, sweep=False, **kw) -> dict:
    """The best split into prefill and decode pools (``"disaggregated"``, and the answer's
    result) beside the best aggregated deployment (``searched``, ``"_aggregated"``)."""
    if sweep:
        raise InputError(f"{opt('sweep')} runs one aggregated deployment: drop "
                         f"{opt('disaggregated')} or {opt('sweep')}", field="disaggregated")
    if layout_given:
        raise InputError(f"disaggregated searches each pool's layout: drop {opt('tp')}, "
                         f"{opt('pp')} and {opt('replicas')}, or drop {opt('disaggregated')}",
                         field="disaggregated")
    if find_max_rate:
        raise InputError(f"{opt('max_rate')} is for one aggregated deployment: drop "
                         f"{opt('disaggregated')} or {opt('max_rate')}", field="disaggregated")
    if not slo.given:
        raise InputError(f"disaggregated needs an SLO to size its pools: give {opt('slo_ttft')}, "
                         f"{opt('slo_tpot')} or {opt('slo_e2e')}", field="slo_ttft")
    if wl.concurrency is not None:
        raise InputError(f"a disaggregated deployment is simulated open loop: give "
                         f"{opt('rate')} or {opt('workload')}, not {opt('concurrency')}",
                         field="concurrency")
    layouts = _deployments(model, gpu, job, engine, max_gpus, kw)
    if not layouts:
        raise InputError(f"no layout of up to {max_gpus} {gpu.name} holds "
                         f"{getattr(model, 'name', model)} with room for one request; give more "
                         f"{opt('max_gpus')} or a lower-bit {opt('precision')}", field="max_gpus")
    (dis, res, info), tried = search_disaggregated(layouts, wl, slo, max_gpus=max_gpus,
                                                   price=price, prefix_hit=prefix_hit)
    try:
        agg, cands = search(model, gpu, job, wl, slo, engine=engine, max_gpus=max_gpus,
                            price=price, prefix_hit=prefix_hit, **kw)
    except InputError:
        agg, cands = None, None
    cmp = {"aggregated": None, "gpus_saved": None, "cost_ratio": None}
    if agg is not None:
        cmp = {"aggregated": {"layout": dict(agg.layout), "gpus": agg.gpus,
                              "ttft_p99_s": agg.ttft_s.p99, "tpot_p99_s": agg.tpot_s.p99,
                              "cost_per_m_output_tokens": agg.cost_per_m_output_tokens},
               "gpus_saved": agg.gpus - res.gpus,
               "cost_ratio": (None if price is None else
                              res.cost_per_m_output_tokens / agg.cost_per_m_output_tokens)}
    info = {**info, "comparison": cmp, "searched": tried}
    return {"_result": res, "_deployment": None, "searched": cands, "max_rate": None,
            "disaggregated": info, "_aggregated": agg}


def answer_dict(out: dict) -> dict:
    """The JSON answer of :func:`solve`'s outcome."""
    d = out["_result"].to_dict()
    if out.get("disaggregated") is not None:
        d["disaggregated"] = out["disaggregated"]
    if out["searched"] is not None:
        d["searched"] = [c.to_dict() for c in out["searched"]]
    if out["max_rate"] is not None:
        d["max_rate_requests_per_s"] = out["max_rate"]
    if out.get("sweep") is not None:
        d["sweep"] = out["sweep"]
    return d
