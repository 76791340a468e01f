"""The speed estimate of a job: one step's ops timed on a device, throughput, MFU/HFU, prefill and
decode, transfers, data-parallel scaling, time and cost to train, and the same job on a CPU
(alone, or against the GPU)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal, Sequence

from .device import (
    Device, Efficiency, apply_measured, default_efficiency, device_from_cpu, device_from_gpu,
    load_measured,
)
from .flops import (
    Op, StepShape, backward_ops, build_forward_ops, default_seq, optimizer_op, positive_int,
    recompute_ops,
)
from .time import (
    OpTime, RooflineClass, ScalingTable, TrainingTime, TransferEstimate, data_parallel_scaling,
    estimate_transfer, link_bandwidth, roofline_classes, step_bound, time_ops, time_to_train,
)
from ..errors import InputError, UnknownNameError, UnsupportedError
from ..formats import (
    TRAINING_RECIPES, WEIGHT_FORMATS, get_optimizer, optimizer_state_bytes,
)
from ..hardware import GPU
from ..job import KV_DTYPES, Job
from ..models._types import Architecture, Model
from ..units import format_seconds

if TYPE_CHECKING:  # pragma: no cover
    from ..hardware.cpu import CPU

__all__ = [
    "Phase", "SpeedEstimate", "CpuEstimate", "CpuComparison", "SweepPoint", "BatchSweep",
    "estimate_speed", "estimate_cpu_speed", "estimate_speed_for_job", "speed_section",
    "SECTION_FIELDS", "KV_BYTES", "batch_sweep", "input_bytes_per_sample", "Mode", "Recompute",
    "Attention",
]

Mode = Literal["train", "infer"]
Recompute = Literal["none", "selective", "full"]
Attention = Literal["flash", "sdpa", "eager"]
"""``flash`` (``sdpa`` is the same here: PyTorch's fused flash/memory-efficient kernels) skips fully
masked blocks and never stores the scores; ``eager`` materializes the s x s scores."""

#: Bytes per KV-cache element by dtype name: the job's (and the memory accounting's) one table.
KV_BYTES = KV_DTYPES

_ACT_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 2, "int8": 2}


@dataclass(frozen=True, kw_only=True)
class Phase:
    """One kind of step timed on one device: a training step, a prefill, a decode step, or a
    forward pass."""

    name: Literal["train", "prefill", "decode", "forward"]
    batch: int
    q_len: int
    """New tokens per sequence in this step."""
    kv_len: int
    """Keys each query sees (the context)."""
    ops: tuple[OpTime, ...]
    launch_s: float
    """Overhead per kernel launch."""
    peak_flops: float
    """Dense peak of the compute dtype (the MFU denominator)."""
    dtype: str
    micro_steps: int = 1
    """Gradient-accumulation micro-batches in the step (their ops' counts include it)."""

    @property
    def tokens(self) -> int:
        return self.batch * self.q_len * self.micro_steps

    @property
    def kernels(self) -> int:
        return sum(t.op.kernels * t.op.count for t in self.ops)

    @property
    def kernel_time_s(self) -> float:
        return sum(t.total_s for t in self.ops)

    @property
    def launch_time_s(self) -> float:
        return self.kernels * self.launch_s

    @property
    def time_s(self) -> float:
        """Sum over ops of max(compute, memory) + launches."""
        return self.kernel_time_s + self.launch_time_s

    @property
    def flops(self) -> float:
        """Executed FLOPs (kernels' work, elementwise included)."""
        return sum(t.op.flops * t.op.count for t in self.ops)

    @property
    def model_flops(self) -> float:
        """Counted matmul FLOPs without recompute (MFU numerator)."""
        return sum(t.op.counted_flops * t.op.count for t in self.ops if t.op.phase != "recompute")

    @property
    def hardware_flops(self) -> float:
        """Counted matmul FLOPs with recompute (HFU numerator)."""
        return sum(t.op.counted_flops * t.op.count for t in self.ops)

    @property
    def bytes(self) -> float:
        return sum(t.op.bytes * t.op.count for t in self.ops)

    @property
    def bound(self) -> Literal["compute", "memory"]:
        return step_bound(self.ops)

    @property
    def backward_s(self) -> float:
        return sum(t.total_s for t in self.ops if t.op.phase == "backward")

    @property
    def classes(self) -> tuple[RooflineClass, ...]:
        return roofline_classes(self.ops)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.time_s

    @property
    def mfu(self) -> float:
        return self.model_flops / (self.time_s * self.peak_flops)

    @property
    def hfu(self) -> float:
        return self.hardware_flops / (self.time_s * self.peak_flops)

    def to_dict(self, *, ops: bool = True) -> dict:
        d = {"name": self.name, "batch": self.batch, "q_len": self.q_len, "kv_len": self.kv_len,
             "micro_steps": self.micro_steps, "tokens": self.tokens, "time_s": self.time_s, "kernel_time_s": self.kernel_time_s,
             "launch_time_s": self.launch_time_s, "kernels": self.kernels,
             "tokens_per_s": self.tokens_per_s, "flops": self.flops,
             "model_flops": self.model_flops, "hardware_flops": self.hardware_flops,
             "bytes": self.bytes, "bound": self.bound, "mfu": self.mfu, "hfu": self.hfu,
             "classes": [c.to_dict() for c in self.classes]}
        if ops:
            d["ops"] = [t.to_dict() for t in self.ops]
        return d


@dataclass(frozen=True, kw_only=True)
class CpuEstimate:
    """One step of a job on a CPU, in fp32 (the CPU side has fp32 peaks only), on one device: no
    host-to-device copy, no data parallelism."""

    model: str
    cpu: str
    """The CPU's model name."""
    peak_basis: str
    """How its fp32 peak was obtained: the estimate's arithmetic, or a ``gpuplan bench`` run."""
    mode: Mode
    batch: int
    seq: int
    step: Phase
    """A training step; for a decoder's inference, one decode step; for an encoder's inference,
    one forward pass (as :attr:`SpeedEstimate.step`)."""
    prefill: Phase | None = None
    new_tokens: int | None = None
    """Tokens generated per sequence (decoder inference)."""
    efficiency: Efficiency
    notes: tuple[str, ...] = ()

    @property
    def dtype(self) -> str:
        return self.step.dtype

    @property
    def step_time_s(self) -> float:
        return self.step.time_s

    @property
    def request_time_s(self) -> float | None:
        """Decoder inference: prefill + ``new_tokens`` decode steps for one batch."""
        if self.prefill is None or self.new_tokens is None:
            return None
        return self.prefill.time_s + self.new_tokens * self.step.time_s


@dataclass(frozen=True, kw_only=True)
class CpuComparison:
    """The same job on this machine's CPU against the GPU, and a plain verdict."""

    cpu: str
    cpu_peak_basis: str
    cpu_dtype: str
    cpu_step_s: float
    gpu: str
    gpu_step_s: float
    """GPU step time with launches and the exposed host-to-device copy."""
    speedup: float
    """CPU step time / GPU step time."""
    cpu_job_s: float | None
    gpu_job_s: float | None
    needs_gpu: bool
    verdict: str

    def to_dict(self) -> dict:
        return {"cpu": self.cpu, "cpu_peak_basis": self.cpu_peak_basis,
                "cpu_dtype": self.cpu_dtype, "cpu_step_s": self.cpu_step_s, "gpu": self.gpu,
                "gpu_step_s": self.gpu_step_s, "speedup": self.speedup,
                "cpu_job_s": self.cpu_job_s, "gpu_job_s": self.gpu_job_s,
                "needs_gpu": self.needs_gpu, "verdict": self.verdict}


@dataclass(frozen=True, kw_only=True)
class SpeedEstimate:
    """How fast a job runs on a GPU, and why. Per-GPU figures unless named ``..._total``."""

    model: str
    gpu: str
    mode: Mode
    precision: str
    dtype: str
    """The dtype the matmuls run in (its dense peak is the MFU denominator)."""
    batch: int
    """Sequences (samples) per GPU per step."""
    seq: int
    gpus: int
    recompute: Recompute
    attention: Attention
    grad_accum: int = 1
    zero: int = 0
    trainable_params: int = 0
    """Parameters receiving gradients (LoRA: the adapters only)."""
    step: Phase
    """The step the headline numbers describe: a training step; for a decoder's inference, one
    decode step (one new token per sequence); for an encoder's inference, one forward pass."""
    prefill: Phase | None = None
    new_tokens: int | None = None
    """Tokens generated per sequence (decoder inference)."""
    transfer: TransferEstimate
    """The input copy of each headline step (decode: one token id per sequence)."""
    prefill_transfer: TransferEstimate | None = None
    """Decoder inference: the prompt's copy, on the request's critical path (not overlapped)."""
    scaling: ScalingTable | None = None
    training_time: TrainingTime | None = None
    cpu: CpuComparison | None = None
    efficiency: Efficiency
    ridge_point: float
    """Peak FLOP/s / memory bandwidth of the compute dtype: intensity above it is compute-bound."""
    achievable_ridge_point: float
    """The same with the achievable fractions."""
    notes: tuple[str, ...] = ()

    @property
    def flops_per_step(self) -> float:
        """Counted matmul FLOPs of one step on one GPU, recompute included (Megatron's "FLOPs per
        iteration" per GPU; the HFU numerator)."""
        return self.step.hardware_flops

    @property
    def model_flops_per_step(self) -> float:
        return self.step.model_flops

    @property
    def model_flops_per_token(self) -> float:
        """MFU FLOPs per token (training: 6N + attention; inference: 2N + attention)."""
        return self.step.model_flops / self.step.tokens

    @property
    def comm_exposed_s(self) -> float:
        if self.scaling is None:
            return 0.0
        return next(r.exposed_comm_s for r in self.scaling.rows if r.gpus == self.gpus)

    @property
    def step_time_s(self) -> float:
        """One step: its ops, launches, the exposed input copy and the exposed all-reduce."""
        return self.step.time_s + self.transfer.exposed_s + self.comm_exposed_s

    @property
    def tokens_per_s(self) -> float:
        """Tokens per second over all GPUs (decode: tokens generated)."""
        return self.gpus * self.step.tokens / self.step_time_s

    @property
    def request_time_s(self) -> float | None:
        """Decoder inference: prefill + ``new_tokens`` decode steps for one batch."""
        if self.prefill is None or self.new_tokens is None:
            return None
        pt = self.prefill_transfer.exposed_s if self.prefill_transfer is not None else 0.0
        return self.prefill.time_s + pt + self.new_tokens * self.step_time_s

    @property
    def samples_per_s(self) -> float:
        """Sequences per second over all GPUs (decoder inference: whole requests completed)."""
        rt = self.request_time_s
        if rt is not None:
            return self.gpus * self.batch / rt
        return self.gpus * self.batch * self.step.micro_steps / self.step_time_s

    @property
    def mfu(self) -> float:
        return self.step.model_flops / (self.step_time_s * self.step.peak_flops)

    @property
    def hfu(self) -> float:
        return self.step.hardware_flops / (self.step_time_s * self.step.peak_flops)

    @property
    def bound(self) -> Literal["compute", "memory"]:
        return self.step.bound

    def to_dict(self, *, ops: bool = True) -> dict:
        d: dict[str, Any] = {
            "model": self.model, "gpu": self.gpu, "mode": self.mode,
            "precision": self.precision, "dtype": self.dtype, "batch": self.batch,
            "seq": self.seq, "gpus": self.gpus, "recompute": self.recompute,
            "attention": self.attention, "grad_accum": self.grad_accum, "zero": self.zero,
            "trainable_params": self.trainable_params,
            "flops_per_step": self.flops_per_step,
            "model_flops_per_step": self.model_flops_per_step,
            "model_flops_per_token": self.model_flops_per_token,
            "executed_flops_per_step": self.step.flops,
            "bytes_per_step": self.step.bytes,
            "step_time_s": self.step_time_s, "kernel_time_s": self.step.kernel_time_s,
            "launch_time_s": self.step.launch_time_s, "kernels_per_step": self.step.kernels,
            "transfer_exposed_s": self.transfer.exposed_s,
            "comm_exposed_s": self.comm_exposed_s,
            "tokens_per_s": self.tokens_per_s, "samples_per_s": self.samples_per_s,
            "mfu": self.mfu, "hfu": self.hfu, "bound": self.bound,
            "peak_flops": self.step.peak_flops, "ridge_point": self.ridge_point,
            "achievable_ridge_point": self.achievable_ridge_point,
            "step": self.step.to_dict(ops=ops),
            "prefill": None if self.prefill is None else self.prefill.to_dict(ops=ops),
            "new_tokens": self.new_tokens, "request_time_s": self.request_time_s,
            "transfer": self.transfer.to_dict(),
            "prefill_transfer": None if self.prefill_transfer is None
            else self.prefill_transfer.to_dict(),
            "scaling": None if self.scaling is None else self.scaling.to_dict(),
            "training_time": None if self.training_time is None else self.training_time.to_dict(),
            "cpu": None if self.cpu is None else self.cpu.to_dict(),
            "efficiency": self.efficiency.to_dict(), "notes": list(self.notes),
        }
        return d


# --------------------------------------------------------------------------------------------------
# Precision


@dataclass(frozen=True)
class _Prec:
    name: str
    dtype: str
    act: int
    weight: float
    head: float
    embed: float
    grad: int
    weight_store: int
    master: int
    state: int
    autocast: bool


def _check_dtype(device: Device, dtype: str, mode: str, precision: str) -> None:
    if device.supports(dtype):
        return
    remedy = {
        "bf16": "--precision mixed-fp16" if mode == "train" else "--precision fp16",
        "tf32": "run without --tf32 (plain fp32)",
        "fp8": "--precision bf16 or fp16",
        "int8": "--precision bf16 or fp16",
        "fp16": "--precision fp32",
    }.get(dtype, "another --precision")
    have = ", ".join(d for d in ("fp32", "tf32", "bf16", "fp16", "fp8", "int8")
                     if device.supports(d))
    raise UnsupportedError(f"{device.name} has no {dtype} support (it has {have}); "
                           f"use {remedy}")


def _precision(mode: Mode, precision: str | None, device: Device, tf32: bool) -> _Prec:
    if mode == "train":
        name = precision or "mixed-bf16"
        if name not in TRAINING_RECIPES:
            hint = ("an inference weight format; training recipes: " if name in WEIGHT_FORMATS
                    else "training recipes: ") + ", ".join(TRAINING_RECIPES)
            raise UnknownNameError("training precision", name, TRAINING_RECIPES, hint=hint)
        r = TRAINING_RECIPES[name]
        dtype = "tf32" if (r.compute_dtype == "fp32" and tf32) else r.compute_dtype
        _check_dtype(device, dtype, mode, name)
        act = _ACT_BYTES[dtype]
        w = 2 if r.autocast else r.weight_bytes
        return _Prec(name=name, dtype=dtype, act=act, weight=w, head=w, embed=r.weight_bytes,
                     grad=r.grad_bytes, weight_store=r.weight_bytes, master=r.master_bytes,
                     state=r.state_bytes, autocast=r.autocast)
    name = precision or "bf16"
    if name in WEIGHT_FORMATS:
        f = WEIGHT_FORMATS[name]
    elif name in TRAINING_RECIPES:
        f = WEIGHT_FORMATS[TRAINING_RECIPES[name].compute_dtype]
    else:
        raise UnknownNameError("inference precision", name, list(WEIGHT_FORMATS),
                               hint="weight formats: " + ", ".join(WEIGHT_FORMATS))
    dtype = "tf32" if (f.compute_dtype == "fp32" and tf32) else f.compute_dtype
    _check_dtype(device, dtype, mode, name)
    act = _ACT_BYTES[dtype]
    dense = f.name in ("fp32", "bf16", "fp16")
    w = f.bits / 8
    head = w if dense else 2.0
    return _Prec(name=name, dtype=dtype, act=act, weight=w, head=head, embed=head, grad=act,
                 weight_store=int(math.ceil(w)), master=0, state=0, autocast=False)


# --------------------------------------------------------------------------------------------------
# Inputs


def input_bytes_per_sample(arch: Architecture | None, seq: int, mode: Mode) -> int:
    """Bytes copied to the GPU per sequence: int64 ``input_ids`` and ``attention_mask`` (+
    ``labels`` in training; + ``token_type_ids`` for an encoder), or fp32 ``pixel_values`` (+ an
    int64 label) for a vision model -- what a Hugging Face data collator produces."""
    if arch is not None and arch.kind == "vision":
        c = arch.num_channels or 3
        return c * arch.image_size * arch.image_size * 4 + (8 if mode == "train" else 0)
    tensors = 2 + (1 if mode == "train" else 0) + (1 if arch is not None and arch.kind ==
                                                   "encoder" else 0)
    return tensors * 8 * seq


# --------------------------------------------------------------------------------------------------
# The estimate


def _check_job(*, mode: object, recompute: object, attention: object, kv_dtype: object,
               batch: object, grad_accum: object, new_tokens: object, context: object,
               trainable_params: object) -> None:
    """The checks of a job's options that every device's estimate shares (one line each)."""
    if mode not in ("train", "infer"):
        raise InputError(f"mode {mode!r}: expected train or infer")
    if recompute not in ("none", "selective", "full"):
        raise InputError(f"recompute {recompute!r}: expected none, selective or full")
    if attention not in ("flash", "sdpa", "eager"):
        raise InputError(f"attention {attention!r}: expected flash (or sdpa) or eager")
    if kv_dtype is not None and kv_dtype not in KV_BYTES:
        raise InputError(f"kv dtype {kv_dtype!r}: expected one of {', '.join(KV_BYTES)}")
    positive_int(grad_accum, "gradient accumulation", 10**6)
    if context is not None:
        positive_int(context, "context", 10**8)
    if trainable_params is not None:
        positive_int(trainable_params, "trainable parameters", 10**15)
    positive_int(batch, "batch", 10**7)
    positive_int(new_tokens, "new tokens", 10**7)


def _resolve_seq(arch: Architecture | None, seq: int | None, notes: list[str]) -> int:
    """The sequence length the step uses (a vision model's: its patches), with a note where it is
    not what was asked or not what the model was built for."""
    if arch is None:
        seq = default_seq(None) if seq is None else positive_int(seq, "sequence length", 10**8)
        notes.append("architecture unknown (parameter count only): 2N FLOPs per token forward, "
                     "no attention term, no per-op roofline, no small-work occupancy")
    elif arch.kind == "vision":
        want = default_seq(arch)
        if seq is not None and seq != want:
            notes.append(f"a vision model's sequence is its patches + [CLS]: {want}, not {seq}")
        seq = want
    else:
        seq = default_seq(arch) if seq is None else positive_int(seq, "sequence length", 10**8)
        if arch.max_position_embeddings and seq > arch.max_position_embeddings:
            notes.append(f"seq {seq} exceeds the model's max_position_embeddings "
                         f"({arch.max_position_embeddings})")
    return seq


_LORA_NOTE = ("LoRA adapters assumed rank 16 on q and v (PEFT's default targets); pass "
              "trainable_params for the exact count")


def _arch_and_name(model: Model | Architecture) -> tuple[Architecture | None, str, int, tuple]:
    if isinstance(model, Architecture):
        n = sum(t.total for t in model.tensors) if model.tensors else 0
        return model, model.name, n, model.tensors
    if isinstance(model, Model):
        return model.architecture, model.name, model.params.total, model.tensors
    raise InputError(f"model {model!r}: expected a gpuplan Model or Architecture")


def _count_only_ops(n: int, shape: StepShape, prec: _Prec, slots: int) -> tuple[Op, ...]:
    T = shape.batch * shape.q_len
    f = 2.0 * n * T
    # shapes unknown: the weights are read once (activation traffic unknown, left out) and the
    # outputs are assumed to fill the device
    op = Op(name="model.matmuls", op_class="mlp", kind="matmul", phase="forward", count=1,
            flops=f, counted_flops=f, bytes=n * prec.weight, parallel_work=slots, kernels=1,
            weight_elements=n, shape=None, group="dense")
    return (op,)


def _params_estimate(arch: Architecture, fwd: Sequence[Op]) -> int:
    """Weight elements when the tensor list is unknown: matmul weights + embedding table."""
    n = sum(op.weight_elements * op.count for op in fwd if op.weight_elements)
    if arch.kind != "vision" and arch.vocab_size and arch.tie_word_embeddings is False:
        n += arch.vocab_size * arch.hidden_size  # the input table is separate from the head
    if arch.kind != "vision" and arch.vocab_size and not any(o.name == "logits.head" for o in fwd):
        n += arch.vocab_size * arch.hidden_size
    return n


def _phase(name, ops, device, eff, dtype, *, batch, q_len, kv_len, micro_steps=1) -> Phase:
    return Phase(name=name, batch=batch, q_len=q_len, kv_len=kv_len,
                 ops=time_ops(ops, device, eff, dtype), launch_s=eff.launch_s,
                 peak_flops=device.peak(dtype), dtype=dtype, micro_steps=micro_steps)


def _lora_params(arch: Architecture, rank: int) -> int:
    """PEFT's default LoRA targets for decoder LMs (q_proj and v_proj): r x (in + out) each."""
    nq, nkv = arch.num_heads * arch.head_dim, arch.num_kv_heads * arch.head_dim
    return arch.num_layers * rank * (2 * arch.hidden_size + nq + nkv)


@dataclass(frozen=True)
class _Train:
    optimizer: str
    grad_accum: int
    zero: int
    gpus: int
    lora: bool
    trainable: int | None


def _build(arch: Architecture | None, n_params: int, tensors: tuple, device: Device,
           eff: Efficiency, prec: _Prec, *, mode: Mode, batch: int, seq: int, recompute: Recompute,
           attention: str, train: _Train, new_tokens: int, context: int | None,
           kv_bytes: int | None) -> tuple[Phase, Phase | None, int, int]:
    """(headline step, prefill or None, parameters, trainable parameters)."""
    kw = dict(act_bytes=prec.act, weight_bytes=prec.weight, head_bytes=prec.head,
              embed_bytes=prec.embed, kv_bytes=kv_bytes or prec.act, grad_bytes=prec.grad,
              attention=attention)
    if mode == "train":
        shape = StepShape(batch=batch, q_len=seq, kv_len=seq, train=True)
        if arch is None:
            fwd = _count_only_ops(n_params, shape, prec, device.parallel_slots)
        else:
            fwd = build_forward_ops(arch, shape, **kw)
            n_params = n_params or _params_estimate(arch, fwd)
        micro = list(fwd)
        micro += backward_ops(fwd, act_bytes=prec.act, grad_bytes=prec.grad,
                              weight_grads=not train.lora)
        micro += recompute_ops(fwd, recompute, attention) if arch is not None else [
            replace(o, phase="recompute") for o in fwd if recompute == "full"]
        if prec.autocast:
            mm = [o for o in fwd if o.weight_elements]
            micro.append(Op(name="autocast.cast", op_class="norm_elementwise",
                            kind="elementwise", phase="forward", count=1, flops=0.0,
                            counted_flops=0.0, bytes=6.0 * n_params,
                            parallel_work=max(1, n_params),
                            kernels=sum(o.count * o.kernels for o in mm) or 1, group="head"))
        ops = [replace(o, count=o.count * train.grad_accum) for o in micro]
        if train.lora:
            trainable = train.trainable or (_lora_params(arch, 16) if arch is not None
                                             else max(1, n_params // 1000))
            opt_tensors = None
        else:
            trainable = n_params
            opt_tensors = tensors or None
        opt = get_optimizer(train.optimizer)
        states, _ = optimizer_state_bytes(opt, opt_tensors, trainable, prec.state)
        shard = train.gpus if train.zero >= 1 else 1  # ZeRO >= 1: each GPU updates its shard
        ops.append(optimizer_op(max(1, trainable // shard), state_bytes_total=states / shard,
                                grad_bytes=prec.grad, weight_bytes=prec.weight_store,
                                master_bytes=prec.master, tensors=len(tensors) or 1))
        return (_phase("train", ops, device, eff, prec.dtype, batch=batch, q_len=seq,
                       kv_len=seq, micro_steps=train.grad_accum), None, n_params, trainable)
    if arch is not None and arch.kind != "decoder":
        shape = StepShape(batch=batch, q_len=seq, kv_len=seq)
        fwd = build_forward_ops(arch, shape, **kw)
        return (_phase("forward", fwd, device, eff, prec.dtype, batch=batch, q_len=seq,
                       kv_len=seq), None, n_params, 0)
    pre_shape = StepShape(batch=batch, q_len=seq, kv_len=seq, logits_tokens=batch)
    ctx = context if context is not None else seq + new_tokens // 2
    dec_shape = StepShape(batch=batch, q_len=1, kv_len=ctx, decode=True)
    if arch is None:
        pre = _count_only_ops(n_params, pre_shape, prec, device.parallel_slots)
        dec = _count_only_ops(n_params, dec_shape, prec, device.parallel_slots)
    else:
        pre = build_forward_ops(arch, pre_shape, **kw)
        dec = build_forward_ops(arch, dec_shape, **kw)
    prefill = _phase("prefill", pre, device, eff, prec.dtype, batch=batch, q_len=seq, kv_len=seq)
    decode = _phase("decode", dec, device, eff, prec.dtype, batch=batch, q_len=1, kv_len=ctx)
    return decode, prefill, n_params, 0


def estimate_speed(
    model: Model | Architecture,
    gpu: GPU,
    *,
    mode: Mode = "train",
    batch: int = 1,
    seq: int | None = None,
    precision: str | None = None,
    optimizer: str = "adamw",
    gpus: int = 1,
    recompute: Recompute = "none",
    attention: Attention = "flash",
    grad_accum: int = 1,
    zero: int = 0,
    lora: bool = False,
    trainable_params: int | None = None,
    lora_base: str | None = None,
    new_tokens: int = 128,
    context: int | None = None,
    kv_dtype: str | None = None,
    link: str | float | None = None,
    overlap_comm: bool = True,
    pinned: bool = True,
    overlap_transfer: bool | None = None,
    input_bytes: int | None = None,
    train_tokens: float | None = None,
    train_samples: float | None = None,
    epochs: float = 1.0,
    price_per_gpu_hour: float | None = None,
    efficiency: Efficiency | None = None,
    measured: Any | None | Literal["auto"] = "auto",
    tf32: bool = False,
    cpu: CPU | None = None,
) -> SpeedEstimate:
    """Estimate one step of ``model`` on ``gpu`` (and on ``gpus`` data-parallel GPUs).

    ``batch`` is per GPU (a micro-batch; ``grad_accum`` of them make a step). ``precision``: a
    training recipe (``mixed-bf16`` by default) or, for inference, a weight format (``bf16`` by
    default). ``zero``: ZeRO stage of the data parallelism (3 moves 1.5x the gradient bytes; >= 1
    shards the optimizer step). ``lora``: the base is frozen (no weight gradients) and only
    ``trainable_params`` (default: rank-16 adapters on q and v) are all-reduced and updated.
    Inference: decode attends to ``context`` tokens (default seq + new_tokens / 2) cached in
    ``kv_dtype`` (default the compute dtype's 16 bits). ``efficiency`` overrides the default
    achievable fractions; ``measured`` is a bench ``Measured`` (``"auto"``: this machine's latest
    stored run, applied only when it measured this very GPU; None: defaults only). ``cpu``: also
    estimate the job on that CPU (:func:`estimate_cpu_speed`) and say whether it needs a GPU at
    all.
    """
    _check_job(mode=mode, recompute=recompute, attention=attention, kv_dtype=kv_dtype,
               batch=batch, grad_accum=grad_accum, new_tokens=new_tokens, context=context,
               trainable_params=trainable_params)
    if isinstance(zero, bool) or zero not in (0, 1, 2, 3):
        raise InputError(f"zero {zero!r}: expected a ZeRO stage 0, 1, 2 or 3")
    positive_int(gpus, "GPU count", 10**6)
    kernel_attention = "eager" if attention == "eager" else "flash"
    arch, name, n_params, tensors = _arch_and_name(model)
    notes: list[str] = []
    seq = _resolve_seq(arch, seq, notes)
    device = device_from_gpu(gpu)
    eff = efficiency or default_efficiency(device)
    if measured == "auto":
        measured = load_measured() if efficiency is None else None
    if measured is not None and efficiency is None:
        device, eff = apply_measured(device, eff, measured)
    prec = _precision(mode, precision, device, tf32)
    if lora_base is not None:
        if not lora or mode != "train":
            raise InputError("a LoRA base format needs lora=True in training (--lora-rank)")
        if lora_base not in WEIGHT_FORMATS:
            raise UnknownNameError("weight format", lora_base, list(WEIGHT_FORMATS))
        fmt = WEIGHT_FORMATS[lora_base]
        w = fmt.bits / 8  # the frozen base is read in its storage format (QLoRA: nf4)
        prec = replace(prec, weight=w)
        if fmt.name not in ("fp32", "bf16", "fp16"):
            notes.append(f"frozen base in {fmt.name}: weights read at {fmt.bits:.2f} bits; the "
                         "dequantization work is not modeled")
    if mode == "infer" and prec.name in WEIGHT_FORMATS and prec.name not in (
            "fp32", "bf16", "fp16") and WEIGHT_FORMATS[prec.name].compute_dtype in (
            "bf16", "fp16"):
        notes.append(f"{prec.name} weights are read at {WEIGHT_FORMATS[prec.name].bits:.2f} bits "
                     f"and multiplied in {prec.dtype}; the dequantization work is not modeled")
    if prec.dtype == "fp32" and device.supports("tf32"):
        notes.append("fp32 matmuls at the fp32 (not TF32) peak, PyTorch's default; "
                     "torch.backends.cuda.matmul.allow_tf32=True is --tf32")
    train = _Train(optimizer=optimizer, grad_accum=grad_accum if mode == "train" else 1,
                   zero=zero, gpus=gpus, lora=lora, trainable=trainable_params)
    if lora and trainable_params is None and mode == "train":
        notes.append(_LORA_NOTE)
    kvb = None if kv_dtype is None else KV_BYTES[kv_dtype]
    step, prefill, n_params, trainable = _build(
        arch, n_params, tensors, device, eff, prec, mode=mode, batch=batch, seq=seq,
        recompute=recompute, attention=kernel_attention, train=train, new_tokens=new_tokens,
        context=context, kv_bytes=kvb)
    if mode == "infer" and gpus > 1:
        notes.append(f"inference on {gpus} GPUs = {gpus} independent replicas (no tensor "
                     "parallelism modeled)")
    # host-to-device copies
    per_sample = input_bytes if input_bytes is not None else input_bytes_per_sample(arch, seq,
                                                                                      mode)
    if per_sample < 0:
        raise InputError(f"input bytes per sample {per_sample!r}: expected >= 0")
    if prefill is not None:
        xfer_bytes = 8 * batch  # each decode step sends one new token id per sequence
    else:
        xfer_bytes = per_sample * batch * step.micro_steps
    transfer = estimate_transfer(xfer_bytes, device, eff, compute_s=step.time_s, pinned=pinned,
                                 overlap=overlap_transfer)
    prefill_transfer = None
    if prefill is not None:
        prefill_transfer = estimate_transfer(per_sample * batch, device, eff,
                                             compute_s=prefill.time_s, pinned=pinned,
                                             overlap=False)
    scaling = None
    if mode == "train":
        lname, lbw = link_bandwidth(link, device)
        # ZeRO-3 gathers the weights in forward and backward and reduce-scatters the gradients:
        # 1.5x the bytes of an all-reduce (Rajbhandari et al. 2020, sec. 7.2.2), overlappable
        # with forward and backward; stages 0-2 move one all-reduce's bytes during backward.
        volume = trainable * prec.grad * (1.5 if zero == 3 else 1.0)
        window = step.backward_s + (sum(t.total_s for t in step.ops if t.op.phase == "forward")
                                    if zero == 3 else 0.0)
        scaling = data_parallel_scaling(
            step_s=step.time_s + transfer.exposed_s, backward_s=window,
            gradient_bytes=int(volume), gpus=gpus, link=lname, link_bandwidth=lbw,
            eff=eff, overlap=overlap_comm, tokens_per_step=step.tokens)
    est = SpeedEstimate(
        model=name, gpu=gpu.name, mode=mode, precision=prec.name, dtype=prec.dtype, batch=batch,
        seq=seq, gpus=gpus, recompute=recompute, attention=attention,
        grad_accum=step.micro_steps, zero=zero, trainable_params=trainable, step=step,
        prefill=prefill, new_tokens=new_tokens if prefill is not None else None,
        transfer=transfer, prefill_transfer=prefill_transfer, scaling=scaling, efficiency=eff,
        ridge_point=device.peak(prec.dtype) / device.memory_bandwidth,
        achievable_ridge_point=(device.peak(prec.dtype) * eff.matmul_fraction(prec.dtype))
        / (device.memory_bandwidth * eff.memory),
        notes=tuple(notes))
    tt = _training_time(est, train_tokens, train_samples, epochs, price_per_gpu_hour)
    if tt is not None:
        est = replace(est, training_time=tt)
    if cpu is not None:
        on_cpu = estimate_cpu_speed(
            model, cpu, mode=mode, batch=batch, seq=seq, optimizer=optimizer,
            recompute=recompute, attention=attention, grad_accum=grad_accum, lora=lora,
            trainable_params=trainable_params, new_tokens=new_tokens, context=context,
            kv_dtype=kv_dtype, measured=measured)
        est = replace(est, cpu=_compare_cpu(est, on_cpu))
    return est


def _training_time(est: SpeedEstimate, tokens, samples, epochs, price) -> TrainingTime | None:
    if tokens is None and samples is None:
        if price is not None:
            raise InputError("a price per GPU-hour needs the amount of training: give --tokens "
                             "or --samples (and --epochs)")
        return None
    if tokens is not None and samples is not None:
        raise InputError("give the amount of training as tokens or as samples, not both")
    if est.mode != "train":
        raise InputError("time to train needs --mode train")
    if not (epochs > 0 and math.isfinite(epochs)):
        raise InputError(f"epochs {epochs!r}: expected a number > 0")
    if tokens is not None:
        return time_to_train(work=tokens * epochs, rate_per_s=est.tokens_per_s, gpus=est.gpus,
                             unit="tokens", price_per_gpu_hour=price)
    return time_to_train(work=samples * epochs, rate_per_s=est.samples_per_s, gpus=est.gpus,
                         unit="samples", price_per_gpu_hour=price)


def estimate_cpu_speed(
    model: Model | Architecture,
    cpu: CPU,
    *,
    mode: Mode = "train",
    batch: int = 1,
    seq: int | None = None,
    optimizer: str = "adamw",
    recompute: Recompute = "none",
    attention: Attention = "flash",
    grad_accum: int = 1,
    lora: bool = False,
    trainable_params: int | None = None,
    new_tokens: int = 128,
    context: int | None = None,
    kv_dtype: str | None = None,
    measured: Any | None | Literal["auto"] = "auto",
) -> CpuEstimate:
    """Estimate one step of ``model`` on ``cpu`` (a ``gpuplan.hardware.cpu`` CPU: its estimated
    fp32 peak), in fp32, the CPU side's only dtype.

    The job's options mean what they mean to :func:`estimate_speed`, which uses this for its
    ``cpu=`` comparison. ``measured``: a bench ``Measured`` whose CPU matmul rate, copy bandwidth
    and op dispatch replace the estimate and the defaults (``"auto"``: this machine's latest stored
    run; None: defaults only).
    """
    _check_job(mode=mode, recompute=recompute, attention=attention, kv_dtype=kv_dtype,
               batch=batch, grad_accum=grad_accum, new_tokens=new_tokens, context=context,
               trainable_params=trainable_params)
    arch, name, n_params, tensors = _arch_and_name(model)
    notes: list[str] = []
    seq = _resolve_seq(arch, seq, notes)
    if lora and trainable_params is None and mode == "train":
        notes.append(_LORA_NOTE)
    dev = device_from_cpu(cpu)
    if measured == "auto":
        measured = load_measured()
    dev, eff = apply_measured(dev, default_efficiency(dev), measured)
    prec = _precision(mode, "fp32", dev, False)
    train = _Train(optimizer=optimizer, grad_accum=grad_accum if mode == "train" else 1, zero=0,
                   gpus=1, lora=lora, trainable=trainable_params)
    step, prefill, _, _ = _build(
        arch, n_params, tensors, dev, eff, prec, mode=mode, batch=batch, seq=seq,
        recompute=recompute, attention="eager" if attention == "eager" else "flash", train=train,
        new_tokens=new_tokens, context=context,
        kv_bytes=None if kv_dtype is None else KV_BYTES[kv_dtype])
    return CpuEstimate(model=name, cpu=dev.name, peak_basis=dev.peak_basis, mode=mode,
                       batch=batch, seq=seq, step=step, prefill=prefill,
                       new_tokens=new_tokens if prefill is not None else None, efficiency=eff,
                       notes=tuple(notes))


#: The verdict's policy: a GPU is "not needed" below this speed-up ...
MIN_USEFUL_SPEEDUP = 2.0
#: ... or when the CPU finishes the whole job within this many seconds.
SHORT_JOB_S = 600.0


def _compare_cpu(est: SpeedEstimate, on_cpu: CpuEstimate) -> CpuComparison:
    """The verdict: does ``est``'s job need its GPU, given the same job ``on_cpu``?"""
    cpu_step = on_cpu.step_time_s
    gpu_step = est.step.time_s + est.transfer.exposed_s
    speedup = cpu_step / gpu_step
    cpu_job = gpu_job = None
    if est.training_time is not None:
        per = est.training_time.work / (est.step.tokens if est.training_time.unit == "tokens"
                                        else est.batch * est.step.micro_steps)
        cpu_job, gpu_job = per * cpu_step, per * gpu_step
    elif on_cpu.request_time_s is not None and est.prefill is not None:
        cpu_job = on_cpu.request_time_s
        gpu_job = est.prefill.time_s + est.new_tokens * gpu_step
    g = est.gpu
    if speedup < 1:
        needs, verdict = False, (
            f"No GPU needed: this CPU is {1 / speedup:.1f}x faster than the {g} for this job -- "
            "the work per step is too small to fill the GPU, so kernel-launch and transfer "
            "overheads outweigh its arithmetic")
    elif speedup < MIN_USEFUL_SPEEDUP:
        needs, verdict = False, (
            f"No GPU needed: the {g} would be only {speedup:.1f}x faster than this CPU "
            f"({format_seconds(gpu_step)} vs {format_seconds(cpu_step)} per step)")
    elif cpu_job is not None and cpu_job < SHORT_JOB_S:
        needs, verdict = False, (
            f"No GPU needed: this CPU finishes the whole job in {format_seconds(cpu_job)} "
            f"(the {g}: {format_seconds(gpu_job)})")
    else:
        needs, verdict = True, (
            f"A GPU pays off: the {g} is {speedup:.0f}x faster than this CPU "
            f"({format_seconds(gpu_step)} vs {format_seconds(cpu_step)} per step"
            + (f"; whole job {format_seconds(gpu_job)} vs {format_seconds(cpu_job)}"
               if cpu_job is not None else "") + ")")
    return CpuComparison(cpu=on_cpu.cpu, cpu_peak_basis=on_cpu.peak_basis,
                         cpu_dtype=on_cpu.dtype, cpu_step_s=cpu_step, gpu=g, gpu_step_s=gpu_step,
                         speedup=speedup, cpu_job_s=cpu_job, gpu_job_s=gpu_job, needs_gpu=needs,
                         verdict=verdict)


# --------------------------------------------------------------------------------------------------
# Batch sweep


@dataclass(frozen=True, kw_only=True)
class SweepPoint:
    batch: int
    step_time_s: float
    tokens_per_s: float
    samples_per_s: float
    mfu: float
    bound: Literal["compute", "memory"]

    def to_dict(self) -> dict:
        return {"batch": self.batch, "step_time_s": self.step_time_s,
                "tokens_per_s": self.tokens_per_s, "samples_per_s": self.samples_per_s,
                "mfu": self.mfu, "bound": self.bound}


@dataclass(frozen=True, kw_only=True)
class BatchSweep:
    """Throughput against batch size: where adding work stops paying."""

    points: tuple[SweepPoint, ...]
    saturation_batch: int
    """Smallest batch reaching ``threshold`` of the sweep's best tokens/s."""
    threshold: float = 0.9

    def to_dict(self) -> dict:
        return {"points": [p.to_dict() for p in self.points],
                "saturation_batch": self.saturation_batch, "threshold": self.threshold}


def batch_sweep(model: Model | Architecture, gpu: GPU, *, batches: Sequence[int] | None = None,
                threshold: float = 0.9, **kwargs: Any) -> BatchSweep:
    """:func:`estimate_speed` over ``batches`` (default 1, 2, 4 ... 1024). Memory is not checked
    here: ``gpuplan fit`` says which of these batches fit."""
    batches = list(batches or [2**i for i in range(11)])
    if not batches:
        raise InputError("batch sweep: give at least one batch size")
    if not 0 < threshold <= 1:
        raise InputError(f"threshold {threshold!r}: expected a fraction in (0, 1]")
    if kwargs.get("measured", "auto") == "auto" and kwargs.get("efficiency") is None:
        kwargs["measured"] = load_measured()
    pts = []
    for b in batches:
        e = estimate_speed(model, gpu, batch=b, **kwargs)
        pts.append(SweepPoint(batch=b, step_time_s=e.step_time_s, tokens_per_s=e.tokens_per_s,
                              samples_per_s=e.samples_per_s, mfu=e.mfu, bound=e.bound))
    best = max(p.tokens_per_s for p in pts)
    sat = next(p.batch for p in pts if p.tokens_per_s >= threshold * best)
    return BatchSweep(points=tuple(pts), saturation_batch=sat, threshold=threshold)


def estimate_speed_for_job(job: Job, gpu: GPU, *, model: Model | Architecture | None = None,
                           trainable_params: int | None = None, measured: Any = "auto",
                           **kwargs: Any) -> dict[str, SpeedEstimate]:
    """:func:`estimate_speed` for each mode of a :class:`~gpuplan.job.Job` (``train`` and/or
    ``infer``), keyed by mode. ``model`` is the loaded model when ``job.model`` is a name;
    ``trainable_params``: the exact LoRA adapter count when known (the memory accounting has it).
    Extra keyword arguments (``link``, ``train_tokens``, ``price_per_gpu_hour`` ...) pass through.
    """
    m = job.model if isinstance(job.model, (Model, Architecture)) else model
    if m is None:
        raise InputError(f"job.model {job.model!r} is a name: pass the loaded model as model=")
    if measured == "auto":
        measured = load_measured()
    out: dict[str, SpeedEstimate] = {}
    common = dict(batch=job.batch, seq=job.seq, gpus=job.gpus, measured=measured,
                  attention=job.attention)
    if job.trains:
        out["train"] = estimate_speed(
            m, gpu, mode="train", precision=job.precision, optimizer=job.optimizer,
            recompute=job.checkpointing, grad_accum=job.grad_accum, zero=job.zero,
            lora=job.lora_rank is not None, lora_base=job.lora_base,
            trainable_params=trainable_params, **common, **kwargs)
    if job.infers:
        kw = {k: v for k, v in kwargs.items() if k not in ("train_tokens", "train_samples",
                                                           "epochs", "price_per_gpu_hour",
                                                           "link", "overlap_comm")}
        out["infer"] = estimate_speed(
            m, gpu, mode="infer", precision=job.infer_precision, context=job.context,
            kv_dtype=job.kv_dtype, **common, **kw)
    return out


#: The headline fields of an estimate that ``speed_section`` keeps.
SECTION_FIELDS = ("flops_per_step", "model_flops_per_step", "model_flops_per_token",
                  "step_time_s", "tokens_per_s", "samples_per_s", "mfu", "hfu", "bound",
                  "precision", "dtype", "batch", "seq", "gpus")


def _headline(e: SpeedEstimate) -> dict:
    d = e.to_dict(ops=False)
    out = {k: d[k] for k in SECTION_FIELDS}
    if e.prefill is not None:
        out["prefill_tokens_per_s"] = e.prefill.tokens_per_s
        out["prefill_bound"] = e.prefill.bound
        out["decode_tokens_per_s"] = e.tokens_per_s
        out["request_time_s"] = e.request_time_s
        out["new_tokens"] = e.new_tokens
    if e.scaling is not None and e.gpus > 1:
        out["data_parallel_efficiency"] = e.scaling.rows[-1].efficiency
    if e.training_time is not None:
        out["training_time"] = e.training_time.to_dict()
    return out


def speed_section(job: Job, gpus: Sequence[GPU], *, model: Model | Architecture | None = None,
                  trainable_params: int | None = None, measured: Any = "auto",
                  **kwargs: Any) -> dict:
    """The ``"speed"`` section of ``gpuplan fit --json``: per GPU and mode, the headline numbers
    of :func:`estimate_speed_for_job`. A GPU that cannot run the job's dtype gets ``{"error":
    ...}`` instead (e.g. bf16 on a T4), so one GPU never sinks the whole plan."""
    if measured == "auto":
        measured = load_measured()
    rows = []
    basis = None
    for gpu in gpus:
        try:
            est = estimate_speed_for_job(job, gpu, model=model, trainable_params=trainable_params,
                                         measured=measured, **kwargs)
        except UnsupportedError as e:
            rows.append({"gpu": gpu.name, "error": str(e)})
            continue
        row: dict[str, Any] = {"gpu": gpu.name}
        for mode, e in est.items():
            row[mode] = _headline(e)
            basis = basis or e.efficiency.to_dict()
        rows.append(row)
    return {"gpus": rows, "efficiency": basis,
            "conventions": "model FLOPs count matmuls only, attention over the full s x s square "
                           "(Megatron/PaLM); step time = sum over ops of max(compute, memory) at "
                           "the stated achievable fractions + kernel launches; see docs/speed.md"}
