"""What is being run: the one description every analysis (memory, speed, fit, solver) takes.

A :class:`Job` is a frozen composition of small frozen configs (:mod:`._configs`: how it runs,
the training loop, the optimizer, where the states live, LoRA, serving, the parallel layout),
each validating itself; the Job adds what spans them and resolves what the engine decides. It is
built and read flat, as before -- ``Job(model="gpt2", tp=2, zero=3)``, ``job.tp`` -- and its JSON
(:meth:`Job.to_dict` / :meth:`Job.from_dict`) is the same flat object of every field.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Mapping
from dataclasses import field, fields, replace
from functools import cache
from operator import attrgetter
from typing import Literal, get_args, get_origin

from .._record import compiled_init, record
from ..bounds import MAX_ARG_CHARS
from ..engines.profiles import ENGINE_NAMES, check_engine_job, get_engine
from ..fp8 import NARROW_RECIPES, resolve_plain_fp8
from ..errors import InputError, UnsupportedError, closest, opt, shown
from ..formats import (INFER_AUTO, OPTIMIZERS, TRAINING_RECIPES, WEIGHT_FORMATS, TrainingRecipe,
                       resolve_infer_precision, with_job_dtypes)
from ..models import Model, from_param_count
from ._configs import (CONFIGS, CUDA_GRAPH_SCOPES, RECOMPUTE_MODULES, ExecutionConfig,
                       LoraConfig, OptimizerConfig, ParallelLayout, check_fp8_attention,
                       ServingConfig, ShardingConfig, TrainingLoop)
from ._fields import alternatives, check_value, from_json, hints_of
from ._vocab import DEFAULT_MODEL_PARAMS, KV_DTYPES, PP_SCHEDULES, ZERO_STAGES, Attention, Mode

__all__ = ["Job", "FLAT_FIELDS", "field_group", "flat_hints", "flat_defaults", "flat_docs",
           "choices_of", "job_flags", "default_job"]


@record
class Job:
    """A training and/or inference job on one model."""

    model: str | Model
    """Catalog name, config.json path, model directory, or a loaded :class:`Model`."""
    mode: Mode = "both"
    """``train``, ``infer`` or ``both``."""
    batch: int = 1
    """Micro-batch size per GPU (sequences, or images for vision models)."""
    seq: int | None = None
    """Sequence length; None = the architecture's context, capped at 2048 (vision: its patches)."""
    attention: Attention = "sdpa"
    """Attention implementation: eager keeps s x s scores; sdpa (flash/mem-efficient) keeps O(s)."""
    execution: ExecutionConfig = field(default_factory=ExecutionConfig)
    loop: TrainingLoop = field(default_factory=TrainingLoop)
    optim: OptimizerConfig = field(default_factory=OptimizerConfig)
    states: ShardingConfig = field(default_factory=ShardingConfig)
    lora: LoraConfig = field(default_factory=LoraConfig)
    serving: ServingConfig = field(default_factory=ServingConfig)
    parallel: ParallelLayout = field(default_factory=ParallelLayout)

    def __post_init__(self) -> None:
        _check_model(self.model)
        for name in ("mode", "batch", "seq", "attention"):
            check_fields_of(self, name)
        for attr, cls in CONFIGS.items():
            if not isinstance(getattr(self, attr), cls):
                raise InputError(f"{attr} {shown(getattr(self, attr))}: expected a "
                                 f"{cls.__name__}", field=attr)
        _resolve_engine(self)
        _check_across(self)
        if self.engine != "auto":
            check_engine_job(self.engine_profile, self)

    @property
    def engine_profile(self):
        """The profile of the engine (``auto``: transformers')."""
        return get_engine(self.engine)

    def check_pipeline_shaping(self) -> None:
        """Refuse the options that shape a pipeline when there is none (``pp`` 1), which would
        otherwise do nothing in silence: ``pp_schedule`` other than 1f1b, ``pp_embedding_part``,
        ``pp_loss_part``, ``micro_batches`` (a pipeline's; accumulation without one is
        ``grad_accum``). Called where a user's job comes in (the CLI, the web API), not on the
        jobs the planner derives."""
        if self.pp > 1:
            return
        shaping = [f for f in ("pp_schedule", "pp_embedding_part", "pp_loss_part",
                               "pp_first_stage_layers", "pp_last_stage_layers",
                               "micro_batches")
                   if getattr(self, f) not in (None, False, "1f1b")]
        if not shaping:
            return
        names = ", ".join(opt(f) for f in shaping)
        one = len(shaping) == 1
        fix = f"give {opt('pp')} 2 or more, or drop {'it' if one else 'them'}"
        if "micro_batches" in shaping:
            fix += (f" ({opt('grad_accum')} {self.micro_batches} accumulates micro-batches "
                    "without a pipeline)")
        raise InputError(f"{names} without {opt('pp')}: {'it shapes' if one else 'they shape'}"
                         f" a pipeline, and there is none; {fix}", field=shaping[0],
                         value=getattr(self, shaping[0]))

    def require_data_parallel(self, what: str) -> None:
        """A layout with TP/PP/CP/EP or sequence parallelism refused in one line where ``what``
        plans only data parallelism."""
        if self.tp * self.pp * self.cp * self.ep > 1 or self.sequence_parallel:
            raise UnsupportedError(
                f"{what} with {opt('tp')}/{opt('pp')}/{opt('cp')}/{opt('ep')}/"
                f"{opt('sequence_parallel')} is not built yet; plan data parallel "
                f"({opt('gpus')} N {opt('zero')} 0..3) for now")

    @property
    def dp(self) -> int:
        """Data-parallel degree: all GPUs over tensor x pipeline x context parallel."""
        p = self.parallel
        return p.gpus // (p.tp * p.pp * p.cp)

    @property
    def train_recipe(self) -> TrainingRecipe:
        """The training recipe as this job runs it: ``precision``'s, with the optimizer-state,
        master-copy and gradient dtypes it names (``optimizer_states``, ``master_weights``,
        ``grad_dtype``: :func:`gpuplan.formats.with_job_dtypes`). The one reading of those
        three fields that the memory plan, the speed model and the layout search share."""
        return with_job_dtypes(TRAINING_RECIPES[self.precision], self.optimizer_states,
                               self.master_weights, self.grad_dtype)

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
        """Every field, flat and JSON-ready (the ``"job"`` object of ``gpuplan fit --json``):
        the model as its name or path when it is a string, else the loaded :class:`Model`'s
        name; tuples as lists. :meth:`from_dict` reads it back (for a model named by a string)."""
        return {name: _plain(getattr(self, name)) for name in FLAT_FIELDS}

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> "Job":
        """A Job from a dict of its flat fields (as :meth:`to_dict` writes them, e.g. a JSON
        body).

        Keys left out take the Job's defaults, which are the CLI's (no ``model``: a bare
        7B-parameter model, as ``gpuplan fit`` with no model). An unknown key, or a value of the
        wrong JSON type, is an :class:`InputError` naming it; a list becomes a tuple where the
        field is a tuple. The values are then validated as every Job is.
        """
        if not isinstance(d, Mapping):
            raise InputError(f"job: expected an object of job fields, found {type(d).__name__}")
        types_ = flat_hints()
        kw: dict = {}
        for key, value in d.items():
            if key not in types_:
                near = closest(str(key)[:MAX_ARG_CHARS], types_)
                hint = f"; did you mean {', '.join(map(repr, near))}?" if near else \
                    f"; job keys are {', '.join(types_)}"
                raise InputError(f"unknown job key {shown(key)}{hint}", field=str(key)[:64],
                                 fix={near[0]: value} if near else None)
            kw[key] = from_json(key, value, types_[key])
        if "model" not in kw:
            kw["model"] = from_param_count(DEFAULT_MODEL_PARAMS)
        elif isinstance(kw["model"], str):
            kw["model"] = _count_model(kw["model"])
        return cls(**kw)

    def with_(self, **changes: object) -> "Job":
        """A copy with some fields changed (validated again). A new engine takes its own
        model code, sharding and optimizer fusion unless they are changed too."""
        if "engine" in changes and changes["engine"] != self.engine:
            for name in ("model_code", "sharding", "fused_optimizer"):
                changes.setdefault(name, None)
        return replace(self, **changes)

    def resolve_infer(self, arch: object, gpu_arch: "str | tuple[str, ...] | None" = None) -> "Job":
        """This job with ``infer_precision`` ``auto`` resolved for ``arch`` under its engine on
        ``gpu_arch`` (:func:`gpuplan.formats.resolve_infer_precision`, the one rule); itself when
        the format is given."""
        if self.infer_precision != INFER_AUTO:
            return self
        fmt = resolve_infer_precision(self.infer_precision, arch, self.engine, gpu_arch)
        return replace(self, infer_precision=fmt)

    def _evolve(self, **changes: object) -> "Job":
        """A copy with fields changed *without* validation, for searches that only set values
        they took from the accepted sets (the solver); everything else uses :meth:`with_`."""
        new = object.__new__(Job)
        new.__dict__.update(self.__dict__)
        for group, flat in _routed(changes).items():
            if group is None:
                new.__dict__.update(flat)
                continue
            old = self.__dict__[group]
            cfg = object.__new__(type(old))
            cfg.__dict__.update(old.__dict__)
            cfg.__dict__.update(flat)
            new.__dict__[group] = cfg
        return new


