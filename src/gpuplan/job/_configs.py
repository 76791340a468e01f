"""The job's small frozen configs: each validates itself in ``__post_init__`` -- its types from
its annotations (:func:`._fields.check_fields`), then its own consistency -- and a
:class:`gpuplan.Job` is their composition. A check that spans two configs is the Job's."""

from __future__ import annotations

from itertools import combinations

from .._record import record
from ..engines.profiles import get_engine
from ..errors import InputError, opt, shown
from ..formats import (INFER_AUTO, OPTIMIZERS, TRAINING_RECIPES, WEIGHT_FORMATS, get_optimizer,
                       get_recipe, get_weight_format)
from ..fp8 import NARROW_RECIPES
from ._fields import check_fields
from ..parallel.checks import pp_chunks
from ._vocab import (DEFAULT_INFER_PRECISION, DEFAULT_TRAIN_PRECISION, KV_DTYPES, Checkpointing,
                     GradDtype, MasterWeights, ModelCode, MoeDispatcher, OptimizerStates,
                     PrefillLogits, ActivationStorage,
                     Runtime, Sharding)

__all__ = ["ExecutionConfig", "TrainingLoop", "OptimizerConfig", "ShardingConfig", "LoraConfig",
           "ServingConfig", "ParallelLayout", "CONFIGS", "CUDA_GRAPH_SCOPES",
           "RECOMPUTE_MODULES", "cuda_graph_scope_sets"]


def _check_execution(c: "ExecutionConfig") -> None:
    get_engine(c.engine)  # one line naming the engines


def check_fp8_attention(c: "TrainingLoop") -> None:
    """Training's FP8 attention (TE ``fp8_dpa``) runs under an FP8 recipe; a serving job's is the
    engine's FP8 kernel, checked against the GPU by the speed model."""
    if c.fp8_attention and c.precision != "fp8" and NARROW_RECIPES.get(c.precision) is None:
        raise InputError(f"{opt('fp8_attention')} with {opt('precision')} {c.precision}: FP8 "
                         "attention runs under an FP8 recipe in training; give one "
                         f"({', '.join(NARROW_RECIPES)})", field="fp8_attention", value=True)


def _check_loop(c: "TrainingLoop") -> None:
    # plain "fp8" is resolved to the engine's recipe by the Job (gpuplan.fp8.resolve_plain_fp8)
    if c.precision not in TRAINING_RECIPES and c.precision != "fp8":
        get_recipe(c.precision)  # raises with suggestions
    narrow = NARROW_RECIPES.get(c.precision)
    if c.fp8_param_gather and c.precision != "fp8" and (narrow is None or not narrow.param_gather):
        able = [n for n, r in NARROW_RECIPES.items() if r.param_gather]
        raise InputError(f"{opt('fp8_param_gather')} with {opt('precision')} {c.precision}: "
                         f"only {', '.join(able)} keep and gather their weights narrow",
                         field="fp8_param_gather", value=True, accepted=", ".join(able))
    if c.first_last_layers_bf16 and c.precision != "fp8" and narrow is None:
        raise InputError(f"{opt('first_last_layers_bf16')} {c.first_last_layers_bf16} with "
                         f"{opt('precision')} {c.precision}: only a narrow recipe has layers to "
                         f"keep in BF16; give one ({', '.join(NARROW_RECIPES)}) or drop it",
                         field="first_last_layers_bf16", value=c.first_last_layers_bf16,
                         fix={"first_last_layers_bf16": 0})
    if c.fp8_amax_history is not None and c.precision != "fp8" and not (
            narrow is not None and narrow.amax_history):
        delayed = [n for n, r in NARROW_RECIPES.items() if r.amax_history]
        raise InputError(f"{opt('fp8_amax_history')} {c.fp8_amax_history} with "
                         f"{opt('precision')} {c.precision}: only delayed scaling keeps an amax "
                         f"history ({', '.join(delayed)})", field="fp8_amax_history",
                         value=c.fp8_amax_history, fix={"fp8_amax_history": None})
    if c.recompute_modules is not None:
        _check_recompute_modules(c)
    if c.cuda_graph_scope is not None:
        _check_cuda_graph_scope(c)
    if c.offload_activations and c.checkpointing != "full":
        raise InputError(f"{opt('offload_activations')} offloads what full checkpointing keeps "
                         f"(each layer's input), as torchtune requires; add {opt('checkpointing')}"
                         " full", field="offload_activations", value=True,
                         fix={"checkpointing": "full"})


