"""Verdicts: does a job fit on each GPU, with how much headroom, and on how many of them.

:func:`plan` is the library's front door: a :class:`~gpuplan.job.Job` and a list of GPUs in, a
frozen :class:`Plan` out (memory per GPU for training and inference, a verdict per GPU, and the
seed's ratio of training to inference memory).
"""

from __future__ import annotations

import itertools
from dataclasses import field, replace
from typing import TYPE_CHECKING, Iterable, Literal

from ._record import record
from .errors import InputError, opt, shown, spell_text
from .formats import INFER_AUTO, loads_shipped
from .hardware import DEFAULT_SHORTLIST, GPU, resolve_gpu
from .job import MAX_TOP, Job, flag_arg, int_arg, job_arg
from .engines.budget import SERVING_ENGINES
from .memory import InferMemory, TrainMemory, infer_memory, kv_budget, train_memory
from .memory.train import gpu_non_tn_fp8
from .models import Model, load_model
from .memory.fewest import (MAX_GPUS, LayoutFit, fewest_tp, fewest_zero3, infer_layout,
                            shared_memo, train_layout)
from .memory.overhead import OverheadLevel, check_level, check_overrides

if TYPE_CHECKING:  # pragma: no cover
    from .compute.speed import SpeedSection
    from .memory import KVBudget
    from .solver import Suggestion, Suggestions

__all__ = ["GpuVerdict", "ModeVerdict", "Plan", "plan", "resolve_model", "resolve_gpus", "MAX_GPUS"]

Verdict = Literal["fits", "tight", "does not fit"]


@record
class ModeVerdict:
    """How one mode of the job (training or serving) sits on one GPU."""

    fits: bool
    verdict: Verdict
    """``tight``: fits with the expected overhead, not with the high end of its band."""
    headroom_bytes: int
    min_gpus: int | None = None
    """Training: the fewest of this GPU that fit the job with ZeRO-3 alone; serving: the fewest
    tensor-parallel ranks that serve it (None: none within the searched bound, or not searched)."""
    layout: LayoutFit | None = None
    """The fewest of this GPU under a TP x PP layout (training: ZeRO over its data-parallel
    group, where that is fewer than ZeRO-3 alone; serving: where TP within a node does not
    serve the job), :mod:`gpuplan.memory.fewest`; None elsewhere."""
    max_batch: int | None = None
    """``--max-batch``: the largest micro-batch (serving: concurrent sequences) that fits on one
    of this GPU (0: not even 1)."""
    max_seq: int | None = None
    """``--max-seq``: the longest training sequence / serving context that fits (0: not even 1)."""
    engine_refusal: str | None = None
    """Serving: why the job's engine refuses to start on this GPU although the memory fits
    (:attr:`gpuplan.memory.KVBudget.refusal`, e.g. vLLM's KV cache holding less than one request
    of ``max_model_len``), with :func:`gpuplan.errors.opt` markers; the verdict is then "does
    not fit". None: it starts, or no serving engine's budget was planned."""


#: The JSON key of each mode's count (kept as it was before the verdict was typed).
_MIN_GPUS_KEY = {"train": "train_min_gpus_zero3", "infer": "infer_min_gpus_tensor_parallel"}