#: The Job's own fields (the rest are its configs').
_TOP = ("model", "mode", "batch", "seq", "attention")
#: Flat field -> the config attribute holding it (None: the Job's own).
_GROUP_OF: dict[str, str | None] = {name: None for name in _TOP}
for _attr, _cls in CONFIGS.items():
    for _name in hints_of(_cls):
        _GROUP_OF[_name] = _attr
        setattr(Job, _name, property(attrgetter(f"{_attr}.{_name}"),
                                     doc=f"``{_attr}.{_name}`` (:class:`{_cls.__name__}`)"))

#: Every flat field, in the order of the JSON (as before the configs: new fields at the end of
#: their neighbours).
FLAT_FIELDS: tuple[str, ...] = (
    "model", "mode", "engine", "precision", "infer_precision", "optimizer", "optimizer_states",
    "batch", "seq", "grad_accum", "gpus", "zero", "offload_optimizer", "lora_rank",
    "lora_targets", "lora_base", "checkpointing", "attention", "kv_dtype", "context",
    "fused_optimizer", "use_cache", "lora_dropout", "zero_grad_set_to_none", "max_grad_norm",
    "prefill_logits", "runtime", "model_code", "loss_chunks", "optimizer_in_backward",
    "offload_activations", "tp", "pp", "cp", "ep", "sequence_parallel", "distribute_checkpoints",
    "pp_schedule", "pp_embedding_part", "pp_loss_part", "pp_first_stage_layers",
    "pp_last_stage_layers", "etp", "moe_capacity_factor", "mtp_layers", "ep_overlap", "moe_dispatcher", "micro_batches", "gpus_per_node",
    "inter_node", "sharding", "stage3_max_live_parameters", "stage3_prefetch_bucket_size",
    "fp8_param_gather", "fp8_attention", "first_last_layers_bf16", "power_limit_w",
    "recompute_modules", "dp_shard", "cuda_graph_scope", "moe_shared_expert_overlap",
    "master_weights", "grad_dtype", "activation_storage", "fp8_amax_history")
