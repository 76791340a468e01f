"""The same work on this machine's CPU: a job's step in fp32 (:func:`estimate_cpu_speed`), and the
verdicts "does this job need a GPU?" (:func:`cpu_vs_gpu`) and "is this one matmul worth the GPU?"
(:func:`compare_matmul`)."""

from __future__ import annotations

from typing import Any, Literal

from .._record import record
from ..errors import UnsupportedError, opt
from ..hardware import GPU
from ..hardware.cpu import CPU
from ..job import Job, cpu_arg, flag_arg
from ..models._types import Architecture, Model
from ..units import format_seconds
from .device import (
    Efficiency, default_efficiency, device_from_cpu, device_from_gpu, measured_apply,
)
from ._args import common_args
from .flops import MatmulCount
from .measured import RunUse, resolve_measured
from .step import (
    Phase, StepMode, StepSpec, arch_and_name, build_steps, infer_precision, lora_note, one_mode,
    resolve_seq, train_precision,
)
from .time import DEFAULT_TILE, MatmulTime, SmallWork, small_work, time_matmul

__all__ = [
    "CpuEstimate", "CpuComparison", "estimate_cpu_speed", "cpu_vs_gpu", "MIN_USEFUL_SPEEDUP",
    "SHORT_JOB_S", "INTERACTIVE_SPEEDUP", "INTERACTIVE_LATENCY_S", "MatmulComparison", "compare_matmul", "matmul_verdict",
]

#: The verdict's policy: a GPU is "not needed" below this speed-up ...
MIN_USEFUL_SPEEDUP = 2.0
#: ... or when the CPU finishes the whole job within this many seconds (batch work).
SHORT_JOB_S = 600.0
#: Interactive work: a GPU this many times faster is always worth it ...
INTERACTIVE_SPEEDUP = 10.0
#: ... and MIN_USEFUL_SPEEDUP is, when the CPU keeps a person waiting longer than this: about the
#: limit for "the user's flow of thought stays uninterrupted" (Nielsen, Response Times: The 3
#: Important Limits, 1993: 0.1 s, 1 s, 10 s).
INTERACTIVE_LATENCY_S = 1.0


@record
class CpuEstimate:
    """One step of a job on a CPU, in fp32 (the CPU side has fp32 peaks only), on one device: no
    host-to-device copy, no data parallelism."""

    model: str
    cpu: str
    """The CPU's model name."""
    peak_basis: str
    """How its fp32 peak was obtained: the estimate's arithmetic, or a ``gpuplan bench`` run."""
    mode: StepMode
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
    measured_run: RunUse | None = None
    """The stored bench run read for this CPU (used, or noisy and left out); None when none."""

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


def estimate_cpu_speed(
    model: Model | Architecture,
    cpu: CPU,
    job: Job,
    *,
    new_tokens: int = 128,
    trainable_params: int | None = None,
    measured: Any | None | Literal["auto"] = "auto",
    use_noisy_bench: bool = False,
) -> CpuEstimate:
    """Estimate one step of ``job`` (one mode: train or infer) on ``cpu`` (a
    ``gpuplan.hardware.cpu`` CPU: its estimated fp32 peak), in fp32, the CPU side's only dtype.

    The job's precision, GPU count and ZeRO stage do not apply: one CPU, fp32. ``measured``: a
    stored bench run whose CPU matmul rate, copy bandwidth and op dispatch replace the estimate
    and the defaults (``"auto"``: this machine's latest stored run; None: defaults only); its
    noisy measurements only with ``use_noisy_bench`` (:attr:`CpuEstimate.measured_run` says).
    """
    common_args(model, job, new_tokens, trainable_params, measured)
    cpu_arg(cpu, optional=False)
    flag_arg(use_noisy_bench, "use_noisy_bench")
    mode = one_mode(job)
    arch, name, n_params, tensors = arch_and_name(model)
    notes: list[str] = []
    seq = resolve_seq(arch, job.seq, notes, job.context)
    if job.lora_rank is not None and trainable_params is None and mode == "train":
        notes.extend(filter(None, [lora_note(job.lora_rank, arch, tensors, job.lora_targets)]))
    dev = device_from_cpu(cpu)
    measured = resolve_measured(measured, use_noisy=use_noisy_bench)
    dev, eff, used = measured_apply(dev, default_efficiency(dev), measured)
    prec = (train_precision if mode == "train" else infer_precision)("fp32", dev, False)
    spec = StepSpec.of(job, mode=mode, seq=seq, new_tokens=new_tokens, trainable=trainable_params,
                       single_device=True)
    step, prefill, _, _ = build_steps(arch, n_params, tensors, dev, eff, prec, spec)
    return CpuEstimate(model=name, cpu=dev.name, peak_basis=dev.peak_basis, mode=mode,
                       batch=job.batch, seq=seq, step=step, prefill=prefill,
                       new_tokens=new_tokens if prefill is not None else None, efficiency=eff,
                       notes=tuple(notes), measured_run=used)


