"""The training step's timeline: activations, temporaries and parameter gradients at the forward
peak and the backward peak of one micro-step, assembled from a :class:`~.profile.StepProfile`.

Forward walks the blocks in order (inside the last layer, then the head: logits and loss);
backward walks them in reverse (the loss's logits gradient, the layers, the embeddings), with the
parameter gradients appearing as each block's backward produces them.
"""

from __future__ import annotations

import math

from ..._record import record
from ...job import Job
from ...models import Model
from ...models._types import attention_for
from ..fsdp import FsdpUnits
from ..shape import seq_for
from .profile import WHOLE, Shard, StepProfile, step_profile
from .symbolic import ZERO, LayerProfile

__all__ = ["TrainActivations", "train_activations", "fmt_gb"]


@record
class TrainActivations:
    """Activation-dependent memory of one training micro-step, at the phases of the timeline."""

    known: bool
    """False when the architecture is unknown (the lines are then zero and a note says so)."""
    forward_peak: int = 0
    """Activations alive at the forward peak."""
    forward_temporaries: int = 0
    forward_detail: str = ""
    backward_peak: int = 0
    """Activations alive at the backward peak."""
    backward_temporaries: int = 0
    backward_grads: int = 0
    """Gradient bytes alive at the backward peak (all of them when accumulating)."""
    backward_detail: str = ""
    summary: str = ""
    saved_bytes: int = 0
    """Everything saved for backward at the end of the forward (the classic "activations")."""
    kept_bytes: int = 0
    """What the forward keeps per micro-batch until its backward: ``saved_bytes``, or less under
    checkpointing (a pipeline stage holds this for every micro-batch in flight)."""
    per_layer_bytes: tuple[int, ...] = ()
    """Saved bytes of each distinct layer kind (dense, MoE), no checkpointing."""
    notes: tuple[str, ...] = ()
    forward_gathered: int = 0
    """FSDP2 (``fsdp`` given): unsharded parameters alive at the forward peak (the root unit and
    the blocks gathered there); their all-gather and reduce-scatter buffers are temporaries."""
    backward_gathered: int = 0


@record(kw_only=False)
class _Loop:
    """What the training loop does around the model that moves the timeline."""

    offload: bool = False
    """The layer inputs full checkpointing keeps live in host memory (torchtune's
    OffloadActivations): on the GPU only the latest copies the side stream still holds in the
    forward (at most 5) and, in the backward, the layer being recomputed and the one before."""
    in_backward: bool = False
    """Each parameter is stepped as its gradient is ready, and its gradient freed."""
    step_per_elem: float = 0.0
    """Bytes the optimizer step allocates per element of the parameter it steps (foreach
    AdamW's sqrt of the second moment; 0 when fused or 8-bit): the in-backward step's."""
    grads_in_flight: bool = False
    """The kept gradients are a ZeRO-2/3 shard under DeepSpeed: each new one is made whole by
    autograd, then copied into the reduce bucket and freed (stage_1_and_2.py / stage3.py
    ``reduce_partition_and_remove_grads``), so a whole gradient is a temporary at its point."""


#: torchtune OffloadActivations(max_fwd_stash_size=5): the latest offloaded tensors stay on the
#: GPU until the copy stream is done with them.
_FWD_STASH = 5