def _check_recompute_modules(c: "TrainingLoop") -> None:
    bad = [m for m in c.recompute_modules if m not in RECOMPUTE_MODULES]
    if bad:
        raise InputError(f"{opt('recompute_modules')} {bad[0]!r}: expected some of "
                         f"{', '.join(RECOMPUTE_MODULES)} (Megatron-Core's moe, gdn_* and mhc "
                         "are not modelled)", field="recompute_modules", value=bad[0],
                         accepted=", ".join(RECOMPUTE_MODULES))
    if c.checkpointing != "selective":
        raise InputError(f"{opt('recompute_modules')} chooses what selective checkpointing "
                         f"recomputes; add {opt('checkpointing')} selective",
                         field="recompute_modules", value=list(c.recompute_modules),
                         fix={"checkpointing": "selective"})


def _check_cuda_graph_scope(c: "TrainingLoop") -> None:
    """transformer_config.py's scope checks at NVIDIA/Megatron-LM@b0cc2706 (lines ~1740-1800):
    the names, moe_preprocess only with moe_router, no scoped graph beside full recompute."""
    bad = [m for m in c.cuda_graph_scope if m not in CUDA_GRAPH_SCOPES]
    if bad or not c.cuda_graph_scope:
        shown = bad[0] if bad else ""
        raise InputError(f"{opt('cuda_graph_scope')} {shown!r}: expected some of "
                         f"{', '.join(CUDA_GRAPH_SCOPES)} (Megatron-Core's mlp, moe, mamba and "
                         "full_iteration are not modelled)", field="cuda_graph_scope",
                         value=shown, accepted=", ".join(CUDA_GRAPH_SCOPES))
    if "full" in c.cuda_graph_scope and len(c.cuda_graph_scope) > 1:
        raise InputError(f"{opt('cuda_graph_scope')} full: the whole-layer graph already holds "
                         "attn and the router; give full alone", field="cuda_graph_scope",
                         value=list(c.cuda_graph_scope), fix={"cuda_graph_scope": ["full"]})
    if "full" in c.cuda_graph_scope and c.checkpointing != "none":
        # transformer_config.py @core_v0.15.0rc6 line 1356 (enable_cuda_graph): 'CUDA graphs
        # not supported with activation recomputation'; @0d8e0714: 'Full-layer CUDA graphs ...'
        raise InputError(f"{opt('cuda_graph_scope')} full with {opt('checkpointing')} "
                         f"{c.checkpointing}: Megatron-Core graphs whole layers only without "
                         f"activation recompute; use {opt('checkpointing')} none or scoped graphs "
                         "(attn, moe_router)", field="cuda_graph_scope",
                         value=list(c.cuda_graph_scope), fix={"checkpointing": "none"})
    if "moe_preprocess" in c.cuda_graph_scope and "moe_router" not in c.cuda_graph_scope:
        raise InputError(f"{opt('cuda_graph_scope')} moe_preprocess: Megatron-Core captures the "
                         "dispatcher's preprocess only with the router; add moe_router",
                         field="cuda_graph_scope", value=list(c.cuda_graph_scope),
                         fix={"cuda_graph_scope": ["moe_router", *c.cuda_graph_scope]})
    if c.checkpointing == "full":
        raise InputError(f"{opt('cuda_graph_scope')} with {opt('checkpointing')} full: "
                         "Megatron-Core runs full recompute only under a full-iteration graph; "
                         f"use {opt('checkpointing')} selective or none",
                         field="cuda_graph_scope", value=list(c.cuda_graph_scope),
                         fix={"checkpointing": "selective"})


#: Megatron-Core's ``--cuda-graph-scope`` choices gpuplan times: Transformer Engine's scoped
#: graphs, and ``full``, Megatron-Core's own whole-layer graphs (``--enable-cuda-graph``;
#: ``--cuda-graph-impl local`` from 0.15's release branch on: compute/graphs.py).
CUDA_GRAPH_SCOPES = ("attn", "moe_router", "moe_preprocess", "full")


def cuda_graph_scope_sets() -> tuple[tuple[str, ...], ...]:
    """Every ``cuda_graph_scope`` a training loop without recompute accepts, by its own checks
    (:func:`_check_cuda_graph_scope`), the names in :data:`CUDA_GRAPH_SCOPES`' order: what a
    menu of the choices offers (the web page's), ``full`` among them."""
    sets = []
    for n in range(1, len(CUDA_GRAPH_SCOPES) + 1):
        for scope in combinations(CUDA_GRAPH_SCOPES, n):
            try:
                TrainingLoop(cuda_graph_scope=scope)
            except InputError:
                continue
            sets.append(scope)
    return tuple(sets)


