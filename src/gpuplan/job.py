"""What is being run: the one description every analysis (memory, speed, fit, solver) takes.

A :class:`Job` is keyword-only and validates itself: every bad value is rejected here, once, with a
message naming the value and the accepted form, so the CLI, the web layer and library users get the
same errors and the same defaults.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from dataclasses import fields, replace
from functools import cache, lru_cache
from typing import Literal, Union, get_args, get_origin, get_type_hints

from ._record import record
from .bounds import MAX_ARG_CHARS, check_int, check_number
from .engines.profiles import check_engine_job, check_engine_split, get_engine
from .errors import InputError, UnsupportedError, closest, shown
from .formats import OPTIMIZERS, TRAINING_RECIPES, WEIGHT_FORMATS, get_optimizer, get_recipe, get_weight_format
from .models import Architecture, Model, from_param_count

__all__ = ["Job", "Mode", "Checkpointing", "Attention", "Runtime", "ModelCode", "Sharding", "PP_SCHEDULES", "pp_chunks", "part_layers", "check_layout", "pipeline_fix", "tp_fix", "nearest", "divisors", "KV_DTYPES", "DEFAULT_SEQ", "default_seq",
           "DEFAULT_TRAIN_PRECISION", "DEFAULT_INFER_PRECISION",
           "seq_limit", "DEFAULT_MODEL_PARAMS"]

Mode = Literal["train", "infer", "both"]
Checkpointing = Literal["none", "selective", "full"]
Attention = Literal["eager", "sdpa"]
Runtime = Literal["auto", "eager", "compile", "cudagraphs"]
ModelCode = Literal["transformers", "torchtune"]
#: Which engine shards the model states under ZeRO: DeepSpeed's ZeRO (the default) or PyTorch's
#: FSDP2 (``fully_shard``); they hold different copies (docs/memory.md, "FSDP2").
Sharding = Literal["deepspeed", "fsdp2"]
#: Pipeline schedules; ``interleaved:V`` (V model chunks per stage) is spelled with its V.
PP_SCHEDULES = ("gpipe", "1f1b", "interleaved")

#: KV-cache element formats and their bytes.
KV_DTYPES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}

#: The default training recipe and inference weight format (the seed's case), defined once.
DEFAULT_TRAIN_PRECISION = "mixed-bf16"
DEFAULT_INFER_PRECISION = "bf16"

#: With no model named, a job (``gpuplan fit``, :meth:`Job.from_dict`) plans the source document's
#: example: a bare 7B-parameter model.
DEFAULT_MODEL_PARAMS = 7_000_000_000

#: Sequence length used when none is given and the architecture allows it.
DEFAULT_SEQ = 2048


def seq_limit(arch: Architecture) -> int:
    """The longest sequence the architecture runs: its position limit, or for a vision model its
    patches + the class token."""
    if arch.kind == "vision" and arch.patch_size:
        return arch.num_patches + 1
    return arch.max_position_embeddings


def default_seq(arch: Architecture | None) -> int:
    """The sequence length every analysis uses when none is given: the architecture's limit capped
    at :data:`DEFAULT_SEQ` (a vision model: its patches + [CLS]); DEFAULT_SEQ when unknown."""
    if arch is None:
        return DEFAULT_SEQ
    if arch.kind == "vision":
        return seq_limit(arch)
    return min(DEFAULT_SEQ, arch.max_position_embeddings or DEFAULT_SEQ)

#: Largest ZeRO stage.
_ZERO_STAGES = (0, 1, 2, 3)


def _choice(value: str, options: tuple[str, ...], what: str) -> str:
    if value not in options:
        near = closest(str(value)[:MAX_ARG_CHARS], options, n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        raise InputError(f"{what} {shown(value)}: expected one of {', '.join(options)}{hint}")
    return value


#: Job fields that are strings (a choice or a name), whole numbers with their range in
#: :mod:`gpuplan.bounds`, and booleans: their types are checked before their values.
_STR_FIELDS = ("mode", "engine", "precision", "infer_precision", "optimizer", "optimizer_states",
               "checkpointing", "attention", "prefill_logits", "runtime", "pp_schedule",
               "model_code", "sharding")
_OPT_STR_FIELDS = ("lora_base", "kv_dtype", "inter_node")
#: Whole-number fields and their range in :data:`gpuplan.bounds.BOUNDS`.
_INT_FIELDS = {"batch": "batch", "grad_accum": "grad_accum", "gpus": "gpus", "tp": "gpus",
               "pp": "gpus", "cp": "gpus", "ep": "gpus", "gpus_per_node": "gpus",
               "loss_chunks": "int"}
_OPT_INT_FIELDS = {"seq": "seq", "context": "context", "lora_rank": "lora_rank",
                   "micro_batches": "grad_accum", "stage3_max_live_parameters": "count",
                   "stage3_prefetch_bucket_size": "count"}
_BOOL_FIELDS = ("offload_optimizer", "fused_optimizer", "use_cache", "sequence_parallel",
                "optimizer_in_backward", "offload_activations", "pp_embedding_part",
                "pp_loss_part", "distribute_checkpoints")

#: Most LoRA target names one job takes.
_MAX_LORA_TARGETS = 1000


def _check_types(job: "Job") -> None:
    """Every field's type (bools are bools, numbers are in range, names are short strings);
    a list of LoRA targets becomes a tuple. One line naming the field on the first bad one."""
    if not isinstance(job.model, (str, Model)):
        raise InputError(f"model {shown(job.model)}: expected a name, a path or a Model "
                         f"(got {type(job.model).__name__})")
    if isinstance(job.model, str) and not 0 < len(job.model) <= MAX_ARG_CHARS:
        raise InputError(f"model {shown(job.model)}: expected a name or path of 1 to "
                         f"{MAX_ARG_CHARS} characters")
    for name in _STR_FIELDS + _OPT_STR_FIELDS:
        v = getattr(job, name)
        if not isinstance(v, str) and not (v is None and name in _OPT_STR_FIELDS):
            raise InputError(f"{name} {shown(v)}: expected a string (got {type(v).__name__})")
        if v is not None and len(v) > 256:
            raise InputError(f"{name} {shown(v)}: too long for a name; see --help for the choices")
    for name in _BOOL_FIELDS:
        v = getattr(job, name)
        if not isinstance(v, bool):
            raise InputError(f"{name} {shown(v)}: expected true or false (got "
                             f"{type(v).__name__})")
    for name, bound in {**_INT_FIELDS, **_OPT_INT_FIELDS}.items():
        v = getattr(job, name)
        if v is not None or name in _INT_FIELDS:
            check_int(v, bound, what=name)
    if isinstance(job.zero, bool) or not isinstance(job.zero, int):
        raise InputError(f"zero {shown(job.zero)}: expected a ZeRO stage 0, 1, 2 or 3")
    check_number(job.lora_dropout, "fraction", what="lora dropout")
    if job.max_grad_norm is not None:
        check_number(job.max_grad_norm, "grad_norm", what="max grad norm")
    if job.lora_targets is not None:
        object.__setattr__(job, "lora_targets", _targets(job.lora_targets))


def _targets(value: object) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise InputError(f"lora_targets {shown(value)}: expected a list of module names such "
                         "as ['q_proj', 'v_proj']")
    if not 0 < len(value) <= _MAX_LORA_TARGETS or not all(
            isinstance(t, str) and 0 < len(t) <= 256 for t in value):
        raise InputError(f"lora_targets {shown(value)}: expected 1 to {_MAX_LORA_TARGETS} "
                         "module names (strings) such as ['q_proj', 'v_proj']")
    return tuple(value)


@record
class Job:
    """A training and/or inference job on one model."""

    model: str | Model
    """Catalog name, config.json path, model directory, or a loaded :class:`Model`."""
    mode: Mode = "both"
    """``train``, ``infer`` or ``both``."""
    engine: str = "auto"
    """The engine that runs the job (:mod:`gpuplan.engines.profiles`): transformers, torchtune,
    deepspeed, fsdp2, torchtitan, megatron, vllm, sglang, trt-llm, or auto (transformers, in
    both modes; stated in the output). Its profile decides what ``runtime`` auto, ``model_code``
    and ``sharding`` mean when they are left out, and which layouts it runs. Under auto the layout
    is not held to transformers' (a model-parallel layout is planned as Megatron-LM shards it,
    with transformers' kernels), and the output says which engines run it."""
    precision: str = DEFAULT_TRAIN_PRECISION
    """Training precision recipe (see ``gpuplan.formats.TRAINING_RECIPES``)."""
    infer_precision: str = DEFAULT_INFER_PRECISION
    """Inference weight format (see ``gpuplan.formats.WEIGHT_FORMATS``)."""
    optimizer: str = "adamw"
    optimizer_states: Literal["auto", "fp32", "bf16"] = "auto"
    """Dtype of optimizer states; ``auto`` follows the recipe (fp32, or bf16 for pure bf16)."""
    batch: int = 1
    """Micro-batch size per GPU (sequences, or images for vision models)."""
    seq: int | None = None
    """Sequence length; None = the architecture's context, capped at 2048 (vision: its patches)."""
    grad_accum: int = 1
    """Gradient-accumulation steps (global batch = batch x grad_accum x gpus)."""
    gpus: int = 1
    """Data-parallel GPUs (the ZeRO/FSDP world size)."""
    zero: int = 0
    """ZeRO stage: 0 = DDP (replicated), 1 = optimizer states, 2 = + gradients, 3 = + weights
    (FSDP full shard)."""
    offload_optimizer: bool = False
    """Keep the fp32 master copy and optimizer states in host memory (ZeRO-Offload)."""
    lora_rank: int | None = None
    """Train LoRA adapters of this rank instead of the full model."""
    lora_targets: tuple[str, ...] | None = None
    """Module names the adapters attach to; None = PEFT's default for the family; ``all-linear``."""
    lora_base: str | None = None
    """Weight format of the frozen base under LoRA; ``nf4`` makes it QLoRA. None = the recipe's
    weight dtype."""
    checkpointing: Checkpointing = "none"
    """Activation checkpointing: none, selective (attention recomputed) or full (per layer)."""
    attention: Attention = "sdpa"
    """Attention implementation: eager keeps s x s scores; sdpa (flash/mem-efficient) keeps O(s)."""
    kv_dtype: str | None = None
    """KV-cache element format for inference; None = the inference compute dtype (16-bit)."""
    context: int | None = None
    """Inference: tokens held in the KV cache per sequence (prompt + generated); None = seq."""
    fused_optimizer: bool = False
    """AdamW(fused=True): no full-size temporary in the step (DESIGN.md)."""
    use_cache: bool = False
    """Training forward with transformers' KV cache: False (the default) models
    ``model(..., use_cache=False)``, as training loops commonly call it and as ``gpuplan trace``
    runs; True models a call that leaves the config's ``use_cache=True``: a DynamicCache copies K
    and V in every layer (checkpointing turns it off either way)."""
    lora_dropout: float = 0.0
    """PEFT ``lora_dropout`` (default 0.0): > 0 keeps a dropout mask and a dropped-out copy of
    each adapted layer's input."""
    zero_grad_set_to_none: bool = True
    """``optimizer.zero_grad(set_to_none=...)`` between steps. True (torch >= 2.0's default, and
    what ``gpuplan trace`` runs) frees the gradients after each step: the next forward runs
    without them. False (torch < 2.0's default, so HF Trainer loops of that era) zeroes them in
    place: every gradient stays allocated through forward and backward, and backward sums each
    new gradient into it, as gradient accumulation does."""
    max_grad_norm: float | None = None
    """Clip the gradients' global norm to this each step (``clip_grad_norm_``; HF Trainer's
    ``max_grad_norm`` defaults to 1.0, torchtune's ``clip_grad_norm`` to none): the speed model
    times its passes over the gradients. None (the default): no clipping."""
    prefill_logits: Literal["all", "last"] = "last"
    """Inference prefill computes logits for the last prompt position only (transformers'
    ``generate`` passes ``logits_to_keep=1``; vLLM does the same) or for every position (``all``:
    a plain forward over the prompt, as scoring or perplexity runs do)."""
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
    the model's forward, outside the loss, and in eager its own RoPE chain (timed)."""
    loss_chunks: int = 1
    """The output projection and the cross-entropy run over this many chunks of the sequence
    (torchtune's CEWithChunkedOutputLoss, 8 chunks): the 16-bit logits of every chunk are kept,
    but each chunk is upcast to fp32 and reduced on its own. 1 (the default): the whole logits
    at once."""
    optimizer_in_backward: bool = False
    """The optimizer step runs in the backward, one parameter at a time as its gradient is
    ready, and frees it (torchtune's optimizer_in_bwd; register_post_accumulate_grad_hook):
    gradients never exist all at once. Needs --grad-accum 1."""
    offload_activations: bool = False
    """The activations checkpointing keeps (each layer's input) are copied to host memory in the
    forward and back in the backward (torchtune's OffloadActivations; saved_tensors_hooks with
    a side stream that keeps the 5 latest copies on the GPU). Needs --checkpointing full."""
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
    """Pipeline schedule: gpipe, 1f1b or interleaved:V (V model chunks per stage)."""
    pp_embedding_part: bool = False
    """The token embedding counts as one layer-equivalent part of the pipeline split, on the
    first stage's first chunk (Megatron-LM's ``--account-for-embedding-in-pipeline-split``):
    that chunk holds one transformer layer fewer (none when parts are one layer long). No effect
    with pp 1."""
    pp_loss_part: bool = False
    """The final norm, output projection and loss count as one layer-equivalent part, on the
    last stage's last chunk (Megatron-LM's ``--account-for-loss-in-pipeline-split``)."""
    micro_batches: int | None = None
    """Micro-batches per step through the pipeline; None = grad_accum (one per accumulation)."""
    gpus_per_node: int = 8
    """GPUs per node on the node's own link (NVLink/NVSwitch or PCIe)."""
    inter_node: str | None = None
    """Link between nodes, per GPU (e.g. ib-400, roce-200, 100Gb/s); None = 400 Gb/s per GPU
    InfiniBand, stated in the output."""
    sharding: Sharding | None = None
    """None: the engine's (deepspeed under auto, fsdp2 under fsdp2, torchtune and torchtitan).
    The implementation behind ``zero``: ``deepspeed`` (ZeRO: 16-bit weight shards beside an fp32
    master copy under mixed precision; ZeRO-3 gathers as DeepSpeed's coordinator does at its
    defaults, :mod:`gpuplan.engines.zero3`) or ``fsdp2``
    (PyTorch's ``fully_shard`` per block and on the root, as torchtitan and torchtune wrap: the
    fp32 shard is the master, the root unit stays gathered from forward into backward, gradients
    are reduce-scattered per block; LoRA under fsdp2 keeps the deepspeed states with FSDP's two
    gathered layers). ZeRO-2/3 only for fsdp2 (FSDP2 has no optimizer-only sharding)."""
    stage3_max_live_parameters: int | None = None
    """DeepSpeed ZeRO-3's ``stage3_max_live_parameters``: its prefetch stops once this many
    parameter elements are gathered (None: DeepSpeed's default, 1e9). ZeRO-3 under deepspeed."""
    stage3_prefetch_bucket_size: int | None = None
    """DeepSpeed ZeRO-3's ``stage3_prefetch_bucket_size``: elements one prefetch round chooses
    at most (None: DeepSpeed's default, 5e7). ZeRO-3 under deepspeed."""

    def __post_init__(self) -> None:
        if not isinstance(self.engine, str):
            raise InputError(f"engine {shown(self.engine)}: expected a string (got "
                             f"{type(self.engine).__name__})")
        profile = get_engine(self.engine)
        if self.model_code is None:
            object.__setattr__(self, "model_code", profile.model_code)
        if self.sharding is None:
            object.__setattr__(self, "sharding", profile.sharding)
        if profile.pp_parts == "always" and self.pp > 1 and self.engine != "auto":
            object.__setattr__(self, "pp_embedding_part", True)
            object.__setattr__(self, "pp_loss_part", True)
        _check_types(self)
        _choice(self.mode, get_args(Mode), "mode")
        if self.precision not in TRAINING_RECIPES:
            get_recipe(self.precision)  # raises with suggestions
        if self.infer_precision not in WEIGHT_FORMATS:
            get_weight_format(self.infer_precision)
        if self.optimizer not in OPTIMIZERS:
            get_optimizer(self.optimizer)
        _choice(self.optimizer_states, ("auto", "fp32", "bf16"), "optimizer states")
        _choice(self.checkpointing, get_args(Checkpointing), "checkpointing")
        _choice(self.attention, get_args(Attention), "attention")
        if self.zero not in _ZERO_STAGES:
            raise InputError(f"zero {shown(self.zero)}: expected a ZeRO stage 0, 1, 2 or 3")
        if self.lora_base is not None:
            if self.lora_rank is None:
                raise InputError("lora base format given without a LoRA rank; add --lora-rank R")
            get_weight_format(self.lora_base)
        if self.lora_targets is not None and self.lora_rank is None:
            raise InputError("LoRA targets given without a LoRA rank; add --lora-rank R")
        if self.kv_dtype is not None and self.kv_dtype not in KV_DTYPES:
            raise InputError(f"kv dtype {shown(self.kv_dtype)}: expected one of "
                             f"{', '.join(KV_DTYPES)}")
        _choice(self.prefill_logits, ("all", "last"), "prefill logits")
        if self.offload_optimizer and self.optimizer == "sgd":
            raise InputError("--offload-optimizer with sgd: plain SGD has no state to offload")
        _choice(self.runtime, get_args(Runtime), "runtime")
        _choice(self.model_code, get_args(ModelCode), "model code")
        _choice(self.sharding, get_args(Sharding), "sharding")
        if self.sharding == "fsdp2" and self.zero == 1:
            raise InputError("zero 1 with sharding fsdp2: FSDP2 shards parameters, gradients and "
                             "optimizer states together; use --zero 2 (reshard_after_forward="
                             "False) or 3, or --sharding deepspeed")
        for name in ("stage3_max_live_parameters", "stage3_prefetch_bucket_size"):
            v = getattr(self, name)
            if v is not None and (self.zero != 3 or self.sharding != "deepspeed"):
                raise InputError(
                    f"{name.replace('_', ' ')} {v} with zero {self.zero} under sharding "
                    f"{self.sharding}: it is a DeepSpeed ZeRO-3 setting; use --zero 3 with "
                    f"--sharding deepspeed, or drop it")
        if self.optimizer_in_backward and self.grad_accum > 1:
            raise InputError("--optimizer-in-backward with --grad-accum "
                             f"{self.grad_accum}: each step runs as its gradient is ready, so "
                             "gradients cannot accumulate; use --grad-accum 1")
        if self.optimizer_in_backward and self.offload_optimizer:
            raise InputError("--optimizer-in-backward with --offload-optimizer: the step runs "
                             "on the GPU inside the backward; drop one of them")
        if self.offload_activations and self.checkpointing != "full":
            raise InputError("--offload-activations offloads what full checkpointing keeps "
                             "(each layer's input), as torchtune requires; add --checkpointing "
                             "full")
        self._check_layout()
        if self.engine != "auto":
            check_engine_job(profile, self)

    @property
    def engine_profile(self):
        """The profile of the engine (``auto``: transformers')."""
        return get_engine(self.engine)

    def _check_layout(self) -> None:
        """The parallel layout's own consistency (what needs the architecture — heads divisible
        by TP, layers per stage, experts per EP rank — is checked where the layout is planned)."""
        for name in ("tp", "pp", "cp", "ep", "gpus_per_node"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InputError(f"{name} {v!r}: expected a whole number >= 1")
        if self.micro_batches is not None and (isinstance(self.micro_batches, bool) or not
                                               isinstance(self.micro_batches, int)
                                               or self.micro_batches < 1):
            raise InputError(f"micro batches {self.micro_batches!r}: expected a whole number >= 1")
        if (self.micro_batches is not None and self.grad_accum > 1
                and self.micro_batches != self.grad_accum):
            raise InputError(f"micro batches {self.micro_batches} and --grad-accum "
                             f"{self.grad_accum} differ: a pipeline's micro-batches are its "
                             "accumulation steps, one number per step; give one of them")
        if not isinstance(self.sequence_parallel, bool):
            raise InputError(f"sequence parallel {self.sequence_parallel!r}: expected true or false")
        pp_chunks(self.pp_schedule)
        model_parallel = self.tp * self.pp * self.cp
        if self.gpus % model_parallel:
            lo = self.gpus // model_parallel * model_parallel
            near = " or ".join(str(n) for n in (lo, lo + model_parallel) if n)
            raise InputError(f"gpus {self.gpus}: not a multiple of tp x pp x cp = "
                             f"{model_parallel}; use --gpus {near}")
        if self.sequence_parallel and self.tp == 1:
            raise InputError("sequence parallel without tensor parallel: it shards over the TP "
                             "group; add --tp N (N > 1) or drop --sequence-parallel")
        if self.distribute_checkpoints:
            if self.tp == 1:
                raise InputError("distribute checkpoints without tensor parallel: the layer "
                                 "inputs are split over the TP group; add --tp N (N > 1) or "
                                 "drop --distribute-checkpoints")
            if self.checkpointing != "full":
                raise InputError(f"distribute checkpoints with --checkpointing "
                                 f"{self.checkpointing}: only full checkpointing keeps layer "
                                 "inputs to split; add --checkpointing full or drop "
                                 "--distribute-checkpoints")
            if self.sequence_parallel:
                raise InputError("distribute checkpoints with sequence parallelism: the layer "
                                 "inputs are already split over the TP group; drop one")
        if self.inter_node is not None and (not isinstance(self.inter_node, str)
                                            or not self.inter_node.strip()):
            raise InputError(f"inter node {self.inter_node!r}: expected a link name or a rate "
                             "such as ib-400 or 400Gb/s")

    def check_pipeline_shaping(self, spell=lambda field: field) -> None:
        """Refuse the options that shape a pipeline when there is none (``pp`` 1), which would
        otherwise do nothing in silence: ``pp_schedule`` other than 1f1b, ``pp_embedding_part``,
        ``pp_loss_part``, ``micro_batches`` (a pipeline's; accumulation without one is
        ``grad_accum``). Called where a user's job comes in (the CLI, the web API), not on the
        jobs the planner derives; ``spell`` names a field as that user wrote it."""
        if self.pp > 1:
            return
        shaping = [f for f in ("pp_schedule", "pp_embedding_part", "pp_loss_part",
                               "micro_batches")
                   if getattr(self, f) not in (None, False, "1f1b")]
        if not shaping:
            return
        names = ", ".join(spell(f) for f in shaping)
        one = len(shaping) == 1
        fix = (f"give {spell('pp')} 2 or more, or drop {'it' if one else 'them'}")
        if "micro_batches" in shaping:
            fix += (f" ({spell('grad_accum')} {self.micro_batches} accumulates micro-batches "
                    "without a pipeline)")
        raise InputError(f"{names} without {spell('pp')}: {'it shapes' if one else 'they shape'}"
                         f" a pipeline, and there is none; {fix}")

    def require_data_parallel(self, what: str) -> None:
        """Until the model-parallel planner lands (issue 11), a layout with TP/PP/CP/EP or
        sequence parallelism is refused in one line rather than planned as data parallel."""
        if self.tp * self.pp * self.cp * self.ep > 1 or self.sequence_parallel:
            raise UnsupportedError(
                f"{what} with --tp/--pp/--cp/--ep/--sequence-parallel is not built yet; plan "
                "data parallel (--gpus N --zero 0..3) for now")

    @property
    def dp(self) -> int:
        """Data-parallel degree: all GPUs over tensor x pipeline x context parallel."""
        return self.gpus // (self.tp * self.pp * self.cp)

    @property
    def trains(self) -> bool:
        return self.mode in ("train", "both")

    @property
    def infers(self) -> bool:
        return self.mode in ("infer", "both")

    @property
    def global_batch(self) -> int:
        """Sequences per optimizer step: the micro-batch x its micro-batches per step x the
        data-parallel ranks (tensor, pipeline and context ranks share a sequence)."""
        return self.batch * (self.micro_batches or self.grad_accum) * self.dp

    def to_dict(self) -> dict:
        """Every field, JSON-ready (the ``"job"`` object of ``gpuplan fit --json``): the model as
        its name or path when it is a string, else the loaded :class:`Model`'s name; tuples as
        lists. :meth:`from_dict` reads it back (for a model named by a string)."""
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> "Job":
        """A Job from a dict of its fields (as :meth:`to_dict` writes them, e.g. a JSON body).

        Keys left out take the Job's defaults, which are the CLI's (no ``model``: a bare
        7B-parameter model, as ``gpuplan fit`` with no model). An unknown key, or a value of the
        wrong JSON type, is an :class:`InputError` naming it; a list becomes a tuple where the
        field is a tuple. The values are then validated as every Job is.
        """
        if not isinstance(d, Mapping):
            raise InputError(f"job: expected an object of job fields, found {type(d).__name__}")
        types_ = _field_types()
        kw: dict = {}
        for key, value in d.items():
            if key not in types_:
                near = closest(str(key)[:MAX_ARG_CHARS], types_)
                hint = f"; did you mean {', '.join(map(repr, near))}?" if near else \
                    f"; job keys are {', '.join(types_)}"
                raise InputError(f"unknown job key {shown(key)}{hint}")
            kw[key] = _from_json(key, value, types_[key])
        if "model" not in kw:
            kw["model"] = from_param_count(DEFAULT_MODEL_PARAMS)
        return cls(**kw)

    def with_(self, **changes: object) -> "Job":
        """A copy with some fields changed (validated again). A new engine takes its own
        model code and sharding unless they are changed too."""
        if "engine" in changes and changes["engine"] != self.engine:
            changes.setdefault("model_code", None)
            changes.setdefault("sharding", None)
        return replace(self, **changes)

    def _evolve(self, **changes: object) -> "Job":
        """A copy with fields changed *without* validation, for searches that only set values
        they took from the accepted sets (the solver); everything else uses :meth:`with_`."""
        new = object.__new__(Job)
        new.__dict__.update(self.__dict__)
        new.__dict__.update(changes)
        return new


def pp_chunks(schedule: object) -> tuple[str, int]:
    """(schedule, model chunks per stage) of a ``pp_schedule`` spelling; 1 chunk unless
    ``interleaved:V``."""
    text = str(schedule).strip().lower()
    name, _, v = text.partition(":")
    if name not in PP_SCHEDULES or (v and name != "interleaved"):
        raise InputError(f"pp schedule {schedule!r:.40}: expected gpipe, 1f1b or interleaved:V "
                         "(V model chunks per stage, e.g. interleaved:2)")
    if name != "interleaved":
        return name, 1
    if not (v.isascii() and v.isdigit()) or not 2 <= int(v) <= 64:
        raise InputError(f"pp schedule {schedule!r:.40}: interleaved needs its chunks per stage, "
                         "2 to 64, e.g. interleaved:2")
    return name, int(v)


def pipeline_fix(units: int, pp: int, chunks: int) -> str:
    """The way out when ``pp x chunks`` pipeline parts outnumber the ``units`` (layers, and the
    embedding / loss parts) to split: fewer chunks when the stages alone fit, else fewer stages."""
    if chunks > 1 and units >= 2 * pp:
        return f"--pp-schedule interleaved:{units // pp} or fewer chunks"
    if chunks > 1 and units >= pp:
        return "--pp-schedule 1f1b (one chunk per stage)"
    return f"--pp {units} or less"


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def nearest(v: int, valid: list[int]) -> str:
    """The valid values just below and above ``v``, as "A or B"."""
    lo = max((x for x in valid if x < v), default=None)
    hi = min((x for x in valid if x > v), default=None)
    return " or ".join(str(x) for x in (lo, hi) if x is not None) or str(min(valid))


def tp_fix(t: int, valid: list[int], room: int, rest: int) -> str:
    """The TP degrees nearest ``t`` among ``valid`` (:func:`nearest`); those that also divide
    ``room`` (the GPUs per pipeline x context group, 0 when the GPU count is not a multiple of
    ``rest`` = pp x cp) first, so the data-parallel degree comes out whole, the nearest others
    said with the GPU count they need."""
    near = nearest(t, valid)
    whole = [d for d in valid if room and room % d == 0]
    if not whole or nearest(t, whole) == near:
        return near
    return f"{nearest(t, whole)} (or {near} with --gpus a multiple of it" \
        + (f" x {rest})" if rest > 1 else ")")


@lru_cache(maxsize=256)
def part_layers(num_layers: int, pp: int, chunks: int = 1, embedding: bool = False,
                loss: bool = False) -> tuple[int, ...]:
    """Transformer layers of each of the ``pp * chunks`` pipeline parts, in model order (part
    ``k`` is chunk ``k // pp`` of stage ``k % pp``). The units split are the layers, plus one for
    the embedding before them (``embedding``) and one for the head and loss after them
    (``loss``), as Megatron-LM's ``--account-for-{embedding,loss}-in-pipeline-split`` count them;
    ``units // parts`` each, the first ``units % parts`` parts one unit longer (DeepSpeed's
    ``partition_uniform``; Megatron refuses a split that does not divide). The embedding's unit is
    the first part's first, the loss's the last part's last: those parts hold one layer fewer.

    Raises :class:`InputError` when a part would hold nothing, or a stage no transformer layer."""
    parts = pp * chunks
    units = num_layers + (int(embedding) + int(loss) if pp > 1 else 0)
    if parts > units:
        what = f"pp {pp}" + (f" x {chunks} chunks" if chunks > 1 else "")
        counted = (" + the embedding" if embedding else "") + (" + the loss" if loss else "")
        raise InputError(f"{what}: {num_layers} layers{counted} are {units} parts of the "
                         f"pipeline split, fewer than its {parts}; use "
                         f"{pipeline_fix(units, pp, chunks)}")
    base, extra = divmod(units, parts)
    out = [base + (1 if k < extra else 0) for k in range(parts)]
    if pp > 1:
        out[0] -= int(embedding)
        out[-1] -= int(loss)
    empty = [s for s in range(pp) if not any(out[s::pp])]
    if empty:
        raise InputError(f"pp {pp}: stage {empty[0]} would hold only the "
                         f"{'embedding' if empty[0] == 0 else 'head and loss'} and no "
                         f"transformer layer ({num_layers} layers); use --pp {pp - 1} or less")
    return tuple(out)


def check_layout(arch: Architecture | None, job: "Job", seq: int | None = None) -> None:
    """Raise one :class:`InputError` line (the value and the nearest valid ones) when the job's
    layout does not fit the architecture: heads and MLP widths divisible by TP (K/V heads split
    or replicated evenly), a transformer layer in every pipeline part, experts divisible by EP
    and EP inside the data-parallel x context-parallel group, ring attention's balanced
    chunks. The one check behind fit, speed, trace and cluster (memory and compute both call
    it); ``seq``: the sequence the caller resolved (default ``job.seq``; None skips the
    sequence's checks)."""
    if job.tp == job.pp == job.cp == job.ep == 1:
        return
    if arch is None:
        raise InputError("tp/pp/cp/ep > 1 needs the architecture (a catalog name or a "
                         "config.json), not a bare parameter count")
    seq = job.seq if seq is None else seq
    _check_tp(arch, job, seq)
    _check_pp(arch, job)
    _check_cp_ep(arch, job, seq)


def _check_tp(arch: Architecture, job: "Job", seq: int | None) -> None:
    t = job.tp
    if t == 1:
        return
    h, kv = arch.num_heads, arch.num_kv_heads
    rest = job.pp * job.cp
    room = job.gpus // rest if job.gpus % rest == 0 else 0

    if h % t:
        raise InputError(f"tp {t}: {arch.name} has {h} attention heads, not divisible by "
                         f"{t}; use --tp {tp_fix(t, divisors(h), room, rest)}")
    if kv % t and t % kv:
        ok = [d for d in divisors(h) if kv % d == 0 or d % kv == 0]
        raise InputError(f"tp {t}: {arch.name}'s {kv} K/V heads neither split over {t} ranks "
                         f"nor replicate evenly; use --tp {tp_fix(t, ok, room, rest)}")
    widths = {arch.intermediate_size, arch.moe_intermediate_size,
              arch.shared_expert_intermediate_size} - {0}
    for w in sorted(widths):
        if w % t:
            raise InputError(f"tp {t}: MLP width {w} is not divisible by {t}; use --tp "
                             f"{tp_fix(t, [d for d in divisors(h) if w % d == 0], room, rest)}")
    if job.sequence_parallel and seq is not None and seq % t:
        raise InputError(f"seq {seq}: sequence parallelism splits the sequence over tp "
                         f"{t}; use a multiple of {t}")


def _check_pp(arch: Architecture, job: "Job") -> None:
    _, chunks = pp_chunks(job.pp_schedule)
    parts = job.pp * chunks
    if job.engine != "auto":
        check_engine_split(get_engine(job.engine), arch.num_layers, job.pp, chunks,
                           job.pp_embedding_part, job.pp_loss_part)
    if (job.pp_embedding_part or job.pp_loss_part) and job.pp > 1:
        part_layers(arch.num_layers, job.pp, chunks, job.pp_embedding_part, job.pp_loss_part)
        return
    if parts > arch.num_layers:
        what = f"pp {job.pp}" + (f" x {chunks} chunks" if chunks > 1 else "")
        raise InputError(f"{what}: {arch.name} has {arch.num_layers} layers, fewer than the "
                         f"{parts} pipeline parts; use "
                         f"{pipeline_fix(arch.num_layers, job.pp, chunks)}")


def _check_cp_ep(arch: Architecture, job: "Job", seq: int | None) -> None:
    cp, ep = job.cp, job.ep
    if cp > 1:
        if job.attention == "eager":
            raise InputError(f"cp {cp}: context parallelism runs ring attention over "
                             "flash kernels; use --attention sdpa")
        if seq is not None and seq % (2 * cp):
            raise InputError(f"seq {seq}: context parallel {cp} splits the sequence "
                             f"into {2 * cp} balanced chunks; use a multiple of {2 * cp}")
    if ep == 1:
        return
    e = arch.num_experts
    if not e:
        raise InputError(f"ep {ep}: {arch.name} has no experts; drop --ep")
    if e % ep:
        raise InputError(f"ep {ep}: {arch.name} has {e} experts, not divisible by "
                         f"{ep}; use --ep {nearest(ep, divisors(e))}")
    group = job.dp * cp
    if group % ep:
        raise InputError(f"ep {ep}: experts are spread over the data-parallel x context-"
                         f"parallel group ({group} ranks); use --ep "
                         f"{nearest(ep, [d for d in divisors(group) if e % d == 0])}")


def _plain(value: object) -> object:
    if isinstance(value, Model):
        return value.name
    if isinstance(value, tuple):
        return list(value)
    return value


@cache
def _field_types() -> dict[str, object]:
    """Job field -> its resolved annotation, in field order."""
    hints = get_type_hints(Job)
    return {f.name: hints[f.name] for f in fields(Job)}


def _alternatives(hint: object) -> tuple:
    if get_origin(hint) in (Union, types.UnionType):
        return get_args(hint)
    return (hint,)


def _accepts(t: object, value: object) -> tuple[bool, object]:
    """Whether a JSON value fits one type of a field's annotation, and the value to use."""
    if t is type(None):
        return value is None, None
    if t is bool:
        return isinstance(value, bool), value
    if t is int:
        return isinstance(value, int) and not isinstance(value, bool), value
    if t is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return ok, float(value) if ok else value
    if t is str or get_origin(t) is Literal:  # a Literal's choice is checked by __post_init__
        return isinstance(value, str), value
    if get_origin(t) is tuple:
        ok = isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)
        return ok, tuple(value) if ok else value
    return False, value  # Model: a dict names its model by a string


_KIND = {bool: "true or false", int: "a whole number", float: "a number", str: "a string",
         type(None): "null"}


def _from_json(key: str, value: object, hint: object) -> object:
    alts = _alternatives(hint)
    for t in alts:
        ok, out = _accepts(t, value)
        if ok:
            return out
    kinds = [_KIND.get(t) or ("a list of strings" if get_origin(t) is tuple else
                              "one of " + ", ".join(get_args(t)) if get_origin(t) is Literal
                              else "") for t in alts]
    raise InputError(f"{key} {shown(value)}: expected {' or '.join(k for k in kinds if k)}")
