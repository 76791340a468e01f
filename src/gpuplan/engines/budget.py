"""How each serving engine sizes its KV cache at start-up, as data: per engine and version, the
rule's inputs (the utilization default, what the profile run measures, what is deducted, the
block size, the batch budgets) with the engine code or thread each was read from.

Nothing here computes; :func:`gpuplan.memory.budget.kv_budget` applies a rule to a model, a GPU
and a job. A rule is selected by engine name and version (``engine_version``: the newest rule
whose version is not above it); the default is the engine's stated recent version
(:data:`DEFAULT_VERSIONS`). Fitted constants are named (``*_BYTES``) with the mechanism each
stands for and the published logs they were read from.

Sources (read through the project's code search and issue threads):

* vLLM V0 ``vllm/worker/worker.py`` ``determine_num_available_blocks`` (0.6.x): KV = total x
  ``gpu_memory_utilization`` - (torch peak of the profile run, weights included) - non-torch
  memory; the log "Memory profiling results: total_gpu_memory=... non_torch_memory=...
  kv_cache_size=..." (vllm-project/vllm#10517) states the same sum.
* vLLM 0.7+ ``memory_profiling`` (vllm/utils.py, PRs vllm-project/vllm#10511, #12126): the
  non-torch term is what grew since the instance's baseline snapshot, the CUDA context left out
  (rule 0.7 for V0; 0.6's and 0.8's workers count all non-torch device memory).
* vLLM's profile sampler: V0 ``profile_run`` uses ``SamplingParams(top_p=0.99,
  top_k=vocab_size - 1)`` (vllm/worker/model_runner.py, v0.6.6.post1), V1
  ``_dummy_sampler_run`` top_p 0.9 and top_k vocab - 1 (PR #13594): both sort the vocabulary
  in ``apply_top_k_top_p``; the peak (V0, and V1 0.8-0.20) is inside that sort, whose CUDA
  kernel (PyTorch's ``SortStable.cu``, cub's segmented radix sort) allocates reverse indices
  and cub's third keys and values buffers (:data:`V0_SORT_SAMPLER_BYTES`). From 0.21 the
  sampler does not sort (FlashInfer's by default, PR #40376; :data:`FUSED_SAMPLER_BYTES`).
* vLLM V1 ``vllm/v1/worker/gpu_worker.py`` ``determine_available_memory`` (commit
  0012cf691b7e, 0.8.x; the ``memory_profiling`` form of 0.9-0.20 subtracts the same three
  parts): CUDA graphs are captured *after* the KV cache is allocated, so they come out of the
  (1 - utilization) headroom.
* vLLM 0.21: PR vllm-project/vllm#38284 ("Enable CUDAGraph memory profiling by default") turns on
  ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`` (PR #30515) -- the estimated graph pool is
  deducted before the KV cache is sized -- and raises the default utilization to 0.92; the
  0.27 start-up log says "CUDA graph memory profiling is enabled (default since v0.21.0)"
  (gpustack/runner#251).
* vLLM ``vllm/v1/core/kv_cache_utils.py``: "GPU KV cache size: N tokens" and "Maximum
  concurrency for L tokens per request: X" (PR #13596; since the hybrid allocator
  N = max_concurrency x L, issue #54662), block size 16 (``CacheConfig.block_size``).
* vLLM's start-up check that one request of ``max_model_len`` tokens fits
  (:attr:`BudgetRule.startup_check` ``one_request``): V1 ``vllm/v1/core/kv_cache_utils.py``
  ``check_enough_kv_cache_memory`` (vllm-project/vllm@001cabc1be16; PR #16168 added the
  estimate) sums every layer's ``max_memory_usage_bytes`` -- a full-attention layer
  cdiv(max_model_len, block_size) pages -- and raises when that exceeds the available bytes:
  "To serve at least one request with the models's max seq len (131072), (16.00 GiB KV cache is
  needed, which is larger than the available KV cache memory (4.21 GiB). Based on the available
  memory, the estimated maximum model length is 34480. Try increasing `gpu_memory_utilization`
  or decreasing `max_model_len` when initializing the engine."; nothing available at all is
  "No available memory for the cache blocks". V0's ``raise_if_cache_size_invalid`` (PR #2163)
  said "The model's max seq len (29000) is larger than the maximum number of tokens that can be
  stored in KV cache (23648)" (vllm-project/vllm#10517, 0.6.4, RTX 3090). The null block that
  PR #47272 (merged 2026-07-01, after 0.22.1) holds back from the check is not in the 0.21 rule.
* SGLang has no such check (``startup_check`` ``pool``): ``model_runner`` raises only when
  ``max_total_num_tokens <= 0`` ("Not enough memory. Please try to increase
  --mem-fraction-static."), and ``TpModelWorker`` then serves requests of at most
  ``max_req_len = min(context_len - 1, max_total_num_tokens - 1)`` tokens
  (python/sglang/srt/managers/tp_worker.py @0045f98eb3b1): it starts, and refuses the longer
  requests one by one. TensorRT-LLM's check is not read here: ``pool`` too.
* SGLang ``python/sglang/srt/server_args.py`` ``_handle_gpu_memory_settings`` (PR
  sgl-project/sglang#10975, 0.5.x): mem_fraction_static = (gpu_mem - reserved) / gpu_mem with
  reserved (MiB) = 512 + 1.5 x max(chunked_prefill_size, 2048) + 2 x cuda_graph_max_bs +
  1024 x tp x pp / 8, at least 10 GiB on cards over 60 GiB; chunked_prefill_size and
  cuda_graph_max_bs by GPU memory bucket. 0.4.x: 0.88 / 0.87 / 0.85 / 0.81 / 0.79 by TP size
  (1 / 2 / 4 / 8 / 16).
* SGLang ``model_runner`` ``profile_max_num_token``: rest = free-after-weights - total x (1 -
  mem_fraction_static), where "total" is the free memory measured once the distributed group
  is up (before the weights); #tokens = rest / cell_size, cell = layers x kv_heads(rank) x
  head_dim x 2 x bytes (MLA: layers x (kv_lora_rank + qk_rope_head_dim) x bytes); the log
  "KV Cache is allocated. #tokens: N, K size: ... GB" (page size 1 by default).
* TensorRT-LLM: ``KvCacheConfig.free_gpu_memory_fraction`` 0.9 "of free GPU memory (after
  loading weights)" (NVIDIA/TensorRT-LLM docs/source/examples/kvcacheconfig.md), measured after
  the PyTorch executor's warm-up (``tensorrt_llm/_torch/pyexecutor/_util.py`` KvCacheCreator,
  PR NVIDIA/TensorRT-LLM#5933); ``tokens_per_block: int = Field(default=32)`` in the LLM API's
  KvCacheConfig (the older engine-build plugin config used 64).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType

from .._record import record
from ..errors import InputError, opt, shown

__all__ = ["BudgetRule", "BUDGET_RULES", "DEFAULT_VERSIONS", "budget_rule", "known_versions",
           "version_key",
           "sglang_default_fraction", "sglang_settings", "SERVING_ENGINES", "GIB", "MIB",
           "NON_TORCH_BYTES", "NON_TORCH_GROWTH_BYTES", "SORT_SAMPLER_BYTES",
           "V0_SORT_SAMPLER_BYTES", "V0_FULL_SORT_SAMPLER_BYTES", "FUSED_SAMPLER_BYTES",
           "SGLANG_INIT_NVLINK_TP_BYTES"]

GIB = 1 << 30
MIB = 1 << 20

#: Fitted: memory outside PyTorch's allocator per GPU as a profiler that counts *all* of it
#: sees it (rules with ``non_torch="device"``: vLLM 0.6's V0 worker and 0.8's V1 worker, which
#: take ``mem_get_info`` used minus torch's allocated bytes): the CUDA context and the cuBLAS /
#: cuDNN workspaces. The 0.6.4 logs of an RTX 3090 print 0.35 and 0.35 GiB (#10517), their
#: "initial_memory_usage" (15.34 GiB) less the weights (14.99 GiB) is the same 0.35 -- the
#: context held before the weights; a 16 GB card prints 0.39 (#11251).
NON_TORCH_BYTES = int(0.35 * GIB)
#: Fitted: what a baseline profiler counts outside PyTorch (``non_torch="growth"``): vLLM's
#: ``memory_profiling`` (vllm/utils.py, PRs vllm-project/vllm#10511 and #12126, 0.7.0) takes a
#: snapshot when the instance is created -- the CUDA context already up -- and counts only the
#: non-torch memory that grew since ("the increase of non_torch_memory from creating the
#: current vLLM instance until after profiling"). Its logs at TP 1: 0.16 GiB (H100, #12126's
#: own), 0.14 (H100), 0.05 and 0.01 (T4), 0.02 (RTX 4070 laptop), 0.06 (16 GB card, V1), 0.11
#: (A100, ovg-project/kvcached#448): their median, 0.06 GiB, is taken.
NON_TORCH_GROWTH_BYTES = int(0.06 * GIB)
#: Fitted: extra non-torch memory per GPU when TP > 1 (NCCL communicators and the custom
#: all-reduce's IPC buffers): 0.25 GiB in all at TP 2 (RTX 4090, #13061), 0.20 and 0.21 GiB at TP
#: 4 -- read off those logs, not validated by a counted one.
NON_TORCH_TP_BYTES = int(0.15 * GIB)
#: Bytes per (sequence, vocabulary entry) at the peak of vLLM V1's dummy sampler run, which
#: profiles the sampler with top_p 0.9 and top_k vocab - 1 (``_dummy_sampler_run`` in
#: vllm/v1/worker/gpu_model_runner.py, PR vllm-project/vllm#13594, 0.8) and so takes the
#: PyTorch-native sort path of ``apply_top_k_top_p`` (vllm/v1/sample/ops/topk_topp_sampler.py;
#: FlashInfer's sampler is off by default there): the model's bf16 logits (2) held by the
#: caller, their fp32 copy (4), the sorted values (4) and int64 indices (8), the top-k mask
#: (1), the softmax of the sorted values (4; its cumsum in place), the top-p mask (1) and the
#: scatter back (4). Counted from the code. These are the tensors *after* the sort; the sort
#: itself holds more (:data:`V0_SORT_SAMPLER_BYTES`, which V1's sort also takes: rules 0.8 and
#: 0.10, ``sampler="in_sort"``), so no vLLM rule uses this count for its peak any more; it
#: stays for rules on GPUs whose sort gpuplan has not read (``sort``). The one V1 log that
#: prints its activation peak (Qwen2.5-7B AWQ, 256 x 152,064 logits: 1.04 GiB, version not
#: quoted) agrees with it and not with the in-sort 1.39: not explained (see
#: docs/engine_budget.md).
SORT_SAMPLER_BYTES = 2 + 4 + 4 + 8 + 1 + 4 + 1 + 4
#: Bytes per (sequence, vocabulary entry) at the peak of vLLM V0's profile sampler on CUDA, read
#: from the code, not fitted. V0's ``profile_run`` samples with ``top_p=0.99, top_k=vocab - 1``
#: (vllm/worker/model_runner.py, 0.6-0.8); 0.8's ``Sampler.forward`` casts the logits to fp32
#: (``logits = logits.to(torch.float)``, "Use float32 to apply temperature scaling") while
#: ``execute_model`` keeps the model-dtype logits bound (the logs this binds are 0.8's), and ``_apply_top_k_top_p`` (vllm/model_executor/layers/sampler.py) begins with
#: ``logits.sort(dim=-1)``. On CUDA a sort over more than 4,096 columns runs
#: ``launch_stable_sort_kernel`` (aten/src/ATen/native/cuda/SortStable.cu, pytorch/pytorch
#: @061531e83b8f): with 128 rows or more (one row: the same sizes) ``segmented_sort_pairs``
#: allocates an int64 reverse-index array and calls cub's ``DeviceSegmentedRadixSort::
#: SortPairs``, which, not allowed to overwrite its input, takes "a 3rd keys buffer" and "a 3rd
#: values buffer" of the whole input in its temporary storage (cub
#: ``DispatchSegmentedRadixSort::InvokePasses``, ``allocation_sizes``). Live during the sort:
#: the model-dtype logits (2), the fp32 copy (4), the sorted values (4) and int64 indices (8),
#: the reverse indices (8), cub's keys and values buffers (4 + 8) = 38. Past the sort V0 holds
#: less (two masks, the softmax, a cumsum that is not in place, the scatter: 32).
#: V1's sort (0.8 to 0.20) is the same call on the same tensors: ``Sampler.forward`` casts the
#: bf16 logits that ``_dummy_sampler_run`` keeps bound to fp32, scales them in place
#: (``apply_temperature``) and ``apply_top_k_top_p`` (vllm/v1/sample/ops/topk_topp_sampler.py)
#: begins with ``logits.sort(dim=-1, descending=False)`` of the profile's 256 (or 1,024) rows,
#: so its peak is this count too. vLLM's own benchmark of that PyTorch path (PR
#: vllm-project/vllm#32558, 2026-01-18: 256 x 131,072 fp32 logits, "Pyt Mem 1.25 GB") is 40
#: bytes per logit = its pristine and working fp32 copies (4 + 4) and the sort's 32 beyond
#: them (4 + 8 + 8 + 4 + 8), 1.25 GiB exactly.
V0_SORT_SAMPLER_BYTES = 2 + 4 + 4 + 8 + 8 + 4 + 8
#: The same sort with 2 to 127 rows takes ``segmented_sort_pairs_by_full_sort``: two int2
#: (index, segment) arrays (8 + 8), the keys output cub's wrapper allocates when passed none (4)
#: and ``DeviceRadixSort::SortPairs``' third keys and int2 values buffers (4 + 8).
V0_FULL_SORT_SAMPLER_BYTES = 2 + 4 + 4 + 8 + 8 + 8 + 4 + 4 + 8
#: Bytes per (sequence, vocabulary entry) at the peak of vLLM 0.21+'s profile sampler, which
#: no longer sorts: FlashInfer's top-k/top-p sampler is on by default (PR
#: vllm-project/vllm#40376, 2026-04-20, "FlashInfer top-k/top-p has better performance compared
#: to Triton's implementation used by default now"; ``flashinfer_sampler_supported``: compute
#: capability 8.0-12.x, more than 16 SMs), and without it the native path is the Triton kernel
#: of PR #33538 (``apply_top_k_top_p_triton``; the PyTorch sort only under 8 rows). FlashInfer's
#: ``top_k_top_p_sampling_from_logits`` (flashinfer/sampling.py, ``top_k_first``) masks the
#: top-k into a new tensor and takes its softmax: the bf16 logits (2), the fp32 copy (4), the
#: masked logits (4) and the probabilities (4). Triton's path holds about the same (its
#: [programs, vocab] buffers, "~80MiB", then the probabilities and the exponential noise).
#: Counted from the code, not fitted; which of the two a 0.21 build runs is not pinned here.
FUSED_SAMPLER_BYTES = 2 + 4 + 4 + 4
#: Fitted: the CUDA-graph pool vLLM 0.21+ estimates for its default capture sizes (decode
#: graphs up to 512 sequences, piecewise + full); its logs print 0.36 GiB (small model, TP 2,
#: gpustack/runner#251), 0.65 GiB (Gemma 3 4B, #21489), 0.69 GiB estimated (a 27B hybrid).
CUDA_GRAPH_POOL_BYTES = int(0.6 * GIB)
#: Fitted: memory in use on each GPU before SGLang measures its "total" (the CUDA context and,
#: with TP > 1, the NCCL / custom all-reduce setup of ``init_torch_distributed``). Its logs:
#: "Load weight begin. avail mem=78.81 GB" on a 79.19 GiB H100 (0.38 GiB, TP 1); 23.99 - (16.00
#: + 7.08) = 0.91 GiB on each of 4 RTX 4090s (TP 4).
SGLANG_INIT_BYTES = int(0.4 * GIB)
SGLANG_INIT_TP_BYTES = int(0.5 * GIB)
#: Read off an independent log, not fitted to a counted one: what ``init_torch_distributed``
#: leaves on each GPU at TP > 1 when the GPUs talk over NVLink. NCCL's P2P transport puts its
#: per-channel receive buffers in device memory (over PCIe without P2P, as between GeForce
#: cards, NCCL stages through host memory, hence the 4090s' 0.5 GiB above), and SGLang keeps
#: NCCL's NVLink SHARP off (``enable_nccl_nvls=False``, sgl-project/sglang#631), so the figure
#: does not grow with NVLS' multicast pools. The log: SGLang 0.5.x (2025-09, nccl 2.27.3) on 8
#: H100 80GB HBM3 at TP 8: "Init torch distributed ends. mem usage=1.25 GB" then "Load weight
#: begin. avail mem=77.43 GB" on the 79.19 GiB card -- 1.76 GiB in use before the weights, of
#: which :data:`SGLANG_INIT_BYTES` is the context (Shivank Chaudhary, "Grok2 OnPrem Deployment
#: via sglang", 2025-09-14: lmsysorg/sglang:v0.5.2rc2-cu126, --tp 8 --quantization fp8, the
#: server log's TP0 lines, 2025-09-11). Applied at any TP > 1 (a ring's buffers are per neighbour, not per
#: rank); no NVLink log at TP 2 or 4 prints it.
SGLANG_INIT_NVLINK_TP_BYTES = int(1.36 * GIB)
#: The CUDA context TensorRT-LLM's process holds before its weights (fitted, like vLLM's).
TRT_CONTEXT_BYTES = int(0.6 * GIB)


@record
class BudgetRule:
    """One engine version's start-up KV sizing."""

    engine: str
    version: str
    """The first version the rule holds for."""
    knob: str
    """The user's knob: ``gpu_memory_utilization``, ``mem_fraction_static``,
    ``free_gpu_memory_fraction``."""
    default_fraction: float | None
    """The knob's default (None: computed per GPU and layout, SGLang 0.5)."""
    fraction_of: str
    """``total`` (vLLM: of the card's memory, everything counted inside it), ``init_free``
    (SGLang: of the memory free before the weights; weights inside it), ``free_after``
    (TensorRT-LLM: of what is free after weights and the warm-up run)."""
    block_size: int
    """Tokens per KV block / page."""
    profile_activations: bool
    """The profile run's activation peak is measured and deducted (vLLM, TensorRT-LLM); SGLang
    leaves it to the (1 - fraction) reserve."""
    cuda_graph_deducted: bool
    """The CUDA-graph pool is deducted before the KV cache is sized (vLLM 0.21+); otherwise it
    is captured afterwards, out of the reserve."""
    max_num_batched_tokens: str
    """What the profile run's token count defaults to: ``max_model_len`` (vLLM V0 without
    chunked prefill), ``serve`` (vLLM V1 ``vllm serve``: 8192 on a card of 70 GiB or more, else
    2048), ``chunked_prefill`` (SGLang: its chunked_prefill_size), ``8192`` (TRT-LLM)."""
    max_num_seqs: str
    """``256``, ``serve`` (vLLM V1: 1024 on a card of 70 GiB or more, else 256) or ``2048``
    (TensorRT-LLM's ``max_batch_size`` on any card: trtllm-build from 0.14.0, llm_args 1.0)."""
    hybrid_groups: bool
    """Sliding-window layers keep only their window (vLLM V1's hybrid allocator); False: every
    layer holds every token (vLLM V0, SGLang for Gemma / gpt-oss, whose hybrid SWA pool it
    disables, TRT-LLM without a VSWA config)."""
    tokens_reported: str
    """``blocks`` (N = blocks x block_size) or ``concurrency`` (N = max_concurrency x
    max_model_len, vLLM 0.10+)."""
    startup_check: str = "pool"
    """What the engine checks of its KV cache before it serves: ``one_request`` (vLLM: it
    refuses to start unless one request of ``max_model_len`` tokens fits) or ``pool`` (it
    refuses only an empty pool: SGLang; TensorRT-LLM, whose check is not read here)."""
    non_torch: str = "device"
    """What the profiler counts outside PyTorch: ``device`` (everything, the CUDA context
    included: :data:`NON_TORCH_BYTES`) or ``growth`` (only what grew since the instance's
    baseline snapshot: :data:`NON_TORCH_GROWTH_BYTES`)."""
    sampler: str = "summed"
    """How the profile run's sampler adds to its peak: ``summed`` (the fp32 logits and one copy
    on top of the forward's peak) or ``sort`` (vLLM's profile sampler, top-k/top-p through a
    full sort of the vocabulary after the forward: the larger of that and
    :data:`SORT_SAMPLER_BYTES` per logit) or ``v0_sort`` (vLLM V0's sampler on CUDA: its peak is
    inside the sort, :data:`V0_SORT_SAMPLER_BYTES` per logit; on other GPUs, whose sort
    gpuplan has not read, ``sort``) or ``in_sort`` (vLLM V1 0.8-0.20: the same sort, the same
    count) or ``fused`` (vLLM 0.21+: FlashInfer's or the Triton top-k/top-p sampler, no sort:
    :data:`FUSED_SAMPLER_BYTES` per logit)."""
    sources: tuple[str, ...] = ()