assert set(FLAT_FIELDS) == set(_GROUP_OF), "a config field is missing from FLAT_FIELDS"

_JOB_INIT = compiled_init(Job)  # the generated __init__ (a record compiles it on first use)


def _job_init(self, **kw: object) -> None:
    """``Job(model=..., tp=2, zero=3)``: flat fields are routed to their configs (over a config
    given whole, ``parallel=ParallelLayout(...)``, when both are)."""
    for group, flat in _routed(kw).items():
        if group is None:
            continue
        for name in flat:
            del kw[name]
        given = kw.get(group)
        kw[group] = CONFIGS[group](**flat) if given is None else replace(given, **flat)
    _JOB_INIT(self, **kw)


_job_init.__signature__ = inspect.signature(_JOB_INIT)  # its fields; flat ones routed
Job.__init__ = _job_init  # dataclasses.replace and every caller build through it


def _routed(changes: Mapping[str, object]) -> dict[str | None, dict[str, object]]:
    out: dict[str | None, dict[str, object]] = {}
    for name, value in changes.items():
        if name in CONFIGS:
            continue
        if name not in _GROUP_OF:
            raise TypeError(f"Job got an unexpected keyword argument {name!r}")
        out.setdefault(_GROUP_OF[name], {})[name] = value
    return out


def field_group(name: str) -> str | None:
    """The config attribute holding a flat field (None: the Job's own)."""
    return _GROUP_OF[name]


@cache
def flat_hints() -> dict[str, object]:
    """Flat field -> its resolved annotation, in :data:`FLAT_FIELDS` order."""
    hints = dict(hints_of(Job))
    for cls in CONFIGS.values():
        hints.update(hints_of(cls))
    return {name: hints[name] for name in FLAT_FIELDS}


def check_fields_of(job: Job, name: str) -> None:
    """One of the Job's own fields against its annotation."""
    check_value(name, getattr(job, name), hints_of(Job)[name])


