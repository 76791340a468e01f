"""The accounting: what a GPU holds to train or to serve a model, in bytes, line by line.

Training memory = weights + gradients + fp32 master copy + optimizer states + activations (+ the
transient buffers of the step) + runtime overhead. Each line is computed from the model's exact
parameter tensors and the job's named precision recipe, optimizer, sharding and adapters, so the
seed document's table comes out exactly (7B, mixed precision, Adam: 14 + 14 + 28 + 56 = 112 GB) and
every other configuration is the same sum with different bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from . import activations as _act
from .errors import InputError
from .formats import (
    TrainingRecipe, get_optimizer, get_recipe, get_weight_format, optimizer_state_bytes,
    weights_bytes_in_format,
)
from .job import KV_DTYPES, Job
from .models import Model, ParamTensor
from .overhead import Overhead, OverheadLevel, runtime_overhead

__all__ = [
    "Line", "TrainMemory", "InferMemory", "train_memory", "infer_memory", "lora_tensors",
    "DEFAULT_LORA_TARGETS", "shard",
]

#: PEFT's default LoRA target modules per model family (peft.utils.constants,
#: TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING).
DEFAULT_LORA_TARGETS: dict[str, tuple[str, ...]] = {
    "llama": ("q_proj", "v_proj"), "mistral": ("q_proj", "v_proj"),
    "mixtral": ("q_proj", "v_proj"), "qwen2": ("q_proj", "v_proj"),
    "qwen2_moe": ("q_proj", "v_proj"), "gemma2": ("q_proj", "v_proj"),
    "phi3": ("qkv_proj",), "gpt2": ("c_attn",), "gpt_neox": ("query_key_value",),
    "opt": ("q_proj", "v_proj"), "falcon": ("query_key_value",), "bert": ("query", "value"),
    "vit": ("query", "value"),
}


def shard(nbytes: int, n: int) -> int:
    """Bytes one of ``n`` ranks holds of a buffer sharded evenly (padded up, as ZeRO pads)."""
    return -(-nbytes // n)


@dataclass(frozen=True, kw_only=True)
class Line:
    """One row of the accounting table."""

    key: str
    label: str
    bytes: int
    bytes_per_param: float | None = None
    """Bytes per model parameter, where the line is a per-parameter cost."""
    note: str = ""


@dataclass(frozen=True, kw_only=True)
class TrainMemory:
    """Per-GPU memory of a training job, at its peak."""

    precision: str
    optimizer: str
    params: int
    trainable_params: int
    weights_bytes: int
    gradients_bytes: int
    master_weights_bytes: int
    optimizer_bytes: int
    activations_bytes: int
    temporaries_bytes: int
    """Transient buffers alive at the peak: autocast weight copies, optimizer-step temporaries,
    the loss's fp32 logits and their gradient."""
    gathered_params_bytes: int
    """ZeRO-3/FSDP: the full-size parameters of the wrapped units gathered at once."""
    overhead_bytes: int
    total_bytes: int
    peak_phase: str
    host_bytes: int
    """Host (CPU) memory per GPU process for offloaded optimizer state."""
    overhead: Overhead
    lines: tuple[Line, ...]
    notes: tuple[str, ...] = ()
    activations_known: bool = True
    phases: dict[str, int] = field(default_factory=dict)
    """Total bytes at each phase of the step (the peak is the largest)."""
    activation_detail: dict = field(default_factory=dict)
    """Saved-for-backward bytes in total and per layer kind, and where each phase peaks."""

    @property
    def model_states_bytes(self) -> int:
        """Weights + gradients + master copy + optimizer states: the seed's table."""
        return (self.weights_bytes + self.gradients_bytes + self.master_weights_bytes
                + self.optimizer_bytes)

    def per_gpu(self) -> dict[str, int]:
        return {
            "weights_bytes": self.weights_bytes,
            "gradients_bytes": self.gradients_bytes,
            "master_weights_bytes": self.master_weights_bytes,
            "optimizer_bytes": self.optimizer_bytes,
            "activations_bytes": self.activations_bytes,
            "temporaries_bytes": self.temporaries_bytes,
            "gathered_params_bytes": self.gathered_params_bytes,
            "overhead_bytes": self.overhead_bytes,
            "total_bytes": self.total_bytes,
        }

    def to_dict(self) -> dict:
        return {
            "precision": self.precision,
            "optimizer": self.optimizer,
            "trainable_params": self.trainable_params,
            "per_gpu": self.per_gpu(),
            "model_states_bytes": self.model_states_bytes,
            "host_bytes": self.host_bytes,
            "peak_phase": self.peak_phase,
            "phases": dict(self.phases),
            "activations_known": self.activations_known,
            "activation_detail": dict(self.activation_detail),
            "overhead": self.overhead.to_dict(),
            "lines": [_line_dict(l) for l in self.lines],
            "notes": list(self.notes),
        }


