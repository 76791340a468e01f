"""Verdicts: does a job fit on each GPU, with how much headroom, and on how many of them.

:func:`plan` is the library's front door: a :class:`~gpuplan.job.Job` and a list of GPUs in, a
frozen :class:`Plan` out (memory per GPU for training and inference, a verdict per GPU, and the
seed's ratio of training to inference memory).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Literal

from .errors import InputError
from .hardware import DEFAULT_SHORTLIST, GPU, resolve_gpu
from .job import Job
from .memory import InferMemory, TrainMemory, infer_memory, train_memory
from .models import Model, load_model
from .memory.overhead import OverheadLevel

if TYPE_CHECKING:  # pragma: no cover
    from .solver import Suggestion, Suggestions

__all__ = ["GpuVerdict", "Plan", "plan", "resolve_model", "resolve_gpus", "MAX_GPUS"]

#: Largest GPU count the "how many GPUs" search considers.
MAX_GPUS = 4096

#: Tensor-parallel degrees tried for inference (within and across nodes).
_TP_DEGREES = (1, 2, 4, 8, 16, 32, 64)

Verdict = Literal["fits", "tight", "does not fit"]


@dataclass(frozen=True, kw_only=True)
class GpuVerdict:
    """How a job sits on one GPU model."""

    name: str
    gpu: GPU
    alias_note: str | None
    usable_bytes: int
    """Device memory as the device reports it; runtime overhead is a line of the job."""
    train_fits: bool | None = None
    train_verdict: Verdict | None = None
    """``tight``: fits with the expected overhead, not with the high end of its band."""
    train_headroom_bytes: int | None = None
    train_min_gpus: int | None = None
    """Smallest number of this GPU that fits the training job with ZeRO-3 (None: none does)."""
    infer_fits: bool | None = None
    infer_verdict: Verdict | None = None
    infer_headroom_bytes: int | None = None
    infer_min_gpus: int | None = None
    """Smallest tensor-parallel degree of this GPU that serves the job (None: none up to 64)."""
    train_max_batch: int | None = None
    """``--max-batch``: the largest micro-batch that fits on one of this GPU (0: not even 1)."""
    infer_max_batch: int | None = None
    """``--max-batch``: the most concurrent sequences that fit (0: not even 1)."""
    train_max_seq: int | None = None
    """``--max-seq``: the longest training sequence that fits (0: not even 1 token)."""
    infer_max_seq: int | None = None
    """``--max-seq``: the longest context (prompt + generated) that fits (0: not even 1)."""

    def to_dict(self) -> dict:
        d = {
            "name": self.name,
            "usable_bytes": self.usable_bytes,
            "train_fits": self.train_fits,
            "infer_fits": self.infer_fits,
            "train_verdict": self.train_verdict,
            "infer_verdict": self.infer_verdict,
            "train_headroom_bytes": self.train_headroom_bytes,
            "infer_headroom_bytes": self.infer_headroom_bytes,
            "train_min_gpus_zero3": self.train_min_gpus,
            "infer_min_gpus_tensor_parallel": self.infer_min_gpus,
        }
        for key in ("train_max_batch", "infer_max_batch", "train_max_seq", "infer_max_seq"):
            v = getattr(self, key)
            if v is not None:
                d[key] = v
        if self.alias_note:
            d["alias_note"] = self.alias_note
        return d


@dataclass(frozen=True, kw_only=True)
class Plan:
    """Everything gpuplan knows about a job's memory, and a verdict per GPU."""

    job: Job
    model: Model
    train: TrainMemory | None
    infer: InferMemory | None
    gpus: tuple[GpuVerdict, ...]
    notes: tuple[str, ...] = ()
    extra: dict = field(default_factory=dict)
    """Sections added by other analyses (speed, trace) keyed by name."""
    solver: tuple["Suggestions", ...] = ()
    """What to change, per GPU and mode, where the solver ran (see :func:`plan`)."""

    @property
    def suggestions(self) -> tuple["Suggestion", ...]:
        """Every suggested change, for every GPU the solver ran on, best first per GPU."""
        return tuple(s for r in self.solver for s in r.suggestions)

    @property
    def train_to_infer_ratio(self) -> float | None:
        """The seed's ratio: training model states over inference weights ("8x", "28x")."""
        if self.train is None or self.infer is None or self.infer.weights_bytes == 0:
            return None
        return self.train.model_states_bytes / self.infer.weights_bytes

    def to_dict(self) -> dict:
        m = self.model
        arch = m.architecture
        model = {
            "name": m.name,
            "params": m.params.total,
            "active_params": m.params.active,
            "params_by_component": dict(m.params.by_component),
            "source": m.source,
        }
        if arch is not None:
            model.update(family=arch.family, layers=arch.num_layers, hidden_size=arch.hidden_size,
                         heads=arch.num_heads, kv_heads=arch.num_kv_heads, vocab_size=arch.vocab_size,
                         max_position_embeddings=arch.max_position_embeddings)
        out: dict = {"model": model, "job": _job_dict(self.job)}
        if self.train is not None:
            out["train"] = self.train.to_dict()
        if self.infer is not None:
            out["infer"] = self.infer.to_dict()
        ratio = self.train_to_infer_ratio
        if ratio is not None:
            out["train_to_infer_ratio"] = ratio
        out["gpus"] = [g.to_dict() for g in self.gpus]
        out["suggestions"] = [s.to_dict() for s in self.suggestions]
        if self.solver:
            out["solver"] = [{k: v for k, v in r.to_dict().items() if k != "suggestions"}
                             for r in self.solver]
        out["notes"] = list(self.notes)
        out.update(self.extra)
        return out


