"""One step of a job built and timed on one device: the precision layout, the operations of a
training step, a prefill, a decode step or a forward pass, and their times (:class:`Phase`).

:mod:`.speed` (a GPU, with transfers, data parallelism and time to train) and :mod:`.cpu` (this
machine's CPU) both build their steps here.
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import cached_property
from typing import Literal, Sequence

from .._record import record
from ..engines.profiles import get_engine, resolve_engine
from ..errors import InputError, UnsupportedError, opt, shown
from ..formats import (FP8_GEMM_ARCHS, TRAINING_RECIPES, WEIGHT_FORMATS, TrainingRecipe,
                       gemm_dtype, get_optimizer, optimizer_state_bytes)
from ..fp8 import (NARROW_RECIPES, cast_bytes_per_element, check_narrow_on,
                   columnwise_bytes_per_element, narrow_blocks, weight_cast_bytes_per_element)
from ..hardware import all_gpus, custom_spec
from ..job import KV_DTYPES, Attention, Checkpointing, Job, check_positions, serving_engine
from ..models import DEFAULT_LORA_TARGETS, lora_linears
from ..models._types import Architecture, Model
from .device import Device, Efficiency
from .flops import (
    AttentionPrecision, Op, StepShape, backward_ops, fp8_attention_ops, inference_attention, build_forward_ops, default_seq, run_form, lora_adapter_ops, optimizer_op,
    is_layer_op, one_launch_product, recompute_ops,
)
from .efficiency import (
    GRAD_CLIP_IMPLS, OPTIMIZER_IMPLS, RuntimeOverheads, constant, eager_chains, grad_clip_cost,
    multi_tensor_launches, optimizer_cost, resolve_runtime, runtime_overheads,
)
from .graphs import graphed_ops
from .time import OpTime, RooflineClass, roofline_classes, step_bound, time_ops

__all__ = ["Phase", "StepMode", "KV_BYTES", "input_bytes_per_sample", "one_mode",
           "optimizer_stretch_s", "param_tensor_count", "narrow_recompute_op",
           "STEP_LEVEL_OPS", "NORM_FED_LINEARS", "norm_fused_elements"]

#: The mode of one estimated step (a Job's ``both`` is two estimates).
StepMode = Literal["train", "infer"]
Mode = StepMode

#: Bytes per KV-cache element by dtype name: the job's (and the memory accounting's) one table.
KV_BYTES = KV_DTYPES

_ACT_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 2, "int8": 2, "fp4": 2}


@record
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
    overheads: RuntimeOverheads | None = None
    """The runtime's host and device cost per kernel (a GPU); None: ``launch_s`` per kernel, added
    serially (a CPU runs its own dispatch)."""
    sync_before_optimizer: bool = False
    """The host waits for the device between the backward and the optimizer step (fp16 loss
    scaling reads the overflow flag: torch GradScaler's ``found_inf.item()``), so the optimizer's
    issue time is not hidden behind the forward and backward."""
    tensor_shares: tuple[tuple[float, int], ...] = ()
    """A host read per trainable tensor inside the optimizer stretch (a clip that reads each
    tensor's norm with .item()): (one tensor's share of the stretch's elements, how many tensors
    have that share). The stretch then runs tensor by tensor, each paced by the slower of its
    issue and its kernels, plus the read."""
    host_sync_s: float = 0.0
    """The cost of each of those reads beyond the wait (:data:`~.efficiency.CONSTANTS`
    ``host_sync_s``)."""
    sync_after_backward: bool = False
    """The training loop reads a device scalar on the host after every micro-batch's backward --
    HF Trainer's NaN/inf filter on the loss (``logging_nan_inf_filter``, default True:
    ``torch.isnan(tr_loss_step) or torch.isinf(tr_loss_step)`` is a bool of a CUDA tensor),
    NVIDIA DLE run_pretraining.py's ``average_loss += loss.item()`` -- so the optimizer stretch,
    as under :attr:`sync_before_optimizer`, starts after the device drained; unlike it, where
    that exposes nothing the step is timed unsplit (the same value, the same rounding)."""
    sync_per_micro_step: bool = False
    """The host waits for the device at the start of every micro-batch: the training loop copies
    its inputs to the GPU with a blocking ``.to(device)`` (transformers Trainer._prepare_input,
    NVIDIA DLE run_squad.py ``t.to(device)``), which torch runs as cudaMemcpyAsync followed by
    a stream synchronize (aten/src/ATen/native/cuda/Copy.cu copy_kernel_cuda, non_blocking
    False: ``memcpy_and_sync``). The host cannot run ahead into the next micro-batch, so a
    forward the host issues slower than the device runs it is not hidden
    (:meth:`_pipelined_s`)."""
    sync_per_step: bool = False
    """The host waits for the device after every step: a benchmark loop that calls
    ``torch.cuda.synchronize()`` before and after each forward (AutoAWQ's examples/benchmark.py,
    :func:`~gpuplan.compute.estimate_speed` ``host_sync_per_step``). Each step then starts with
    host and device idle and the host cannot issue ahead into the next one, so the step runs
    kernel by kernel (:meth:`_kernel_paced_s`), not as the slower of host and device."""
    serve_host_s: float = 0.0
    """A serving engine's own host work per step beside issuing the kernels -- scheduling,
    preparing the inputs, sampling and processing the outputs (:class:`~gpuplan.engines.
    profiles.ServingHost`, at this step's batch); 0 outside a serving engine."""
    serve_overlap: bool = False
    """The engine runs that work for the next step while the device runs this one (an overlap
    scheduler): the step is then max(device, host issue + it) instead of max(device, host
    issue) + it."""
    serve_core_s: float = 0.0
    """The serving engine's GPU-driving loop's own host work per step -- scheduling, the model
    runner's state update and input preparation (:meth:`~gpuplan.engines.profiles.ServingHost.
    core_step_s`, at this step's batch); 0 outside a serving engine."""
    serve_core_overlap: bool = False
    """That loop forms the next step while the device runs this one (vLLM's async scheduling):
    the step is the longer of the above and host issue + it, not the above + it."""

    @property
    def tokens(self) -> int:
        return self.batch * self.q_len * self.micro_steps

    @cached_property
    def kernels(self) -> int:
        return sum(t.op.kernels * t.op.count for t in self.ops)

    @cached_property
    def kernel_time_s(self) -> float:
        return sum(t.total_s for t in self.ops)

    @property
    def device_time_s(self) -> float:
        """The device's busy time: the kernels and the gaps between them."""
        return self._device_s(self.ops)

    def _device_s(self, ops: Sequence[OpTime]) -> float:
        gap = self.launch_s if self.overheads is None else self.overheads.device_gap_s
        return sum(t.total_s for t in ops) + sum(t.op.kernels * t.op.count for t in ops) * gap

    @property
    def host_time_s(self) -> float:
        """The host's time to issue the step's kernels (Python dispatch in eager)."""
        o = self.overheads
        if o is None:
            return self.kernels * self.launch_s
        return self._host_s(self.ops) + o.host_fixed_s

    def _host_s(self, ops: Sequence[OpTime]) -> float:
        """Issue time of ``ops``: the runtime's per-kernel cost by phase, or the op's own."""
        o = self.overheads
        assert o is not None
        plain = [t for t in ops if t.op.host_s is None]
        n = sum(t.op.kernels * t.op.count for t in plain)
        bwd = sum(t.op.kernels * t.op.count for t in plain if t.op.phase == "backward")
        own = sum(t.op.kernels * t.op.count * t.op.host_s for t in ops if t.op.host_s is not None)
        return (n - bwd) * o.host_fwd_s + bwd * o.host_bwd_s + own

    @property
    def host_bound(self) -> bool:
        """The host issues kernels slower than the device runs them (dispatch-bound)."""
        return self.overheads is not None and self.host_time_s > self.device_time_s

    @property
    def launch_time_s(self) -> float:
        """Time beyond the kernels' own and the serving engine's exposed host work: launch gaps,
        or the host's dispatch when it is longer."""
        return self.time_s - self.kernel_time_s - self.serve_host_exposed_s

    @property
    def serve_host_exposed_s(self) -> float:
        """What the serving engine's host work per step (:attr:`serve_host_s`) adds to the step:
        all of it without overlap, what outlasts the device with it."""
        return (self.time_s - self._issue_time_s if self.serve_host_s or self.serve_core_s
                else 0.0)

    @property
    def time_s(self) -> float:
        """The step: the kernels' pace (:attr:`_issue_time_s`) with the serving engine's host work
        (:attr:`serve_host_s`) after it, or -- under an overlap scheduler -- beside it, and its
        scheduling loop's own work (:attr:`serve_core_s`) after that or beside it alike."""
        base = self._issue_time_s
        if ((not self.serve_host_s and not self.serve_core_s) or self.overheads is None
                or self.sync_before_optimizer):
            return base
        if not self.serve_host_s:
            t = base
        elif self.serve_overlap:
            t = max(self.device_time_s, self.host_time_s + self.serve_host_s)
        else:
            t = base + self.serve_host_s
        if self.serve_core_overlap:
            # the loop issues this step's kernels and does its own work for the next one while
            # the device runs; the output processing (above) runs in another process
            return max(t, self.host_time_s + self.serve_core_s)
        return t + self.serve_core_s

    @property
    def _issue_time_s(self) -> float:
        """A GPU: max(kernels + launch gaps, host dispatch) -- the host issues work ahead of the
        device, so the slower of the two sets the pace. A CPU: its ops + its dispatch, in turn."""
        if self.overheads is None:
            return self.kernel_time_s + self.kernels * self.launch_s
        if self.sync_per_step:
            return self._kernel_paced_s()
        overlapped = self._overlapped_s()
        if not self.sync_per_micro_step:
            return overlapped
        synced = self._micro_synced_s()
        # the waits only lengthen a step: where each micro-batch is device-bound from its first
        # kernel they expose nothing, and the step is the overlapped one
        return overlapped if synced is None else max(overlapped, synced)

    def _overlapped_s(self) -> float:
        """:attr:`time_s` with the host free to run ahead across micro-batches."""
        assert self.overheads is not None
        if not self.sync_before_optimizer and not self.sync_after_backward:
            return max(self.device_time_s, self.host_time_s)
        # the host catches up with the device before the optimizer: two stretches, each paced by
        # the slower of the two
        opt = [t for t in self.ops if t.op.phase == "optimizer"]
        rest = [t for t in self.ops if t.op.phase != "optimizer"]
        rest_host = self._host_s(rest) + self.overheads.host_fixed_s
        if not self.sync_before_optimizer and not self._split_exposes(rest, opt):
            return max(self.device_time_s, self.host_time_s)
        return max(self._device_s(rest), rest_host) + self._optimizer_stretch_s(opt)

    def _split_exposes(self, rest: Sequence[OpTime], opt: Sequence[OpTime]) -> bool:
        """A wait before the optimizer lengthens the step: the host issues the rest slower than
        the device runs it, or the optimizer stretch outlasts its kernels."""
        assert self.overheads is not None
        return (self._host_s(rest) + self.overheads.host_fixed_s > self._device_s(rest)
                or self._optimizer_stretch_s(opt) > self._device_s(opt))

    @staticmethod
    def _pipelined_s(stretches: Sequence[tuple[float, float]]) -> float:
        """Time of consecutive stretches (host issue time, device time), each a run of kernels
        the host issues at an even pace, started with host and device both idle: the device runs
        a kernel once the host has issued it and the kernel before it has run, so the time is
        the longest path, max over j of (host time of the stretches before j + device time of
        j and after) -- j = 0 is a device-bound step, j = all a host-bound one."""
        return max(sum(h for h, _ in stretches[:j]) + sum(d for _, d in stretches[j:])
                   for j in range(len(stretches) + 1))

    def _in_order(self) -> list[tuple[OpTime, float]]:
        """The step's ops in the order the device runs them, with the occurrences of each entry:
        the ops before the first repeated one (count ``n``, the layers), then the run from it to
        the last, layer by layer (each op in it ``count / n`` times a layer), then the rest (each
        all its occurrences at once)."""
        n = max((t.op.count for t in self.ops), default=1)
        rep = [i for i, t in enumerate(self.ops) if t.op.count == n]
        if n <= 1:
            return [(t, t.op.count) for t in self.ops]
        first, last = rep[0], rep[-1] + 1
        layer = [(t, t.op.count / n) for t in self.ops[first:last]]
        return ([(t, t.op.count) for t in self.ops[:first]] + layer * n
                + [(t, t.op.count) for t in self.ops[last:]])

    def _kernel_paced_s(self) -> float:
        """The step from host and device both idle (:attr:`sync_per_step`), kernel by kernel:
        the host issues each kernel in its own issue time after the one before; the device
        starts a kernel once it is issued and the kernel before it has run. A kernel that runs
        shorter than the host issues the next leaves the device idle, so the step is at least
        max(host, device), and longer where short kernels and long ones alternate. An entry's
        ``k`` kernels (host ``h``, device ``d`` each), from host time ``H`` and device time
        ``C``, end at max(C + k d, H + h + k d, H + k h + d) (the longest path through them);
        the runtime's fixed host cost per step comes first."""
        o = self.overheads
        assert o is not None
        host = dev = o.host_fixed_s
        for t, times in self._in_order():
            k = t.op.kernels * times
            if k <= 0:
                continue
            h = ((o.host_bwd_s if t.op.phase == "backward" else o.host_fwd_s)
                 if t.op.host_s is None else t.op.host_s)
            d = t.total_s / (t.op.kernels * t.op.count) + o.device_gap_s
            if k >= 1:
                dev = max(dev + k * d, host + h + k * d, host + k * h + d)
            else:  # a share of one kernel a layer: its share of the issue and of the run
                dev = max(dev, host + k * h) + k * d
            host += k * h
        return dev

    def _micro_synced_s(self) -> float | None:
        """:attr:`time_s` when each micro-batch starts after the device drained
        (:attr:`sync_per_micro_step`): each micro-batch's forward then backward (its recompute
        with it) pipelined from idle, the optimizer stretch after the last one -- on its own when
        the host also waits before it (:attr:`sync_before_optimizer`), else pipelined with it.
        None when every stretch is device-bound from its first kernel (nothing exposed)."""
        o, m = self.overheads, self.micro_steps
        assert o is not None
        opt = [t for t in self.ops if t.op.phase == "optimizer"]
        bwd = [t for t in self.ops if t.op.phase in ("backward", "recompute")]
        fwd = [t for t in self.ops if t.op.phase not in ("optimizer", "backward", "recompute")]
        micro = [(self._host_s(fwd) / m, self._device_s(fwd) / m),
                 (self._host_s(bwd) / m, self._device_s(bwd) / m)]
        last = micro + [(self._host_s(opt), self._device_s(opt))]
        # a read after the backward splits off an optimizer stretch that outlasts its kernels; one
        # that does not is the same as pipelined with the last micro-batch (kept, for its rounding)
        if self.sync_before_optimizer or (self.sync_after_backward
                                          and self._optimizer_stretch_s(opt) > self._device_s(opt)):
            if self._pipelined_s(micro) <= sum(d for _, d in micro):
                return None
            return (m * self._pipelined_s(micro) + o.host_fixed_s
                    + self._optimizer_stretch_s(opt))
        if self._pipelined_s(last) <= sum(d for _, d in last):
            return None
        return (m - 1) * self._pipelined_s(micro) + self._pipelined_s(last) + o.host_fixed_s

    def _optimizer_stretch_s(self, opt: Sequence[OpTime]) -> float:
        """The optimizer stretch after the host caught up: the slower of issue and kernels, or,
        with a host read per tensor, tensor by tensor (each issues an equal share of the
        launches and runs its share of the elements)."""
        dev, host = self._device_s(opt), self._host_s(opt)
        if not self.tensor_shares:
            return max(dev, host)
        n = sum(c for _, c in self.tensor_shares)
        return sum(c * (max(host / n, dev * f) + self.host_sync_s) for f, c in self.tensor_shares)

    @cached_property
    def flops(self) -> float:
        """Executed FLOPs (kernels' work, elementwise included)."""
        return sum(t.op.flops * t.op.count for t in self.ops)

    @cached_property
    def model_flops(self) -> float:
        """Counted matmul FLOPs without recompute (MFU numerator)."""
        return sum(t.op.counted_flops * t.op.count for t in self.ops if t.op.phase != "recompute")

    @cached_property
    def hardware_flops(self) -> float:
        """Counted matmul FLOPs with recompute (HFU numerator)."""
        return sum(t.op.counted_flops * t.op.count for t in self.ops)

    @cached_property
    def bytes(self) -> float:
        return sum(t.op.bytes * t.op.count for t in self.ops)

    @cached_property
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
             "host_time_s": self.host_time_s, "device_time_s": self.device_time_s,
             "serve_host_s": self.serve_host_s, "serve_overlap": self.serve_overlap,
             "serve_core_s": self.serve_core_s, "serve_core_overlap": self.serve_core_overlap,
             "serve_host_exposed_s": self.serve_host_exposed_s,
             "host_bound": self.host_bound,
             "runtime": None if self.overheads is None else self.overheads.runtime,
             "tokens_per_s": self.tokens_per_s, "flops": self.flops,
             "model_flops": self.model_flops, "hardware_flops": self.hardware_flops,
             "bytes": self.bytes, "bound": self.bound, "mfu": self.mfu, "hfu": self.hfu,
             "classes": [c.to_dict() for c in self.classes]}
        if ops:
            d["ops"] = [t.to_dict() for t in self.ops]
        return d