@dataclass(frozen=True, kw_only=True)
class InferMemory:
    """Per-GPU memory of an inference job."""

    precision: str
    params: int
    weights_bytes: int
    kv_cache_bytes: int
    activations_bytes: int
    overhead_bytes: int
    total_bytes: int
    peak_phase: str
    kv_dtype: str
    overhead: Overhead
    lines: tuple[Line, ...]
    notes: tuple[str, ...] = ()
    tensor_parallel: int = 1
    kv_cache_full_bytes: int = 0
    """KV cache once the whole context is cached (the decode phase's)."""
    prefill_bytes: int = 0
    """KV cache of the prompt + the prefill working set (the prefill phase, without weights)."""
    decode_bytes: int = 0
    """KV cache of the whole context + one decode step's working set."""

    def per_gpu(self) -> dict[str, int]:
        return {
            "weights_bytes": self.weights_bytes,
            "kv_cache_bytes": self.kv_cache_bytes,
            "activations_bytes": self.activations_bytes,
            "overhead_bytes": self.overhead_bytes,
            "total_bytes": self.total_bytes,
        }

    def to_dict(self) -> dict:
        return {
            "precision": self.precision,
            "kv_dtype": self.kv_dtype,
            "tensor_parallel": self.tensor_parallel,
            "per_gpu": self.per_gpu(),
            "peak_phase": self.peak_phase,
            "phases": {"prefill": self.weights_bytes + self.prefill_bytes,
                       "decode": self.weights_bytes + self.decode_bytes},
            "kv_cache_full_bytes": self.kv_cache_full_bytes,
            "overhead": self.overhead.to_dict(),
            "lines": [_line_dict(l) for l in self.lines],
            "notes": list(self.notes),
        }


def _line_dict(l: Line) -> dict:
    d = {"key": l.key, "label": l.label, "bytes": l.bytes}
    if l.bytes_per_param is not None:
        d["bytes_per_param"] = l.bytes_per_param
    if l.note:
        d["note"] = l.note
    return d


# --------------------------------------------------------------------------------------------------
# LoRA


def lora_tensors(model: Model, rank: int, targets: tuple[str, ...] | None) -> tuple[ParamTensor, ...]:
    """The adapter tensors LoRA adds: for each targeted linear (out, in), A (r, in) and B (out, r)."""
    if not model.tensors:
        raise InputError(
            f"LoRA needs the model's layer shapes, but {model.name!r} is only a parameter count; "
            "give a catalog name, a config.json or a model directory")
    family = model.architecture.family if model.architecture else ""
    if targets is None:
        targets = DEFAULT_LORA_TARGETS.get(family, ())
        if not targets:
            raise InputError(f"no default LoRA targets for family {family!r}; give --lora-targets")
    linears = [t for t in model.tensors if t.linear and len(t.shape) == 2]
    if targets == ("all-linear",):
        chosen = [t for t in linears if t.component not in ("head", "embeddings")]
    else:
        known = sorted({t.module for t in linears})
        unknown = [m for m in targets if m not in known]
        if unknown:
            raise InputError(
                f"LoRA target {unknown[0]!r} is not a linear module of {model.name}; "
                f"its linear modules are: {', '.join(known)} (or all-linear)")
        chosen = [t for t in linears if t.module in targets]
    out: list[ParamTensor] = []
    for t in chosen:
        o, i = t.out_features, t.in_features
        base = t.name.rsplit(".weight", 1)[0]
        out.append(ParamTensor(f"{base}.lora_A.weight", (rank, i), t.count, t.component,
                               "lora_A", True))
        out.append(ParamTensor(f"{base}.lora_B.weight", (o, rank), t.count, t.component,
                               "lora_B", True))
    return tuple(out)


