"""The cluster search: every valid layout of a job over N GPUs (TP x PP x CP x EP x DP, ZeRO stage,
micro-batch and accumulation, checkpointing, pipeline schedule), timed by
:mod:`gpuplan.compute.parallel`, checked for memory by :mod:`gpuplan.memory`, ranked by tokens/s
(serving: by tokens/s per GPU -- the inverse of the cost per token -- within the latency asked).

Pruning keeps a 405B model over 16,384 GPUs in seconds: the time of one micro-batch is built once
per (TP, CP, micro-batch, checkpointing) and every layout's step is arithmetic over it; the
candidates are then visited fastest first, and memory (the expensive part) is checked only until
the best few that fit are found, after a lower bound of the model states per GPU rules out the
hopeless ones without building them, and a family whose leanest sibling (micro-batch 1, full
checkpointing) does not fit is skipped whole (:func:`_rank`). Sequence parallelism is on
whenever TP > 1 (same traffic as TP's all-reduces, less activation memory).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from ._record import record
from .compute.device import (at_power_limit, default_efficiency, device_from_gpu,
                             power_clock_fraction)
from .compute.efficiency import resolve_runtime
from .engines.profiles import (SEARCH_SCHEDULES, LayoutLimits, check_engine_job,
                               engine_notes, layout_limits)
from .compute.parallel import (
    Layout, LayoutTime, ServeTime, engine_layout_options, job_micro_options, layout_time,
    micro_costs, model_flops_per_token, serve_time, shard_arch, stage_params, zero3_gathers,
)
from .compute.speed import kernel_efficiency, narrow_gather_bytes
from .compute.step import (StepSpec, build_steps, infer_precision, optimizer_stretch_s,
                           param_tensor_count, train_precision)
from .errors import GpuplanError, InputError, opt, shown
from .formats import get_optimizer, optimizer_state_bytes
from .hardware import GPU
from .hardware.topology import Topology, topology_for
from .job import Job, check_layout, default_seq, job_flags
from .memory import infer_memory, train_memory
from .memory.shape import check_seq
from .models import Model
from .units import parse_positive_int

__all__ = ["ClusterCandidate", "ClusterPlan", "cluster_search", "SCHEDULES", "CHECKPOINTING",
           "SEARCH_JOB_FIELDS", "search_options"]

#: The Job fields the search honours; the layout fields (tp, pp ...) are what it searches. The
#: command line and ``POST /api/cluster`` refuse any other job option in one line.
SEARCH_JOB_FIELDS = frozenset({"mode", "precision", "infer_precision", "optimizer",
                               "optimizer_states", "master_weights", "grad_dtype",
                               "fused_optimizer", "seq",
                               "gpus", "attention", "kv_dtype", "context", "gpus_per_node",
                               "inter_node", "runtime", "engine", "power_limit_w"})


def search_options(*, global_batch: Any = None, concurrency: Any = None, top: Any = 3,
                   max_token_ms: Any = None, names: dict[str, str] | None = None,
                   max_top: int = 50, mode: str | None = None) -> dict:
    """The search's own options, checked as the command line and the API take them (``names``:
    how each is spelt to the user, e.g. ``--global-batch``): keyword arguments of
    :func:`cluster_search` (``max_token_ms`` becomes ``max_decode_s``). Given the search's
    ``mode``, an option of the other mode is refused (it would be ignored)."""
    say = {"global_batch": "global_batch", "concurrency": "concurrency", "top": "top",
           "max_token_ms": "max_token_ms", "mode": "mode", **(names or {})}
    given = {"global_batch": global_batch, "concurrency": concurrency,
             "max_token_ms": max_token_ms}
    other = {"train": ("concurrency", "max_token_ms"), "infer": ("global_batch",)}.get(
        str(mode), ())
    wrong = [say[k] for k in other if given[k] is not None]
    if wrong:
        them = "infer" if mode == "train" else "train"
        raise InputError(f"{', '.join(wrong)}: a {say['mode']} {them} option, and this search "
                         f"is {say['mode']} {mode}; drop {'it' if len(wrong) == 1 else 'them'} "
                         f"or give {say['mode']} {them}")
    out: dict = {
        "global_batch": None if global_batch is None else parse_positive_int(
            global_batch, what=say["global_batch"], maximum=10**9),
        "concurrency": None if concurrency is None else parse_positive_int(
            concurrency, what=say["concurrency"], maximum=10**7),
        "top": parse_positive_int(top, what=say["top"], maximum=max_top),
        "max_decode_s": None,
    }
    if max_token_ms is not None:
        try:
            ms = float(max_token_ms) if not isinstance(max_token_ms, bool) else -1.0
        except (TypeError, ValueError, OverflowError):
            ms = -1.0
        if not 0 < ms < math.inf:
            raise InputError(f"{say['max_token_ms']} {shown(max_token_ms)}: expected a number > 0")
        out["max_decode_s"] = ms / 1e3
    return out

#: Schedules tried when PP > 1: the engines' one list (``engines.profiles.SEARCH_SCHEDULES``).
SCHEDULES = SEARCH_SCHEDULES
CHECKPOINTING = ("none", "selective", "full")
_KEEP = {"full": 0, "selective": 1, "none": 2}  # activations kept, least to most
_MICRO = (1, 2, 4, 8)


@record
class ClusterCandidate:
    """One layout tried: its time, and its memory when it was checked."""

    layout: Layout
    timed: LayoutTime | ServeTime
    memory_bytes: int | None = None
    """Per-GPU peak (the worst stage); None: not checked (slower than the ones kept)."""
    memory_note: str | None = None
    """Why the memory is unknown or the layout was ruled out without building it."""
    job: Job | None = None
    """The job this layout is (what ``fit`` and ``speed`` plan for its ``command``)."""
    command: str | None = None
    """``gpuplan fit ...``: the command line that plans this layout as the search did (the same
    per-GPU memory; ``gpuplan speed`` with the same options, the same tokens/s)."""

    @property
    def tokens_per_s(self) -> float:
        return self.timed.tokens_per_s

    def fits(self, usable: int) -> bool:
        return self.memory_bytes is not None and self.memory_bytes <= usable

    def to_dict(self) -> dict:
        return {"layout": self.layout.to_dict(), "label": self.layout.label(),
                "tokens_per_s": self.tokens_per_s,
                "tokens_per_s_per_gpu": self.timed.tokens_per_s_per_gpu,
                "memory_bytes": self.memory_bytes, "memory_note": self.memory_note,
                "command": self.command, "time": self.timed.to_dict()}


@record
class ClusterPlan:
    """The result of :func:`cluster_search`."""

    model: str
    gpu: str
    gpus: int
    mode: Literal["train", "infer"]
    seq: int
    global_batch: int | None
    concurrency: int | None
    usable_bytes: int
    topology: Topology
    best: tuple[ClusterCandidate, ...]
    """The fastest layouts that fit, best first."""
    tried: tuple[ClusterCandidate, ...]
    """Every layout whose memory was checked (the plot's points)."""
    enumerated: int
    """Valid layouts timed."""
    why_runner_up_loses: str | None
    elapsed_s: float
    notes: tuple[str, ...] = ()
    gpu_counts: tuple[dict, ...] = ()
    """Without ``--gpus``: each GPU count searched and its best layout (the chosen is ``gpus``)."""

    def to_dict(self) -> dict:
        return {"model": self.model, "gpu": self.gpu, "gpus": self.gpus, "mode": self.mode,
                "gpu_counts": list(self.gpu_counts),
                "seq": self.seq, "global_batch": self.global_batch,
                "concurrency": self.concurrency, "usable_bytes": self.usable_bytes,
                "topology": self.topology.to_dict(),
                "best": [c.to_dict() for c in self.best],
                "why_runner_up_loses": self.why_runner_up_loses,
                "enumerated": self.enumerated, "memory_checked": len(self.tried),
                "tried": [{"label": c.layout.label(), "tokens_per_s": c.tokens_per_s,
                           "memory_bytes": c.memory_bytes, "memory_note": c.memory_note}
                          for c in self.tried],
                "elapsed_s": self.elapsed_s, "notes": list(self.notes)}


def _pow2_divisors(n: int, limit: int) -> list[int]:
    out, k = [], 1
    while k <= limit and n % k == 0:
        out.append(k)
        k *= 2
    return out


def _divisors(n: int, limit: int) -> list[int]:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


def _tps(arch: Any, gpus: int, per_node: int, dims: frozenset = frozenset({"tp"})) -> list[int]:
    if "tp" not in dims:
        return [1]
    kv = arch.num_kv_heads
    return [t for t in _pow2_divisors(gpus, per_node)
            if arch.num_heads % t == 0 and (kv % t == 0 or t % kv == 0)]


def _train_layouts(arch: Any, gpus: int, seq: int, batch: int, per_node: int,
                   lim: LayoutLimits):
    """Every training layout of the engine's dimensions (ZeRO and checkpointing are added by
    the caller; what needs the architecture is checked on each layout's job)."""
    pp_top = min(arch.num_layers, 128) if "pp" in lim.dims else 1
    for tp in _tps(arch, gpus, per_node, lim.dims):
        for pp in _divisors(gpus // tp, pp_top):
            cps = [c for c in _pow2_divisors(gpus // (tp * pp), 64 if "cp" in lim.dims else 1)
                   if seq % c == 0 and (c == 1 or seq // c >= 2048)]
            for cp in cps:
                dp = gpus // (tp * pp * cp)
                if batch % dp:
                    continue
                eps = ([e for e in _divisors(arch.num_experts, arch.num_experts)
                        if (dp * cp) % e == 0] if arch.is_moe and "ep" in lim.dims else [1])
                for ep in eps:
                    yield from _pipelines(arch, tp, pp, cp, ep, dp, seq, batch, lim)


def _pipelines(arch: Any, tp: int, pp: int, cp: int, ep: int, dp: int, seq: int, batch: int,
               lim: LayoutLimits):
    for b in (b for b in _MICRO if (batch // dp) % b == 0):
        m = batch // (dp * b)
        for sched in (lim.schedules if pp > 1 else ("1f1b",)):
            v = int(sched.partition(":")[2] or 1)
            if v > 1 and (m % pp or arch.num_layers < pp * v):
                continue
            for parts in (lim.parts if pp > 1 else (False,)):
                yield Layout(tp=tp, pp=pp, cp=cp, ep=ep, dp=dp, chunks=v,
                             schedule=sched.partition(":")[0],
                             micro_batches=m, batch=b, seq=seq,
                             sequence_parallel=tp > 1 and "sp" in lim.dims,
                             embedding_part=parts, loss_part=parts)


@dataclass
class _Ctx:
    """What every candidate of one search shares."""

    model: Model
    gpu: GPU
    base: Job
    topo: Topology
    device: Any
    eff: Any
    prec: Any
    usable: int
    tp_overlap: bool
    costs: dict = field(default_factory=dict)
    valid: dict = field(default_factory=dict)
    optimizer: Any = None
    """The optimizer stretch's time (elements, share) -> s, as ``speed`` times it."""
    """Each layout shape's refusal (None: the engine and the architecture run it)."""
    gathers: dict = field(default_factory=dict)
    """ZeRO-3's weight all-gathers a micro-batch, by (sharding, checkpointing)."""


def _ctx(model: Model, gpu: GPU, base: Job, mode: str, tp_overlap: bool) -> _Ctx:
    # the GPU at the job's power limit, as speed sees it (the note is the search's)
    device = at_power_limit(device_from_gpu(gpu), gpu, base.power_limit_w)[0]
    if mode == "infer":  # training plans no inference format (its commands must not name one)
        base = base.resolve_infer(model.architecture, gpu.architecture)
    prec = (train_precision(base.train_recipe, device, False) if mode == "train"
            else infer_precision(base.infer_precision, device, False,
                                 shipped=getattr(model.architecture, "checkpoint_format", None),
                                 engine=base.engine))
    topo = topology_for(gpu, gpus_per_node=base.gpus_per_node, inter_node=base.inter_node)
    eff = kernel_efficiency(base, mode, device, default_efficiency(device), prec,
                            model.architecture, [])  # as speed runs the same kernels
    return _Ctx(model=model, gpu=gpu, base=base, topo=topo, device=device,
                eff=eff, prec=prec, usable=gpu.memory_bytes,
                tp_overlap=tp_overlap)


def _time_train(c: _Ctx, lay: Layout, flops_per_token: float, per_param: float) -> LayoutTime:
    arch = c.model.architecture
    key = (lay.tp, lay.cp, lay.batch, lay.ep)
    if key not in c.costs:
        c.costs[key] = micro_costs(arch, c.device, c.eff, c.prec, tp=lay.tp, cp=lay.cp,
                                   batch=lay.batch, seq=lay.seq, attention=c.base.attention,
                                   **job_micro_options(c.base, lay.ep))
    if lay.zero == 3:
        gkey = (lay.sharding, lay.checkpointing)
        if gkey not in c.gathers:
            c.gathers[gkey] = zero3_gathers(
                *gkey, c.model, max_live=c.base.stage3_max_live_parameters,
                prefetch_bucket=c.base.stage3_prefetch_bucket_size)
        lay = replace(lay, weight_gathers=c.gathers[gkey])
    if c.optimizer is None:  # the optimizer's stretch as the job runs it: speed's own estimate
        spec = StepSpec.of(c.base._evolve(mode="train", tp=1, pp=1, cp=1, ep=1, gpus=1,
                                          sequence_parallel=False, distribute_checkpoints=False),
                           mode="train", seq=lay.seq, new_tokens=1, trainable=None,
                           single_device=True)
        total = param_tensor_count(arch)
        c.optimizer = lambda n, share: optimizer_stretch_s(spec, c.prec, c.device, c.eff,
                                                           elements=n,
                                                           tensors=round(total * share))
    return layout_time(arch, c.costs[key][lay.checkpointing], lay, c.topo, device=c.device,
                       eff=c.eff, prec=c.prec, params=c.model.params.total,
                       flops_per_token=flops_per_token, state_bytes_per_param=per_param,
                       tp_overlap=c.tp_overlap, optimizer_s=c.optimizer,
                       ep_dispatcher=c.base.moe_dispatcher,
                       **engine_layout_options(c.base.engine, c.base.precision),
                       gather_bytes_per_element=narrow_gather_bytes(arch, c.base,
                                                                    c.model.params.total))


def _states_floor(c: _Ctx, lay: Layout) -> float:
    """A lower bound of one GPU's model states (weights, gradients, master, optimizer)."""
    r = c.base.train_recipe
    n = stage_params(c.model.architecture, c.model.params.total, lay)
    per, _ = optimizer_state_bytes(get_optimizer(c.base.optimizer), None, 1, r.state_bytes)
    group = lay.dp * lay.cp
    w = r.weight_bytes / (group if lay.zero == 3 else 1)
    g = r.grad_bytes / (group if lay.zero >= 2 else 1)
    return n * (w + g + (r.master_bytes + per) / (group if lay.zero >= 1 else 1))


def _job_of(c: _Ctx, lay: Layout, mode: str) -> Job:
    """The job a layout is: what its ``command`` asks ``fit`` and ``speed`` for (the values came
    from the accepted sets and the layout was checked: no validation again)."""
    serve = mode == "infer"
    return c.base._evolve(
        mode=mode, tp=lay.tp, pp=lay.pp, cp=lay.cp, ep=lay.ep, gpus=lay.gpus,
        sequence_parallel=lay.sequence_parallel, pp_schedule=lay.pp_schedule,
        micro_batches=None, grad_accum=1 if serve else lay.micro_batches, batch=lay.batch,
        seq=lay.seq, context=lay.seq if serve else c.base.context,
        zero=0 if serve else lay.zero, checkpointing=c.base.checkpointing if serve
        else lay.checkpointing, pp_embedding_part=lay.embedding_part,
        pp_loss_part=lay.loss_part)


def _valid(c: _Ctx, lay: Layout, mode: str) -> str | None:
    """Why the engine or the architecture refuses the layout (None: it runs): the one layout
    check (heads over TP, layers over the pipeline's parts -- Megatron's even split among them
    --, experts over EP, ring attention's chunks) and the engine's own."""
    key = (mode, lay.tp, lay.pp, lay.cp, lay.ep, lay.dp, lay.pp_schedule, lay.embedding_part)
    if key not in c.valid:
        job = _job_of(c, replace(lay, zero=0, checkpointing="none"), mode)
        try:
            check_layout(c.model.architecture, job, lay.seq)
            if job.engine != "auto":
                check_engine_job(job.engine_profile, job)
            c.valid[key] = None
        except InputError as e:
            c.valid[key] = str(e).split(":")[0] + ": " + str(e).split(": ", 1)[-1][:60]
    return c.valid[key]


def _memory(c: _Ctx, lay: Layout, mode: str) -> tuple[int | None, str | None]:
    if mode == "train" and _states_floor(c, lay) > c.usable:
        return None, "model states alone exceed the GPU (not built)"
    job = _job_of(c, lay, mode)
    try:  # one rank of the layout, tensor by tensor: what fit plans for the same job
        mem = (train_memory(c.model, job, gpu=c.gpu) if mode == "train"
               else infer_memory(c.model, job))
    except GpuplanError as e:
        return None, str(e).split(";")[0]
    return mem.total_bytes, None


def _shape(c: ClusterCandidate) -> tuple:
    x = c.layout
    return (x.tp, x.pp, x.cp, x.ep, x.dp, x.batch, x.pp_schedule, x.embedding_part)


def _rank(c: _Ctx, timed: list[ClusterCandidate], mode: str, top: int,
          max_checks: int) -> tuple[list[ClusterCandidate], list[ClusterCandidate]]:
    """Visit the candidates fastest first; check memory until ``top`` fit. Memory is checked
    first for a candidate's leanest sibling (:func:`_family`, :func:`_appetite`): when that does
    not fit, neither does any of the family, which is then skipped unbuilt -- so the budget of
    ``max_checks`` plans reaches layouts that fit even when every fast one overflows."""
    best: list[ClusterCandidate] = []
    tried: list[ClusterCandidate] = []
    leanest: dict[tuple, ClusterCandidate] = {}
    for cand in timed:
        k = _family(cand.layout)
        if k not in leanest or _appetite(cand.layout) < _appetite(leanest[k].layout):
            leanest[k] = cand
    failed: dict[tuple, list[tuple[int, int]]] = {}
    checked: dict[int, ClusterCandidate] = {}
    built = 0

    def check(cand: ClusterCandidate) -> ClusterCandidate:
        nonlocal built
        if id(cand) not in checked:
            mem, note = _memory(c, cand.layout, mode)
            built += note is None or not note.startswith("model states alone")
            done = replace(cand, memory_bytes=mem, memory_note=note)
            checked[id(cand)] = done
            tried.append(done)
            if not done.fits(c.usable):
                failed.setdefault(_family(cand.layout), []).append(_appetite(cand.layout))
        return checked[id(cand)]

    for cand in sorted(timed, key=lambda x: -x.timed.tokens_per_s_per_gpu):
        if len(best) >= top or built >= max_checks:
            break
        key, want = _family(cand.layout), _appetite(cand.layout)
        if not check(leanest[key]).fits(c.usable):
            continue  # the family's leanest sibling does not fit: none of it can
        if any(want[0] >= fb and want[1] >= fk for fb, fk in failed.get(key, ())):
            continue  # a leaner sibling already did not fit: this one cannot (not built)
        if check(cand).fits(c.usable) and _shape(cand) not in {_shape(b) for b in best}:
            best.append(cand)  # visited in speed order: the fastest of its shape that fits
    # every candidate faster than where the visit stopped was checked or shown not to fit; the
    # leanest siblings checked on the way fit too, slower: they fill the list when it is short
    return _fastest_fits(checked.values(), c.usable, top), tried


def _fastest_fits(checked, usable: int, top: int) -> list[ClusterCandidate]:
    """The ``top`` fastest candidates that fit, one per layout shape (its fastest ZeRO /
    checkpointing that fits)."""
    out: list[ClusterCandidate] = []
    for cand in sorted((x for x in checked if x.fits(usable)),
                       key=lambda x: -x.timed.tokens_per_s_per_gpu):
        if len(out) < top and _shape(cand) not in {_shape(b) for b in out}:
            out.append(cand)
    return out


def _family(lay: Layout) -> tuple:
    """Layouts that differ only in micro-batch size and checkpointing."""
    return (lay.tp, lay.pp, lay.cp, lay.ep, lay.dp, lay.pp_schedule, lay.embedding_part,
            lay.zero)


def _appetite(lay: Layout) -> tuple[int, int]:
    """(micro-batch, activations kept: full 0, selective 1, none 2): within a :func:`_family`
    memory does not fall as either grows -- a micro-batch of b sequences keeps b times one
    sequence's activations, and the b x in-flight micro-batches a stage holds (b x min(m, p)
    under 1F1B, m = batch / (dp b)) does not shrink with b -- so once a layout does not fit,
    every sibling at least as large in both does not either, and the search skips it unbuilt.
    That is what lets a search whose fastest layouts all overflow reach the ones that fit."""
    return lay.batch, _KEEP[lay.checkpointing]


def _train_candidates(c: _Ctx, seq: int, batch: int) -> list[ClusterCandidate]:
    arch = c.model.architecture
    fpt = model_flops_per_token(arch, c.device, c.eff, c.prec, seq, c.base.attention)
    per, _ = optimizer_state_bytes(get_optimizer(c.base.optimizer), None, 1, c.prec.state)
    out = []
    lim = layout_limits(c.base)
    for lay in _train_layouts(arch, c.base.gpus, seq, batch, c.topo.gpus_per_node, lim):
        if _valid(c, lay, "train") is not None:
            continue
        for ckpt in CHECKPOINTING:
            for zero in lim.zero if lay.dp * lay.cp > 1 else (0,):
                cand = replace(lay, zero=zero, checkpointing=ckpt, sharding=c.base.sharding)
                out.append(ClusterCandidate(layout=cand, timed=_time_train(c, cand, fpt, per)))
    return out


def _serve_candidates(c: _Ctx, concurrency: int, context: int,
                      max_decode_s: float | None) -> list[ClusterCandidate]:
    arch = c.model.architecture
    lim = layout_limits(c.base)
    out = []
    for tp in _tps(arch, c.base.gpus, c.topo.gpus_per_node, lim.dims):
        for pp in _divisors(c.base.gpus // tp, min(arch.num_layers, 64) if "pp" in lim.dims
                            else 1):
            dp = c.base.gpus // (tp * pp)
            b = math.ceil(concurrency / dp)
            lay = Layout(tp=tp, pp=pp, dp=dp, batch=b, seq=context)
            if _valid(c, lay, "infer") is not None:
                continue
            job = c.base._evolve(mode="infer", batch=b, seq=context, context=context,
                                 runtime=resolve_runtime(c.base.runtime, "infer",
                                                         c.base.engine))
            spec = StepSpec.of(job, mode="infer", seq=context, new_tokens=1, trainable=None,
                               single_device=True)
            spec = replace(spec, pp=pp)  # the stages, as speed's layout path times them
            dec, pre, _, _ = build_steps(shard_arch(arch, tp), 0, (), c.device, c.eff, c.prec,
                                         spec)
            st = serve_time(arch, dec.time_s, pre.time_s if pre else dec.time_s, lay, c.topo,
                            c.eff, c.prec.act)
            if max_decode_s is None or st.decode_s <= max_decode_s:
                out.append(ClusterCandidate(layout=lay, timed=st))
    return out


def _with_command(c: _Ctx, cand: ClusterCandidate, mode: str) -> ClusterCandidate:
    """The candidate with its job and the ``gpuplan fit`` command that plans it."""
    job = _job_of(c, cand.layout, mode)
    name = job.model if isinstance(job.model, str) else c.model.name
    head = ["gpuplan", "fit", name, "--gpu", c.gpu.name, "--mode", mode]
    if job.engine != "auto":
        head += ["--engine", job.engine]
    return replace(cand, job=job, command=" ".join(head + job_flags(job)))


def _why(best: list[ClusterCandidate]) -> str | None:
    """Why the runner-up loses: the part of its step that differs most from the winner's."""
    if len(best) < 2:
        return None
    a, b = best[0], best[1]
    slower = 1 - b.tokens_per_s / a.tokens_per_s
    if isinstance(a.timed, ServeTime):
        return (f"runner-up {b.layout.label()} is {slower:.1%} slower per GPU: "
                f"{b.timed.decode_s * 1e3:.2f} ms per token vs {a.timed.decode_s * 1e3:.2f} ms")
    parts = ("compute_s", "bubble_s", "tp_comm_s", "cp_comm_s", "ep_comm_s", "pp_comm_s",
             "dp_exposed_s", "optimizer_s")
    names = {"compute_s": "compute (recompute included)", "bubble_s": "pipeline bubble",
             "tp_comm_s": "exposed TP collectives", "cp_comm_s": "exposed CP ring",
             "ep_comm_s": "EP all-to-all", "pp_comm_s": "pipeline sends",
             "dp_exposed_s": "exposed data-parallel traffic", "optimizer_s": "optimizer step"}
    diff = {p: getattr(b.timed, p) - getattr(a.timed, p) for p in parts}
    worst = max(diff, key=diff.get)
    mem = ""
    if a.memory_bytes is not None and b.memory_bytes is not None:
        mem = f"; it uses {b.memory_bytes / 1e9:.1f} GB per GPU vs {a.memory_bytes / 1e9:.1f} GB"
    return (f"runner-up {b.layout.label()} is {slower:.1%} slower: its {names[worst]} is "
            f"{diff[worst]:.3g} s longer per step{mem}")


#: Most GPUs the search of GPU counts tries (``--gpus`` left out).
MAX_SEARCH_GPUS = 16384
#: How far past the fewest that can hold the model's states the count search goes.
COUNT_SPAN = 16


def _counts(model: Model, gpu: GPU, job: Job, mode: str) -> list[int]:
    """The GPU counts a search without ``--gpus`` tries: powers of two and whole nodes, from the
    fewest whose memory holds the model's states (training: 16-bit weights and gradients, the
    fp32 master and Adam's two states; serving: the weights) up to :data:`COUNT_SPAN` times as
    many (at most :data:`MAX_SEARCH_GPUS`)."""
    r = job.train_recipe
    per = (r.weight_bytes + r.grad_bytes + r.master_bytes + 2 * r.state_bytes) \
        if mode == "train" else 2
    lo = max(1, -(-model.params.total * per // gpu.memory_bytes))
    hi = min(MAX_SEARCH_GPUS, lo * COUNT_SPAN)
    node = job.gpus_per_node
    out = {1 << k for k in range(15) if lo <= 1 << k <= hi}
    out |= {n for n in range(node, hi + 1, node) if n >= lo and (n // node) & (n // node - 1)
            == 0}  # whole nodes in powers of two of nodes
    return sorted(out) or [hi]


def cluster_search(model: Model, gpu: GPU, job: Job, *, global_batch: int | None = None,
                   concurrency: int | None = None, top: int = 3, max_memory_checks: int = 2000,
                   max_decode_s: float | None = None, tp_overlap: bool = False,
                   search_gpus: bool = False) -> ClusterPlan:
    """The layout search over ``job.gpus`` (:func:`search_layouts`), or with ``search_gpus``
    over the GPU counts of :func:`_counts`: each count searched, the one chosen whose best
    layout gives the most tokens/s per GPU -- the least GPU time per token -- the fewer GPUs
    winning within 1%; every count's best stated in ``gpu_counts``."""
    kw = dict(global_batch=global_batch, concurrency=concurrency, top=top,
              max_memory_checks=max_memory_checks, max_decode_s=max_decode_s,
              tp_overlap=tp_overlap)
    if not search_gpus:
        return search_layouts(model, gpu, job, **kw)
    start = time.perf_counter()
    mode = "infer" if job.mode == "infer" else "train"
    if model.architecture is None:
        raise InputError(f"{model.name}: the cluster search needs the architecture (layers, "
                         "heads); name a catalog model or a config.json")
    plans = []
    for n in _counts(model, gpu, job, mode):
        try:
            p = search_layouts(model, gpu, job.with_(gpus=n, tp=1, pp=1, cp=1, ep=1, dp_shard=None,
                                                     sequence_parallel=False,
                                                     ep_overlap=False), **kw)
        except InputError:
            continue  # no layout of n GPUs (the global batch does not split over them)
        if p.best:
            plans.append(p)
    if not plans:
        counts = _counts(model, gpu, job, mode)
        raise InputError(f"no GPU count from {counts[0]} to {counts[-1]} fits a layout of this "
                         f"job; give {opt('gpus')} N, or a smaller {opt('global_batch')} or "
                         f"{opt('concurrency')}", field="gpus")
    rate = max(p.best[0].timed.tokens_per_s_per_gpu for p in plans)
    chosen = min((p for p in plans if p.best[0].timed.tokens_per_s_per_gpu >= 0.99 * rate),
                 key=lambda p: p.gpus)
    summary = tuple({"gpus": p.gpus, "label": p.best[0].layout.label(),
                     "tokens_per_s": p.best[0].tokens_per_s,
                     "tokens_per_s_per_gpu": p.best[0].timed.tokens_per_s_per_gpu}
                    for p in plans)
    note = (f"--gpus searched: {', '.join(str(p.gpus) for p in plans)} GPUs have a layout that "
            f"fits; {chosen.gpus} chosen: the most tokens/s per GPU (the least GPU time per "
            "token), the fewer GPUs within 1%")
    return replace(chosen, gpu_counts=summary, notes=chosen.notes + (note,),
                   elapsed_s=time.perf_counter() - start)


def search_layouts(model: Model, gpu: GPU, job: Job, *, global_batch: int | None = None,
                   concurrency: int | None = None, top: int = 3, max_memory_checks: int = 2000,
                   max_decode_s: float | None = None, tp_overlap: bool = False) -> ClusterPlan:
    """Search the layouts of ``job`` (its ``gpus``, ``seq``, precision, optimizer, attention,
    ``gpus_per_node``, ``inter_node``; ``mode`` train or infer) on ``gpu``.

    Training needs ``global_batch`` (sequences per step, over all data-parallel ranks); serving
    needs ``concurrency`` (sequences decoded at once over all replicas; the context is
    ``job.context`` or ``job.seq``) and keeps layouts whose time per output token is at most
    ``max_decode_s``. The ``top`` fastest layouts that fit are returned, best first."""
    start = time.perf_counter()
    if model.architecture is None:
        raise InputError(f"{model.name}: the cluster search needs the architecture (layers, "
                         "heads); name a catalog model or a config.json")
    # past the model's positions: one line before any search where it cannot run, else a note
    seq_notes = check_seq(model, job, serving=job.mode == "infer")
    mode = "infer" if job.mode == "infer" else "train"
    c = _ctx(model, gpu, job, mode, tp_overlap)
    seq = job.seq or default_seq(model.architecture)  # fit's and speed's default, not the context
    if mode == "train":
        if not global_batch or global_batch < 1:
            raise InputError(f"the cluster search of a training job needs {opt('global_batch')} B "
                             "(sequences per step over all GPUs)")
        timed = _train_candidates(c, seq, global_batch)
    else:
        if not concurrency or concurrency < 1:
            raise InputError(f"the cluster search of a serving job needs {opt('concurrency')} C",
                             field="concurrency")
        seq = job.context or seq
        timed = _serve_candidates(c, concurrency, seq, max_decode_s)
    if not timed and mode == "train":
        raise InputError(f"no valid layout of {job.gpus} GPUs for this job (global batch "
                         f"{global_batch} must be divisible by the data-parallel degree); try "
                         "a global batch that is a multiple of the GPU count")
    if not timed:
        raise InputError(f"no serving layout of {job.gpus} GPUs for this job"
                         + (f" decodes a token within {max_decode_s * 1e3:g} ms; allow more "
                            "time per token, or give more GPUs or a serving engine"
                            if max_decode_s is not None else "; give more GPUs"))
    best, tried = _rank(c, timed, mode, top, max_memory_checks)
    best = [_with_command(c, cand, mode) for cand in best]
    notes = [*seq_notes, f"topology: {c.topo.stated}"]
    notes += [n for n in (power_clock_fraction(gpu, job.power_limit_w)[1],) if n]
    notes += engine_notes(job, mode)
    notes += [
             f"{len(timed)} layouts timed; memory checked fastest first for {len(tried)}"]
    return ClusterPlan(model=model.name, gpu=gpu.name, gpus=job.gpus, mode=mode, seq=seq,
                       global_batch=global_batch, concurrency=concurrency, usable_bytes=c.usable,
                       topology=c.topo, best=tuple(best), tried=tuple(tried),
                       enumerated=len(timed), why_runner_up_loses=_why(best),
                       elapsed_s=time.perf_counter() - start, notes=tuple(notes))
