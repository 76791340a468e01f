"""Each serving engine's scheduler, as data: its batch budgets, chunked prefill, block size,
preemption and prefix caching by engine and version, with the source each default was read from.

The simulation (:mod:`._sim`) reads only these fields, so where vLLM, SGLang and TensorRT-LLM
schedule differently the difference is a value here, stated, not a branch hidden in the loop:

* ``mixed``: vLLM (V1) and TensorRT-LLM (in-flight batching) put prefill chunks and decodes in
  one step; SGLang runs a prefill batch *or* a decode batch (prefill first), unless
  ``--enable-mixed-chunk``.
* ``admission``: ``incremental`` (vLLM: a request is admitted when blocks for the tokens it is
  scheduled now are free; later blocks are taken as it grows, and a running request is preempted
  by recompute when none is free), ``reserve`` (TensorRT-LLM's GUARANTEED_NO_EVICT capacity
  scheduler: blocks for the prompt and the whole output are reserved at admission, so nothing is
  ever evicted), ``ratio`` (SGLang: the prompt plus ``new_token_ratio`` of every running
  request's remaining output must fit; it retracts decodes when the pool still runs out).
"""

from __future__ import annotations

from .._record import record
from ..engines.budget import version_key
from ..errors import InputError, closest, opt, shown

__all__ = ["SchedulerDefaults", "SCHEDULERS", "scheduler_for", "ENGINE_VERSIONS"]


@record
class SchedulerDefaults:
    """One engine version's scheduler as the simulation runs it."""

    engine: str
    version: str
    max_num_seqs: int
    """Most requests running at once (vLLM ``max_num_seqs``, SGLang ``max_running_requests``,
    TensorRT-LLM ``max_batch_size``)."""
    max_num_batched_tokens: int
    """Most tokens one step computes (vLLM ``max_num_batched_tokens``, SGLang
    ``chunked_prefill_size``, TensorRT-LLM ``max_num_tokens``)."""
    chunked_prefill: bool
    mixed: bool
    """Prefill chunks and decodes share a step."""
    block_size: int
    """Tokens per KV block (vLLM ``block_size``, SGLang ``page_size``, TensorRT-LLM
    ``tokens_per_block``)."""
    preemption: str
    """``recompute`` (a preempted request frees its blocks and is prefilled again) or ``none``."""
    admission: str
    """``incremental``, ``reserve`` or ``ratio`` (module docstring)."""
    prefix_caching: bool
    memory_utilization: float
    """vLLM ``gpu_memory_utilization`` (of the whole GPU), SGLang ``mem_fraction_static``,
    TensorRT-LLM ``free_gpu_memory_fraction`` (of what is free after the weights)."""
    new_token_ratio: float = 0.0
    """SGLang: the share of a running request's remaining output held back at admission."""
    run_ahead: bool = False
    """The scheduler forms the next step while the GPU runs this one (SGLang's overlap
    scheduler, on unless ``--disable-overlap-schedule``): the batch that starts when step ``k``
    ends was formed when step ``k`` started, so a request that arrives during step ``k`` waits
    for step ``k + 1``'s batch, one step later than under a loop that forms each batch after
    the last one ends. No delay when nothing runs (the idle loop forms a batch at once)."""
    async_scheduling: bool = False
    """vLLM's async scheduling (on by default from 0.14.0, unless pipeline parallel): the
    EngineCore schedules step k+1 and prepares its inputs while the GPU runs step k, so its own
    host work per step (:attr:`gpuplan.engines.profiles.ServingHost.core_fixed_s`) runs beside
    the step instead of between steps (:class:`._cost.StepCost`), and the scheduler runs one
    step ahead (``run_ahead``)."""
    preempt_keeps_cache: bool = False
    """A request preempted by recompute leaves its full blocks in the prefix cache (vLLM V1:
    ``KVCacheManager.free`` returns them to the free queue's tail, the request's last block
    first, and ``get_computed_blocks`` finds them again by hash when the request is next
    scheduled), so it re-prefills only what was evicted from the queue's head meanwhile, its
    tail blocks first (:data:`_VLLM_PREEMPT`). False: every preempted token is recomputed."""
    high_memory_seqs: int | None = None
    """vLLM >= 0.9.2: ``max_num_seqs`` on a GPU of >= 70 GiB that is not an A100."""
    high_memory_tokens: int | None = None
    """vLLM >= 0.9.2: ``max_num_batched_tokens`` on such a GPU (API server)."""
    sources: tuple[str, ...] = ()

    def on_gpu(self, memory_bytes: int, gpu_name: str) -> "SchedulerDefaults":
        """The defaults on a given GPU (vLLM picks larger budgets on >= 70 GiB, non-A100)."""
        from dataclasses import replace

        big = memory_bytes >= 70 * 2**30 and "a100" not in gpu_name.lower()
        if big and self.high_memory_seqs is not None:
            return replace(self, max_num_seqs=self.high_memory_seqs,
                           max_num_batched_tokens=self.high_memory_tokens or
                           self.max_num_batched_tokens)
        return self

    def to_dict(self) -> dict:
        return {"engine": self.engine, "version": self.version,
                "max_num_seqs": self.max_num_seqs,
                "max_num_batched_tokens": self.max_num_batched_tokens,
                "chunked_prefill": self.chunked_prefill, "mixed": self.mixed,
                "block_size": self.block_size, "preemption": self.preemption,
                "admission": self.admission, "prefix_caching": self.prefix_caching,
                "memory_utilization": self.memory_utilization,
                "new_token_ratio": self.new_token_ratio, "run_ahead": self.run_ahead,
                "async_scheduling": self.async_scheduling,
                "preempt_keeps_cache": self.preempt_keeps_cache,
                "sources": list(self.sources)}


