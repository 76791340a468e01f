"""The fewest GPUs of one kind a job needs: ZeRO-3 data parallel alone, tensor parallel alone
(serving), or a TP x PP layout with ZeRO over its data-parallel group.

``gpuplan fit``'s verdict columns and the solver's "more GPUs" suggestions both come from these
functions, so the two always say the same number. Every answer is the full accounting
(:func:`~.train.train_memory`, :func:`~.infer.infer_memory`) of the layout it names; the search
only decides which layouts to plan:

* **ZeRO-3 alone** (:func:`fewest_zero3`): per-GPU memory falls as the GPU count grows, so a
  bisection over 2..:data:`MAX_GPUS` finds the fewest.
* **Tensor parallel alone, serving** (:func:`fewest_tp`): the degrees of :data:`TP_DEGREES`, in
  order, the first that fits.
* **A TP x PP layout, training** (:func:`train_layout`): TP over the divisors of the head count up
  to the GPUs of one node (TP stays within a node), sequence parallelism on whenever TP > 1, PP over
  the divisors of the layer count up to :data:`MAX_STAGES` (Megatron-LM's even split), ZeRO-3 over
  the data-parallel remainder (ZeRO-1 named instead where it fits on the same GPUs: less traffic).
  A pipeline is planned with at least as many micro-batches as stages -- the 1F1B steady state, in
  which the first stage holds ``pp`` micro-batches in flight (Narayanan et al. 2021): a pipeline
  run with fewer has a bubble of half the step or more, and planning it with fewer would hide
  that memory. Only layouts on fewer GPUs than ZeRO-3 alone are searched (the answer is offered
  only there).
* **A TP x PP layout, serving** (:func:`infer_layout`): where tensor parallelism within one node is
  not enough, TP within a node and pipeline stages across nodes, the fewest GPUs (ties: the wider
  TP, the lower latency).

The search stays cheap (``gpuplan.plan`` runs it for every GPU it lists):

* lower bounds rule out GPU counts and whole (TP, PP) pairs without planning them (:class:`_Floor`:
  the whole model's states spread over N GPUs, the one-GPU step's activations split t ways, the
  overhead every rank has);
* each (TP, PP) pair left is planned once at the largest data-parallel degree; that plan bounds
  every smaller degree (the activations, gradients and temporaries only grow as d falls, the
  sharded states are 1/d of the rank's share), so the search starts at the first degree the
  bound allows and usually plans one or two more;
* deeper pipelines are tried only while each lowers the count (:func:`train_layout` says why);
* every evaluation is kept per job (:func:`shared_memo`): the GPUs of a plan, later plans of the
  same job and the solver reuse them.
"""

from __future__ import annotations

import math
from dataclasses import replace
from operator import attrgetter

from .._record import record
from ..engines.profiles import layout_limits
from ..errors import InputError
from ..hardware import GPU
from ..job import FLAT_FIELDS, Job
from ..models import Model
from .infer import infer_memory
from ..parallel import check_layout
from .overhead import OverheadLevel, check_overrides, runtime_overhead
from .activations import train_activations
from .states import train_states
from .train import gpu_non_tn_fp8, train_memory

__all__ = ["MAX_GPUS", "TP_DEGREES", "MAX_TP", "MAX_STAGES", "LayoutFit", "fewest_zero3",
           "fewest_tp", "serving_tp_degrees",
           "train_layout", "infer_layout", "shared_memo"]

#: Largest GPU count the "how many GPUs" searches consider.
MAX_GPUS = 4096

#: Largest tensor-parallel degree the serving search tries (within and across nodes).
MAX_TP = 64
#: The degrees it tries, when the architecture allows each (:func:`serving_tp_degrees`).
TP_DEGREES = tuple(range(1, MAX_TP + 1))

#: Most pipeline stages a layout search tries (Llama 3 405B was trained with 16: Dubey et al.
#: 2024, table 4).
MAX_STAGES = 32


