"""The result types of the accounting: one row of the table (:class:`Line`), and the per-GPU
memory of a training job (:class:`TrainMemory`) and of a serving job (:class:`InferMemory`)."""

from __future__ import annotations

from dataclasses import field

from .._record import record
from .overhead import Overhead

__all__ = ["Line", "TrainMemory", "InferMemory"]


@record
class Line:
    """One row of the accounting table."""

    key: str
    label: str
    bytes: int
    bytes_per_param: float | None = None
    """Bytes per model parameter, where the line is a per-parameter cost."""
    note: str = ""
    at_peak: str = ""
    """Set when the line holds less than its full size at the peak phase: where its bytes are
    then (freed, not allocated yet, in host memory), so that a zero beside a bytes-per-parameter
    figure is never read as a bug."""


@record
class TrainMemory:
    """Per-GPU memory of a training job, at its peak."""

    precision: str
    optimizer: str
    params: int
    trainable_params: int
    weights_bytes: int
    gradients_bytes: int
    master_weights_bytes: int
    optimizer_bytes: int
    activations_bytes: int
    temporaries_bytes: int
    """Transient buffers alive at the peak: autocast weight copies, optimizer-step temporaries,
    the loss's fp32 logits and their gradient."""
    gathered_params_bytes: int
    """ZeRO-3/FSDP: the full-size parameters of the wrapped units gathered at once."""
    overhead_bytes: int
    total_bytes: int
    peak_phase: str
    host_bytes: int
    """Host (CPU) memory per GPU process for offloaded optimizer state."""
    overhead: Overhead
    lines: tuple[Line, ...]
    notes: tuple[str, ...] = ()
    activations_known: bool = True
    phases: dict[str, int] = field(default_factory=dict)
    """Total bytes at each phase of the step (the peak is the largest)."""
    activation_detail: dict = field(default_factory=dict)
    """Saved-for-backward bytes in total and per layer kind, and where each phase peaks."""
    layout: dict = field(default_factory=dict)
    """The parallel layout (tp, pp, cp, ep, dp, sequence_parallel, pp_schedule, micro_batches,
    vocab_parallel); empty for a data-parallel-only job."""
    stage: dict = field(default_factory=dict)
    """The pipeline stage whose rank peaks highest (the one these numbers are for): its index,
    layers, whether it holds the embedding and the head, micro-batches in flight, and every
    stage's total; empty for a data-parallel-only job."""
    paged_bytes: int = 0
    """Of ``optimizer_bytes``, the states a bitsandbytes paged optimizer keeps in CUDA managed
    memory: on the GPU while they fit (nvidia-smi counts them), evicted to host memory when the
    GPU runs short; torch.cuda.memory_stats never counts them."""

    def paged_overflow_bytes(self, usable_bytes: int) -> int:
        """Of :attr:`paged_bytes`, what does not fit in ``usable_bytes`` of GPU memory beside
        the rest of the step (``total_bytes`` less the paged states): evicted to host memory and
        migrated back when the optimizer touches it, every step; 0 where it all fits."""
        held = self.total_bytes - self.paged_bytes
        return max(0, self.paged_bytes - (usable_bytes - held)) if self.paged_bytes else 0

    @property
    def model_states_bytes(self) -> int:
        """Weights + gradients + master copy + optimizer states: the seed's table."""
        return (self.weights_bytes + self.gradients_bytes + self.master_weights_bytes
                + self.optimizer_bytes)

    def per_gpu(self) -> dict[str, int]:
        return {
            "weights_bytes": self.weights_bytes,
            "gradients_bytes": self.gradients_bytes,
            "master_weights_bytes": self.master_weights_bytes,
            "optimizer_bytes": self.optimizer_bytes,
            "activations_bytes": self.activations_bytes,
            "temporaries_bytes": self.temporaries_bytes,
            "gathered_params_bytes": self.gathered_params_bytes,
            "overhead_bytes": self.overhead_bytes,
            "total_bytes": self.total_bytes,
        }

    def to_dict(self) -> dict:
        return {
            "precision": self.precision,
            "optimizer": self.optimizer,
            "trainable_params": self.trainable_params,
            "per_gpu": self.per_gpu(),
            "model_states_bytes": self.model_states_bytes,
            "host_bytes": self.host_bytes,
            "paged_bytes": self.paged_bytes,
            "peak_phase": self.peak_phase,
            "phases": dict(self.phases),
            "activations_known": self.activations_known,
            "activation_detail": dict(self.activation_detail),
            "overhead": self.overhead.to_dict(),
            "lines": [_line_dict(l) for l in self.lines],
            "notes": list(self.notes),
            **_layout_dict(self.layout, self.stage),
        }


@record
class InferMemory:
    """Per-GPU memory of an inference job."""

    precision: str
    params: int
    weights_bytes: int
    kv_cache_bytes: int
    activations_bytes: int
    overhead_bytes: int
    total_bytes: int
    peak_phase: str
    kv_dtype: str
    overhead: Overhead
    lines: tuple[Line, ...]
    notes: tuple[str, ...] = ()
    tensor_parallel: int = 1
    kv_cache_full_bytes: int = 0
    """KV cache once the whole context is cached (the decode phase's)."""
    prompt_tokens: int | None = None
    """Tokens of the prompt per sequence (``--seq``; its default when not given): what the
    prefill processes. None when the architecture is unknown."""
    context_tokens: int | None = None
    """Tokens cached per sequence once decoding ends (``--context``: prompt + generated; the
    prompt when not given): what the KV cache and the decode are sized for."""
    prefill_bytes: int = 0
    """KV cache of the prompt + the prefill working set (the prefill phase, without weights)."""
    decode_bytes: int = 0
    """KV cache of the whole context + one decode step's working set."""
    layout: dict = field(default_factory=dict)
    """The serving layout (tp, pp, ...); empty unless the job sets one."""
    stage: dict = field(default_factory=dict)
    """The pipeline stage whose rank peaks highest; empty unless the job sets a layout."""

    def per_gpu(self) -> dict[str, int]:
        return {
            "weights_bytes": self.weights_bytes,
            "kv_cache_bytes": self.kv_cache_bytes,
            "activations_bytes": self.activations_bytes,
            "overhead_bytes": self.overhead_bytes,
            "total_bytes": self.total_bytes,
        }

    def to_dict(self) -> dict:
        return {
            "precision": self.precision,
            "kv_dtype": self.kv_dtype,
            "tensor_parallel": self.tensor_parallel,
            "per_gpu": self.per_gpu(),
            "peak_phase": self.peak_phase,
            "phases": {"prefill": self.weights_bytes + self.prefill_bytes,
                       "decode": self.weights_bytes + self.decode_bytes},
            "kv_cache_full_bytes": self.kv_cache_full_bytes,
            "prompt_tokens": self.prompt_tokens,
            "context_tokens": self.context_tokens,
            "overhead": self.overhead.to_dict(),
            "lines": [_line_dict(l) for l in self.lines],
            "notes": list(self.notes),
            **_layout_dict(self.layout, self.stage),
        }


def _layout_dict(layout: dict, stage: dict) -> dict:
    """The ``layout`` and ``stage`` keys, present only under a parallel layout."""
    return {"layout": dict(layout), "stage": dict(stage)} if layout else {}


def _line_dict(l: Line) -> dict:
    d = {"key": l.key, "label": l.label, "bytes": l.bytes}
    if l.bytes_per_param is not None:
        d["bytes_per_param"] = l.bytes_per_param
    if l.note:
        d["note"] = l.note
    if l.at_peak:
        d["at_peak"] = l.at_peak
    return d

