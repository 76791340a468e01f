"""The speed estimate of a job on a GPU: one step's ops timed on the device, throughput, MFU/HFU,
prefill and decode, transfers, data-parallel scaling, time and cost to train, and (``cpu=``) the
same job on this machine's CPU with a verdict."""

from __future__ import annotations

import math
from dataclasses import replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, Mapping, Sequence

from .._record import record
from ..engines.profiles import attention_16bit_of, engine_notes, get_engine, resolve_engine
from ..errors import InputError, UnsupportedError, opt, shown
from ..formats import WEIGHT_FORMATS, get_optimizer, optimizer_state_bytes
from ..fp8 import NARROW_RECIPES, gathered_bytes_per_element, narrow_elements
from ..hardware import GPU
from ..hardware.topology import Topology, parse_inter_node, topology_for
from ..job import Attention, Checkpointing, Job, check_layout
from ..models._types import FUSED_ATTENTION, Architecture, Model, attention_for
from .device import (Device, Efficiency, at_power_limit, default_efficiency, device_from_gpu,
                     measured_apply, power_clock_fraction)
from .efficiency import (
    BLOCK_SCALED_GEMM, CONSTANTS, DECODE_ATTENTION_KERNELS, FA2_SM8X, TRAIN_ATTENTION_KERNELS,
    constant,
    quant_kernel, speed_range, speed_residuals,
)
from ._args import speed_args
from .flops import AttentionPrecision, form_notes, run_form
from .measured import RunUse, resolve_measured
from .parallel import (
    Layout, LayoutTime, ServeTime, engine_layout_options, fsdp2_reduce_width, job_micro_options,
    layout_time, micro_cost, model_flops_per_token, nccl_sm_share, serve_time, sharded_copy_bytes,
    shard_arch, zero3_gathers,
)
from .step import (
    KV_BYTES, Phase, PrecisionLayout, StepMode, StepSpec, arch_and_name, attention_plan, build_steps,
    infer_precision, input_bytes_per_sample, lora_note, one_mode, optimizer_stretch_s,
    param_tensor_count, resolve_seq, train_precision,
)
from .time import (
    ScalingTable, TrainingTime, TransferEstimate, data_parallel_scaling, estimate_transfer,
    link_bandwidth, time_to_train,
)

if TYPE_CHECKING:  # pragma: no cover
    from ..hardware.cpu import CPU
    from .cpu import CpuComparison

#: A training MFU above this gets a caveat: no published measured run in
#: benchmarks/published/runs.json reaches more (llm-foundry MPT-7B on A100: 64.2%).
HIGH_MFU = 0.60

__all__ = [
    "Phase", "SpeedEstimate", "SpeedRow", "SpeedSection", "estimate_speed",
    "estimate_speed_for_job", "speed_section",
    "SECTION_FIELDS", "KV_BYTES", "input_bytes_per_sample",
]


@record
class SpeedEstimate:
    """How fast a job runs on a GPU, and why. Per-GPU figures unless named ``..._total``."""

    model: str
    gpu: str
    mode: StepMode
    precision: str
    dtype: str
    """The dtype the matmuls run in (its dense peak is the MFU denominator)."""
    batch: int
    """Sequences (samples) per GPU per step."""
    seq: int
    gpus: int
    checkpointing: Checkpointing
    """Activation checkpointing (``recompute`` in the JSON, as before, and ``checkpointing``)."""
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
    layout: LayoutTime | ServeTime | None = None
    """The parallel layout's time (TP/PP/CP/EP on a topology), when the job has one: then the
    headline figures are the layout's, ``step`` is one TP rank's ops over all its layers."""
    efficiency: Efficiency
    ridge_point: float
    """Peak FLOP/s / memory bandwidth of the compute dtype: intensity above it is compute-bound."""
    achievable_ridge_point: float
    """The same with the achievable fractions."""
    notes: tuple[str, ...] = ()
    runtime_auto: bool = False
    """The runtime was ``auto``: the engine's for the mode (:mod:`gpuplan.engines.profiles`)."""
    engine: str = "auto"
    """The job's engine as given (``auto`` or a name)."""
    engine_notes: tuple[str, ...] = ()
    """What the engine is and runs (auto said as what it stands for)."""
    attention_precision: AttentionPrecision | None = None
    """Inference: whether the attention cores ran in FP8 and over which KV cache (the engine's
    kernel, :func:`~.flops.inference_attention`); None in training."""
    measured_run: RunUse | None = None
    """The stored bench run read for this GPU (which run, its date, its quality, and whether it
    was used: a noisy one is not, unless asked); None when no stored run measured this GPU."""
    fsdp_copy_s: float = 0.0
    """A data-parallel step without a layout: FSDP2's copy-out of the gathered weights and
    chunk-cat of the gradients on the compute stream, where the engine's are timed
    (:func:`~.parallel.fsdp2_copy_bytes`); under a layout :attr:`LayoutTime.fsdp_copy_s`."""
    paged_s: float = 0.0
    """A step's migration of a paged optimizer's evicted states back to the GPU
    (:func:`paged_migration_s`); 0 where none was said to overflow."""
    power_limit_w: float | None = None
    """The job's power limit in watts (None: the TDP)."""
    clock_fraction: float = 1.0
    """The share of the TDP tensor clock sustained at ``power_limit_w``
    (:func:`~.device.power_clock_fraction`): ``step.peak_flops`` is the capped peak, MFU and HFU
    stay against the rated one (:attr:`rated_peak_flops`), as the catalog and published MFUs
    state it."""
    power_note: str = ""
    """How the clock at ``power_limit_w`` was read, or why it was not (empty without a limit, or
    at the TDP); also one of :attr:`notes`, and a caveat of ``fit``'s speed row."""

    @property
    def rated_peak_flops(self) -> float:
        """The compute dtype's dense peak at the TDP: the MFU and HFU denominator."""
        return self.step.peak_flops / self.clock_fraction

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
        lt = self.layout
        if isinstance(lt, LayoutTime):
            return lt.tp_comm_s + lt.cp_comm_s + lt.ep_comm_s + lt.pp_comm_s + lt.dp_exposed_s
        if isinstance(lt, ServeTime):
            return lt.decode_comm_s
        if self.scaling is None:
            return 0.0
        return next(r.exposed_comm_s for r in self.scaling.rows if r.gpus == self.gpus)

    @property
    def step_time_s(self) -> float:
        """One step: its ops, launches, the exposed input copy and the exposed all-reduce (under a
        layout: the busiest stage's step with its bubble and exposed collectives)."""
        if isinstance(self.layout, LayoutTime):
            return self.layout.step_s + self.transfer.exposed_s
        if isinstance(self.layout, ServeTime):
            return self.layout.decode_s + self.transfer.exposed_s
        return (self.step.time_s + self.transfer.exposed_s + self.comm_exposed_s
                + self.fsdp_copy_s + self.paged_s)

    @property
    def _tokens_per_step(self) -> float:
        """Tokens of one step over all GPUs."""
        if isinstance(self.layout, LayoutTime):
            return self.layout.tokens_per_step
        if isinstance(self.layout, ServeTime):
            return self.layout.layout.dp * self.batch
        return self.gpus * self.step.tokens

    @property
    def tokens_per_s(self) -> float:
        """Tokens per second over all GPUs (decode: tokens generated)."""
        return self._tokens_per_step / self.step_time_s

    @property
    def prefill_time_s(self) -> float | None:
        """Decoder inference: the prefill of one batch (on its TP/PP layout when it has one),
        without the input copy."""
        if self.prefill is None:
            return None
        return self.layout.prefill_s if isinstance(self.layout, ServeTime) else self.prefill.time_s

    @property
    def ttft_s(self) -> float | None:
        """Decoder inference: TTFT, the time to first token -- the prefill of one batch and its
        exposed input copy (the first token comes from the prefill's logits); the same for every
        sequence of the batch. None for training and for an encoder."""
        pre = self.prefill_time_s
        if pre is None:
            return None
        return (pre + (self.prefill_transfer.exposed_s if self.prefill_transfer is not None
                       else 0.0) + self.request_host_s)

    @property
    def request_host_s(self) -> float:
        """Decoder inference on a GPU under a serving engine: each request's time outside the
        steps -- its front end, its entry to the scheduler and its first token's return
        (:attr:`~gpuplan.engines.profiles.ServingHost.request_s`), part of :attr:`ttft_s`."""
        host = get_engine(resolve_engine(self.engine)).serving_host
        if host is None or self.prefill is None or self.prefill.overheads is None:
            return 0.0
        return host.request_s

    @property
    def tpot_s(self) -> float | None:
        """Decoder inference: TPOT, the time per output token after the first -- one decode step
        (it makes one token for each sequence of the batch). None for training and an encoder."""
        return None if self.prefill is None else self.step_time_s

    @property
    def request_time_s(self) -> float | None:
        """Decoder inference: prefill + ``new_tokens`` decode steps for one batch."""
        ttft = self.ttft_s
        if ttft is None or self.new_tokens is None:
            return None
        return ttft + self.new_tokens * self.step_time_s

    @property
    def samples_per_s(self) -> float:
        """Sequences per second over all GPUs (decoder inference: whole requests completed)."""
        replicas = self.gpus if self.layout is None else self.layout.layout.dp
        rt = self.request_time_s
        if rt is not None:
            return replicas * self.batch / rt
        if isinstance(self.layout, LayoutTime):
            return self.layout.tokens_per_step / self.seq / self.step_time_s
        return replicas * self.batch * self.step.micro_steps / self.step_time_s

    @property
    def mfu(self) -> float:
        if isinstance(self.layout, LayoutTime):
            return self.layout.model_flops_per_token * self.tokens_per_s / (
                self.gpus * self.rated_peak_flops)
        return self.step.model_flops / (self.step_time_s * self.rated_peak_flops * self._stages)

    @property
    def tokens_per_s_range(self) -> tuple[float, float]:
        """Where the measured tokens/s should fall: the estimate over the p90 .. p10 of
        predicted / measured on the calibrate split of the published runs."""
        return speed_range(self.tokens_per_s)

    @property
    def caveats(self) -> tuple[str, ...]:
        """What to distrust in this estimate (a high MFU, a dispatch-bound step)."""
        out = []
        if self.mode == "train" and self.mfu > HIGH_MFU:
            out.append(f"MFU {100 * self.mfu:.0f}% is at the top of what published measured "
                       "runs reach (at most 64%: llm-foundry MPT-7B on A100; Megatron-Core on "
                       "H100 41-49%); treat it as an upper bound")
        if self.step.host_bound:
            out.append(f"dispatch-bound: the host issues the {self.step.kernels} kernels "
                       f"({self.step.overheads.runtime}) slower than the GPU runs them; "
                       "torch.compile or CUDA graphs remove most of it")
        return tuple(out)

    @property
    def hfu(self) -> float:
        if isinstance(self.layout, LayoutTime):
            return self.layout.hardware_flops_per_gpu / (self.step_time_s * self.rated_peak_flops)
        return self.step.hardware_flops / (self.step_time_s * self.rated_peak_flops * self._stages)

    @property
    def _stages(self) -> int:
        """Serving under PP: a TP rank's ops over all layers run on PP GPUs in turn."""
        return self.layout.layout.pp if isinstance(self.layout, ServeTime) else 1

    @property
    def bound(self) -> Literal["compute", "memory"]:
        return self.step.bound

    def to_dict(self, *, ops: bool = True) -> dict:
        d: dict[str, Any] = {
            "model": self.model, "gpu": self.gpu, "mode": self.mode,
            "precision": self.precision, "dtype": self.dtype, "batch": self.batch,
            "seq": self.seq, "gpus": self.gpus, "recompute": self.checkpointing,
            "checkpointing": self.checkpointing,
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
            "comm_exposed_s": self.comm_exposed_s, "fsdp_copy_s": self.fsdp_copy_s,
            "paged_s": self.paged_s,
            "tokens_per_s": self.tokens_per_s, "samples_per_s": self.samples_per_s,
            "mfu": self.mfu, "hfu": self.hfu, "bound": self.bound,
            "peak_flops": self.step.peak_flops, "rated_peak_flops": self.rated_peak_flops,
            "power_limit_w": self.power_limit_w, "clock_fraction": self.clock_fraction,
            "ridge_point": self.ridge_point,
            "achievable_ridge_point": self.achievable_ridge_point,
            "step": self.step.to_dict(ops=ops),
            "prefill": None if self.prefill is None else self.prefill.to_dict(ops=ops),
            "new_tokens": self.new_tokens, "request_time_s": self.request_time_s,
            "ttft_s": self.ttft_s, "tpot_s": self.tpot_s,
            "request_host_s": self.request_host_s,
            "serve_host_exposed_s": self.step.serve_host_exposed_s,
            "transfer": self.transfer.to_dict(),
            "prefill_transfer": None if self.prefill_transfer is None
            else self.prefill_transfer.to_dict(),
            "scaling": None if self.scaling is None else self.scaling.to_dict(),
            "training_time": None if self.training_time is None else self.training_time.to_dict(),
            "cpu": None if self.cpu is None else self.cpu.to_dict(),
            "efficiency": self.efficiency.to_dict(), "notes": list(self.notes),
            "runtime": self.step.overheads.runtime if self.step.overheads else None,
            "host_bound": self.step.host_bound, "runtime_auto": self.runtime_auto,
            "engine": {"name": self.engine, "resolved": resolve_engine(self.engine),
                       "notes": list(self.engine_notes)},
            "tokens_per_s_range": list(self.tokens_per_s_range),
            "range_basis": dict(speed_residuals()), "caveats": list(self.caveats),
            "measured_run": None if self.measured_run is None else self.measured_run.to_dict(),
            "attention_precision": None if self.attention_precision is None
            else self.attention_precision.to_dict(),
        }
        if self.layout is not None:
            d["layout"] = self.layout.to_dict()
        return d