# --------------------------------------------------------------------------------------------------
# Precision


@record(kw_only=False)
class PrecisionLayout:
    """Bytes per element as the step's kernels read and write them, and the matmul dtype."""

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
    master_remainder: bool = False
    """The master is the 16-bit weight plus a 16-bit remainder (``master`` 2): the step reads the
    weight too (:data:`gpuplan.formats.TrainingRecipe.master_remainder`)."""


def _check_dtype(device: Device, dtype: str, mode: str) -> None:
    """Refuse a GEMM dtype ``device`` has no peak for, naming the option that chose it
    (``precision`` in training, ``infer_precision`` in inference) and the one that works."""
    if device.supports(dtype):
        return
    field = "precision" if mode == "train" else "infer_precision"
    p = opt(field)
    remedy = {
        "bf16": f"{p} mixed-fp16" if mode == "train" else f"{p} fp16",
        "tf32": f"run without {opt('tf32')} (plain fp32)",
        "fp8": f"{p} bf16 or fp16",
        "int8": f"{p} bf16 or fp16",
        "fp16": f"{p} fp32",
    }.get(dtype, f"another {p}")
    fix = {"bf16": {field: "mixed-fp16" if mode == "train" else "fp16"},
           "tf32": {"tf32": False}, "fp8": {field: "bf16"}, "int8": {field: "bf16"},
           "fp16": {field: "fp32"}}.get(dtype)
    raise UnsupportedError(f"{device.name} has no {dtype} support (it has {_dtypes_of(device)}); "
                           f"use {remedy}", field="tf32" if dtype == "tf32" else field,
                           value=dtype, fix=fix)


def _dtypes_of(device: Device) -> str:
    return ", ".join(d for d in ("fp32", "tf32", "bf16", "fp16", "fp8", "int8")
                     if device.supports(d)) or "none"


def _refuse_fp8_infer(device: Device, weight_format: str) -> None:
    """The one line for an inference format whose GEMMs run in fp8 (fp8, fp8-block, w4a8 ...)
    on ``device`` without an fp8 peak, saying which is true: its architecture has no FP8 tensor
    cores (naming those that have them and the catalog GPUs with an fp8 rate, as
    :func:`gpuplan.fp8.check_narrow_on` does for training), or the catalog entry lacks the dense
    FP8 rate its tensor cores have (consumer Blackwell): then the card by its numbers, a
    ``custom:`` spec with the fp8 peak left to fill in."""
    p = opt("infer_precision")
    alt = "w4a16" if weight_format == "w4a8" else ("bf16" if device.supports("bf16") else "fp16")
    head = f"{p} {weight_format}" + (" (its GEMMs run in fp8)" if weight_format == "w4a8" else "")
    use = f"use {p} {alt}"
    gpu = next((g for g in all_gpus() if g.name == device.name), None)
    if device.kind != "gpu" or device.architecture == "custom" or gpu is None:
        why = (f"{device.name} gives no fp8 peak; add fp8=...TF (its dense FP8 rate) to the spec"
               if device.architecture == "custom" else
               f"{device.name} has no fp8 peak (it has {_dtypes_of(device)})")
    elif device.architecture in FP8_GEMM_ARCHS:
        why = (f"the catalog has no dense fp8 rate for {device.name} (its {device.architecture}"
               f" tensor cores run FP8, but the entry records {_dtypes_of(device)} only; gpuplan "
               f"does not guess a peak): give the card by its numbers with its dense FP8 rate for "
               f"PEAK, {opt('gpu')} {custom_spec(gpu, fp8='PEAK')}")
        use = "or " + use
    else:
        have = [g.name for g in all_gpus() if g.supports("fp8")]
        why = (f"{device.name} ({device.architecture or 'unknown'} architecture) has no FP8 "
               f"tensor cores; FP8 GEMMs run on {', '.join(FP8_GEMM_ARCHS)} GPUs "
               f"({', '.join(have)})")
        if weight_format != "w4a8" and device.supports("bf16"):
            use += f", or {opt('engine')} vllm (it runs FP8 weights as W8A16 here)"
    raise UnsupportedError(f"{head}: {why}; {use}", field="infer_precision",
                           value=weight_format, fix={"infer_precision": alt})


def train_precision(recipe: str | TrainingRecipe, device: Device, tf32: bool) -> PrecisionLayout:
    """The layout of a training recipe on ``device``: a name the Job accepted, or the recipe as
    a job runs it (:attr:`gpuplan.job.Job.train_recipe`: its optimizer states and master copy
    in the dtypes the job names, what the optimizer step moves, and its gradients in
    ``grad_dtype``, what the weight-gradient writes, the optimizer's reads and the
    data-parallel reduction move); a narrow recipe (:mod:`gpuplan.fp8`) is refused on an
    architecture without its tensor cores, naming the catalog GPUs that have them."""
    r = recipe if isinstance(recipe, TrainingRecipe) else TRAINING_RECIPES[recipe]
    recipe = r.name
    narrow = NARROW_RECIPES.get(recipe)
    if narrow is not None and device.kind == "gpu":
        # the GPUs named are those that can be timed: the right architecture and a rate on record
        have = tuple(g.name for g in all_gpus()
                     if g.architecture in narrow.architectures and g.supports(narrow.dtype))
        check_narrow_on(narrow, device.name, device.architecture, have)
        if not device.supports(narrow.dtype):
            same = [g.name for g in all_gpus() if g.architecture == device.architecture
                    and g.supports(narrow.dtype)]
            raise UnsupportedError(f"{opt('precision')} {recipe}: the catalog has no dense "
                                   f"{narrow.dtype} rate for {device.name} (its "
                                   f"{device.architecture} tensor cores run it; gpuplan does not "
                                   "guess a peak, and a custom: card has no architecture to run "
                                   "a narrow recipe on); time it on a catalog entry that states "
                                   f"one ({', '.join(same or have)})",
                                   field="precision", value=recipe,
                                   accepted=", ".join(same or have))
    dtype = "tf32" if (r.compute_dtype == "fp32" and tf32) else r.compute_dtype
    _check_dtype(device, dtype, "train")
    w = 2 if r.autocast else r.weight_bytes
    return PrecisionLayout(name=recipe, dtype=dtype, act=_ACT_BYTES[dtype], weight=w, head=w,
                           embed=r.weight_bytes, grad=r.grad_bytes, weight_store=r.weight_bytes,
                           master=r.master_bytes, state=r.state_bytes, autocast=r.autocast,
                           master_remainder=r.master_remainder)