def train_activations(model: Model, job: Job, *, grad_bytes: int,
                      seq: int | None = None, batch: int | None = None,
                      shard: Shard = WHOLE, step_per_elem: float = 0.0,
                      fsdp: FsdpUnits | None = None) -> TrainActivations:
    """Activations, temporaries and gradients at the forward and backward peaks of one micro-step.

    ``grad_bytes`` are the parameter-gradient bytes this GPU holds once backward is done (sharded
    by ZeRO-2 and up). Parameter gradients appear during backward in the order the layers'
    backward produces them; with ``grad_accum`` > 1 the last micro-step starts with all of them
    alive (earlier micro-steps made them) and each new gradient is summed into them.

    ``fsdp``: the step runs under FSDP2 (:mod:`..fsdp`): the gathered units, the collective
    buffers and the unsharded gradients are placed at each point of the walk.
    """
    arch = model.architecture
    if arch is None:
        return TrainActivations(
            known=False, summary="not included: architecture unknown",
            notes=("activations not included: only a parameter count is known; give a catalog "
                   "name or a config.json for batch/sequence-dependent memory",))
    s = seq if seq is not None else seq_for(model, job)
    b = batch if batch is not None else job.batch
    prof = step_profile(model, job, seq=s, shard=shard)
    loop = _Loop(offload=job.offload_activations, in_backward=job.optimizer_in_backward,
                 step_per_elem=step_per_elem,
                 grads_in_flight=job.zero >= 2 and job.gpus > 1 and job.sharding == "deepspeed")
    key = (id(prof), b, s, grad_bytes, _grads_alive(job), arch.tie_word_embeddings,
           job.attention, loop, fsdp)
    hit = _TIMELINES.get(key)
    if hit is not None and hit[0] is prof:
        return hit[1]
    out = _train_from_profile(prof, b, s, grad_bytes=grad_bytes,
                              accumulating=_grads_alive(job), tied=arch.tie_word_embeddings,
                              attention=attention_for(arch.family, job.attention, job.engine),
                              tied_bytes=arch.vocab_size * arch.hidden_size * prof.regime.param,
                              loop=loop, fsdp=fsdp)
    if len(_TIMELINES) > 8192:
        _TIMELINES.clear()
    _TIMELINES[key] = (prof, out)
    return out


_TIMELINES: dict[tuple, tuple[StepProfile, "TrainActivations"]] = {}


def _train_from_profile(prof: StepProfile, b: int, s: int, *, grad_bytes: int, accumulating: bool,
                        tied: bool, attention: str, tied_bytes: int = 0,
                        loop: _Loop = _Loop(), fsdp: FsdpUnits | None = None) -> TrainActivations:
    ckpt = prof.checkpointing
    runs = _runs(prof, b, s, offload=loop.offload)
    fwd_act, fwd_tmp, fwd_gathered, fwd_where = _forward_peak(prof, runs, b, s,
                                                              offload=loop.offload, fsdp=fsdp)
    if fsdp is None:
        bwd_act, bwd_tmp, bwd_grads, bwd_where = _backward_peak(
            prof, runs, b, s, grad_bytes=grad_bytes, accumulating=accumulating, tied=tied,
            tied_bytes=tied_bytes, loop=loop)
        bwd_gathered = 0
    else:
        bwd_act, bwd_tmp, bwd_grads, bwd_gathered, bwd_where = _fsdp_backward_peak(
            prof, runs, b, s, fsdp, grad_bytes=grad_bytes, accumulating=accumulating,
            tied=tied, tied_bytes=tied_bytes, offload=loop.offload)
    ends = prof.inputs(b, s) + prof.embed.saved(b, s)
    saved_all = ends + sum(r.n * r.saved for r in runs) + prof.head.saved(b, s)
    kept_all = ends + sum(r.n * r.kept for r in runs) + prof.head.saved(b, s)
    summary = (f"{fmt_gb(saved_all)} saved for backward at batch {b} x seq {s}"
               + (f"; {ckpt} checkpointing keeps {fmt_gb(kept_all)}" if ckpt != "none" else "")
               + (" (the layer inputs in host memory)" if loop.offload else "")
               + (f" (the layer inputs split over {prof.ckpt_split} TP ranks)"
                  if ckpt == "full" and prof.ckpt_split > 1 else "")
               + f"; {attention} attention")
    up = math.ceil  # sequence-parallel shards have fractional coefficients (b*s/t rows)
    return TrainActivations(
        known=True, forward_peak=up(fwd_act), forward_temporaries=up(fwd_tmp),
        forward_detail=fwd_where, backward_peak=up(bwd_act), backward_temporaries=up(bwd_tmp),
        backward_grads=bwd_grads, backward_detail=bwd_where, summary=summary,
        saved_bytes=up(saved_all), kept_bytes=up(kept_all),
        per_layer_bytes=tuple(up(r.saved) for r in runs), notes=prof.notes,
        forward_gathered=fwd_gathered, backward_gathered=bwd_gathered)


@record(kw_only=False)
class _Run:
    """A run of ``n`` identical layers, its sizes evaluated at one (b, s)."""

    n: int
    p: LayerProfile
    saved: int
    kept: int
    """What the forward keeps per layer: its saved bytes, or only its input (full checkpointing)."""
    copies: int
    held: int
    param_grads: int