_VLLM_ARGS = ("vllm/engine/arg_utils.py EngineArgs.get_batch_defaults (>= 70 GiB and not A100: "
              "OPENAI_API_SERVER max_num_batched_tokens 8192, max_num_seqs 1024; else 2048 / "
              "256; PR #17885 keeps A100 on the small budget)")
_VLLM_V1 = ("vllm/engine/arg_utils.py _set_default_args_v1: V1 always chunks prefills, enables "
            "prefix caching; vllm/v1/core/sched/scheduler.py: running requests first, then "
            "waiting FCFS within the token budget; preempts the last-admitted running request "
            "(recompute) when the KV cache manager cannot allocate")
#: vLLM V1's preemption keeps the prefix cache: vllm/v1/core/sched/scheduler.py ``schedule()``
#: preempts with ``kv_cache_manager.free(preempted_req)``, ``num_computed_tokens = 0`` and
#: ``waiting.appendleft`` (the same lines in every V1 scheduler copy read in the offline index,
#: 2026-12, from the 2025 ones on; no vLLM commit was at hand to pin them); kv_cache_manager.py
#: ``free``: "When caching is enabled, we free the blocks in reverse order so that the tail blocks are
#: evicted first", each appended to the free block queue (``free_block_queue.append``), whose
#: head ``get_new_blocks`` pops and evicts (LRU); a waiting request with no computed tokens is
#: matched by ``get_computed_blocks`` (its full blocks' hashes over prompt and output, at most
#: ``num_tokens - 1`` tokens), so a preempted request re-prefills only its evicted tail.
_VLLM_PREEMPT = ("vllm/v1/core/sched/scheduler.py: a preempted request is freed and put first in "
                 "the waiting queue; kv_cache_manager.py free: blocks returned in reverse order "
                 "('tail blocks are evicted first') to the free queue's tail, evicted from its "
                 "head; get_computed_blocks finds the survivors when it is scheduled again")
_VLLM_CACHE = "vllm/config/cache.py CacheConfig: block_size 16, gpu_memory_utilization 0.9"
#: vLLM's async scheduling: PR #19970 (2025-06-23) "making the scheduler operate one step ahead of
#: the current execution" (an output placeholder stands for each token scheduled but not yet
#: sampled), behind --async-scheduling until v0.14.0, whose release notes list "Async scheduling
#: is now enabled by default" under its breaking changes (PR #27614; "Excludes some
#: not-yet-supported configurations: pipeline parallel, CPU backend, non-MTP/Eagle spec
#: decoding"), quoted by dependabot in OpenBMB/UltraRAG PR #259 (2026-01-21). A schedule formed
#: one step ahead takes a request that arrives during step k into step k + 2 (``run_ahead``):
#: under async scheduling the executor takes two batches at once (vllm/v1/executor/
#: uniproc_executor.py ``max_concurrent_batches = 2 if ... async_scheduling else 1``) and
#: vllm/v1/engine/core.py ``EngineCore.step_with_batch_queue`` calls ``schedule()`` for the next
#: batch and submits it before it blocks on the running batch's result, the busy loop reading
#: new requests from its input queue only between two such calls (read in copies of those files
#: held in the offline index, 2026-12; no vLLM commit was at hand to pin them).
_VLLM_ASYNC = ("vLLM v0.14.0 release notes: 'Async scheduling is now enabled by default' (PR "
               "#27614), not under pipeline parallel; PR #19970: the scheduler runs one step "
               "ahead of the execution")
