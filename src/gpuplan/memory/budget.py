"""The KV cache a serving engine allocates at start-up, computed the way the engine computes it:
vLLM's ``gpu_memory_utilization`` share of the card less the weights as loaded, the profile
run's activation peak at ``max_num_batched_tokens``, memory outside PyTorch and (0.21+) the
CUDA-graph pool; SGLang's ``mem_fraction_static`` share of the memory free before the weights,
less the weights; TensorRT-LLM's ``free_gpu_memory_fraction`` of what is free after the weights
and its warm-up. The bytes left, cut into the engine's blocks, are the KV blocks and tokens the
engine logs, and the "maximum concurrency for L tokens per request" vLLM prints.

The rules are data (:mod:`gpuplan.engines.budget`); this module applies them to one rank of the
job's layout (the first pipeline stage: it holds the most layers and the embedding).
"""

from __future__ import annotations

from .._record import record
from ..bounds import check_int, check_number
from ..engines.budget import (CUDA_GRAPH_POOL_BYTES, GIB, NON_TORCH_BYTES,
                              NON_TORCH_GROWTH_BYTES, NON_TORCH_TP_BYTES, SGLANG_INIT_BYTES,
                              SGLANG_INIT_NVLINK_TP_BYTES, SGLANG_INIT_TP_BYTES,
                              FUSED_SAMPLER_BYTES, SORT_SAMPLER_BYTES, TRT_CONTEXT_BYTES,
                              V0_FULL_SORT_SAMPLER_BYTES,
                              V0_SORT_SAMPLER_BYTES, BudgetRule, budget_rule,
                              sglang_default_fraction, sglang_settings)
from ..engines.profiles import runtime_of
from ..errors import InputError, UnsupportedError, opt, spell_text
from ..formats import get_weight_format
from ..hardware import GPU
from ..job import Job, check_positions
from ..models import Architecture, Model
from ..parallel import layout_of, rank_model
from .infer import infer_memory
from .kv import kv_elem_bytes

__all__ = ["KVBudget", "kv_budget", "deployed_max_model_len", "planned_fraction",
           "sglang_running_requests", "rope_cache_bytes",
           "SAMPLER_COPIES", "FUSED_MOE_CHUNK", "GGUF_FORMATS"]

#: The profile run's sampler holds the logits of every sequence in fp32 and one more copy of
#: them (the probabilities it samples from).
SAMPLER_COPIES = 2
#: The weight formats (gpuplan.formats) that are llama.cpp GGUF files, which vLLM loads through
#: its GGUF quantization method (vllm/model_executor/layers/quantization/gguf.py).
GGUF_FORMATS = frozenset({"q8_0", "q4_0", "q4_k_m", "gguf"})
#: vLLM's fused-MoE kernel works through at most this many tokens at once
#: (``VLLM_FUSED_MOE_CHUNK_SIZE``), so its intermediate caches stop growing there.
FUSED_MOE_CHUNK = 32768


@record
class KVBudget:
    """What the engine's start-up log says about its KV cache, and the parts it deducted."""

    engine: str
    version: str
    available_kv_bytes: int
    """Bytes per GPU the engine gives the KV cache ("Available KV cache memory")."""
    block_size: int
    kv_blocks: int
    kv_tokens: int
    """vLLM's "GPU KV cache size: N tokens"; SGLang's "#tokens"; TensorRT-LLM's max tokens."""
    max_concurrency: float
    """Requests of ``max_model_len`` tokens the cache holds at once (vLLM's "Maximum
    concurrency for L tokens per request: X")."""
    max_model_len: int
    max_num_batched_tokens: int
    max_num_seqs: int
    fraction: float
    """The utilization / memory fraction applied."""
    kv_bytes_per_token: int
    """KV bytes one token costs on this GPU (every layer of the rank, full attention)."""
    parts: dict
    """name -> bytes: ``weights``, ``rope_cache`` (the rotary embedding's cos/sin buffer,
    loaded with the weights: :func:`rope_cache_bytes`), ``activation_peak``,
    ``cuda_graph_pool``, ``non_torch``, ``reserved`` (what the fraction leaves outside the
    budget)."""
    notes: tuple[str, ...] = ()
    engine_starts: bool = True
    """False where the engine refuses to start with this cache (:attr:`gpuplan.engines.budget.
    BudgetRule.startup_check`): vLLM, unless one request of ``max_model_len`` tokens fits; any
    engine, when nothing is left for the cache."""
    longest_max_model_len: int = 0
    """The longest ``max_model_len`` one request of which the cache holds (vLLM's "estimated
    maximum model length"; at most ``max_model_len``; 0: not one block)."""
    refusal: str = ""
    """Why the engine refuses to start, and the way out: one line, fields named with
    :func:`gpuplan.errors.opt` markers (``""`` where it starts)."""

    def to_dict(self) -> dict:
        return {"engine": self.engine, "version": self.version,
                "available_kv_bytes": self.available_kv_bytes, "block_size": self.block_size,
                "kv_blocks": self.kv_blocks, "kv_tokens": self.kv_tokens,
                "max_concurrency": self.max_concurrency, "max_model_len": self.max_model_len,
                "max_num_batched_tokens": self.max_num_batched_tokens,
                "max_num_seqs": self.max_num_seqs, "fraction": self.fraction,
                "kv_bytes_per_token": self.kv_bytes_per_token, "parts": dict(self.parts),
                "notes": list(self.notes), "engine_starts": self.engine_starts,
                "longest_max_model_len": self.longest_max_model_len,
                "refusal": spell_text(self.refusal) or None}