def _runs(prof: StepProfile, b: int, s: int, *, offload: bool = False) -> list[_Run]:
    full = prof.checkpointing == "full"
    out = []
    for n, p in prof.layers:
        saved = p.saved(b, s)
        kept = 0 if offload else prof.kept_input(b, s) if full else saved
        out.append(_Run(n=n, p=p, saved=saved, kept=kept,
                        copies=p.autocast_copies(b, s), held=p.held(b, s),
                        param_grads=p.param_grads(b, s)))
    return out


def _forward_peak(prof: StepProfile, runs: list[_Run], b: int, s: int, *,
                  offload: bool = False,
                  fsdp: FsdpUnits | None = None) -> tuple[int, int, int, str]:
    """(activations, temporaries, gathered parameters, where) at the forward's peak: inside the
    last layer of a run, or in the head (logits and loss). Offloaded, the layer inputs are on the
    GPU only while the side stream copies the latest of them (by the head, the final norm's
    tensors have pushed them out).

    Under FSDP2 a block runs with its unsharded parameters and its flat all-gather buffer (kept
    until the next block's copy-out), beside the root unit; its copy-out holds the previous
    block's buffer too; through the head and the loss the last block's buffer is still held
    (freed in the root's post-forward). Without resharding after forward (ZeRO-2) every block
    run so far stays gathered."""
    full = prof.checkpointing == "full"
    best = (-1, 0, 0, 0, "")
    act = prof.inputs(b, s) + prof.embed.saved(b, s)
    tmp = prof.mask(b, s) + prof.embed.autocast_copies(b, s)
    done = 0
    for r in runs:
        done += r.n
        stash = min(_FWD_STASH, done - 1) * prof.layer_input(b, s) if offload else 0
        a0 = act + (r.n - 1) * r.kept + stash
        t0 = tmp + (r.n - 1) * (r.copies + r.held)
        gath, buf = _fsdp_forward(fsdp, done)
        if fsdp is not None and done > 1:
            # the block's copy-out: its flat buffer, its unsharded parameters and the previous
            # block's buffer, which ``wait_for_unshard`` still references (its local
            # ``prev_all_gather_state``) until it returns
            if a0 + t0 + buf + fsdp.unit + gath > best[0]:
                best = (a0 + t0 + buf + fsdp.unit + gath, a0, t0 + buf + fsdp.unit, gath,
                        "forward (a block's all-gather copy-out)")
        for fa, ft in (r.p.fwd_points_nosave if full else r.p.fwd_points):
            a, t = a0 + fa(b, s), t0 + ft(b, s) + buf
            if a + t + gath > best[0]:
                best = (a + t + gath, a, t, gath, "forward")
        act += r.n * r.kept
        tmp += r.n * (r.copies + r.held)
    gath, buf = _fsdp_forward(fsdp, done)
    if fsdp is not None and fsdp.reshard_after_forward:
        gath -= fsdp.unit  # the last block was resharded; its flat buffer is still held
    for fa, ft in prof.head.fwd_points:  # (the head's own autocast copies are in its points)
        a, t = act + fa(b, s), tmp + ft(b, s) + buf
        if a + t + gath > best[0]:
            best = (a + t + gath, a, t, gath, "forward, logits and loss")
    return best[1], best[2], best[3], best[4]


def _fsdp_forward(f: FsdpUnits | None, blocks: int) -> tuple[int, int]:
    """(gathered parameters, all-gather buffers) once ``blocks`` blocks have started their
    forward: the root unit, the current block (ZeRO-3) or every block so far (ZeRO-2), and the
    current block's flat all-gather buffer."""
    if f is None:
        return 0, 0
    return f.root + f.unit * (1 if f.reshard_after_forward else blocks), f.unit