#: Megatron-Core's ``--recompute-modules`` choices gpuplan times (transformer_config.py).
RECOMPUTE_MODULES = ("core_attn", "mla_up_proj", "layernorm", "moe_act", "mlp", "shared_experts")


def _check_optim(c: "OptimizerConfig") -> None:
    if c.optimizer not in OPTIMIZERS:
        get_optimizer(c.optimizer)


def _check_states(c: "ShardingConfig") -> None:
    if c.sharding == "fsdp2" and c.zero == 1:
        raise InputError(f"{opt('zero')} 1 with {opt('sharding')} fsdp2: FSDP2 shards "
                         "parameters, gradients and optimizer states together; use "
                         f"{opt('zero')} 2 (reshard_after_forward=False) or 3, or "
                         f"{opt('sharding')} deepspeed", field="zero", value=1, fix={"zero": 2})
    for name in ("stage3_max_live_parameters", "stage3_prefetch_bucket_size"):
        v = getattr(c, name)
        if v is not None and c.sharding is not None and (c.zero != 3 or c.sharding != "deepspeed"):
            raise InputError(
                f"{opt(name)} {v} with {opt('zero')} {c.zero} under {opt('sharding')} "
                f"{c.sharding}: it is a DeepSpeed ZeRO-3 setting; use {opt('zero')} 3 with "
                f"{opt('sharding')} deepspeed, or drop it", field=name, value=v,
                fix={"zero": 3, "sharding": "deepspeed"})


def _check_lora(c: "LoraConfig") -> None:
    if c.lora_base is not None:
        if c.lora_rank is None:
            raise InputError(f"{opt('lora_base')} given without a LoRA rank; add "
                             f"{opt('lora_rank')} R", field="lora_base", value=c.lora_base)
        get_weight_format(c.lora_base)
    if c.lora_targets is not None and c.lora_rank is None:
        raise InputError(f"{opt('lora_targets')} given without a LoRA rank; add "
                         f"{opt('lora_rank')} R", field="lora_targets", value=c.lora_targets)


def _check_serving(c: "ServingConfig") -> None:
    if c.infer_precision not in WEIGHT_FORMATS and c.infer_precision != INFER_AUTO:
        get_weight_format(c.infer_precision)
    if c.kv_dtype is not None and c.kv_dtype not in KV_DTYPES:
        raise InputError(f"{opt('kv_dtype')} {shown(c.kv_dtype)}: expected one of "
                         f"{', '.join(KV_DTYPES)}", field="kv_dtype", value=c.kv_dtype,
                         accepted=", ".join(KV_DTYPES))