# --------------------------------------------------------------------------------------------------
# Training


def _state_bytes(recipe: TrainingRecipe, job: Job) -> int:
    if job.optimizer_states == "auto":
        return recipe.state_bytes
    return 4 if job.optimizer_states == "fp32" else 2


@dataclass(frozen=True)
class _States:
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


_STATES: dict[tuple, tuple[Model, _States]] = {}


def _train_states(model: Model, job: Job) -> _States:
    key = (id(model), job.precision, job.optimizer, job.optimizer_states, job.lora_rank,
           job.lora_targets, job.lora_base, job.gpus, job.zero, job.offload_optimizer,
           job.fused_optimizer)
    hit = _STATES.get(key)
    if hit is not None and hit[0] is model:
        return hit[1]
    st = _compute_states(model, job)
    if len(_STATES) > 4096:
        _STATES.clear()
    _STATES[key] = (model, st)
    return st


def _compute_states(model: Model, job: Job) -> _States:
    recipe = get_recipe(job.precision)
    opt = get_optimizer(job.optimizer)
    n = model.params.total
    notes: list[str] = []
    state_b = _state_bytes(recipe, job)

    # What is trained: the whole model, or LoRA adapters on a frozen base.
    if job.lora_rank is not None:
        adapters = lora_tensors(model, job.lora_rank, job.lora_targets)
        trainable_tensors: tuple[ParamTensor, ...] | None = adapters
        trainable = sum(t.total for t in adapters)
        if job.lora_base is not None:
            fmt = get_weight_format(job.lora_base)
            base_bytes = weights_bytes_in_format(fmt, model.tensors, model.architecture, n)
            base_label = f"frozen base, {fmt.name}"
        else:
            base_bytes = n * recipe.weight_bytes
            base_label = f"frozen base, {recipe.weight_bytes * 8}-bit"
        notes.append(f"LoRA rank {job.lora_rank}: {trainable:,} trainable parameters "
                     f"({100 * trainable / n:.2f}% of {n:,})")
    else:
        trainable_tensors = model.tensors or None
        trainable = n
        base_bytes = 0
        base_label = ""

    weights_trainable = trainable * recipe.weight_bytes
    grads = trainable * recipe.grad_bytes
    master = trainable * recipe.master_bytes
    opt_bytes, opt_note = optimizer_state_bytes(opt, trainable_tensors, trainable, state_b)
    if opt_note:
        notes.append(opt_note)

    # Sharding over the data-parallel group (ZeRO stages / FSDP).
    g = job.gpus
    z = job.zero
    host = 0
    if z >= 1:
        master, opt_bytes = shard(master, g), shard(opt_bytes, g)
    if z >= 2:
        grads = shard(grads, g)
    if z >= 3:
        weights_trainable = shard(weights_trainable, g)
        base_bytes = shard(base_bytes, g)
    if job.offload_optimizer:
        # ZeRO-Offload: fp32 master + optimizer states (and an fp32 gradient copy for the CPU
        # optimizer step) live in host memory.
        host = master + opt_bytes + (shard(trainable * 4, g) if z >= 1 else trainable * 4)
        master, opt_bytes = 0, 0
        notes.append("optimizer offloaded: fp32 master copy, states and an fp32 gradient copy "
                     "in host memory")

    gathered = 0
    if z >= 3 and g > 1:
        gathered = _gathered_unit_bytes(model, recipe, base_bytes > 0, job)
    step_tmp, step_detail = _act.optimizer_step_temporaries(
        job, recipe, opt, trainable, model, shard=g if z >= 1 else 1)
    return _States(state_b=state_b, trainable=trainable, base=base_bytes, base_label=base_label,
                   weights_trainable=weights_trainable, grads=grads, master=master, opt=opt_bytes,
                   host=host, gathered=gathered, step_tmp=step_tmp, step_detail=step_detail,
                   notes=tuple(notes))


