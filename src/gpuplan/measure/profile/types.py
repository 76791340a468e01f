"""Value types of the training-loop profiler: one measured step, and the report.

Pure Python (no torch): a report can be built, serialized, read back and rendered without torch,
which is how rank 0 of a ``torchrun`` job assembles the other ranks' results.
"""

from __future__ import annotations

import math
from dataclasses import asdict, field, fields, replace
from typing import Any, Literal, Mapping, get_args

from ..._record import record

__all__ = [
    "PHASES", "COMPUTE_PHASES", "Phase", "Verdict", "Status", "SCHEMA",
    "StepRecord", "LoaderInfo", "TransferInfo", "GpuInfo", "RankSummary", "EstimateInfo",
    "ProfileReport",
]

#: The parts a step's wall time is split into, in display order.
Phase = Literal["data_wait", "transfer", "forward", "backward", "optimizer", "other"]
PHASES: tuple[str, ...] = get_args(Phase)
#: The phases that do the model's arithmetic.
COMPUTE_PHASES: tuple[str, ...] = ("forward", "backward", "optimizer")

Verdict = Literal["data-loading", "transfer", "host-overhead", "compute"]
Status = Literal["complete", "stopped", "error", "interrupted"]

#: Version tag of the JSON layout (``ProfileReport.to_dict``).
SCHEMA = "gpuplan.profile/1"


@record
class StepRecord:
    """One measured step: from one batch fetch to the next (or, without a DataLoader, from one
    forward that follows an optimizer step to the next)."""

    index: int
    """Position among all steps the profiler saw, warm-up included (0-based)."""
    duration_s: float
    """Wall time of the step. On CUDA: from the moment both the host and the GPU were done with
    the previous step to the moment both were done with this one."""
    parts_s: Mapping[str, float]
    """Seconds attributed to each phase (keys :data:`PHASES`); they sum to ``duration_s``."""
    samples: int | None = None
    """Batch size (first dimension of the batch), None when it could not be read."""
    tokens: int | None = None
    """Token positions in the batch, None when unknown."""
    positions: int | None = None
    """Sequence positions the model computes on, padding included (B x S of the batch's
    ``input_ids`` or first integer (B, S) tensor; ``tokens_per_sample`` x samples when given), None
    when no sequence dimension was seen. The speed-model estimate uses it for the sequence length."""
    h2d_bytes: int = 0
    """Bytes copied host -> device during the step."""
    d2h_bytes: int = 0
    """Bytes copied device -> host during the step."""
    pageable_bytes: int = 0
    """Of ``h2d_bytes``, the bytes that came from pageable (not pinned) host memory."""
    non_blocking_bytes: int = 0
    """Of ``h2d_bytes``, the bytes copied with ``non_blocking=True``."""
    copies: int = 0
    """Number of device copies observed."""
    overhead_s: float = 0.0
    """Time spent inside the profiler's own hooks during the step."""
    gpu_busy_min_s: float | None = None
    """Lower bound of the time the GPU was busy (CUDA only; see docs/profile.md)."""
    gpu_busy_max_s: float | None = None
    """Upper bound of the time the GPU was busy (CUDA only)."""
    host_paced_s: float | None = None
    """Of the forward/backward/optimizer time, the part in which the GPU was not proven busy: the
    host's launching (or a synchronizing call) set the pace (CUDA only)."""
    other_gpu_busy_s: float | None = None
    """Of the 'other' time, the part in which the GPU was proven busy -- device work issued outside
    the root module, e.g. a loss computed with torch.nn.functional (CUDA only)."""


@record
class LoaderInfo:
    """The data source that fed the measured steps."""

    kind: str
    """``DataLoader`` or the iterable's type name."""
    num_workers: int | None = None
    prefetch_factor: int | None = None
    pin_memory: bool | None = None
    persistent_workers: bool | None = None
    batch_size: int | None = None


@record
class TransferInfo:
    """Device copies per measured step."""

    h2d_bytes_per_step: float
    d2h_bytes_per_step: float
    copies_per_step: float
    pageable_fraction: float | None
    """Share of host->device bytes that came from pageable memory (None: no such copies)."""
    non_blocking_fraction: float | None
    """Share of host->device bytes copied with ``non_blocking=True``."""
    bandwidth_bytes_per_s: float | None
    """Bytes moved per second of attributed transfer time (None when no transfer time)."""


@record
class GpuInfo:
    """What the CUDA device did (from events and the caching allocator's statistics)."""

    name: str
    index: int
    total_memory_bytes: int | None
    peak_allocated_bytes: int | None
    """``torch.cuda.max_memory_allocated`` over the profile (peak stats are reset at its start)."""
    peak_reserved_bytes: int | None
    """``torch.cuda.max_memory_reserved`` over the profile."""
    busy_fraction_min: float
    """GPU busy at least this share of the step time (event bounds)."""
    busy_fraction_max: float
    """GPU busy at most this share of the step time (event bounds)."""
    host_paced_fraction: float
    """Share of the step time in which forward/backward/optimizer were paced by the host."""