class _BackwardPeak:
    """The largest activations + temporaries + gradients met while walking the blocks' backward.

    Parameter gradients are counted in the profiles' units and scaled to ``grad_bytes`` (what this
    GPU really holds, ZeRO-sharded or not). Accumulating (``grad_accum`` > 1) starts with all of
    them alive; each new one is then a temporary summed into ``.grad``. With the optimizer step in
    the backward, each new gradient is a temporary too -- stepped and freed as soon as it is
    made -- and only ``held`` ones (a tied weight's, waiting for its second use) stay."""

    def __init__(self, b: int, s: int, *, grad_bytes: int, total_param_grads: int,
                 accumulating: bool, in_backward: bool = False, in_flight: bool = False) -> None:
        self.b, self.s, self.accumulating = b, s, accumulating
        self.in_backward, self.in_flight = in_backward, in_flight
        self.scale = grad_bytes / total_param_grads if total_param_grads else 0.0
        self.grads_before = grad_bytes if accumulating else 0
        self.best = (-1, 0, 0, 0, "")

    def walk(self, p: LayerProfile, a0: int, t0: int, pg0: int, where: str,
             accumulate_into: bool = False, held: int = 0, step: int = 0) -> None:
        """The points of one block's backward on top of ``a0`` activations, ``t0`` temporaries
        and ``pg0`` parameter gradients already made (``accumulate_into``: this block's gradient
        is summed into one that exists, as tied embeddings are; ``held``, ``step``: in-backward
        steps, the gradient bytes held meanwhile and the step's own temporaries)."""
        b, s = self.b, self.s
        if self.in_backward:
            for ba, bt, _ in p.bwd_points_acc:
                self._consider(a0 + ba(b, s), t0 + bt(b, s) + step, round(held * self.scale),
                               where)
        elif self.accumulating or accumulate_into:
            grads = self.grads_before + (0 if self.accumulating else round(pg0 * self.scale))
            for ba, bt, _ in p.bwd_points_acc:
                self._consider(a0 + ba(b, s), t0 + bt(b, s), grads, where)
        else:
            for ba, bt, bg in (p.bwd_points_inflight if self.in_flight else p.bwd_points):
                self._consider(a0 + ba(b, s), t0 + bt(b, s), round((pg0 + bg(b, s)) * self.scale),
                               where)

    def _consider(self, a: int, t: int, gr: int, where: str) -> None:
        if a + t + gr > self.best[0]:
            self.best = (a + t + gr, a, t, gr, where)


def _backward_peak(prof: StepProfile, runs: list[_Run], b: int, s: int, *, grad_bytes: int,
                   accumulating: bool, tied: bool, tied_bytes: int = 0,
                   loop: _Loop = _Loop()) -> tuple[int, int, int, str]:
    """(activations, temporaries, gradients, where) at the backward's peak: the loss (the logits
    spike), the layers in reverse, the embeddings.

    The KV cache and the masks die with the forward. Autocast's weight copies are saved by the
    graph (freed layer by layer) -- unless the layers were checkpointed, then the recompute makes
    them again one layer at a time. Offloaded layer inputs come back one layer at a time (the
    layer recomputed, and the one before until the next node runs)."""
    E, H = prof.embed, prof.head
    full = prof.checkpointing == "full"
    # a tied output head and the embedding are one weight: its gradient is counted once (the
    # head's backward makes it, the embedding's backward sums into it)
    shared = min(E.param_grads(b, s), tied_bytes) if tied else 0
    peak = _BackwardPeak(b, s, grad_bytes=grad_bytes, accumulating=accumulating,
                         total_param_grads=E.param_grads(b, s) + H.param_grads(b, s)
                         + sum(r.n * r.param_grads for r in runs) - shared,
                         in_backward=loop.in_backward, in_flight=loop.grads_in_flight)
    step = lambda p: round(loop.step_per_elem * p.largest_param)  # noqa: E731
    act = prof.inputs(b, s) + E.saved(b, s) + sum(r.n * r.kept for r in runs) + H.saved(b, s)
    tmp = (E.autocast_copies(b, s) + H.autocast_copies(b, s)
           + (0 if full else sum(r.n * r.copies for r in runs)))
    pg = 0
    peak.walk(H, act, tmp, pg, "start of backward (logits gradient)", step=step(H))
    act -= H.saved(b, s)
    tmp -= H.autocast_copies(b, s)
    pg += H.param_grads(b, s)
    flow = prof.layer_input(b, s)  # the hidden-state gradient passed down the layers
    back = 2 * prof.layer_input(b, s) if loop.offload else 0
    if full and prof.ckpt_split > 1:  # the layer's input all-gathered again for its recompute
        back += prof.layer_input(b, s)
    for r in reversed(runs):
        for k in sorted({0, r.n - 1}):
            peak.walk(r.p, act - k * r.kept + back, tmp + flow - (0 if full else k * r.copies),
                      pg + k * r.param_grads, "backward through the layers", held=shared,
                      step=step(r.p))
        act -= r.n * r.kept
        if not full:
            tmp -= r.n * r.copies
        pg += r.n * r.param_grads
    peak.walk(E, act, tmp + flow, pg, "end of backward (embedding gradient)",
              accumulate_into=tied, held=shared, step=step(E))
    if tied:
        # The head's and the embedding's gradients of the tied weight meet in the weight's
        # autograd InputBuffer and are summed out of place (the head's arrives as a transposed
        # view, whose storage its base shares, so ``can_accumulate_inplace`` fails; measured with
        # torch's profiler on real tensors: aten::add, not add_): both and their sum are alive.
        # Accumulating, the head's gradient waited there since the head's backward.
        ba, bt, _ = E.bwd_points_acc[-1] if E.bwd_points_acc else (ZERO, ZERO, ZERO)
        if loop.in_backward:
            grads, extra = round(shared * peak.scale), shared
        elif accumulating:
            grads, extra = peak.grads_before, 2 * shared
        else:
            grads, extra = round(pg * peak.scale), shared
        peak._consider(act + ba(b, s), tmp + flow + bt(b, s) + extra, grads,
                       "end of backward (tied embedding: its two gradients summed)")
    _, a, t, g, where = peak.best
    return a, t, g, where