def _accum_field(job: Job) -> str:
    """Where ``job`` counts its micro-batches: ``grad_accum`` when it accumulates without naming
    pipeline micro-batches, else ``micro_batches``."""
    return "grad_accum" if job.micro_batches is None and job.grad_accum > 1 else "micro_batches"


@record(kw_only=False)
class LayoutFit:
    """A TP x PP (x ZeRO over DP) layout and its per-GPU peak, fullest rank."""

    mode: str
    gpus: int
    tp: int
    pp: int
    zero: int
    """ZeRO stage over the data-parallel group (0 when there is none: dp = 1)."""
    sequence_parallel: bool
    micro_batches: int | None
    """Micro-batches through the pipeline (training with pp > 1), else None."""
    peak_bytes: int

    @property
    def dp(self) -> int:
        return self.gpus // (self.tp * self.pp)

    def changes(self, job: Job) -> dict:
        """The Job fields this layout sets on ``job``. The pipeline's micro-batches are its
        accumulation steps: set as ``grad_accum`` where the job counts them there (so the two
        never disagree), else as ``micro_batches``."""
        d = {"tp": self.tp, "pp": self.pp, "gpus": self.gpus, "cp": 1, "ep": 1,
             "sequence_parallel": self.sequence_parallel}
        if job.engine != "auto" and job.engine_profile.pp_parts == "always" and self.pp > 1:
            d.update(pp_embedding_part=True, pp_loss_part=True)  # as the Job would resolve
        if self.mode == "train":
            d["zero"] = self.zero
            if self.micro_batches is not None:
                d[_accum_field(job)] = self.micro_batches
        return d

    def apply(self, job: Job) -> Job:
        """``job`` under this layout (the values came from the accepted sets)."""
        return job._evolve(**self.changes(job))

    def flags(self, job: Job) -> str:
        """The command-line options that ask for this layout."""
        out = f"--tp {self.tp} --pp {self.pp} --gpus {self.gpus}"
        if self.mode == "train":
            if self.zero != job.zero:
                out += f" --zero {self.zero}"
            if self.sequence_parallel:
                out += " --sequence-parallel"
            if self.micro_batches is not None and self.micro_batches != (
                    job.micro_batches or job.grad_accum):
                flag = "--grad-accum" if _accum_field(job) == "grad_accum" else "--micro-batches"
                out += f" {flag} {self.micro_batches}"
        return out

    def label(self) -> str:
        """``tp8 x pp2 x dp3, ZeRO-1`` (training) or ``tp8 x pp2`` (serving)."""
        out = f"tp{self.tp} x pp{self.pp}"
        if self.mode == "train":
            out += f" x dp{self.dp}" + (f", ZeRO-{self.zero}" if self.dp > 1 else "")
        return out

    def to_dict(self) -> dict:
        d = {"tp": self.tp, "pp": self.pp, "gpus": self.gpus}
        if self.mode == "train":
            d.update(dp=self.dp, zero=self.zero, sequence_parallel=self.sequence_parallel,
                     micro_batches=self.micro_batches)
        d["peak_bytes"] = self.peak_bytes
        return d


#: A job's fields but the model and the mode (the memory of a job does not depend on its mode).
_JOB_KEY = attrgetter(*(f for f in FLAT_FIELDS if f not in ("model", "mode")))

_MEMOS: dict[tuple, tuple[Model, dict]] = {}


def shared_memo(model: Model, job: Job, level: OverheadLevel, overrides=None,
                gpu: GPU | None = None) -> dict:
    """The searches' evaluations for one job, kept between calls: every GPU of a plan, a later
    plan of the same job and the solver's runs on it reuse them (they are the full accounting
    of fixed layouts of a fixed job, so they never go stale). Kept for at most 256 jobs. The
    GPUs whose architecture moves the memory (:func:`~.train.gpu_non_tn_fp8`: per-tensor FP8
    weights without transposes) share a memo apart from the others'."""
    over = tuple(sorted(check_overrides(overrides).items()))
    key = (id(model), _JOB_KEY(job), level, over, gpu_non_tn_fp8(gpu, job))
    hit = _MEMOS.get(key)
    if hit is not None and hit[0] is model:
        return hit[1]
    if len(_MEMOS) >= 256:
        _MEMOS.clear()
    memo: dict = {}
    _MEMOS[key] = (model, memo)
    return memo