@record
class RankSummary:
    """One rank's result in a distributed run."""

    rank: int
    steps: int
    step_time_s: float | None
    verdict: str | None
    breakdown: Mapping[str, float | None]
    samples_per_s: float | None
    status: str


@record
class EstimateInfo:
    """The estimated step time the measurement is compared with, and what it rests on.

    ``source='speed-model'``: gpuplan's speed model (``gpuplan.compute.estimate_speed``) for the
    architecture, device, batch, sequence length and recipe listed here, each with where it came
    from. ``source='given'``: a number (or a function's result) the user supplied; the other fields
    are then None.
    """

    source: Literal["speed-model", "given"]
    """Who made the estimate."""
    step_time_s: float
    """The estimated step: kernels + launch overhead + the exposed input copy (speed model)."""
    basis: Literal["architecture", "parameter-count", "given"]
    """``architecture``: per-op FLOPs and bytes of the named architecture; ``parameter-count``:
    the speed model's count-only path (2·N FLOPs per token forward, 6·N with backward, weights
    read once, no attention term) -- a rough, optimistic figure."""
    model: str | None = None
    """The architecture's (or count-only model's) name."""
    model_source: str | None = None
    """``plan_model``, ``the nn.Module's transformers config (...)`` or ``parameter count of the
    nn.Module``."""
    params: int | None = None
    """Parameters the estimate counts (the architecture's, or the module's outside embedding
    tables for ``parameter-count``)."""
    device: str | None = None
    """Catalog GPU SKU, or this machine's CPU model name."""
    device_kind: Literal["gpu", "cpu"] | None = None
    """Whether ``device`` is a catalog GPU or this machine's CPU."""
    device_source: str | None = None
    """How the device was identified: the exact CUDA device name, the ``gpu`` argument, or this
    machine's CPU (``gpuplan.hardware.cpu``)."""
    mode: Literal["train", "forward"] | None = None
    """``train`` when backward or optimizer steps were measured, else forward passes."""
    precision: str | None = None
    """The speed model's recipe (training) or weight format (forward); ``fp32`` on the CPU."""
    precision_source: str | None = None
    """How the recipe was found (autocast dtype and parameter dtype seen, or the argument)."""
    tf32: bool = False
    """fp32 matmuls at the TF32 peak (TF32 was allowed in the run)."""
    batch: int | None = None
    """Samples per step (the most common measured batch)."""
    seq: int | None = None
    """Sequence length (measured positions per sample, padding included)."""
    optimizer: str | None = None
    """The speed model's optimizer name (training only)."""
    optimizer_source: str | None = None
    """Which optimizer type was seen, or what was assumed."""
    attention: str | None = None
    """``flash`` (fused) or ``eager`` attention (architecture basis only)."""
    recompute: str | None = None
    """Activation recompute, ``none`` or ``full`` (training on an architecture only)."""
    input_bytes_per_step: int | None = None
    """Host-to-device bytes per step the estimate copies (the measured ones)."""
    pinned: bool | None = None
    """Whether the estimate's copy is from pinned memory (None on the CPU)."""
    compute_s: float | None = None
    """The estimate's forward + backward + optimizer kernels and launches, without the copy."""
    transfer_exposed_s: float | None = None
    """The estimate's input copy time not hidden behind compute."""
    measured_compute_s: float | None = None
    """Median measured forward + backward + optimizer time per step."""
    measured_compute_over_expected: float | None = None
    """``measured_compute_s / compute_s``."""
    bound: str | None = None
    """``compute`` or ``memory``: where the estimate's step spends most of its time (GPU)."""
    model_flops_per_step: float | None = None
    """Counted matmul FLOPs per step (the MFU numerator)."""
    peak_flops: float | None = None
    """The device's dense peak for the compute dtype (the CPU: its estimated or measured peak)."""
    measured_mfu: float | None = None
    """Model FLOPs per step / (measured median step time x peak)."""
    efficiency: Mapping[str, Any] | None = None
    """The achievable fractions used, with ``basis`` (where each number comes from) and
    ``measured`` (the fields taken from a ``gpuplan bench`` run)."""
    notes: tuple[str, ...] = ()
    """What the estimate assumed or could not see, one sentence each."""