def infer_precision(weight_format: str, device: Device, tf32: bool, *,
                    shipped: str | None = None, engine: str | None = None) -> PrecisionLayout:
    """The layout of an inference weight format (a name the Job accepted) on ``device``: its
    GEMMs at :func:`~gpuplan.formats.gemm_dtype` (NVFP4/MXFP4 at the FP4 rate where the SKU's
    tensor cores take the format, a 16-bit dequantizing GEMM elsewhere), its weights read at
    their packed bits. ``shipped`` is the checkpoint's own format (the architecture's
    ``checkpoint_format``). FP8 weights on a SKU without FP8 tensor cores (Ampere, Turing) are
    refused, except under ``engine`` vllm, which runs them as W8A16 (FP8 Marlin: the weights
    widen to 16 bits in the kernel; vLLM docs, FP8 W8A8). ``gguf`` (a .gguf file's own
    per-tensor types) has no one layout: the speed model refuses it in one line rather than
    guess its bits."""
    if weight_format not in WEIGHT_FORMATS:
        raise InputError(f"{opt('infer_precision')} {shown(weight_format)}: the speed model "
                         "takes one weight format for every tensor; give the one the file "
                         f"mostly stores ({', '.join(list(WEIGHT_FORMATS)[:6])} ...)",
                         field="infer_precision", value=weight_format,
                         accepted=", ".join(WEIGHT_FORMATS))
    f = WEIGHT_FORMATS[weight_format]
    dtype = gemm_dtype(f, device.architecture, device.supports, shipped=shipped)
    dtype = "tf32" if (dtype == "fp32" and tf32) else dtype
    if dtype == "fp8" and f.name != "w4a8" and engine == "vllm" and not device.supports("fp8") \
            and device.supports("bf16"):
        dtype = "bf16"  # vLLM's FP8 Marlin: W8A16 on Ampere/Turing
    if dtype == "fp8" and not device.supports(dtype):
        _refuse_fp8_infer(device, weight_format)
    _check_dtype(device, dtype, "infer")
    act = _ACT_BYTES[dtype]
    w = f.bits / 8
    head = w if f.name in ("fp32", "bf16", "fp16") else 2.0
    return PrecisionLayout(name=weight_format, dtype=dtype, act=act, weight=w, head=head,
                           embed=head, grad=act, weight_store=int(math.ceil(w)), master=0,
                           state=0, autocast=False)


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
# The job's step


def one_mode(job: Job) -> StepMode:
    """The job's mode when it is one (train or infer); ``both`` is two estimates."""
    if job.mode not in ("train", "infer"):
        raise InputError(f"job mode {job.mode!r}: a speed estimate is of one mode; pass "
                         "job.with_(mode='train') or job.with_(mode='infer')")
    return job.mode


def resolve_seq(arch: Architecture | None, seq: int | None, notes: list[str],
                context: int | None = None, engine: str | None = None) -> int:
    """The sequence length the step uses (a vision model's: its patches), with a note where it is
    not what was asked or not what the model was built for. The sequence and the decode
    ``context`` are checked against the positions by the rule fit and cluster share
    (:func:`gpuplan.job.check_positions`): refused where the model cannot run that long (or the
    serving ``engine`` refuses it), a note where it is past the trained context."""
    if arch is None:
        seq = default_seq(None) if seq is None else seq
        notes.append("architecture unknown (parameter count only): 2N FLOPs per token forward, "
                     "no attention term, no per-op roofline, no small-work occupancy")
    elif arch.kind == "vision":
        want = default_seq(arch)
        check_positions(arch, seq, "seq")  # past the patch table: refused, as fit refuses it
        if seq is not None and seq != want:
            notes.append(f"a vision model's sequence is its patches + [CLS]: {want}, not {seq}")
        seq = want
    else:
        seq = default_seq(arch) if seq is None else seq
        engine = serving_engine(engine)
        notes.extend(n for n in (check_positions(arch, seq, "seq", engine=engine),
                                 check_positions(arch, context, "context", engine=engine)) if n)
    return seq


def adapted_linears(arch: Architecture | None, tensors: Sequence,
                    targets: Sequence[str] | None) -> tuple | None:
    """The frozen linears LoRA adapts (:func:`~gpuplan.models.lora_linears`), or None when the
    model's layer shapes are unknown or its family has no default and none was given (the
    adapters are then estimated from q and v)."""
    if arch is None or not tensors:
        return None
    if targets is None and arch.family not in DEFAULT_LORA_TARGETS:
        return None
    return lora_linears(tensors, arch.family, arch.name, targets)


def lora_note(rank: int, arch: Architecture | None = None, tensors: Sequence = (),
              targets: Sequence[str] | None = None) -> str | None:
    """Said when the adapted modules are assumed: the family's default targets, or q and v
    sized from the architecture when the layer shapes are unknown. None when they were given."""
    linears = adapted_linears(arch, tensors, targets)
    if linears is None:
        return (f"LoRA adapters assumed rank {rank} on q and v (PEFT's default targets); pass "
                "trainable_params for the exact count")
    if targets is not None:
        return None
    mods = ", ".join(dict.fromkeys(t.module for t in linears))
    return f"LoRA rank {rank} on {mods} (PEFT's default targets for {arch.family})"


def arch_and_name(model: Model | Architecture) -> tuple[Architecture | None, str, int, tuple]:
    if isinstance(model, Architecture):
        n = sum(t.total for t in model.tensors) if model.tensors else 0
        return model, model.name, n, model.tensors
    if isinstance(model, Model):
        return model.architecture, model.name, model.params.total, model.tensors
    raise InputError(f"model {model!r}: expected a gpuplan Model or Architecture")


def _count_only_ops(n: int, shape: StepShape, prec: PrecisionLayout, slots: int) -> tuple[Op, ...]:
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


#: Engines whose training loop copies each micro-batch's inputs to the GPU with a blocking
#: ``.to(device)`` (:attr:`Phase.sync_per_micro_step`): transformers' Trainer
#: (Trainer._prepare_input: ``data.to(device=self.args.device)``, no non_blocking, in every
#: version since 4.x), and NVIDIA DLE's BERT scripts, timed under this engine (run_squad.py:
#: ``batch = tuple(t.to(device) for t in batch)``), and torchtitan (train.py @9dec370, each
#: step: ``input_ids = input_ids.to(device_type)``, ``labels = labels.to(device_type)``, no
#: non_blocking). Others are not listed until their loop is read.
BLOCKING_INPUT_COPY = frozenset({"transformers", "torchtitan"})

#: Engines whose training loop reads the loss on the host after every micro-batch's backward
#: (:attr:`Phase.sync_after_backward`): transformers' Trainer (its training loop's NaN/inf filter
#: ``torch.isnan(tr_loss_step) or torch.isinf(tr_loss_step)``, TrainingArguments
#: ``logging_nan_inf_filter=True`` by default), and NVIDIA DLE's BERT pretraining, timed under
#: this engine (run_pretraining.py: ``average_loss += loss.item()`` after ``backward()``;
#: DeepLearningExamples 042e8724, PyTorch/LanguageModeling/BERT). DLE's run_squad.py reads the
#: loss only every ``log_freq`` steps, but its fp16 step reads apex's overflow flag and its fp32
#: step reads each clip norm, so its rows wait there already.
HOST_READ_AFTER_BACKWARD = frozenset({"transformers"})


def _phase(name, ops, device, eff, dtype, *, batch, q_len, kv_len, micro_steps=1,
           runtime="eager", sync=False, micro_sync=False, loss_read=False,
           engine: str = "transformers") -> Phase:
    return Phase(name=name, batch=batch, q_len=q_len, kv_len=kv_len,
                 ops=time_ops(ops, device, eff, dtype), launch_s=eff.launch_s,
                 peak_flops=device.peak(dtype), dtype=dtype, micro_steps=micro_steps,
                 overheads=_overheads(device, eff, runtime, get_engine(engine).host_issue,
                                      python_backward=get_engine(engine).python_backward),
                 sync_before_optimizer=sync,
                 sync_per_micro_step=micro_sync, sync_after_backward=loss_read)


def _overheads(device: Device, eff: Efficiency, runtime: str,
               host_issue: str = "", *, python_backward: bool = False) -> RuntimeOverheads | None:
    """The runtime's per-kernel costs on a GPU (None on a CPU). A measured back-to-back launch of a
    tiny op (``gpuplan bench``) is the dispatcher-level cost: it replaces the backward and compile
    constants, and the eager forward keeps its stated ratio to them. ``host_issue``: the runtime
    whose host costs per kernel the engine's launches carry where they differ from ``runtime``'s
    (:attr:`~gpuplan.engines.profiles.EngineProfile.host_issue`): the kernels, the device gaps
    and the label stay ``runtime``'s. ``python_backward``: the engine's backward kernels are
    launched from Python as its forward's are
    (:attr:`~gpuplan.engines.profiles.EngineProfile.python_backward`), so each carries
    ``host_issue``'s forward cost per kernel rather than its backward one."""
    if device.kind != "gpu":
        return None
    if host_issue and host_issue != runtime:
        o, h = _overheads(device, eff, runtime), _overheads(device, eff, host_issue)
        bwd = h.host_fwd_s if python_backward else h.host_bwd_s
        return replace(o, host_fwd_s=h.host_fwd_s, host_bwd_s=bwd)
    if str(eff.basis.get("launch_s", "")).startswith("measured"):
        ratio = constant("eager_host_fwd_s") / constant("eager_host_bwd_s")
        o = runtime_overheads(runtime, eager_host_s=eff.launch_s * ratio)
        if runtime == "compile":
            o = replace(o, host_fwd_s=eff.launch_s, host_bwd_s=eff.launch_s)
        return replace(o, host_bwd_s=min(o.host_bwd_s, eff.launch_s))
    return runtime_overheads(runtime)


def _lora_params(arch: Architecture, rank: int) -> int:
    """PEFT's default LoRA targets for decoder LMs (q_proj and v_proj): r x (in + out) each."""
    nq, nkv = arch.num_heads * arch.head_dim, arch.num_kv_heads * arch.head_dim
    return arch.num_layers * rank * (2 * arch.hidden_size + nq + nkv)