def _check_model(model: object) -> None:
    if not isinstance(model, (str, Model)):
        raise InputError(f"{opt('model')} {shown(model)}: expected a name, a path or a Model "
                         f"(got {type(model).__name__})", field="model", value=model)
    if isinstance(model, str) and not 0 < len(model) <= MAX_ARG_CHARS:
        raise InputError(f"{opt('model')} {shown(model)}: expected a name or path of 1 to "
                         f"{MAX_ARG_CHARS} characters", field="model", value=model)


#: The name :func:`~gpuplan.models.from_param_count` gives a model known by its count alone
#: (``7.00B-parameter model``), which :meth:`Job.to_dict` writes for it.
_COUNT_NAME = re.compile(r"\A(\d{1,6}(?:\.\d{1,6})?[KMBT]?)-parameter model\Z")


def _count_model(name: str) -> str | Model:
    """A count-only model's name read back as that model (issue 32: ``Job.from_dict`` of
    ``to_dict`` plans again); any other name stays a name. The count is the name's: three
    significant figures, as :func:`~gpuplan.units.format_count` wrote it."""
    m = _COUNT_NAME.match(name)
    return from_param_count(m.group(1), name=name) if m else name


def _resolve_engine(job: Job) -> None:
    """What the engine decides when the job leaves it: model code, sharding, and (torchtitan)
    the embedding and loss as pipeline parts."""
    profile = get_engine(job.engine)
    if job.precision == "fp8":
        # plain fp8: the engine's own default recipe (gpuplan.fp8.DEFAULT_FP8_BY_ENGINE)
        object.__setattr__(job, "loop", replace(job.loop, precision=resolve_plain_fp8(job.engine)))
    narrow = NARROW_RECIPES.get(job.precision)
    if narrow is not None and job.engine != "auto" and job.engine not in narrow.engines:
        runs = [n for n, r in NARROW_RECIPES.items() if job.engine in r.engines]
        raise InputError(f"{opt('precision')} {job.precision} is {narrow.implementation}, which "
                         f"{opt('engine')} {job.engine} does not run; it runs "
                         f"{', '.join(runs) or 'none of them'}", field="precision",
                         value=job.precision, accepted=", ".join(runs))
    if job.model_code is None:
        object.__setattr__(job, "execution", replace(job.execution, model_code=profile.model_code))
    if job.sharding is None:
        object.__setattr__(job, "states", replace(job.states, sharding=profile.sharding))
    if job.fused_optimizer is None:
        object.__setattr__(job, "optim", replace(job.optim, fused_optimizer=profile.fused_optimizer))
    if profile.pp_parts == "always" and job.pp > 1 and job.engine != "auto":
        object.__setattr__(job, "parallel", replace(job.parallel, pp_embedding_part=True,
                                                    pp_loss_part=True))