# --------------------------------------------------------------------------------------------------
# A job: CPU against GPU


@record
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
    workload: str = "batch"
    """``interactive`` (a request a person waits for: judged by latency) or ``batch``
    (judged by throughput)."""
    rule: str = ""
    """The rule the verdict applied, in words."""
    measured_run: RunUse | None = None
    """The stored bench run read for the CPU side (the GPU side's: the estimate's own)."""

    def to_dict(self) -> dict:
        return {"cpu": self.cpu, "cpu_peak_basis": self.cpu_peak_basis,
                "cpu_dtype": self.cpu_dtype, "cpu_step_s": self.cpu_step_s, "gpu": self.gpu,
                "gpu_step_s": self.gpu_step_s, "speedup": self.speedup,
                "cpu_job_s": self.cpu_job_s, "gpu_job_s": self.gpu_job_s,
                "needs_gpu": self.needs_gpu, "verdict": self.verdict,
                "workload": self.workload, "rule": self.rule,
                "measured_run": (None if self.measured_run is None
                                 else self.measured_run.to_dict())}


def cpu_vs_gpu(*, cpu: str, cpu_step_s: float, gpu: str, gpu_step_s: float,
               cpu_peak_basis: str = "", cpu_dtype: str = "fp32",
               job_steps: float | None = None, cpu_request_s: float | None = None,
               gpu_request_s: float | None = None,
               interactive: bool | None = None) -> CpuComparison:
    """Does a job need its GPU? The verdict from the step times on both devices, by the rule of
    its kind of work, which the verdict states.

    ``job_steps``: steps in the whole job (training with a stated amount of work). Otherwise, for
    decoder inference, ``cpu_request_s`` and ``gpu_request_s`` (prefill + decode of one batch) are
    one request. ``interactive`` (default: True for a request without a stated amount of work)
    weighs latency: a person waits for the answer, so the GPU is needed when it is at least
    :data:`INTERACTIVE_SPEEDUP` times faster, or :data:`MIN_USEFUL_SPEEDUP` times faster on a
    request the CPU takes longer than :data:`INTERACTIVE_LATENCY_S` to answer. Batch work weighs
    throughput: no GPU is needed when it is less than :data:`MIN_USEFUL_SPEEDUP` times faster or
    when the CPU finishes the whole job within :data:`SHORT_JOB_S`.
    """
    speedup = cpu_step_s / gpu_step_s
    cpu_job = gpu_job = None
    if job_steps is not None:
        cpu_job, gpu_job = job_steps * cpu_step_s, job_steps * gpu_step_s
    elif cpu_request_s is not None and gpu_request_s is not None:
        cpu_job, gpu_job = cpu_request_s, gpu_request_s
        speedup = cpu_request_s / gpu_request_s
    if interactive is None:
        interactive = job_steps is None and cpu_request_s is not None
    if interactive:
        needs, verdict = _interactive_verdict(gpu, speedup, cpu_job or cpu_step_s,
                                              gpu_job or gpu_step_s)
    else:
        needs, verdict = _batch_verdict(gpu, speedup, cpu_step_s, gpu_step_s, cpu_job, gpu_job)
    return CpuComparison(cpu=cpu, cpu_peak_basis=cpu_peak_basis, cpu_dtype=cpu_dtype,
                         cpu_step_s=cpu_step_s, gpu=gpu, gpu_step_s=gpu_step_s, speedup=speedup,
                         cpu_job_s=cpu_job, gpu_job_s=gpu_job, needs_gpu=needs, verdict=verdict,
                         workload="interactive" if interactive else "batch",
                         rule=INTERACTIVE_RULE if interactive else BATCH_RULE)


