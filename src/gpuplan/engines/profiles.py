"""What each engine *is*, as data: the one table every command reads (issue 27, "one truth").

The same layout is a different job under Megatron-Core with Transformer Engine, under HF Trainer
over transformers' eager code, under torchtitan or under vLLM with CUDA graphs: other kernels,
other launch costs, other layouts allowed, other memory reserved and another file to launch it. So
the engine is a field of the :class:`gpuplan.Job` (``engine``), and its profile here decides what
the job's refinements (``runtime``, ``model_code``, ``sharding``) mean when they are left out.
Nothing here computes memory or time: memory, compute, cluster and the exports read the profile.

Each profile states its sources (the engine's own code or docs, by file or page). ``auto`` is one
stated default for both modes, the same in every command and on the page: ``transformers`` (a
plain training loop over transformers' code -- HF Trainer / accelerate -- and ``generate`` for
inference), which is what gpuplan modelled before engines existed, so naming no engine moves no
number.

This module sits below :mod:`gpuplan.job` (the Job validates its engine against it) and imports
nothing of gpuplan but the error type: it is data.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from .._record import record
from ..errors import InputError, closest, opt, shown

__all__ = ["EngineProfile", "ServingHost", "ENGINES", "ENGINE_NAMES", "AUTO_ENGINE", "get_engine",
           "MLA_ABSORBING",
           "resolve_engine", "runtime_of", "check_engine_job", "check_engine_split", "even_split_fix", "runs_layout",
           "engine_notes", "LayoutLimits", "layout_limits", "SEARCH_SCHEDULES",
           "Fp8Attention", "FP8_ATTENTION", "fp8_attention_of", "ATTENTION_16BIT",
           "attention_16bit_of"]


@record
class ServingHost:
    """A serving engine's own host work, beside issuing the step's kernels (issue 31, "serving
    engines have a per-step cost the model does not carry"): per step, scheduling the batch,
    preparing its inputs, sampling and processing each sequence's new token; per request, the
    path from arrival to the first scheduling and the first token's return to the client."""

    fixed_s: float = 0.0
    """Host seconds per step, whatever the batch."""
    per_seq_s: float = 0.0
    """Host seconds per step for each sequence in it (its output processed)."""
    overlap: bool = False
    """The engine does this work for one step while the GPU runs the next (an overlap
    scheduler): the step is max(device, host) rather than device + host."""
    request_s: float = 0.0
    """Seconds each request's first token spends outside the steps (front end, queue entry,
    streaming return), added to its TTFT."""
    basis: str = ""
    """Where the figures come from."""
    core_fixed_s: float = 0.0
    """Host seconds per step of the loop that drives the GPU itself (vLLM's EngineCore: the
    scheduler's ``schedule()``, the model runner's state update and input preparation), apart
    from the output processing above, whatever the batch."""
    core_per_seq_s: float = 0.0
    """The same loop's seconds per step for each sequence in it (the scheduler's
    ``update_from_output``)."""
    core_overlap: bool = False
    """That loop forms and issues step k+1 while the GPU runs step k (vLLM's async scheduling):
    the step is max(device, host issue + its work) rather than the kernels' pace + its work.
    The profile's default; a scheduler row by version may set it
    (:attr:`gpuplan.capacity.SchedulerDefaults.async_scheduling`)."""
    core_overlap_pp: bool = True
    """``core_overlap`` holds under pipeline parallelism too. vLLM's does not: v0.14.0 made async
    scheduling the default "except under pipeline parallelism" (its release notes, PR #27614),
    which capacity's scheduler applied (capacity/_plan.py) and speed did not (onetruth43: the
    same vLLM TP4 PP2 job's TPOT read 0.43 ms apart, the loop's own work)."""

    def overlaps_core(self, pp: int) -> bool:
        """Whether the GPU-driving loop runs beside the step at ``pp`` pipeline stages."""
        return self.core_overlap and (pp == 1 or self.core_overlap_pp)

    def step_s(self, batch: int) -> float:
        """Host seconds of one step of ``batch`` sequences."""
        return self.fixed_s + self.per_seq_s * batch

    def core_step_s(self, batch: int) -> float:
        """The GPU-driving loop's own host seconds in one step of ``batch`` sequences."""
        return self.core_fixed_s + self.core_per_seq_s * batch

    def to_dict(self) -> dict:
        return {"fixed_s": self.fixed_s, "per_seq_s": self.per_seq_s, "overlap": self.overlap,
                "request_s": self.request_s, "core_fixed_s": self.core_fixed_s,
                "core_per_seq_s": self.core_per_seq_s, "core_overlap": self.core_overlap,
                "core_overlap_pp": self.core_overlap_pp, "basis": self.basis}


@record
class EngineProfile:
    """One engine: its kernels, runtime, sharding, the layouts it can run, its memory budget and
    its export, with sources."""

    name: str
    title: str
    """What it is, in one line (printed beside the resolved ``auto``)."""
    modes: tuple[str, ...]
    """``train`` and/or ``infer``: what the engine runs."""
    runtime: Mapping[str, str]
    """mode -> the runtime ``auto`` means under this engine: ``eager`` (per-op launches),
    ``compile`` (elementwise chains fused: torch.compile, or an engine's hand-fused kernels,
    which the speed model times alike), ``cudagraphs`` (launches replayed from a graph)."""
    runtimes: tuple[str, ...]
    """The runtimes a user may ask of it (``--runtime``)."""
    model_code: str
    """Whose model code the step runs (:data:`gpuplan.job.ModelCode`)."""
    model_codes: tuple[str, ...] = ()
    """Other model codes a job may ask of it (``model_code``) besides ``model_code``: FSDP2
    wraps any model (IBM's fms-fsdp trains FMS's Llama under torch FSDP)."""
    sharding: str
    """Whose ZeRO the engine's ``--zero`` is (:data:`gpuplan.job.Sharding`): DeepSpeed's (16-bit
    shards beside an fp32 master; Megatron's distributed optimizer holds the same copies) or
    FSDP2's (the fp32 shard is the master)."""
    shardings: tuple[str, ...]
    """The shardings a user may ask of it (``--sharding``)."""
    zero_stages: tuple[int, ...]
    """ZeRO stages it runs (0: replicated / DDP)."""
    fused_optimizer: bool = False
    """Its Adam/AdamW step is one fused kernel by default (no foreach temporary): what
    ``fused_optimizer`` means when the job leaves it."""
    kernels: str
    """The kernels it runs: norms, SwiGLU, RoPE, attention (stated in the output)."""
    parallel: frozenset[str]
    """Model-parallel dimensions it runs: ``tp``, ``sp``, ``pp``, ``cp``, ``ep``."""
    pp_schedules: tuple[str, ...] = ()
    """Pipeline schedules it runs (``gpipe``, ``1f1b``, ``interleaved``)."""
    pp_split: str = "uneven"
    """How it cuts layers into pipeline parts: ``uneven`` (any split, the first parts one layer
    longer) or ``even`` (every part the same number of layer-equivalents, else refused)."""
    pp_parts: str = "optional"
    """The embedding and loss as pipeline parts: ``optional`` (``--pp-embedding-part`` /
    ``--pp-loss-part``), ``always`` (the engine always weighs them as one layer each)."""
    overlap: str = ""
    """Its overlap of communication with compute (stated)."""
    tp_overlap_kind: str = "userbuffers"
    """How its TP communication overlap (when on) hides the TP collectives: ``userbuffers``
    (Megatron-Core / Transformer Engine --tp-comm-overlap: under the layer's GEMMs) or
    ``async-tp`` (PyTorch's micro-pipelined TP: each collective under its own GEMM only;
    :func:`gpuplan.compute.parallel.async_tp_exposed_s`)."""
    cp_rotate: str = "p2p"
    """How its context parallelism exchanges K and V: ``p2p`` (a ring of send/recv, one per
    step, each beside a step's attention: Megatron-Core over Transformer Engine) or
    ``allgather`` (PyTorch's context_parallel with the all-gather rotater, its fp32 merges and
    fp32 K/V-gradient ring: :func:`gpuplan.compute.parallel.torch_cp_exposed_s`,
    :func:`gpuplan.compute.parallel.torch_cp_merge_bytes`)."""
    p2p_overlap: str = "none"
    """When its pipeline's send/recv of activations and gradients runs beside compute:
    ``none`` (blocking sends: each waited for where it is posted) or ``interleaved`` (under an
    interleaved schedule, VP > 1, the steady state's sends posted asynchronously and waited
    for only before the chunk that needs them, so each runs beside the next chunk's compute:
    Megatron-LM's ``--overlap-p2p-communication``, :func:`gpuplan.compute.parallel.
    interleaved_p2p_exposed_s`)."""
    pp_grad_reduce: str = "overlapped"
    """When a pipeline stage's sharded data-parallel gradients (ZeRO-1/2) are reduce-scattered:
    ``overlapped`` (each bucket beside the last micro-batch's backward, as FSDP's and DDP's
    autograd hooks issue them) or ``after-last-backward`` (torch.distributed.pipelining: the
    stage turns FSDP2's gradient sync off for every micro-batch and calls each parameter
    group's ``post_backward`` itself once the last micro-batch's backward is done, so nothing
    but the rank's other chunks' backwards runs beside them, and each micro-batch's gradient is
    accumulated unsharded in the reduce dtype: :func:`gpuplan.compute.parallel.
    pipeline_reduce_exposed_s`, :func:`gpuplan.compute.parallel.pipeline_accumulate_bytes`)."""
    sdpa_repeat_kv: bool = False
    """Its model code expands K and V to every query head (``repeat_kv``) before SDPA, so what
    context parallelism exchanges and merges around the SDPA has the query heads' count, not
    the KV heads' (torchtitan@9dec370 torchtitan/models/llama/model.py lines 201-209)."""
    fsdp2_reduce_bytes: int = 0
    """Where its sharding is torch's ``fully_shard`` (FSDP2) run as the code timed here: the
    bytes of its reduce dtype, which the chunk-cat of the gradients writes
    (:func:`gpuplan.compute.parallel.fsdp2_copy_bytes`: the copy-out of the gathered weights and
    that chunk-cat, on the compute stream); 0: those copies are not timed."""
    fsdp1_grad_cat: bool = False
    """Where its sharding runs as torch's ``FullyShardedDataParallel`` (FSDP1, one
    ``FlatParameter`` a unit), as the published rows this profile times did: the unit's weights
    are ``torch.split`` views of the flat parameter in forward and backward (torch
    distributed/fsdp/_flat_param.py ``_get_unflat_views_unaligned``, ``_use_unsharded_views``
    with ``as_params=False`` "during forward/backward computation", pytorch/pytorch@01caf79e),
    so autograd joins their gradients into the flat gradient with the split's backward, an
    ``at::cat`` on the compute stream (torch/csrc/autograd/FunctionsManual.cpp
    ``split_with_sizes_backward``): read and written at the gradient width, once per unit a
    micro-batch (:func:`gpuplan.compute.parallel.fsdp1_grad_cat_bytes`). No copy-out: the
    all-gather writes the flat parameter itself. False: not timed."""
    tp_narrow_gather: tuple[str, ...] = ()
    """Narrow recipes (:data:`gpuplan.fp8.NARROW_RECIPES`) under which its sequence-parallel
    TP all-gathers move float8 (1 B an element) and its reduce-scatters 16-bit: the layer
    inputs are cast before they are gathered for the column-parallel GEMMs, and the output
    gradients before they are gathered for the row-parallel GEMMs' backward
    (:func:`gpuplan.compute.parallel.tp_collectives_s`)."""
    moe_experts: str = "transformers"
    """Whose routed experts its MoE layers run, as the activation accounting replays them
    (:func:`gpuplan.memory.activations.blocks.transformer_layer`): ``transformers``
    (transformers' ``grouped_mm_experts_forward``: the gathered rows and the down projection's
    output saved, the experts' GEMMs in 16 bits) or ``megatron`` (Megatron-Core's MoELayer over
    Transformer Engine's GroupedLinear: a permute that saves only its index map, the narrow
    recipe's quantized inputs saved for the experts' weight gradients, the router's weights
    applied inside the fused SwiGLU, so that nothing saves the second GEMM's output)."""
    narrow_shard: bool = False
    """Under sequence parallelism a narrow recipe saves each column-parallel linear's input as
    the quantized sequence shard (Transformer Engine: quantized before the all-gather, gathered
    again in backward) rather than the 16-bit shard; the 16-bit norm output is not kept (TE's
    LayerNormLinear takes the norm's weight gradient from its input and rsigma)."""
    proj_original_input: tuple[str, ...] = ()
    """Narrow recipes under which the attention's output projection saves its 16-bit input
    (the core attention's output, which the fused attention keeps anyway) instead of a
    quantized copy."""
    memory_utilization: float | None = None
    """Serving engines: the share of GPU memory it takes for weights, activations and the KV pool
    (vLLM's ``gpu_memory_utilization``, SGLang's ``mem_fraction_static``, TensorRT-LLM's
    ``free_gpu_memory_fraction`` of what is free after the weights); None for training engines."""
    cuda_graph_pool: bool = False
    """It captures CUDA graphs for decode, whose pool is memory outside the KV budget."""
    sliding_kv: str = "window - 1"
    """What its cache keeps of a sliding-window (or chunked) layer past the window:
    ``window - 1`` tokens (transformers 5's DynamicSlidingWindowLayer, which the training
    engines' generate() also runs), or ``window`` (the paged serving engines, which keep the
    blocks of the whole window)."""
    selective: str = "attention"
    """What its ``selective`` checkpointing recomputes (:data:`gpuplan.compute.flops.
    SELECTIVE_POLICIES`): ``attention``, the attention core only (Megatron's selective
    recompute); ``op``, torchtitan's op-level policy (every elementwise op and every second
    matmul of a block)."""
    compile_scope: str = "model"
    """What its ``compile`` runtime compiles: ``model`` (every op fused as torch.compile of the
    whole model fuses them) or ``blocks`` (each transformer block on its own, the ops outside
    them -- the final norm, the head, the loss -- run eagerly: torchtitan's apply_compile)."""
    export: str | None = None
    """The ``--export`` writer for its config (None: gpuplan writes none yet)."""
    host_issue: str = ""
    """The runtime whose host cost per launched kernel its launches carry where that differs
    from its ``runtime``'s ("": the runtime's own). Megatron-Core's kernels are fused as a
    compiled model's (``runtime`` compile: Transformer Engine's fused modules), but no compiler
    emits a wrapper that launches them: its nn.Modules run eagerly from Python (``eager``)."""
    python_backward: bool = False
    """Its backward kernels are launched from Python too: its modules are
    ``torch.autograd.Function`` subclasses whose ``backward`` is a Python method, so autograd's
    engine calls back into Python for each node and every backward kernel carries the
    ``host_issue`` runtime's forward cost per kernel, not autograd's C++ node cost
    (``_overheads`` in compute/step.py)."""
    serving_host: ServingHost | None = None
    """A serving engine's host work per step and per request (None: none modelled -- a plain
    generate loop, or an engine whose figures have no source yet)."""
    sources: tuple[str, ...] = ()

    @property
    def trains(self) -> bool:
        return "train" in self.modes

    @property
    def serves(self) -> bool:
        return "infer" in self.modes

    def to_dict(self) -> dict:
        return {"name": self.name, "title": self.title, "modes": list(self.modes),
                "runtime": dict(self.runtime), "model_code": self.model_code,
                "sharding": self.sharding, "zero_stages": list(self.zero_stages),
                "fused_optimizer": self.fused_optimizer,
                "kernels": self.kernels, "parallel": sorted(self.parallel),
                "pp_schedules": list(self.pp_schedules), "pp_split": self.pp_split,
                "pp_parts": self.pp_parts, "overlap": self.overlap,
                "memory_utilization": self.memory_utilization,
                "cuda_graph_pool": self.cuda_graph_pool, "sliding_kv": self.sliding_kv,
                "selective": self.selective, "compile_scope": self.compile_scope,
                "export": self.export,
                "host_issue": self.host_issue or None,
                "python_backward": self.python_backward,
                "serving_host": None if self.serving_host is None
                else self.serving_host.to_dict(),
                "sources": list(self.sources)}


#: vLLM's output processing per step, measured (V0's ``_process_model_outputs``): 0.2 ms at batch
#: 1 and 3.4 ms at batch 32 (Llama-3-70B fp8 on 4x H100, 128 input tokens), a straight line
#: through the two: 3.2 ms / 31 sequences per sequence, the rest fixed. In V0 it ran after the
#: step, on the critical path (the RFC's point: the GPU waits for it). Every vLLM version gpuplan
#: models (its scheduler rows 0.8 and 0.11; none older is accepted) runs the V1 engine, the
#: default from 0.8.0 (vllm-project/vllm PR #13726, in the 0.8.0 release; docs/source/
#: getting_started/v1_user_guide.md, PR #15064, 2025-03-18: "V1 is now enabled by default").
#: V1 does that work -- detokenisation, stop strings, building each request's RequestOutput and
#: streaming it -- in the API-server process (AsyncLLM's OutputProcessor, "Converts
#: EngineCoreOutputs --> RequestOutput", beside "EngineCore (starts the engine in background
#: process)": vllm/v1/engine/async_llm.py @00080ee13c7a451fce071ccb8d0e94d395acf5a7), while the
#: EngineCore process's loop "focuses exclusively on the scheduler and model executor" (vLLM
#: blog "vLLM V1: A Major Upgrade to vLLM's Core Architecture", 2025-01-27, vllm-project.github.io
#: _posts/2025-01-27-v1-alpha-release.md @3d6784c2: "greater overlap of CPU-intensive tasks --
#: such as tokenization, multimodal input processing, de-tokenization, and request streaming --
#: with the core execution loop"). So the same work runs beside the steps (``overlap``): a
#: step is max(device, host), the output processing costing time only where it outlasts the
#: kernels. V0's figure stays its size (no measurement of V1's OutputProcessor was found).
#:
#: The EngineCore's own per-step host work (issue 31), measured on V1 and quoted in two PR
#: descriptions, each on its own setup (neither is a row gpuplan validates against):
#: vllm-project/vllm PR #42131 ("[Performance] Decode fast path for scheduler and model
#: runner", 2026-05-09, B200, long-input agentic decode): ``Scheduler.schedule()`` "0.2ms ->
#: 0.04ms" per step, the model runner's ``_update_states`` fast path "saves ~0.18ms" and
#: ``_prepare_inputs`` "saves ~0.05ms" -- 0.43 ms a step of the stock loop, a floor (the two
#: runner figures are what the fast path removes, not the functions' whole time); PR #46112
#: ("Reduce update_from_output CPU overhead for decode batches", 2026-06-18, a micro-benchmark
#: at its merge-base 55c98e370): ``Scheduler.update_from_output`` 0.142 ms at batch 128 and
#: 0.287 ms at 256, 1.13 us per sequence between the two. Without async scheduling that work
#: runs between the steps while the GPU waits (EngineCore.step: schedule, execute_model,
#: update_from_output in turn). Async scheduling (PR #19970, 2025-06-23, "the scheduler operate
#: one step ahead of the current execution", behind ``--async-scheduling``; PR #23569,
#: 2025-08-25, the model runner's input preparation and sampling beside the forward too) puts it
#: beside the GPU step; it became the default in v0.14.0 (its release notes, "Breaking Changes:
#: Async scheduling is now enabled by default ... disable with --no-async-scheduling", PR
#: #27614; quoted in full by dependabot in OpenBMB/UltraRAG PR #259, 2026-01-21; v0.11.1's
#: notes: "We expect --async-scheduling to be enabled by default in the next release"), except
#: under pipeline parallelism, the CPU backend and non-MTP/EAGLE speculative decoding. The
#: profile is the loop of the version vLLM is planned at when none is named (engines/budget.py
#: DEFAULT_VERSIONS: 0.21), with it (``core_overlap``); capacity's scheduler rows set it by
#: version (capacity/_engines.py ``async_scheduling``: off for 0.8 and 0.11, on from 0.14).
_VLLM_SEQ_S = (3.4e-3 - 0.2e-3) / 31
_VLLM_CORE_SEQ_S = (0.287e-3 - 0.142e-3) / 128
_VLLM_HOST = ServingHost(
    fixed_s=0.2e-3 - _VLLM_SEQ_S, per_seq_s=_VLLM_SEQ_S, overlap=True,
    core_fixed_s=0.2e-3 + 0.18e-3 + 0.05e-3, core_per_seq_s=_VLLM_CORE_SEQ_S, core_overlap=True,
    core_overlap_pp=False,
    basis="vllm-project/vllm issue #6913 (RFC: Asynchronous Output Processor, 2024-07-29): "
    "_process_model_outputs 0.2 ms at batch 1, 3.4 ms at batch 32 (Llama3-70B FP8, 4xH100); "
    "under the V1 engine (the default from vLLM 0.8.0, PR #13726) this output processing runs "
    "in the API-server process beside the EngineCore loop (vllm/v1/engine/async_llm.py "
    "@00080ee1; vLLM V1 blog, 2025-01-27), so it overlaps the steps. The EngineCore's own "
    "work: schedule() 0.2 ms, _update_states 0.18 ms, _prepare_inputs 0.05 ms a step (PR "
    "#42131, 2026-05-09, B200) and update_from_output 1.13 us a sequence (PR #46112, "
    "2026-06-18), between the steps without async scheduling, beside them with it (the "
    "default from vLLM 0.14.0, PR #27614)")

#: TensorRT-LLM behind Triton: its C++ executor's own per-step host work has no published figure
#: here (none counted); each request's path through Triton's tensorrtllm_backend (HTTP
#: streaming front end, tokenisation in the ensemble's preprocessing model, entry to the
#: executor at an iteration boundary, the first token back through postprocessing) is fitted:
#: the median of measured - simulated TTFT over the 12 QPS-2 rows of the TensorRT-LLM 0.14
#: online table (gaps 6.2-16.9 ms before it was counted; benchmarks/validate_capacity.md), the
#: other 68 rows of that table and the NIM rows out of sample. No cost per streamed response
#: (the executor's createResponse per active request per iteration, then Triton's decoupled
#: response path) is counted: no published figure for it was found (searched 2026-12: NVIDIA/
#: TensorRT-LLM #2613, streaming slower than non-streaming on v0.13, no per-token figure, and
#: PRs #5284 / #6332, stream_interval "to reduce per-token CPU overhead", no figure;
#: triton-inference-server/server #8045, streamed -23% req/s against non-streamed on the KServe
#: endpoint, confounded by perf_analyzer #298's --streaming ignoring the output length;
#: tensorrtllm_backend #622, 0.13's postprocessing model at ~40 ms an execute() through
#: len(tokenizer.vocab), a bug of the ensemble's Python postprocessing, not of the executor
#: loop, and far above what the 0.14 rows' 7-9 ms ITLs allow).
#: Nor is one found in the code that ran (searched 2026-12-07; benchmarks/trtllm_load_breakdown.md):
#: on the executor loop a streamed response copies one token per request (createResponse,
#: NVIDIA/TensorRT-LLM cpp/include/tensorrt_llm/batch_manager/llmRequest.h @d879430b), while the
#: Triton side runs off it -- tensorrtllm_backend v0.14.0 @9958c211 (inflight_batcher_llm/src/
#: model_instance_state.cc) sends responses from its own WaitForResponse thread, and the
#: ensemble's postprocessing detokenises in a separate Python-backend process -- so it delays a
#: token without lengthening an iteration, and a delay cancels out of a mean inter-token gap.
#: The online rows' ITL gaps were also larger on the H200 than on the H100 at the same load with
#: fewer requests in flight (8 of 22 pairs by more than the 1 ms of the table's whole-millisecond
#: rounding, before the H200's measured streaming share, compute/device.py MEASURED_STREAM; 3 of
#: 22 after), which a host cost per request in flight cannot produce; none is fitted.
#: Checked again at the release that ran (searched 2026-12-08; benchmarks/trtllm_load_breakdown.py,
#: "Triton's streaming path at the 0.14 release"): tensorrtllm_backend v0.14.0's postprocessing
#: model reads tokenizer.vocab_size again (0.13.0's len(tokenizer.vocab), #622's ~40 ms an
#: execute(), is gone); its instance count is a template value every v0.14.0 doc and CI run fills
#: with 1 and perf-overview.md does not state; the client's "accumulate_tokens": True (vLLM's
#: async_request_trt_llm) is read only by tensorrt_llm_bls, as a model-config parameter, not by
#: the ensemble. perf-overview.md @258c754 states no build or server settings for its online
#: table, and an engine batch of 256 or 128 instead of 2048 moves TTFT, ITL and throughput
#: together toward the measured on none of the four 202/214 "INF" rows. No issue sizes a cost
#: per streamed response for 0.14 behind Triton (#2613 ran 0.13.0's postprocessing; server
#: #7548, 0.11.0, and tensorrtllm_backend #293, 2024-01, give no breakdown).
_TRTLLM_HOST = ServingHost(
    request_s=8.3e-3, basis="per-request cost fitted, not published: 8.3 ms, the median gap of "
    "measured over simulated TTFT on the QPS-2 rows of TensorRT-LLM 0.14's online serving "
    "table (docs/source/performance/perf-overview.md at 258c754); no per-step figure counted")

#: SGLang's host work runs beside the GPU under its overlap scheduler (on by default from v0.4:
#: lmsys.org/blog/2024-12-04-sglang-v0-4, "zero-overhead batch scheduler ... overlap the CPU
#: scheduling with the GPU computation"; scheduler.py event_loop_overlap forms and launches batch
#: k+1, then processes batch k's result -- process_batch_result, the radix-cache update,
#: stream_output to the detokenizer -- while k+1 runs; tp_worker_overlap_thread.py). Each loop
#: iteration's own terms, none with a published figure, so none is counted: recv_requests
#: (rank 0 polls the tokenizer's ZMQ socket, then broadcast_pyobj over the TP CPU group, every
#: iteration), get_next_batch_to_run (PrefillAdder over the waiting queue), and the per-request
#: output processing; the detokenizer (detokenizer_manager.py: batch_decode of each step's new
#: ids) and the tokenizer manager (tokenizer_manager.py: the HTTP stream) are separate processes,
#: off the loop. The blog's Nsight profile shows "no single idle time on the GPU" over five
#: decode batches, i.e. the host work fits under the steps it overlaps. What the overlap costs a
#: new request -- a batch formed one step ahead -- is the scheduler's (capacity/_engines.py
#: SchedulerDefaults.run_ahead), not a host time.
_SGLANG_HOST = ServingHost(
    overlap=True, basis="SGLang overlap scheduler (lmsys.org/blog/2024-12-04-sglang-v0-4; "
    "scheduler.py event_loop_overlap): host work per step beside the GPU step; no published "
    "per-step or per-request figure, none counted")

_EAGER = MappingProxyType({"train": "eager", "infer": "eager"})
_EAGER_TRAIN = MappingProxyType({"train": "eager"})
_GRAPHS = MappingProxyType({"infer": "cudagraphs"})
_UNFUSED = ("eager PyTorch: RMSNorm, RoPE and SwiGLU as separate elementwise kernels; attention "
            "through SDPA's flash backend (FlashAttention-2)")

_PROFILES = (
    EngineProfile(
        name="transformers", title="HF Trainer / accelerate over transformers' model code "
        "(generate() for inference)", modes=("train", "infer"), runtime=_EAGER,
        runtimes=("eager", "compile"), model_code="transformers", sharding="deepspeed",
        shardings=("deepspeed", "fsdp2"), zero_stages=(0, 1, 2, 3), kernels=_UNFUSED,
        parallel=frozenset({"tp"}),
        overlap="DDP buckets its gradient all-reduce beside the backward (25 MiB buckets)",
        export="accelerate",
        sources=("transformers Trainer: torch_compile=False by default (training_args.py)",
                 "accelerate: DeepSpeed ZeRO and FSDP plugins (utils/dataclasses.py); tensor "
                 "parallelism through transformers' tp_plan (inference and accelerate's "
                 "ParallelismConfig)")),
    EngineProfile(
        name="torchtune", title="torchtune recipes (full_finetune / lora_finetune, "
        "distributed over FSDP2)", modes=("train", "infer"), runtime=_EAGER,
        runtimes=("eager", "compile"), model_code="torchtune", sharding="fsdp2",
        shardings=("fsdp2",), zero_stages=(0, 2, 3),
        kernels="its own TransformerDecoder: K/V expanded to every query head, its RoPE chain "
        "in eager, logits upcast in the model; SDPA flash attention",
        parallel=frozenset({"tp"}),
        overlap="FSDP2 prefetches the next unit's all-gather beside the compute",
        fsdp2_reduce_bytes=2,  # training.shard_model (torchtune/training/_distributed.py @30b8519e8)
        # calls fully_shard with reshard_after_forward and an optional CPUOffloadPolicy only, no
        # MixedPrecisionPolicy: the weights are bf16 and foreach_reduce reduces in the gradient's
        # dtype (reduce_dtype or grad_dtype), 2 B; the copy-out is foreach_all_gather_copy_out's
        # split_with_sizes_copy on the current stream (pytorch@415cc262 torch/distributed/
        # _composable/fsdp/_fsdp_collectives.py, the FSDP2 of the torch 2.4-2.5 these rows ran)
        sources=("torchtune recipes/configs: compile: False by default",
                 "torchtune recipes/full_finetune_distributed.py: fully_shard per layer, "
                 "tensor_parallel_dim")),
    EngineProfile(
        name="deepspeed", title="DeepSpeed (ZeRO 0-3 over transformers' model code; its "
        "PipelineModule for pipelines)", modes=("train",), runtime=_EAGER_TRAIN,
        runtimes=("eager", "compile"), model_code="transformers", sharding="deepspeed",
        shardings=("deepspeed",), zero_stages=(0, 1, 2, 3), fused_optimizer=True,
        kernels=_UNFUSED,
        parallel=frozenset({"pp"}), pp_schedules=("1f1b",), pp_split="uneven",
        overlap="ZeRO overlaps its reduce-scatter (overlap_comm) and prefetches ZeRO-3 "
        "gathers (stage3_prefetch_bucket_size)", export="deepspeed",
        sources=("deepspeed/runtime/pipe/schedule.py: TrainSchedule (1F1B)",
                 "deepspeed/runtime/engine.py: an Adam/AdamW in the config runs as its "
                 "FusedAdam unless torch_adam is true",
                 "deepspeed/runtime/pipe/module.py: partition_method uniform "
                 "(ds_utils.partition_uniform: the first parts one longer)")),
    EngineProfile(
        name="fsdp2", title="PyTorch FSDP2 (fully_shard per block and on the root) over "
        "transformers' model code", modes=("train",), runtime=_EAGER_TRAIN,
        runtimes=("eager", "compile"), model_code="transformers", model_codes=("fms",),
        sharding="fsdp2", shardings=("fsdp2",), zero_stages=(0, 2, 3), kernels=_UNFUSED,
        parallel=frozenset(), overlap="the next unit's all-gather prefetched beside the "
        "compute; reduce-scatter per block in the backward", export="fsdp",
        # fsdp2_reduce_bytes left 0 here: the published rows this profile times ran FSDP1
        # (Composer's, fms-fsdp's), whose flat parameter has no copy-out; its one copy on the
        # compute stream, the split backward's cat of each unit's gradients, is timed instead
        fsdp1_grad_cat=True,
        sources=("torch.distributed.fsdp.fully_shard: reshard_after_forward True (ZeRO-3) / "
                 "False (ZeRO-2)",)),
    EngineProfile(
        name="torchtitan", title="torchtitan (FSDP2 + TP/SP + PP + CP + EP over its own "
        "model code)", modes=("train",), runtime=_EAGER_TRAIN, runtimes=("eager", "compile"),
        model_code="transformers", sharding="fsdp2", shardings=("fsdp2",),
        zero_stages=(0, 2, 3), fused_optimizer=True,
        kernels="its own Llama code, replayed as transformers' (the same ops); SDPA flash "
        "attention; torch.compile per block when [compile] enable = true",
        parallel=frozenset({"tp", "sp", "pp", "cp", "ep"}),
        pp_schedules=("gpipe", "1f1b", "interleaved"), pp_split="uneven", pp_parts="always",
        overlap="FSDP2 prefetch; async TP when enabled", export="torchtitan",
        tp_overlap_kind="async-tp",  # parallelize_llama.py: enable_async_tp sets inductor's
        # _micro_pipeline_tp and enable_symm_mem_for_group (torchtitan@9dec370)
        cp_rotate="allgather",  # config_manager.py: context_parallel_rotate_method "allgather"
        # by default; utils.create_context_parallel_ctx -> set_rotate_method (torchtitan@9dec370)
        sdpa_repeat_kv=True,  # torchtitan's Llama repeats K and V to every query head before
        # F.scaled_dot_product_attention (models/llama/model.py lines 201-209 @9dec370: keys =
        # repeat_kv(xk, self.n_rep), values = repeat_kv(xv, self.n_rep)), so the K and V its
        # context parallel all-gathers, rotates back as fp32 gradients and merges have the query
        # heads. A job run by other model code through this profile (the Llama 3 paper's CP
        # row: its all-gather moves the GQA K and V, arXiv 2407.21783 sec. 3.3.2) says so with
        # estimate_speed's sdpa_repeat_kv=False
        # torch.distributed.pipelining's _PipelineStageBase.backward_maybe_with_nosync (stage.py,
        # the torch of torchtitan's PP rows, 1963fc8 2024-12-23, read in undated stored copies of
        # pytorch/pytorch that agree on it): set_requires_gradient_sync(False) for every
        # micro-batch, then, after the last one's backward, run_post_backward calls
        # post_backward on every FSDP param group of the stage
        pp_grad_reduce="after-last-backward",
        fsdp2_reduce_bytes=4,  # config_manager.py: --training.mixed_precision_reduce "float32"
        # by default (9dec370); parallelize_llama.py apply_fsdp: MixedPrecisionPolicy(reduce_dtype)
        # parallelize_llama.py apply_tp @9dec370: with float8 on, the blocks' TP plan is
        # torchao's Float8ColwiseParallel / Float8RowwiseParallel / PrepareFloat8ModuleInput
        # (torchao/float8/float8_tensor_parallel.py: the input cast to float8 e4m3 before its
        # Shard(1) -> Replicate all-gather; the row-parallel output reduce-scattered in 16 bits,
        # then _NoopFwToFloat8BwDynamic, so its gradient is cast to e5m2 before the backward's
        # all-gather); tensor-wise dynamic scales only (_float8_linear_supports_float8_allgather)
        tp_narrow_gather=("fp8-tensorwise",),
        selective="op",
        # parallelize_llama.py apply_compile @9dec370: torch.compile(transformer_block,
        # fullgraph=True) for each of model.layers only; the final norm, the output and the
        # loss stay eager (train.py: "compiling loss function causes CUDA errors")
        compile_scope="blocks",
        sources=("torchtitan/config/job_config.py: compile.enable false by default; "
                 "optimizer.implementation 'fused' by default",
                 "activation_checkpoint.selective_ac_option 'op' by default (train_configs/"
                 "llama3_*.toml); torchtitan/parallelisms/parallelize_llama.py @582fe7d: the op "
                 "policy saves the outputs of mm, SDPA and reduce-scatter only, and recomputes "
                 "every second mm of a block",
                 "torchtitan/distributed/pipeline_parallel.py: generate_llm_fqn_per_model_part "
                 "weighs the embedding and the output as one layer each (input_weight = "
                 "output_weight = 1) and gives the first parts one layer more",
                 "torchtitan/parallelisms: TP always with sequence parallelism on the norms")),
    EngineProfile(
        name="megatron", title="Megatron-Core with Transformer Engine", modes=("train",),
        runtime=MappingProxyType({"train": "compile"}), runtimes=("compile",),
        host_issue="eager", python_backward=True,
        model_code="transformers", sharding="deepspeed", shardings=("deepspeed",),
        zero_stages=(0, 1), fused_optimizer=True,
        kernels="Transformer Engine's fused kernels (LayerNorm/RMSNorm fused with the next "
        "GEMM's input, fused RoPE, fused bias-SwiGLU), timed as fused elementwise chains; "
        "cuDNN / flash fused attention",
        parallel=frozenset({"tp", "sp", "pp", "cp", "ep"}),
        pp_schedules=("1f1b", "interleaved", "dualpipe"), pp_split="even",
        # p2p_overlap: Megatron-LM megatron/training/arguments.py (NVIDIA/Megatron-LM@d98e8a64)
        # --no-overlap-p2p-communication is store_false into overlap_p2p_comm, so the overlap is
        # on by default, and validate_args turns it off unless a virtual pipeline is set
        # (lines ~1000-1018); Megatron-Bridge does the same by rule: overlap_p2p_comm = True,
        # batch_p2p_comm = False when PP > 1 and VP > 1, else off (src/megatron/bridge/training/
        # comm_overlap.py lines 453-462, NVIDIA-NeMo/Megatron-Bridge@067f987). Megatron-Core's
        # own ModelParallelConfig.overlap_p2p_comm defaults to False (a library caller's choice)
        p2p_overlap="interleaved",
        # moe_experts, narrow_shard: Megatron-Core's TEGroupedMLP.forward applies the permuted
        # probs inside weighted_bias_swiglu_impl, whose WeightedSwiGLUFunction saves only its
        # input and the probs, and the dispatchers' permute / unpermute save index maps only
        # (megatron/core/transformer/moe/experts.py lines 862-982, fusions/fused_bias_swiglu.py
        # lines 191-206, moe/token_dispatcher.py lines 645 and 841, NVIDIA/Megatron-LM@
        # 0d8e0714cd29c01e164fe6de9f532182bdffa942, the Megatron-Bridge v0.2.0 pin; the same at
        # the v0.3.0 pin b0cc2706); Transformer Engine's LayerNormLinear quantizes the norm's
        # output on the local shard and saves that (ln_out, rowwise only under SP for per-tensor
        # FP8, columnwise only for MXFP8), with the norm's input and rsigma, not the 16-bit
        # output (transformer_engine/pytorch/module/layernorm_linear.py lines 186-269 and
        # 400-458, NVIDIA/TransformerEngine@70f53666, the 25.11 pin)
        moe_experts="megatron", narrow_shard=True,
        # Megatron-Core's Attention.__init__: under FP8 other than delayed scaling (TE >= 2.6,
        # which the 25.11 / 26.02 containers' TE 2.9 / 2.12 are) set_save_original_input(
        # linear_proj) "to avoid the extra memory usage of the quantized tensor"
        # (megatron/core/transformer/attention.py lines 207-218 @0d8e0714, 370-379 @b0cc2706)
        proj_original_input=("fp8-current", "fp8-blockwise", "mxfp8"),
        overlap="the distributed optimizer's gradient reduce-scatter and parameter all-gather "
        "overlapped (--overlap-grad-reduce, --overlap-param-gather); TP communication overlap "
        "with --tp-comm-overlap", export="megatron",
        sources=("megatron/training/arguments.py: num_layers divisible by the pipeline size "
                 "unless --decoder-first/last-pipeline-num-layers; with a virtual pipeline "
                 "the layers of a stage divisible by its chunks",
                 "megatron/core/optimizer: Adam is TE's / Apex's FusedAdam",
                 "--use-distributed-optimizer shards the fp32 master and the states over the "
                 "data-parallel group (ZeRO-1), 16-bit weights and gradients replicated",
                 "dualpipe is DeepSeek's schedule over Megatron-style stages (DeepSeek-V3 "
                 "report, arXiv 2412.19437, sec. 3.2.1; github.com/deepseek-ai/DualPipe @3da1bbe)"
                 ", timed here, not a Megatron-LM option: the export refuses it",
                 "host_issue eager: Megatron-Core calls torch.compile nowhere in its training "
                 "path; its TransformerLayer, MoELayer, token dispatcher and Transformer Engine "
                 "modules run as eager nn.Modules from Python, so each forward kernel carries "
                 "eager PyTorch's host cost (eager_host_fwd_s, 32 us). Same mechanism measured "
                 "on TE itself: "
                 "NVIDIA/TransformerEngine issue #2053 (2025-08-11) times one BF16 Linear forward "
                 "(hidden 2048, 8192 tokens, one GEMM) at 99.66 us CPU for te.Linear against "
                 "37.08 us for torch.nn.Linear on GB200's Grace, 13.48 us for torch.nn.Linear on "
                 "an x86 DGX H100; a TE maintainer (issue #2126, 2026-01-03) has TE's BF16 Linear "
                 "since cut to nearly torch's. Megatron-LM megatron/core/transformer/moe/README.md "
                 "(@d98e8a6) names the 'CPU overhead bottleneck' of fine-grained MoE (gaps "
                 "between kernels; CUDA graphs, larger micro-batch, less TP as the fixes). Not "
                 "modelled: the host CPU's own speed (Grace against x86). The recipes' TE-scoped "
                 "CUDA graphs (attn, moe_router, moe_preprocess) are the job's cuda_graph_scope "
                 "(compute/graphs.py: one launch a graph); Megatron-Bridge "
                 "docs/training/cuda-graphs.md (@067f987) measured them from neutral "
                 "(Qwen3-30B-A3B, H100 BF16, 42.00 s against 41.36 s eager) to low-20s percent "
                 "faster on launch-bound MoE runs",
                 "python_backward: each backward kernel at the same 32 us, not autograd's C++ "
                 "node cost (eager_host_bwd_s, 4 us): the layer's backward runs in Python "
                 "autograd.Function.backward methods -- Transformer Engine's _Linear, "
                 "_LayerNormLinear, _GroupedLinear (a Python loop over the local experts' "
                 "quantizers and main-grad buffers before its grouped dgrad and wgrad GEMMs), "
                 "FusedAttnFunc, _moe_permute/_moe_unpermute_mask_map (NVIDIA/TransformerEngine@"
                 "fe8fad59c9add7f8aa841fed2a0b4087b931856f transformer_engine/pytorch/module/"
                 "linear.py:82, layernorm_linear.py:86, grouped_linear.py:59 and 311, attention/"
                 "dot_product_attention/backends.py:1086, permutation.py:184 and 338), and "
                 "Megatron-Core's EP exchange _AllToAll and MoEAuxLossAutoScaler "
                 "(NVIDIA/Megatron-LM@b0cc2706ddc60d2aefd5fff346445b5c013036a8, the 26.02 "
                 "Megatron-Bridge v0.3.0 pin: tensor_parallel/mappings.py:420, transformer/moe/"
                 "moe_utils.py:238). Measured the same way round: NVIDIA/TransformerEngine issue "
                 "#2897 (2026-04-16) times the host side of TE's grouped MLP block (MXFP8, 64 "
                 "experts, GB200) at ~1.2 ms forward and ~2.1 ms backward -- the backward's host "
                 "work is the larger, not an eighth of it")),
    EngineProfile(
        name="vllm", title="vLLM (continuous batching over paged attention, CUDA graphs for "
        "decode)", modes=("infer",), runtime=_GRAPHS, runtimes=("cudagraphs", "eager"),
        model_code="transformers", sharding="deepspeed", shardings=("deepspeed",),
        zero_stages=(0,),
        kernels="fused RMSNorm, SiLU-and-mul and rotary kernels; FlashAttention (paged)",
        parallel=frozenset({"tp", "pp", "ep"}), pp_schedules=("1f1b",),
        memory_utilization=0.9, cuda_graph_pool=True, export="vllm", sliding_kv="window",
        serving_host=_VLLM_HOST,
        sources=("vllm/config: gpu_memory_utilization 0.9 by default; enforce_eager False "
                 "(CUDA graphs captured for decode batch sizes)",
                 "host work per step: " + _VLLM_HOST.basis)),
    EngineProfile(
        name="sglang", title="SGLang (RadixAttention prefix cache, CUDA graphs for decode)",
        modes=("infer",), runtime=_GRAPHS, runtimes=("cudagraphs", "eager"),
        model_code="transformers", sharding="deepspeed", shardings=("deepspeed",),
        zero_stages=(0,),
        kernels="fused RMSNorm, SiLU-and-mul and rotary kernels; FlashInfer / FlashAttention-3",
        parallel=frozenset({"tp", "pp", "ep"}), pp_schedules=("1f1b",),
        memory_utilization=0.88, cuda_graph_pool=True, export="sglang", sliding_kv="window",
        serving_host=_SGLANG_HOST,
        sources=("sglang server_args.py: mem_fraction_static chosen by GPU memory when not "
                 "given (0.88 on an 80 GB card), disable_cuda_graph False",
                 "host work: " + _SGLANG_HOST.basis)),
    EngineProfile(
        name="trt-llm", title="TensorRT-LLM (in-flight batching, CUDA graphs)",
        modes=("infer",), runtime=_GRAPHS, runtimes=("cudagraphs",),
        model_code="transformers", sharding="deepspeed", shardings=("deepspeed",),
        zero_stages=(0,),
        kernels="its fused GEMM + activation and norm kernels; its own attention plugin",
        parallel=frozenset({"tp", "pp", "ep"}), pp_schedules=("1f1b",),
        memory_utilization=0.9, cuda_graph_pool=True, sliding_kv="window",
        serving_host=_TRTLLM_HOST,
        sources=("TensorRT-LLM KvCacheConfig: free_gpu_memory_fraction 0.9 of the memory free "
                 "after the weights",
                 "host work: " + _TRTLLM_HOST.basis)),
    EngineProfile(
        name="gpt-fast", title="gpt-fast (torch.compile reduce-overhead: CUDA graphs, a static "
        "KV cache, one generate loop)", modes=("infer",), runtime=_GRAPHS,
        runtimes=("cudagraphs", "compile", "eager"), model_code="transformers",
        sharding="deepspeed", shardings=("deepspeed",), zero_stages=(0,),
        kernels="torch.compile's (Inductor's fused elementwise kernels, its int8/int4 GEMV "
        "kernels); SDPA attention", parallel=frozenset({"tp"}), sliding_kv="window - 1",
        sources=("pytorch-labs/gpt-fast generate.py: model compiled with mode "
                 "'reduce-overhead' (CUDA graphs), a static KV cache, tensor parallel by "
                 "torch.distributed (tp.py); a plain decode loop with no scheduler or "
                 "detokenization between steps, so no serving host work",)),
)

#: name -> profile, in the order they are listed.
ENGINES: Mapping[str, EngineProfile] = MappingProxyType({p.name: p for p in _PROFILES})
#: The accepted ``engine`` values: every profile and ``auto``.
ENGINE_NAMES: tuple[str, ...] = ("auto", *ENGINES)
#: What ``auto`` is, in both modes (stated in every output).
AUTO_ENGINE = "transformers"
#: Serving engines whose MLA decode is the absorbed form (vLLM's MLA backends, SGLang's
#: FlashInfer / FlashMLA / Triton MLA, TensorRT-LLM's MLA generation kernels): no per-step
#: expansion of the cached latent (compute.flops, memory.activations.serving).
MLA_ABSORBING = ("vllm", "sglang", "trt-llm")


def get_engine(name: object) -> EngineProfile:
    """The profile of ``name`` (``auto``: :data:`AUTO_ENGINE`'s); one line naming the choices."""
    if name == "auto":
        return ENGINES[AUTO_ENGINE]
    if isinstance(name, str) and name in ENGINES:
        return ENGINES[name]
    near = closest(str(name)[:64], ENGINE_NAMES, n=1)
    hint = f"; did you mean {near[0]!r}?" if near else ""
    raise InputError(f"{opt('engine')} {shown(name)}: expected one of "
                     f"{', '.join(ENGINE_NAMES)}{hint}", field="engine", value=name,
                     accepted=", ".join(ENGINE_NAMES), fix={"engine": near[0]} if near else None)


def resolve_engine(name: str) -> str:
    """The engine ``name`` stands for (``auto`` -> :data:`AUTO_ENGINE`)."""
    return get_engine(name).name



@record
class Fp8Attention:
    """How a serving engine's attention runs over an FP8 (e4m3) KV cache and whether it has an
    FP8 attention kernel (QK^T and PV on the FP8 tensor cores), with its sources."""

    engine: str
    kernel: str
    """The FP8 attention kernel ("" where the engine has none)."""
    fraction_kernel: str
    """Whose published share of the FP8 peak times it (``fa3-fp8``: FlashAttention-3's FP8
    forward, :data:`gpuplan.compute.efficiency.CONSTANTS` ``attn_fwd_hopper_fa3_fp8``;
    ``fa3-fp8-two-level``: vLLM's fork with two-level accumulation, a measured ratio of the
    16-bit kernel's rate, :data:`gpuplan.compute.efficiency.FP8_VS_16BIT_KERNELS`; "": the
    16-bit kernel's share of the generation, none being published for this kernel)."""
    architectures: tuple[str, ...]
    """GPU generations the FP8 kernel runs on (gpus.json ``architecture``)."""
    kv_selects: bool
    """An FP8 KV cache alone selects the FP8 kernel on those generations (the query is
    quantized to e4m3 and the whole attention runs in FP8); False: it takes its own switch."""
    kv_read: str
    """How the decode attention reads an FP8 cache where the FP8 kernel does not run."""
    scales: str
    """The scales read beside the cache."""
    scale_bytes_per_layer: int
    """Bytes of those scales per layer (fp32 k_scale and v_scale: 8)."""
    sources: tuple[str, ...]


_VLLM_FA = "vllm-project/vllm vllm/v1/attention/backends/flash_attn.py@0084b783bcda6d7ee15c337b1062cbee9985c954"
_VLLM_FA_UTILS = "vllm-project/vllm vllm/attention/utils/fa_utils.py@4d5ee6c6807136942c22100aa35a97e1390a42c5"
_SGL_FA = ("sgl-project/sglang python/sglang/srt/layers/attention/flashattention_backend.py"
           "@756596d14cbf314dfa846f62064e4a9113f826ef")
_FA3_API = "Dao-AILab/flash-attention hopper/flash_api.cpp@bc0e4ac01484ffb61ddc694724826bec4d9cf1c2"
_TRT_BEST = ("NVIDIA/TensorRT-LLM docs/source/performance/perf-best-practices.md"
             "@31ac30e928a2db795799fdcab6be446bfa3a3998")
_PER_TENSOR = "per-tensor fp32 k_scale and v_scale per layer (q_scale too where the query is cast)"

#: engine -> its FP8 attention, for the serving engines that read an FP8 KV cache in the kernel
#: (read 2026-12-06 from the offline index at the commits named).
FP8_ATTENTION: Mapping[str, Fp8Attention] = MappingProxyType({f.engine: f for f in (
    Fp8Attention(
        engine="vllm", kernel="FlashAttention-3 FP8 (e4m3) forward, two-level accumulation",
        fraction_kernel="fa3-fp8-two-level", architectures=("Hopper",), kv_selects=True,
        kv_read="FlashInfer / Triton paged attention dequantize the e4m3 cache in the kernel; "
        "the products run 16-bit",
        scales=_PER_TENSOR, scale_bytes_per_layer=8,
        sources=(_VLLM_FA + ": with kv_cache_dtype fp8 the cache is viewed as float8_e4m3fn, "
                 "the query cast by ops.scaled_fp8_quant(query, layer._q_scale), and "
                 "flash_attn_varlen_func called with q/k/v_descale (prefill and decode alike)",
                 _VLLM_FA_UTILS + ": flash_attn_supports_fp8() is FlashAttention 3 on compute "
                 "capability 9.x only",
                 _FA3_API + ": is_e4m3 kernels for head dims 64-256 on sm90",
                 "vllm-project/vllm-project.github.io _posts/2026-04-22-fp8-kvcache.md"
                 "@78672b0ff75843c0a043bcfdb411c0e1eedd0c03 (the vLLM blog on v0.19.1): "
                 "flash-attention#104's two-level accumulation (the FP8 P.V partial sums "
                 "promoted to FP32 registers each step) is on by default (vLLM #27889, "
                 "2025-10-31, bumped vLLM to it); "
                 "the kernel runs at about the 16-bit kernel's prefill rate at head dim 64/128 "
                 "and slower at 256 (compute.efficiency attn_fp8_two_level_vs_16bit_d128/_d256)")),
    Fp8Attention(
        engine="sglang", kernel="FlashAttention-3 FP8 (e4m3) forward (sgl_kernel)",
        fraction_kernel="fa3-fp8", architectures=("Hopper",), kv_selects=True,
        kv_read="FlashInfer dequantizes the e4m3 cache in the kernel; the products run 16-bit",
        scales=_PER_TENSOR, scale_bytes_per_layer=8,
        sources=(_SGL_FA + ": kv_cache_dtype other than auto (head dim <= 256): "
                 "k_descale/v_descale from layer.k_scale/v_scale, q = q.to(kv_cache_dtype), "
                 "then flash_attn_with_kvcache; FlashAttention-3 is the Hopper backend",)),
    Fp8Attention(
        engine="trt-llm", kernel="FP8 context FMHA (use_fp8_context_fmha)", fraction_kernel="",
        architectures=("Hopper",), kv_selects=False,
        kv_read="the generation-phase attention reads the e4m3 cache and runs its products "
        "16-bit (XQA / masked MHA: their code is not read here, so this is how it is timed, "
        "not a quoted behaviour)",
        scales=_PER_TENSOR, scale_bytes_per_layer=8,
        sources=(_TRT_BEST + ": '--use_fp8_context_fmha enables FP8 Context fused multi-head "
                 "attention ... only NVIDIA Hopper architecture is supported'",)),
)})


def fp8_attention_of(engine: str) -> Fp8Attention | None:
    """The FP8 attention of ``engine`` (resolved name), None where it has none (transformers'
    ``generate``, gpt-fast: SDPA over a 16-bit cache)."""
    return FP8_ATTENTION.get(engine)


_VLLM_FA_VERSION = ("vllm-project/vllm vllm/v1/attention/backends/fa_utils.py"
                    "@00bd1493b3e82d6c13c68ee8a0e1c5a96707e190")

#: engine -> {GPU generation (gpus.json ``architecture``): the 16-bit fused attention kernel its
#: serving steps run there, where it is not the generation's default share
#: (:func:`gpuplan.compute.efficiency.attention_fraction`: FlashAttention-2's on Ampere and
#: Hopper)}. ``fa3``: FlashAttention-3's 16-bit forward (efficiency ``attn_fwd_hopper_fa3``).
#: vLLM: ``get_flash_attn_version`` (vllm/v1/attention/backends/fa_utils.py@00bd1493) picks 3 on compute
#: capability 9.x ("Hopper (SM90): prefer FA3"), the FLASH_ATTN backend running vLLM's fork
#: (vllm_flash_attn) since vllm PR #12093 (2025-01, "Flash Attention 3 Support"; issue #12429,
#: 2025-01-25: "Flash Attention 3 is now supported in vLLM for Hopper GPUs (SM 9.0)"); the vLLM
#: FP8-KV blog (2026-04-22, v0.19.1) ran its H100 sweeps on it ("All Hopper experiments run on a
#: single H100 GPU using FlashAttention-3 (via the vLLM fork)"). SGLang's Hopper default (fa3) is
#: not entered here yet: its rows were not checked against it.
ATTENTION_16BIT: Mapping[str, Mapping[str, str]] = MappingProxyType({
    "vllm": MappingProxyType({"Hopper": "fa3"}),
})


def attention_16bit_of(engine: str, architecture: str) -> str:
    """The 16-bit fused attention kernel ``engine`` (resolved name) serves with on
    ``architecture`` (:data:`ATTENTION_16BIT`), "" where it is the generation's default."""
    return ATTENTION_16BIT.get(engine, {}).get(architecture, "")


#: The pipeline schedules a layout search tries when PP > 1 (GPipe has 1F1B's bubble and more
#: memory: never better), with the model chunks per rank of the interleaved one.
SEARCH_SCHEDULES = ("1f1b", "interleaved:2", "interleaved:4")
#: Every model-parallel dimension: what engine ``auto`` plans (Megatron-LM's sharding of any
#: layout, with ZeRO up to 3).
_ALL_DIMS = frozenset({"tp", "sp", "pp", "cp", "ep"})


@record
class LayoutLimits:
    """The layouts a job's engine runs: what every layout search (``gpuplan cluster``, fit's
    fewest-GPU columns) enumerates, and nothing else."""

    dims: frozenset[str]
    """Its model-parallel dimensions (``tp``, ``sp``, ``pp``, ``cp``, ``ep``)."""
    zero: tuple[int, ...]
    """Its ZeRO stages under the job's sharding (FSDP2 has no ZeRO-1)."""
    schedules: tuple[str, ...]
    """Of :data:`SEARCH_SCHEDULES`, those it runs (``1f1b`` at least)."""
    parts: tuple[bool, ...]
    """The embedding and loss as pipeline parts: tried off and on, or as the engine fixes it."""

    @property
    def deepest_zero(self) -> int:
        """The deepest ZeRO stage it runs."""
        return max(self.zero)


def layout_limits(job: object) -> LayoutLimits:
    """What ``job``'s engine runs (engine ``auto``: every dimension, ZeRO-3, every searched
    schedule and both pipeline-part choices, as Megatron-LM shards a layout)."""
    fsdp = job.sharding == "fsdp2"
    if job.engine == "auto":
        return LayoutLimits(dims=_ALL_DIMS, zero=(0, 2, 3) if fsdp else (0, 1, 2, 3),
                            schedules=SEARCH_SCHEDULES, parts=(False, True))
    prof = get_engine(job.engine)
    scheds = tuple(s for s in SEARCH_SCHEDULES if s.partition(":")[0] in prof.pp_schedules)
    zeros = tuple(z for z in prof.zero_stages if not (fsdp and z == 1))
    if job.engine == "megatron" and (getattr(job, "optimizer_states", "auto") == "bf16"
                                     or getattr(job, "master_weights", "auto") == "remainder"):
        # Megatron-Core's precision-aware optimizer, which bf16 states and a remainder master
        # are, runs only over its distributed optimizer (NVIDIA/Megatron-LM@d98e8a64
        # megatron/core/optimizer/__init__.py lines 1057-1060): ZeRO-1 (export.megatron)
        zeros = (1,)
    return LayoutLimits(dims=prof.parallel, zero=zeros,
                        schedules=scheds or ("1f1b",),
                        parts=(True,) if prof.pp_parts == "always" else (False, True))


def runtime_of(runtime: str, mode: str, engine: str = "auto") -> str:
    """The runtime a step runs under: ``runtime`` itself, or for ``auto`` the engine's for
    ``mode`` (``train``/``infer``)."""
    if runtime != "auto":
        return runtime
    prof = get_engine(engine)
    return prof.runtime.get(mode) or next(iter(prof.runtime.values()))


def check_engine_job(prof: EngineProfile, job: object) -> None:
    """One line when the engine cannot run the job as described (no architecture needed): a
    mode it does not run, a runtime, sharding or ZeRO stage it lacks, a parallel dimension or a
    pipeline schedule it has not. ``job``: a :class:`gpuplan.Job` (read by attribute)."""
    name = prof.name
    for mode in _job_modes(job):
        if mode not in prof.modes:
            does = "serves" if prof.serves else "trains"
            who = ", ".join(p.name for p in _PROFILES if mode in p.modes)
            raise InputError(f"{opt('engine')} {name} does not {mode}: it {does} only; use "
                             f"{opt('mode')} {prof.modes[0]}, or an engine that does ({who})",
                             field="engine", value=name, fix={"mode": prof.modes[0]})
    if job.runtime != "auto" and job.runtime not in prof.runtimes:
        raise InputError(f"{opt('runtime')} {job.runtime} under {opt('engine')} {name}: it runs "
                         f"{' or '.join(prof.runtimes)}; use one of them or {opt('runtime')} "
                         "auto", field="runtime", value=job.runtime,
                         accepted=", ".join(prof.runtimes), fix={"runtime": "auto"})
    if job.sharding not in prof.shardings:
        raise InputError(f"{opt('sharding')} {job.sharding} under {opt('engine')} {name}: its "
                         f"ZeRO is {prof.sharding}'s; use {opt('sharding')} {prof.sharding} or "
                         "another engine", field="sharding", value=job.sharding,
                         accepted=", ".join(prof.shardings), fix={"sharding": prof.sharding})
    if job.trains and job.zero not in prof.zero_stages:
        raise InputError(f"{opt('zero')} {job.zero} under {opt('engine')} {name}: it runs ZeRO "
                         f"stage {', '.join(map(str, prof.zero_stages))}; use one of them or "
                         "another engine", field="zero", value=job.zero,
                         accepted=", ".join(map(str, prof.zero_stages)),
                         fix={"zero": max(prof.zero_stages)})
    if (job.trains and job.model_code != prof.model_code and name != "transformers"
            and job.model_code not in prof.model_codes):
        other = {"torchtune": "torchtune", "fms": "fsdp2"}.get(job.model_code, "transformers")
        raise InputError(f"{opt('model_code')} {job.model_code} under {opt('engine')} {name}: "
                         f"it runs {prof.model_code}'s; drop it or use {opt('engine')} {other}",
                         field="model_code", value=job.model_code, accepted=prof.model_code,
                         fix={"model_code": prof.model_code})
    _check_dims(prof, job)


def _check_dims(prof: EngineProfile, job: object) -> None:
    asked = {"tp": job.tp > 1, "pp": job.pp > 1, "cp": job.cp > 1, "ep": job.ep > 1,
             "sp": job.sequence_parallel}
    lacking = [d for d, on in asked.items() if on and d not in prof.parallel]
    if lacking:
        dims = ", ".join(f"{opt(d)} {getattr(job, d)}" if d != "sp"
                         else opt("sequence_parallel") for d in lacking)
        who = ", ".join(p.name for p in _PROFILES if set(lacking) <= p.parallel
                        and any(m in p.modes for m in _job_modes(job)))
        first = "sequence_parallel" if lacking[0] == "sp" else lacking[0]
        raise InputError(f"{dims} under {opt('engine')} {prof.name}: it has no such "
                         f"parallelism ({' '.join(sorted(prof.parallel)) or 'data parallel only'}"
                         f"); " + (f"use {opt('engine')} {who}" if who else "drop it"),
                         field=first, value=getattr(job, first))
    if job.pp > 1:
        sched = str(job.pp_schedule).partition(":")[0]
        if sched not in prof.pp_schedules:
            raise InputError(f"{opt('pp_schedule')} {job.pp_schedule} under {opt('engine')} "
                             f"{prof.name}: it runs {', '.join(prof.pp_schedules)}; use one of "
                             "them", field="pp_schedule", value=job.pp_schedule,
                             accepted=", ".join(prof.pp_schedules))


def _job_modes(job: object) -> tuple[str, ...]:
    return tuple(m for m, on in (("train", job.trains), ("infer", job.infers)) if on)


def check_engine_split(prof: EngineProfile, num_layers: int, pp: int, chunks: int,
                       embedding: bool, loss: bool) -> None:
    """An engine that cuts layers only evenly (Megatron) refuses a split whose parts differ:
    ``layers (+ the embedding and loss parts) % (pp x chunks)``. One line with the degrees that
    divide."""
    if prof.pp_split != "even" or pp == 1:
        return
    units = num_layers + int(embedding) + int(loss)
    parts = pp * chunks
    if units % parts == 0:
        return
    counted = (" + the embedding" if embedding else "") + (" + the loss" if loss else "")
    raise InputError(f"{opt('pp')} {pp}" + (f" x {chunks} chunks" if chunks > 1 else "")
                     + f": engine {prof.name} splits layers evenly, and {num_layers} "
                     f"layers{counted} are {units} parts' worth, not divisible by {parts}; "
                     + even_split_fix(num_layers, pp, chunks, embedding, loss),
                     field="pp", value=pp)


def even_split_fix(num_layers: int, pp: int, chunks: int, embedding: bool, loss: bool) -> str:
    """The nearest splits an even-splitting engine takes: the embedding and loss counted as
    parts, other chunks per stage, or other stage counts."""
    units = num_layers + int(embedding) + int(loss)
    fixes = []
    if not (embedding and loss) and (num_layers + 2) % (pp * chunks) == 0:
        fixes.append(f"count the embedding and loss as parts: {opt('pp_embedding_part')} "
                     f"{opt('pp_loss_part')}")
    vs = [v for v in range(2, 65) if units % (pp * v) == 0]
    if chunks > 1 and units % pp == 0:
        fixes.append(f"use {opt('pp_schedule')} 1f1b" if not vs else
                     f"use {opt('pp_schedule')} interleaved:{vs[0]}"
                     + (f" (or {', '.join(map(str, vs[1:4]))})" if len(vs) > 1 else ""))
    pps = [p for p in range(2, min(units, 512) + 1) if units % (p * chunks) == 0]
    if pps:
        lo = [p for p in pps if p < pp][-1:]
        hi = [p for p in pps if p > pp][:1]
        fixes.append(f"use {opt('pp')} {' or '.join(map(str, lo + hi))}")
    return " or ".join(fixes) if fixes else f"use {opt('pp')} 1"


def runs_layout(prof: EngineProfile, job: object) -> bool:
    """Whether the engine runs the job's modes and parallel dimensions (no architecture), with
    its own defaults where the job leaves a refinement to it (``job.with_(engine=...)``)."""
    try:
        job.with_(engine=prof.name)
    except InputError:
        return False
    return True


def engine_notes(job: object, mode: str) -> tuple[str, ...]:
    """What the output states about the engine of ``job`` in ``mode``: which engine (auto said as
    what it stands for), its runtime and kernels; under auto, a model-parallel layout transformers
    does not run names the engines that do."""
    prof = get_engine(job.engine)
    runtime = runtime_of(job.runtime, mode, job.engine)
    said = f"engine auto = {prof.name}" if job.engine == "auto" else f"engine {prof.name}"
    notes = [f"{said}, runtime {runtime}"
             + (" (the engine's)" if job.runtime == "auto" else " (given)")
             + f": {prof.title} (docs/engines.md)"]
    if job.engine == "auto" and not runs_layout(prof, job):
        who = [p.name for p in _PROFILES if p.name != prof.name and runs_layout(p, job)]
        notes.append("this layout is beyond what transformers runs: planned as Megatron-LM "
                     "shards it, with transformers' kernels"
                     + (f"; engines that run it: {', '.join(who)} (give the engine)" if who else ""))
    return tuple(notes)