@record
class StepSpec:
    """What one step is, after the job, the model and the device are resolved."""

    mode: StepMode
    batch: int
    seq: int
    checkpointing: Checkpointing
    attention: Attention
    optimizer: str
    grad_accum: int
    """Micro-batches per training step (1 for inference)."""
    zero: int
    gpus: int
    lora_rank: int | None
    """Training LoRA adapters of this rank (the base is frozen); None = full training."""
    trainable: int | None
    """The exact trainable parameter count when known."""
    new_tokens: int
    context: int | None
    kv_bytes: int | None
    runtime: str = "eager"
    """How the code runs, resolved (``auto`` -> the mode's default)."""
    optimizer_impl: str | None = None
    """``foreach``, ``fused`` or ``for-loop``; None: ``fused`` when the job says so, else torch's
    default for the device (foreach on a GPU, the for-loop on a CPU)."""
    lora_targets: tuple[str, ...] | None = None
    """The adapted modules (None: the family's PEFT default)."""
    model_code: str = "transformers"
    """Whose model code runs (``torchtune``: its RoPE chain in eager, K/V expanded to every
    head; ``fms``: IBM FMS's fp32 RoPE chain in eager)."""
    lora_dropout: float = 0.0
    max_grad_norm: float | None = None
    """Clip the gradients' global norm each step (None: no clipping)."""
    grad_clip_impl: str | None = None
    """How the clip runs (:data:`~.efficiency.GRAD_CLIP_IMPLS`); None: torch's current
    clip_grad_norm_ (foreach on a GPU, a per-tensor loop on a CPU)."""
    engine: str = "transformers"
    """The engine, resolved: how it runs MLA and the experts (:func:`~.flops.run_form`)."""
    fp8_attention: bool = False
    """Under a narrow recipe the attention kernels run at the 8-bit rate (``--fp8-attention``);
    in inference the serving engine's FP8 attention kernel (:func:`attention_plan`)."""
    kv_dtype: str | None = None
    """The KV cache's format as given (None: the compute dtype's)."""
    ep: int = 1
    """Expert-parallel ranks the step's experts are spread over (each expert's GEMM at the tokens
    it gets from all of them: :func:`~.flops.expert_tokens`)."""
    bf16_edge_layers: int = 0
    """Under a narrow recipe the blocks kept BF16 at each end of the stack
    (``--first-last-layers-bf16``)."""
    moe_capacity_factor: float | None = None
    """The experts' GEMMs run their padded capacity (:attr:`~.flops.RunForm.capacity_factor`);
    None: dropless."""
    recompute_modules: tuple[str, ...] | None = None
    """Megatron-Core's recompute modules under selective checkpointing
    (:data:`~.flops.MODULE_OPS`); None: the attention core."""
    moe_dispatcher: str = "alltoall"
    """Megatron-Core's MoE token dispatcher (:attr:`gpuplan.job.ParallelLayout.moe_dispatcher`):
    which copies and launches surround the experts (:func:`~.flops.dispatch_op`)."""
    cuda_graph_scope: tuple[str, ...] | None = None
    """Megatron-Core's Transformer Engine CUDA graphs over parts of each layer
    (:attr:`gpuplan.job.TrainingLoop.cuda_graph_scope`): the captured kernels' host issue as
    graph replays (:func:`~.graphs.graphed_ops`); None: none."""
    decode_attention: str = ""
    """The decode attention kernel where it is not the engine's fused (Flash) one
    (:data:`~.efficiency.DECODE_ATTENTION_KERNELS`: ``ft-mmha``, FasterTransformer's masked
    multi-head attention under AutoAWQ's fused modules); "": the engine's."""
    narrow_weights_gathered: bool = False
    """The narrow weights arrive cast (:func:`narrow_weights_gathered`): the compute stream
    casts none of them."""
    pp: int = 1
    """Pipeline stages (an engine's async scheduling may be off under them:
    :meth:`~gpuplan.engines.profiles.ServingHost.overlaps_core`)."""
    sdpa_repeat_kv: bool | None = None
    """The model code expands K and V to every query head before its SDPA call (a copy:
    :func:`_kv_expand`); None: as the engine's profile says
    (:attr:`~gpuplan.engines.profiles.EngineProfile.sdpa_repeat_kv`, torchtitan's Llama), or
    ``model_code`` torchtune's. False: a job run through such a profile by other code."""

    @classmethod
    def of(cls, job: Job, *, mode: StepMode, seq: int, new_tokens: int,
           trainable: int | None, single_device: bool = False,
           optimizer_impl: str | None = None,
           grad_clip_impl: str | None = None) -> "StepSpec":
        train = mode == "train"
        for field, impl, known in (("optimizer_impl", optimizer_impl, OPTIMIZER_IMPLS),
                                   ("grad_clip_impl", grad_clip_impl, GRAD_CLIP_IMPLS)):
            if impl is not None and impl not in known:
                raise InputError(f"{opt(field)} {impl!r}: expected {', '.join(known)}",
                                 field=field, value=impl, accepted=", ".join(known))
        if optimizer_impl is None and job.fused_optimizer:
            optimizer_impl = "fused"
        return cls(mode=mode, batch=job.batch, seq=seq, checkpointing=job.checkpointing,
                   attention=job.attention, optimizer=job.optimizer,
                   grad_accum=job.grad_accum if train else 1,
                   zero=0 if single_device else job.zero, gpus=1 if single_device else job.gpus,
                   lora_rank=job.lora_rank if train else None, trainable=trainable,
                   new_tokens=new_tokens, context=job.context,
                   kv_bytes=None if job.kv_dtype is None else KV_BYTES[job.kv_dtype],
                   runtime=resolve_runtime(job.runtime, mode, job.engine), optimizer_impl=optimizer_impl,
                   lora_targets=job.lora_targets, lora_dropout=job.lora_dropout,
                   model_code=job.model_code,
                   max_grad_norm=job.max_grad_norm if train else None,
                   grad_clip_impl=grad_clip_impl, engine=resolve_engine(job.engine),
                   fp8_attention=job.fp8_attention, kv_dtype=job.kv_dtype,
                   bf16_edge_layers=job.first_last_layers_bf16 if train else 0,
                   moe_capacity_factor=job.moe_capacity_factor if train else None,
                   recompute_modules=job.recompute_modules if train else None,
                   moe_dispatcher=job.moe_dispatcher,
                   cuda_graph_scope=job.cuda_graph_scope if train else None,
                   narrow_weights_gathered=(train and not single_device and job.gpus > 1
                                            and narrow_weights_gathered(job)),
                   pp=job.pp)


def attention_plan(spec: StepSpec, device: Device) -> AttentionPrecision:
    """How an inference step's attention runs on ``device`` (FP8 or 16-bit, over which KV
    cache: :func:`~.flops.inference_attention`); training's is the recipe's (16-bit)."""
    if spec.mode == "train":
        return inference_attention("transformers", None, False, gpu=device.name,
                                   architecture=device.architecture, has_fp8=False)
    return inference_attention(spec.engine, spec.kv_dtype, spec.fp8_attention, gpu=device.name,
                               architecture=device.architecture or "",
                               has_fp8=device.kind == "gpu" and device.supports("fp8"))


def build_steps(arch: Architecture | None, n_params: int, tensors: tuple, device: Device,
                eff: Efficiency, prec: PrecisionLayout, spec: StepSpec,
                ) -> tuple[Phase, Phase | None, int, int]:
    """(headline step, prefill or None, parameters, trainable parameters): a training step; a
    decoder's decode step and prefill; an encoder's (or vision model's) forward pass."""
    kw = dict(act_bytes=prec.act, weight_bytes=prec.weight, head_bytes=prec.head,
              embed_bytes=prec.embed, kv_bytes=spec.kv_bytes or prec.act, grad_bytes=prec.grad,
              attention=spec.attention)
    kw.update(_shipped_bytes(arch, prec))
    if spec.mode == "train":
        step, prefill, n, trainable = _train_step(arch, n_params, tensors, device, eff, prec,
                                                  spec, kw)
        if spec.cuda_graph_scope:
            step = replace(step, ops=tuple(graphed_ops(step.ops, spec.cuda_graph_scope,
                                                       step.overheads, spec.moe_dispatcher)))
        return step, prefill, n, trainable
    b, s = spec.batch, spec.seq
    rt = spec.runtime
    if arch is not None and arch.kind != "decoder":
        plan = attention_plan(spec, device)
        fwd = fp8_attention_ops(_forward(arch, StepShape(batch=b, q_len=s, kv_len=s), kw, prec,
                                         spec, device), plan)
        return (_phase("forward", fwd, device, eff, prec.dtype, batch=b, q_len=s, kv_len=s,
                       runtime=rt), None, n_params, 0)
    plan = attention_plan(spec, device)
    kw["kv_scale_bytes"] = plan.kv_scale_bytes
    pre_shape = StepShape(batch=b, q_len=s, kv_len=s, logits_tokens=b)
    ctx = spec.context if spec.context is not None else s + spec.new_tokens // 2
    dec_shape = StepShape(batch=b, q_len=1, kv_len=ctx, decode=True)
    if arch is None:
        pre = _count_only_ops(n_params, pre_shape, prec, device.parallel_slots)
        dec = _count_only_ops(n_params, dec_shape, prec, device.parallel_slots)
    else:
        pre = splitk_sum_ops(fp8_attention_ops(_forward(arch, pre_shape, kw, prec, spec,
                                                        device), plan), eff, prec.act, rt)
        dec = splitk_sum_ops(_decode_attention_ops(fp8_attention_ops(
            _forward(arch, dec_shape, kw, prec, spec, device), plan), spec, prec.act), eff,
            prec.act, rt)
    prefill = _phase("prefill", pre, device, eff, prec.dtype, batch=b, q_len=s, kv_len=s,
                     runtime=rt)
    decode = _phase("decode", dec, device, eff, prec.dtype, batch=b, q_len=1, kv_len=ctx,
                    runtime=rt)
    host = get_engine(spec.engine).serving_host
    if host is not None and device.kind == "gpu":
        # each sequence of the step samples one token, prefill or decode alike
        prefill, decode = (replace(ph, serve_host_s=host.step_s(b), serve_overlap=host.overlap,
                                   serve_core_s=host.core_step_s(b),
                                   serve_core_overlap=host.overlaps_core(spec.pp))
                           for ph in (prefill, decode))
    return decode, prefill, n_params, 0


def _decode_attention_ops(dec: tuple[Op, ...], spec: StepSpec, act: int) -> tuple[Op, ...]:
    """The decode step's ops under ``spec.decode_attention``. ``ft-mmha``: AutoAWQ's fused
    modules (v0.1.6, 8110e028), the only code that runs it. Their attention
    (awq/modules/fused/attn.py) calls ``single_query_attention(..., self.rotary_dim, 10000,
    self.is_neox)`` with ``rotary_dim = head_dim``: the kernel rotates the new token's Q and K
    itself and writes its K and V into the cache, so no rotary kernels run beside it, and its
    core is timed by its loop (:func:`~.efficiency.single_query_attention_s`); their QKV is one
    linear (awq/utils/fused_utils.py ``fuse_qkv``: q, k and v's packed weights concatenated, the
    Llama, Mistral and Aquila fusers' ``qkv_layer``), one launch reading the input once."""
    if spec.decode_attention != "ft-mmha":
        return dec
    out = []
    for o in dec:
        if o.name == "attn.rotary":
            continue
        if o.name == "attn.core":
            o = replace(o, attention_kernel="ft-mmha")
        elif o.name == "attn.qkv" and o.kernels > 1 and o.shape:
            o = one_launch_product(o, act)  # three nn.Linear read the input three times
        out.append(o)
    return tuple(out)