def kv_budget(model: Model, gpu: GPU, job: Job, *, gpu_memory_utilization: float | None = None,
              mem_fraction_static: float | None = None, max_model_len: int | None = None,
              engine_version: str | None = None, max_num_batched_tokens: int | None = None,
              max_num_seqs: int | None = None) -> KVBudget:
    """The KV budget ``job.engine`` (vllm, sglang, trt-llm) computes at start-up for ``model`` on
    ``gpu`` under the job's layout, precision and KV dtype. ``gpu_memory_utilization`` is
    vLLM's and TensorRT-LLM's knob (its ``free_gpu_memory_fraction``), ``mem_fraction_static``
    SGLang's; unset, the engine's default at ``engine_version``. ``max_model_len`` defaults to
    the model's context."""
    job = job.resolve_infer(model.architecture, gpu.architecture)
    rule = budget_rule(job.engine, engine_version)
    arch = model.architecture
    if arch is None or arch.kind != "decoder":
        raise UnsupportedError(f"{model.name}: a serving engine's KV budget needs a decoder "
                               "with a known architecture")
    fraction = _fraction(rule, gpu, job, gpu_memory_utilization, mem_fraction_static)
    L = _max_model_len(arch, deployed_max_model_len(arch, job, max_model_len), rule.engine,
                       "max_model_len" if max_model_len is not None else "context")
    total = gpu.memory_bytes
    lay = layout_of(job)
    mnbt, seqs = _batch_budgets(rule, gpu, L, max_num_batched_tokens, max_num_seqs, lay.tp)
    rarch = rank_model(model, job, 0).architecture if not lay.trivial else arch
    weights = infer_memory(model, job).weights_bytes
    rope = rope_cache_bytes(rule, rarch, job)
    gguf = _is_gguf(job) and rule.engine == "vllm"
    sampler = rule.sampler if rule.sampler not in ("v0_sort", "in_sort") \
        or gpu.vendor == "NVIDIA" else "sort"
    act = _activation_peak(rarch, mnbt, seqs, sampler=sampler, split_merged=gguf) \
        if rule.profile_activations else 0
    non_torch = (NON_TORCH_GROWTH_BYTES if rule.non_torch == "growth" else NON_TORCH_BYTES) \
        + (NON_TORCH_TP_BYTES if lay.tp > 1 else 0)
    graphs = (CUDA_GRAPH_POOL_BYTES if rule.cuda_graph_deducted
              and runtime_of(job.runtime, "infer", job.engine) != "eager" else 0)
    avail, reserved, non_torch = _available(rule, total, fraction, weights + rope, act,
                                            non_torch, graphs, _sglang_init_bytes(gpu, lay.tp))
    eb = _kv_elem(job, rarch)
    page = int(rule.block_size * rarch.kv_elements_per_layer * eb)  # one layer's block
    blocks, conc, tokens, notes = _blocks(rule, rarch, page, max(avail, 0), L, mnbt)
    parts = {"weights": weights, "rope_cache": rope, "activation_peak": act,
             "cuda_graph_pool": graphs,
             "non_torch": non_torch, "reserved": reserved}
    if rule.engine == "sglang" and max_num_seqs is None:
        seqs = sglang_running_requests(tokens, L)
    notes = [*notes, *_budget_notes(rule, fraction, mnbt, seqs, graphs, avail)]
    longest = _longest_len(rule, rarch, blocks, L, mnbt)
    refusal = _refusal(rule, job, fraction, L, blocks, tokens, conc, longest)
    if rule.startup_check == "pool" and 0 < tokens < L:
        notes.append(f"{rule.engine} starts, but serves requests of at most {tokens - 1:,} "
                     f"tokens, fewer than max_model_len {L:,}")
    return KVBudget(engine=rule.engine, version=rule.version, available_kv_bytes=max(avail, 0),
                    block_size=rule.block_size, kv_blocks=blocks, kv_tokens=tokens,
                    max_concurrency=conc, max_model_len=L, max_num_batched_tokens=mnbt,
                    max_num_seqs=seqs, fraction=fraction,
                    kv_bytes_per_token=int(rarch.num_layers * rarch.kv_elements_per_layer * eb),
                    parts=parts, notes=tuple(notes), engine_starts=not refusal,
                    longest_max_model_len=longest, refusal=refusal)


