"""Disaggregated prefill and decode: two pools of replicas, each with its own layout, as in
DistServe (Zhong et al., "DistServe: Disaggregating Prefill and Decoding for Goodput-optimized
Large Language Model Serving", OSDI 2024), Splitwise, vLLM's and SGLang's PD disaggregation and
NVIDIA Dynamo.

A request is prefilled on a prefill replica (the same scheduler simulation as an aggregated
replica, each request asking one token: the prefill instance makes the first token, as vLLM's
disaggregated proxy runs it with ``max_tokens=1``), its prompt's KV cache is sent to a decode
replica, and it decodes its other ``output - 1`` tokens there (:func:`._sim.simulate` with
``prefilled``: admitted straight into decoding, no prefill step in its batches).

* **Transfer**: each GPU of the prefill replica sends its shard of the prompt's KV cache to the
  decode replica's GPUs in parallel, one link each; the shard is ``kv_bytes_per_token`` of the
  rank (gpuplan's KV budget accounting: every layer the rank holds, at the KV dtype) times the
  prompt, the larger of the two pools' shards when their TP differs. Time = shard bytes / the
  link's bandwidth per GPU one way (DistServe section 4's model: the KV bytes over the
  bandwidth; no per-message latency). The link is the node's (NVLink, or PCIe without one) when
  one prefill and one decode replica fit in a node together (DistServe's placement puts the
  pair of a stage in one node), else the network per GPU (``gpus_per_node``, ``inter_node``).
* **TTFT** = queue + prefill on the prefill pool + transfer: the first token reaches the client
  once its KV is on the decode replica, which streams the answer (vLLM's proxy); no decode step
  is added. **TPOT** and ITL come from the decode pool alone, whose batches hold no prefill.
* Requests are dealt round robin to the prefill replicas (each simulated), and in the order
  their KV arrives to the decode replicas; the first decode replica is simulated and the
  result scaled to the pool, as :class:`._plan.Deployment` does.
"""

from __future__ import annotations

from ..compute.device import power_clock_fraction
from ..errors import InputError, opt
from ..hardware.topology import Link, topology_for
from ._plan import Deployment
from ._result import SLO, CapacityResult, stats_of, summarize
from ._sim import SimTrace, simulate
from ._workload import Request, Workload

__all__ = ["Disaggregated", "kv_link", "TTFT_CONVENTION"]

TTFT_CONVENTION = ("TTFT = queue + prefill (the prefill instance makes the first token) + KV "
                   "transfer; no decode step added (DistServe, Zhong et al. OSDI'24)")


def kv_link(gpu, job, per_prefill: int, per_decode: int) -> Link:
    """The link a prefill replica of ``per_prefill`` GPUs sends its KV over to a decode replica
    of ``per_decode``: inside a node when both fit in one, else the network per GPU (as slow as
    the node's link where that is slower)."""
    topo = topology_for(gpu, gpus_per_node=job.gpus_per_node, inter_node=job.inter_node)
    span = per_prefill + per_decode
    if span <= topo.gpus_per_node:
        return topo.within(span)
    inter = topo.inter
    return Link(name=inter.name, kind=inter.kind,
                bandwidth=min(inter.bandwidth, topo.node_link.bandwidth))