def splitk_sum_ops(ops: Sequence[Op], eff: Efficiency, act: int,
                   runtime: str) -> tuple[Op, ...]:
    """``ops`` with, after each quantized block matmul whose kernel writes split-K partials
    (``eff.quant_splitk`` = S: AutoAWQ's GEMM, ``_out_feats.sum(0)``), the reduction that sums
    them: it reads the S partials of rows x out features and writes the output, one kernel per
    launch of the matmul; the matmul's own write grows from one output to S. The reduction is
    issued from C++ inside the extension's call (``_out_feats.sum(0)`` in gemm_forward_cuda), so
    its host cost is the dispatcher's alone (``eager_host_bwd_s``, as autograd's C++ nodes), not
    a Python op's; none under CUDA graphs. The embedding, the 16-bit head and unquantized
    matmuls keep their kernels."""
    s = eff.quant_splitk
    if s <= 0:
        return tuple(ops)
    out: list[Op] = []
    for o in ops:
        quantized = (o.kind == "matmul" and o.weight_elements and o.shape and o.groups == 1
                     and o.group not in ("head", "embedding")
                     and (o.weight_width or o.bytes / o.weight_elements) < 1.5)
        if not quantized:
            out.append(o)
            continue
        b, m, _, n = o.shape
        outputs = b * m * n
        out.append(replace(o, bytes=o.bytes + (s - 1) * outputs * act))
        out.append(Op(name=f"{o.name}.splitk_sum", op_class="norm_elementwise",
                      kind="elementwise", phase=o.phase, count=o.count,
                      flops=float((s - 1) * outputs), counted_flops=0.0,
                      bytes=float((s + 1) * outputs * act), parallel_work=max(1, outputs),
                      kernels=o.kernels, group=o.group,
                      host_s=None if runtime == "cudagraphs" else constant("eager_host_bwd_s")))
    return tuple(out)


def _shipped_bytes(arch: Architecture | None, prec: PrecisionLayout) -> dict:
    """A checkpoint shipped in MXFP4 (gpt-oss) keeps attention in bf16 and only its experts in
    MXFP4 (formats: its quantization_config's modules_to_not_convert): the experts' GEMMs read
    4.25-bit weights (W4A16 on Hopper: dequantized in the kernel, computed at bf16), the other
    block matmuls 16-bit ones."""
    if arch is not None and prec.name == "mxfp4" and arch.checkpoint_format == "mxfp4":
        return {"weight_bytes": 2.0, "expert_bytes": prec.weight}
    return {}


def _forward(arch: Architecture, shape: StepShape, kw: dict, prec: PrecisionLayout,
             spec: StepSpec, device: Device) -> tuple[Op, ...]:
    """The forward ops as the runtime runs them on a GPU (eager's unfused chains, autocast's fp32
    ops); a CPU's as counted."""
    fwd = build_forward_ops(arch, shape, **kw, form=run_form(
        arch, spec.engine, decode=shape.decode, ep=spec.ep,
        gpu_arch=device.architecture if device.kind == "gpu" else "", act_bytes=prec.act,
        capacity_factor=spec.moe_capacity_factor, dispatcher=spec.moe_dispatcher))
    if expands_kv(spec):
        fwd = _kv_expand(fwd, arch, shape, prec.act)
    if device.kind != "gpu":
        return fwd
    chains = dict(norm=arch.norm, autocast=prec.autocast, gated=arch.mlp == "gated",
                  act_bytes=prec.act, model_code=spec.model_code)
    if spec.runtime == "compile" and get_engine(spec.engine).compile_scope == "blocks":
        # only the blocks compiled: the ops outside them (the final norm) run as eager's
        return tuple(eager_chains((op,), runtime="compile" if is_layer_op(op) else "eager",
                                  **chains)[0] for op in fwd)
    return eager_chains(fwd, runtime=spec.runtime, **chains)


def narrow_weights_gathered(job: Job) -> bool:
    """Whether FSDP all-gathers ``job``'s weights already cast to its narrow format, so that no
    forward (and no recompute) casts them on the compute stream: torchao's tensorwise recipe with
    its float8 all-gather (``--fp8-param-gather``: torchtitan's enable_fsdp_float8_all_gather)
    over sharded weights. torchao@eab345c torchao/float8/fsdp_utils.py
    ``WeightWithDynamicFloat8CastTensor.fsdp_pre_all_gather`` casts the local shard (with the
    precomputed scale, else its own amax) inside FSDP2's all-gather copy-in, on its own stream
    (torch distributed/fsdp/_fully_shard/_fsdp_collectives.py ``foreach_all_gather``:
    ``all_gather_copy_in_stream``); ``fsdp_post_all_gather`` returns a Float8Tensor, and
    float8_linear.py ``cast_weight_to_float8_t`` returns ``weight.t()`` for a weight
    ``tensor_already_casted_to_fp8`` -- no cast. A recipe that caches its weight (TE) keeps
    its own rule."""
    recipe = NARROW_RECIPES.get(job.precision)
    return (recipe is not None and recipe.param_gather and not recipe.caches_weight
            and job.fp8_param_gather and job.zero >= 2 and job.lora_rank is None)


def expands_kv(spec: StepSpec) -> bool:
    """Whether the step's model code copies K and V to every query head before SDPA: torchtune's
    (``model_code``), or the engine's own Llama where its profile says so (``sdpa_repeat_kv``:
    torchtitan@9dec370 torchtitan/models/llama/model.py lines 116-125 and 201-202, ``repeat_kv``
    = ``unsqueeze(x, 3).expand(bs, slen, n_kv_heads, n_rep, head_dim).reshape(bs, slen,
    n_kv_heads * n_rep, head_dim)``, a reshape of an expanded view, which copies), unless the
    job says its code is another's (``spec.sdpa_repeat_kv`` False)."""
    if spec.model_code == "torchtune":
        return True
    if spec.sdpa_repeat_kv is not None:
        return spec.sdpa_repeat_kv
    return get_engine(spec.engine).sdpa_repeat_kv


def _kv_expand(fwd: Sequence[Op], arch: Architecture, shape: StepShape,
               act: int) -> tuple[Op, ...]:
    """The model code expands K and V to every query head before the kernel (torchtune/modules/
    attention.py: ``k.expand(...)`` then a reshape, which copies; torchtitan's ``repeat_kv``,
    :func:`expands_kv`): per layer, read the K/V heads and write every head's copy, for all
    ``kv_len`` positions (a decode step copies its whole cache). No copy when K/V heads equal the
    query heads. Under torch.compile the copy stays: SDPA is an external kernel whose inputs
    inductor materializes. Not saved by torchtitan's op-level checkpointing (``_save_list``
    holds mm, SDPA and reduce-scatter), so recomputed under it as the other elementwise ops.
    Its backward sums each gradient over the repeats (autograd's ``sum_to`` for ``expand``; the
    reshape's clone passes the gradient through): one kernel each for K and V, reading every
    head's gradient and writing the K/V heads' -- the forward's bytes (:attr:`Op.
    backward_kernels`)."""
    if arch.kind != "decoder" or arch.num_kv_heads >= arch.num_heads:
        return tuple(fwd)
    out = []
    for op in fwd:
        out.append(op)
        if op.name == "attn.qkv":
            n = shape.batch * shape.kv_len * arch.head_dim
            out.append(replace(op, name="attn.kv_expand", op_class="norm_elementwise",
                               kind="elementwise", flops=0.0, counted_flops=0.0,
                               bytes=float(2 * n * (arch.num_heads + arch.num_kv_heads) * act),
                               parallel_work=max(1, 2 * n * arch.num_heads), kernels=2,
                               weight_elements=0, shape=None, backward_kernels=2))
    return tuple(out)


def _narrow_linears(fwd: Sequence[Op]) -> list[Op]:
    """The forward GEMMs a narrow recipe quantizes: the blocks' linear layers (not the
    embedding, the head, the attention products or the blocks kept BF16)."""
    return [o for o in fwd if o.kind == "matmul" and o.weight_elements and o.shape
            and o.group not in ("embedding", "head") and not o.wide]


def _input_elements(lin: Sequence[Op]) -> int:
    """Elements of the inputs of the linear GEMMs ``lin`` (batch x tokens x in features)."""
    return sum(o.shape[0] * o.shape[1] * o.shape[2] * o.count for o in lin)


def _grad_elements(lin: Sequence[Op]) -> int:
    """Elements of the output gradients of the linear GEMMs ``lin`` (batch x tokens x out
    features)."""
    return sum(o.shape[0] * o.shape[1] * o.shape[3] * o.count for o in lin)


def keep_edges_wide(fwd: Sequence[Op], layers: int, edge: int) -> list[Op]:
    """``fwd`` with the first ``edge`` and the last ``edge`` of ``layers`` blocks' linear GEMMs
    kept 16-bit (Megatron ``--first-last-layers-bf16``: those blocks are built as BF16 layers,
    outside the FP8 autocast). Each block linear of ``count`` instances (layers x per layer) is
    split into a narrow part and a wide part of ``count x 2 edge / layers`` instances (rounded:
    a layer group unlike the rest, MoE beside dense, is taken at the stack's share)."""
    if edge <= 0:
        return list(fwd)
    narrow_blocks(layers, edge)
    out: list[Op] = []
    for o in fwd:
        if o in _narrow_linears([o]):
            wide = round(o.count * 2 * edge / layers)
            if 0 < wide < o.count:
                out += [replace(o, count=o.count - wide), replace(o, count=wide, wide=True)]
                continue
            if wide >= o.count:
                out.append(replace(o, wide=True))
                continue
        out.append(o)
    return out


#: The linears Megatron-Core's Transformer Engine layer spec builds as ``te.LayerNormLinear``
#: (TELayerNormColumnParallelLinear: ``linear_qkv``, and a dense MLP's ``linear_fc1``; a MoE
#: layer's norm is a TENorm apart), each with the norm op that feeds it: megatron/core/models/
#: gpt/gpt_layer_specs.py get_gpt_layer_with_transformer_engine_spec at NVIDIA/Megatron-LM@
#: baf94af3c667248865f23df73b9fb8e2395e6fd0 (core_r0.8.0).
NORM_FED_LINEARS = {"attn.qkv": "attn.norm", "mlp.gate_up": "mlp.norm", "mlp.up": "mlp.norm"}


def norm_fused_elements(fwd: Sequence[Op], recipe) -> tuple[int, int]:
    """(input elements, linear instances) of the narrow linears whose input a fused norm writes
    in the narrow format (:attr:`gpuplan.fp8.NarrowRecipe.fused_norm_cast`, the linears of
    :data:`NORM_FED_LINEARS` whose norm the forward has); (0, 0) under any other recipe."""
    if not recipe.fused_norm_cast:
        return 0, 0
    names = {o.name for o in fwd}
    fed = [o for o in _narrow_linears(fwd) if NORM_FED_LINEARS.get(o.name) in names]
    return _input_elements(fed), sum(o.count for o in fed)


def _quantize_op(fwd: Sequence[Op], recipe, architecture: str = "", act: int = 2,
                 compute_capability: str = "") -> Op:
    """One micro-batch's activation and gradient casts of a narrow recipe, as memory traffic
    (:func:`gpuplan.fp8.cast_bytes_per_element`): each linear's input in the forward and its
    output gradient in the backward; where no narrow input is saved (torchao's rowwise:
    :data:`gpuplan.fp8.TORCHAO_SAVED_INPUT`) the saved 16-bit input is cast again for the weight
    gradient. A columnwise copy (MX and NVFP4 everywhere, TE's FP8
    transposes where the FP8 GEMM is TN-only, Hopper/Ada/sm_120:
    :func:`gpuplan.fp8.columnwise_bytes_per_element` on ``compute_capability``) writes a second
    output. Where the norm writes the narrow input itself (:func:`norm_fused_elements`) those
    elements save the norm's wider write (``act`` - 1 bytes, taken off here: both passes are the
    forward's memory-bound elementwise kernels) and the whole cast, and read their 1-byte copy
    again for the transpose where there is one (the cast's launch becomes the transpose's;
    without a transpose it is gone)."""
    lin = _narrow_linears(fwd)
    inputs = _input_elements(lin)
    grads = _grad_elements(lin)
    col = columnwise_bytes_per_element(recipe, architecture, compute_capability)
    per = cast_bytes_per_element(recipe) + col
    elements = inputs * (1 if recipe.saves_narrow_inputs else 2) + grads
    launches = sum(o.count for o in lin) * (2 if recipe.saves_narrow_inputs else 3)
    fused, fused_launches = norm_fused_elements(fwd, recipe)
    saved = fused * ((act - 1) + cast_bytes_per_element(recipe) - (1.0 if col else 0.0))
    launches -= 0 if col else fused_launches
    return Op(name="fp8.quantize", op_class="norm_elementwise", kind="elementwise",
              phase="forward", count=1, flops=float(elements), counted_flops=0.0,
              bytes=float(elements * per - saved), parallel_work=max(1, elements),
              kernels=max(1, launches), group="dense")