def _total(fn, model: Model, job: Job, level: OverheadLevel, overrides, **kw) -> int | None:
    """The per-GPU total, or None for a layout the architecture does not allow."""
    try:
        return fn(model, job, overhead_level=level, overhead_overrides=overrides, **kw).total_bytes
    except InputError:
        return None


def fewest_zero3(model: Model, job: Job, usable: int, level: OverheadLevel, overrides=None,
                 memo: dict | None = None, gpu: GPU | None = None) -> int | None:
    """Smallest N with ZeRO-3 over N GPUs such that one GPU's peak fits (None: none up to
    :data:`MAX_GPUS`). Per-GPU memory falls as N grows (for N >= 2), so a search from the
    bound of :class:`_Floor` (galloping up, then bisecting) finds it. ``memo`` keeps the per-N
    totals for the job (:func:`shared_memo`)."""
    memo = {} if memo is None else memo
    if layout_limits(job).deepest_zero < 3:
        return None  # the engine has no ZeRO-3 (Megatron's distributed optimizer is ZeRO-1)
    # under a parallel layout N counts in whole model replicas (tp x pp x cp GPUs each), and
    # dp x cp must hold the expert-parallel group
    unit = job.tp * job.pp * job.cp * (job.ep // math.gcd(job.ep, job.cp))

    def fits(k: int) -> bool:
        n = k * unit
        key = ("zero3", n)
        if key not in memo:
            # the same job with valid values changed: no need to validate it again
            memo[key] = train_memory(model, job._evolve(zero=3 if k > 1 else job.zero, gpus=n),
                                     overhead_level=level, overhead_overrides=overrides,
                                     gpu=gpu).total_bytes
        return memo[key] <= usable

    top = MAX_GPUS // unit
    if top < 1:
        return None
    if fits(1):
        return unit
    lo = 2
    if unit == 1:  # the bounds of _Floor: a ZeRO-3 rank holds the whole step's activations
        lo = _Floor.of(model, job, level, overrides, memo).first_zero3(usable)
        if lo is None:
            return None
    if top < lo or not fits(top):
        return None
    bad, k, step = lo - 1, lo, 1  # fits(top) holds; gallop up from the bound, then bisect
    while not fits(k):
        bad, k, step = k, min(top, k + step), step * 2
    while k - bad > 1:
        mid = (bad + k) // 2
        bad, k = (bad, mid) if fits(mid) else (mid, k)
    return k * unit


def fewest_tp(model: Model, job: Job, usable: int, level: OverheadLevel, overrides=None,
              memo: dict | None = None) -> int | None:
    """Fewest GPUs serving the job with tensor parallelism alone: the degrees the architecture
    and the engine run (:func:`serving_tp_degrees`), in order, each planned as the layout it is
    -- one rank of ``--tp T --gpus T`` tensor by tensor (the job's own pipeline stages kept when
    it has a layout) -- the first that fits. A model without its architecture (a bare parameter
    count) splits its weights evenly, the only model there is of it."""
    memo = {} if memo is None else memo
    stages = job.pp if job.tp * job.pp * job.cp * job.ep > 1 else 1
    for tp in serving_tp_degrees(model, job, memo):
        key = ("tp", tp)
        if key not in memo:
            if model.architecture is None:
                memo[key] = infer_memory(model, job, tensor_parallel=tp, overhead_level=level,
                                         overhead_overrides=overrides).total_bytes
            else:
                memo[key] = _total(infer_memory, model, _tp_job(job, tp, stages), level,
                                   overrides)
        if memo[key] is not None and memo[key] <= usable:
            return tp * stages
    return None


def _tp_job(job: Job, tp: int, stages: int) -> Job:
    """The serving job at TP ``tp`` over ``tp x stages`` GPUs (what ``--tp T --gpus T`` plans)."""
    return job.with_(mode="infer", tp=tp, gpus=tp * stages, sequence_parallel=False,
                     distribute_checkpoints=False)


def serving_tp_degrees(model: Model, job: Job, memo: dict) -> tuple[int, ...]:
    """The TP degrees up to :data:`MAX_TP` that ``gpuplan fit`` accepts for this job: every one
    the layout check takes (the attention heads split evenly, the K/V heads split or replicated
    evenly, the MLP widths split) and the job's engine runs. falcon-7b's 71 heads take none but
    1 (71 is past the bound): no tensor-parallel degree serves it, which the layout column then
    answers with pipeline stages."""
    key = ("serving-tp",)
    if key in memo:
        return memo[key]
    arch = model.architecture
    if arch is None:  # a bare parameter count: no heads to split
        memo[key] = (1, 2, 4, 8, 16, 32, 64)
        return memo[key]
    stages = job.pp if job.tp * job.pp * job.cp * job.ep > 1 else 1
    out = []
    for t in TP_DEGREES:
        if arch.num_heads % t:
            continue
        try:
            check_layout(arch, _tp_job(job, t, stages))
        except InputError:
            continue
        out.append(t)
    memo[key] = tuple(out)
    return memo[key]


# --------------------------------------------------------------------------------------------------
# TP x PP layouts


def _degrees(model: Model, job: Job, memo: dict, train: bool) -> tuple[tuple[int, ...],
                                                                      tuple[int, ...]]:
    """(TP degrees, PP stage counts) the architecture allows: TP up to one node, with sequence
    parallelism when training; PP dividing the layers, up to :data:`MAX_STAGES`."""
    key = ("degrees", train)
    if key in memo:
        return memo[key]
    arch = model.architecture
    dims = layout_limits(job).dims
    tps = []
    top_t = min(job.gpus_per_node, arch.num_heads) if "tp" in dims else 1
    for t in range(1, top_t + 1):  # TP divides the heads
        if arch.num_heads % t:
            continue
        probe = job._evolve(tp=t, pp=1, cp=1, ep=1, gpus=t,
                            sequence_parallel=train and t > 1 and "sp" in dims)
        try:
            check_layout(arch, probe)
        except InputError:
            continue
        tps.append(t)
    pps = []
    for p in range(1, min(arch.num_layers, MAX_STAGES) + 1 if "pp" in dims else 2):
        if arch.num_layers % p:
            continue
        try:
            check_layout(arch, job._evolve(tp=1, pp=p, cp=1, ep=1, gpus=p,
                                           sequence_parallel=False,
                                           distribute_checkpoints=False))
        except InputError:
            continue
        pps.append(p)
    memo[key] = tuple(tps), tuple(pps)
    return memo[key]


def _searchable(model: Model, job: Job) -> bool:
    """A layout search needs the architecture; a job with its own context or expert
    parallelism keeps it, and a LoRA fine-tune stays data parallel (the accounting does not
    model adapters under Megatron's TP sharding): neither is searched."""
    arch = model.architecture
    return arch is not None and arch.num_layers > 0 and arch.num_heads > 0 \
        and job.cp == 1 and job.ep == 1 and job.lora_rank is None


@record(kw_only=False)
class _Floor:
    """What bounds every layout of a job from below (no layout holds less on its fullest rank).

    ``states``: the whole model's weights, gradients, master copy, optimizer states and step
    temporaries -- summed over the ranks of any layout they are at least this (sharding splits
    them, replication only adds), so the fullest rank's optimizer step over N GPUs holds at least
    ``states / N``. ``sharded``: the weights, master copy and optimizer states alone (every phase
    holds them, so every phase holds ``sharded / N``). ``overhead``: the CUDA context, workspaces
    and NCCL buffers every rank of a multi-GPU job has. ``step``: the activations and
    temporaries at the forward or backward peak of the job on one GPU, and ``layers``: what the
    forward keeps of all its layers for one micro-batch (the lightest layer kind times the layer
    count; 0 under full checkpointing) -- under tensor parallelism every tensor of the step is
    split over at most ``t`` ranks or replicated, so a TP rank holds at least ``step / t``; a
    pipeline's first stage holds ``pp`` micro-batches of ``L / pp`` layers, at least
    ``layers / t``."""

    states: int
    sharded: int
    overhead: int
    step: int
    layers: int

    @staticmethod
    def of(model: Model, job: Job, level: OverheadLevel, overrides, memo: dict) -> "_Floor":
        return _floor(model, job, level, overrides, memo)

    def first_zero3(self, usable: int) -> int | None:
        """The fewest GPUs (>= 2) ZeRO-3 alone could fit on: each rank holds the whole step's
        activations, 1/N of the states, and the overhead (None: not on any number)."""
        room = usable - self.overhead
        if room <= 0 or self.step >= room:
            return None
        return max(2, -(-self.states // room), -(-self.sharded // (room - self.step)))

    def first_d(self, t: int, p: int, usable: int) -> int | None:
        """The smallest data-parallel degree the bound allows for (t, p) (None: none)."""
        held = (self.step if p == 1 else self.layers) // t
        room = usable - held - self.overhead
        if room <= 0:
            return None
        return max(1, -(-self.sharded // (room * t * p)))


def _floor(model: Model, job: Job, level: OverheadLevel, overrides, memo: dict) -> _Floor:
    key = ("floor",)
    if key not in memo:
        one = job._evolve(gpus=1, zero=0, tp=1, pp=1, cp=1, ep=1, sequence_parallel=False,
                          distribute_checkpoints=False,
                          micro_batches=None, grad_accum=1)
        st = train_states(model, one)
        sharded = st.weights_trainable + st.base + st.master + st.opt
        over = runtime_overhead(gpus=2, zero=0, grad_bytes=0, grad_elem_bytes=2, dynamic=0,
                                level=level, overrides=overrides, data_parallel=1)
        act = train_activations(model, one, grad_bytes=0)
        step = max(act.forward_peak + act.forward_temporaries,
                   act.backward_peak + act.backward_temporaries)
        layers = 0
        if act.per_layer_bytes and job.checkpointing != "full":
            layers = min(act.per_layer_bytes) * model.architecture.num_layers
        memo[key] = _Floor(states=sharded + st.grads + st.step_tmp, sharded=sharded,
                           overhead=over.bytes, step=step if act.known else 0, layers=layers)
    return memo[key]


def _layout(job: Job, t: int, p: int, d: int, zero: int) -> LayoutFit:
    m = None
    if p > 1:
        m = max(job.micro_batches or job.grad_accum, p)
    return LayoutFit(mode="train", gpus=t * p * d, tp=t, pp=p, zero=zero if d > 1 else 0,
                     sequence_parallel=t > 1 and "sp" in layout_limits(job).dims, micro_batches=m,
                     peak_bytes=0)


class _TrainSearch:
    """One GPU's search over TP x PP x DP layouts; the evaluations are shared through ``memo``
    (every GPU of a plan asks about the same layouts)."""

    def __init__(self, model: Model, job: Job, usable: int, level: OverheadLevel, overrides,
                 memo: dict, floor: _Floor, gpu: GPU | None = None):
        self.model, self.job, self.usable, self.gpu = model, job, usable, gpu
        self.level, self.overrides, self.memo = level, overrides, memo
        self.floor, self.over = floor, floor.overhead
        self.zero = layout_limits(job).deepest_zero
        """The deepest ZeRO stage the engine runs: the one a layout is planned with (ZeRO-3's
        memory at the same layout bounds it from below: the bounds stay valid)."""
        self.zero_one = job.sharding != "fsdp2" and (
            job.engine == "auto" or 1 in job.engine_profile.zero_stages)
        """ZeRO-1 is named instead where it fits (less traffic): not under FSDP2, which has no
        optimizer-only sharding."""

    def peak(self, t: int, p: int, d: int, zero: int | None = None) -> int | None:
        """The fullest rank's total under (t, p, d) with ZeRO-``zero`` over d (None: the
        architecture does not allow the layout)."""
        zero = (self.zero if zero is None else zero) if d > 1 else 0
        key = ("layout", t, p, d, zero)
        if key not in self.memo:
            job = _layout(self.job, t, p, d, zero).apply(self.job)
            self.memo[key] = _total(train_memory, self.model, job, self.level, self.overrides,
                                    gpu=self.gpu)
        return self.memo[key]

    def fits(self, t: int, p: int, d: int, zero: int | None = None) -> bool:
        v = self.peak(t, p, d, zero)
        return v is not None and v <= self.usable

    def top(self, t: int, p: int) -> tuple | None:
        """(d, total, rest, sharded, held, gathered, phase) of (t, p) with ZeRO-3 over the most
        data-parallel ranks the search allows, of its fullest stage: ``rest`` the peak phase's
        tensors but the weights, master copy and optimizer states (each of those is 1/d of the
        rank's share: ``sharded``), none of which shrinks as d falls; ``held`` its activations
        and temporaries, ``gathered`` the ZeRO-3 units, ``phase`` which phase peaks."""
        key = ("top", t, p)
        if key not in self.memo:
            d = MAX_GPUS // (t * p)
            job = _layout(self.job, t, p, d, 3).apply(self.job)
            try:
                r = train_memory(self.model, job, overhead_level=self.level,
                                 overhead_overrides=self.overrides, gpu=self.gpu)
            except InputError:
                self.memo[key] = None
            else:
                sharded = r.weights_bytes + r.master_weights_bytes + r.optimizer_bytes
                peak = max(r.phases.values())
                self.memo[key] = (d, r.total_bytes, peak - sharded, sharded,
                                  r.activations_bytes + r.temporaries_bytes,
                                  r.gathered_params_bytes, r.peak_phase)
                self.memo[("layout", t, p, d, 3)] = r.total_bytes
        return self.memo[key]

    def first_d(self, t: int, p: int, top: tuple[int, int, int, int]) -> int | None:
        """The smallest d >= 2 the bound does not rule out: at d every phase holds at least its
        gradients, activations, temporaries and gathered units at the top d, plus the sharded
        states (each ceil(x / d) >= (x_top - 1) d_top / d), plus the overhead every rank has."""
        d_top, _, rest, sharded = top[:4]
        room = self.usable - rest - self.over
        if room <= 0:
            return None
        return max(2, -(-max(0, sharded - 3) * d_top // room))

    def fewest_dp(self, t: int, p: int, lo: int, hi: int) -> int | None:
        """The smallest data-parallel degree in [lo, hi] on which (t, p) fits (ZeRO-3 over it;
        none at d = 1); None where none does. Memory falls as d grows."""
        bound = self.floor.first_d(t, p, self.usable)
        if bound is None or max(lo, bound) > hi:
            return None  # ruled out without planning (t, p)
        lo = max(lo, bound)
        top = self.top(t, p)
        if top is None or top[1] > self.usable:
            return None
        if lo == 1:
            if self.fits(t, p, 1):
                return 1
            lo = 2
        start = self.first_d(t, p, top)
        if start is None or max(lo, start) > hi:
            return None
        bad, d, step = max(lo, start) - 1, max(lo, start), 1
        while not self.fits(t, p, d):  # gallop up from the bound, then bisect
            if d >= hi:
                return None
            bad, d, step = d, min(hi, d + step), step * 2
        while d - bad > 1:
            mid = (bad + d) // 2
            bad, d = (bad, mid) if self.fits(t, p, mid) else (mid, d)
        return d


def train_layout(model: Model, job: Job, usable: int, level: OverheadLevel, overrides=None,
                 memo: dict | None = None, *, below: int | None = None,
                 gpu: GPU | None = None) -> LayoutFit | None:
    """The fewest GPUs of ``usable`` bytes each that train ``job`` under a TP x PP layout with
    ZeRO over its data-parallel group, where that is fewer than ZeRO-3 alone needs (``below``:
    that count, found with :func:`fewest_zero3` when not given); None where no layout is.

    TP-only layouts are tried first, widest TP first; then, per TP degree, pipelines from the
    shallowest up, while each deeper one still lowers the count: with at least ``pp``
    micro-batches in flight the first stage holds ``pp`` micro-batches of ``L / pp`` layers --
    one micro-batch's activations of the whole model, whatever the depth (Korthikanti et al.
    2022, sec. 4.2.3) -- and, at a given GPU count, its share of the states grows with the depth
    (the embedding is all its own), so a deeper pipeline only helps by landing on a GPU count
    the shallower one cannot."""
    memo = {} if memo is None else memo
    if not _searchable(model, job):
        return None
    if below is None:
        below = fewest_zero3(model, job, usable, level, overrides, memo, gpu)
    hi = MAX_GPUS if below is None else below - 1
    floor = _floor(model, job, level, overrides, memo)
    if usable <= floor.overhead:
        return None
    lo = max(2, -(-floor.states // (usable - floor.overhead)))
    if lo > hi:
        return None
    tps, pps = _degrees(model, job, memo, train=True)
    search = _TrainSearch(model, job, usable, level, overrides, memo, floor, gpu)
    best: tuple[int, int, int, int] | None = None  # (gpus, t, p, d)

    def visit(t: int, p: int) -> bool:
        """Try (t, p) below the best so far; True when it lowered the count."""
        nonlocal best
        unit = t * p
        top = (best[0] - 1 if best else hi) // unit
        d = search.fewest_dp(t, p, max(1, -(-lo // unit)), top)
        if d is None:
            return False
        best = (unit * d, t, p, d)
        return True

    for t in sorted(tps, reverse=True):
        if t > 1:
            visit(t, 1)
    for t in sorted(tps, reverse=True):
        for p in pps[1:]:
            unit = t * p
            if (best[0] - 1 if best else hi) // unit < max(1, -(-lo // unit)):
                continue  # no count of this shape between the bound and the best
            if not visit(t, p):
                break
    if best is None:
        return None
    n, t, p, d = best
    zero = 1 if d > 1 and search.zero_one and search.fits(t, p, d, 1) else search.zero
    return replace(_layout(job, t, p, d, zero), peak_bytes=search.peak(t, p, d, zero))


def infer_layout(model: Model, job: Job, usable: int, level: OverheadLevel, overrides=None,
                 memo: dict | None = None, *, tp_gpus: int | None = -1) -> LayoutFit | None:
    """Where tensor parallelism within one node does not serve ``job`` (``tp_gpus``: what
    :func:`fewest_tp` found; worked out when not given), the fewest GPUs with TP within a node
    and pipeline stages across nodes; ties go to the wider TP (lower latency). None where TP
    within a node is enough, or no layout up to a node's TP x :data:`MAX_STAGES` fits."""
    memo = {} if memo is None else memo
    if not _searchable(model, job):
        return None
    if tp_gpus == -1:
        tp_gpus = fewest_tp(model, job, usable, level, overrides, memo)
    if tp_gpus is not None and tp_gpus <= job.gpus_per_node:
        return None
    key = ("weights",)
    if key not in memo:
        memo[key] = infer_memory(model, job._evolve(tp=1, pp=1, cp=1, ep=1, gpus=1,
                                                    sequence_parallel=False,
                                                    distribute_checkpoints=False),
                                 overhead_level=level,
                                 overhead_overrides=overrides).weights_bytes
    lo = -(-memo[key] // usable)
    tps, pps = _degrees(model, job, memo, train=False)
    pairs = sorted(((t, p) for t in tps for p in pps if t * p > 1 and t * p >= lo),
                   key=lambda tp: (tp[0] * tp[1], -tp[0]))
    for t, p in pairs:
        lay = LayoutFit(mode="infer", gpus=t * p, tp=t, pp=p, zero=0, sequence_parallel=False,
                        micro_batches=None, peak_bytes=0)
        key = ("layout", t, p)
        if key not in memo:
            memo[key] = _total(infer_memory, model, lay.apply(job), level, overrides)
        if memo[key] is not None and memo[key] <= usable:
            return replace(lay, peak_bytes=memo[key])
    return None