def deployed_max_model_len(arch: Architecture, job: Job, given: int | None) -> int | None:
    """The ``max_model_len`` a deployment of ``job`` runs at -- the one `fit`'s KV budget is
    sized at and `fit --export vllm` writes: the one given (``--max-model-len``), else the
    job's serving ``context``, else None (the engine's default: the model's context)."""
    if given is not None:
        return given
    return job.context


def _longest_len(rule: BudgetRule, a: Architecture, blocks: int, L: int, mnbt: int) -> int:
    """The longest max_model_len (at most ``L``) one request of which fits ``blocks`` blocks:
    vLLM's ``estimate_max_model_len`` (a binary search over its per-request bytes); one type of
    layer: every block of every layer, ``blocks x block_size``."""
    bs = rule.block_size
    groups = _layer_groups(a, rule)
    if len(groups) == 1:
        return min(L, blocks * bs)
    lo, hi = 0, L
    while lo < hi:  # the largest n with _per_request(n) <= blocks
        mid = (lo + hi + 1) // 2
        if _per_request(groups, bs, mid, mnbt) <= blocks:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _refusal(rule: BudgetRule, job: Job, f: float, L: int, blocks: int, tokens: int,
             conc: float, longest: int) -> str:
    """The line an engine's start-up refusal is reported in (the value and the ways out), or
    ``""`` where it starts."""
    knob = opt("mem_fraction_static" if rule.engine == "sglang" else "gpu_memory_utilization")
    if blocks <= 0:
        return (f"{rule.engine} {rule.version} refuses to start: nothing is left for the KV "
                f"cache; raise {knob} (now {f:g}), use lower-bit weights or more {opt('tp')}")
    if rule.startup_check != "one_request" or conc >= 1:
        return ""
    ways = [f"lower {opt('max_model_len')} to {longest:,}" if longest else None,
            f"raise {knob} (now {f:g})",
            f"{opt('kv_dtype')} fp8" if job.kv_dtype in (None, "fp32", "bf16", "fp16")
            else None, f"more {opt('tp')}"]
    return (f"{rule.engine} {rule.version} refuses to start: one request of "
            f"{opt('max_model_len')} {L:,} needs more KV cache than its {tokens:,} tokens "
            f"({conc:.2f}x); " + ", ".join(w for w in ways if w))


def sglang_running_requests(kv_tokens: int, context_len: int) -> int:
    """SGLang's default max_running_requests once its pool is sized: 512 requests per context's
    worth of KV tokens, at least 2,048 and at most 4,096. Read off its start-up logs, not its
    code: 444,500 tokens at 131,072 -> 2,048 (printed 2049, one dummy slot); 298,447 at 40,960
    -> 3,730; 38,141 at 131,072 -> 2,048."""
    return min(4096, max(2048, int(kv_tokens / context_len * 512)))