class _FsdpWalk:
    """The largest total met along an FSDP2 backward (:mod:`..fsdp`): activations, temporaries
    (with the all-gather and reduce-scatter buffers), gradients (the unsharded ones of the unit
    running and of the root, the sharded ones of the blocks done) and gathered parameters."""

    def __init__(self, b: int, s: int) -> None:
        self.b, self.s = b, s
        self.best = (-1, 0, 0, 0, 0, "")

    def points(self, pts, a0: int, t0: int, g0: int, gathered: int, where: str,
               new_grads: bool = True) -> None:
        b, s = self.b, self.s
        for ba, bt, bg in pts:
            self.consider(a0 + ba(b, s), t0 + bt(b, s), g0 + (bg(b, s) if new_grads else 0),
                          gathered, where)

    def consider(self, a: int, t: int, gr: int, gathered: int, where: str) -> None:
        if a + t + gr + gathered > self.best[0]:
            self.best = (a + t + gr + gathered, a, t, gr, gathered, where)


def _fsdp_backward_peak(prof: StepProfile, runs: list[_Run], b: int, s: int, f: FsdpUnits, *,
                        grad_bytes: int, accumulating: bool, tied: bool, tied_bytes: int = 0,
                        offload: bool = False) -> tuple[int, int, int, int, str]:
    """(activations, temporaries, gradients, gathered, where) at an FSDP2 backward's peak.

    The root unit stays gathered throughout; its gradients are unsharded (the profiles' bytes:
    the compute dtype) until its reduce-scatter at the very end. The root's pre-backward
    prefetches the last block (ZeRO-3: its flat all-gather buffer, alive from the loss's gradient
    on). Each block runs gathered, with the previous block's prefetch buffer and the reduce-scatter
    input of the block before it; its own gradients are unsharded until its post-backward, which
    reshards it and copies them into its reduce-scatter input. Earlier micro-steps' gradients
    (``accumulating``) are the sharded ``grad_bytes``."""
    E, H = prof.embed, prof.head
    full = prof.checkpointing == "full"
    L = sum(r.n for r in runs)
    z3 = f.reshard_after_forward
    walk = _FsdpWalk(b, s)
    before = grad_bytes if accumulating else 0

    def sharded(pg: int) -> int:  # reduced gradients of finished blocks
        return 0 if accumulating else math.ceil(pg * f.shard)

    def gathered(k: int) -> int:  # while the (k+1)-th block from the top runs its backward
        return f.root + f.unit * (1 if z3 else L - k)

    act = prof.inputs(b, s) + E.saved(b, s) + sum(r.n * r.kept for r in runs) + H.saved(b, s)
    tmp = (E.autocast_copies(b, s) + H.autocast_copies(b, s)
           + (0 if full else sum(r.n * r.copies for r in runs)))
    walk.points(H.bwd_points, act, tmp + (f.unit if z3 else 0), before,
                f.root + (0 if z3 else L * f.unit), "start of backward (logits gradient)")
    act -= H.saved(b, s)
    tmp -= H.autocast_copies(b, s)
    root_g = H.param_grads(b, s)
    flow = prof.layer_input(b, s)
    back = 2 * prof.layer_input(b, s) if offload else 0  # offloaded inputs brought back
    if full and prof.ckpt_split > 1:  # the layer's input all-gathered again for its recompute
        back += prof.layer_input(b, s)
    k, done, rs = 0, 0, 0  # blocks done, their gradient bytes, the last reduce-scatter input
    for r in reversed(runs):
        pg = r.param_grads
        # along a run the total is linear in the blocks done (activations fall by one layer's,
        # sharded gradients rise by one block's): its largest value is at an end of the stretch
        # where the prefetch buffer and the previous reduce-scatter input are both alive
        for j in sorted({0, 1, r.n - 2, r.n - 1} & set(range(r.n))):
            kk = k + j
            prefetch = f.unit if z3 and kk < L - 1 else 0
            rs_prev = rs if j == 0 else math.ceil(pg * f.reduce)
            rs_prev = rs_prev if kk > 0 else 0
            a0 = act - j * r.kept + back
            t0 = tmp + flow - (0 if full else j * r.copies)
            g0 = before + root_g + sharded(done + j * pg)
            walk.points(r.p.bwd_points, a0, t0 + prefetch + rs_prev, g0, gathered(kk),
                        "backward through the layers")
            # its post-backward: resharded, its gradients copied into the reduce-scatter input,
            # then freed but the last (``foreach_reduce``'s loop variable) as the output is made
            rs_in = math.ceil(pg * f.reduce)
            a1, t1 = a0 - r.kept, t0 - (0 if full else r.copies) + prefetch + rs_in
            walk.consider(a1, t1, g0 + pg, gathered(kk) - f.unit,
                          "backward through the layers (a block's reduce-scatter)")
            walk.consider(a1, t1 + f.unit_last, g0 + math.ceil(pg * f.shard), gathered(kk) - f.unit,
                          "backward through the layers (a block's reduce-scatter)")
        act -= r.n * r.kept
        if not full:
            tmp -= r.n * r.copies
        k += r.n
        done += r.n * pg
        rs = math.ceil(pg * f.reduce)
    g0 = before + root_g + sharded(done)
    walk.points(E.bwd_points_acc if tied else E.bwd_points, act, tmp + flow + rs, g0, f.root,
                "end of backward (embedding gradient)", new_grads=not tied)
    if tied and E.bwd_points_acc:  # the two gradients of the tied weight summed out of place
        ba, bt, _ = E.bwd_points_acc[-1]
        walk.consider(act + ba(b, s), tmp + flow + rs + bt(b, s)
                      + min(E.param_grads(b, s), tied_bytes), g0,
                      f.root, "end of backward (tied embedding: its two gradients summed)")
    # the root's post-backward: resharded, its unsharded gradients (compute dtype, as many bytes
    # as its gathered parameters) copied into its reduce-scatter input
    rs_in = math.ceil(f.root * f.reduce)
    walk.consider(prof.inputs(b, s), rs_in, before + sharded(done) + f.root, 0,
                  "end of backward (the root unit's reduce-scatter)")
    walk.consider(prof.inputs(b, s), rs_in + f.root_last,
                  before + sharded(done) + math.ceil(f.root * f.shard), 0,
                  "end of backward (the root unit's reduce-scatter)")
    _, a, t, g, gath, where = walk.best
    return a, t, g, gath, where


def _grads_alive(job: Job) -> bool:
    """Whether every parameter gradient exists when the micro-step's backward starts: earlier
    micro-steps made them (``grad_accum`` > 1), or ``zero_grad(set_to_none=False)`` kept them."""
    return job.grad_accum > 1 or not job.zero_grad_set_to_none


def fmt_gb(n: int) -> str:
    """Bytes as the summaries state them: decimal GB, two decimals."""
    return f"{n / 1e9:.2f} GB"