# --------------------------------------------------------------------------------------------------
# The estimate


def paged_migration_s(paged_host_bytes: int, device: Device, eff: Efficiency) -> float:
    """Seconds a step spends migrating a bitsandbytes paged optimizer's evicted states back to
    the GPU: ``paged_host_bytes`` at the host link's pinned rate, exposed. bitsandbytes
    (bitsandbytes-foundation/bitsandbytes@06029dd6 bitsandbytes/optim/optimizer.py
    ``Optimizer8bit.step``) prefetches each parameter's states before its update and calls
    ``torch.cuda.synchronize()`` after it, and its ``cprefetch`` (csrc/pythonInterface.cpp) is
    ``cudaMemPrefetchAsync(ptr, bytes, device, 0)`` on the legacy default stream, the one
    PyTorch's kernels run on: nothing computes while the states come in. Every state is touched
    once a step in the same order, so a least-recently-used eviction sends the overflow out and
    back each step; the evictions (device to host) are taken to ride the other direction of the
    full-duplex link beside the fetches (an assumption: were they serialized, twice this)."""
    if paged_host_bytes <= 0:
        return 0.0
    return paged_host_bytes / (device.host_link_bandwidth * eff.pcie_pinned)


def _dp_scaling(arch, step, transfer, trainable, prec, job, device, eff, gpu, notes,
                paged_host_bytes=0, *, n_params, gathers, link, overlap_comm, gather_overlap):
    """A training step's data-parallel scaling, FSDP2's copies on the compute stream
    (:func:`_fsdp2_copy_s`) and a paged optimizer's migration (:func:`paged_migration_s`), for
    :func:`estimate_speed`'s path without a layout; both are part of every row's step."""
    paged_s = paged_migration_s(paged_host_bytes, device, eff)
    if paged_s:
        notes.append(f"{paged_host_bytes / 2**30:.1f} GiB of the paged optimizer's states in "
                     f"host memory: {paged_s:.2f} s a step to migrate them back over "
                     f"{device.host_link} (the evictions beside them)")
    narrow = narrow_gather_bytes(arch, job, max(n_params, trainable),
                                 notes if job.zero else None)
    copy_s = _fsdp2_copy_s(job, prec, device, eff, max(n_params, trainable), gathers, narrow,
                           step.micro_steps, grad_elements=trainable if job.lora_rank else None)
    return _scaling(step, transfer, trainable, prec, job, device, eff, link=link,
                    overlap_comm=overlap_comm, n_params=n_params, gpu=gpu, gathers=gathers,
                    gather_overlap=gather_overlap, narrow=narrow,
                    copy_s=copy_s + paged_s), copy_s, paged_s


def _checks_layout_alone(job: Job, mode: str) -> bool:
    """Whether a job off a topology still needs :func:`check_layout` (as fit runs it): MTP on a
    layout's last stage, a router graph (training), or an MoE option on a model without
    experts (a capacity factor, a flex dispatcher)."""
    return bool((job.mtp_layers or job.cuda_graph_scope) and mode != "infer"
                or job.moe_capacity_factor is not None or job.moe_dispatcher != "alltoall")


