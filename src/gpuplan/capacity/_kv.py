"""The KV cache an engine gets on one replica -- the one seam between the capacity simulation and
the engine memory budget. It is :func:`gpuplan.memory.kv_budget`, the figures `gpuplan fit --mode
infer --engine ENGINE` shows (weights per rank as loaded, the profile run's activation peak, the
CUDA-graph pool, the engine's memory fraction at its version): one budget for both commands."""

from __future__ import annotations

from ..errors import InputError, opt
from ..hardware import GPU
from ..job import Job
from ..memory.budget import KVBudget, kv_budget

__all__ = ["kv_capacity"]


def kv_capacity(model, gpu: GPU, job: Job, max_len: int, **knobs) -> KVBudget:
    """The start-up KV budget of ``job.engine`` serving ``model`` on ``gpu`` under ``job``'s
    layout at ``max_len`` tokens per request; ``knobs`` are :func:`kv_budget`'s keywords the
    user set (utilization, fraction, version, batch budgets). Raises when the weights and the
    profile run leave no room for one request."""
    b = kv_budget(model, gpu, job, max_model_len=max_len, **knobs)
    if not b.engine_starts:  # the engine's own start-up check: fit's line (KVBudget.refusal)
        raise InputError(f"{job.tp * job.pp} GPU(s) of {gpu.name}: {b.refusal}", field="tp",
                         value=job.tp)
    if b.kv_tokens < max_len:
        raise InputError(
            f"the KV cache of {job.tp * job.pp} GPU(s) of {gpu.name} holds {max(b.kv_tokens, 0)}"
            f" tokens, fewer than one request's {max_len} (weights "
            f"{b.parts['weights'] / 2**30:.1f} GiB per GPU): give more {opt('tp')}, a "
            f"smaller {opt('max_model_len')} or a lower-bit {opt('precision')}", field="tp", value=job.tp)
    return b