@record
class GpuVerdict:
    """How a job sits on one GPU model: one :class:`ModeVerdict` per mode planned."""

    name: str
    gpu: GPU
    alias_note: str | None
    usable_bytes: int
    """Device memory as the device reports it; runtime overhead is a line of the job."""
    train: ModeVerdict | None = None
    infer: ModeVerdict | None = None
    infer_precision: str | None = None
    """The inference weight format planned on this GPU (None: no inference planned): the job's,
    or under ``infer_precision`` auto this GPU's own (:func:`gpuplan.formats.
    resolve_infer_precision` for it alone), so a mixed list plans each GPU in its format."""
    infer_total_bytes: int | None = None
    """The serving total in that format (the plan's ``infer`` is the format every GPU loads)."""
    train_total_bytes: int | None = None
    """This GPU's own training total where it differs from the plan's ``train`` (a per-tensor
    FP8 recipe on a list mixing GPUs whose FP8 GEMMs take any layout with TN-only ones: no
    weight transposes on the former, :func:`gpuplan.memory.train.gpu_non_tn_fp8`); None where
    the plan's ``train`` is this GPU's."""

    def mode(self, mode: str) -> ModeVerdict | None:
        return self.train if mode == "train" else self.infer

    def flags(self, job: Job) -> dict[str, str]:
        """The options that plan each "how many of this GPU" answer as the job it is (what
        ``gpuplan fit`` accepts and plans as fitting): ``train_min_gpus_zero3`` is ``--gpus N
        --zero 3``, ``infer_min_gpus_tensor_parallel`` ``--tp N --gpus N``, a layout its
        :meth:`LayoutFit.flags`."""
        out = {}
        if self.train is not None and self.train.min_gpus is not None:
            out["train_min_gpus_zero3"] = f"--gpus {self.train.min_gpus} --zero 3"
        if self.infer is not None and self.infer.min_gpus is not None:
            n = self.infer.min_gpus
            out["infer_min_gpus_tensor_parallel"] = "" if n == 1 else f"--tp {n} --gpus {n}"
        for m in ("train", "infer"):
            v = self.mode(m)
            if v is not None and v.layout is not None:
                out[f"{m}_layout"] = v.layout.flags(job.with_(mode=m))
        return out

    def to_dict(self, job: Job | None = None) -> dict:
        """The flat JSON of the verdict, as before it was typed (``train_fits``,
        ``infer_min_gpus_tensor_parallel``, ``train_layout`` ...); with the ``job``, the options
        of each answer too (``flags``: answer key -> options)."""
        d: dict = {"name": self.name, "usable_bytes": self.usable_bytes}
        modes = {m: self.mode(m) for m in ("train", "infer")}
        for key in ("fits", "verdict", "headroom_bytes"):
            for m, v in modes.items():
                d[f"{m}_{key}"] = None if v is None else getattr(v, key)
        for m, v in modes.items():
            d[_MIN_GPUS_KEY[m]] = None if v is None else v.min_gpus
        for m, v in modes.items():
            lay = None if v is None else v.layout
            d[f"{m}_min_gpus_layout"] = lay.gpus if lay is not None else None
            d[f"{m}_layout"] = lay.to_dict() if lay is not None else None
        for key in ("max_batch", "max_seq"):
            for m, v in modes.items():
                if v is not None and getattr(v, key) is not None:
                    d[f"{m}_{key}"] = getattr(v, key)
        if self.infer is not None and self.infer.engine_refusal is not None:
            d["infer_engine_refusal"] = spell_text(self.infer.engine_refusal)
        if self.infer_precision is not None:
            d["infer_precision"] = self.infer_precision
            d["infer_total_bytes"] = self.infer_total_bytes
        if self.train_total_bytes is not None:
            d["train_total_bytes"] = self.train_total_bytes
        if self.alias_note:
            d["alias_note"] = self.alias_note
        if job is not None:
            d["flags"] = self.flags(job)
        return d


def _flat_attr(mode: str, key: str):
    def get(self: GpuVerdict):
        v = self.mode(mode)
        return None if v is None else getattr(v, key)

    return property(get, doc=f"``{mode}.{key}`` (:class:`ModeVerdict`), None when the mode is "
                             "not planned")