def _check_across(job: Job) -> None:
    """The checks that span two configs."""
    if job.trains:
        check_fp8_attention(job.loop)
    if job.offload_optimizer and job.optimizer == "sgd":
        raise InputError(f"{opt('offload_optimizer')} with sgd: plain SGD has no state to "
                         "offload", field="offload_optimizer", value=True)
    if job.optimizer_in_backward and job.grad_accum > 1:
        raise InputError(f"{opt('optimizer_in_backward')} with {opt('grad_accum')} "
                         f"{job.grad_accum}: each step runs as its gradient is ready, so "
                         f"gradients cannot accumulate; use {opt('grad_accum')} 1",
                         field="optimizer_in_backward", value=True, fix={"grad_accum": 1})
    if job.optimizer_in_backward and job.offload_optimizer:
        raise InputError(f"{opt('optimizer_in_backward')} with {opt('offload_optimizer')}: the "
                         "step runs on the GPU inside the backward; drop one of them",
                         field="optimizer_in_backward", value=True)
    if job.distribute_checkpoints and job.checkpointing != "full":
        raise InputError(f"{opt('distribute_checkpoints')} with {opt('checkpointing')} "
                         f"{job.checkpointing}: only full checkpointing keeps layer inputs to "
                         f"split; add {opt('checkpointing')} full or drop "
                         f"{opt('distribute_checkpoints')}", field="distribute_checkpoints",
                         value=True, fix={"checkpointing": "full"})
    if (job.micro_batches is not None and job.grad_accum > 1
            and job.micro_batches != job.grad_accum):
        raise InputError(f"{opt('micro_batches')} {job.micro_batches} and {opt('grad_accum')} "
                         f"{job.grad_accum} differ: a pipeline's micro-batches are its "
                         "accumulation steps, one number per step; give one of them",
                         field="micro_batches", value=job.micro_batches)
    if job.moe_capacity_factor is not None and job.engine != "megatron":
        # torchtitan's all-to-all dispatcher is dropless (torchtitan/models/common/
        # token_dispatcher.py @b5bcd76c: no capacity); transformers has no capacity factor
        raise InputError(f"{opt('moe_capacity_factor')} {job.moe_capacity_factor} under "
                         f"{opt('engine')} {job.engine}: only Megatron-Core drops and pads to an "
                         f"expert capacity; use {opt('engine')} megatron or drop "
                         f"{opt('moe_capacity_factor')}", field="moe_capacity_factor",
                         value=job.moe_capacity_factor, fix={"engine": "megatron"})
    if job.mtp_layers and job.engine != "megatron":
        # Megatron-Core trains MTP (--mtp-num-layers); transformers builds no MTP module
        raise InputError(f"{opt('mtp_layers')} {job.mtp_layers} under {opt('engine')} "
                         f"{job.engine}: only Megatron-Core trains a multi-token-prediction "
                         f"module here; use {opt('engine')} megatron or drop "
                         f"{opt('mtp_layers')}", field="mtp_layers", value=job.mtp_layers,
                         fix={"engine": "megatron"})
    if job.ep_overlap:
        _check_ep_overlap(job)
    if job.moe_dispatcher != "alltoall" and job.engine != "megatron":
        raise InputError(f"{opt('moe_dispatcher')} {job.moe_dispatcher} under {opt('engine')} "
                         f"{job.engine}: Megatron-Core's flex dispatcher; use {opt('engine')} "
                         f"megatron or drop {opt('moe_dispatcher')}", field="moe_dispatcher",
                         value=job.moe_dispatcher, fix={"engine": "megatron"})
    if job.dp_shard is not None:
        _check_dp_shard(job)
    _check_megatron_recipe(job)
    _check_optimizer_dtypes(job)
    if job.recompute_modules is not None and job.engine != "megatron":
        raise InputError(f"{opt('recompute_modules')} under {opt('engine')} {job.engine}: "
                         "Megatron-Core's module list; use "
                         f"{opt('engine')} megatron or drop {opt('recompute_modules')}",
                         field="recompute_modules", value=list(job.recompute_modules),
                         fix={"engine": "megatron"})


def _check_activation_storage(job: Job) -> None:
    """DeepSeek-V3's activation storage is an FP8 framework's (its report, sec. 3.3.3) over the
    Megatron-Core accounting of the MoE layer and its recompute modules: a narrow recipe under
    the megatron engine."""
    if job.activation_storage == "engine" or not job.trains:
        return
    if job.engine != "megatron" or job.precision not in NARROW_RECIPES:
        raise InputError(f"{opt('activation_storage')} {job.activation_storage}: the FP8 "
                         "activations DeepSeek-V3's framework caches, planned over Megatron-Core's "
                         f"layers; use {opt('engine')} megatron with an FP8 {opt('precision')} "
                         f"(e.g. fp8-blockwise), or drop {opt('activation_storage')}",
                         field="activation_storage", value=job.activation_storage,
                         fix={"activation_storage": "engine"})


def _check_megatron_recipe(job: Job) -> None:
    """The Megatron-Core recipe settings' own checks: scoped CUDA graphs, the shared expert
    overlap, DeepSeek-V3's activation storage."""
    if job.cuda_graph_scope is not None:
        _check_cuda_graph_job(job)
    if job.moe_shared_expert_overlap:
        _check_shared_overlap(job)
    _check_activation_storage(job)


def _check_cuda_graph_job(job: Job) -> None:
    """The scoped CUDA graphs are Megatron-Core's; its alltoall dispatcher refuses a graphed
    preprocess when that step copies to the host and waits (a capacity factor:
    transformer_config.py at NVIDIA/Megatron-LM@b0cc2706, 'moe_preprocess cuda graph is not
    supported when there are DtoH copies and synchronizations in the preprocess step')."""
    if job.engine != "megatron":
        raise InputError(f"{opt('cuda_graph_scope')} under {opt('engine')} {job.engine}: "
                         f"Megatron-Core's Transformer Engine graphs; use {opt('engine')} "
                         f"megatron or drop {opt('cuda_graph_scope')}", field="cuda_graph_scope",
                         value=list(job.cuda_graph_scope), fix={"engine": "megatron"})
    if ("moe_preprocess" in job.cuda_graph_scope and job.moe_dispatcher == "alltoall"
            and job.moe_capacity_factor is not None):
        raise InputError(f"{opt('cuda_graph_scope')} moe_preprocess with "
                         f"{opt('moe_capacity_factor')}: the alltoall dispatcher's preprocess "
                         "then copies to the host and waits, which a graph cannot hold; drop "
                         f"moe_preprocess or {opt('moe_capacity_factor')}",
                         field="cuda_graph_scope", value=list(job.cuda_graph_scope))


