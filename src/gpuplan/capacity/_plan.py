"""One deployment (a replica's layout under an engine, times ``replicas``) prepared once -- its
scheduler, KV capacity and step-cost cache -- and simulated at a workload; ``max_rate``: the
highest request rate it serves within an SLO, by bisection on simulated rates."""

from __future__ import annotations

from dataclasses import replace

from ..compute.device import power_clock_fraction
from ..engines.budget import DEFAULT_VERSIONS, SERVING_ENGINES
from ..engines.profiles import get_engine
from ..errors import InputError, opt
from ..hardware import GPU
from ..job import Job, gpu_arg, int_arg, job_arg, model_arg, number_arg
from ._cost import StepCost
from ._engines import SchedulerDefaults, scheduler_for
from ._kv import kv_capacity
from ._result import SLO, CapacityResult, summarize
from ._sim import simulate
from ._workload import Request, Workload, make_workload

__all__ = ["Deployment", "max_rate", "sweep", "knee", "SWEEP_FACTORS", "serving_engine"]


def serving_engine(job: Job, engine: str | None = None) -> str:
    """The engine a deployment of ``job`` runs: ``engine`` when given, else the job's own where
    it is a serving engine, else vLLM (the CLI's and the web's rule, one home). A job naming one
    serving engine and ``engine`` another is refused: it asked for two deployments."""
    own = job.engine if job.engine in SERVING_ENGINES else None
    if engine is None:
        return own or "vllm"
    if own is not None and own != engine:
        raise InputError(f"{opt('engine')} {engine} for a job of engine {own}: name one "
                         f"(the job's is {own})", field="engine", value=engine)
    return engine