def estimate_speed(
    model: Model | Architecture, gpu: GPU, job: Job, *, new_tokens: int = 128,
    link: str | float | None = None, overlap_comm: bool = True, pinned: bool = True,
    overlap_transfer: bool | None = None, input_bytes: int | None = None,
    train_tokens: float | None = None, train_samples: float | None = None, epochs: float = 1.0,
    price_per_gpu_hour: float | None = None, trainable_params: int | None = None,
    efficiency: Efficiency | None = None, measured: Any | None | Literal["auto"] = "auto",
    tf32: bool = False, cpu: CPU | None = None, topology: Topology | None = None,
    tp_overlap: bool = False, gather_overlap: bool = True, optimizer_impl: str | None = None,
    grad_clip_impl: str | None = None, use_noisy_bench: bool = False,
    host_sync_per_step: bool = False, p2p_overlap: bool | None = None, paged_host_bytes: int = 0,
    decode_attention: str | None = None, sdpa_repeat_kv: bool | None = None,
    pp_reduce_after_backward: bool | None = None,
    train_attention: str | None = None) -> SpeedEstimate:
    """Estimate one step of ``job`` with ``model`` on ``gpu`` (and ``job.gpus`` data-parallel GPUs).

    The job says what runs (validated once, by :class:`~gpuplan.job.Job`): its one mode (train or
    infer; ``both`` is two estimates, :func:`estimate_speed_for_job`), ``batch`` per GPU (a
    micro-batch; ``grad_accum`` of them make a step), ``seq``, the training ``precision`` recipe or
    the inference ``infer_precision`` weight format, ``optimizer``, ``gpus`` and the ``zero``
    stage (3 moves 1.5x the gradient bytes; >= 1 shards the optimizer step), ``checkpointing``,
    ``attention`` (sdpa or eager), LoRA (``lora_rank``: the base is frozen, only the adapters are
    all-reduced and updated; ``lora_base``: the frozen base's format), and for inference
    ``context`` (decode attends to it; default seq + new_tokens / 2) and ``kv_dtype``.

    The keywords are what only speed needs: ``new_tokens`` generated per sequence, the gradient
    ``link`` and ``overlap_comm``, ``pinned``/``overlap_transfer``/``input_bytes`` of the input
    copy, the amount of training (``train_tokens`` or ``train_samples``, ``epochs``,
    ``price_per_gpu_hour``), ``trainable_params`` (the exact LoRA adapter count, when known: the
    memory accounting has it), ``efficiency`` (overrides the default achievable fractions),
    ``measured`` (a stored bench run; ``"auto"``: this machine's latest, applied only when it
    measured this very GPU; None: defaults only; ``use_noisy_bench``: its noisy measurements too,
    which are otherwise left out, :attr:`SpeedEstimate.measured_run` says), ``tf32``, and ``cpu``
    (also the job on that CPU, :func:`estimate_cpu_speed`, and whether it needs a GPU), and
    ``optimizer_impl`` (``foreach``, ``fused`` or ``for-loop``: how the optimizer step runs; None:
    ``fused`` when ``job.fused_optimizer``, else torch's default, foreach on a GPU), and
    ``grad_clip_impl`` (how a ``job.max_grad_norm`` clip runs, :data:`~.efficiency.GRAD_CLIP_IMPLS`;
    None: torch's current clip_grad_norm_).

    A job with a parallel layout (``tp``/``pp``/``cp``/``ep``/``sequence_parallel``), or any job
    given a ``topology``, is timed by :mod:`.parallel` on the topology (default: the job's
    ``gpus_per_node`` on the SKU's NVLink, nodes on ``inter_node`` or 400 Gb/s per GPU, stated in
    the notes); ``tp_overlap`` hides the TP collectives under the GEMMs (Megatron-Core
    ``--tp-comm-overlap``). A data-parallel job without a topology keeps the ``link`` model.
    ``gather_overlap`` False: ZeRO-3's all-gathers waited for, ZeRO-1/2's run after the step
    (:attr:`.Layout.gather_overlap`). ``p2p_overlap`` (interleaved sends),
    ``sdpa_repeat_kv`` (:func:`~.parallel.sdpa_kv_heads`, :func:`~.step.expands_kv`) and
    ``pp_reduce_after_backward`` (:func:`~.parallel.pipeline_reduce_exposed_s`): True or False as
    the job ran; None: the engine profile's (p2p_overlap, sdpa_repeat_kv, pp_grad_reduce).
    ``host_sync_per_step``: inference waits around every forward (:attr:`Phase.sync_per_step`).
    ``decode_attention``, ``train_attention``: kernels not the engine's (``ft-mmha``, ``fa1``).
    ``paged_host_bytes``: a paged optimizer's states over the GPU (:func:`paged_migration_s`).
    """
    speed_args(model, gpu, job, dict(locals()))  # the arguments, by name, before any work
    (mode, arch, name, n_params, tensors, job, seq, measured, device, eff, used, prec, gathers,
     notes) = _prepare(model, gpu, job, efficiency, measured, use_noisy_bench, tf32,
                       trainable_params, train_attention)
    if _checks_layout_alone(job, mode):
        check_layout(arch, job, seq)
    if _on_topology(job, mode, topology):
        est = _layout_estimate(arch, name, n_params, gpu, device, eff, prec, job, mode=mode,
                               seq=seq, new_tokens=new_tokens, topology=topology,
                               tp_overlap=tp_overlap, per_sample=input_bytes, pinned=pinned,
                               notes=notes, impls=(optimizer_impl, grad_clip_impl),
                               gathers=gathers, gather_overlap=gather_overlap,
                               synced=host_sync_per_step, p2p_overlap=p2p_overlap,
                               repeat_kv=sdpa_repeat_kv, after=pp_reduce_after_backward)
        return replace(est, measured_run=used, training_time=_training_time(
            est, train_tokens, train_samples, epochs, price_per_gpu_hour))
    spec = StepSpec.of(job, mode=mode, seq=seq, new_tokens=new_tokens, trainable=trainable_params,
                       optimizer_impl=optimizer_impl, grad_clip_impl=grad_clip_impl)
    spec = _with_decode_attention(replace(spec, sdpa_repeat_kv=sdpa_repeat_kv), decode_attention,
                                  device, notes)
    step, prefill, n_params, trainable, attn = _built(arch, n_params, tensors, device, eff, prec,
                                                      spec, notes)
    step, prefill = _synced(step, prefill, host_sync_per_step and mode == "infer", notes)
    _replica_note(job, mode, notes)
    per_sample = input_bytes_per_sample(arch, seq, mode) if input_bytes is None else input_bytes
    transfer, prefill_transfer = _transfers(step, prefill, per_sample, job.batch, device, eff,
                                            pinned=pinned, overlap=overlap_transfer)
    scaling, copy_s, paged_s = (None, 0.0, 0.0) if mode != "train" else _dp_scaling(
        arch, step, transfer, trainable, prec, job, device, eff, gpu, notes, paged_host_bytes,
        n_params=n_params, gathers=gathers, link=link, overlap_comm=overlap_comm,
        gather_overlap=gather_overlap)
    est = SpeedEstimate(
        model=name, gpu=gpu.name, mode=mode, precision=prec.name, dtype=prec.dtype,
        batch=job.batch, seq=seq, gpus=job.gpus, checkpointing=job.checkpointing,
        attention=job.attention, grad_accum=step.micro_steps, zero=job.zero,
        trainable_params=trainable, step=step, prefill=prefill,
        new_tokens=new_tokens if prefill is not None else None, transfer=transfer,
        prefill_transfer=prefill_transfer, scaling=scaling, efficiency=eff,
        **_ridge_points(device, eff, prec.dtype), notes=tuple(notes),
        runtime_auto=job.runtime == "auto", measured_run=used, fsdp_copy_s=copy_s, paged_s=paged_s,
        **_engine_fields(job, mode, attn), **_power_fields(gpu, job))
    est = replace(est, training_time=_training_time(est, train_tokens, train_samples, epochs,
                                                    price_per_gpu_hour))
    if cpu is not None:
        est = replace(est, cpu=_compare_cpu(est, _on_cpu(model, cpu, job, new_tokens,
                                                         trainable_params, measured)))
    return est


def _replica_note(job: Job, mode: str, notes: list[str]) -> None:
    """Say that inference on several GPUs without a layout is that many independent replicas."""
    if mode == "infer" and job.gpus > 1:
        notes.append(f"inference on {job.gpus} GPUs = {job.gpus} independent replicas (no tensor "
                     "parallelism modeled)")