def _rule(**kw) -> BudgetRule:
    return BudgetRule(**kw)


_VLLM_V0 = _rule(
    engine="vllm", version="0.6", knob="gpu_memory_utilization", default_fraction=0.9,
    fraction_of="total", block_size=16, profile_activations=True, cuda_graph_deducted=False,
    max_num_batched_tokens="max_model_len", max_num_seqs="256", hybrid_groups=False,
    tokens_reported="blocks", non_torch="device", sampler="v0_sort",
    startup_check="one_request",
    sources=("vllm/worker/worker.py determine_num_available_blocks (0.6.x)",
             "vllm/worker/model_runner.py profile_run: SamplingParams(top_p=0.99, "
             "top_k=vocab_size - 1)",
             "vllm/model_executor/layers/sampler.py _apply_top_k_top_p (logits.sort)",
             "pytorch/pytorch aten/src/ATen/native/cuda/SortStable.cu @061531e83b8f "
             "segmented_sort_pairs",
             "https://github.com/vllm-project/vllm/issues/10517"))
_VLLM_V07 = replace(_VLLM_V0,
    version="0.7", non_torch="growth",
    sources=("vllm/utils.py memory_profiling (baseline snapshot; non_torch_increase)",
             "https://github.com/vllm-project/vllm/pull/10511",
             "https://github.com/vllm-project/vllm/pull/12126 (0.16 GiB non-torch, H100)",
             "vllm/model_executor/layers/sampler.py _apply_top_k_top_p (logits.sort)",
             "pytorch/pytorch aten/src/ATen/native/cuda/SortStable.cu @061531e83b8f "
             "segmented_sort_pairs"))