def planned_fraction(engine: str, job: Job, gpu: GPU | None = None, *,
                     engine_version: str | None = None,
                     gpu_memory_utilization: float | None = None,
                     mem_fraction_static: float | None = None) -> float | None:
    """The memory-fraction knob ``engine`` sizes ``job``'s KV budget at -- `fit`'s
    ``infer.engine.fraction``, what an export writes (vLLM's ``--gpu-memory-utilization``,
    SGLang's ``--mem-fraction-static``): the user's, else the version's default; None where that
    default depends on the card (SGLang 0.5) and no ``gpu`` is given."""
    rule = budget_rule(engine, engine_version)
    own = mem_fraction_static if engine == "sglang" else gpu_memory_utilization
    if gpu is None and own is None and rule.default_fraction is None:
        return None
    return _fraction(rule, gpu, job, gpu_memory_utilization, mem_fraction_static)


def _fraction(rule: BudgetRule, gpu: GPU, job: Job, util: float | None,
              mfs: float | None) -> float:
    """The knob's value: the user's (range-checked; the other engine's knob refused) or the
    default of the rule."""
    own, other = ("mem_fraction_static", "gpu_memory_utilization") \
        if rule.engine == "sglang" else ("gpu_memory_utilization", "mem_fraction_static")
    given = {"gpu_memory_utilization": util, "mem_fraction_static": mfs}
    if given[other] is not None:
        raise InputError(f"{opt(other)} is not {rule.engine}'s knob; give {opt(own)} for "
                         f"{rule.engine}", field=other, value=given[other])
    value = given[own]
    if value is not None:
        return check_number(value, "memory_fraction", field=own)
    if rule.default_fraction is not None:
        return rule.default_fraction
    lay = layout_of(job)
    return sglang_default_fraction(rule, gpu.memory_bytes, lay.tp, lay.pp)


def _max_model_len(arch: Architecture, given: int | None, engine: str,
                   field: str = "max_model_len") -> int:
    """``given`` checked (``field``: the option it came from), else the model's context."""
    if given is None:
        return arch.max_position_embeddings
    L = check_int(given, "context", field=field)
    # the engine's own start-up check, not the model's: vLLM and SGLang refuse a max_model_len
    # past the config's context even for a RoPE model (gpuplan.job.ENGINE_LONG_CONTEXT_OVERRIDE)
    check_positions(arch, L, field, engine=engine)
    return L


def _batch_budgets(rule: BudgetRule, gpu: GPU, L: int, mnbt: int | None,
                   seqs: int | None, tp: int) -> tuple[int, int]:
    """The profile run's (or the scheduler's) tokens and sequences: the user's, else the
    engine's defaults (vLLM V0: the whole context, chunked at 512 past 32K; V1 ``vllm serve``:
    8192 tokens and 1024 sequences on a card of 70 GiB or more that is not an A100, 2048 and 256
    otherwise -- ``EngineArgs.get_batch_defaults`` in vllm/engine/arg_utils.py, the A100 left out
    since vLLM PR #17885; SGLang: its chunked_prefill_size by card)."""
    total = gpu.memory_bytes
    big = total >= 70 * GIB and "a100" not in gpu.name.lower()
    if mnbt is None:
        mnbt = {"max_model_len": 512 if L > 32768 else max(L, 2048),
                "serve": 8192 if big else 2048, "chunked_prefill": sglang_settings(total, tp)[0],
                "8192": 8192}[rule.max_num_batched_tokens]
    else:
        mnbt = check_int(mnbt, "count", field="max_num_batched_tokens")
    given = "max_num_seqs" if seqs is not None else "max_num_batched_tokens"
    if seqs is None:
        seqs = {"256": 256, "2048": 2048, "serve": 1024 if big else 256}[rule.max_num_seqs]
    else:
        seqs = check_int(seqs, "count", field="max_num_seqs")
    if rule.engine == "vllm" and mnbt < seqs:
        # SchedulerConfig.verify_max_model_len, vllm/config/scheduler.py at
        # vllm-project/vllm@01230b40 (and V0's _verify_args): the engine refuses to start
        t, n = opt("max_num_batched_tokens"), opt("max_num_seqs")
        raise InputError(f"{t} {mnbt} under {n} {seqs}: vLLM refuses fewer tokens a step than "
                         f"sequences; give {n} {mnbt} or less, or {t} {seqs} or more",
                         field=given, value=seqs if given == "max_num_seqs" else mnbt,
                         fix={"max_num_seqs": mnbt} if given == "max_num_seqs"
                         else {"max_num_batched_tokens": seqs})
    return mnbt, seqs