#: The rules, as the verdict prints them.
INTERACTIVE_RULE = (f"interactive work (a request a person waits for) is judged by latency: a GPU "
                    f"is needed when it answers >= {INTERACTIVE_SPEEDUP:g}x faster, or >= "
                    f"{MIN_USEFUL_SPEEDUP:g}x faster when the CPU takes over "
                    f"{INTERACTIVE_LATENCY_S:g} s")
BATCH_RULE = (f"batch work is judged by throughput: no GPU is needed when it is < "
              f"{MIN_USEFUL_SPEEDUP:g}x faster or the CPU finishes the whole job within "
              f"{SHORT_JOB_S / 60:g} min")


def _interactive_verdict(gpu: str, speedup: float, cpu_s: float, gpu_s: float) -> tuple[bool, str]:
    times = f"{format_seconds(gpu_s)} on the {gpu} vs {format_seconds(cpu_s)} on this CPU"
    if speedup >= INTERACTIVE_SPEEDUP or (speedup >= MIN_USEFUL_SPEEDUP
                                          and cpu_s > INTERACTIVE_LATENCY_S):
        return True, (f"A GPU pays off for a request a person waits for: the {gpu} answers "
                      f"{speedup:.0f}x faster ({times}) Rule: {INTERACTIVE_RULE}.")
    return False, (f"No GPU needed for this request: {times} ({speedup:.1f}x) "
                   f"[rule: {INTERACTIVE_RULE}]")


def _batch_verdict(gpu: str, speedup: float, cpu_step_s: float, gpu_step_s: float,
                   cpu_job: float | None, gpu_job: float | None) -> tuple[bool, str]:
    rule = f". Rule: {BATCH_RULE}."
    if speedup < 1:
        return False, (
            f"No GPU needed: this CPU is {1 / speedup:.1f}x faster than the {gpu} for this job -- "
            "the work per step is too small to fill the GPU, so kernel-launch and transfer "
            "overheads outweigh its arithmetic" + rule)
    if speedup < MIN_USEFUL_SPEEDUP:
        return False, (
            f"No GPU needed: the {gpu} would be only {speedup:.1f}x faster than this CPU "
            f"({format_seconds(gpu_step_s)} vs {format_seconds(cpu_step_s)} per step)" + rule)
    if cpu_job is not None and cpu_job < SHORT_JOB_S:
        return False, (
            f"No GPU needed: this CPU finishes the whole job in {format_seconds(cpu_job)} "
            f"(the {gpu}: {format_seconds(gpu_job)})" + rule)
    return True, (
        f"A GPU pays off: the {gpu} is {speedup:.0f}x faster than this CPU "
        f"({format_seconds(gpu_step_s)} vs {format_seconds(cpu_step_s)} per step"
        + (f"; whole job {format_seconds(gpu_job)} vs {format_seconds(cpu_job)}"
           if cpu_job is not None else "") + ")" + rule)


# --------------------------------------------------------------------------------------------------
# One matmul: CPU against GPU