_VLLM_V1 = _rule(
    engine="vllm", version="0.8", knob="gpu_memory_utilization", default_fraction=0.9,
    fraction_of="total", block_size=16, profile_activations=True, cuda_graph_deducted=False,
    max_num_batched_tokens="serve", max_num_seqs="serve", hybrid_groups=True,
    tokens_reported="blocks", non_torch="device", sampler="in_sort",
    startup_check="one_request",
    sources=("vllm/v1/worker/gpu_worker.py determine_available_memory @ 0012cf691b7e "
             "(mem_get_info used - torch allocated: the context counted)",
             "https://github.com/vllm-project/vllm/pull/17122 (that worker's diff)",
             "https://github.com/vllm-project/vllm/pull/13594 (dummy sampler run)",
             "vllm/v1/sample/ops/topk_topp_sampler.py apply_top_k_top_p (logits.sort)",
             "https://github.com/vllm-project/vllm/pull/32558 (the sort path's memory)",
             "https://github.com/vllm-project/vllm/pull/13596"))
_VLLM_V10 = replace(_VLLM_V1,
    version="0.10", tokens_reported="concurrency", non_torch="growth",
    sources=("vllm/v1/core/kv_cache_utils.py get_kv_cache_capacity (N = concurrency x L)",
             "vllm/v1/worker/gpu_worker.py determine_available_memory (memory_profiling)",
             "https://github.com/vllm-project/vllm/issues/54662"))
