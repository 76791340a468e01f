"""Two independent answers side by side: the analytic plan and the trace of the same job.

``gpuplan fit ... --trace`` runs the job's real step under fake tensors (:mod:`gpuplan.trace`,
needs torch) and lines the traced bytes up with the planner's, field by field, with the
difference in percent. The planner's runtime-overhead line is left out of the comparison: a trace
records tensors, not the CUDA context or the allocator's slack.
"""

from __future__ import annotations

from dataclasses import field

from ._record import record
from .memory.shape import seq_for
from .fit import Plan
from .job import Job
from .models import Model

__all__ = ["TraceComparison", "compare_with_trace", "untraceable_reason", "COMPARED_FIELDS"]

#: The per-GPU fields compared, per mode (overhead excluded: a trace has none).
COMPARED_FIELDS = {
    "train": ("weights_bytes", "gradients_bytes", "master_weights_bytes", "optimizer_bytes",
              "activations_bytes", "temporaries_bytes", "gathered_params_bytes"),
    "infer": ("weights_bytes", "kv_cache_bytes", "activations_bytes"),
}

#: Inference weight formats the trace can build (dequantized formats are not traced).
_TRACEABLE_INFER = ("bf16", "fp16", "fp32")


@record
class TraceComparison:
    """The analytic and traced per-GPU bytes of one mode of a job."""

    mode: str
    analytic: dict[str, int] = field(default_factory=dict)
    """The planner's per-GPU bytes, runtime overhead excluded (``total_bytes`` too)."""
    traced: dict[str, int] = field(default_factory=dict)
    difference_percent: dict[str, float | None] = field(default_factory=dict)
    """(analytic - traced) / traced x 100 per field; None where the traced value is 0."""
    analytic_phase: str | None = None
    traced_phase: str | None = None
    traced_module: str | None = None
    trace_seconds: float | None = None
    skipped: str | None = None
    """Why this mode was not traced (a feature the trace does not run), else None."""

    def to_dict(self) -> dict:
        if self.skipped:
            return {"mode": self.mode, "skipped": self.skipped}
        return {"mode": self.mode, "analytic": self.analytic, "traced": self.traced,
                "difference_percent": self.difference_percent,
                "analytic_peak_phase": self.analytic_phase, "traced_peak_phase": self.traced_phase,
                "traced_peak_module": self.traced_module, "trace_seconds": self.trace_seconds}


def untraceable_reason(model: Model, job: Job, mode: str) -> str | None:
    """Why the trace cannot run this mode of the job as planned, or None when it can."""
    if model.architecture is None:
        return "only a parameter count is known; the trace builds a real architecture"
    if mode == "train":
        if job.lora_rank is not None:
            return "LoRA adapters are not traced"
        if job.zero and job.gpus > 1:
            return "ZeRO sharding over several GPUs is not traced (the trace runs one GPU)"
        if job.offload_optimizer:
            return "optimizer offload is not traced"
        if job.grad_accum > 1:
            return "gradient accumulation is not traced"
        if job.optimizer_states != "auto":
            return "an optimizer-state dtype other than the recipe's is not traced"
        if job.master_weights != "auto":
            return "a master-copy dtype other than the recipe's is not traced"
        if job.grad_dtype != "auto":
            return "a gradient dtype other than the recipe's is not traced"
    else:
        job = job.resolve_infer(model.architecture)
        if job.infer_precision not in _TRACEABLE_INFER:
            return f"the {job.infer_precision} weight format is not traced (bf16, fp16, fp32 are)"
        if job.kv_dtype is not None and job.kv_dtype not in ("bf16", "fp16", "fp32"):
            return f"a {job.kv_dtype} KV cache is not traced"
        if job.context is not None and job.context != seq_for(model, job):
            return "a KV context other than the prompt length is not traced"
    return None


def _percent(a: int, t: int) -> float | None:
    return None if t == 0 else 100.0 * (a - t) / t


def compare_with_trace(p: Plan) -> tuple[TraceComparison, ...]:
    """Trace each mode of ``p.job`` (needs torch + transformers) and compare with ``p``."""
    from .trace import trace_step

    out = []
    job, model = p.job, p.model
    if p.infer is not None:  # the weight format the plan resolved (auto) and planned
        job = job.with_(infer_precision=p.infer.precision)
    for mode, mem in (("train", p.train), ("infer", p.infer)):
        if mem is None:
            continue
        reason = untraceable_reason(model, job, mode)
        if reason:
            out.append(TraceComparison(mode=mode, skipped=reason))
            continue
        r = trace_step(model, mode=mode, batch=job.batch, seq=seq_for(model, job),
                       precision=job.precision if mode == "train" else job.infer_precision,
                       optimizer=job.optimizer,
                       optimizer_impl="fused" if job.fused_optimizer else "foreach",
                       checkpointing=job.checkpointing, attention=job.attention)
        per = mem.per_gpu()
        fields = COMPARED_FIELDS[mode]
        analytic = {k: per.get(k, 0) for k in fields}
        analytic["total_bytes"] = per["total_bytes"] - per["overhead_bytes"]
        traced = {k: int(r.per_gpu.get(k, 0)) for k in fields}
        traced["total_bytes"] = int(r.total_bytes)
        out.append(TraceComparison(
            mode=mode, analytic=analytic, traced=traced,
            difference_percent={k: _percent(analytic[k], traced[k]) for k in analytic},
            analytic_phase=mem.peak_phase, traced_phase=r.peak_phase,
            traced_module=r.peak_module, trace_seconds=r.seconds))
    return tuple(out)