# the flat names of the verdict's fields before it was typed: p.gpus[0].train_fits, ...
for _mode in ("train", "infer"):
    for _key in ("fits", "verdict", "headroom_bytes", "min_gpus", "layout", "max_batch",
                 "max_seq"):
        setattr(GpuVerdict, f"{_mode}_{_key}", _flat_attr(_mode, _key))


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
    """Sections added by other analyses (the trace) keyed by name."""
    speed: "SpeedSection | None" = None
    """The speed model's estimate per GPU and mode (``plan(speed=True)``), typed; its JSON is
    the ``"speed"`` key."""
    solver: tuple["Suggestions", ...] = ()
    """What to change, per GPU and mode, where the solver ran (see :func:`plan`)."""
    engine_budgets: tuple[tuple[str, "KVBudget"], ...] = ()
    """(GPU name, the serving engine's start-up KV budget on it) for each GPU, when the job
    serves under vllm, sglang or trt-llm (:func:`gpuplan.memory.kv_budget`); its JSON is
    ``infer.engine`` (the first GPU's) and ``infer.engine_by_gpu``."""
    infer_by_precision: tuple[tuple[str, InferMemory], ...] = ()
    """(format, serving memory in it) for each format the GPUs were planned in, when a mixed
    list under ``infer_precision`` auto resolves differently per GPU (empty otherwise); its
    JSON is ``infer_by_precision``."""

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
            if self.engine_budgets:
                name, first = self.engine_budgets[0]
                out["infer"]["engine"] = {"gpu": name, **first.to_dict()}
                out["infer"]["engine_by_gpu"] = {n: b.to_dict() for n, b in self.engine_budgets}
            if self.infer_by_precision:
                out["infer_by_precision"] = {f: m.to_dict() for f, m in self.infer_by_precision}
        ratio = self.train_to_infer_ratio
        if ratio is not None:
            out["train_to_infer_ratio"] = ratio
        out["gpus"] = [g.to_dict(self.job) for g in self.gpus]
        out["suggestions"] = [s.to_dict() for s in self.suggestions]
        if self.solver:
            out["solver"] = [{k: v for k, v in r.to_dict().items() if k != "suggestions"}
                             for r in self.solver]
        out["notes"] = list(self.notes)
        if self.speed is not None:
            out["speed"] = self.speed.to_dict()
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
        raise InputError(f"gpus {shown(gpus)}: expected a GPU name, a GPU or a list of them",
                         field="gpus", value=gpus)
    names = list(itertools.islice(names, MAX_PLAN_GPUS + 1))
    if len(names) > MAX_PLAN_GPUS:
        raise InputError(f"gpus: more than {MAX_PLAN_GPUS} GPUs in one plan; compare fewer",
                         field="gpus")
    out = []
    for g in names:
        if not isinstance(g, (str, GPU)):
            raise InputError(f"gpu {shown(g)}: expected a GPU name such as 'h100' or a GPU",
                             field="gpus", value=g)
        out.append((g, None) if isinstance(g, GPU) else resolve_gpu(g))
    return out


def _check_plan_args(job: object, overrides: object, level: object, **flags: object) -> None:
    """A Job; valid overhead overrides; the switches are bools (``suggest`` may be None); ``top``
    a small whole number. Each refusal names its argument (``field``)."""
    job_arg(job)
    check_overrides(overrides)
    check_level(level)
    for name, v in flags.items():
        if name == "top":
            int_arg(v, "top", high=MAX_TOP)
        else:
            flag_arg(v, name, optional=name == "suggest")


def _total_at(mem: TrainMemory | InferMemory, level: OverheadLevel) -> int:
    """The job's total with the runtime overhead taken at ``level`` of its band: the tensors are
    the same at every level, so only the overhead line changes."""
    return mem.total_bytes - mem.overhead_bytes + sum(i.at(level) for i in mem.overhead.items)


def _verdict(total_expected: int, total_high: int, usable: int) -> Verdict:
    if total_expected > usable:
        return "does not fit"
    return "fits" if total_high <= usable else "tight"


def _gpu_counts(model: Model, job: Job, mode: str, usable: int, level: OverheadLevel,
                overrides, memo: dict, gpu: GPU | None = None) -> dict:
    """The "how many of this GPU" answers of one mode: ZeRO-3 alone (training) or tensor
    parallel alone (serving), and the TP x PP layout where it needs fewer GPUs (training) or
    where TP within a node is not enough (serving) -- the searches the solver runs too."""
    if mode == "train":
        n = fewest_zero3(model, job, usable, level, overrides, memo, gpu)
        return {"min_gpus": n, "layout": train_layout(
            model, job, usable, level, overrides, memo, below=n, gpu=gpu)}
    n = fewest_tp(model, job, usable, level, overrides, memo)
    return {"min_gpus": n, "layout": infer_layout(
        model, job, usable, level, overrides, memo, tp_gpus=n)}


def _query(fn, *args, **kw) -> int:
    """A max-batch / max-seq answer; 0 when not even the smallest fits."""
    try:
        return fn(*args, **kw)
    except InputError:
        return 0


def _fits_by_gpu(verdicts: list[GpuVerdict]) -> dict[str, dict[str, bool]]:
    """gpu -> mode -> whether the job fits it: what each speed row says (compute cannot know:
    it never imports the memory accounting)."""
    return {v.name: {m: mv.fits for m in ("train", "infer") if (mv := v.mode(m)) is not None}
            for v in verdicts}


def _solver():
    """The solver, imported when a plan runs it (a plain plan never does)."""
    from . import solver

    return solver