class Deployment:
    """``replicas`` copies of ``job``'s layout (tp x pp GPUs each, its experts spread over
    them: vLLM's --enable-expert-parallel and SGLang's --ep-size place experts on a replica's
    own ranks) under ``engine``."""

    def __init__(self, model, gpu: GPU, job: Job, *, engine: str | None = None,
                 engine_version: str | None = None, replicas: int = 1,
                 max_num_seqs: int | None = None, max_num_batched_tokens: int | None = None,
                 max_model_len: int | None = None, gpu_memory_utilization: float | None = None,
                 mem_fraction_static: float | None = None) -> None:
        # the library's own arguments checked where they enter, as every public function's are
        # (docs/bounds.md "The API"): a str model or GPU, a float replica count (qa43)
        model, gpu, job = model_arg(model), gpu_arg(gpu), job_arg(job)
        replicas = int_arg(replicas, "replicas", "gpus")
        engine = serving_engine(job, engine)
        # only a version left out takes the default: an empty one is refused as malformed
        version = DEFAULT_VERSIONS.get(engine) if engine_version is None else engine_version
        sched = scheduler_for(engine, version)
        arch = getattr(model, "architecture", None)
        ctx = getattr(arch, "max_position_embeddings", None) or 8192
        self.max_len = max_model_len or ctx
        # a replica is one engine instance, one scheduler: its GPUs are tp x pp, the layout
        # `fit --gpus tp*pp` plans and the export launches (tp x pp x ep counted a data-parallel
        # pair of ranks for --tp 2 --ep 2 and simulated only one of them; onetruth43)
        per = job.tp * job.pp
        self.job = job.with_(mode="infer", engine=engine, gpus=per)
        knobs = {k: v for k, v in dict(
            engine_version=version, max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            gpu_memory_utilization=gpu_memory_utilization,
            mem_fraction_static=mem_fraction_static).items() if v is not None}
        # one budget for fit and capacity: the engine's batch budgets as the budget resolves them
        # (the user's, else the version's defaults on this card) run the scheduler too
        self.budget = kv_capacity(model, gpu, self.job, self.max_len, **knobs)
        b = self.budget
        sched = replace(sched, version=b.version, block_size=b.block_size,
                        max_num_seqs=b.max_num_seqs,
                        max_num_batched_tokens=b.max_num_batched_tokens,
                        memory_utilization=b.fraction)
        host = get_engine(engine).serving_host
        if sched.async_scheduling and job.pp > 1 and host is not None and not host.core_overlap_pp:
            # vLLM 0.14.0 leaves async scheduling off under pipeline parallelism (its notes):
            # the profile's rule, which speed's step reads too (ServingHost.overlaps_core)
            sched = replace(sched, async_scheduling=False, run_ahead=False)
        self.model, self.gpu, self.sched, self.replicas = model, gpu, sched, replicas
        self.gpus = per * replicas
        self.kv_tokens, self.block_size = b.kv_tokens, b.block_size
        self.cost = StepCost(model, gpu, self.job, max_len=self.max_len,
                             async_scheduling=sched.async_scheduling if engine == "vllm" else None)
        self.name = getattr(model, "name", str(model))

    @property
    def layout(self) -> dict:
        j = self.job
        return {"tp": j.tp, "pp": j.pp, "ep": j.ep, "replicas": self.replicas,
                "gpus": self.gpus, "kv_dtype": j.kv_dtype}

    def _check(self, wl: Workload) -> None:
        s = self.sched
        for r in wl.requests:
            if r.input_tokens + r.output_tokens > self.max_len:
                raise InputError(f"a request of {r.input_tokens} + {r.output_tokens} tokens is "
                                 f"longer than {opt('max_model_len')} {self.max_len}; give a larger "
                                 f"{opt('max_model_len')} or shorter requests", field="max_model_len")
            if not s.chunked_prefill and r.input_tokens > s.max_num_batched_tokens:
                raise InputError(f"a prompt of {r.input_tokens} tokens exceeds {s.engine}'s "
                                 f"max_num_tokens {s.max_num_batched_tokens} without chunked "
                                 f"prefill; give a larger {opt('max_num_batched_tokens')}",
                                 field="max_num_batched_tokens")

    def run(self, wl: Workload, *, slo: SLO | None = None, price: float | None = None,
            prefix_hit: float = 0.0) -> CapacityResult:
        """Simulate ``wl`` arriving at the whole deployment: each replica gets every
        ``replicas``-th request (round robin)."""
        if not isinstance(wl, Workload):
            raise InputError(f"workload {wl!r:.60}: expected a gpuplan Workload (make_workload or "
                             "read_workload builds one)", field="workload")
        if slo is not None and not isinstance(slo, SLO):
            raise InputError(f"slo {slo!r:.60}: expected a gpuplan SLO or None",
                             field="slo")
        price = number_arg(price, "price", "price", optional=True)
        # [0, 1]: a published row's every prompt served from the cache is 1.0 (the CLI's
        # --prefix-hit stops below 1)
        if isinstance(prefix_hit, bool) or not isinstance(prefix_hit, (int, float)) or \
                not 0 <= prefix_hit <= 1:
            raise InputError(f"prefix_hit {prefix_hit!r:.40}: expected the share of each prompt "
                             "the prefix cache serves, a number in [0, 1]", field="prefix_hit")
        self._check(wl)
        one = _share(wl, self.replicas)
        tr = simulate(one, self.cost, self.sched, self.kv_tokens, prefix_hit=prefix_hit)
        notes = (f"KV cache per replica: {self.kv_tokens} tokens in blocks of "
                 f"{self.block_size}; max_model_len {self.max_len}",
                 f"{self.sched.engine} {self.sched.version}: max_num_seqs "
                 f"{self.sched.max_num_seqs}, max_num_batched_tokens "
                 f"{self.sched.max_num_batched_tokens}, "
                 f"{'mixed prefill+decode steps' if self.sched.mixed else 'prefill-first'}",
                 "each replica simulated alone on its round-robin share of the requests")
        power = power_clock_fraction(self.gpu, self.job.power_limit_w)[1]
        notes += (power,) if power else ()  # the steps ran at the clock of the limit
        b = self.budget
        kv = {"kv_tokens": self.kv_tokens, "block_size": self.block_size,
              "kv_blocks": b.kv_blocks, "max_model_len": self.max_len,
              "max_concurrency": b.max_concurrency, "available_kv_bytes": b.available_kv_bytes,
              "engine_version": b.version, "parts": dict(b.parts)}
        return summarize(tr, replicas=self.replicas, gpus=self.gpus, slo=slo, price=price,
                         model=self.name, gpu=self.gpu.name, engine=self.sched.engine,
                         engine_version=self.sched.version, layout=self.layout,
                         workload=wl.to_dict(), scheduler=self.sched.to_dict(), kv=kv,
                         notes=notes)