@record
class ProfileReport:
    """What the training loop spent its time on, the verdict, and what to change.

    A value: :func:`gpuplan.report.profile.render_text` renders it as text; :meth:`to_dict` is the
    documented JSON layout.
    """

    verdict: Verdict
    """Which part bounds the step: ``data-loading``, ``transfer``, ``host-overhead`` or ``compute``."""
    steps: int
    """Measured steps (after the warm-up)."""
    step_time_s: float
    """Median wall time of a measured step."""
    step_time_p10_s: float
    step_time_p90_s: float
    overhead_fraction: float
    """The profiler's own cost: median over the measured steps of (time inside its hooks / the
    step's time). See benchmarks/profile_overhead_results.md for the A/B check."""
    breakdown: Mapping[str, float | None]
    """Fraction of the total step time per phase (keys :data:`PHASES`); they sum to 1.
    ``data_wait`` is None when no DataLoader/wrapped loader was seen (unknown, not zero)."""
    breakdown_median_s: Mapping[str, float | None]
    """Median seconds per step per phase (each phase's own median: they need not add up to the
    median step, and their ratios are not the shares of ``breakdown``)."""
    breakdown_mean_s: Mapping[str, float | None] = field(default_factory=dict)
    """Mean seconds per step per phase: the totals ``breakdown`` is the share of, over the
    steps; they add up to ``step_time_mean_s``. The text report's phase table shows these."""
    step_time_mean_s: float | None = None
    """Mean wall time of a measured step (the total over the steps)."""
    device: str
    """``cpu`` or ``cuda:N``."""
    device_name: str
    warmup_steps: int
    status: Status = "complete"
    samples_per_s: float | None = None
    tokens_per_s: float | None = None
    samples_per_step: float | None = None
    tokens_source: str | None = None
    """How tokens were counted (e.g. ``batch['input_ids'] (B, S), padded``)."""
    transfer: TransferInfo | None = None
    gpu: GpuInfo | None = None
    loader: LoaderInfo | None = None
    expected_step_time_s: float | None = None
    """The estimate the measurement is compared with (speed model or user given)."""
    measured_over_expected: float | None = None
    estimate: EstimateInfo | None = None
    """Where ``expected_step_time_s`` comes from: the speed model's inputs and basis, or ``given``."""
    estimate_unavailable: str | None = None
    """Why there is no speed-model estimate (e.g. a GPU not in the catalog), one line; None when
    there is one, or when no estimate was asked for."""
    evidence: tuple[str, ...] = ()
    """The numbers behind the verdict, one sentence each."""
    advice: tuple[str, ...] = ()
    """What to change, following from the numbers, most important first."""
    notes: tuple[str, ...] = ()
    """What was not measured or was left out, and why."""
    rank: int | None = None
    """The rank this report's numbers come from (None: not distributed)."""
    world_size: int = 1
    ranks: tuple[RankSummary, ...] = ()
    """Every rank's summary (distributed runs only)."""
    slowest_rank: int | None = None
    rank_spread: float | None = None
    """(slowest - fastest) / fastest median step time across ranks."""
    per_step: tuple[StepRecord, ...] = field(default=(), repr=False)
    """The measured steps, in order."""

    # -- views ---------------------------------------------------------------------------------
    @property
    def data_wait_known(self) -> bool:
        return self.breakdown.get("data_wait") is not None

    # -- serialization ---------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The JSON layout (schema ``gpuplan.profile/1``); numbers in seconds, bytes, fractions."""
        d = asdict(self)
        d = {"schema": SCHEMA, **d, "data_wait_known": self.data_wait_known}
        unknown_wait = not self.data_wait_known
        for step in d["per_step"]:
            step["parts_s"] = dict(step["parts_s"])
            if unknown_wait:
                step["parts_s"]["data_wait"] = None
        for key in ("evidence", "advice", "notes"):
            d[key] = list(d[key])
        d["ranks"] = [dict(r, breakdown=dict(r["breakdown"])) for r in d["ranks"]]
        d["breakdown"] = dict(self.breakdown)
        d["breakdown_median_s"] = dict(self.breakdown_median_s)
        d["breakdown_mean_s"] = dict(self.breakdown_mean_s)
        if d["estimate"] is not None:
            d["estimate"]["notes"] = list(d["estimate"]["notes"])
        return _finite(d)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ProfileReport":
        """Read back :meth:`to_dict` output (e.g. another rank's result)."""
        kw = {f.name: d[f.name] for f in fields(cls) if f.name in d}
        for key, typ in (("transfer", TransferInfo), ("gpu", GpuInfo), ("loader", LoaderInfo),
                         ("estimate", EstimateInfo)):
            if kw.get(key) is not None:
                kw[key] = typ(**kw[key])
        steps = []
        for s in kw.get("per_step", ()):
            parts = {k: (0.0 if v is None else v) for k, v in s["parts_s"].items()}
            steps.append(StepRecord(**{**s, "parts_s": parts}))
        kw["per_step"] = tuple(steps)
        if kw.get("estimate") is not None:
            kw["estimate"] = replace(kw["estimate"], notes=tuple(kw["estimate"].notes))
        kw["ranks"] = tuple(RankSummary(**r) for r in kw.get("ranks", ()))
        for key in ("evidence", "advice", "notes"):
            kw[key] = tuple(kw.get(key, ()))
        return cls(**kw)


def _finite(obj: Any) -> Any:
    """JSON has no NaN/inf: such values become None."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj
