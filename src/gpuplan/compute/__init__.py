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

#: Where each exported name lives: the package's attributes load on first use (PEP 562), so
#: ``from gpuplan.compute import flops_breakdown`` loads the FLOP counter alone, not the CPU
#: model, the sweep and the rest.
_WHERE = {
    "MIN_USEFUL_SPEEDUP": "cpu", "SHORT_JOB_S": "cpu", "CpuComparison": "cpu",
    "CpuEstimate": "cpu", "MatmulComparison": "cpu", "compare_matmul": "cpu", "cpu_vs_gpu": "cpu",
    "estimate_cpu_speed": "cpu", "matmul_verdict": "cpu",
    "ASSUMED_CPU_MEMORY_BANDWIDTH": "device", "DEFAULT_BASIS": "device", "Device": "device",
    "Efficiency": "device", "apply_measured": "device", "default_efficiency": "device",
    "device_from_cpu": "device", "device_from_gpu": "device",
    "FLASH_BLOCK": "flops", "OP_CLASSES": "flops", "FlopsBreakdown": "flops",
    "LayerFlops": "flops", "MatmulCount": "flops", "Op": "flops", "StepShape": "flops",
    "backward_ops": "flops", "build_forward_ops": "flops", "causal_score_elements": "flops",
    "count_matmul": "flops", "default_seq": "flops", "flops_breakdown": "flops",
    "optimizer_op": "flops", "recompute_ops": "flops",
    "MeasuredRun": "measured", "latest_measured": "measured", "load_measured": "measured",
    "RunUse": "measured", "NOISY_SPREAD": "measured", "resolve_measured": "measured",
    "measured_apply": "device",
    "KV_BYTES": "speed", "Phase": "speed", "SpeedEstimate": "speed", "estimate_speed": "speed",
    "estimate_speed_for_job": "speed", "input_bytes_per_sample": "speed",
    "speed_section": "speed",
    "BatchSweep": "sweep", "SweepPoint": "sweep", "batch_sweep": "sweep",
    "DEFAULT_TILE": "time", "MatmulTime": "time", "OpTime": "time", "RooflineClass": "time",
    "ScalingRow": "time", "ScalingTable": "time", "SmallWork": "time", "TrainingTime": "time",
    "TransferEstimate": "time", "allreduce_time": "time", "data_parallel_scaling": "time",
    "estimate_transfer": "time", "link_bandwidth": "time", "roofline_classes": "time",
    "small_work": "time", "step_bound": "time", "time_matmul": "time", "time_ops": "time",
    "time_to_train": "time",
}


__all__ = [
    # FLOP counting
    "MatmulCount", "count_matmul", "Op", "OP_CLASSES", "StepShape", "build_forward_ops",
    "backward_ops", "recompute_ops", "optimizer_op", "FlopsBreakdown", "LayerFlops",
    "flops_breakdown", "causal_score_elements", "FLASH_BLOCK", "default_seq",
    # devices and achievable fractions
    "Device", "Efficiency", "device_from_gpu", "device_from_cpu", "default_efficiency",
    "apply_measured", "load_measured", "DEFAULT_BASIS", "ASSUMED_CPU_MEMORY_BANDWIDTH",
    "MeasuredRun", "latest_measured", "RunUse", "NOISY_SPREAD", "resolve_measured",
    "measured_apply",
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


def __getattr__(name: str):
    where = _WHERE.get(name)
    if where == "cpu":
        from . import cpu as module
    elif where == "device":
        from . import device as module
    elif where == "flops":
        from . import flops as module
    elif where == "measured":
        from . import measured as module
    elif where == "speed":
        from . import speed as module
    elif where == "sweep":
        from . import sweep as module
    elif where == "time":
        from . import time as module
    else:
        raise AttributeError(f"module 'gpuplan.compute' has no attribute {name!r}")
    return getattr(module, name)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