_SGL = ("sglang python/sglang/srt/server_args.py: chunked_prefill_size 8192 on an 80 GB GPU, "
        "page_size 1, radix cache on, enable_mixed_chunk False, mem_fraction_static by GPU "
        "memory and TP (about 0.88 on H100 TP1)")
_SGL_SCHED = ("sglang python/sglang/srt/managers/scheduler.py get_next_batch_to_run: a prefill "
              "batch when one can be formed, else a decode batch; schedule_policy.py "
              "PrefillAdder reserves new_token_ratio of each running request's remaining "
              "output; retract_decode on out-of-memory")
#: SGLang's overlap scheduler (its v0.4 "zero-overhead batch scheduler"): lmsys.org/blog/
#: 2024-12-04-sglang-v0-4 ("The scheduler runs one batch ahead and prepares all the metadata
#: required for the next batch"; NanoFlow's idea). scheduler.py event_loop_overlap: each loop
#: iteration receives requests, forms and launches batch k+1 (run_batch hands it to
#: tp_worker_overlap_thread.py's forward thread and returns future token ids), and only then
#: resolves batch k's result (resolve_batch_result waits on k's copy_done event) and streams its
#: tokens. So a batch is formed while the one before it still runs on the GPU, and a request
#: received then joins the batch after. The first token itself is not held a further step: it
#: goes to the detokenizer as soon as batch k resolves, right after k+1 is launched. server_args
#: disable_overlap_schedule False by default (the v0.4.0 tag's file was not readable here; the
#: blog introduces the overlap scheduler with v0.4, and it stays on in the 0.5 line gpuplan keys).
_SGL_OVERLAP = ("sglang scheduler.py event_loop_overlap / tp_worker_overlap_thread.py: batch k+1 "
                "formed and launched before batch k resolves (lmsys.org/blog/2024-12-04-sglang-v0-4"
                ", zero-overhead batch scheduler: 'runs one batch ahead'); server_args "
                "disable_overlap_schedule False")
_TRT = ("TensorRT-LLM tensorrt_llm/llmapi/llm_args.py: max_batch_size 2048, max_num_tokens "
        "8192, enable_chunked_prefill False; KvCacheConfig free_gpu_memory_fraction 0.9, "
        "tokens_per_block 32, enable_block_reuse True; CapacitySchedulerPolicy "
        "GUARANTEED_NO_EVICT by default")

_TRT_SCHED = ("TensorRT-LLM cpp/tensorrt_llm/batch_manager/capacityScheduler.cpp @02a10fed "
              "GuaranteedNoEvictScheduler::impl: running requests keep the blocks to finish; "
              "waiting ones admitted in order while enoughAvailableBlocks (prompt + whole "
              "output) holds, the first misfit stops the loop, at most maxNumRequests; "
              "microBatchScheduler.cpp @0a949d31: without chunking a prompt must fit "
              "max_num_tokens whole with the step's generation tokens, else the loop breaks")
_TRT_014 = ("TensorRT-LLM docs/source/release-notes.md @b47198a2: 0.14.0 'The default "
            "max_batch_size of the trtllm-build command is set to 2048'; 0.10.0 'Set the "
            "default tokens_per_block argument of the trtllm-build command to 64' (no later "
            "change through 0.21); 0.16.0 'Chunked context is enabled by default' (so off in "
            "0.14); tensorrt_llm/builder.py BuildConfig @008b2b8d max_num_tokens 8192 "
            "(trtllm-build takes BuildConfig's defaults, tensorrt_llm/commands/build.py); "
            "executor SchedulerConfig GUARANTEED_NO_EVICT, KvCacheConfig "
            "free_gpu_memory_fraction 0.9; block reuse off by default before 0.17 ('KV cache "
            "reuse is enabled automatically when paged_context_fmha is enabled')")
_TRT_TRITON_014 = ("triton-inference-server/tensorrtllm_backend v0.14.0 (9958c21): "
                   "inflight_batcher_llm/src/model_instance_state.cc getExecutorConfigFromParams "
                   "passes maxBatchSize and maxNumTokens as std::nullopt (the engine's "
                   "trtllm-build values), batch_scheduler_policy guaranteed_no_evict, "
                   "kv_cache_free_gpu_mem_fraction 0.9 and enable_chunked_context false when "
                   "unset; docs/model_config.md: the runtime batch 'can be larger than "
                   "triton_max_batch_size', max_tokens_in_paged_kv_cache unset is 'infinite'")