def _check_shared_overlap(job: Job) -> None:
    """Megatron-Core's checks on ``moe_shared_expert_overlap`` (transformer_config.py at
    NVIDIA/Megatron-LM@0d8e0714 and @b0cc2706: 'moe_shared_expert_overlap only works with
    alltoall token dispatcher'; 'disable moe_shared_expert_overlap when enabling
    overlap_moe_expert_parallel_comm')."""
    why, fix = None, {}
    if job.engine != "megatron":
        why, fix = f"only Megatron-Core has it; use {opt('engine')} megatron", {"engine": "megatron"}
    elif job.moe_dispatcher != "alltoall":
        why, fix = (f"Megatron runs it under the alltoall dispatcher only, not "
                    f"{job.moe_dispatcher}"), {"moe_dispatcher": "alltoall"}
    elif job.ep_overlap:
        why, fix = f"Megatron refuses it beside {opt('ep_overlap')}", {"ep_overlap": False}
    if why:
        raise InputError(f"{opt('moe_shared_expert_overlap')}: {why}, or drop "
                         f"{opt('moe_shared_expert_overlap')}", field="moe_shared_expert_overlap",
                         value=True, fix=fix or None)


def _check_dp_shard(job: Job) -> None:
    """HSDP's shard group: ZeRO-3 under FSDP (FSDP1 HYBRID_SHARD, FSDP2's 2-D mesh), a divisor
    of the data-parallel degree."""
    if job.zero != 3 or job.sharding != "fsdp2":
        raise InputError(f"{opt('dp_shard')} {job.dp_shard}: hybrid sharding is FSDP's "
                         f"(HYBRID_SHARD, a 2-D mesh); use {opt('zero')} 3 with "
                         f"{opt('sharding')} fsdp2, or drop {opt('dp_shard')}", field="dp_shard",
                         value=job.dp_shard, fix={"zero": 3, "sharding": "fsdp2"})
    if job.dp % job.dp_shard:
        near = max(d for d in range(1, job.dp + 1) if job.dp % d == 0 and d <= job.dp_shard)
        raise InputError(f"{opt('dp_shard')} {job.dp_shard}: the shard groups split the "
                         f"data-parallel degree ({job.dp}); use a divisor of it, e.g. "
                         f"{opt('dp_shard')} {near}", field="dp_shard", value=job.dp_shard,
                         fix={"dp_shard": near})


