"""Print the speed model's op-by-op breakdown of published runs, beside the step they measured.

    PYTHONPATH=src python benchmarks/speed_breakdown.py dle-bert-large-ft-v100-16g-amp [RUN ...]

For each run of ``benchmarks/published/runs.json`` named (a training or decode row that
``validate_speed.predict`` can express): every op of the estimate's step (phase, kind, name,
count, kernels, shape, FLOPs, bytes, compute and memory time, the bound), then the step's time by
class (the linear layers' GEMMs, the attention core's batched GEMMs, the elementwise ops, the
optimizer's passes, the gaps between kernels), the host's issue time, and the step the measured
figure implies (the estimate's step x predicted / measured). This is how the V100 fp16 gap of
issue 31 was read (``validate_speed._volta_gap``); it computes nothing the estimate does not.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import validate_speed  # noqa: E402  (the sibling module, as run from the repository root)

#: The classes a step's time is summed by, in the order printed.
CLASSES = ("gemm", "bmm", "attention", "elementwise", "optimizer")


def op_class(t) -> str:
    """The class an op's time is summed under: ``optimizer`` (the optimizer phase: the step,
    loss scaling, clipping), ``gemm`` (a matmul with weights: the linear layers), ``bmm`` (a
    matmul of two activations: the attention core's QK^T and PV), ``attention`` (a fused
    attention kernel), else ``elementwise``."""
    o = t.op
    if o.phase == "optimizer":
        return "optimizer"
    if o.kind == "matmul":
        return "gemm" if o.weight_elements else "bmm"
    return "attention" if o.kind == "attention" else "elementwise"


def class_totals(phase) -> dict[str, float]:
    """Seconds of ``phase``'s kernels per :data:`CLASSES` entry, and ``gaps``: the device's idle
    time between its kernels (their count x the runtime's gap per kernel)."""
    out = dict.fromkeys(CLASSES, 0.0)
    for t in phase.ops:
        out[op_class(t)] += t.total_s
    out["gaps"] = phase.device_time_s - phase.kernel_time_s
    return out


def breakdown(run: dict) -> tuple[object, object]:
    """(the validation row, the estimate) of ``run``."""
    keep: list = []
    row = validate_speed.predict(run, keep=keep)
    return row, (keep[0] if keep else None)


#: The classes whose kernels run at the tensor peak (the GEMMs and the fused attention): what a
#: lower sustained clock (a power cap) stretches; the elementwise and optimizer passes are
#: memory-bound and keep their time.
TENSOR_CLASSES = ("gemm", "bmm", "attention")


def implied_tensor_stretch(totals: dict[str, float], ratio: float) -> float | None:
    """The factor the tensor-core classes' time (:data:`TENSOR_CLASSES` of ``totals``) would need
    for the estimated step to read the measured one (``ratio`` = predicted / measured rate),
    the rest of the step as estimated: ``1 + (ratio - 1) / share``, ``share`` their part of the
    device time (the classes and the gaps). A reading of the residual, not a model: where the
    step is a layout's, the micro-batch's shares stand for the whole step's. None when no
    tensor-core time is estimated."""
    device = sum(totals.values())
    tensor = sum(totals.get(k, 0.0) for k in TENSOR_CLASSES)
    if tensor <= 0 or device <= 0:
        return None
    return 1.0 + (ratio - 1.0) / (tensor / device)


def op_lines(phase) -> list[str]:
    lines = []
    for t in phase.ops:
        o = t.op
        shape = "x".join(str(d) for d in o.shape) if o.shape else "-"
        lines.append(f"  {o.phase:9} {o.kind:11} {o.name:28} n={o.count:<4} k={o.kernels:<5} "
                     f"{shape:22} {o.flops / 1e9:9.3f} GFLOP {o.bytes / 1e6:9.1f} MB "
                     f"compute {t.compute_s * 1e6:9.1f} us  memory {t.memory_s * 1e6:9.1f} us  "
                     f"total {t.total_s * 1e3:8.3f} ms  {t.bound}")
    return lines


def report(run: dict) -> list[str]:
    row, est = breakdown(run)
    if est is None:
        return [f"== {run['id']}: not expressible ({row.why_not})"]
    step = est.step
    measured_step = est.step_time_s * row.predicted / row.measured
    lines = [f"== {run['id']} on {run['hardware']['gpu']}: predicted {row.predicted:.4g}, "
             f"measured {row.measured:.4g} {row.unit} (ratio {row.ratio:.3f})"]
    lines += op_lines(step)
    totals = class_totals(step)
    lines.append("  by class: " + ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in totals.items()))
    k = implied_tensor_stretch(totals, row.ratio)
    if k is not None:
        lines.append(f"  with the memory-bound kernels as estimated, the tensor-core kernels "
                     f"({', '.join(TENSOR_CLASSES)}) would run {k:.3f}x their estimated time")
    lines.append(f"  step {est.step_time_s * 1e3:.2f} ms (device {step.device_time_s * 1e3:.2f} "
                 f"ms, host issue {step.host_time_s * 1e3:.2f} ms, {step.kernels} kernels); "
                 f"the measured figure implies {measured_step * 1e3:.2f} ms")
    return lines


def main(argv: list[str]) -> int:
    runs = {r["id"]: r for r in json.loads(validate_speed.RUNS.read_text())["runs"]}
    unknown = [a for a in argv if a not in runs]
    if not argv or unknown:
        print(f"name runs of {validate_speed.RUNS.name} (unknown: {', '.join(unknown) or '-'})")
        return 2
    for rid in argv:
        print("\n".join(report(runs[rid])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