_VLLM_V21 = replace(_VLLM_V10,
    version="0.21", default_fraction=0.92, cuda_graph_deducted=True, sampler="fused",
    sources=("https://github.com/vllm-project/vllm/pull/40376 (FlashInfer sampler by default)",
             "https://github.com/vllm-project/vllm/pull/33538 (Triton top-k/top-p kernel)",
             "flashinfer/sampling.py top_k_top_p_sampling_from_logits",
             "https://github.com/vllm-project/vllm/pull/38284 (graph profiling on, 0.92)",
             "https://github.com/vllm-project/vllm/pull/30515",
             "https://github.com/gpustack/runner/pull/251 (0.27 log: default since v0.21.0)"))
_SGLANG_04 = _rule(
    engine="sglang", version="0.4", knob="mem_fraction_static", default_fraction=None,
    fraction_of="init_free", block_size=1, profile_activations=False, cuda_graph_deducted=False,
    max_num_batched_tokens="chunked_prefill", max_num_seqs="serve", hybrid_groups=False,
    tokens_reported="blocks",
    sources=("sglang/srt/server_args.py (0.4.x): 0.88/0.87/0.85/0.81/0.79 by TP",
             "sglang/srt/model_executor/model_runner.py profile_max_num_token"))
_SGLANG_05 = replace(_SGLANG_04,
    version="0.5",
    sources=("https://github.com/sgl-project/sglang/pull/10975 (_handle_gpu_memory_settings)",
             "sglang/srt/model_executor/model_runner.py profile_max_num_token"))