def _check_master(job: Job) -> None:
    """A master dtype needs a recipe that keeps a master copy apart from the weights; a bf16
    master is what Apex's DistributedFusedAdam holds in its one ``dtype`` beside its states
    (NVIDIA/apex@f8e60c47 contrib/optimizers/distributed_fused_adam.py lines 449-476), and
    Transformer Engine's FusedAdam, Megatron-Core's other Adam, refuses it ("FusedAdam only
    supports fp32/fp16 master weights": transformer_engine/pytorch/optimizers/fused_adam.py
    lines 137-138 at NVIDIA/TransformerEngine@d0067d0d); FSDP2's fp32 shard is the master. A
    remainder completes a bf16 weight to its fp32 master (Apex requires param_sync_dtype bf16:
    distributed_fused_adam.py lines 659-671 @f8e60c47; Megatron-Core stores remainders only
    under bf16: distrib_optimizer.py line 1008 @d98e8a64), so fp16 weights have none. No master
    (none) is that optimizer stepping the bf16 weights in place, its states in the same bf16
    (store_params False: lines 449-476)."""
    mw, recipe = job.master_weights, TRAINING_RECIPES[job.precision]
    why, fix = None, {"master_weights": "auto"}
    if mw == "auto" or not job.trains:
        return
    if not recipe.master_bytes:
        why = (f"with {opt('precision')} {job.precision} the optimizer steps the "
               f"{recipe.weight_bytes * 8}-bit weights, no separate master copy; use a mixed "
               "or FP8 recipe")
    elif job.sharding == "fsdp2" and job.zero >= 2 and job.lora_rank is None:
        why = (f"under {opt('sharding')} fsdp2 the fp32 parameter shard is the master; use "
               f"{opt('precision')} bf16 for 16-bit shards")
    elif mw == "remainder" and recipe.compute_dtype == "fp16":
        why = (f"a 16-bit remainder completes a bf16 weight's fp32 value, and "
               f"{opt('precision')} {job.precision} keeps fp16 weights; use mixed-bf16")
    elif mw == "none" and recipe.compute_dtype == "fp16":
        why = (f"the optimizer would step fp16 weights beside fp16 states, which "
               f"{opt('optimizer_states')} cannot name; use mixed-bf16")
    elif mw == "bf16" and job.engine == "megatron" and job.optimizer_states != "bf16":
        why, fix = ("Megatron-Core's Adams keep a bf16 master only as Apex's distributed Adam "
                    f"does, beside bf16 states (TE's FusedAdam refuses one); add "
                    f"{opt('optimizer_states')} bf16"), {"optimizer_states": "bf16"}
    elif mw == "none" and job.offload_optimizer:
        # ZeRO-Offload steps an fp32 copy of each parameter on the host (Ren et al., arXiv
        # 2101.06840 sec. 4.1: "fp32 parameters ... and optimizer states" on the CPU; DeepSpeed's
        # stage_1_and_2.py single_partition_of_fp32_groups, kept on the CPU under offload)
        why = (f"{opt('offload_optimizer')} steps an fp32 master of every weight on the host; "
               f"drop {opt('offload_optimizer')}")
    elif mw == "none" and job.optimizer_states != "bf16":
        # Apex's DistributedFusedAdam steps the weights in place only in its one dtype, its
        # states' (store_params False: distributed_fused_adam.py lines 449-476 @f8e60c47)
        why, fix = ("with no master the optimizer steps the bf16 weights in place, its states "
                    f"in that dtype (Apex's distributed Adam, dtype bf16); add "
                    f"{opt('optimizer_states')} bf16"), {"optimizer_states": "bf16"}
    if why:
        raise InputError(f"{opt('master_weights')} {mw}: {why}, or drop "
                         f"{opt('master_weights')}", field="master_weights", value=mw, fix=fix)


def _check_optimizer_dtypes(job: Job) -> None:
    """The master copy's and the gradients' dtypes (:func:`_check_master`,
    :func:`_check_grad_dtype`)."""
    _check_master(job)
    _check_grad_dtype(job)


def _check_grad_dtype(job: Job) -> None:
    """A gradient dtype apart from the recipe's is a buffer beside 16-bit weights (Apex's
    grad_sync_dtype, Megatron-Core's grad_reduce_in_fp32); fp32 weights' gradients are their
    own dtype, and FSDP2's reduce dtype is its engine's."""
    if job.grad_dtype == "auto" or not job.trains:
        return
    why = None
    if TRAINING_RECIPES[job.precision].weight_bytes != 2:
        why = (f"with {opt('precision')} {job.precision} the gradients are the fp32 "
               "parameters' own; use a mixed, bf16 or FP8 recipe")
    elif job.sharding == "fsdp2":
        why = f"under {opt('sharding')} fsdp2 the gradients' dtype is FSDP2's reduce dtype"
    if why:
        raise InputError(f"{opt('grad_dtype')} {job.grad_dtype}: {why}, or drop "
                         f"{opt('grad_dtype')}", field="grad_dtype", value=job.grad_dtype,
                         fix={"grad_dtype": "auto"})


def _check_ep_overlap(job: Job) -> None:
    """Megatron-Core's batch-level EP overlap, as its transformer_config.py accepts it
    (NVIDIA/Megatron-LM@d98e8a64 ``overlap_moe_expert_parallel_comm``'s assertions)."""
    why, fix = None, {}
    if job.engine != "megatron":
        why, fix = f"only Megatron-Core has it; use {opt('engine')} megatron", {"engine": "megatron"}
    elif job.ep <= 1:
        why = f"it overlaps expert-parallel all-to-alls; needs {opt('ep')} > 1"
    elif job.checkpointing == "full":
        why, fix = (f"Megatron refuses it beside full recomputation; use {opt('checkpointing')} "
                    "selective or none"), {"checkpointing": "selective"}
    elif job.pp > 1 and not job.pp_schedule.startswith("interleaved"):
        why = (f"with {opt('pp')} > 1 Megatron runs it only in the interleaved schedule; use "
               f"{opt('pp_schedule')} interleaved:V")
    if why:
        raise InputError(f"{opt('ep_overlap')}: {why}, or drop {opt('ep_overlap')}",
                         field="ep_overlap", value=True, fix=fix or None)