SCHEDULERS: tuple[SchedulerDefaults, ...] = (
    SchedulerDefaults(engine="vllm", version="0.8", max_num_seqs=256,
                      max_num_batched_tokens=2048, chunked_prefill=True, mixed=True,
                      block_size=16, preemption="recompute", admission="incremental",
                      prefix_caching=True, memory_utilization=0.9, preempt_keeps_cache=True,
                      sources=(_VLLM_V1, _VLLM_CACHE, _VLLM_PREEMPT)),
    SchedulerDefaults(engine="vllm", version="0.11", max_num_seqs=256,
                      max_num_batched_tokens=2048, chunked_prefill=True, mixed=True,
                      block_size=16, preemption="recompute", admission="incremental",
                      prefix_caching=True, memory_utilization=0.9, high_memory_seqs=1024,
                      high_memory_tokens=8192, preempt_keeps_cache=True,
                      sources=(_VLLM_ARGS, _VLLM_V1, _VLLM_CACHE, _VLLM_PREEMPT)),
    SchedulerDefaults(engine="vllm", version="0.14", max_num_seqs=256,
                      max_num_batched_tokens=2048, chunked_prefill=True, mixed=True,
                      block_size=16, preemption="recompute", admission="incremental",
                      prefix_caching=True, memory_utilization=0.9, high_memory_seqs=1024,
                      high_memory_tokens=8192, run_ahead=True, async_scheduling=True,
                      preempt_keeps_cache=True,
                      sources=(_VLLM_ARGS, _VLLM_V1, _VLLM_CACHE, _VLLM_PREEMPT, _VLLM_ASYNC)),
    SchedulerDefaults(engine="sglang", version="0.5", max_num_seqs=4096,
                      max_num_batched_tokens=8192, chunked_prefill=True, mixed=False,
                      block_size=1, preemption="recompute", admission="ratio",
                      prefix_caching=True, memory_utilization=0.88, new_token_ratio=0.7,
                      run_ahead=True, sources=(_SGL, _SGL_SCHED, _SGL_OVERLAP)),
    SchedulerDefaults(engine="trt-llm", version="0.14", max_num_seqs=2048,
                      max_num_batched_tokens=8192, chunked_prefill=False, mixed=True,
                      block_size=64, preemption="none", admission="reserve",
                      prefix_caching=False, memory_utilization=0.9,
                      sources=(_TRT_014, _TRT_TRITON_014, _TRT_SCHED)),
    SchedulerDefaults(engine="trt-llm", version="1.0", max_num_seqs=2048,
                      max_num_batched_tokens=8192, chunked_prefill=False, mixed=True,
                      block_size=32, preemption="none", admission="reserve",
                      prefix_caching=True, memory_utilization=0.9, sources=(_TRT, _TRT_SCHED)),
)

#: The version each engine's scheduler defaults to (the most recent one stated).
ENGINE_VERSIONS = {"vllm": "0.14", "sglang": "0.5", "trt-llm": "1.0"}


def scheduler_for(engine: str, version: str | None = None) -> SchedulerDefaults:
    """The scheduler of ``engine`` at ``version`` (default :data:`ENGINE_VERSIONS`); a version
    between two stated ones takes the earlier one's defaults."""
    rows = [s for s in SCHEDULERS if s.engine == engine]
    if not rows:
        names = sorted(ENGINE_VERSIONS)
        hint = closest(engine, names)
        raise InputError(f"engine {shown(engine)}: capacity simulates "
                         f"{', '.join(names)}" + (f"; did you mean {hint[0]}?" if hint else ""),
                         field="engine", value=engine, accepted=", ".join(names))
    if version is None:
        version = ENGINE_VERSIONS[engine]
    want = version_key(version, engine)  # the spelling budget_rule (gpuplan fit) accepts
    fits = [s for s in rows if version_key(s.version, engine) <= want]
    if not fits:
        raise InputError(f"{opt('engine_version')} {shown(version)}: the oldest {engine} "
                         f"scheduler capacity simulates is {rows[0].version}'s; name "
                         f"{rows[0].version} or a later version", field="engine_version",
                         value=version, accepted=f"{rows[0].version} or later")
    return max(fits, key=lambda s: version_key(s.version, engine))