_TRT = _rule(
    engine="trt-llm", version="1.0", knob="free_gpu_memory_fraction", default_fraction=0.9,
    fraction_of="free_after", block_size=32, profile_activations=True,
    cuda_graph_deducted=False, max_num_batched_tokens="8192", max_num_seqs="2048",
    hybrid_groups=False, tokens_reported="blocks",
    sources=("NVIDIA/TensorRT-LLM docs/source/examples/kvcacheconfig.md (0.9 of free memory)",
             "tensorrt_llm/llmapi KvCacheConfig tokens_per_block default 32",
             "tensorrt_llm/_torch/pyexecutor/_util.py KvCacheCreator (free x fraction)",
             "https://github.com/NVIDIA/TensorRT-LLM/pull/5933",
             "https://github.com/vllm-project/vllm/pull/5158 (0.9 of what is free after "
             "the weights)"))

#: TensorRT-LLM 0.14 (engines built by trtllm-build, run by the C++ executor, e.g. behind
#: Triton's tensorrtllm_backend): the same sizing as 1.0 (0.9 of what is free after the engine
#: and its activation buffers), but the engine's paged KV cache has trtllm-build's 64-token
#: blocks (docs/source/release-notes.md @b47198a2, 0.10.0 API changes: "Set the default
#: tokens_per_block argument of the trtllm-build command to 64"; tensorrt_llm/plugin/plugin.py
#: PluginConfig _tokens_per_block default 64), where 1.0's PyTorch flow has KvCacheConfig's 32.
_TRT_014 = replace(_TRT,
    version="0.14", block_size=64,
    sources=("NVIDIA/TensorRT-LLM docs/source/release-notes.md @b47198a2 (0.10.0: "
             "tokens_per_block 64 by default in trtllm-build; 0.14.0: max_batch_size 2048)",
             "tensorrt_llm/plugin/plugin.py PluginConfig _tokens_per_block = 64",
             "NVIDIA/TensorRT-LLM docs/source/examples/kvcacheconfig.md (0.9 of free memory)"))