def plan(job: Job, gpus: Iterable[str | GPU] | None = None, *,
         overhead_level: OverheadLevel = "expected", search_gpu_counts: bool = True,
         overhead_overrides=None, suggest: bool | None = None, max_batch: bool = False,
         max_seq: bool = False, top: int = 3, speed: bool = False,
         use_noisy_bench: bool = False, engine_budget: dict | None = None) -> Plan:
    """Memory of ``job`` per GPU and a verdict for each of ``gpus`` (default: a shortlist).

    ``suggest``: run the solver (:mod:`gpuplan.solver`) for every GPU -- ``True``; only for the
    GPUs named in ``gpus`` on which the job does not fit -- ``None`` (the default: nothing runs
    for the default shortlist); never -- ``False``. ``max_batch`` / ``max_seq`` answer the direct
    queries for each GPU. ``speed``: add the speed model's headline numbers per GPU
    (``plan.speed``, :func:`gpuplan.compute.speed_section`); ``use_noisy_bench``: with
    a stored bench run's noisy measurements too (left out otherwise; the section says so).
    ``engine_budget``: the serving engine's knobs for its start-up KV budget
    (``gpu_memory_utilization``, ``mem_fraction_static``, ``max_model_len``, ``engine_version``,
    ``max_num_batched_tokens``, ``max_num_seqs``); the budget is computed for every GPU whenever
    the job serves under vllm, sglang or trt-llm (:attr:`Plan.engine_budgets`).
    """
    _check_plan_args(job, overhead_overrides, overhead_level, search_gpu_counts=search_gpu_counts,
                     suggest=suggest, max_batch=max_batch, max_seq=max_seq, top=top, speed=speed,
                     use_noisy_bench=use_noisy_bench)
    model = resolve_model(job.model)
    resolved = resolve_gpus(gpus)
    gpu_list = [g for g, _ in resolved]
    asked, job, format_note = job, *_resolve_format(model, job, gpu_list)
    gpu_jobs = _gpu_jobs(model, asked, job, gpu_list)
    budgets = _engine_budgets(model, job, gpu_list, engine_budget, gpu_jobs)
    kw = dict(overhead_level=overhead_level, overhead_overrides=overhead_overrides)
    planned = _Planned(model, kw)
    mems, _ = planned.of(job, _plan_gpu(job, gpu_list))
    verdicts = []
    reports = []
    for i, ((gpu, note), gjob) in enumerate(zip(resolved, gpu_jobs)):
        gmems, memo = planned.of(gjob, gpu)
        v: dict = {}
        for mode, mem in gmems.items():
            v[mode] = _mode_verdict(model, gjob, gpu, mode, mem, memo, kw, max_batch=max_batch,
                                    max_seq=max_seq, search_gpu_counts=search_gpu_counts)
            run = suggest is True or (suggest is None and gpus is not None and not v[mode].fits)
            if run:
                reports.append(_solver().suggest(model, gjob.with_(mode=mode), gpu, mode=mode,
                                                 top=top, as_asked=asked.with_(mode=mode), **kw))
        if "infer" in v:
            v["infer"] = _engine_verdict(v["infer"], budgets[i][1] if budgets else None)
        inf, own = gmems.get("infer"), gmems.get("train")
        verdicts.append(GpuVerdict(name=gpu.name, gpu=gpu, alias_note=note,
                                   usable_bytes=gpu.memory_bytes, **v,
                                   infer_precision=inf.precision if inf is not None else None,
                                   infer_total_bytes=inf.total_bytes if inf is not None else None,
                                   train_total_bytes=own.total_bytes if own is not None
                                   and own is not mems.get("train") else None))
    train, infer = mems.get("train"), mems.get("infer")
    notes = (*model.notes, *format_note, *_train_by_gpu_note(train, verdicts))
    speed_rows = None
    if speed:
        from .compute import speed_section

        # under auto the speed model resolves the format per GPU itself (as gpu_jobs do)
        speed_rows = speed_section(
            asked if len(planned.formats) > 1 else job, [g.gpu for g in verdicts], model=model,
            trainable_params=train.trainable_params if train is not None else None,
            use_noisy_bench=use_noisy_bench,
            paged_host_bytes=_paged_overflow(train, [g.gpu for g in verdicts]))
        speed_rows = speed_rows.with_fits(_fits_by_gpu(verdicts))
    return Plan(job=asked, model=model, train=train, infer=infer, gpus=tuple(verdicts), notes=notes,
                solver=tuple(reports), speed=speed_rows, engine_budgets=budgets,
                infer_by_precision=planned.formats if len(planned.formats) > 1 else ())