def _on_topology(job: Job, mode: str, topology: Topology | None) -> bool:
    """Whether the step is timed by :mod:`.parallel` on a topology: one given, a model-parallel
    layout, or HSDP (``dp_shard``) in training."""
    return (topology is not None or job.tp * job.pp * job.cp * job.ep > 1
            or job.sequence_parallel or (job.dp_shard is not None and mode == "train"))


def _prepare(model, gpu: GPU, job: Job, efficiency, measured, use_noisy_bench: bool, tf32: bool,
             trainable_params: int | None, train_attention: str | None = None) -> tuple:
    """What every estimate starts from: the job's one mode, the architecture and its name and
    tensors, the job as it runs, the sequence, the stored measurement, the device and its
    fractions (the quantized kernel's and ``train_attention``'s included), the precision, ZeRO-3's
    gathers, the notes."""
    mode = one_mode(job)
    arch, name, n_params, tensors = arch_and_name(model)
    notes: list[str] = []
    job = _as_run(job, arch, notes)
    seq = resolve_seq(arch, job.seq, notes, job.context,
                      engine=resolve_engine(job.engine) if mode == "infer" else None)
    measured = resolve_measured(None if efficiency is not None and measured == "auto"
                                else measured, use_noisy=use_noisy_bench)
    device, eff, used = _gpu_and_efficiency(gpu, efficiency, measured, job.power_limit_w, notes)
    prec = _precision(job, mode, device, tf32, notes, arch)
    eff = _with_train_attention(kernel_efficiency(job, mode, device, eff, prec, arch, notes),
                                train_attention, mode, device, notes)
    if job.lora_rank is not None and trainable_params is None and mode == "train":
        notes.extend(filter(None, [lora_note(job.lora_rank, arch, tensors, job.lora_targets)]))
    gathers = _weight_gathers(model, job, mode, notes)
    notes.extend(_form_notes(arch, job, mode, device, prec))
    return (mode, arch, name, n_params, tensors, job, seq, measured, device, eff, used, prec,
            gathers, notes)


def _form_notes(arch: Architecture | None, job: Job, mode: str, device: Device,
                prec) -> tuple[str, ...]:
    """What the engine's code does with MLA and the experts (:func:`~.flops.form_notes`): of the
    decode step when inferring, of training otherwise."""
    engine = resolve_engine(job.engine)
    gpu_arch = device.architecture if device.kind == "gpu" else ""
    form = run_form(arch, engine, decode=mode == "infer", gpu_arch=gpu_arch, act_bytes=prec.act)
    out = form_notes(arch, form, engine)
    if arch is not None and arch.is_moe and not form.all_experts and device.kind == "gpu":
        out += (f"MoE under {engine}: " + (
            "the experts run as grouped kernels (permute, one gate-up GEMM, the activation, one "
            "down GEMM, unpermute per layer)" if form.grouped_experts else
            "one GEMM per expert hit, launched one by one (torch's grouped GEMM has a kernel on "
            "Hopper and Blackwell in bf16 only; the serving engines and Megatron fuse the "
            "experts everywhere)"),)
    return out


def _power_fields(gpu: GPU, job: Job) -> dict:
    """The estimate's power limit and the clock share sustained at it (the peaks it ran at)."""
    f, note = power_clock_fraction(gpu, job.power_limit_w)
    return {"power_limit_w": job.power_limit_w, "clock_fraction": f, "power_note": note}


def _engine_fields(job: Job, mode: str, attention: AttentionPrecision | None = None) -> dict:
    """The estimate's statement of the engine (:func:`gpuplan.engines.profiles.engine_notes`)
    and how its attention ran."""
    return {"engine": job.engine, "engine_notes": engine_notes(job, mode),
            "attention_precision": attention}


def _on_cpu(model: Model | Architecture, cpu: CPU, job: Job, new_tokens: int,
            trainable_params: int | None, measured: Any):
    """The same job on ``cpu`` with the same stored run (:func:`estimate_cpu_speed`)."""
    from .cpu import estimate_cpu_speed  # the CPU side loads only when a CPU is asked about

    return estimate_cpu_speed(model, cpu, job, new_tokens=new_tokens,
                              trainable_params=trainable_params, measured=measured)


def _as_run(job: Job, arch: Architecture | None, notes: list[str]) -> Job:
    """The job as the speed model runs it: its ``inter_node`` checked whatever its size (a
    mistyped link fails on one GPU as on many); a family whose attention has one implementation
    in transformers runs that one unless the engine runs it fused (said in ``notes``:
    :func:`gpuplan.models._types.attention_for`)."""
    if job.inter_node is not None:
        parse_inter_node(job.inter_node)
    runs = (attention_for(arch.family, job.attention, job.engine) if arch is not None
            else job.attention)
    if runs != job.attention:
        job = job._evolve(attention=runs)
        notes.append(f"attention: eager ({arch.family}'s attention has no other "
                     f"implementation in transformers' model code, which "
                     f"{get_engine(job.engine).name} runs)")
    elif arch is not None and job.engine in FUSED_ATTENTION.get(arch.family, ()):
        notes.append(f"attention: fused ({job.engine} runs {arch.family}'s attention in its own "
                     "flash-style kernels: models.FUSED_ATTENTION)")
    return job


def _layout_estimate(arch: Architecture | None, name: str, n_params: int, gpu: GPU,
                     device: Device, eff: Efficiency, prec: PrecisionLayout, job: Job, *,
                     mode: StepMode, seq: int, new_tokens: int, topology: Topology | None,
                     tp_overlap: bool, per_sample: int | None, pinned: bool,
                     notes: list[str], impls: tuple = (None, None),
                     gathers: float | None = None,
                     gather_overlap: bool = True, synced: bool = False,
                     p2p_overlap: bool | None = None, repeat_kv: bool | None = None,
                     after: bool | None = None) -> SpeedEstimate:
    """The estimate of a job under its parallel layout (:mod:`.parallel`); ``impls``: how its
    optimizer and its clip run (:func:`estimate_speed`'s ``optimizer_impl``,
    ``grad_clip_impl``); ``p2p_overlap``, ``repeat_kv``, ``after``: :func:`estimate_speed`'s
    (``sdpa_repeat_kv``, ``pp_reduce_after_backward``)."""
    topo = topology or topology_for(gpu, gpus_per_node=job.gpus_per_node,
                                    inter_node=job.inter_node)
    lay = replace(Layout.of(job, seq), weight_gathers=gathers, gather_overlap=gather_overlap)
    if mode == "infer":
        lay = replace(lay, micro_batches=1, zero=0, checkpointing="none")
    check_layout(arch, job, seq)
    shard = shard_arch(arch, lay.tp)
    spec = StepSpec.of(job.with_(seq=seq // lay.cp, grad_accum=lay.micro_batches, tp=1, pp=1,
                                 cp=1, ep=1, sequence_parallel=False,
                                 distribute_checkpoints=False, ep_overlap=False, gpus=1,
                                 dp_shard=None),
                       mode=mode, seq=seq // lay.cp, new_tokens=new_tokens, trainable=None,
                       single_device=True, optimizer_impl=impls[0], grad_clip_impl=impls[1])
    # the stages too: a serving engine's loop may not overlap under them (ServingHost)
    spec = replace(spec, ep=lay.ep, pp=lay.pp, sdpa_repeat_kv=repeat_kv)
    step, prefill, _, _ = build_steps(shard, 0, (), device, eff, prec, spec)
    step, prefill = _synced(step, prefill, synced and mode == "infer", notes)
    attn = _attention_precision(spec, device, notes)
    if not n_params and arch is not None:  # no tensor list: the count the step estimates
        one = StepSpec.of(Job(model="x", mode="train", seq=1), mode="train", seq=1,
                          new_tokens=1, trainable=None, single_device=True)
        n_params = build_steps(arch, 0, (), device, eff, prec, one)[2]
    if mode == "train":
        cost = micro_cost(arch, device, eff, prec, tp=lay.tp, cp=lay.cp, batch=lay.batch,
                          seq=seq, checkpointing=lay.checkpointing, attention=job.attention,
                          repeat_kv=repeat_kv, **job_micro_options(job, lay.ep))
        per_param, _ = optimizer_state_bytes(get_optimizer(job.optimizer), None, 1, prec.state)
        total_tensors = param_tensor_count(arch)
        timed: LayoutTime | ServeTime = layout_time(
            arch, cost, lay, topo, device=device, eff=eff, prec=prec, params=n_params,
            flops_per_token=model_flops_per_token(arch, device, eff, prec, seq, job.attention),
            state_bytes_per_param=per_param, tp_overlap=tp_overlap,
            ep_dispatcher=job.moe_dispatcher,
            **{**engine_layout_options(job.engine, job.precision),
               **({} if p2p_overlap is None
                  else {"p2p_overlap": "interleaved" if p2p_overlap else "none"}),
               **({} if repeat_kv is None else {"repeat_kv": repeat_kv}),
               **({} if after is None else {"pp_grad_reduce": "after-last-backward" if after
                                            else "overlapped"})},
            gather_bytes_per_element=narrow_gather_bytes(arch, job, n_params,
                                                         notes if job.zero else None),
            optimizer_s=lambda n, share: optimizer_stretch_s(
                spec, prec, device, eff, elements=n,
                # the stage's share of the tensors; a ZeRO shard holds a piece of each of them
                tensors=round(total_tensors * share)))
        notes.extend(timed.notes)
    else:
        timed = serve_time(arch, step.time_s, prefill.time_s if prefill else step.time_s, lay,
                           topo, eff, prec.act)
        notes.append(f"topology: {topo.stated}")
        notes.append(f"serving on TP {lay.tp} x PP {lay.pp} per replica, {lay.dp} replicas; "
                     "the stages run in turn for each token (no micro-batch pipelining)")
    sample = per_sample if per_sample is not None else input_bytes_per_sample(arch, seq, mode)
    transfer, prefill_transfer = _transfers(step, prefill, sample, job.batch, device, eff,
                                            pinned=pinned, overlap=None)
    return SpeedEstimate(
        model=name, gpu=gpu.name, mode=mode, precision=prec.name, dtype=prec.dtype,
        batch=job.batch, seq=seq, gpus=job.gpus, checkpointing=job.checkpointing,
        attention=job.attention, grad_accum=lay.micro_batches, zero=job.zero,
        trainable_params=n_params, step=step, prefill=prefill,
        new_tokens=new_tokens if prefill is not None else None, transfer=transfer,
        prefill_transfer=prefill_transfer, layout=timed, efficiency=eff,
        **_ridge_points(device, eff, prec.dtype), notes=tuple(notes),
        **_engine_fields(job, mode, attn), **_power_fields(gpu, job))