def _split_quantize_op(fwd: Sequence[Op], recipe) -> Op | None:
    """The launches Transformer Engine's ``split_quantize`` adds to one micro-batch beyond the
    one cast per linear :func:`_quantize_op` counts: a grouped linear issued as one GEMM per
    local expert (``groups`` > 1 and that many ``kernels``: TE GroupedLinear under Megatron,
    :data:`~.flops.EXPERT_GEMM_LOOP`) quantizes its input in the forward and its output gradient
    in the backward split by split, each split ``recipe.split_quantize_kernels`` kernels (one
    fused kernel for all of them where that is 0). Their bytes are the casts' own, already
    counted; these are launches only, issued from TE's C++ loop inside one Python call, so each
    costs the dispatcher-level launch (``eager_host_bwd_s``, as the multi-tensor launches from
    C++ below), not eager's Python cost. None: no such linear, or no split quantize (torchao)."""
    per = recipe.split_quantize_kernels
    if per is None:
        return None
    extra = sum(o.count * 2 * (max(1, o.kernels * per) - 1) for o in _narrow_linears(fwd)
                if o.groups > 1 and o.kernels > 1)
    if extra <= 0:
        return None
    return _launch_only_op("fp8.split_quantize", extra)


def _launch_only_op(name: str, kernels: int) -> Op:
    """``kernels`` launches that move no bytes worth timing, each issued from C++ at the
    dispatcher-level cost (``eager_host_bwd_s``)."""
    return Op(name=name, op_class="norm_elementwise", kind="elementwise", phase="forward",
              count=1, flops=0.0, counted_flops=0.0, bytes=0.0, parallel_work=1,
              kernels=kernels, group="dense", host_s=constant("eager_host_bwd_s"))


#: The weights whose gradient Megatron-Core adds to its fp32 ``main_grad`` from Python, per op
#: of a layer that holds them (:func:`_main_grad_add_op`): each norm's weight, QK-norm's two, the
#: MoE router's.
_HOOKED_WEIGHTS = {"attn.norm": 1, "mlp.norm": 1, "attn.qk_norm": 2, "moe.router": 1}


def _main_grad_add_op(fwd: Sequence[Op], arch: Architecture) -> Op | None:
    """The gradient adds Megatron-Core's data-parallel wrapper issues from a Python backward hook
    per micro-batch: ``param.main_grad.add_(param.grad.data)`` for each parameter whose gradient
    Transformer Engine's GEMM did not accumulate into ``main_grad`` itself
    (megatron/core/distributed/distributed_data_parallel.py ``_make_backward_post_hook``, line
    440 at NVIDIA/Megatron-LM@b0cc2706ddc60d2aefd5fff346445b5c013036a8; TE's
    ``fuse_wgrad_accumulation`` covers the linear weights only): the RMSNorms' weights (the input
    and pre-MLP norm, fused into the next TE linear or not, and QK-norm's query and key norms,
    unweighted L2 ones excepted) and the router's (``RouterGatingLinearFunction.backward``
    returns ``grad_weight``: transformer/moe/moe_utils.py lines 1208-1242). One launch each,
    reading the fp32 main gradient and the 16-bit gradient and writing the main gradient (10 B
    an element). None: nothing hooked."""
    kernels, nbytes = 0, 0.0
    for o in fwd:
        n = _HOOKED_WEIGHTS.get(o.name, 0)
        if not n or (o.name == "attn.qk_norm" and arch.qk_norm == "l2"):
            continue
        width = (arch.head_dim if o.name == "attn.qk_norm" else arch.hidden_size) * (
            arch.num_experts if o.name == "moe.router" else 1)
        if o.name == "attn.qk_norm" and arch.qk_norm == "rmsnorm_full":
            # OLMo 2: q_norm of heads x head_dim, k_norm of kv_heads x head_dim (n = 2 here)
            width = (arch.num_heads + arch.num_kv_heads) * arch.head_dim / n
        kernels += n * o.count
        nbytes += 10.0 * n * o.count * width
    if not kernels:
        return None
    return Op(name="ddp.main_grad_add", op_class="norm_elementwise", kind="elementwise",
              phase="backward", count=1, flops=0.0, counted_flops=0.0, bytes=nbytes,
              parallel_work=max(1, arch.hidden_size), kernels=kernels, group="dense")


def _megatron_wide_router(fwd: Sequence[Op], narrow) -> list[Op]:
    """``fwd`` with the MoE router's GEMM kept 16-bit under a Transformer Engine narrow recipe:
    Megatron-Core's router calls TE's ``general_gemm`` on its 16-bit input and weight in the
    router dtype (moe_utils.py RouterGatingLinearFunction.forward, lines 1168-1206 at
    b0cc2706), outside any TE module, so nothing quantizes it."""
    if narrow is None or "megatron" not in narrow.engines:
        return list(fwd)
    return [replace(o, wide=True) if o.name == "moe.router" else o for o in fwd]


def _scale_launch_op(fwd: Sequence[Op], recipe) -> Op | None:
    """The launches one Transformer Engine quantize of a whole tensor issues beyond the cast
    :func:`_quantize_op` counts, for the linears not quantized split by split (those are
    :func:`_split_quantize_op`'s): ``recipe.split_quantize_kernels - 1`` per cast, one cast of
    each linear's input in the forward and one of its output gradient in the backward -- under
    current scaling 3 (``zero_amax_kernel`` and ``amax_kernel`` from
    ``nvte_compute_amax_with_config``, ``compute_scale_from_amax_kernel``; NVIDIA/
    TransformerEngine@fe8fad59c9add7f8aa841fed2a0b4087b931856f transformer_engine/common/recipe/
    current_scaling.cu launch_amax_kernel and nvte_compute_scale_from_amax, called from
    csrc/quantizer.cpp Float8CurrentScalingQuantizer::quantize_impl lines 497-536), none for
    the one-kernel recipes. Their bytes (the amax pass) are the casts' own
    (:func:`gpuplan.fp8.cast_bytes_per_element`); issued from TE's C++ inside the cast's one
    Python call, each at the dispatcher-level launch (``eager_host_bwd_s``). None: nothing to
    add."""
    per = recipe.split_quantize_kernels
    if not per or per <= 1:
        return None
    extra = sum(o.count * 2 * (per - 1) for o in _narrow_linears(fwd)
                if not (o.groups > 1 and o.kernels > 1))
    if extra <= 0:
        return None
    return _launch_only_op("fp8.scale_launches", extra)


def _cast_ops(fwd: Sequence[Op], recipe, act: int, spec: "StepSpec",
              architecture: str = "", compute_capability: str = "") -> list[Op]:
    """One micro-batch's activation casts of a narrow recipe (:func:`_quantize_op`), the
    launches its split quantize adds to grouped linears (:func:`_split_quantize_op`) and the
    experts' row padding around them (:func:`_expert_padding_op`; none under HybridEP, whose
    dispatch pads each expert's rows itself: Megatron-Core token_dispatcher.py
    _HybridEPManager.dispatch passes ``pad_multiple`` = the quantization's alignment, so
    Fp8Padding finds the splits aligned)."""
    pad = None if spec.moe_dispatcher == "hybridep" else _expert_padding_op(
        fwd, recipe, act, spec.moe_capacity_factor)
    extra = (_split_quantize_op(fwd, recipe), _scale_launch_op(fwd, recipe), pad,
             _torchao_relayout_op(fwd, recipe, spec))
    return [_quantize_op(fwd, recipe, architecture, act, compute_capability),
            *(o for o in extra if o is not None)]


#: torchao's float8 recipes (pytorch/ao@eab345c2268a7506355d506ebfc27b5d28e5e7d0): how the
#: output gradient reaches the weight-gradient GEMM (:func:`_torchao_relayout_op`).
#: ``transpose``: tensorwise, the one cast's FP8 copy laid out again; ``recast``: rowwise, cast
#: a second time with scales along the other axis.
TORCHAO_GRAD_OUTPUT_FOR_WGRAD = {"fp8-tensorwise": "transpose", "fp8-rowwise": "recast"}


def _saved_fp8_inputs(lin: Sequence[Op], recipe) -> tuple[int, int]:
    """(elements, linear ops) of the FP8 inputs torchao's tensorwise path saves for the weight
    gradient, each laid out again column-major in the backward; (0, 0) under rowwise, which
    saves the 16-bit input and casts it again along dim 0 (``manual_float8_matmul_with_args_
    in_hp``, counted by :func:`_quantize_op`).

    At pytorch/ao@eab345c (v0.8) ``manual_float8_matmul_with_args_in_float8`` saves the
    forward's ``input_fp8`` (``ctx.save_for_backward(input_fp8, weight_fp8_t)``;
    :data:`gpuplan.fp8.TORCHAO_SAVED_INPUT`), cast once, and its weight-gradient GEMM
    ``mm(grad_output.t(), input_fp8)`` takes it as mat2, row-major: ``preprocess_addmm``'s
    column-major copy -- compiled, written by the cast kernel beside the row-major one
    (torchao/float8/roofline_utils.py ``get_tensor_memory_traffic_bytes``: "read in bf16, write
    twice in float8", its charge for the input), 1 byte an element, no launch; eager, an FP8
    read and write and one launch, as the output gradient's. That roofline also takes the
    input's amax as fused into the previous kernel (``fuse_with_prev=True``), which gpuplan does
    not (its cast reads the 16-bit input twice: 6 bytes an element compiled, the roofline's 4).
    q, k and v read one input, cast once as :func:`_quantize_op` counts it (torch.compile's
    CSE of three identical casts; eager casts it per linear, not counted)."""
    if not recipe.saves_narrow_inputs:
        return 0, 0
    return _input_elements(lin), sum(o.count for o in lin)