def _activation_peak(a: Architecture, tokens: int, seqs: int, dt: int = 2, *,
                     sampler: str = "summed", split_merged: bool = False) -> int:
    """PyTorch's peak over the profile run of ``tokens`` tokens on one rank (``a`` is the
    rank's architecture), beyond the weights.

    ``summed`` (TensorRT-LLM's warm-up): the residual stream and hidden state, the largest
    layer's working set, and the fp32 logits of ``seqs`` sequences and a copy on top.

    ``sort`` (vLLM): the forward and the sampler run one after the other, so the peak is the
    larger of the two (:func:`_forward_peak`: the tensors live at the largest layer's busiest
    point; the sampler: :data:`SORT_SAMPLER_BYTES` per logit beside the hidden states, the only
    forward tensor still held when it sorts). ``v0_sort`` / ``in_sort``: the same with the
    peak inside the CUDA sort (:func:`_sort_bytes`; V0, and V1 0.8-0.20). ``fused``: vLLM
    0.21+'s sampler, which does not sort (:data:`FUSED_SAMPLER_BYTES`). vLLM's
    ``execute_model`` computes the logits from the model's returned hidden states after the
    layers' intermediates are freed, so the logits are not summed onto the MLP's peak
    (vllm/worker/model_runner.py ``execute_model``: the model's forward, then
    ``compute_logits``, then ``sample``). On the RTX 3090 log of vllm#10517
    this gives 2.06 GiB at 20,000 tokens and 2.99 at 29,000, where vLLM measured 2.07 and 2.99
    (the ``summed`` form gave 2.15 and 3.01, its copy count fitted to them).

    ``split_merged``: vLLM's GGUF linear method runs a merged layer (QKV, gate/up) one shard at
    a time and concatenates the outputs (``GGUFLinearMethod.apply``, torch.cat of the shard
    results), so the shards and their concatenation are live together."""
    H = a.hidden_size
    rows = min(seqs, tokens)
    logits = rows * a.vocab_size
    if sampler in ("sort", "v0_sort", "in_sort", "fused"):
        return max(_forward_peak(a, tokens, dt, split_merged),
                   logits * _sort_bytes(sampler, rows) + tokens * H * dt)
    stream = 2 * tokens * H * dt
    qkv = tokens * (a.num_heads + 2 * a.num_kv_heads) * a.head_dim * dt
    attn = qkv * (2 if split_merged else 1) + tokens * a.num_heads * a.head_dim * dt
    dense = tokens * (4 if split_merged else 3) * a.intermediate_size * dt \
        if a.intermediate_size else 0
    forward = stream + max(attn, dense, _moe_caches(a, tokens, dt))
    return forward + logits * 4 * SAMPLER_COPIES


def _sort_bytes(sampler: str, rows: int) -> int:
    """Bytes per logit at the profile sampler's peak: the tensors after a sort
    (:data:`SORT_SAMPLER_BYTES`, GPUs whose sort gpuplan has not read), 0.21+'s sampler without
    a sort (:data:`FUSED_SAMPLER_BYTES`), or during the CUDA sort (V0, V1 0.8-0.20), by the path
    PyTorch's sort takes for ``rows`` rows (SortStable.cu: one row or 128 and more, the
    segmented radix sort; between, the full sort by (index, segment) pairs)."""
    if sampler == "sort":
        return SORT_SAMPLER_BYTES
    if sampler == "fused":
        return FUSED_SAMPLER_BYTES
    return V0_SORT_SAMPLER_BYTES if rows == 1 or rows >= 128 else V0_FULL_SORT_SAMPLER_BYTES


def _moe_caches(a: Architecture, tokens: int, dt: int) -> int:
    """The fused-MoE kernel's intermediate caches (chunked at :data:`FUSED_MOE_CHUNK` tokens)
    and the shared expert's gate/up and activation."""
    if not a.num_experts:
        return 0
    m = min(tokens, FUSED_MOE_CHUNK)
    return m * a.experts_per_token * (3 * a.moe_intermediate_size + a.hidden_size) * dt \
        + tokens * 3 * a.shared_expert_intermediate_size * dt