def _with_train_attention(eff: Efficiency, kernel: str | None, mode: str, device: Device,
                          notes: list[str]) -> Efficiency:
    """``eff`` with a training step's fused attention kernel given by name (``fa1``:
    FlashAttention v1, timed at ``attn_fa1_over_fa2`` of FlashAttention-2's share), said in
    ``notes``; ``eff`` itself with none given. InputError in inference, or off Ampere, where
    the kernel's rate is not published."""
    if not kernel:
        return eff
    if mode != "train":
        raise InputError(f"{opt('train_attention')} {kernel!r} in inference: it names a training "
                         "step's attention kernel; leave it unset", field="train_attention",
                         value=kernel)
    if device.kind != "gpu" or (device.architecture or "").lower() not in FA2_SM8X:
        raise InputError(f"{opt('train_attention')} {kernel!r} on {device.name}: its rate is "
                         "published against FlashAttention-2's on Ampere only; leave it unset",
                         field="train_attention", value=kernel)
    notes.append(f"training attention: {TRAIN_ATTENTION_KERNELS[kernel]}, at "
                 f"{constant('attn_fa1_over_fa2'):g} of FlashAttention-2's rate (arXiv "
                 "2307.08691, abstract)")
    return replace(eff, attention_kernel=kernel)


def _with_decode_attention(spec: StepSpec, kernel: str | None, device: Device,
                           notes: list[str]) -> StepSpec:
    """``spec`` with an inference step's decode attention kernel given by name (``ft-mmha``:
    FasterTransformer's masked multi-head attention, which AutoAWQ's fused modules run: timed
    by its blocks' chains of loads where the GPU's memory latency is on record, its rotary in
    the kernel), said in ``notes``; ``spec`` itself in training or with none given."""
    if not kernel or spec.mode != "infer":
        return spec
    what = DECODE_ATTENTION_KERNELS[kernel]
    if device.memory_latency_s <= 0:
        notes.append(f"decode attention: {what}; {device.name}'s memory latency is not on "
                     "record, so it is timed by its bytes alone")
    else:
        notes.append(f"decode attention: {what}, each block's chain of dependent loads at "
                     f"{1e9 * device.memory_latency_s:.0f} ns a load (the catalog's "
                     "memory_latency) or its bytes at the bandwidth, whichever is longer; its "
                     "rotary in the kernel")
    return replace(spec, decode_attention=kernel)


def _synced(step: Phase, prefill: Phase | None, synced: bool,
            notes: list[str]) -> tuple[Phase, Phase | None]:
    """The decode step and the prefill of a loop that waits for the device around every forward
    (:attr:`~.step.Phase.sync_per_step`), stated in the notes; else as they are."""
    if not synced or step.overheads is None:
        return step, prefill
    notes.append("the loop waits for the device before and after every forward: each step runs "
                 "from idle, kernel by kernel (the host cannot issue ahead into the next one)")
    return (replace(step, sync_per_step=True),
            None if prefill is None else replace(prefill, sync_per_step=True))


def _built(arch: Architecture | None, n_params: int, tensors: tuple, device: Device,
           eff: Efficiency, prec: PrecisionLayout, spec: StepSpec, notes: list[str]) -> tuple:
    """:func:`~.step.build_steps`'s four, and the step's attention precision (its notes added to
    ``notes``)."""
    return (*build_steps(arch, n_params, tensors, device, eff, prec, spec),
            _attention_precision(spec, device, notes))


def _attention_precision(spec: StepSpec, device: Device,
                         notes: list[str]) -> AttentionPrecision | None:
    """An inference step's attention precision (the step was built with the same), its notes
    added to ``notes``; None in training."""
    if spec.mode == "train":
        return None
    plan = attention_plan(spec, device)
    notes.extend(plan.notes)
    return plan


def _quant_kernel_efficiency(job: Job, mode: StepMode, device: Device, eff: Efficiency,
                             prec: PrecisionLayout, notes: list[str],
                             version: str | None = None) -> Efficiency:
    """``eff`` with the decode GEMV share of the kernel the job's engine runs its quantized
    weights with for a checkpoint naming kernel ``version`` (:func:`~.efficiency.quant_kernel`),
    and how many rows re-read them, stated in the notes; else ``eff``."""
    if mode == "train" or device.kind != "gpu":
        return eff
    kernel = quant_kernel(job.engine, prec.name, device.architecture, version)
    if kernel is None:
        return eff
    share = constant(kernel.constant)
    rows = kernel.row_passes
    notes.append(f"{prec.name} decode matmuls under {kernel.engine}: the {kernel.name} kernel, "
                 f"{share:.1%} of the bandwidth on its packed weights"
                 + (f", read once per row of the batch up to {rows} rows"
                    + (f" (here {job.batch})" if 1 < job.batch <= rows else "") if rows else "")
                 + (f"; the rows after the first from the L2 at {device.l2_bandwidth / 1e9:,.0f} "
                    f"GB/s for a matrix of at most {device.l2_resident_bytes / 2**20:g} MiB (what "
                    "it was measured to keep), a larger one from DRAM"
                    if rows and device.l2_bandwidth else
                    "; every row from DRAM (no L2 measurement for this GPU)" if rows else ""))
    if kernel.splitk_partials:
        notes.append(f"each {kernel.name} launch writes {kernel.splitk_partials} split-K partial "
                     "outputs, summed by a reduction kernel after it")
    return replace(eff, quant_gemv=share, quant_gemv_rows=rows, quant_weight_bytes=prec.weight,
                   quant_splitk=kernel.splitk_partials, quant_issue=kernel.issue_per_weight,
                   basis={**eff.basis, "quant_gemv": f"default: {kernel.name}: {kernel.source}"})


def kernel_efficiency(job: Job, mode: StepMode, device: Device, eff: Efficiency,
                      prec: PrecisionLayout, arch: Architecture | None,
                      notes: list[str]) -> Efficiency:
    """``eff`` as the job's kernels reach it: the quantized decode kernel's share
    (:func:`_quant_kernel_efficiency`) and the block-scaled GEMM share
    (:func:`block_scaled_efficiency`), stated in ``notes``. One home for both, which ``speed``
    and the cluster search read alike."""
    eff = _quant_kernel_efficiency(job, mode, device, eff, prec, notes,
                                   arch.checkpoint_kernel if arch is not None else None)
    return block_scaled_efficiency(_serving_attention(job, mode, device, eff, notes), prec.name,
                                   notes)