#: engine -> its rules, oldest first.
BUDGET_RULES: Mapping[str, tuple[BudgetRule, ...]] = MappingProxyType({
    "vllm": (_VLLM_V0, _VLLM_V07, _VLLM_V1, _VLLM_V10, _VLLM_V21),
    "sglang": (_SGLANG_04, _SGLANG_05),
    "trt-llm": (_TRT_014, _TRT),
})
#: The version each engine is planned at when none is named: a stated recent release.
DEFAULT_VERSIONS: Mapping[str, str] = MappingProxyType(
    {"vllm": "0.21", "sglang": "0.5", "trt-llm": "1.0"})
SERVING_ENGINES = tuple(BUDGET_RULES)


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def version_key(version: object, engine: str, *, known: str = "") -> tuple[int, ...]:
    """``version`` as whole numbers to compare (``'0.21'``, ``'v0.21'``, ``' 0.10.1 '`` ->
    (0, 21), (0, 21), (0, 10, 1)): the one spelling `gpuplan fit` and `gpuplan capacity` both
    accept. Anything else ('-1', '0..5', '0.21rc1', a 10^4-digit text) is an InputError
    (naming ``known``, the versions whose rules are known, when given), and so is a version
    that is not text: a JSON number 0.10 arrives as 0.1 and 21 as "21" (qa43)."""
    if not isinstance(version, str):
        raise InputError(f"{opt('engine_version')} {shown(version)}: expected the version as "
                         f"text, e.g. \"{DEFAULT_VERSIONS.get(engine, '0.5')}\" (a number loses "
                         "its trailing zeros: 0.10 reads as 0.1)", field="engine_version",
                         value=version, accepted=known or None)
    v = version.strip().lstrip("v")
    parts = v.split(".")
    # no release is named with more than 32 characters; and int() of a huge text is slow
    if len(v) > 32 or not all(p.isascii() and p.isdigit() for p in parts):
        raise InputError(f"{opt('engine_version')} {shown(version)}: expected a version like "
                         f"{DEFAULT_VERSIONS.get(engine, '0.5')}, whole numbers with dots"
                         + (f"; {engine}'s rules are known from {known}" if known else ""),
                         field="engine_version", value=version, accepted=known or None)
    return tuple(int(p) for p in parts)


