"""Throughput against batch size: where adding work to a step stops paying."""

from __future__ import annotations

from typing import Any, Literal, Sequence

from .._record import record
from ..errors import InputError
from ..hardware import GPU
from ..job import Job
from ..models._types import Architecture, Model
from .measured import load_measured
from .speed import estimate_speed

__all__ = ["SweepPoint", "BatchSweep", "batch_sweep"]


@record
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


@record
class BatchSweep:
    """Throughput against batch size: where adding work stops paying."""

    points: tuple[SweepPoint, ...]
    saturation_batch: int
    """Smallest batch reaching ``threshold`` of the sweep's best tokens/s."""
    threshold: float = 0.9

    def to_dict(self) -> dict:
        return {"points": [p.to_dict() for p in self.points],
                "saturation_batch": self.saturation_batch, "threshold": self.threshold}


def batch_sweep(model: Model | Architecture, gpu: GPU, job: Job, *,
                batches: Sequence[int] | None = None, threshold: float = 0.9,
                **kwargs: Any) -> BatchSweep:
    """:func:`estimate_speed` of ``job`` with each of ``batches`` (default 1, 2, 4 ... 1024) as its
    batch; other keyword arguments pass through. Memory is not checked here: ``gpuplan fit`` says
    which of these batches fit."""
    batches = list(batches or [2**i for i in range(11)])
    if not batches:
        raise InputError("batch sweep: give at least one batch size")
    if not 0 < threshold <= 1:
        raise InputError(f"threshold {threshold!r}: expected a fraction in (0, 1]")
    if kwargs.get("measured", "auto") == "auto" and kwargs.get("efficiency") is None:
        kwargs["measured"] = load_measured(use_noisy=bool(kwargs.get("use_noisy_bench")))
    pts = []
    for b in batches:
        e = estimate_speed(model, gpu, job.with_(batch=b), **kwargs)
        pts.append(SweepPoint(batch=b, step_time_s=e.step_time_s, tokens_per_s=e.tokens_per_s,
                              samples_per_s=e.samples_per_s, mfu=e.mfu, bound=e.bound))
    best = max(p.tokens_per_s for p in pts)
    sat = next(p.batch for p in pts if p.tokens_per_s >= threshold * best)
    return BatchSweep(points=tuple(pts), saturation_batch=sat, threshold=threshold)
