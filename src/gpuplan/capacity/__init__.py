"""Serving under load (issue 29): TTFT, TPOT, ITL and E2E percentiles of a model served by vLLM,
SGLang or TensorRT-LLM at a request rate or concurrency, from a step-by-step simulation of the
engine's scheduler timed by gpuplan's speed model."""

from __future__ import annotations

import sys
import types

from ..job import Job, int_arg, job_arg
from ._disagg import Disaggregated
from ._engines import SCHEDULERS, SchedulerDefaults, scheduler_for
from ._plan import Deployment, max_rate, serving_engine
from ._result import SLO, CapacityResult, Stats
from ._workload import (SYNTHETIC_OPTIONS, WORKLOAD_DEFAULTS, Dist, Workload, check_load_options,
                        make_workload, parse_dist, read_workload)

__all__ = ["capacity", "CapacityResult", "Stats", "SLO", "Deployment", "max_rate", "Workload",
           "Dist", "make_workload", "read_workload", "parse_dist", "check_load_options",
           "SYNTHETIC_OPTIONS", "WORKLOAD_DEFAULTS", "SchedulerDefaults", "SCHEDULERS",
           "scheduler_for", "Disaggregated"]


def capacity(model, gpu, *, job=None, engine: str | None = None, engine_version: str | None = None,
             rate: float | None = None, concurrency: int | None = None,
             input: int = WORKLOAD_DEFAULTS["input"], output: int = WORKLOAD_DEFAULTS["output"],
             input_dist: str | None = None, output_dist: str | None = None,
             arrivals: str = WORKLOAD_DEFAULTS["arrivals"],
             requests: int = WORKLOAD_DEFAULTS["requests"], seed: int = WORKLOAD_DEFAULTS["seed"],
             workload: Workload | None = None, replicas: int = 1,
             max_num_seqs: int | None = None, max_num_batched_tokens: int | None = None,
             max_model_len: int | None = None, gpu_memory_utilization: float | None = None,
             mem_fraction_static: float | None = None, prefix_hit: float = 0.0,
             slo: SLO | None = None, price: float | None = None) -> CapacityResult:
    """Simulate ``model`` served on ``gpu`` (a :class:`~gpuplan.GPU`) by ``engine`` under
    ``job``'s layout (tp, pp, ep, weight format, kv_dtype; default one GPU) times ``replicas``,
    at ``rate`` requests/s or ``concurrency`` clients, with fixed ``input``/``output`` lengths,
    their distributions, or a ``workload``: a workload carries its own requests, lengths and
    arrivals, and ``rate``, ``concurrency``, the lengths, ``requests``, ``seed`` and
    ``arrivals`` are then not read (``gpuplan capacity`` refuses them beside ``--workload``).
    ``engine``: default the job's serving engine, else vLLM (as ``gpuplan capacity`` and
    ``POST /api/capacity`` choose it). ``prefix_hit``: the share of each prompt the prefix
    cache serves, in [0, 1] (1: every prompt, as a published run whose server cached them
    all)."""
    if job is None:
        job = Job(model="x", mode="infer", engine=engine or "vllm")
    engine = serving_engine(job_arg(job), engine)
    if workload is None:  # a dist given empty is refused, not replaced by the length (qa43)
        wl_in = parse_dist(str(input) if input_dist is None else input_dist, what="input")
        wl_out = parse_dist(str(output) if output_dist is None else output_dist, what="output")
        workload = make_workload(input=wl_in, output=wl_out, requests=requests, rate=rate,
                                 concurrency=concurrency, arrivals=arrivals,
                                 seed=int_arg(seed, "seed", "int", low=0, high=2**31 - 1))
    dep = Deployment(model, gpu, job, engine=engine, engine_version=engine_version,
                     replicas=replicas, max_num_seqs=max_num_seqs,
                     max_num_batched_tokens=max_num_batched_tokens, max_model_len=max_model_len,
                     gpu_memory_utilization=gpu_memory_utilization,
                     mem_fraction_static=mem_fraction_static)
    return dep.run(workload, slo=slo, price=price, prefix_hit=prefix_hit)


class _CallableModule(types.ModuleType):
    """``gpuplan.capacity`` is this package, and calling it runs :func:`capacity`."""

    def __call__(self, *args, **kwargs) -> CapacityResult:
        return capacity(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