def _plan_gpu(job: Job, gpus: list[GPU]) -> GPU | None:
    """The GPU the plan's own training memory is reckoned on: the first of ``gpus`` where every
    one holds a per-tensor FP8 recipe's weights alike (:func:`gpuplan.memory.train.
    gpu_non_tn_fp8`), else none -- the transposes kept, as Hopper holds them (the upper bound),
    and each GPU's verdict on its own memory (:attr:`GpuVerdict.train_total_bytes`)."""
    if not gpus or len({gpu_non_tn_fp8(g, job) for g in gpus}) > 1:
        return None
    return gpus[0]


def _train_by_gpu_note(train: TrainMemory | None, verdicts: list[GpuVerdict]) -> tuple[str, ...]:
    """The note naming the GPUs whose training total differs from the plan's lines (a
    per-tensor FP8 recipe on a mixed list: no weight transposes where the FP8 GEMM takes any
    layout)."""
    own = [(v.name, v.train_total_bytes) for v in verdicts if v.train_total_bytes is not None]
    if train is None or not own:
        return ()
    names = ", ".join(dict.fromkeys(n for n, _ in own))
    less = train.total_bytes - own[0][1]
    return (f"{names}: {train.precision} weights keep no FP8 transposes there (the GPU's FP8 "
            f"GEMMs take any layout), {less / 1e9:.2f} GB less per GPU than the training lines "
            "above, which keep them as Hopper does; each GPU's verdict is on its own total",)


def _paged_overflow(train: TrainMemory | None, gpus: list[GPU]) -> dict[str, int]:
    """By GPU name, the bytes of a paged optimizer's states (CUDA managed memory, outside what
    the step otherwise holds) that do not fit on that GPU: the speed model times their
    migration back each step (compute.speed.paged_migration_s)."""
    if train is None:
        return {}
    over = {g.name: train.paged_overflow_bytes(g.memory_bytes) for g in gpus}
    return {name: b for name, b in over.items() if b}


class _Planned:
    """The memories of a plan, once per inference format its GPUs are planned in and per
    whether their FP8 GEMMs take any layout (:func:`gpuplan.memory.train.gpu_non_tn_fp8`:
    a per-tensor FP8 recipe's weights then keep no transposes); training's does not depend on
    the format, nor serving's on the GPU's FP8 GEMM: each computed once per what moves it."""

    def __init__(self, model: Model, kw: dict):
        self.model, self.kw = model, kw
        self._by: dict[tuple, tuple[dict, dict]] = {}
        self._train: dict[bool, TrainMemory] = {}
        self._infer: dict[str, InferMemory] = {}

    def of(self, job: Job, gpu: GPU | None = None) -> tuple[dict, dict]:
        non_tn = gpu_non_tn_fp8(gpu, job)
        key = (job.infer_precision, non_tn)
        if key not in self._by:
            mems: dict = {}
            if job.trains:
                if non_tn not in self._train:
                    self._train[non_tn] = train_memory(self.model, job, gpu=gpu, **self.kw)
                mems["train"] = self._train[non_tn]
            if job.infers:
                if job.infer_precision not in self._infer:
                    self._infer[job.infer_precision] = infer_memory(self.model, job, **self.kw)
                mems["infer"] = self._infer[job.infer_precision]
            memo = shared_memo(self.model, job, self.kw["overhead_level"],
                               self.kw["overhead_overrides"], gpu) if mems else {}
            self._by[key] = (mems, memo)
        return self._by[key]

    @property
    def formats(self) -> tuple[tuple[str, InferMemory], ...]:
        return tuple(self._infer.items())


