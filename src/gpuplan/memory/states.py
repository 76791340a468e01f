"""The model states of a training job: weights, gradients, the fp32 master copy and the optimizer
states, for the whole model or for LoRA adapters on a frozen base, sharded over the data-parallel
group as the ZeRO stage says, the optimizer's part offloaded to host memory when asked.

They do not depend on batch or sequence, so they are computed once per model and job knobs."""

from __future__ import annotations

import math
from dataclasses import replace

from .._record import record
from ..errors import UnsupportedError, opt

from ..formats import (
    BNB_MIN_PAGED_SIZE, TrainingRecipe, get_optimizer, get_weight_format, optimizer_state_bytes,
    fp32_kept_params,
    weights_bytes_in_format,
)
from ..fp8 import NARROW_RECIPES, amax_history_bytes, fp8_weight_bytes, narrow_blocks
from ..job import Job
from ..models import Model, ParamTensor
from .fsdp import FsdpUnits, fsdp_units, shard_elements
from .lora import lora_tensors
from .optimizer import optimizer_step_temporaries
from ..engines.zero3 import MAX_LIVE, PREFETCH_BUCKET, count_text, deepspeed_gathered

__all__ = ["shard", "States", "train_states"]


def shard(nbytes: int, n: int) -> int:
    """Bytes one of ``n`` ranks holds of a buffer sharded evenly (padded up, as ZeRO pads)."""
    return -(-nbytes // n)


@record(kw_only=False)
class States:
    """The batch-independent part of a training job's memory (cached per model and job knobs)."""

    state_b: int
    trainable: int
    base: int
    base_label: str
    weights_trainable: int
    grads: int
    master: int
    opt: int
    host: int
    gathered: int
    step_tmp: int
    step_detail: str
    notes: tuple[str, ...]
    paged: int = 0
    """Bytes of ``opt`` in CUDA managed memory (a bitsandbytes paged optimizer)."""
    gathered_note: str = ""
    """How ``gathered`` was reckoned (DeepSpeed's coordinator, or FSDP's wrapped units)."""
    gathered_label: str = "gathered ZeRO-3/FSDP units"
    gathered_kept: int = 0
    """Of ``gathered``, the bytes still gathered in the optimizer step (after the backward
    released the rest): DeepSpeed's persisted small parameters."""
    fp8: int = 0
    """Bytes of a narrow recipe's persistent weight copies (FP8 weights, their transposes or
    columnwise copies, block scales) and its amax histories (:mod:`gpuplan.fp8`)."""
    fp8_label: str = ""
    fp8_note: str = ""
    """Where the copies were reckoned: per-tensor FP8's transposes kept (a TN-only GPU, or none
    known) or not (a GPU whose FP8 GEMMs take any layout)."""
    master_b: int = 4
    """Bytes of one element of the master copy (``master_weights``: 4, or 2 for bf16; 0 for
    none, the optimizer stepping the 16-bit weights)."""
    master_remainder: bool = False
    """The master line holds 16-bit remainders of the fp32 master, its top half the 16-bit
    weights (``master_weights`` remainder)."""
    fsdp: FsdpUnits | None = None
    """FSDP2's unit sizes (``sharding="fsdp2"``, ZeRO-2/3): the gathered parameters then vary
    along the step (the timeline places them) and ``gathered`` is 0."""


_STATES: dict[tuple, tuple[Model, States]] = {}


def zero_shards(job: Job) -> int:
    """Ranks ZeRO/FSDP shards the states over: the job's GPUs (its data-parallel group), or under
    hybrid sharding its shard group (``dp_shard``: HYBRID_SHARD keeps one whole copy of the
    states in each group, the groups replicas)."""
    return job.gpus if job.dp_shard is None else min(job.gpus, job.dp_shard)


def train_states(model: Model, job: Job, non_tn_fp8: bool = False) -> States:
    """The model states of ``job`` on ``model``, computed once per model and job knobs.
    ``non_tn_fp8``: the GPU's FP8 GEMMs take any layout (:func:`gpuplan.fp8.non_tn_fp8_gemm`:
    sm_100/sm_103), so per-tensor FP8 weights keep no transpose; False (no GPU known, Hopper,
    Ada, sm_120): they do."""
    non_tn_fp8 = bool(non_tn_fp8) and _narrow_tn_only(job)
    key = (id(model), non_tn_fp8, job.precision, job.optimizer, job.optimizer_states,
           job.master_weights, job.grad_dtype, job.lora_rank,
           job.lora_targets, job.lora_base, job.gpus, job.zero, job.offload_optimizer,
           job.fused_optimizer, job.sharding, job.checkpointing,
           job.stage3_max_live_parameters, job.stage3_prefetch_bucket_size,
           job.fp8_param_gather, job.first_last_layers_bf16, job.dp_shard, job.fp8_amax_history)
    hit = _STATES.get(key)
    if hit is not None and hit[0] is model:
        return hit[1]
    st = _compute_states(model, job, non_tn_fp8)
    if len(_STATES) > 4096:
        _STATES.clear()
    _STATES[key] = (model, st)
    return st


@record(kw_only=False)
class _Trained:
    """What is trained: the whole model, or LoRA adapters on a frozen base."""

    tensors: tuple[ParamTensor, ...] | None
    """The trainable tensors, where the layer shapes are known."""
    count: int
    base: int
    """Bytes of the frozen base (0 without LoRA)."""
    base_label: str
    notes: tuple[str, ...]


def _what_is_trained(model: Model, job: Job, recipe: TrainingRecipe) -> _Trained:
    n = model.params.total
    if job.lora_rank is None:
        return _Trained(tensors=model.tensors or None, count=n, base=0, base_label="", notes=())
    adapters = lora_tensors(model, job.lora_rank, job.lora_targets)
    trainable = sum(t.total for t in adapters)
    if job.lora_base is not None:
        fmt = get_weight_format(job.lora_base)
        base_bytes = weights_bytes_in_format(fmt, model.tensors, model.architecture, n,
                                             job.engine)
        base_label = f"frozen base, {fmt.name}"
    else:
        base_bytes = n * recipe.weight_bytes + _fp32_extra(model, job, recipe.weight_bytes)
        base_label = f"frozen base, {recipe.weight_bytes * 8}-bit"
    note = (f"LoRA rank {job.lora_rank}: {trainable:,} trainable parameters "
            f"({100 * trainable / n:.2f}% of {n:,})")
    return _Trained(tensors=adapters, count=trainable, base=base_bytes, base_label=base_label,
                    notes=(note,))


def _fp32_extra(model: Model, job: Job, elem_bytes: int) -> int:
    """Bytes over ``elem_bytes`` each of the parameters the engine keeps in fp32 although the
    recipe holds ``elem_bytes``-byte copies (transformers' ``_keep_in_fp32_modules_strict``:
    DeepSeek's router; :func:`gpuplan.formats.fp32_kept`): only under a 16-bit copy."""
    if elem_bytes != 2:
        return 0
    return fp32_kept_params(model.tensors, model.architecture, job.engine) * (4 - elem_bytes)


def _narrow_tn_only(job: Job) -> bool:
    """Whether the job's recipe keeps a columnwise weight copy on TN-only GPUs alone (per-tensor
    FP8 under Transformer Engine): the only recipes whose states depend on the GPU."""
    recipe = NARROW_RECIPES.get(job.precision)
    return recipe is not None and recipe.columnwise_copy == "tn-only"


def _compute_states(model: Model, job: Job, non_tn_fp8: bool = False) -> States:
    if job.sharding == "fsdp2" and job.zero >= 2 and job.lora_rank is None:
        return _fsdp2_states(model, job)
    recipe = job.train_recipe
    opt = get_optimizer(job.optimizer)
    state_b = recipe.state_bytes
    trained = _what_is_trained(model, job, recipe)
    notes = list(trained.notes)
    trainable, base_bytes, base_label = trained.count, trained.base, trained.base_label

    weights_trainable = trainable * recipe.weight_bytes
    grads = trainable * recipe.grad_bytes
    if job.lora_rank is None:  # an fp32 parameter's 16-bit copy and grad are fp32
        weights_trainable += _fp32_extra(model, job, recipe.weight_bytes)
        grads += _fp32_extra(model, job, recipe.grad_bytes)
    master = trainable * recipe.master_bytes
    opt_bytes, opt_note = optimizer_state_bytes(opt, trained.tensors, trainable, state_b)
    if opt_note:
        notes.append(opt_note)
    paged = _paged_bytes(opt, trained.tensors, trainable)

    # Sharding over the data-parallel group (ZeRO stages / FSDP).
    g = zero_shards(job)
    z = job.zero
    host = 0
    if z >= 1:
        master, opt_bytes, paged = shard(master, g), shard(opt_bytes, g), shard(paged, g)
    if z >= 2:
        grads = shard(grads, g)
    if z >= 3:
        weights_trainable = shard(weights_trainable, g)
        base_bytes = shard(base_bytes, g)
    if job.offload_optimizer:
        # ZeRO-Offload: fp32 master + optimizer states (and an fp32 gradient copy for the CPU
        # optimizer step) live in host memory.
        host = master + opt_bytes + (shard(trainable * 4, g) if z >= 1 else trainable * 4)
        master, opt_bytes, paged = 0, 0, 0
        notes.append("optimizer offloaded: fp32 master copy, states and an fp32 gradient copy "
                     "in host memory")

    layers = model.architecture.num_layers if model.architecture is not None else 0
    fp8, fp8_label, bf16_dropped = _narrow_states(job, trained, layers, non_tn_fp8)
    weights_trainable -= bf16_dropped
    if fp8_label:
        notes.append(f"{fp8_label}: {fp8:,} bytes")
    if z >= 3:
        fp8 = shard(fp8, g)

    gathered = _Gathered(0, 0, "", _FSDP_UNITS)
    if z >= 3 and g > 1:
        gathered = _gathered_bytes(model, recipe, base_bytes > 0, job)
    step_tmp, step_detail = optimizer_step_temporaries(
        job, recipe, opt, trainable, model, shard=g if z >= 1 else 1)
    return States(state_b=state_b, trainable=trainable, base=base_bytes, base_label=base_label,
                  weights_trainable=weights_trainable, grads=grads, master=master, opt=opt_bytes,
                  host=host, gathered=gathered.bytes, step_tmp=step_tmp, paged=paged,
                  step_detail=step_detail, notes=tuple(notes), master_b=_master_b(job, recipe),
                  master_remainder=recipe.master_remainder, gathered_note=gathered.note,
                  gathered_kept=gathered.kept, gathered_label=gathered.label, fp8=fp8,
                  fp8_label=fp8_label, fp8_note=_fp8_note(job, non_tn_fp8) if fp8 else "")


def _master_b(job: Job, recipe: TrainingRecipe) -> int:
    """Bytes of a master element for the line's label: 0 with no master (``master_weights``
    none), else the recipe's (4 where it keeps none: the label of an empty line)."""
    return 0 if job.master_weights == "none" else recipe.master_bytes or 4


def _fp8_note(job: Job, non_tn_fp8: bool) -> str:
    """The weights line's note on where its narrow copies were reckoned."""
    if not _narrow_tn_only(job):
        return "rowwise and columnwise copies on every GPU"
    if non_tn_fp8:
        return "no transposes: this GPU's FP8 GEMMs take any layout"
    return "transposes kept: FP8 GEMMs TN-only (Hopper, Ada, 12.x; as Hopper where no GPU is given)"


def _narrow_states(job: Job, trained: _Trained, layers: int = 0,
                   non_tn_fp8: bool = False) -> tuple[int, str, int]:
    """(bytes, label, 16-bit weight bytes it replaces) of a narrow recipe's persistent copies on
    this rank: the blocks' linear weights (the embedding and head stay 16-bit) as
    :func:`gpuplan.fp8.fp8_weight_bytes` counts them -- the copies :func:`gpuplan.fp8.
    weight_copies` says, the rule the speed model's weight cast reads -- plus delayed scaling's
    amax histories. ``non_tn_fp8``: the GPU's FP8 GEMMs take any layout (sm_100/sm_103: B200,
    GB200, B300), so a per-tensor FP8 weight keeps no transpose; False where no GPU is known
    (the plan of a job alone) and on Hopper, Ada and consumer Blackwell (12.x), where
    Transformer Engine's ``nvte_is_non_tn_fp8_gemm_supported`` is false and the transpose is
    kept (the upper bound). The blocks kept BF16 (``first_last_layers_bf16`` at each end of
    ``layers``) hold none."""
    recipe = NARROW_RECIPES.get(job.precision)
    if recipe is None or job.lora_rank is not None:
        return 0, "", 0
    lin = [t for t in trained.tensors or () if t.linear and t.component not in
           ("embeddings", "head")]
    elements = sum(t.total for t in lin) if lin else trained.count
    keep = narrow_blocks(layers, job.first_last_layers_bf16) if layers else 0
    if job.first_last_layers_bf16 and layers:  # those blocks are BF16 layers: no narrow copies
        elements = elements * keep // layers
    copies, dropped, label = fp8_weight_bytes(recipe, elements, None, non_tn=non_tn_fp8,
                                              param_gather=job.fp8_param_gather)
    tensors = sum(t.count for t in lin)
    if job.first_last_layers_bf16 and layers:
        tensors = tensors * keep // layers
    history = job.fp8_amax_history or recipe.amax_history
    amax = amax_history_bytes(recipe, tensors, history)
    if amax:
        label += (" + " if label else "") + f"amax histories ({history} x fp32)"
    return copies + amax, label + ("" if lin else " (all parameters taken as linear weights)"), \
        dropped


def _paged_bytes(opt, tensors: tuple[ParamTensor, ...] | None, trainable: int) -> int:
    """The 8-bit states (1 byte each) a paged optimizer puts in CUDA managed memory: those of
    parameters of BNB_MIN_PAGED_SIZE elements or more (their block scales stay on the GPU)."""
    if not opt.paged:
        return 0
    if tensors is None:
        return opt.states * trainable
    return sum(opt.states * t.numel * t.count for t in tensors if t.numel >= BNB_MIN_PAGED_SIZE)


_FSDP_UNITS = "gathered ZeRO-3/FSDP units"


@record(kw_only=False)
class _Gathered:
    bytes: int
    kept: int
    note: str
    label: str


def _gathered_bytes(model: Model, recipe: TrainingRecipe, lora: bool, job: Job) -> _Gathered:
    """ZeRO-3's full-size parameters gathered at once, and how they were reckoned: DeepSpeed's
    coordinator replayed at its defaults (:mod:`.zero3`), or -- for FSDP (LoRA under
    ``sharding="fsdp2"``, torchtune's recipes) and where the model has no tensor list -- two
    wrapped units (a transformer layer each: the current one and the prefetched next)."""
    elem = recipe.weight_bytes
    if lora and job.lora_base is not None:
        elem = 2  # quantized bases are gathered and dequantized to 16-bit
    if job.sharding == "deepspeed":
        cap = job.stage3_max_live_parameters or MAX_LIVE
        ds = deepspeed_gathered(
            model, job.checkpointing == "full", max_live=cap,
            prefetch_bucket=job.stage3_prefetch_bucket_size or PREFETCH_BUCKET)
        if ds is not None:
            return _Gathered(
                bytes=ds.elements * elem, kept=ds.persisted * elem,
                label="gathered ZeRO-3 parameters",
                note=(f"{ds.live / 1e9:.2f}B parameters at most: DeepSpeed prefetches until "
                      f"stage3_max_live_parameters ({count_text(cap)}) are gathered"
                      + (f", and keeps {ds.persisted / 1e6:.1f}M small ones" if ds.persisted
                         else "")))
    return _Gathered(bytes=2 * _unit_elements(model) * elem, kept=0,
                     note="largest wrapped unit, current + prefetched", label=_FSDP_UNITS)


def _unit_elements(model: Model) -> int:
    """FSDP's wrapped unit: one transformer layer (the largest layer where layers differ, e.g.
    dense and MoE layers interleaved); embeddings and head are units of their own."""
    arch = model.architecture
    if arch is None or not model.tensors:
        # Unknown layout: assume 1/32 of the model per unit (a 32-layer model), stated.
        return math.ceil(model.params.total / 32)
    layers: dict[int, int] = {}
    shared = 0
    for t in model.tensors:
        if t.component in ("embeddings", "head") or (t.layer is None and t.count % arch.num_layers):
            continue
        if t.layer is not None:
            layers[t.layer] = layers.get(t.layer, 0) + t.total
        else:
            shared += t.total // arch.num_layers
    per_layer = max((shared + v for v in layers.values()), default=shared)
    return max(per_layer,
               max((t.total for t in model.tensors if t.component in ("embeddings", "head")),
                   default=0))


def _fsdp2_states(model: Model, job: Job) -> States:
    """FSDP2 (``fully_shard``) at rest: parameters, gradients and optimizer states sharded on
    dim 0 over the ranks (:func:`~.fsdp.shard_elements`) in the parameters' original dtype --
    fp32 under a mixed-precision recipe, where that shard is the master copy
    (``MixedPrecisionPolicy`` casts it to the compute dtype only for the all-gather) and the
    optimizer steps it directly: no 16-bit shard, no separate master, no fp32 gradient copy.
    The gathered units are placed along the step by the timeline (:mod:`.fsdp`)."""
    if job.offload_optimizer or job.optimizer_in_backward or get_optimizer(job.optimizer).paged:
        raise UnsupportedError(f"{opt('sharding')} fsdp2 plans full fine-tuning with the "
                               "optimizer stepped on the GPU after backward; "
                               f"{opt('offload_optimizer')}, {opt('optimizer_in_backward')} and "
                               f"paged optimizers are planned with {opt('sharding')} deepspeed",
                               field="sharding", value="fsdp2", fix={"sharding": "deepspeed"})
    recipe = job.train_recipe  # its state dtype (the Job refuses a master or gradient dtype here)
    optim = get_optimizer(job.optimizer)
    state_b = recipe.state_bytes
    trainable = model.params.total
    g = zero_shards(job)
    units = fsdp_units(model, recipe, gpus=g, zero=job.zero)
    local = shard_elements(model, g)
    opt_bytes, opt_note = optimizer_state_bytes(optim, model.tensors or None, trainable, state_b)
    opt_bytes = -(-opt_bytes * local // trainable) if trainable else 0
    # the optimizer steps the original-dtype shards: the recipe's step without a master copy
    step_tmp, step_detail = optimizer_step_temporaries(
        job, replace(recipe, master_bytes=0), optim, local, model)
    notes = [f"FSDP2 over {g} ranks: {units.elem * 8}-bit parameter and gradient shards"
             + (" (the fp32 shard is the master copy; 16-bit copies are gathered for compute)"
                if recipe.master_bytes else "")
             + f"; the root unit ({units.root:,} bytes gathered) stays unsharded from forward "
             "into backward; reshard_after_forward="
             + ("True" if units.reshard_after_forward else "False")]
    if opt_note:
        notes.append(opt_note)
    return States(state_b=state_b, trainable=trainable, base=0, base_label="",
                  weights_trainable=local * units.elem, grads=local * units.elem, master=0,
                  opt=opt_bytes, host=0, gathered=0, step_tmp=step_tmp, step_detail=step_detail,
                  notes=tuple(notes), fsdp=units)