def _forward_peak(a: Architecture, tokens: int, dt: int, split_merged: bool) -> int:
    """The forward's live tensors at its busiest point, as vLLM's decoder layers of 0.6-0.8 hold
    them (vllm/model_executor/models/llama.py, qwen2.py): the residual and the normed hidden
    state (the layer's caller keeps its reference while the MLP runs: ``hidden_states =
    self.mlp(hidden_states)``), and in ``LlamaMLP.forward`` -- ``gate_up, _ =
    self.gate_up_proj(x); x = self.act_fn(gate_up); x, _ = self.down_proj(x)`` -- gate/up
    (2 x intermediate) still bound while the down projection writes its output, beside the
    activation (1 x): 3 hidden + 3 intermediate per token. The attention's: the two, the QKV,
    the attention output and the o_proj output. GGUF's merged layers (``split_merged``) hold
    both shards and their concatenation at the torch.cat: 2 hidden + 4 intermediate; its QKV
    doubles. The MoE: the fused kernel's caches beside the three hidden-sized tensors."""
    H = a.hidden_size
    held = 3 * tokens * H * dt  # residual, normed input, the block's output
    qkv = tokens * (a.num_heads + 2 * a.num_kv_heads) * a.head_dim * dt
    attn = qkv * (2 if split_merged else 1) + tokens * a.num_heads * a.head_dim * dt
    inter = a.intermediate_size or 0
    dense = tokens * 3 * inter * dt
    if split_merged and inter:  # at the concatenation: no output of the block yet
        dense = max(dense, tokens * 4 * inter * dt - tokens * H * dt)
    return held + max(attn, dense if inter else 0, _moe_caches(a, tokens, dt))


def _is_gguf(job: Job) -> bool:
    """Whether the job's weights are a GGUF format (vLLM runs those through its GGUF method)."""
    return job.infer_precision in GGUF_FORMATS


def rope_cache_bytes(rule: BudgetRule, a: Architecture, job: Job) -> int:
    """The rotary embedding's cos/sin table, a buffer the model holds beside its weights (one
    per rope setup, shared by every layer): ``max_position_embeddings x rotary_dim`` values
    (the rotary part of a head; MLA's ``qk_rope_head_dim``). vLLM keeps it in the model's dtype
    (``RotaryEmbedding.__init__``: ``cache = cache.to(dtype)``,
    vllm/model_executor/layers/rotary_embedding.py @0042be241b0f), so its "Model loading
    took" counts it; SGLang keeps it in fp32 on CUDA ("cache needs to be in FP32 for numerical
    stability", python/sglang/srt/layers/rotary_embedding.py @00a66ebe136b). Llama 3.2 3B at
    131,072 positions: 32 MiB in fp16, the 0.03 GiB by which the T4 log's 6.02 GiB of weights
    exceeds the parameters' 5.98. TensorRT-LLM's engines are not counted here (0)."""
    if rule.engine not in ("vllm", "sglang"):
        return 0
    rot = a.mla.qk_rope_head_dim if a.mla is not None else a.head_dim
    if rule.engine == "sglang":
        dt = 4
    else:
        dt = 4 if get_weight_format(job.infer_precision).compute_dtype == "fp32" else 2
    return a.max_position_embeddings * rot * dt


def _sglang_init_bytes(gpu: GPU, tp: int) -> int:
    """What SGLang's process holds before it measures its "total": the CUDA context, and at
    TP > 1 NCCL and the custom all-reduce -- in device memory over NVLink
    (:data:`SGLANG_INIT_NVLINK_TP_BYTES`), staged through the host over PCIe."""
    if tp == 1:
        return SGLANG_INIT_BYTES
    nvlink = (gpu.interconnect or "").lower().startswith("nvlink")
    return SGLANG_INIT_BYTES + (SGLANG_INIT_NVLINK_TP_BYTES if nvlink else SGLANG_INIT_TP_BYTES)


def _available(rule: BudgetRule, total: int, f: float, weights: int, act: int, non_torch: int,
               graphs: int, sglang_init: int) -> tuple[int, int, int]:
    """(KV bytes, bytes the fraction reserves, non-torch bytes counted) by the rule's base."""
    if rule.fraction_of == "total":  # vLLM
        budget = int(total * f)
        return budget - weights - act - non_torch - graphs, total - budget, non_torch
    if rule.fraction_of == "init_free":  # SGLang: free before the weights, weights inside
        init = total - sglang_init
        return int(init * f) - weights, total - int(init * f), total - init
    free = total - TRT_CONTEXT_BYTES - weights - act - non_torch  # TensorRT-LLM
    return int(max(free, 0) * f), int(max(free, 0) * (1 - f)), non_torch + TRT_CONTEXT_BYTES