@record
class MatmulComparison:
    """One matrix product on a GPU (its occupancy and time, copies included) and on this machine's
    CPU, and which is faster."""

    gpu: str
    small: SmallWork
    """How much of the GPU the product's outputs occupy."""
    gpu_time: MatmulTime
    cpu_time: MatmulTime | None
    """None when this machine's CPU has no peak estimate."""
    verdict: str | None
    """None without a CPU time."""
    gpu_faster: bool | None
    speedup: float | None
    """CPU time / GPU time, end to end."""
    measured_runs: tuple[RunUse, ...] = ()
    """The stored bench runs read, GPU side first (used, or noisy and left out)."""

    @property
    def times(self) -> tuple[MatmulTime, ...]:
        """GPU first, then the CPU when timed."""
        return (self.gpu_time,) if self.cpu_time is None else (self.gpu_time, self.cpu_time)


def matmul_verdict(gpu: str, *, gpu_s: float, gpu_compute_s: float,
                   cpu_s: float) -> tuple[bool, str]:
    """(GPU faster?, one line) for one product taking ``gpu_s`` end to end on the GPU (of which
    ``gpu_compute_s`` is arithmetic) and ``cpu_s`` on this CPU. A tie goes to the CPU."""
    if cpu_s <= gpu_s:
        return False, (f"No GPU needed for this product: this CPU ({format_seconds(cpu_s)}) "
                       f"beats the {gpu} end to end ({format_seconds(gpu_s)}, of which launches "
                       f"and copies {format_seconds(gpu_s - gpu_compute_s)})")
    return True, (f"The {gpu} is {cpu_s / gpu_s:.1f}x faster than this CPU end to end "
                  f"({format_seconds(gpu_s)} vs {format_seconds(cpu_s)})")


def compare_matmul(mm: MatmulCount, gpu: GPU, *, dtype: str = "fp32",
                   tile: tuple[int, int] = DEFAULT_TILE, cpu: CPU | None = None,
                   measured: Any | None | Literal["auto"] = "auto",
                   use_noisy_bench: bool = False) -> MatmulComparison:
    """Time ``mm`` on ``gpu`` in ``dtype`` (with the copies in and out) and, in fp32, on ``cpu``
    (skipped when None or when it has no peak estimate), with the achievable fractions of
    ``measured`` (``"auto"``: this machine's latest stored bench run; its noisy measurements only
    with ``use_noisy_bench``; ``measured_runs`` says which run was read)."""
    dev = device_from_gpu(gpu)
    if not dev.supports(dtype):
        have = ", ".join(d for d in ("fp32", "tf32", "bf16", "fp16", "fp8", "int8")
                         if dev.supports(d))
        raise UnsupportedError(f"{gpu.name} has no {dtype} support (it has {have}); "
                               f"use another {opt('dtype')}", field="dtype", value=dtype,
                               accepted=have)
    small = small_work(mm.m, mm.n, gpu, batch=mm.batch, tile=tile)
    measured = resolve_measured(measured, use_noisy=use_noisy_bench)
    dev, eff, used = measured_apply(dev, default_efficiency(dev), measured)
    runs = [used]
    g = time_matmul(mm, dev, eff, dtype)
    c = verdict = faster = speedup = None
    if cpu is not None and cpu.peak_fp32_flops:
        cpu_dev = device_from_cpu(cpu)
        cpu_dev, ceff, cpu_used = measured_apply(cpu_dev, default_efficiency(cpu_dev), measured)
        runs.append(cpu_used)
        c = time_matmul(mm, cpu_dev, ceff, "fp32")
        faster, verdict = matmul_verdict(gpu.name, gpu_s=g.total_s, gpu_compute_s=g.compute_s,
                                         cpu_s=c.total_s)
        speedup = c.total_s / g.total_s
    return MatmulComparison(gpu=gpu.name, small=small, gpu_time=g, cpu_time=c, verdict=verdict,
                            gpu_faster=faster, speedup=speedup,
                            measured_runs=tuple(r for r in runs if r is not None))
