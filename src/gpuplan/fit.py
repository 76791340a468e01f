"""Verdicts: does a job fit on each GPU, with how much headroom, and on how many of them.

:func:`plan` is the library's front door: a :class:`~gpuplan.job.Job` and a list of GPUs in, a
frozen :class:`Plan` out (memory per GPU for training and inference, a verdict per GPU, and the
seed's ratio of training to inference memory).
"""

from __future__ import annotations

import itertools
from dataclasses import field
from typing import TYPE_CHECKING, Iterable, Literal

from ._record import record
from .bounds import check_int
from .errors import InputError, shown
from .hardware import DEFAULT_SHORTLIST, GPU, resolve_gpu
from .job import Job
from .memory import InferMemory, TrainMemory, infer_memory, train_memory
from .models import Model, load_model
from .memory.fewest import (MAX_GPUS, LayoutFit, fewest_tp, fewest_zero3, infer_layout,
                            shared_memo, train_layout)
from .memory.overhead import OverheadLevel, check_overrides

if TYPE_CHECKING:  # pragma: no cover
    from .solver import Suggestion, Suggestions

__all__ = ["GpuVerdict", "Plan", "plan", "resolve_model", "resolve_gpus", "MAX_GPUS"]

Verdict = Literal["fits", "tight", "does not fit"]


@record
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
    train_layout: LayoutFit | None = None
    """The fewest of this GPU that train the job under a TP x PP layout (ZeRO over its
    data-parallel group), where that is fewer than ZeRO-3 alone; None elsewhere
    (:func:`gpuplan.memory.fewest.train_layout`)."""
    infer_layout: LayoutFit | None = None
    """Where TP within one node does not serve the job: the fewest of this GPU with TP within a
    node and pipeline stages across nodes; None elsewhere."""
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
        for mode in ("train", "infer"):
            lay = getattr(self, f"{mode}_layout")
            d[f"{mode}_min_gpus_layout"] = lay.gpus if lay is not None else None
            d[f"{mode}_layout"] = lay.to_dict() if lay is not None else None
        for key in ("train_max_batch", "infer_max_batch", "train_max_seq", "infer_max_seq"):
            v = getattr(self, key)
            if v is not None:
                d[key] = v
        if self.alias_note:
            d["alias_note"] = self.alias_note
        return d


@record
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


#: Most GPUs one plan compares (the catalog has ~45; a list is never the way to spend time).
MAX_PLAN_GPUS = 256


def resolve_gpus(gpus: Iterable[str | GPU] | str | GPU | None) -> list[tuple[GPU, str | None]]:
    """``gpus`` -- one name or GPU, a sequence of them, or None (the shortlist) -- resolved."""
    if isinstance(gpus, (str, GPU)):
        gpus = (gpus,)
    names = DEFAULT_SHORTLIST if gpus is None else gpus
    if isinstance(names, (bytes, dict)) or not isinstance(names, Iterable):
        raise InputError(f"gpus {shown(gpus)}: expected a GPU name, a GPU or a list of them")
    names = list(itertools.islice(names, MAX_PLAN_GPUS + 1))
    if len(names) > MAX_PLAN_GPUS:
        raise InputError(f"gpus: more than {MAX_PLAN_GPUS} GPUs in one plan; compare fewer")
    out = []
    for g in names:
        if not isinstance(g, (str, GPU)):
            raise InputError(f"gpu {shown(g)}: expected a GPU name such as 'h100' or a GPU")
        out.append((g, None) if isinstance(g, GPU) else resolve_gpu(g))
    return out


def _check_plan_args(job: object, overrides: object, **flags: object) -> None:
    """A Job; valid overhead overrides; the switches are bools (``suggest`` may be None); ``top``
    a small whole number."""
    if not isinstance(job, Job):
        raise InputError(f"job {shown(job)}: expected a gpuplan.Job")
    check_overrides(overrides)
    for name, v in flags.items():
        if name == "top":
            check_int(v, "int", what="top", high=1000)
        elif not isinstance(v, bool) and not (name == "suggest" and v is None):
            raise InputError(f"{name} {shown(v)}: expected true or false (got "
                             f"{type(v).__name__})")


def _total_at(mem: TrainMemory | InferMemory, level: OverheadLevel) -> int:
    """The job's total with the runtime overhead taken at ``level`` of its band: the tensors are
    the same at every level, so only the overhead line changes."""
    return mem.total_bytes - mem.overhead_bytes + sum(i.at(level) for i in mem.overhead.items)


def _verdict(total_expected: int, total_high: int, usable: int) -> Verdict:
    if total_expected > usable:
        return "does not fit"
    return "fits" if total_high <= usable else "tight"


def _gpu_counts(model: Model, job: Job, mode: str, usable: int, level: OverheadLevel,
                overrides, memo: dict) -> dict:
    """The "how many of this GPU" answers of one mode: ZeRO-3 alone (training) or tensor
    parallel alone (serving), and the TP x PP layout where it needs fewer GPUs (training) or
    where TP within a node is not enough (serving) -- the searches the solver runs too."""
    if mode == "train":
        n = fewest_zero3(model, job, usable, level, overrides, memo)
        return {"train_min_gpus": n, "train_layout": train_layout(
            model, job, usable, level, overrides, memo, below=n)}
    n = fewest_tp(model, job, usable, level, overrides, memo)
    return {"infer_min_gpus": n, "infer_layout": infer_layout(
        model, job, usable, level, overrides, memo, tp_gpus=n)}


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


def _solver():
    """The solver, imported when a plan runs it (a plain plan never does)."""
    from . import solver

    return solver


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
    _check_plan_args(job, overhead_overrides, search_gpu_counts=search_gpu_counts,
                     suggest=suggest, max_batch=max_batch, max_seq=max_seq, top=top, speed=speed)
    model = resolve_model(job.model)
    resolved = resolve_gpus(gpus)
    kw = dict(overhead_level=overhead_level, overhead_overrides=overhead_overrides)
    mems = {}
    if job.trains:
        mems["train"] = train_memory(model, job, **kw)
    if job.infers:
        mems["infer"] = infer_memory(model, job, **kw)
    memo = shared_memo(model, job, overhead_level, overhead_overrides) if mems else {}
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
            })
            if search_gpu_counts:
                v.update(_gpu_counts(model, job, mode, usable, overhead_level,
                                     overhead_overrides, memo))
            mjob = job.with_(mode=mode)
            if max_batch:
                v[f"{mode}_max_batch"] = _query(_solver().max_batch, model, mjob, gpu, mode=mode,
                                                **kw)
            if max_seq and model.architecture is not None \
                    and model.architecture.kind != "vision":
                v[f"{mode}_max_seq"] = _query(_solver().max_seq, model, mjob, gpu, mode=mode, **kw)
            run = suggest is True or (suggest is None and gpus is not None and not fits)
            if run:
                reports.append(_solver().suggest(model, mjob, gpu, mode=mode, top=top, **kw))
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