def _torchao_relayout_op(fwd: Sequence[Op], recipe, spec: "StepSpec") -> Op | None:
    """One micro-batch's backward FP8 copies torchao makes for the layouts ``torch._scaled_mm``
    takes (mat1 row-major, mat2 column-major: pytorch/ao@eab345c torchao/float8/float8_ops.py
    ``preprocess_addmm``: ``a_data.contiguous()`` where mat1 is not row-major,
    ``b_data.t().contiguous().t()`` where mat2 is row-major), beyond the casts
    :func:`_quantize_op` and :func:`_weight_cast_op` count.

    Per linear (float8_linear.py @eab345c): the tensorwise path
    (``manual_float8_matmul_with_args_in_float8``) casts the output gradient once, row-major;
    its weight-gradient GEMM ``mm(grad_output.t(), input)`` needs it transposed. Compiled (a
    torchtitan block), the cast kernel writes the column-major copy beside the row-major one
    (torchao's roofline, torchao/float8/roofline_utils.py @eab345c and
    torchao/testing/training/roofline_utils.py @36027d82 ``tensorwise``: "read in bf16, write
    twice in float8 (row-major and col-major)"): 1 byte an element, no launch; eager, the copy
    reads and writes its FP8 bytes, one launch. The rowwise path
    (``manual_float8_matmul_with_args_in_hp``) casts it a second time with scales along dim 0
    (``cast_config_grad_output_for_grad_weight``): a whole cast
    (:func:`gpuplan.fp8.cast_bytes_per_element`), one launch. The input's and the non-gathered
    weight's other layouts are covered by the second casts gpuplan already charges them
    (:func:`_quantize_op`, :func:`_weight_cast_op`: 5 bytes an element each) under rowwise;
    tensorwise's saved FP8 input gets the output gradient's treatment
    (:func:`_saved_fp8_inputs`).

    Where FSDP2 gathers the weights in FP8 (``spec.narrow_weights_gathered``: no weight cast
    on the compute stream) the gathered row-major weight is mat2 of the input-gradient GEMM
    ``mm(grad_output, weight_fp8_t.t())``: ``preprocess_addmm`` copies it column-major in each
    backward, an FP8 read and write (2 bytes an element) and one launch a linear, compiled or
    not (no cast kernel to write it; torchao's eab345c roofline leaves it out: "TODO: model this
    if FSDP float8 all-gather is on"). None: a recipe not torchao's."""
    how = TORCHAO_GRAD_OUTPUT_FOR_WGRAD.get(recipe.name)
    lin = _narrow_linears(fwd)
    if how is None or not lin:
        return None
    grads = _grad_elements(lin)
    n = sum(o.kernels * o.count for o in lin)  # one launch a linear (wq, wk, wv apart)
    inputs, n_in = _saved_fp8_inputs(lin, recipe)
    if how == "recast":
        nbytes, launches = grads * cast_bytes_per_element(recipe), n
    elif spec.runtime == "compile":
        nbytes, launches = (grads + inputs) * 1.0, 0
    else:
        nbytes, launches = (grads + inputs) * 2.0, n + n_in
    if spec.narrow_weights_gathered:
        nbytes += 2.0 * sum(o.weight_elements * o.count for o in lin)
        launches += n
    return Op(name="fp8.relayout", op_class="norm_elementwise", kind="elementwise",
              phase="backward", count=1, flops=0.0, counted_flops=0.0, bytes=float(nbytes),
              parallel_work=max(1, grads), kernels=launches, group="dense")


#: Rows a quantized grouped GEMM's split must be a multiple of (Transformer Engine
#: transformer_engine/pytorch/quantization.py get_align_size_for_quantization @fe8fad59c:
#: MXFP8 32, NVFP4 128, every other recipe 16).
QUANT_ALIGN = {"mxfp8": 32, "nvfp4": 128}


