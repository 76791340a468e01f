"""Result values of a trace (no torch here: importable by renderers and by ``gpuplan fit``)."""

from __future__ import annotations

from dataclasses import field
from types import MappingProxyType
from typing import Literal, Mapping

from .._record import record

Mode = Literal["train", "infer"]

#: Timeline categories, bottom to top of the stacked plot.
TIMELINE_CATEGORIES = ("parameters", "buffers", "master_weights", "gradients", "optimizer_state",
                       "kv_cache", "activations", "temporaries")


@record
class Emulation:
    """One CUDA behaviour the CPU trace reproduced (DESIGN.md, "emulate CUDA's dispatch")."""

    name: str
    count: int
    """How many times it fired in the reported step (op calls, tensors, blocks)."""
    detail: str
    """What it does, in one line."""

    def to_dict(self) -> dict:
        return {"name": self.name, "count": self.count, "detail": self.detail}


@record
class Measurement:
    """A real run of the same step beside the trace."""

    device: str
    """``cpu`` or the CUDA device's name."""
    method: str
    """How the figure was measured."""
    peak_bytes: int
    """Measured peak: live tensor bytes (CPU, rounded like the trace) or
    ``torch.cuda.max_memory_allocated`` (CUDA)."""
    reserved_bytes: int | None
    """``torch.cuda.max_memory_reserved`` (CUDA only)."""
    ratio: float
    """``peak_bytes`` / the traced total."""
    per_gpu: Mapping[str, int] | None = None
    """Per-category bytes at the measured peak (CPU real runs only)."""
    peak_phase: str | None = None
    phase_peaks: Mapping[str, int] | None = None
    """The highest measured total in each phase (CPU real runs only)."""
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return {"device": self.device, "method": self.method, "peak_bytes": self.peak_bytes,
                "reserved_bytes": self.reserved_bytes, "ratio": round(self.ratio, 6),
                "per_gpu": dict(self.per_gpu) if self.per_gpu is not None else None,
                "peak_phase": self.peak_phase,
                "phase_peaks": dict(self.phase_peaks) if self.phase_peaks is not None else None,
                "seconds": round(self.seconds, 3)}


@record
class TraceResult:
    """What one traced step holds on a GPU, category by category, and where its peak is.

    ``per_gpu`` has the same keys as ``gpuplan fit``'s per-GPU breakdown (``*_bytes``), and
    ``total_bytes`` equals the traced peak.
    """

    model: str
    """The spec as given (catalog name, path, ``file.py:factory``) or the config's model_type."""
    mode: Mode
    batch: int
    seq: int
    """Tokens per sequence (ignored by vision models, whose note says so)."""
    precision: str
    """Training recipe (formats.TRAINING_RECIPES) or inference weight dtype."""
    optimizer: str | None
    """None for inference."""
    optimizer_impl: str | None
    """``foreach`` (CUDA's default), ``fused`` or ``for-loop``; None for inference."""
    checkpointing: str
    """none / selective (attention core recomputed) / full (every layer)."""
    attention: str
    """sdpa (backend chosen as on CUDA) or eager."""
    traced_on: Literal["fake", "cpu-real"]
    """``fake``: FakeTensorMode (shapes only, no storage); ``cpu-real``: real CPU tensors."""
    params: int
    """Parameter count of the built model (tied weights counted once)."""
    per_gpu: Mapping[str, int]
    """Bytes at the peak: train: weights, gradients, master_weights, optimizer, activations,
    temporaries, overhead (0: runtime overhead is the analytic plan's line), total; infer: weights,
    kv_cache, activations, overhead, total."""
    categories: Mapping[str, int]
    """The finer split at the peak (parameters, buffers, activations saved in forward, tensors
    allocated in backward, the autocast weight cache, optimizer-step temporaries ...)."""
    peak_phase: str
    """forward / backward / optimizer (train) or prefill / decode / forward (infer)."""
    peak_module: str
    """The innermost module running when the peak was reached (``(backward)`` when in its
    backward)."""
    peak_event: int
    """Index of the allocation that reached the peak, counted from the start of the reported
    iteration (the timeline's ``event`` axis)."""
    phase_peaks: Mapping[str, int]
    """The highest total reached in each phase."""
    flops_forward: float
    flops_backward: float
    """Backward FLOPs, including the recomputation of checkpointed layers (train only)."""
    flops_decode: float = 0.0
    """One decode step (inference with a KV cache)."""
    unrounded_peak_bytes: int
    """The live bytes at the peak before the 512-byte allocator rounding."""
    timeline: tuple[Mapping[str, object], ...]
    """Downsampled: ``event`` index, ``phase`` and bytes per category (``TIMELINE_CATEGORIES``)."""
    emulations: tuple[Emulation, ...]
    notes: tuple[str, ...] = ()
    measured: Measurement | None = None
    seconds: float = 0.0
    """Wall time of the trace (model build and both iterations)."""
    extra: Mapping[str, object] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def total_bytes(self) -> int:
        return int(self.per_gpu["total_bytes"])

    def to_dict(self) -> dict:
        return {
            "model": self.model, "mode": self.mode, "batch": self.batch, "seq": self.seq,
            "precision": self.precision, "optimizer": self.optimizer,
            "optimizer_impl": self.optimizer_impl, "checkpointing": self.checkpointing,
            "attention": self.attention, "traced_on": self.traced_on, "params": self.params,
            "per_gpu": dict(self.per_gpu), "categories": dict(self.categories),
            "total_bytes": self.total_bytes, "peak_phase": self.peak_phase,
            "peak_module": self.peak_module, "peak_event": self.peak_event,
            "phase_peaks": dict(self.phase_peaks),
            "flops_forward": self.flops_forward, "flops_backward": self.flops_backward,
            "flops_decode": self.flops_decode,
            "unrounded_peak_bytes": self.unrounded_peak_bytes,
            "timeline": [dict(p) for p in self.timeline],
            "emulations": [e.to_dict() for e in self.emulations],
            "notes": list(self.notes),
            "measured": self.measured.to_dict() if self.measured else None,
            "seconds": round(self.seconds, 3),
        }