def _check_parallel(c: "ParallelLayout") -> None:
    """The layout's own consistency (what needs the architecture -- heads divisible by TP, layers
    per stage, experts per EP rank -- is :func:`gpuplan.job.check_layout`'s)."""
    pp_chunks(c.pp_schedule)
    model_parallel = c.tp * c.pp * c.cp
    if c.gpus % model_parallel:
        lo = c.gpus // model_parallel * model_parallel
        near = [n for n in (lo, lo + model_parallel) if n]
        raise InputError(f"{opt('gpus')} {c.gpus}: not a multiple of tp x pp x cp = "
                         f"{model_parallel}; use {opt('gpus')} {' or '.join(map(str, near))}",
                         field="gpus", value=c.gpus, fix={"gpus": near[-1]})
    if c.sequence_parallel and c.tp == 1:
        raise InputError(f"{opt('sequence_parallel')} without tensor parallel: it shards over "
                         f"the TP group; add {opt('tp')} N (N > 1) or drop "
                         f"{opt('sequence_parallel')}", field="sequence_parallel", value=True)
    if c.distribute_checkpoints:
        if c.tp == 1:
            raise InputError(f"{opt('distribute_checkpoints')} without tensor parallel: the "
                             f"layer inputs are split over the TP group; add {opt('tp')} N "
                             f"(N > 1) or drop {opt('distribute_checkpoints')}",
                             field="distribute_checkpoints", value=True)
        if c.sequence_parallel:
            raise InputError(f"{opt('distribute_checkpoints')} with sequence parallelism: the "
                             "layer inputs are already split over the TP group; drop one",
                             field="distribute_checkpoints", value=True)
    if c.etp is not None and (c.gpus // c.pp) % c.etp:
        group = c.gpus // c.pp
        raise InputError(f"{opt('etp')} {c.etp}: expert tensor parallelism splits each expert "
                         f"over ranks of the tp x dp x cp group ({group}); use a divisor of "
                         f"{group}", field="etp", value=c.etp)
    if c.inter_node is not None and not c.inter_node.strip():
        raise InputError(f"{opt('inter_node')} {c.inter_node!r}: expected a link name or a rate "
                         "such as ib-400 or 400Gb/s", field="inter_node", value=c.inter_node)


@record
class ExecutionConfig:
    """How the job runs: its engine and the refinements over the engine's profile."""

    engine: str = "auto"
    """The engine that runs the job (:mod:`gpuplan.engines.profiles`): transformers, torchtune,
    deepspeed, fsdp2, torchtitan, megatron, vllm, sglang, trt-llm, or auto (transformers, in
    both modes; stated in the output). Its profile decides what ``runtime`` auto, ``model_code``
    and ``sharding`` mean when they are left out, and which layouts it runs. Under auto the layout
    is not held to transformers' (a model-parallel layout is planned as Megatron-LM shards it,
    with transformers' kernels), and the output says which engines run it."""
    runtime: Runtime = "auto"
    """How the step's code runs: eager PyTorch (per-op launches and Python dispatch), compile
    (torch.compile fuses elementwise chains), cudagraphs (launches replayed from a graph); auto =
    the default of the mode, stated in the speed output (docs/speed.md). Training memory under
    compile: each layer and the loss are compiled (torchtune's compile_model and compile_loss):
    AOTAutograd's partitioner keeps less for the backward, inductor fuses the elementwise ops."""
    model_code: ModelCode | None = None
    """None: the engine's (transformers' under auto). Whose model code runs the step: transformers' (the default; what gpuplan replays for every
    family) or torchtune's TransformerDecoder (llama-style families): K and V expanded to every
    query head before attention (a copy the speed model times too), the logits upcast to fp32 in
    the model's forward, outside the loss, and in eager its own RoPE chain (timed); or IBM's
    Foundation Model Stack Llama (``fms``, under the fsdp2 engine, as fms-fsdp trains it): the
    same ops as transformers' but its fp32 eager rotary (timed; its memory counted as
    transformers')."""
    power_limit_w: float | None = None
    """The GPUs' power limit in watts (``nvidia-smi -pl``) when it is below the SKU's TDP; None:
    the TDP. Under a lower cap the tensor clock sustained is lower: the speed model reads it
    from the SKU's rating at its TDP and a same-die sibling's at its own
    (:func:`gpuplan.compute.device.at_power_limit`); memory bandwidth is not scaled."""

    def __post_init__(self) -> None:
        check_fields(self)
        _check_execution(self)


@record
class TrainingLoop:
    """The training loop: the precision recipe, accumulation, checkpointing and the loss."""

    precision: str = DEFAULT_TRAIN_PRECISION
    """Training precision recipe (see ``gpuplan.formats.TRAINING_RECIPES``)."""
    grad_accum: int = 1
    """Gradient-accumulation steps (global batch = batch x grad_accum x gpus)."""
    checkpointing: Checkpointing = "none"
    """Activation checkpointing: none, selective (attention recomputed) or full (per layer)."""
    recompute_modules: tuple[str, ...] | None = None
    """Under selective checkpointing, the submodules whose forward re-runs in backward
    (Megatron-Core's ``--recompute-modules``; transformer_config.py at NVIDIA/Megatron-LM@d98e8a64:
    core_attn, the attention core, its default; mla_up_proj, the MLA up projections and their
    RoPE; layernorm, the two pre-norms; moe_act, the experts' activation; mlp, the dense MLP;
    shared_experts, the MoE layer's shared experts). None: core_attn. Megatron only; the
    time and the activations they free are both modelled (memory/activations/profile.py)."""
    cuda_graph_scope: tuple[str, ...] | None = None
    """The parts of each layer Megatron-Core captures in Transformer Engine CUDA graphs
    (``--cuda-graph-impl transformer_engine --cuda-graph-scope``; transformer_config.py at
    NVIDIA/Megatron-LM@b0cc2706, the 26.02 pin): attn, the input norm and the attention block;
    moe_router, the pre-MLP norm and the router; moe_preprocess, the token dispatcher's
    preprocess and first permute (needs moe_router); full, alone, Megatron-Core's own graphs of
    whole layers (``--enable-cuda-graph``, ``--cuda-graph-impl local``: no recompute, and a MoE
    layer only under token drop). Each layer's captured part replays as one
    graph forward and one backward, its kernels' host issue one launch
    (compute/graphs.py). None: no CUDA graph. Megatron only."""
    use_cache: bool = False
    """Training forward with transformers' KV cache: False (the default) models
    ``model(..., use_cache=False)``, as training loops commonly call it and as ``gpuplan trace``
    runs; True models a call that leaves the config's ``use_cache=True``: a DynamicCache copies K
    and V in every layer (checkpointing turns it off either way)."""
    loss_chunks: int = 1
    """The output projection and the cross-entropy run over this many chunks of the sequence
    (torchtune's CEWithChunkedOutputLoss, 8 chunks): the 16-bit logits of every chunk are kept,
    but each chunk is upcast to fp32 and reduced on its own. 1 (the default): the whole logits
    at once."""
    offload_activations: bool = False
    """The activations checkpointing keeps (each layer's input) are copied to host memory in the
    forward and back in the backward (torchtune's OffloadActivations; saved_tensors_hooks with
    a side stream that keeps the 5 latest copies on the GPU). Needs --checkpointing full."""
    fp8_param_gather: bool = False
    """An FP8 recipe keeps the linear weights as FP8 parameters and all-gathers them in FP8: no
    BF16 copy (Megatron ``--fp8-param-gather``; torchao ``enable_fsdp_float8_all_gather``)."""
    fp8_attention: bool = False
    """Under an FP8 recipe the attention core (QK^T, softmax-V) runs in FP8 too (TE
    ``fp8_dpa``); in inference the serving engine's FP8 attention kernel (vLLM's and SGLang's
    FlashAttention-3 FP8, TensorRT-LLM's FP8 context FMHA; Hopper); default: BF16."""
    fp8_amax_history: int | None = None
    """Under delayed scaling, the amaxes each quantized tensor keeps (Transformer Engine's
    ``DelayedScaling(amax_history_len=...)``; NeMo's ``fp8_amax_history_len``, Megatron's
    ``--fp8-amax-history-len``); None: the recipe's (TE's default 1024)."""
    first_last_layers_bf16: int = 0
    """Under a narrow recipe this many blocks at each end of the stack (the first N and the last
    N) stay BF16: their linear layers run 16-bit GEMMs and keep no narrow copies (Megatron
    ``--first-last-layers-bf16`` with ``--num-layers-at-start-in-bf16 N``
    ``--num-layers-at-end-in-bf16 N``; 0: every block narrow)."""
    activation_storage: ActivationStorage = "engine"
    """What a narrow recipe caches for backward. ``engine``: what the engine's own modules save
    (Megatron-Core over Transformer Engine: each block linear's quantized input, the MoE
    activation's 16-bit input). ``deepseek-v3``: DeepSeek-V3's own framework (arXiv 2412.19437
    sec. 3.3.3, "Low-Precision Activation"): the attention output, the output projection's input
    the attention backward reads too, in E5M6 (1.5 B; MLA's attention, the report's model); the
    MoE SwiGLU inputs (routed and shared experts) in FP8, the routed experts' output recomputed
    under ``recompute_modules`` moe_act (the shared expert's FP8 down-projection input is kept);
    and, with the norms recomputed (sec. 3.2.3, ``recompute_modules`` layernorm), no copy of a
    norm's output, quantized or not. Megatron only, under an FP8 recipe."""

    def __post_init__(self) -> None:
        check_fields(self)
        _check_loop(self)


@record
class OptimizerConfig:
    """The optimizer and how its step runs."""

    optimizer: str = "adamw"
    optimizer_states: OptimizerStates = "auto"
    """Dtype of optimizer states; ``auto`` follows the recipe (fp32, or bf16 for pure bf16)."""
    master_weights: MasterWeights = "auto"
    """Dtype of the master copy of the weights the optimizer steps, under a recipe that keeps
    one (mixed-*, the FP8/MXFP8/NVFP4 recipes); ``auto`` follows the recipe (fp32). bf16: NeMo
    with ``fp8_params`` over Apex's DistributedFusedAdam, which stores its parameter shards in
    its ``dtype`` (NVIDIA/NeMo@e938df32 megatron_base_model.py lines 802-812, store_params;
    NVIDIA/apex@f8e60c47 contrib/optimizers/distributed_fused_adam.py lines 449-476).
    remainder: the fp32 master as the bf16 weights plus a 16-bit remainder each (2 B a weight):
    NeMo's store_param_remainders for a bf16 O2 model over that optimizer at its fp32 dtype
    (megatron_base_model.py lines 802-810, same commit), Megatron-Core's precision-aware
    optimizer under bf16. none: no master, the optimizer steps the bf16 weights in place beside
    bf16 states: NeMo over that optimizer with its ``dtype`` the model's bf16 (store_params
    False; megatron_base_model.py lines 802-807, same commit). :data:`gpuplan.formats.
    _MASTER_BYTES` has the sources."""
    grad_dtype: GradDtype = "auto"
    """Dtype of the gradient buffer the backward accumulates the weight gradients into, the
    optimizer reads and the data-parallel reduction moves; ``auto`` follows the recipe (the
    weights' 16 bits under a mixed or FP8 recipe). fp32 under 16-bit weights: Apex's
    DistributedFusedAdam with no ``grad_sync_dtype``, which takes its ``dtype`` (fp32 by
    default: NVIDIA/apex@f8e60c47 contrib/optimizers/distributed_fused_adam.py lines 586-587)
    and allocates its contiguous grad buffer in it (lines 1099-1118), NeMo's ``main_grad`` a
    view of it (NVIDIA/NeMo@e938df32 nemo/core/optim/distributed_adam.py line 496);
    Megatron-Core's ``grad_reduce_in_fp32`` (``--accumulate-allreduce-grads-in-fp32``);
    DeepSeek-V3's gradients (arXiv 2412.19437 sec. 3.3.3: "gradients (used for batch size
    accumulation) are still retained in FP32")."""
    fused_optimizer: bool | None = None
    """None: the engine's (megatron, deepspeed and torchtitan fuse their Adam; auto does not).
    AdamW(fused=True): no full-size temporary in the step (DESIGN.md)."""
    optimizer_in_backward: bool = False
    """The optimizer step runs in the backward, one parameter at a time as its gradient is
    ready, and frees it (torchtune's optimizer_in_bwd; register_post_accumulate_grad_hook):
    gradients never exist all at once. Needs --grad-accum 1."""
    max_grad_norm: float | None = None
    """Clip the gradients' global norm to this each step (``clip_grad_norm_``; HF Trainer's
    ``max_grad_norm`` defaults to 1.0, torchtune's ``clip_grad_norm`` to none): the speed model
    times its passes over the gradients. None (the default): no clipping."""
    zero_grad_set_to_none: bool = True
    """``optimizer.zero_grad(set_to_none=...)`` between steps. True (torch >= 2.0's default, and
    what ``gpuplan trace`` runs) frees the gradients after each step: the next forward runs
    without them. False (torch < 2.0's default, so HF Trainer loops of that era) zeroes them in
    place: every gradient stays allocated through forward and backward, and backward sums each
    new gradient into it, as gradient accumulation does."""

    def __post_init__(self) -> None:
        check_fields(self)
        _check_optim(self)


@record
class ShardingConfig:
    """Where the model states live: ZeRO's stage, whose ZeRO, offload and DeepSpeed's gathering."""

    zero: int = 0
    """ZeRO stage: 0 = DDP (replicated), 1 = optimizer states, 2 = + gradients, 3 = + weights
    (FSDP full shard)."""
    sharding: Sharding | None = None
    """None: the engine's (deepspeed under auto, fsdp2 under fsdp2, torchtune and torchtitan).
    The implementation behind ``zero``: ``deepspeed`` (ZeRO: 16-bit weight shards beside an fp32
    master copy under mixed precision; ZeRO-3 gathers as DeepSpeed's coordinator does at its
    defaults, :mod:`gpuplan.engines.zero3`) or ``fsdp2``
    (PyTorch's ``fully_shard`` per block and on the root, as torchtitan and torchtune wrap: the
    fp32 shard is the master, the root unit stays gathered from forward into backward, gradients
    are reduce-scattered per block; LoRA under fsdp2 keeps the deepspeed states with FSDP's two
    gathered layers). ZeRO-2/3 only for fsdp2 (FSDP2 has no optimizer-only sharding)."""
    offload_optimizer: bool = False
    """Keep the fp32 master copy and optimizer states in host memory (ZeRO-Offload)."""
    stage3_max_live_parameters: int | None = None
    """DeepSpeed ZeRO-3's ``stage3_max_live_parameters``: its prefetch stops once this many
    parameter elements are gathered (None: DeepSpeed's default, 1e9). ZeRO-3 under deepspeed."""
    stage3_prefetch_bucket_size: int | None = None
    """DeepSpeed ZeRO-3's ``stage3_prefetch_bucket_size``: elements one prefetch round chooses
    at most (None: DeepSpeed's default, 5e7). ZeRO-3 under deepspeed."""
    dp_shard: int | None = None
    """Hybrid sharding (HSDP): the ZeRO-3 states sharded over groups of this many data-parallel
    ranks (``x cp``), the groups replicas of each other -- torch FSDP1's
    ``ShardingStrategy.HYBRID_SHARD`` (shard inside a node, replicate across nodes) and FSDP2's
    2-D mesh (torchtitan's ``data_parallel_shard_degree``, its ``data_parallel_replicate_degree``
    the data-parallel degree / this). The weights are all-gathered and the gradients
    reduce-scattered inside the group; each gradient shard is then all-reduced across the
    replicas. None: one group of every data-parallel rank (full sharding). ZeRO-3 under fsdp2."""

    def __post_init__(self) -> None:
        check_fields(self)
        _check_states(self)


@record
class LoraConfig:
    """LoRA / QLoRA adapters (none: the full model trains)."""

    lora_rank: int | None = None
    """Train LoRA adapters of this rank instead of the full model."""
    lora_targets: tuple[str, ...] | None = None
    """Module names the adapters attach to; None = PEFT's default for the family; ``all-linear``;
    ``linear_qkv``: one adapter over q, k and v fused (Megatron-Core's linear_qkv, NeMo's
    ``attention_qkv`` default)."""
    lora_base: str | None = None
    """Weight format of the frozen base under LoRA; ``nf4`` makes it QLoRA. None = the recipe's
    weight dtype."""
    lora_dropout: float = 0.0
    """PEFT ``lora_dropout`` (default 0.0): > 0 keeps a dropout mask and a dropped-out copy of
    each adapted layer's input."""

    def __post_init__(self) -> None:
        check_fields(self)
        _check_lora(self)


@record
class ServingConfig:
    """Inference: the weight format, the KV cache and the prefill's logits."""

    infer_precision: str = DEFAULT_INFER_PRECISION
    """Inference weight format (see ``gpuplan.formats.WEIGHT_FORMATS``); ``auto`` (the default):
    the checkpoint's shipped format where the engine and GPU load it, else bf16
    (``gpuplan.formats.resolve_infer_precision``)."""
    kv_dtype: str | None = None
    """KV-cache element format for inference; None = the inference compute dtype (16-bit)."""
    context: int | None = None
    """Inference: tokens held in the KV cache per sequence (prompt + generated); None = seq."""
    prefill_logits: PrefillLogits = "last"
    """Inference prefill computes logits for the last prompt position only (transformers'
    ``generate`` passes ``logits_to_keep=1``; vLLM does the same) or for every position (``all``:
    a plain forward over the prompt, as scoring or perplexity runs do)."""

    def __post_init__(self) -> None:
        check_fields(self)
        _check_serving(self)


@record
class ParallelLayout:
    """The parallel layout as asked: all GPUs, the degrees, the pipeline's shape and the nodes."""

    gpus: int = 1
    """Data-parallel GPUs (the ZeRO/FSDP world size)."""
    tp: int = 1
    """Tensor-parallel degree (Megatron column/row sharding inside each block)."""
    pp: int = 1
    """Pipeline-parallel stages."""
    cp: int = 1
    """Context-parallel degree (the sequence sharded over ranks, ring attention)."""
    ep: int = 1
    """Expert-parallel degree (MoE experts spread over ranks of the data-parallel group)."""
    sequence_parallel: bool = False
    """Megatron sequence parallelism over the TP group (norms and dropout sharded by sequence)."""
    distribute_checkpoints: bool = False
    """The layer inputs full checkpointing keeps are split over the TP group and all-gathered
    again for each layer's recompute (Megatron-LM's ``--distribute-saved-activations``,
    metaseq's ``--distribute-checkpointed-activations``): needs --tp > 1 and --checkpointing
    full; sequence parallelism already splits them."""
    pp_schedule: str = "1f1b"
    """Pipeline schedule: gpipe, 1f1b, interleaved:V (V model chunks per stage) or dualpipe
    (DeepSeek-V3's bidirectional schedule: two stages a rank, its all-to-all and pipeline
    sends hidden under the paired chunks' compute; arXiv 2412.19437 sec. 3.2.1)."""
    pp_embedding_part: bool = False
    """The token embedding counts as one layer-equivalent part of the pipeline split, on the
    first stage's first chunk (Megatron-LM's ``--account-for-embedding-in-pipeline-split``):
    that chunk holds one transformer layer fewer (none when parts are one layer long). No effect
    with pp 1."""
    pp_loss_part: bool = False
    """The final norm, output projection and loss count as one layer-equivalent part, on the
    last stage's last chunk (Megatron-LM's ``--account-for-loss-in-pipeline-split``)."""
    pp_first_stage_layers: int | None = None
    """Transformer layers on the first pipeline stage (an uneven split: Megatron-LM's
    ``--decoder-first-pipeline-num-layers``); the stages between the first and last split the
    rest evenly. None: the even split."""
    pp_last_stage_layers: int | None = None
    """Transformer layers on the last pipeline stage (Megatron-LM's
    ``--decoder-last-pipeline-num-layers``); None: the even split."""
    etp: int | None = None
    """Expert tensor-parallel degree (Megatron-Core's ``--expert-tensor-parallel-size``); None:
    the attention's TP. Below TP the MoE layers fold (MoE Parallel Folding, Liu et al. 2025,
    arXiv 2504.14960): EP spans TP x DP x CP / ETP ranks."""
    moe_capacity_factor: float | None = None
    """MoE expert capacity factor: each expert takes ``ceil(T x top-k / E x cf)`` of the (token,
    expert) rows of a rank's ``T`` tokens, the rest dropped and short experts padded to it
    (Megatron-Core's ``--moe-expert-capacity-factor`` with
    ``--moe-pad-expert-input-to-capacity``); None: dropless, Megatron's default."""
    mtp_layers: int | None = None
    """Multi-token-prediction depth trained beside the model (Megatron-Core's
    ``--mtp-num-layers``: megatron/training/arguments.py; DeepSeek-V3's MTP module, arXiv
    2412.19437 sec. 2.2): each depth one more transformer block (a copy of the model's last
    layer), a 2H -> H projection and its norms, on the last pipeline stage, the embedding and
    the output head shared with the model; None: none trained."""
    ep_overlap: bool = False
    """The expert-parallel all-to-alls of one micro-batch run beside another micro-batch's
    compute: Megatron-Core's batch-level EP overlap (``--overlap-moe-expert-parallel-comm
    --delay-wgrad-compute``, Megatron-Bridge's ``moe_a2a_overlap``), which merges the forward of
    micro-batch i+1 with the backward of micro-batch i, layer by layer, the all-to-alls on a
    communication stream (megatron/core/transformer/moe/README.md at NVIDIA/Megatron-LM@d98e8a64:
    "Overlaps All-to-All with computation by merging FWD-BWD passes of adjacent microbatches").
    Megatron only; needs --ep > 1, no full checkpointing, and interleaved:V when --pp > 1
    (transformer_config.py's checks there)."""
    moe_shared_expert_overlap: bool = False
    """The MoE layer's shared expert runs on its own stream beside the token dispatcher's
    all-to-alls (Megatron-Core's ``--moe-shared-expert-overlap``: shared_experts.py and
    token_dispatcher.py at NVIDIA/Megatron-LM@0d8e0714 -- its first linear and activation
    beside the dispatch, its second beside the combine, the backward likewise). Megatron only;
    the alltoall dispatcher only, not beside the batch-level EP overlap (transformer_config.py
    there); a model with shared experts. Megatron-Bridge's DeepSeek-V3 provider sets it."""
    moe_dispatcher: MoeDispatcher = "alltoall"
    """Megatron-Core's MoE token dispatcher: ``alltoall`` (MoEAlltoAllTokenDispatcher: permute,
    all-to-all, sort by expert, and back), ``deepep`` or ``hybridep`` (the flex dispatcher over
    DeepEP's / HybridEP's fused dispatch and combine kernels; Megatron-Bridge's
    ``moe_flex_dispatcher_backend``). Megatron only."""
    micro_batches: int | None = None
    """Micro-batches per step through the pipeline; None = grad_accum (one per accumulation)."""
    gpus_per_node: int = 8
    """GPUs per node on the node's own link (NVLink/NVSwitch or PCIe)."""
    inter_node: str | None = None
    """Link between nodes, per GPU (e.g. ib-400, roce-200, 100Gb/s); None = 400 Gb/s per GPU
    InfiniBand, stated in the output."""

    def __post_init__(self) -> None:
        check_fields(self)
        _check_parallel(self)


#: The Job's attribute holding each config, in the order the JSON's flat keys interleave them.
CONFIGS = {"execution": ExecutionConfig, "loop": TrainingLoop, "optim": OptimizerConfig,
           "states": ShardingConfig, "lora": LoraConfig, "serving": ServingConfig,
           "parallel": ParallelLayout}
