"""Activation memory, KV cache and the transient buffers of a step.

This module answers, for a known architecture, batch and sequence: what is alive at the end of the
forward pass, at the peak of the backward pass, and during the optimizer step; and for inference,
the KV cache and the working set of prefill and decode. When the architecture or the batch is not
known it says so rather than guessing: the line is zero and a note explains why.
"""

from __future__ import annotations

from dataclasses import dataclass

from .job import Job
from .models import Model

__all__ = [
    "TrainActivations", "InferActivations", "train_activations", "infer_activations",
    "kv_cache_bytes", "optimizer_step_temporaries",
]


@dataclass(frozen=True, kw_only=True)
class TrainActivations:
    """Activation memory of one training micro-step, at the phases the timeline needs."""

    known: bool
    """False when the architecture is unknown (the lines are then zero and a note says so)."""
    forward_peak: int = 0
    forward_temporaries: int = 0
    forward_detail: str = ""
    backward_peak: int = 0
    backward_temporaries: int = 0
    backward_grads: int = 0
    """Gradient bytes already present at the backward peak."""
    backward_detail: str = ""
    summary: str = ""
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class InferActivations:
    peak: int = 0
    peak_phase: str = "decode"
    summary: str = ""
    kv_summary: str = ""
    notes: tuple[str, ...] = ()


def train_activations(model: Model, job: Job, *, grad_bytes: int) -> TrainActivations:
    """Not modeled yet for any architecture: zero, and said."""
    if model.architecture is None:
        return TrainActivations(
            known=False, summary="not included: architecture unknown",
            notes=("activations not included: only a parameter count is known; give a catalog "
                   "name or a config.json for batch/sequence-dependent memory",))
    return TrainActivations(known=False, summary="not modeled yet",
                            notes=("activations not modeled yet",))


def infer_activations(model: Model, job: Job, fmt) -> InferActivations:
    return InferActivations(summary="not modeled yet")


def kv_cache_bytes(model: Model, job: Job, elem_bytes: int) -> int:
    return 0


def optimizer_step_temporaries(job: Job, recipe, opt, trainable: int, model: Model) -> int:
    return 0