def _serving_attention(job: Job, mode: StepMode, device: Device, eff: Efficiency,
                       notes: list[str]) -> Efficiency:
    """``eff`` with the serving engine's own 16-bit attention kernel on this generation
    (:data:`~gpuplan.engines.profiles.ATTENTION_16BIT`: FlashAttention-3 under vLLM on Hopper),
    stated in ``notes``; else ``eff``."""
    if mode != "infer" or device.kind != "gpu" or eff.attention_kernel:
        return eff
    kernel = attention_16bit_of(resolve_engine(job.engine), device.architecture)
    if not kernel:
        return eff
    notes.append(f"attention: {job.engine} runs FlashAttention-3 on {device.architecture} "
                 "(its 16-bit forward's share of the peak: efficiency attn_fwd_hopper_fa3)")
    return replace(eff, attention_kernel=kernel)


def block_scaled_efficiency(eff: Efficiency, recipe: str, notes: list[str]) -> Efficiency:
    """``eff`` with the narrow dtype's matmul fraction scaled by the recipe's measured
    block-scaled over per-tensor GEMM rate (:data:`~.efficiency.BLOCK_SCALED_GEMM`: MXFP8's
    kernels read a scale per 32 values of each operand), stated in the notes; else ``eff``."""
    name = BLOCK_SCALED_GEMM.get(recipe)
    if name is None:
        return eff
    dtype = NARROW_RECIPES[recipe].dtype
    ratio = constant(name)
    by_dtype = {**eff.matmul_by_dtype, dtype: eff.matmul_fraction(dtype) * ratio}
    notes.append(f"{recipe} GEMMs at {ratio:.3f} of the per-tensor {dtype.upper()} GEMM rate "
                 "(block-scaled kernels; Transformer Engine's GEMM profiling guide)")
    return replace(eff, matmul_by_dtype=MappingProxyType(by_dtype),
                   basis={**eff.basis, f"matmul_{dtype}": eff.basis.get(f"matmul_{dtype}",
                          "default") + f"; x {ratio} under {recipe}: {CONSTANTS[name].source}"})


def _ridge_points(device: Device, eff: Efficiency, dtype: str) -> dict[str, float]:
    """Peak FLOP/s over memory bandwidth (compute-bound above it), and the same at the achievable
    fractions."""
    return {"ridge_point": device.peak(dtype) / device.memory_bandwidth,
            "achievable_ridge_point": (device.peak(dtype) * eff.matmul_fraction(dtype))
            / (device.memory_bandwidth * eff.memory)}


def _gpu_and_efficiency(gpu: GPU, efficiency: Efficiency | None, measured: Any,
                        power_limit_w: float | None = None,
                        notes: list[str] | None = None) -> tuple[Device, Efficiency, RunUse | None]:
    """The GPU as the model sees it (at ``power_limit_w``: its peaks at the clock sustained
    there, :func:`~.device.at_power_limit`, noted in ``notes``) and the achievable fractions:
    ``efficiency`` when given, else the defaults replaced by what ``measured`` (a stored run, or
    None) measured on it; and which run that was (None when none was read)."""
    device, note = at_power_limit(device_from_gpu(gpu), gpu, power_limit_w)
    if note and notes is not None:
        notes.append(note)
    eff = efficiency or default_efficiency(device)
    if measured is not None and efficiency is None:
        return measured_apply(device, eff, measured)
    return device, eff, None


def _precision(job: Job, mode: StepMode, device: Device, tf32: bool, notes: list[str],
               arch: Architecture | None = None) -> PrecisionLayout:
    """The job's precision layout for ``mode`` on ``device`` (a LoRA base read in its own format),
    with the notes on what is not modeled."""
    if mode == "train":
        prec = train_precision(job.train_recipe, device, tf32)
        if job.lora_base is not None:
            fmt = WEIGHT_FORMATS[job.lora_base]
            # the frozen base is read in its storage format (QLoRA: nf4)
            prec = replace(prec, weight=fmt.bits / 8)
            if fmt.name not in ("fp32", "bf16", "fp16"):
                notes.append(f"frozen base in {fmt.name}: weights read at {fmt.bits:.2f} bits; "
                             "the dequantization work is not modeled")
    else:
        shipped = arch.checkpoint_format if arch is not None else None
        fmt_name = job.resolve_infer(arch, device.architecture if device.kind == "gpu" else
                                     None).infer_precision
        prec = infer_precision(fmt_name, device, tf32, shipped=shipped, engine=job.engine)
        fmt = WEIGHT_FORMATS[prec.name]
        if prec.name not in ("fp32", "bf16", "fp16") and prec.dtype in ("bf16", "fp16"):
            notes.append(f"{prec.name} weights are read at {fmt.bits:.2f} bits and multiplied in "
                         f"{prec.dtype}; the dequantization work is not modeled")
        elif fmt.native_dtype is not None and prec.dtype == fmt.native_dtype:
            notes.append(f"{prec.name}: the blocks' GEMMs at the {prec.dtype} tensor-core rate "
                         f"({device.architecture} takes its block scales), activations quantized "
                         "to it on the fly; attention, embedding and head in bf16")
    if prec.dtype == "fp32" and device.supports("tf32"):
        notes.append("fp32 matmuls at the fp32 (not TF32) peak, PyTorch's default; "
                     "torch.backends.cuda.matmul.allow_tf32=True is --tf32")
    return prec


def _transfers(step: Phase, prefill: Phase | None, per_sample: int, batch: int, device: Device,
               eff: Efficiency, *, pinned: bool,
               overlap: bool | None) -> tuple[TransferEstimate, TransferEstimate | None]:
    """The host-to-device copy of each headline step (decode: one token id per sequence) and,
    for decoder inference, of the prompt (on the request's critical path: not overlapped)."""
    if per_sample < 0:
        raise InputError(f"input bytes per sample {per_sample!r}: expected >= 0")
    if prefill is not None:
        xfer_bytes = 8 * batch  # each decode step sends one new token id per sequence
    else:
        xfer_bytes = per_sample * batch * step.micro_steps
    transfer = estimate_transfer(xfer_bytes, device, eff, compute_s=step.time_s, pinned=pinned,
                                 overlap=overlap)
    prefill_transfer = None
    if prefill is not None:
        prefill_transfer = estimate_transfer(per_sample * batch, device, eff,
                                             compute_s=prefill.time_s, pinned=pinned,
                                             overlap=False)
    return transfer, prefill_transfer


def _weight_gathers(model: Model | Architecture, job: Job, mode: str,
                    notes: list[str]) -> float | None:
    """ZeRO-3's all-gathers of the weights per micro-batch (:func:`~.parallel.zero3_gathers`),
    said in ``notes`` where DeepSpeed's reuse distance keeps weights gathered; None when the
    job does not train under ZeRO-3."""
    if mode != "train" or job.zero != 3:
        return None
    g = zero3_gathers(job.sharding, job.checkpointing, model,
                      max_live=job.stage3_max_live_parameters,
                      prefetch_bucket=job.stage3_prefetch_bucket_size)
    plain = zero3_gathers(job.sharding, job.checkpointing)
    if abs(g - plain) > 0.005:
        notes.append(f"ZeRO-3 (DeepSpeed): the weights all-gathered {g:.2f} times a micro-batch, "
                     f"not {plain:g}: its coordinator keeps a parameter gathered when it is used "
                     "again within stage3_max_reuse_distance (1e9 elements)")
    return g