def _job_dict(job: Job) -> dict:
    """The ``"job"`` object: every Job field, serialized by the Job itself."""
    return job.to_dict()


def resolve_model(model: str | Model) -> Model:
    return model if isinstance(model, Model) else load_model(model)


def resolve_gpus(gpus: Iterable[str | GPU] | None) -> list[tuple[GPU, str | None]]:
    names = DEFAULT_SHORTLIST if gpus is None else gpus
    out = []
    for g in names:
        out.append((g, None) if isinstance(g, GPU) else resolve_gpu(g))
    return out


def _total_at(mem: TrainMemory | InferMemory, level: OverheadLevel) -> int:
    """The job's total with the runtime overhead taken at ``level`` of its band: the tensors are
    the same at every level, so only the overhead line changes."""
    return mem.total_bytes - mem.overhead_bytes + sum(i.at(level) for i in mem.overhead.items)


def _verdict(total_expected: int, total_high: int, usable: int) -> Verdict:
    if total_expected > usable:
        return "does not fit"
    return "fits" if total_high <= usable else "tight"


def _min_train_gpus(model: Model, job: Job, usable: int, level: OverheadLevel,
                    overrides=None, memo: dict | None = None) -> int | None:
    """Smallest N with ZeRO-3 over N GPUs such that one GPU's peak fits. Per-GPU memory falls as
    N grows (for N >= 2), so a binary search over [2, MAX_GPUS] finds it. ``memo`` shares the
    per-N totals between the GPUs of one plan."""
    memo = {} if memo is None else memo
    # under a parallel layout N counts in whole model replicas (tp x pp x cp GPUs each), and
    # dp x cp must hold the expert-parallel group
    unit = job.tp * job.pp * job.cp * (job.ep // math.gcd(job.ep, job.cp))

    def fits(k: int) -> bool:
        n = k * unit
        if n not in memo:
            # the same job with valid values changed: no need to validate it again
            memo[n] = train_memory(model, job._evolve(zero=3 if k > 1 else job.zero, gpus=n),
                                   overhead_level=level,
                                   overhead_overrides=overrides).total_bytes
        return memo[n] <= usable

    top = MAX_GPUS // unit
    if top < 1:
        return None
    if fits(1):
        return unit
    if top < 2 or not fits(top):
        return None
    lo, hi = 2, top  # fits(hi) holds
    while lo < hi:
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo * unit


def _min_infer_gpus(model: Model, job: Job, usable: int, level: OverheadLevel,
                    overrides=None, memo: dict | None = None) -> int | None:
    memo = {} if memo is None else memo
    layout = job.tp * job.pp * job.cp * job.ep > 1
    for tp in _TP_DEGREES:
        if tp not in memo:
            if layout:  # the job's own layout with this TP degree: GPUs = tp x pp
                try:
                    memo[tp] = infer_memory(model, job.with_(tp=tp, gpus=tp * job.pp,
                                                             sequence_parallel=False),
                                            overhead_level=level,
                                            overhead_overrides=overrides).total_bytes
                except InputError:  # heads or widths do not split over this degree
                    memo[tp] = None
            else:
                memo[tp] = infer_memory(model, job, tensor_parallel=tp, overhead_level=level,
                                        overhead_overrides=overrides).total_bytes
        if memo[tp] is not None and memo[tp] <= usable:
            return tp * (job.pp if layout else 1)
    return None


def _query(fn, *args, **kw) -> int:
    """A max-batch / max-seq answer; 0 when not even the smallest fits."""
    try:
        return fn(*args, **kw)
    except InputError:
        return 0


def _mark_fit(section: dict, verdicts: list[GpuVerdict]) -> None:
    """Say, in each speed row, whether the job fits the GPU it was timed on (compute cannot know:
    it never imports the memory accounting)."""
    by_name = {v.name: v for v in verdicts}
    for row in section["gpus"]:
        v = by_name.get(row["gpu"])
        for mode in ("train", "infer"):
            head = row.get(mode)
            fits = getattr(v, f"{mode}_fits", None) if v is not None else None
            if head is None or fits is None:
                continue
            head["fits_gpu"] = fits
            if not fits:
                head.setdefault("caveats", []).insert(0, (
                    "does not fit this GPU's memory: the speed is of a job that would not run "
                    "as configured (see the memory verdict and suggestions)"))


def plan(job: Job, gpus: Iterable[str | GPU] | None = None, *,
         overhead_level: OverheadLevel = "expected", search_gpu_counts: bool = True,
         overhead_overrides=None, suggest: bool | None = None, max_batch: bool = False,
         max_seq: bool = False, top: int = 3, speed: bool = False) -> Plan:
    """Memory of ``job`` per GPU and a verdict for each of ``gpus`` (default: a shortlist).

    ``suggest``: run the solver (:mod:`gpuplan.solver`) for every GPU -- ``True``; only for the
    GPUs named in ``gpus`` on which the job does not fit -- ``None`` (the default: nothing runs
    for the default shortlist); never -- ``False``. ``max_batch`` / ``max_seq`` answer the direct
    queries for each GPU. ``speed``: add the speed model's headline numbers per GPU
    (``plan.extra["speed"]``, :func:`gpuplan.compute.speed_section`).
    """
    from . import solver as _solver

    model = resolve_model(job.model)
    resolved = resolve_gpus(gpus)
    kw = dict(overhead_level=overhead_level, overhead_overrides=overhead_overrides)
    mems = {}
    if job.trains:
        mems["train"] = train_memory(model, job, **kw)
    if job.infers:
        mems["infer"] = infer_memory(model, job, **kw)
    searches = {"train": _min_train_gpus, "infer": _min_infer_gpus}
    memos: dict[str, dict] = {mode: {} for mode in mems}
    verdicts = []
    reports = []
    for gpu, note in resolved:
        usable = gpu.memory_bytes
        v: dict = {}
        for mode, mem in mems.items():
            fits = mem.total_bytes <= usable
            v.update({
                f"{mode}_fits": fits,
                f"{mode}_verdict": _verdict(mem.total_bytes, _total_at(mem, "high"), usable),
                f"{mode}_headroom_bytes": usable - mem.total_bytes,
                f"{mode}_min_gpus": (searches[mode](model, job, usable, overhead_level,
                                                   overhead_overrides, memos[mode])
                                     if search_gpu_counts else None),
            })
            mjob = job.with_(mode=mode)
            if max_batch:
                v[f"{mode}_max_batch"] = _query(_solver.max_batch, model, mjob, gpu, mode=mode,
                                                **kw)
            if max_seq and model.architecture is not None \
                    and model.architecture.kind != "vision":
                v[f"{mode}_max_seq"] = _query(_solver.max_seq, model, mjob, gpu, mode=mode, **kw)
            run = suggest is True or (suggest is None and gpus is not None and not fits)
            if run:
                reports.append(_solver.suggest(model, mjob, gpu, mode=mode, top=top, **kw))
        verdicts.append(GpuVerdict(name=gpu.name, gpu=gpu, alias_note=note, usable_bytes=usable,
                                   **v))
    train, infer = mems.get("train"), mems.get("infer")
    notes = tuple(model.notes)
    extra: dict = {}
    if speed:
        from .compute import speed_section

        extra["speed"] = speed_section(
            job, [g.gpu for g in verdicts], model=model,
            trainable_params=train.trainable_params if train is not None else None)
        _mark_fit(extra["speed"], verdicts)
    return Plan(job=job, model=model, train=train, infer=infer, gpus=tuple(verdicts), notes=notes,
                solver=tuple(reports), extra=extra)