def train_memory(model: Model, job: Job, *, overhead_level: OverheadLevel = "expected",
                 overhead_overrides=None) -> TrainMemory:
    """Per-GPU memory of training ``model`` as ``job`` describes, at the peak of a step."""
    recipe = get_recipe(job.precision)
    opt = get_optimizer(job.optimizer)
    n = model.params.total
    st = _train_states(model, job)
    notes = list(st.notes)
    state_b, trainable, base_bytes, base_label = st.state_b, st.trainable, st.base, st.base_label
    weights_trainable, grads, master, opt_bytes = st.weights_trainable, st.grads, st.master, st.opt
    g, z, host, gathered = job.gpus, job.zero, st.host, st.gathered
    weights = weights_trainable + base_bytes
    _act.check_seq(model, job)
    act = _act.train_activations(model, job, grad_bytes=grads)
    notes.extend(act.notes)
    step_tmp, step_detail = st.step_tmp, st.step_detail

    phases = _train_phases(job, weights=weights, grads=grads, master=master, opt_bytes=opt_bytes,
                           gathered=gathered, act=act, step_tmp=step_tmp, step_detail=step_detail)
    peak_phase = max(phases, key=lambda p: phases[p].total)
    at_peak = phases[peak_phase]
    overhead = runtime_overhead(
        gpus=g, zero=z, grad_bytes=trainable * recipe.grad_bytes, grad_elem_bytes=recipe.grad_bytes,
        dynamic=at_peak.gradients + at_peak.activations + at_peak.temporaries,
        level=overhead_level, overrides=overhead_overrides)
    total = at_peak.total + overhead.bytes

    per_param = lambda b: b / n  # noqa: E731
    lines = []
    if base_bytes:
        lines.append(Line(key="weights", label=base_label, bytes=base_bytes,
                          bytes_per_param=per_param(base_bytes)))
    lines += [
        Line(key="weights", label=f"weights, {recipe.weight_bytes * 8}-bit"
             + (" (adapters)" if base_bytes else ""),
             bytes=weights_trainable, bytes_per_param=per_param(weights_trainable)),
        Line(key="gradients", label=f"gradients, {recipe.grad_bytes * 8}-bit",
             bytes=at_peak.gradients, bytes_per_param=per_param(grads)),
        Line(key="master_weights", label="32-bit master copy of the weights", bytes=master,
             bytes_per_param=per_param(master)),
        Line(key="optimizer", label=_opt_label(opt, state_b), bytes=opt_bytes,
             bytes_per_param=per_param(opt_bytes)),
    ]
    if gathered:
        lines.append(Line(key="gathered_params", label="gathered ZeRO-3/FSDP units",
                          bytes=gathered, note="largest wrapped unit, current + prefetched"))
    lines.append(Line(key="activations", label="activations", bytes=at_peak.activations,
                      note=act.summary))
    if at_peak.temporaries:
        lines.append(Line(key="temporaries", label="step temporaries", bytes=at_peak.temporaries,
                          note=at_peak.detail))
    lines.append(Line(key="overhead", label=f"runtime overhead ({overhead_level})",
                      bytes=overhead.bytes))
    if host:
        notes.append(f"host memory per GPU process: {host:,} bytes")

    return TrainMemory(
        precision=recipe.name, optimizer=opt.name, params=n, trainable_params=trainable,
        weights_bytes=weights, gradients_bytes=at_peak.gradients, master_weights_bytes=master,
        optimizer_bytes=opt_bytes, activations_bytes=at_peak.activations,
        temporaries_bytes=at_peak.temporaries, gathered_params_bytes=gathered,
        overhead_bytes=overhead.bytes, total_bytes=total, peak_phase=peak_phase, host_bytes=host,
        overhead=overhead, lines=tuple(lines), notes=tuple(notes),
        activations_known=act.known, phases={p: v.total for p, v in phases.items()},
        activation_detail=({"saved_bytes": act.saved_bytes,
                            "per_layer_saved_bytes": list(act.per_layer_bytes),
                            "forward_peak_at": act.forward_detail,
                            "backward_peak_at": act.backward_detail} if act.known else {}),
    )