def _share(wl: Workload, replicas: int) -> Workload:
    if replicas == 1:
        return wl
    if wl.concurrency is not None:
        c = max(1, wl.concurrency // replicas)
        return replace(wl, requests=wl.requests[::replicas], concurrency=c)
    reqs = wl.requests[::replicas]
    return replace(wl, requests=tuple(Request(r.arrival_s, r.input_tokens, r.output_tokens,
                                              r.prefix_id, r.prefix_tokens) for r in reqs),
                   rate=None if wl.rate is None else wl.rate / replicas)


def max_rate(dep: Deployment, slo: SLO, *, make, lo: float = 0.01, iters: int = 12,
             progress=None) -> tuple[float, CapacityResult | None]:
    """The highest rate (requests/s, whole deployment) whose simulation meets ``slo``;
    ``make(rate)`` builds the workload at a rate. (0, None) when even ``lo`` misses it."""
    first = dep.run(make(lo), slo=slo)
    if not first.meets_slo:
        return 0.0, first
    hi = lo * 2
    best = first
    while True:  # grow until the SLO breaks
        r = dep.run(make(hi), slo=slo)
        if progress:
            progress()
        if not r.meets_slo:
            break
        lo, best = hi, r
        hi *= 2
        if hi > 1e6:
            return lo, best
    for _ in range(iters):
        mid = (lo + hi) / 2
        r = dep.run(make(mid), slo=slo)
        if progress:
            progress()
        if r.meets_slo:
            lo, best = mid, r
        else:
            hi = mid
    return lo, best


#: The loads a sweep simulates, as multiples of the given one (``gpuplan capacity --plot``).
SWEEP_FACTORS = (0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0)


def sweep(dep: Deployment, make, base: float, *, slo: SLO | None = None, closed: bool = False,
          prefix_hit: float = 0.0, factors=SWEEP_FACTORS) -> list[tuple[float, CapacityResult]]:
    """``dep`` at each of ``factors`` times the load ``base``: a rate (requests/s), or with
    ``closed`` a concurrency (clients, rounded, at least 1; each value once). ``make(x)`` builds
    the workload at load x. Returns (load, result) in increasing load."""
    loads = sorted({max(1, round(base * f)) for f in factors}) if closed else \
        [base * f for f in factors]
    return [(x, dep.run(make(x), slo=slo, prefix_hit=prefix_hit)) for x in loads]


def knee(rows) -> int | None:
    """The index of the first point of a sweep whose p99 TTFT exceeds three times the lowest
    load's (where queueing starts to dominate), None when none does."""
    if not rows:
        return None
    base = rows[0][1].ttft_s.p99
    return next((i for i, (_, r) in enumerate(rows) if r.ttft_s.p99 > 3 * base), None)


def sweep_dict(rows, *, closed: bool) -> dict:
    """A sweep as JSON: each point's load, measured throughput, latency stats, SLO verdict."""
    k = knee(rows)
    pts = [{"load": x, "rate": None if closed else x, "concurrency": x if closed else None,
            "requests_per_s": r.throughput["requests_per_s"],
            "output_tokens_per_s": r.throughput["output_tokens_per_s"],
            "ttft_s": r.ttft_s.to_dict(), "tpot_s": r.tpot_s.to_dict(),
            "itl_s": r.itl_s.to_dict(), "e2e_s": r.e2e_s.to_dict(),
            "meets_slo": r.meets_slo} for x, r in rows]
    return {"load": "concurrency" if closed else "rate", "points": pts, "knee": k,
            "knee_requests_per_s": None if k is None else pts[k]["requests_per_s"]}


def synthetic(rate: float, **kw) -> Workload:
    return make_workload(rate=rate, **kw)