class Disaggregated:
    """``prefill_replicas`` copies of ``prefill`` and ``decode_replicas`` copies of ``decode``
    (two :class:`Deployment` objects of one model, GPU and engine; their own ``replicas`` are
    not read)."""

    def __init__(self, prefill: Deployment, decode: Deployment, *, prefill_replicas: int = 1,
                 decode_replicas: int = 1) -> None:
        if prefill.sched.engine != decode.sched.engine:
            raise InputError("a disaggregated deployment runs one engine on both pools",
                             field="engine")
        self.pre, self.dec = prefill, decode
        self.P, self.D = prefill_replicas, decode_replicas
        self.per_p = prefill.gpus // prefill.replicas
        self.per_d = decode.gpus // decode.replicas
        self.gpus = self.P * self.per_p + self.D * self.per_d
        self.link = kv_link(prefill.gpu, prefill.job, self.per_p, self.per_d)
        self.shard_bytes_per_token = max(prefill.budget.kv_bytes_per_token,
                                         decode.budget.kv_bytes_per_token)

    def transfer_s(self, prompt_tokens: int) -> float:
        """Seconds to send one prompt's KV cache from the prefill to the decode replica."""
        return self.shard_bytes_per_token * prompt_tokens / self.link.bandwidth

    def kv_bytes(self, prompt_tokens: int) -> int:
        """Bytes of one prompt's KV cache moved in all (every GPU of the prefill replica)."""
        return self.pre.budget.kv_bytes_per_token * self.per_p * prompt_tokens

    def prefill_pass(self, wl: Workload, prefix_hit: float = 0.0, cache: dict | None = None):
        """(first-token time, scheduled time) of every request on the prefill pool; ``cache``
        keeps them by (layout, replicas) for a search."""
        key = (id(self.pre), self.P)
        if cache is not None and key in cache:
            return cache[key]
        n, P = len(wl.requests), self.P
        first, sched = [0.0] * n, [0.0] * n
        for i in range(min(P, n)):
            share = wl.requests[i::P]
            one = Workload(requests=tuple(Request(r.arrival_s, r.input_tokens, 1, r.prefix_id,
                                                  r.prefix_tokens) for r in share),
                           rate=None if wl.rate is None else wl.rate / P)
            tr = simulate(one, self.pre.cost, self.pre.sched, self.pre.kv_tokens,
                          prefix_hit=prefix_hit)
            for j, f, s in zip(range(i, n, P), tr.first_token_s, tr.scheduled_s):
                first[j], sched[j] = f, s
        out = (first, sched)
        if cache is not None:
            cache[key] = out
        return out

    def _checked(self, wl: Workload) -> None:
        if wl.concurrency is not None:
            raise InputError(f"a disaggregated deployment is simulated open loop: give "
                             f"{opt('rate')} or {opt('workload')}, not {opt('concurrency')}",
                             field="concurrency")
        self.pre._check(wl)
        self.dec._check(wl)

    def run(self, wl: Workload, *, slo: SLO | None = None, price: float | None = None,
            prefix_hit: float = 0.0, cache: dict | None = None) -> CapacityResult:
        """Simulate ``wl`` on both pools; the result's ``disaggregated`` note and
        :meth:`info` say what each pool did."""
        self._checked(wl)
        reqs = wl.requests
        first, sched = self.prefill_pass(wl, prefix_hit, cache)
        xfer = [self.transfer_s(r.input_tokens) for r in reqs]
        ready = [f + x for f, x in zip(first, xfer)]
        order = sorted(range(len(reqs)), key=ready.__getitem__)
        mine = order[::self.D]
        dec_idx = [j for j in mine if reqs[j].output_tokens > 1]
        done = {j: ready[j] for j in mine}
        tr_d = None
        if dec_idx:
            dwl = Workload(requests=tuple(Request(ready[j], reqs[j].input_tokens,
                                                  reqs[j].output_tokens) for j in dec_idx),
                           rate=None if wl.rate is None else wl.rate / self.D)
            tr_d = simulate(dwl, self.dec.cost, self.dec.sched, self.dec.kv_tokens,
                            prefilled=True)
            for j, d in zip(dec_idx, tr_d.done_s):
                done[j] = d
        tr = _combined(reqs, mine, ready, sched, done, tr_d,
                       self.dec.kv_tokens // self.dec.block_size)
        d, b = self.dec, self.dec.budget
        kv = {"kv_tokens": d.kv_tokens, "block_size": d.block_size, "kv_blocks": b.kv_blocks,
              "max_model_len": d.max_len, "max_concurrency": b.max_concurrency,
              "available_kv_bytes": b.available_kv_bytes, "engine_version": b.version,
              "parts": dict(b.parts)}
        xs = [xfer[j] for j in mine]
        pre_ttft = [first[j] - reqs[j].arrival_s for j in mine]
        self.last = {"prefill": self._pool(self.pre, self.P, self.per_p, pre_ttft),
                     "decode": self._pool(self.dec, self.D, self.per_d, None),
                     "gpus": self.gpus, "link": self.link.to_dict(),
                     "transfer_s": stats_of(xs).to_dict(),
                     "kv_bytes_per_request_mean": sum(self.kv_bytes(reqs[j].input_tokens)
                                                      for j in mine) / len(mine),
                     "kv_shard_bytes_per_token": self.shard_bytes_per_token,
                     "ttft_convention": TTFT_CONVENTION}
        lay = {"tp": d.job.tp, "pp": d.job.pp, "ep": d.job.ep, "replicas": self.D,
               "gpus": self.gpus, "prefill_tp": self.pre.job.tp, "prefill_pp": self.pre.job.pp,
               "prefill_replicas": self.P}
        notes = (f"disaggregated: {self.P} prefill replica(s) of TP {self.pre.job.tp} x PP "
                 f"{self.pre.job.pp}, {self.D} decode replica(s) of TP {d.job.tp} x PP "
                 f"{d.job.pp}; KV sent over {self.link.name} "
                 f"({self.link.bandwidth / 1e9:.0f} GB/s per GPU), mean "
                 f"{stats_of(xs).mean * 1e3:.3g} ms a request",
                 TTFT_CONVENTION,
                 f"decode KV cache per replica: {d.kv_tokens} tokens; the first decode replica "
                 "simulated on its share, every prefill replica on its round-robin share")
        power = power_clock_fraction(d.gpu, d.job.power_limit_w)[1]
        notes += (power,) if power else ()  # both pools' steps ran at the limit's clock
        return summarize(tr, replicas=self.D, gpus=self.gpus, slo=slo, price=price,
                         model=d.name, gpu=d.gpu.name, engine=d.sched.engine,
                         engine_version=d.sched.version, layout=lay, workload=wl.to_dict(),
                         scheduler=d.sched.to_dict(), kv=kv, notes=notes)

    @staticmethod
    def _pool(dep: Deployment, replicas: int, per: int, ttft) -> dict:
        j, s = dep.job, dep.sched
        out = {"tp": j.tp, "pp": j.pp, "ep": j.ep, "replicas": replicas,
               "gpus": replicas * per, "kv_dtype": j.kv_dtype, "kv_tokens": dep.kv_tokens,
               "max_num_seqs": s.max_num_seqs,
               "max_num_batched_tokens": s.max_num_batched_tokens}
        if ttft is not None:
            out["prefill_ttft_s"] = stats_of(ttft).to_dict()
        return out


def _combined(reqs, mine, ready, sched, done, tr_d, kv_blocks: int) -> SimTrace:
    """One decode replica's requests as one trace: arrival and queue from the prefill pool,
    the first token when its KV reached the decode replica, the rest from the decode pool."""
    arr = tuple(reqs[j].arrival_s for j in mine)
    fin = tuple(done[j] for j in mine)
    start = min(arr)
    return SimTrace(
        arrival_s=arr, first_token_s=tuple(ready[j] for j in mine), done_s=fin,
        scheduled_s=tuple(sched[j] for j in mine),
        input_tokens=tuple(reqs[j].input_tokens for j in mine),
        output_tokens=tuple(reqs[j].output_tokens for j in mine),
        itl=tr_d.itl if tr_d else (), steps=tr_d.steps if tr_d else 0,
        preemptions=tr_d.preemptions if tr_d else 0,
        in_system_s=sum(d - a for d, a in zip(fin, arr)),  # Little: the sojourns' sum
        running_s=tr_d.running_s if tr_d else 0.0, waiting_s=tr_d.waiting_s if tr_d else 0.0,
        kv_used_s=tr_d.kv_used_s if tr_d else 0.0,
        kv_peak_blocks=tr_d.kv_peak_blocks if tr_d else 0,
        kv_blocks=tr_d.kv_blocks if tr_d else kv_blocks,
        span_s=max(fin) - start, start_s=start)


def _prefill_ok(dis: Disaggregated, wl: Workload, slo: SLO, prefix_hit: float,
                cache: dict) -> tuple[bool, float]:
    """Whether the prefill pool (with this pair's transfer) meets the TTFT target -- ``slo``'s
    TTFT, else its E2E (TTFT is part of it), else keeping up: the p99 queue no longer than the
    median prefill -- and the TTFT percentile reached."""
    first, sched = dis.prefill_pass(wl, prefix_hit, cache)
    reqs = wl.requests
    ttft = sorted(f - r.arrival_s + dis.transfer_s(r.input_tokens) for f, r in zip(first, reqs))
    at = stats_of(ttft).at(slo.percentile)
    target = slo.ttft_s if slo.ttft_s is not None else slo.e2e_s
    if target is not None:
        return at <= target, at
    queue = stats_of([s - r.arrival_s for s, r in zip(sched, reqs)]).p99
    work = stats_of([f - s for f, s in zip(first, sched)]).p50
    return queue <= work, at


def _best_prefill(layouts, dec: Deployment, wl: Workload, slo: SLO, max_gpus: int,
                  prefix_hit: float, cache: dict, progress):
    """(prefill deployment, its fewest replicas meeting the TTFT target, GPUs per replica) of
    the prefill layout needing the fewest GPUs beside ``dec``; None when none does."""
    per_d = dec.gpus // dec.replicas
    best_pre = None
    for _, _, pre in layouts:
        per_p = pre.gpus // pre.replicas
        lo, hi, got = 1, min((max_gpus - per_d) // per_p, wl.most_replicas), None
        while lo <= hi:
            mid = (lo + hi) // 2
            ok, _ = _prefill_ok(Disaggregated(pre, dec, prefill_replicas=mid), wl, slo,
                                prefix_hit, cache)
            if progress:
                progress()
            if ok:
                got, hi = mid, mid - 1
            else:
                lo = mid + 1
        if got is not None and (best_pre is None or got * per_p < best_pre[1] * best_pre[2]):
            best_pre = (pre, got, per_p)
    return best_pre


def search_disaggregated(layouts, wl: Workload, slo: SLO, *, max_gpus: int,
                         price: float | None = None, prefix_hit: float = 0.0, progress=None):
    """The split (prefill replicas x their layout, decode replicas x theirs) meeting ``slo``
    with the fewest GPUs (with ``price``: the lowest cost per million output tokens), and every
    split tried (dicts). ``layouts`` are :func:`._search._deployments`' (tp, pp, deployment).

    Bounded: for each (prefill layout, decode layout) pair the fewest prefill replicas meeting
    the TTFT target (bisection; each prefill pool simulated once and reused across pairs); for
    each decode layout, the pair whose prefill pool has the fewest GPUs, then the fewest decode
    replicas meeting the whole SLO (bisection)."""
    cache: dict = {}
    tried: list[dict] = []
    results = []
    for _, _, dec in layouts:
        per_d = dec.gpus // dec.replicas
        best_pre = _best_prefill(layouts, dec, wl, slo, max_gpus, prefix_hit, cache, progress)
        if best_pre is None:
            continue
        pre, P, per_p = best_pre
        lo, hi, got, last = 1, min((max_gpus - P * per_p) // per_d, wl.most_replicas), None, None
        while lo <= hi:
            mid = (lo + hi) // 2
            dis = Disaggregated(pre, dec, prefill_replicas=P, decode_replicas=mid)
            r = dis.run(wl, slo=slo, price=price, prefix_hit=prefix_hit, cache=cache)
            if progress:
                progress()
            last = (dis, r, dict(dis.last))
            if r.meets_slo:
                got, hi = last, mid - 1
            else:
                lo = mid + 1
        pick = got or last
        if pick is None:
            continue
        dis, r, info = pick
        results.append(pick)
        tried.append({"prefill_tp": pre.job.tp, "prefill_pp": pre.job.pp, "prefill_replicas": P,
                      "decode_tp": dec.job.tp, "decode_pp": dec.job.pp,
                      "decode_replicas": dis.D, "gpus": dis.gpus, "meets_slo": r.meets_slo,
                      "ttft_p99_s": r.ttft_s.p99, "tpot_p99_s": r.tpot_s.p99,
                      "cost_per_m_output_tokens": r.cost_per_m_output_tokens})
    ok = [p for p in results if p[1].meets_slo]
    if not ok:
        if not results:
            raise InputError(f"no disaggregated split of up to {max_gpus} GPUs has a prefill "
                             f"pool meeting the TTFT target: relax {opt('slo_ttft')} or give "
                             f"more {opt('max_gpus')}", field="max_gpus")
        best = min(results, key=lambda p: (p[1].ttft_s.p99, p[1].tpot_s.p99))[1]
        raise InputError(
            f"no disaggregated split of up to {max_gpus} GPUs meets the SLO; the best reached "
            f"is p{slo.percentile:g} TTFT {best.ttft_s.at(slo.percentile):.3g} s, TPOT "
            f"{best.tpot_s.at(slo.percentile) * 1e3:.3g} ms: relax the SLO, lower the rate or "
            f"give more {opt('max_gpus')}", field="slo_ttft")
    if price is not None:
        key = lambda p: (p[1].cost_per_m_output_tokens, p[1].gpus)  # noqa: E731
    else:
        key = lambda p: (p[1].gpus, p[1].ttft_s.p99)  # noqa: E731
    return min(ok, key=key), tried