def _opt_label(opt, state_b: int) -> str:
    if opt.kind == "8bit":
        return f"optimizer states ({opt.name}, 8-bit + block scales)"
    if opt.kind == "factored":
        return f"optimizer states ({opt.name}, factored, {state_b * 8}-bit)"
    if opt.states == 0:
        return f"optimizer states ({opt.name}: none)"
    return f"optimizer states ({opt.name}: {opt.states} x {state_b * 8}-bit)"


def _gathered_unit_bytes(model: Model, recipe: TrainingRecipe, lora: bool, job: Job) -> int:
    """ZeRO-3/FSDP gathers one wrapped unit (a transformer layer) at a time, and prefetches the
    next: two units of full-size parameters in the weight dtype."""
    arch = model.architecture
    if arch is None or not model.tensors:
        # Unknown layout: assume 1/32 of the model per unit (a 32-layer model), stated.
        unit = math.ceil(model.params.total / 32)
    else:
        # One transformer layer is the wrapped unit (the largest layer where layers differ,
        # e.g. dense and MoE layers interleaved); embeddings and head are units of their own.
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
        unit = max(per_layer,
                   max((t.total for t in model.tensors if t.component in ("embeddings", "head")),
                       default=0))
    elem = recipe.weight_bytes
    if lora and job.lora_base is not None:
        elem = 2  # quantized bases are gathered and dequantized to 16-bit
    return 2 * unit * elem


@dataclass(frozen=True)
class _Phase:
    weights: int
    gradients: int
    master: int
    optimizer: int
    activations: int
    temporaries: int
    gathered: int
    detail: str = ""

    @property
    def total(self) -> int:
        return (self.weights + self.gradients + self.master + self.optimizer + self.activations
                + self.temporaries + self.gathered)


def _train_phases(job: Job, *, weights: int, grads: int, master: int, opt_bytes: int,
                  gathered: int, act: "_act.TrainActivations", step_tmp: int,
                  step_detail: str) -> dict[str, _Phase]:
    """Memory at the peak of each phase of a step (DESIGN.md, "What a training step really
    holds"). zero_grad(set_to_none=True) frees the gradients after the step, so the first
    micro-step's forward runs without them; with gradient accumulation the last micro-step's
    forward and backward run with all of them alive. The optimizer step holds the gradients, the
    states and the step's temporaries; the activations are gone by then."""
    base = dict(weights=weights, master=master, optimizer=opt_bytes, gathered=gathered)
    accum = grads if job.grad_accum > 1 else 0
    return {
        "forward": _Phase(gradients=accum, activations=act.forward_peak,
                          temporaries=act.forward_temporaries, detail=act.forward_detail, **base),
        "backward": _Phase(gradients=act.backward_grads if act.known else grads,
                           activations=act.backward_peak,
                           temporaries=act.backward_temporaries, detail=act.backward_detail,
                           **base),
        "optimizer": _Phase(gradients=grads, activations=0, temporaries=step_tmp,
                            detail=step_detail or "optimizer step", **base),
    }


# --------------------------------------------------------------------------------------------------
# Inference