def _plain(value: object) -> object:
    if isinstance(value, Model):
        return value.name
    if isinstance(value, tuple):
        return list(value)
    return value


@cache
def flat_defaults() -> dict[str, object]:
    """Flat field -> its declared default (``dataclasses.MISSING`` for ``model``), in
    :data:`FLAT_FIELDS` order: None where the engine decides (``model_code``, ``sharding``)."""
    out: dict[str, object] = {}
    for cls in (Job, *CONFIGS.values()):
        for f in fields(cls):
            if f.name in _GROUP_OF:
                out[f.name] = f.default
    return {name: out[name] for name in FLAT_FIELDS}


@cache
def flat_docs() -> dict[str, str]:
    """Flat field -> its docstring (the string under its annotation in the class body), read
    once from the source with :mod:`ast` (no import-time cost; the OpenAPI schema and the CLI's
    help read it)."""
    import ast

    out: dict[str, str] = {}
    for cls in (Job, *CONFIGS.values()):
        body = ast.parse(inspect.cleandoc("\n" + inspect.getsource(cls))).body[0].body
        for node, nxt in zip(body, body[1:]):
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                    and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
                    and isinstance(nxt.value.value, str)):
                out[node.target.id] = inspect.cleandoc(nxt.value.value)
    return {name: out.get(name, "") for name in FLAT_FIELDS}


def choices_of(name: str) -> tuple[str, ...] | None:
    """The accepted values of a flat field, defined once where they live (a Literal of the
    vocabulary, the engines' table, the formats' tables; for a list field, the names each item
    may be); None for a free value (a number, a name of the user's). The CLI's help and the
    OpenAPI schema list these."""
    tables = {"engine": ENGINE_NAMES, "precision": tuple(TRAINING_RECIPES),
              "infer_precision": (INFER_AUTO, *WEIGHT_FORMATS), "lora_base": tuple(WEIGHT_FORMATS),
              "optimizer": tuple(OPTIMIZERS), "kv_dtype": tuple(KV_DTYPES),
              "zero": tuple(map(str, ZERO_STAGES)),
              "cuda_graph_scope": CUDA_GRAPH_SCOPES, "recompute_modules": RECOMPUTE_MODULES,
              "pp_schedule": tuple(s + (":V" if s == "interleaved" else "")
                                   for s in PP_SCHEDULES)}
    if name in tables:
        return tables[name]
    for alt in alternatives(flat_hints()[name]):
        if get_origin(alt) is Literal:
            return get_args(alt)
    return None


#: Fields whose command-line option is not ``--`` + the field's name with dashes (the CLI's job
#: options hold the rest to that rule: tests/unit/test_job_options.py).
_FLAG_EXCEPTIONS = {"zero_grad_set_to_none": "--zero-grad-in-place"}


def default_job(engine: str = "auto", mode: str | None = None, *,
                model: str | Model = "defaults") -> Job:
    """The job ``engine`` gives in ``mode`` with nothing else said: what :func:`job_flags`
    prints a job against, and what an export calls a field's default. ``mode`` None: the
    engine's own (``both`` when it trains and serves, else the one it runs)."""
    if mode is None:
        modes = get_engine(engine).modes
        mode = "both" if len(modes) == 2 else modes[0]
    return Job(model=model, mode=mode, engine=engine)


def job_flags(job: Job, *, against: Job | None = None, skip: tuple[str, ...] = ("model",)
              ) -> list[str]:
    """The ``gpuplan fit`` options that describe ``job``: every field that differs from
    ``against`` (default: the job its engine and mode give with nothing else said), in the
    Job's field order; booleans as their flag, lists comma-joined. What a search prints beside
    each proposal, so the proposal is one command away."""
    if against is None:
        against = default_job(job.engine, job.mode, model=job.model)
    out: list[str] = []
    for name in FLAT_FIELDS:
        value, base = getattr(job, name), getattr(against, name)
        if name in skip or value == base or value is None:
            continue
        if name == "zero_grad_set_to_none":
            out.append(_FLAG_EXCEPTIONS[name])
            continue
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            if value:
                out.append(flag)
            continue  # a default-True flag turned off has no option but the one above
        if isinstance(value, tuple):
            value = ",".join(value)
        out += [flag, str(value)]
    return out