def _expert_padding_op(fwd: Sequence[Op], recipe, act: int,
                       capacity_factor: float | None) -> Op | None:
    """Megatron-Core's TEGroupedMLP under a narrow recipe pads each local expert's rows to the
    quantized GEMM's alignment before fc1 and strips the padding after fc2 (megatron/core/
    transformer/moe/experts.py TEGroupedMLP.forward, Fp8Padding / Fp8Unpadding, at
    NVIDIA/Megatron-LM@b0cc2706ddc60d2aefd5fff346445b5c013036a8; TE module/fp8_padding.py
    @fe8fad59c: one ``fused_multi_row_padding`` / ``fused_multi_row_unpadding`` each): the
    tokens' ``R x h`` rows and the probabilities' ``R`` padded, the output's ``R x h`` unpadded --
    3 copies, each reading and writing its rows -- and in the backward the same three the other
    way. Fp8Padding returns its input when every split is already aligned: a dropless router's
    splits are its routing's (not aligned, taken as padded), a drop-and-pad capacity's are
    ``capacity x EP`` rows each (padded unless a multiple of :data:`QUANT_ALIGN`'s rows). One op
    of both passes, as :func:`_quantize_op`'s casts; None where no grouped linear runs per
    local expert or nothing is padded."""
    if recipe.split_quantize_kernels is None:
        return None
    align = QUANT_ALIGN.get(recipe.name, 16)
    fc1 = [o for o in _narrow_linears(fwd) if o.name == "moe.up" and o.groups > 1
           and o.kernels > 1]
    padded = [o for o in fc1 if capacity_factor is None or (o.shape[1] // o.kernels) % align]
    if not padded:
        return None
    nbytes = sum(o.count * 2 * (4 * o.shape[1] * o.shape[2] + 2 * o.shape[1]) * act
                 for o in padded)
    return Op(name="fp8.expert_padding", op_class="norm_elementwise", kind="elementwise",
              phase="forward", count=1, flops=0.0, counted_flops=0.0, bytes=float(nbytes),
              parallel_work=max(1, padded[0].shape[1] * padded[0].shape[2]),
              kernels=6 * sum(o.count for o in padded), group="dense")


#: Ops a step adds beside its blocks' forward (the narrow recipes' casts, QLoRA's dequantize, the
#: autocast copies): each counts its own passes, a checkpointed recompute's included, so a
#: recompute built from a step's forward ops leaves them out.
STEP_LEVEL_OPS = frozenset({"fp8.quantize", "fp8.weight_cast", "fp8.recompute_cast",
                            "fp8.split_quantize", "fp8.relayout", "fp8.expert_padding",
                            "fp8.scale_launches", "lora.dequantize", "autocast.cast"})


def narrow_recompute_op(fwd: Sequence[Op], recipe, checkpointing: str,
                        policy: str, act: int = 2) -> Op | None:
    """The activation casts a checkpointed block runs again in backward under a narrow recipe:
    each narrow linear's input cast once more (the forward's; the gradients' casts are the
    backward's own, the weights' are counted by their uses in :func:`_weight_cast_op`).

    ``full``: the whole block re-runs, its casts with their amax passes
    (:func:`gpuplan.fp8.cast_bytes_per_element`). Selective under torchtitan's op policy
    (``policy`` ``op``): the block re-runs every op whose output is not on its save list
    (torchtitan@9dec370 torchtitan/parallelisms/parallelize_llama.py ``_save_list``: mm, SDPA,
    reduce-scatter, and "for low precision training ... the result of max(abs(tensor))"), so
    the amax is cached and the cast itself (scale, clamp, convert: read 16-bit, write the
    narrow element) re-runs, one launch per linear. Other selective policies recompute no
    linear's input: None; and None where nothing re-runs. A full recompute of a norm that
    writes its linear's narrow input (:func:`norm_fused_elements`) re-runs that fused kernel:
    those elements save the norm's wider write (``act`` - 1 bytes) and their cast, launch
    included."""
    fused, fused_launches = 0, 0
    if checkpointing == "full":
        per = cast_bytes_per_element(recipe)
        fused, fused_launches = norm_fused_elements(fwd, recipe)
    elif checkpointing == "selective" and policy == "op":
        per = 2.0 + (0.5 if recipe.dtype == "fp4" else 1.0)
    else:
        return None
    lin = _narrow_linears(fwd)
    inputs = _input_elements(lin)
    if inputs <= 0:
        return None
    return Op(name="fp8.recompute_cast", op_class="norm_elementwise", kind="elementwise",
              phase="recompute", count=1, flops=float(inputs), counted_flops=0.0,
              bytes=float(inputs * per - fused * ((act - 1) + per)),
              parallel_work=max(1, inputs),
              kernels=max(1, sum(o.count for o in lin) - fused_launches), group="dense")


def _weight_cast_op(fwd: Sequence[Op], recipe, spec: "StepSpec", architecture: str = "",
                    compute_capability: str = "") -> Op:
    """The weights' casts of one step: once per step where the recipe caches its narrow weights
    (TE: the first micro-batch), in every forward and again for the backward where it does not
    (torchao); each cast's bytes are the recipe's on ``architecture``
    (:func:`gpuplan.fp8.weight_cast_bytes_per_element`: the columnwise copy only where TE's
    quantizer keeps one, at its own element size and scales)."""
    lin = _narrow_linears(fwd)
    n = sum(o.weight_elements * o.count for o in lin)
    uses = 1 if recipe.caches_weight else 2 * spec.grad_accum
    per = weight_cast_bytes_per_element(recipe, architecture, compute_capability)
    return Op(name="fp8.weight_cast", op_class="norm_elementwise", kind="elementwise",
              phase="forward", count=uses, flops=float(n), counted_flops=0.0,
              bytes=float(n * per), parallel_work=max(1, n),
              kernels=max(1, sum(o.count for o in lin)), group="dense")


def _dequant_op(fwd: Sequence[Op], prec: PrecisionLayout, uses: int) -> Op:
    """A quantized frozen base (QLoRA) is dequantized to 16 bits before every matmul that reads it
    (bitsandbytes MatMul4Bit: dequantize_4bit, then a 16-bit matmul): read the packed weight,
    write the 16-bit copy, per use (forward, backward dX, recompute)."""
    n = sum(o.weight_elements * o.count for o in fwd if o.weight_elements and o.group not in
            ("embedding", "head"))
    launches = sum(o.kernels * o.count for o in fwd if o.weight_elements and o.group not in
                   ("embedding", "head"))
    return Op(name="lora.dequantize", op_class="norm_elementwise", kind="elementwise",
              phase="forward", count=1, flops=float(n * uses), counted_flops=0.0,
              bytes=float(n * (prec.weight + 2) * uses), parallel_work=max(1, n),
              kernels=max(1, launches * uses), group="dense")


def qkv_shares(arch: Architecture) -> tuple[float, float, float]:
    """The q, k and v projections' shares of a layer's QKV work (grouped-query attention: k and
    v are ``kv_heads / heads`` of q each)."""
    q, kv = arch.num_heads, arch.num_kv_heads or arch.num_heads
    return q / (q + 2 * kv), kv / (q + 2 * kv), kv / (q + 2 * kv)


def _train_step(arch: Architecture | None, n_params: int, tensors: tuple, device: Device,
                eff: Efficiency, prec: PrecisionLayout, spec: StepSpec,
                kw: dict) -> tuple[Phase, None, int, int]:
    """Forward, backward, recompute and autocast casts of ``grad_accum`` micro-batches, then one
    optimizer step."""
    shape = StepShape(batch=spec.batch, q_len=spec.seq, kv_len=spec.seq, train=True)
    if arch is None:
        fwd = _count_only_ops(n_params, shape, prec, device.parallel_slots)
    else:
        fwd = _forward(arch, shape, kw, prec, spec, device)
        n_params = n_params or _params_estimate(arch, fwd)
        if spec.bf16_edge_layers and NARROW_RECIPES.get(prec.name) is not None:
            fwd = keep_edges_wide(fwd, arch.num_layers, spec.bf16_edge_layers)
        if spec.engine == "megatron":
            fwd = _megatron_wide_router(fwd, NARROW_RECIPES.get(prec.name))
    lora = spec.lora_rank is not None
    adapted = adapted_linears(arch, tensors, spec.lora_targets) if lora else None
    micro = list(fwd)
    micro += backward_ops(fwd, act_bytes=prec.act, grad_bytes=prec.grad, weight_grads=not lora)
    hooked = _main_grad_add_op(fwd, arch) if spec.engine == "megatron" and arch else None
    micro += [hooked] if hooked is not None and not lora else []
    micro += recompute_ops(fwd, spec.checkpointing, spec.attention,
                           policy=get_engine(spec.engine).selective,
                           qkv_shares=qkv_shares(arch),
                           modules=spec.recompute_modules) if arch is not None else [
        replace(o, phase="recompute") for o in fwd if spec.checkpointing == "full"]
    if adapted:
        T = spec.batch * spec.seq
        # a routed expert sees its share of the tokens: T x top-k / experts on average
        per_expert = max(1, math.ceil(T * arch.experts_per_token / max(1, arch.num_experts)))
        micro += lora_adapter_ops(
            [(t.in_features, t.out_features, t.count,
              per_expert if t.component == "experts" else T) for t in adapted],
            rank=spec.lora_rank, act_bytes=prec.act,
            fused=spec.runtime != "eager", dropout=spec.lora_dropout > 0,
            recompute=spec.checkpointing == "full")
    if prec.autocast:
        mm = [o for o in fwd if o.weight_elements]
        micro.append(Op(name="autocast.cast", op_class="norm_elementwise",
                        kind="elementwise", phase="forward", count=1, flops=0.0,
                        counted_flops=0.0, bytes=6.0 * n_params,
                        parallel_work=max(1, n_params),
                        kernels=sum(o.count * o.kernels for o in mm) or 1, group="head"))
    if lora and prec.weight < 1 and arch is not None and device.kind == "gpu":
        micro.append(_dequant_op(fwd, prec, 3 if spec.checkpointing == "full" else 2))
    narrow = NARROW_RECIPES.get(prec.name)
    weight_casts: list[Op] = []
    if narrow is not None and arch is not None:
        if spec.fp8_attention:
            micro = [replace(o, narrow=True) if o.kind == "attention" else o for o in micro]
        micro += _cast_ops(fwd, narrow, prec.act, spec, device.architecture,
                           device.compute_capability)
        again = narrow_recompute_op(fwd, narrow, spec.checkpointing,
                                    get_engine(spec.engine).selective, prec.act)
        if again is not None:
            micro.append(again)
        if not spec.narrow_weights_gathered:
            weight_casts.append(_weight_cast_op(fwd, narrow, spec, device.architecture,
                                                device.compute_capability))
    ops = [replace(o, count=o.count * spec.grad_accum) for o in micro] + weight_casts
    if adapted:
        trainable = spec.trainable or sum(spec.lora_rank * (t.in_features + t.out_features)
                                          * t.count for t in adapted)
        opt_tensors = None
        n_tensors = 2 * sum(t.count for t in adapted)  # A and B of each adapted linear
    elif lora:
        trainable = spec.trainable or (_lora_params(arch, spec.lora_rank) if arch is not None
                                       else max(1, n_params // 1000))
        opt_tensors = None
        # PEFT's A and B of each adapted projection (q and v by default)
        n_tensors = 4 * (arch.num_layers if arch is not None else 1)
    else:
        trainable = n_params
        opt_tensors = tensors or None
        n_tensors = sum(t.count for t in tensors) if tensors else _tensor_count(fwd)
    opt_ops, reads = _optimizer_ops(spec, prec, device, eff, trainable, opt_tensors, n_tensors)
    # fp16 loss scaling reads its overflow flag on the host before the step (torch GradScaler
    # _maybe_opt_step: found_inf.item(); apex amp and Megatron likewise); so does a clip that
    # reads the norm (.item())
    sync = device.kind == "gpu" and (prec.dtype == "fp16" or reads > 0)
    phase = _phase("train", ops + opt_ops, device, eff, prec.dtype, batch=spec.batch,
                   q_len=spec.seq, kv_len=spec.seq, micro_steps=spec.grad_accum,
                   runtime=spec.runtime, sync=sync, engine=spec.engine,
                   micro_sync=device.kind == "gpu" and spec.engine in BLOCKING_INPUT_COPY,
                   loss_read=device.kind == "gpu" and spec.engine in HOST_READ_AFTER_BACKWARD)
    return _with_host_reads(phase, reads, opt_tensors or ()), None, n_params, trainable


def _optimizer_ops(spec: StepSpec, prec: PrecisionLayout, device: Device, eff: Efficiency,
                   trainable: int, opt_tensors: tuple | None,
                   n_tensors: int) -> tuple[list[Op], int]:
    """The optimizer stretch's ops -- the step, fp16 loss scaling's passes on a GPU, the clip
    when the job clips -- and the clip's host reads (0 without one)."""
    ops = [_optimizer_op(spec, prec, device, eff, trainable, opt_tensors, n_tensors)]
    if prec.dtype == "fp16" and device.kind == "gpu":
        ops.append(_loss_scaling_op(spec, prec, trainable, n_tensors))
    clip = _grad_clip_op(spec, prec, device, eff, trainable, n_tensors)
    if clip is None:
        return ops, 0
    return ops + [clip[0]], clip[1].host_reads


def _with_host_reads(phase: Phase, reads: int, tensors: Sequence) -> Phase:
    """``phase`` with a host read per trainable tensor in its optimizer stretch when the clip
    makes more than one (:attr:`Phase.tensor_shares`); as it is otherwise."""
    if reads <= 1 or phase.overheads is None:
        return phase
    return replace(phase, tensor_shares=_tensor_shares(tensors, reads),
                   host_sync_s=constant("host_sync_s"))


def _tensor_shares(tensors: Sequence, n: int) -> tuple[tuple[float, int], ...]:
    """Each trainable tensor's share of the elements, as (share, tensors with it) pairs -- one
    per entry of the tensor list, whose ``count`` tensors are alike -- or ``n`` equal shares when
    the list is not known (LoRA's adapters, alike across layers)."""
    total = float(sum(t.numel * t.count for t in tensors))
    if sum(t.count for t in tensors) != n or not total:
        return ((1.0 / n, n),)
    return tuple((t.numel / total, t.count) for t in tensors)


def _grad_clip_op(spec: StepSpec, prec: PrecisionLayout, device: Device, eff: Efficiency,
                  trainable: int, n_tensors: int):
    """The gradient clip (``max_grad_norm``) over this GPU's share of the gradients, as its
    implementation runs it (:func:`~.efficiency.grad_clip_cost`), and that cost; None without
    clipping. An fp32 master's gradients are clipped (apex amp.master_params, Megatron's main
    grads) when there is one."""
    if spec.max_grad_norm is None:
        return None
    impl = spec.grad_clip_impl or ("foreach" if device.kind == "gpu" else "per-tensor")
    n = max(1, trainable // _optimizer_shard(spec))
    cost = grad_clip_cost(impl, tensors=n_tensors, elements=n)
    grad = max(prec.master, prec.grad)
    host = _optimizer_host_s(spec, device, eff, python_loop=cost.python_loop)
    op = Op(name="optimizer.clip_grad_norm", op_class="optimizer", kind="elementwise",
            phase="optimizer", count=1, flops=2.0 * n, counted_flops=0.0,
            bytes=float(cost.accesses * grad * n), parallel_work=n, kernels=cost.kernels,
            group="optimizer", host_s=host)
    return op, cost


def optimizer_stretch_s(spec: StepSpec, prec: PrecisionLayout, device: Device, eff: Efficiency,
                        *, elements: int, tensors: int) -> float:
    """One rank's optimizer stretch when it updates ``elements`` in ``tensors`` tensors (its
    shard, already divided): the optimizer as ``spec`` says it runs, fp16 loss scaling's passes
    and the clip, paced as a training step paces them (the slower of issue and kernels; a host
    read per tensor runs it tensor by tensor). What a parallel layout's step adds after its
    micro-batches (:func:`~.parallel.layout_time`)."""
    one = replace(spec, zero=0, gpus=1, grad_accum=1)
    tensors, elements = max(1, tensors), max(1, elements)
    ops, reads = _optimizer_ops(one, prec, device, eff, elements, None, tensors)
    phase = _phase("train", ops, device, eff, prec.dtype, batch=1, q_len=1, kv_len=1,
                   runtime=spec.runtime, engine=spec.engine)
    if phase.overheads is None:
        return phase.time_s
    phase = _with_host_reads(phase, reads, ())
    return phase._optimizer_stretch_s(phase.ops)


def _optimizer_host_s(spec: StepSpec, device: Device, eff: Efficiency, *,
                      python_loop: bool) -> float | None:
    """Host time per kernel of an optimizer-stretch op on a GPU: one torch call each from a Python
    loop (a measured launch when the bench has one), a multi-tensor launch from C++ otherwise;
    None under CUDA graphs or on a CPU (the phase's own cost)."""
    if device.kind != "gpu" or spec.runtime == "cudagraphs":
        return None
    if not python_loop:
        return constant("eager_host_bwd_s")  # a multi-tensor launch from C++
    measured = str(eff.basis.get("launch_s", "")).startswith("measured")
    return eff.launch_s if measured else constant("eager_host_op_s")


def _optimizer_shard(spec: StepSpec) -> int:
    """GPUs that share one optimizer step: ZeRO >= 1 gives each its shard to update."""
    return spec.gpus if spec.zero >= 1 else 1


def _loss_scaling_op(spec: StepSpec, prec: PrecisionLayout, trainable: int,
                     n_tensors: int) -> Op:
    """fp16 loss scaling's passes around the optimizer step, over this GPU's share of the
    trainable elements: GradScaler's in-place unscale of fp32 gradients (autocast), or the unscale
    into fp32 master gradients and the master-to-fp16 copy of an fp16-weight recipe
    (:data:`~.efficiency.CONSTANTS` ``gradscaler_unscale_accesses``,
    ``fp16_master_extra_accesses``). Multi-tensor launches, one per group and pass."""
    n = max(1, trainable // _optimizer_shard(spec))
    if prec.master:
        nbytes, passes = constant("fp16_master_extra_accesses") * float(prec.master) * n, 2
    else:
        nbytes, passes = constant("gradscaler_unscale_accesses") * prec.grad * n, 1
    groups = multi_tensor_launches(n_tensors, n)
    return Op(name="optimizer.loss_scaling", op_class="optimizer", kind="elementwise",
              phase="optimizer", count=1, flops=float(n), counted_flops=0.0, bytes=float(nbytes),
              parallel_work=n, kernels=passes * groups, group="optimizer",
              host_s=constant("eager_host_bwd_s") if spec.runtime != "cudagraphs" else None)


def param_tensor_count(arch: Architecture) -> int:
    """The model's parameter tensors: its tensor list's, or when the list is unknown the estimate
    a training step makes (:func:`_tensor_count` of one forward)."""
    if arch.tensors:
        return sum(t.count for t in arch.tensors)
    shape = StepShape(batch=1, q_len=1, kv_len=1, train=True)
    return _tensor_count(build_forward_ops(arch, shape, act_bytes=2, weight_bytes=2))


def _tensor_count(fwd: Sequence[Op]) -> int:
    """Parameter tensors when the tensor list is unknown: one weight per matmul launch and per
    norm (biases unknown)."""
    n = sum(o.kernels * o.count for o in fwd if o.weight_elements)
    n += sum(o.count for o in fwd if o.name.endswith("norm"))
    return max(1, n)


def _optimizer_op(spec: StepSpec, prec: PrecisionLayout, device: Device, eff: Efficiency,
                  trainable: int, opt_tensors: tuple | None, n_tensors: int) -> Op:
    """One optimizer step over this GPU's share of ``trainable`` elements in ``n_tensors`` tensors
    as its implementation runs it (:func:`~.efficiency.optimizer_cost`): a Python loop's kernels
    are issued one torch call each, multi-tensor passes from C++."""
    opt = get_optimizer(spec.optimizer)
    states, _ = optimizer_state_bytes(opt, opt_tensors, trainable, prec.state)
    shard = _optimizer_shard(spec)
    n = max(1, trainable // shard)
    impl = spec.optimizer_impl or ("foreach" if device.kind == "gpu" else "for-loop")
    cost = optimizer_cost(opt.kind, opt.states, impl, tensors=n_tensors, elements=n,
                          name=opt.name)
    host = _optimizer_host_s(spec, device, eff, python_loop=cost.python_loop)
    return optimizer_op(n, state_bytes_total=states / shard, grad_bytes=prec.grad,
                        weight_bytes=prec.weight_store, master_bytes=prec.master,
                        weight_reads=1.0 if prec.master_remainder else 0.0,
                        param_accesses=cost.param_accesses, grad_reads=cost.grad_reads,
                        state_accesses=cost.state_accesses,
                        scratch_bytes=4.0 * cost.scratch_accesses, kernels=cost.kernels,
                        host_s=host)