def infer_memory(model: Model, job: Job, *, tensor_parallel: int = 1,
                 overhead_level: OverheadLevel = "expected", overhead_overrides=None) -> InferMemory:
    """Per-GPU memory of serving ``model`` in ``job.infer_precision`` (weights sharded over
    ``tensor_parallel`` GPUs when > 1)."""
    fmt = get_weight_format(job.infer_precision)
    n = model.params.total
    notes: list[str] = []
    weights = weights_bytes_in_format(fmt, model.tensors, model.architecture, n)
    if not model.tensors and fmt.name not in ("fp32", "bf16", "fp16"):
        notes.append(f"layer shapes unknown: every parameter assumed stored as {fmt.name} "
                     f"({fmt.bits:g} bits)")
    kv_dtype = job.kv_dtype or ("fp32" if fmt.compute_dtype == "fp32" else "bf16")
    _act.check_seq(model, job)
    arch = model.architecture
    prompt = _act.seq_for(model, job)
    context = job.context or prompt
    kv_full = _act.kv_cache_bytes(model, job, kv_dtype=kv_dtype, context=context)
    kv_prompt = _act.kv_cache_bytes(model, job, kv_dtype=kv_dtype, context=min(prompt or 0, context or 0))
    act = _act.infer_activations(model, job, fmt)
    notes.extend(act.notes)
    if tensor_parallel > 1:
        weights = shard(weights, tensor_parallel)
        # K/V heads are split over the tensor-parallel ranks; with fewer KV heads than ranks
        # each rank still holds a whole head (replicated)
        if arch is not None and arch.kind == "decoder":
            per_rank = -(-arch.num_kv_heads // tensor_parallel)
            kv_full = -(-kv_full * per_rank // arch.num_kv_heads)
            kv_prompt = -(-kv_prompt * per_rank // arch.num_kv_heads)
        ws_scale = tensor_parallel
    else:
        ws_scale = 1
    pre_ws = -(-act.prefill_bytes // ws_scale)
    dec_ws = -(-act.decode_bytes // ws_scale)
    # The prompt's cache during prefill, the whole context's during decode.
    if arch is not None and arch.kind != "decoder":
        peak_phase, kv, working = "forward", 0, pre_ws
    elif kv_prompt + pre_ws >= kv_full + dec_ws:
        peak_phase, kv, working = "prefill", kv_prompt, pre_ws
    else:
        peak_phase, kv, working = "decode", kv_full, dec_ws
    overhead = runtime_overhead(gpus=tensor_parallel, zero=0, grad_bytes=0, grad_elem_bytes=2,
                                dynamic=kv + working, level=overhead_level, training=False,
                                overrides=overhead_overrides)
    total = weights + kv + working + overhead.bytes
    kv_note = ""
    if arch is not None and arch.kind == "decoder":
        per_tok = kv_full / max(1, job.batch * (context or 1))
        kv_note = (f"{job.batch} x {context} tokens, {per_tok / 1e3:.1f} kB per token"
                   + (f"; {len(arch.sliding_window_layers)} sliding-window layers capped at "
                      f"{arch.sliding_window}" if arch.sliding_window else ""))
        if kv != kv_full:
            kv_note += f"; {kv_full:,} bytes once {context} tokens are cached"
    lines = (
        Line(key="weights", label=f"weights, {fmt.name}", bytes=weights,
             bytes_per_param=weights / n, note=fmt.convention if model.tensors else ""),
        Line(key="kv_cache", label=f"KV cache, {kv_dtype}", bytes=kv, note=kv_note),
        Line(key="activations", label=f"activations ({peak_phase})", bytes=working,
             note=act.summary),
        Line(key="overhead", label=f"runtime overhead ({overhead_level})", bytes=overhead.bytes),
    )
    return InferMemory(
        precision=fmt.name, params=n, weights_bytes=weights, kv_cache_bytes=kv,
        activations_bytes=working, overhead_bytes=overhead.bytes, total_bytes=total,
        peak_phase=peak_phase, kv_dtype=kv_dtype, overhead=overhead, lines=lines,
        notes=tuple(notes), tensor_parallel=tensor_parallel, kv_cache_full_bytes=kv_full,
        prefill_bytes=kv_prompt + pre_ws, decode_bytes=kv_full + dec_ws,
    )
