"""The speed model: FLOPs, the roofline, step time, MFU/HFU, small work, transfers, data-parallel
scaling, time and cost to train, and CPU against GPU.

Everything here is arithmetic over the architecture and the catalog (no torch). The achievable
fractions of peak compute and bandwidth are explicit inputs (:class:`Efficiency`), with stated
defaults, replaced by this machine's measured numbers (``gpuplan bench``, read by
:mod:`.measured` with the standard library) when a stored run measured the same device. See
``docs/speed.md`` for every convention and default.

Modules: :mod:`.flops` (counting), :mod:`.device` (peaks and achievable fractions), :mod:`.time`
(roofline, transfers, collectives, time to train), :mod:`.step` (one step built and timed),
:mod:`.speed` (the GPU estimate of a job), :mod:`.cpu` (the CPU estimate and the CPU-vs-GPU
verdicts), :mod:`.sweep` (batch sweep), :mod:`.measured` (stored bench runs).
"""

from __future__ import annotations

from .cpu import (
    MIN_USEFUL_SPEEDUP, SHORT_JOB_S, CpuComparison, CpuEstimate, MatmulComparison,
    compare_matmul, cpu_vs_gpu, estimate_cpu_speed, matmul_verdict,
)
from .device import (
    ASSUMED_CPU_MEMORY_BANDWIDTH, DEFAULT_BASIS, Device, Efficiency, apply_measured,
    default_efficiency, device_from_cpu, device_from_gpu,
)
from .flops import (
    FLASH_BLOCK, OP_CLASSES, FlopsBreakdown, LayerFlops, MatmulCount, Op, StepShape,
    backward_ops, build_forward_ops, causal_score_elements, count_matmul, default_seq,
    flops_breakdown, optimizer_op, recompute_ops,
)
from .measured import MeasuredRun, latest_measured, load_measured
from .speed import (
    KV_BYTES, Phase, SpeedEstimate, estimate_speed, estimate_speed_for_job,
    input_bytes_per_sample, speed_section,
)
from .sweep import BatchSweep, SweepPoint, batch_sweep
from .time import (
    DEFAULT_TILE, MatmulTime, OpTime, RooflineClass, ScalingRow, ScalingTable, SmallWork,
    TrainingTime, TransferEstimate, allreduce_time, data_parallel_scaling, estimate_transfer,
    link_bandwidth, roofline_classes, small_work, step_bound, time_matmul, time_ops,
    time_to_train,
)

__all__ = [
    # FLOP counting
    "MatmulCount", "count_matmul", "Op", "OP_CLASSES", "StepShape", "build_forward_ops",
    "backward_ops", "recompute_ops", "optimizer_op", "FlopsBreakdown", "LayerFlops",
    "flops_breakdown", "causal_score_elements", "FLASH_BLOCK", "default_seq",
    # devices and achievable fractions
    "Device", "Efficiency", "device_from_gpu", "device_from_cpu", "default_efficiency",
    "apply_measured", "load_measured", "DEFAULT_BASIS", "ASSUMED_CPU_MEMORY_BANDWIDTH",
    "MeasuredRun", "latest_measured",
    # time
    "OpTime", "RooflineClass", "time_ops", "roofline_classes", "step_bound",
    "SmallWork", "small_work", "DEFAULT_TILE", "MatmulTime", "time_matmul",
    "TransferEstimate", "estimate_transfer",
    "allreduce_time", "link_bandwidth", "ScalingRow", "ScalingTable", "data_parallel_scaling",
    "TrainingTime", "time_to_train",
    # the estimate
    "Phase", "SpeedEstimate", "CpuEstimate", "CpuComparison", "estimate_speed",
    "estimate_cpu_speed", "estimate_speed_for_job",
    "input_bytes_per_sample", "KV_BYTES", "speed_section",
    "SweepPoint", "BatchSweep", "batch_sweep", "MIN_USEFUL_SPEEDUP", "SHORT_JOB_S",
    # CPU against GPU
    "cpu_vs_gpu", "MatmulComparison", "compare_matmul", "matmul_verdict",
]