def _layer_groups(a: Architecture, rule: BudgetRule) -> list[tuple[int, int | None]]:
    """(layers, window) per attention type: full layers (window None) and each windowed type
    (sliding, Llama 4's chunks) when the rule keeps windows apart; else every layer full."""
    windowed = []
    if rule.hybrid_groups and a.sliding_window and a.sliding_window_layers:
        windowed.append((len(a.sliding_window_layers), a.sliding_window))
    if rule.hybrid_groups and a.attention_chunk and a.chunked_layers:
        windowed.append((len(a.chunked_layers), a.attention_chunk))
    full = a.num_layers - sum(n for n, _ in windowed)
    return [(full, None)] * (full > 0) + windowed


def _blocks(rule: BudgetRule, a: Architecture, page: int, avail: int, L: int,
            mnbt: int) -> tuple[int, float, int, list[str]]:
    """(blocks, max concurrency, tokens reported, notes). One type of layer: blocks = bytes //
    (page x layers). Mixed types (vLLM V1's hybrid allocator): layers are grouped by the
    smallest type's count, every group's blocks come from one pool of page x group-size blocks,
    and a request needs cdiv(L, block) blocks in a full group but only its window's
    (cdiv(window - 1 + max_num_batched_tokens, block) + 1) in a windowed one."""
    bs = rule.block_size
    groups = _layer_groups(a, rule)
    if len(groups) == 1:
        blocks = avail // (page * a.num_layers)
        tokens = blocks * bs
        return blocks, tokens / L, tokens, []
    size = min(n for n, _ in groups)
    blocks = avail // (page * size)
    conc = blocks / _per_request(groups, bs, L, mnbt)
    tokens = int(conc * L) if rule.tokens_reported == "concurrency" else blocks * bs
    note = (f"hybrid KV groups of {size} layers ({', '.join(f'{n} x ' + ('full' if w is None else f'window {w}') for n, w in groups)}): "
            "windowed layers keep only their window")
    return blocks, conc, tokens, [note]


def _per_request(groups: list[tuple[int, int | None]], bs: int, L: int, mnbt: int) -> int:
    """Blocks of the shared pool one request of ``L`` tokens needs (the hybrid allocator's
    groups of the smallest type's size): cdiv(L, block) in a full group, its window's in a
    windowed one."""
    size = min(n for n, _ in groups)
    per_request = 0
    for n, window in groups:
        need = -(-L // bs) if window is None else min(-(-L // bs),
                                                       -(-(window - 1 + mnbt) // bs) + 1)
        per_request += -(-n // size) * need
    return per_request


def _kv_elem(job: Job, a: Architecture) -> float:
    """Bytes per cached element: the job's KV dtype, else the compute dtype (fp8's per-layer
    scales are not in the pages)."""
    fmt = get_weight_format(job.infer_precision)
    kv = job.kv_dtype or ("fp32" if fmt.compute_dtype == "fp32" else "bf16")
    return kv_elem_bytes(kv, a.head_dim)


def _budget_notes(rule: BudgetRule, f: float, mnbt: int, seqs: int, graphs: int,
                  avail: int) -> list[str]:
    notes = [f"{rule.engine} {rule.version}+ rule: {rule.knob} {f:g}"
             + {"total": " of the card's memory", "init_free": " of the memory free before "
                "the weights", "free_after": " of the memory free after the weights and the "
                "warm-up"}[rule.fraction_of]]
    if rule.profile_activations:
        notes.append(f"profile run: {mnbt:,} tokens, {seqs:,} sequences")
    if rule.engine == "vllm":
        notes.append("CUDA-graph pool deducted before the KV cache (estimated)" if graphs else
                     "CUDA graphs captured after the KV cache: out of the headroom, not counted")
    if avail <= 0:
        notes.append("nothing left for the KV cache: the engine refuses to start "
                     "(raise the fraction, shorten max_model_len or add GPUs)")
    return notes
