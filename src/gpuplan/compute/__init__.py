"""The speed model: FLOPs, the roofline, step time, MFU/HFU, small work, transfers, data-parallel
scaling, time and cost to train, and CPU against GPU.

Everything here is arithmetic over the architecture and the catalog (no torch). The achievable
fractions of peak compute and bandwidth are explicit inputs (:class:`Efficiency`), with stated
defaults, replaced by this machine's measured numbers (``gpuplan bench``) when a stored run measured
the same device. See ``docs/speed.md`` for every convention and default.
"""

from __future__ import annotations

from .device import (
    ASSUMED_CPU_MEMORY_BANDWIDTH, DEFAULT_BASIS, Device, Efficiency, apply_measured,
    default_efficiency, device_from_cpu, device_from_gpu, load_measured,
)
from .flops import (
    FLASH_BLOCK, OP_CLASSES, FlopsBreakdown, LayerFlops, MatmulCount, Op, StepShape,
    backward_ops, build_forward_ops, causal_score_elements, count_matmul, default_seq,
    flops_breakdown, optimizer_op, recompute_ops,
)
from .speed import (
    KV_BYTES, MIN_USEFUL_SPEEDUP, SHORT_JOB_S, BatchSweep, CpuComparison, CpuEstimate, Phase,
    SpeedEstimate, SweepPoint, batch_sweep, estimate_cpu_speed, estimate_speed,
    estimate_speed_for_job, input_bytes_per_sample, speed_section,
)
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
]