def known_versions(engine: str) -> tuple[str, ...]:
    return tuple(r.version for r in BUDGET_RULES[engine])


def budget_rule(engine: str, version: str | None = None) -> BudgetRule:
    """The rule ``engine`` applies at ``version`` (default :data:`DEFAULT_VERSIONS`): the newest
    rule not above it. An engine without a serving budget, a malformed version or one older than
    the first rule known is an InputError naming the known ones."""
    if engine not in BUDGET_RULES:
        raise InputError(f"{opt('engine')} {engine}: it has no serving memory budget; use one "
                         f"of {', '.join(SERVING_ENGINES)}", field="engine", value=engine,
                         accepted=", ".join(SERVING_ENGINES))
    rules = BUDGET_RULES[engine]
    known = ", ".join(known_versions(engine))
    want = version_key(DEFAULT_VERSIONS[engine] if version is None else version, engine,
                       known=known)
    chosen = [r for r in rules if _key(r.version) <= want]
    if not chosen:
        raise InputError(f"{opt('engine_version')} {shown(version)} is older than any {engine} "
                         f"budget rule gpuplan knows ({known}); name one of those or a later "
                         "version", field="engine_version", value=version, accepted=known)
    return chosen[-1]


#: SGLang 0.5's (chunked_prefill_size, cuda_graph_max_bs at TP < 4, at TP >= 4) by the card's
#: memory in MiB (upper bound of each bucket), from server_args.py.
_SGLANG_BUCKETS = ((20 * 1024, 2048, 8, 8), (35 * 1024, 2048, 24, 80),
                   (60 * 1024, 4096, 32, 160), (90 * 1024, 8192, 256, 512),
                   (160 * 1024, 8192, 256, 512), (float("inf"), 16384, 512, 512))


def sglang_settings(gpu_mem_bytes: int, tp: int) -> tuple[int, int]:
    """SGLang 0.5's default (chunked_prefill_size, cuda_graph_max_bs) on a card."""
    mib = gpu_mem_bytes / MIB
    for top, chunk, bs_small, bs_large in _SGLANG_BUCKETS:
        if mib < top:
            return chunk, (bs_small if tp < 4 else bs_large)
    raise AssertionError("unreachable")


def sglang_default_fraction(rule: BudgetRule, gpu_mem_bytes: int, tp: int, pp: int = 1) -> float:
    """SGLang's mem_fraction_static when the user sets none (0.4: by TP size; 0.5: from the
    card's memory and the reserve its server_args computes)."""
    if rule.version == "0.4":
        for at_least, frac in ((16, 0.79), (8, 0.81), (4, 0.85), (2, 0.87)):
            if tp >= at_least:
                return frac
        return 0.88
    mib = gpu_mem_bytes / MIB
    chunk, graph_bs = sglang_settings(gpu_mem_bytes, tp)
    reserved = 512 + max(chunk, 2048) * 1.5 + graph_bs * 2 + tp * pp / 8 * 1024
    if mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((mib - reserved) / mib, 3)