def narrow_gather_bytes(arch: Architecture | None, job: Job, n_params: int,
                        notes: list[str] | None = None) -> float | None:
    """Mean bytes a gathered weight element moves under ``--fp8-param-gather`` (the blocks'
    weights narrow, the embedding and head 16-bit: :func:`gpuplan.fp8.gathered_bytes_per_element`),
    said in ``notes``; None where the job gathers 16-bit weights (no narrow recipe, no param
    gather, LoRA: the base is gathered as stored, and a recipe the engine gathers 16-bit and
    quantizes after the gather: :attr:`gpuplan.fp8.NarrowRecipe.gathers_16bit_under`, Megatron's
    MXFP8). ZeRO-0 gathers nothing: its callers ignore it there."""
    recipe = NARROW_RECIPES.get(job.precision)
    if (recipe is None or not job.fp8_param_gather or job.lora_rank is not None or arch is None
            or n_params <= 0):
        return None
    if resolve_engine(job.engine) in recipe.gathers_16bit_under:
        if notes is not None:
            notes.append(f"{opt('fp8_param_gather')} under {recipe.name}: the weights "
                         "all-gathered in 16 bits through the gradient buffer and cast after "
                         "the gather (Megatron-Core's reuse_grad_buf_for_mxfp8_param_ag), not "
                         "narrow")
        return None
    narrow = narrow_elements(n_params, arch.vocab_size, arch.hidden_size,
                             arch.tie_word_embeddings)
    if job.first_last_layers_bf16 and arch.num_layers:  # those blocks gathered 16-bit
        narrow = narrow * max(0, arch.num_layers - 2 * job.first_last_layers_bf16) \
            // arch.num_layers
    g = gathered_bytes_per_element(recipe, n_params, narrow)
    if notes is not None:
        notes.append(f"{opt('fp8_param_gather')}: the weights all-gathered at {g:.3f} B an "
                     f"element (the blocks' {narrow / n_params:.1%} narrow, the embedding and "
                     "head 16-bit), not 2")
    return g


def _fsdp2_copy_s(job: Job, prec: PrecisionLayout, device: Device, eff: Efficiency,
                  elements: int, gathers: float | None, narrow: float | None,
                  micro_batches: int, grad_elements: int | None = None) -> float:
    """FSDP2's copies on the compute stream of a data-parallel step without a layout
    (:func:`~.parallel.fsdp2_copy_bytes`), where the engine's are timed
    (``fsdp2_reduce_bytes``), or FSDP1's gradient cat where its profile times that instead
    (``fsdp1_grad_cat``: :func:`~.parallel.fsdp1_grad_cat_bytes`), both through
    :func:`~.parallel.sharded_copy_bytes`, and the weights are sharded (ZeRO-2/3 over several
    GPUs); ``grad_elements``: the parameters with a gradient where fewer (LoRA's adapters)."""
    engine = get_engine(job.engine)
    reduce_bytes = engine.fsdp2_reduce_bytes
    if (not (reduce_bytes or engine.fsdp1_grad_cat) or job.zero < 2 or job.gpus <= 1
            or job.sharding != "fsdp2"):
        return 0.0
    nbytes = sharded_copy_bytes(
        elements, fsdp1_grad_cat=engine.fsdp1_grad_cat, zero=job.zero,
        micro_batches=micro_batches,
        gathers=gathers if gathers is not None else zero3_gathers(job.sharding,
                                                                  job.checkpointing),
        gathered_bytes=prec.weight_store if narrow is None else narrow,
        grad_bytes=prec.weight_store, reduce_bytes=reduce_bytes, grad_elements=grad_elements)
    return nbytes / (device.memory_bandwidth * eff.memory)


def _scaling(step: Phase, transfer: TransferEstimate, trainable: int, prec: PrecisionLayout,
             job: Job, device: Device, eff: Efficiency, *, link: str | float | None,
             overlap_comm: bool, n_params: int, gpu: GPU,
             gathers: float | None, gather_overlap: bool = True,
             narrow: float | None = None, copy_s: float = 0.0) -> ScalingTable:
    """Data-parallel scaling of a training step: the gradient all-reduce over ``link``, or, when
    no link is named, on the job's topology (its ``gpus_per_node`` on the node's link, nodes on
    ``inter_node``, 400 Gb/s per GPU by default: stated in the table's notes). ``narrow``: the
    mean bytes of a gathered weight element under FP8 param gather (:func:`narrow_gather_bytes`),
    None: the weights gathered as the step reads them. ``copy_s``: FSDP2's copies on the compute
    stream (:func:`_fsdp2_copy_s`), part of every row's step."""
    lname, lbw = link_bandwidth(link, device)
    topo = None
    if link is None and job.gpus > 1:
        topo = topology_for(gpu, gpus_per_node=job.gpus_per_node, inter_node=job.inter_node)
    # ZeRO-3 gathers the weights in forward and backward and reduce-scatters the gradients: an
    # all-gather and a reduce-scatter each move half an all-reduce's bytes, so 1.5x the bytes of
    # an all-reduce when every weight trains (Rajbhandari et al. 2020, sec. 7.2.2); a frozen base
    # (LoRA) is gathered all the same, so its weights count in full. It does so for every
    # micro-batch: the weights are resharded after each one's backward and the gradients
    # reduce-scattered into their shard (DeepSpeed stage 3; FSDP's default), so accumulation
    # multiplies the traffic. Overlappable with forward and backward; stages 0-2 move one
    # all-reduce's bytes during backward.
    zero3 = job.zero == 3  # then ``gathers`` is the count estimate_speed took (_weight_gathers)
    w = prec.weight if narrow is None else narrow
    # the gradients' reduce-scatter in FSDP2's reduce dtype where the engine's is timed
    # (torchtitan: reduce_dtype fp32, 4 bytes an element; parallel._dp_comm's ``reduce_bytes``)
    r = fsdp2_reduce_width(job.sharding, job.zero, get_engine(job.engine).fsdp2_reduce_bytes) \
        or prec.grad
    volume = (trainable * r + gathers * max(n_params, trainable) * w) / 2 \
        * step.micro_steps if zero3 else trainable * prec.grad
    if narrow is not None and not zero3 and job.zero >= 1:  # RS of gradients, AG of FP8 weights
        volume = (trainable * prec.grad + trainable * narrow) / 2
    serial = (gathers * max(n_params, trainable) * w / 2 * step.micro_steps
              if zero3 and not gather_overlap else 0)
    # Stages 0-2 reduce the gradients once a step, in the last micro-batch's backward (DDP's
    # no_sync accumulation, Megatron's DDP): only that backward hides the all-reduce, as
    # `gpuplan cluster` times it (parallel._dp_comm). ZeRO-3's traffic comes every micro-batch
    # and overlaps the whole step's forward and backward. A checkpointed layer's recompute runs
    # inside the backward: it hides traffic too. The window is wall time: kernels and their
    # gaps, stretched where the host paces the step (a small model's eager dispatch).
    phases = ("backward", "recompute", "forward") if zero3 else ("backward", "recompute")
    pace = (max(1.0, step.host_time_s / step.device_time_s)
            if step.overheads is not None and step.device_time_s > 0 else 1.0)
    window = step._device_s([t for t in step.ops if t.op.phase in phases]) * pace
    if not zero3:
        window /= step.micro_steps
    return data_parallel_scaling(
        step_s=step.time_s + transfer.exposed_s + copy_s, backward_s=window,
        gradient_bytes=int(volume), gpus=job.gpus, link=lname, link_bandwidth=lbw,
        eff=eff, overlap=overlap_comm, tokens_per_step=step.tokens, topology=topo,
        serial_bytes=int(serial),
        overlap_sm_share=nccl_sm_share(device))


def _compare_cpu(est: SpeedEstimate, on_cpu) -> CpuComparison:
    """The verdict for ``est``'s job given the same job on this CPU: the GPU's step with its
    exposed input copy; the whole job when its amount is known (training) or one request
    (decoder inference)."""
    gpu_step = est.step.time_s + est.transfer.exposed_s
    job_steps = gpu_request = None
    if est.training_time is not None:
        job_steps = est.training_time.work / (
            est.step.tokens if est.training_time.unit == "tokens"
            else est.batch * est.step.micro_steps)
    elif est.prefill is not None:
        gpu_request = est.prefill.time_s + est.new_tokens * gpu_step
    from .cpu import cpu_vs_gpu  # loaded with the CPU estimate (see estimate_speed)

    verdict = cpu_vs_gpu(cpu=on_cpu.cpu, cpu_peak_basis=on_cpu.peak_basis,
                         cpu_dtype=on_cpu.dtype, cpu_step_s=on_cpu.step_time_s, gpu=est.gpu,
                         gpu_step_s=gpu_step, job_steps=job_steps,
                         cpu_request_s=on_cpu.request_time_s, gpu_request_s=gpu_request)
    return replace(verdict, measured_run=on_cpu.measured_run)


def _training_time(est: SpeedEstimate, tokens, samples, epochs, price) -> TrainingTime | None:
    if tokens is None and samples is None:
        if price is not None:
            raise InputError("a price per GPU-hour needs the amount of training: give "
                             f"{opt('tokens')} or {opt('samples')} (and {opt('epochs')})",
                             field="price", value=price)
        return None
    if tokens is not None and samples is not None:
        raise InputError("give the amount of training as tokens or as samples, not both")
    if est.mode != "train":
        raise InputError(f"time to train needs {opt('mode')} train", field="mode",
                         value=est.mode, fix={"mode": "train"})
    if not (epochs > 0 and math.isfinite(epochs)):
        raise InputError(f"{opt('epochs')} {shown(epochs)}: expected a number > 0",
                         field="epochs", value=epochs)
    if tokens is not None:
        return time_to_train(work=tokens * epochs, rate_per_s=est.tokens_per_s, gpus=est.gpus,
                             unit="tokens", price_per_gpu_hour=price)
    return time_to_train(work=samples * epochs, rate_per_s=est.samples_per_s, gpus=est.gpus,
                         unit="samples", price_per_gpu_hour=price)