def _mode_verdict(model: Model, job: Job, gpu: GPU, mode: str, mem, memo: dict, kw: dict, *,
                  max_batch: bool, max_seq: bool, search_gpu_counts: bool) -> ModeVerdict:
    """How one mode of ``job`` sits on ``gpu``."""
    usable = gpu.memory_bytes
    mv: dict = {"fits": mem.total_bytes <= usable,
                "verdict": _verdict(mem.total_bytes, _total_at(mem, "high"), usable),
                "headroom_bytes": usable - mem.total_bytes}
    if search_gpu_counts:
        mv.update(_gpu_counts(model, job, mode, usable, kw["overhead_level"],
                              kw["overhead_overrides"], memo, gpu))
    mjob = job.with_(mode=mode)
    if max_batch:
        mv["max_batch"] = _query(_solver().max_batch, model, mjob, gpu, mode=mode, **kw)
    if max_seq and model.architecture is not None and model.architecture.kind != "vision":
        mv["max_seq"] = _query(_solver().max_seq, model, mjob, gpu, mode=mode, **kw)
    return ModeVerdict(**mv)


def _engine_verdict(mv: ModeVerdict, budget: "KVBudget | None") -> ModeVerdict:
    """The serving verdict with the engine's start-up check: memory that fits on a GPU where
    the engine refuses to start (:attr:`KVBudget.engine_starts`) does not fit the engine."""
    if budget is None or budget.engine_starts:
        return mv
    return replace(mv, fits=False, verdict="does not fit", engine_refusal=budget.refusal)


def _gpu_jobs(model: Model, asked: Job, job: Job, gpus: list[GPU]) -> list[Job]:
    """The job each GPU is planned with: ``job`` (its format resolved for the whole list), or
    under ``infer_precision`` auto the format resolved for that GPU alone -- a mixed list plans
    each GPU in the format its engine loads there (fp8 on an H100, bf16 on an A100)."""
    arch = model.architecture
    if not job.infers or asked.infer_precision != INFER_AUTO or arch is None \
            or arch.checkpoint_format is None or len(gpus) < 2:
        return [job] * len(gpus)
    return [asked.resolve_infer(arch, g.architecture) for g in gpus]


def _resolve_format(model: Model, job: Job, gpus: list[GPU]) -> tuple[Job, tuple[str, ...]]:
    """The job with its inference weight format resolved (``auto``: the checkpoint's shipped
    format where the engine loads it on every GPU of the plan, else bf16) and the note saying
    which was planned; the job as given when it names its format or plans no inference."""
    arch = model.architecture
    if not job.infers or job.infer_precision != INFER_AUTO or arch is None \
            or arch.checkpoint_format is None:
        return job.resolve_infer(arch), ()
    out = job.resolve_infer(arch, tuple(g.architecture for g in gpus))
    shipped = arch.checkpoint_format
    if out.infer_precision == shipped:
        return out, (f"planned in {shipped}, the format the checkpoint ships in (give "
                     "--infer-precision bf16 to plan it dequantized)",)
    which = ", ".join(g.name for g in gpus if not loads_shipped(arch, job.engine, g.architecture))
    loads = ", ".join(dict.fromkeys(g.name for g in gpus
                                    if loads_shipped(arch, job.engine, g.architecture)))
    also = (f"; {loads} {'is' if ', ' not in loads else 'are'} planned in {shipped}, the "
            "format the checkpoint ships in, each GPU in its own format" if loads else "")
    return out, (f"planned in bf16: engine {job.engine} dequantizes the {shipped} checkpoint to "
                 f"bf16 on {which}{also} (give --infer-precision {shipped} to plan the "
                 "shipped format)",)


def _engine_budgets(model: Model, job: Job, gpus: list[GPU], knobs: dict | None,
                    gpu_jobs: list[Job] | None = None) -> tuple[tuple[str, "KVBudget"], ...]:
    """Each GPU's start-up KV budget under the job's serving engine; knobs given for a job no
    serving engine runs are refused."""
    knobs = {k: v for k, v in (knobs or {}).items() if v is not None}
    arch = model.architecture
    serves = job.infers and job.engine in SERVING_ENGINES
    if knobs and not serves:
        name = next(iter(knobs))
        raise InputError(f"{opt(name)} is a serving engine's knob: give {opt('engine')} vllm, "
                         f"sglang or trt-llm with {opt('mode')} infer (the job's engine is "
                         f"{job.engine})",
                         field=name, value=knobs[name])
    if not serves or arch is None or arch.kind != "decoder":
        return ()
    jobs = gpu_jobs or [job] * len(gpus)
    return tuple((g.name, kv_budget(model, g, j, **knobs)) for g, j in zip(gpus, jobs))
