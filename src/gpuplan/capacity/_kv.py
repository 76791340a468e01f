"""The KV cache an engine gets on one replica: tokens and the block size -- the one seam between
the capacity simulation and the engine memory budget (``gpuplan.memory.budget``, which models the
profile run, the CUDA-graph pool and the version changes in full).

Until that lands, :func:`kv_capacity` computes the budget itself from gpuplan's serving memory
plan: the weights per rank as loaded, the activation peak of a ``max_num_batched_tokens`` step
(vLLM's profile run), and the engine's share of memory (vLLM ``gpu_memory_utilization`` of the
whole GPU; SGLang ``mem_fraction_static`` for weights + KV; TensorRT-LLM
``free_gpu_memory_fraction`` of what is free after the weights and activations)."""

from __future__ import annotations

from ..errors import InputError
from ..hardware import GPU
from ..job import Job
from ..memory import infer_memory
from ._engines import SchedulerDefaults

__all__ = ["kv_capacity"]


def kv_capacity(model, gpu: GPU, job: Job, sched: SchedulerDefaults,
                max_len: int) -> tuple[int, int]:
    """(KV tokens one replica holds, tokens per block) for ``model`` served by ``sched``'s engine
    on ``gpu`` under ``job``'s layout (tp, pp, weight format, kv_dtype) at ``max_len`` tokens
    per request. Raises when the weights and the profile run leave no room for one request."""
    one = job.with_(batch=1, seq=max_len, context=max_len)
    mem = infer_memory(model, one)
    kv_per_token = mem.kv_cache_bytes / max_len
    probe = min(sched.max_num_batched_tokens, max_len)
    act = infer_memory(model, job.with_(batch=1, seq=probe, context=probe)).activations_bytes
    total = gpu.memory_bytes
    u = sched.memory_utilization
    if sched.engine == "vllm":
        budget = u * total - mem.weights_bytes - act
    elif sched.engine == "sglang":
        budget = u * total - mem.weights_bytes
    else:
        budget = u * (total - mem.weights_bytes - act)
    tokens = int(budget // kv_per_token) if kv_per_token > 0 else 0
    bs = sched.block_size
    tokens -= tokens % bs
    if tokens < max_len:
        raise InputError(
            f"the KV cache of {job.tp * job.pp} GPU(s) of {gpu.name} holds {max(tokens, 0)} "
            f"tokens, fewer than one request's {max_len} (weights {mem.weights_bytes / 2**30:.1f}"
            f" GiB per GPU): give more --tp, a smaller --max-model-len or a lower-bit "
            "--precision", field="tp", value=job.tp)
    return tokens, bs