def estimate_speed_for_job(job: Job, gpu: GPU, *, model: Model | Architecture | None = None,
                           trainable_params: int | None = None, measured: Any = "auto",
                           use_noisy_bench: bool = False,
                           **kwargs: Any) -> dict[str, SpeedEstimate]:
    """:func:`estimate_speed` for each mode of ``job`` (``train`` and/or ``infer``), keyed by mode.
    ``model`` is the loaded model when ``job.model`` is a name. Extra keyword arguments (``link``,
    ``train_tokens``, ``price_per_gpu_hour`` ...) pass through to the training estimate; the
    inference one takes those that apply to it. ``use_noisy_bench``: as in estimate_speed."""
    m = job.model if isinstance(job.model, (Model, Architecture)) else model
    if m is None:
        raise InputError(f"job.model {job.model!r} is a name: pass the loaded model as model=")
    measured = resolve_measured(measured, use_noisy=use_noisy_bench)
    out: dict[str, SpeedEstimate] = {}
    if job.trains:
        out["train"] = estimate_speed(m, gpu, job.with_(mode="train"), measured=measured,
                                      trainable_params=trainable_params, **kwargs)
    if job.infers:
        kw = {k: v for k, v in kwargs.items() if k not in _TRAINING_ONLY}
        out["infer"] = estimate_speed(m, gpu, job.with_(mode="infer"), measured=measured, **kw)
    return out


#: Keywords of :func:`estimate_speed` that only a training estimate takes.
_TRAINING_ONLY = ("train_tokens", "train_samples", "epochs", "price_per_gpu_hour", "link",
                  "overlap_comm", "optimizer_impl", "grad_clip_impl", "paged_host_bytes")


#: The headline fields of an estimate that ``speed_section`` keeps.
SECTION_FIELDS = ("flops_per_step", "model_flops_per_step", "model_flops_per_token",
                  "step_time_s", "tokens_per_s", "samples_per_s", "mfu", "hfu", "bound",
                  "precision", "dtype", "batch", "seq", "gpus")


def _headline(e: SpeedEstimate) -> dict:
    # the fields by name, not through to_dict(): its step and scaling tables are not needed here
    out = {k: getattr(e, k) for k in SECTION_FIELDS}
    if e.prefill is not None:
        out["prefill_tokens_per_s"] = e.prefill.tokens_per_s
        out["prefill_bound"] = e.prefill.bound
        out["decode_tokens_per_s"] = e.tokens_per_s
        out["request_time_s"] = e.request_time_s
        out["ttft_s"] = e.ttft_s
        out["tpot_s"] = e.tpot_s
        out["new_tokens"] = e.new_tokens
    if e.scaling is not None and e.gpus > 1:
        out["data_parallel_efficiency"] = e.scaling.rows[-1].efficiency
    if e.training_time is not None:
        out["training_time"] = e.training_time.to_dict()
    out["tokens_per_s_range"] = list(e.tokens_per_s_range)
    out["runtime"] = e.step.overheads.runtime if e.step.overheads else None
    out["caveats"] = list(e.caveats) + ([e.power_note] if e.power_note else [])
    if e.power_limit_w is not None:
        out["power_limit_w"], out["clock_fraction"] = e.power_limit_w, e.clock_fraction
    out["measured_run"] = None if e.measured_run is None else e.measured_run.to_dict()
    return out


#: What a row of the section says of an estimate whose job does not fit the GPU it was timed on.
_NOT_FIT = ("does not fit this GPU's memory: the speed is of a job that would not run as "
            "configured (see the memory verdict and suggestions)")


@record
class SpeedRow:
    """One GPU of a plan's speed section: an estimate per mode, or why there is none."""

    gpu: str
    train: SpeedEstimate | None = None
    infer: SpeedEstimate | None = None
    error: str | None = None
    """The GPU cannot run the job's dtype (e.g. bf16 on a T4): one GPU never sinks the plan."""
    error_marked: str | None = None
    """``error`` with its fields still marked (:func:`gpuplan.errors.opt`), for each front end
    to spell (:func:`gpuplan.errors.spell_text`; the CLI's ``--infer-precision``)."""
    fits: tuple[tuple[str, bool], ...] = ()
    """(mode, whether the job fits this GPU's memory), as the plan judged it (compute never
    imports the memory accounting: the plan says)."""

    def estimate(self, mode: str) -> SpeedEstimate | None:
        return self.train if mode == "train" else self.infer

    def to_dict(self) -> dict:
        if self.error is not None:
            return {"gpu": self.gpu, "error": self.error}
        out: dict[str, Any] = {"gpu": self.gpu}
        fits = dict(self.fits)
        for mode in ("train", "infer"):
            e = self.estimate(mode)
            if e is None:
                continue
            head = _headline(e)
            if mode in fits:
                head["fits_gpu"] = fits[mode]
                if not fits[mode]:
                    head["caveats"].insert(0, _NOT_FIT)
            out[mode] = head
        return out


@record
class SpeedSection:
    """The ``"speed"`` section of ``gpuplan fit --json``, typed: a row per GPU."""

    rows: tuple[SpeedRow, ...]
    efficiency: dict | None = None
    """The achievable fractions the estimates used (the first estimate's)."""
    measured_runs: tuple[dict, ...] = ()
    """Each stored bench run read (used, or noisy and left out), once."""

    def row(self, gpu: str) -> SpeedRow | None:
        return next((r for r in self.rows if r.gpu == gpu), None)

    def with_fits(self, fits: dict[str, dict[str, bool]]) -> "SpeedSection":
        """The section with each row told whether its job fits (gpu -> mode -> fits)."""
        return replace(self, rows=tuple(
            replace(r, fits=tuple(fits.get(r.gpu, {}).items())) for r in self.rows))

    def to_dict(self) -> dict:
        return {"gpus": [r.to_dict() for r in self.rows], "efficiency": self.efficiency,
                "measured_runs": list(self.measured_runs),
                "conventions": "model FLOPs count matmuls only, attention over the full s x s "
                               "square (Megatron/PaLM); step time = sum over ops of max(compute, "
                               "memory) at the stated achievable fractions + kernel launches; "
                               "see docs/speed.md"}


def speed_section(job: Job, gpus: Sequence[GPU], *, model: Model | Architecture | None = None,
                  trainable_params: int | None = None, measured: Any = "auto",
                  use_noisy_bench: bool = False, paged_host_bytes: Mapping[str, int] | None = None,
                  **kwargs: Any) -> SpeedSection:
    """A plan's speed section: per GPU and mode, :func:`estimate_speed_for_job`'s estimate
    (``.to_dict()``: the headline numbers ``gpuplan fit --json`` prints). A GPU that cannot run
    the job's dtype gets an ``error`` row instead (e.g. bf16 on a T4), so one GPU never sinks
    the whole plan. ``paged_host_bytes``: by GPU name, a paged optimizer's states over that
    GPU's memory (the plan's memory has them), timed by :func:`paged_migration_s`."""
    measured = resolve_measured(measured, use_noisy=use_noisy_bench)
    rows = []
    basis = None
    runs: dict = {}
    for gpu in gpus:
        paged = (paged_host_bytes or {}).get(gpu.name, 0)
        try:
            est = estimate_speed_for_job(job, gpu, model=model, trainable_params=trainable_params,
                                         measured=measured, **kwargs,
                                         **({"paged_host_bytes": paged} if paged else {}))
        except UnsupportedError as e:
            rows.append(SpeedRow(gpu=gpu.name, error=str(e),
                                 error_marked=str(e.args[0]) if e.args else str(e)))
            continue
        for e in est.values():
            basis = basis or e.efficiency.to_dict()
            if e.measured_run is not None:
                runs.setdefault(e.measured_run.line, e.measured_run.to_dict())
        rows.append(SpeedRow(gpu=gpu.name, train=est.get("train"), infer=est.get("infer")))
    return SpeedSection(rows=tuple(rows), efficiency=basis, measured_runs=tuple(runs.values()))
