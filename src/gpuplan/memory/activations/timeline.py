"""The training step's timeline: activations, temporaries and parameter gradients at the forward
peak and the backward peak of one micro-step, assembled from a :class:`~.profile.StepProfile`.

Forward walks the blocks in order (inside the last layer, then the head: logits and loss);
backward walks them in reverse (the loss's logits gradient, the layers, the embeddings), with the
parameter gradients appearing as each block's backward produces them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...job import Job
from ...models import Model
from ..shape import seq_for
from .profile import WHOLE, Shard, StepProfile, step_profile
from .symbolic import ZERO, LayerProfile

__all__ = ["TrainActivations", "train_activations", "fmt_gb"]


@dataclass(frozen=True, kw_only=True)
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


@dataclass(frozen=True)
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


#: torchtune OffloadActivations(max_fwd_stash_size=5): the latest offloaded tensors stay on the
#: GPU until the copy stream is done with them.
_FWD_STASH = 5


def train_activations(model: Model, job: Job, *, grad_bytes: int,
                      seq: int | None = None, batch: int | None = None,
                      shard: Shard = WHOLE, step_per_elem: float = 0.0) -> TrainActivations:
    """Activations, temporaries and gradients at the forward and backward peaks of one micro-step.

    ``grad_bytes`` are the parameter-gradient bytes this GPU holds once backward is done (sharded
    by ZeRO-2 and up). Parameter gradients appear during backward in the order the layers'
    backward produces them; with ``grad_accum`` > 1 the last micro-step starts with all of them
    alive (earlier micro-steps made them) and each new gradient is summed into them.
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
                 step_per_elem=step_per_elem)
    key = (id(prof), b, s, grad_bytes, _grads_alive(job), arch.tie_word_embeddings,
           job.attention, loop)
    hit = _TIMELINES.get(key)
    if hit is not None and hit[0] is prof:
        return hit[1]
    out = _train_from_profile(prof, b, s, grad_bytes=grad_bytes,
                              accumulating=_grads_alive(job), tied=arch.tie_word_embeddings,
                              attention=job.attention,
                              tied_bytes=arch.vocab_size * arch.hidden_size * prof.regime.param,
                              loop=loop)
    if len(_TIMELINES) > 8192:
        _TIMELINES.clear()
    _TIMELINES[key] = (prof, out)
    return out


_TIMELINES: dict[tuple, tuple[StepProfile, "TrainActivations"]] = {}


def _train_from_profile(prof: StepProfile, b: int, s: int, *, grad_bytes: int, accumulating: bool,
                        tied: bool, attention: str, tied_bytes: int = 0,
                        loop: _Loop = _Loop()) -> TrainActivations:
    ckpt = prof.checkpointing
    runs = _runs(prof, b, s, offload=loop.offload)
    fwd_act, fwd_tmp, fwd_where = _forward_peak(prof, runs, b, s, offload=loop.offload)
    bwd_act, bwd_tmp, bwd_grads, bwd_where = _backward_peak(
        prof, runs, b, s, grad_bytes=grad_bytes, accumulating=accumulating, tied=tied,
        tied_bytes=tied_bytes, loop=loop)
    ends = prof.inputs(b, s) + prof.embed.saved(b, s)
    saved_all = ends + sum(r.n * r.saved for r in runs) + prof.head.saved(b, s)
    kept_all = ends + sum(r.n * r.kept for r in runs) + prof.head.saved(b, s)
    summary = (f"{fmt_gb(saved_all)} saved for backward at batch {b} x seq {s}"
               + (f"; {ckpt} checkpointing keeps {fmt_gb(kept_all)}" if ckpt != "none" else "")
               + (" (the layer inputs in host memory)" if loop.offload else "")
               + f"; {attention} attention")
    up = math.ceil  # sequence-parallel shards have fractional coefficients (b*s/t rows)
    return TrainActivations(
        known=True, forward_peak=up(fwd_act), forward_temporaries=up(fwd_tmp),
        forward_detail=fwd_where, backward_peak=up(bwd_act), backward_temporaries=up(bwd_tmp),
        backward_grads=bwd_grads, backward_detail=bwd_where, summary=summary,
        saved_bytes=up(saved_all), kept_bytes=up(kept_all),
        per_layer_bytes=tuple(up(r.saved) for r in runs), notes=prof.notes)


@dataclass(frozen=True)
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
        kept = 0 if offload else prof.layer_input(b, s) if full else saved
        out.append(_Run(n=n, p=p, saved=saved, kept=kept,
                        copies=p.autocast_copies(b, s), held=p.held(b, s),
                        param_grads=p.param_grads(b, s)))
    return out


def _forward_peak(prof: StepProfile, runs: list[_Run], b: int, s: int, *,
                  offload: bool = False) -> tuple[int, int, str]:
    """(activations, temporaries, where) at the forward's peak: inside the last layer of a run,
    or in the head (logits and loss). Offloaded, the layer inputs are on the GPU only while the
    side stream copies the latest of them (by the head, the final norm's tensors have pushed
    them out)."""
    full = prof.checkpointing == "full"
    best = (-1, 0, 0, "")
    act = prof.inputs(b, s) + prof.embed.saved(b, s)
    tmp = prof.mask(b, s) + prof.embed.autocast_copies(b, s)
    done = 0
    for r in runs:
        done += r.n
        stash = min(_FWD_STASH, done - 1) * prof.layer_input(b, s) if offload else 0
        a0 = act + (r.n - 1) * r.kept + stash
        t0 = tmp + (r.n - 1) * (r.copies + r.held)
        for fa, ft in (r.p.fwd_points_nosave if full else r.p.fwd_points):
            a, t = fa(b, s), ft(b, s)
            if a0 + a + t0 + t > best[0]:
                best = (a0 + a + t0 + t, a0 + a, t0 + t, "forward")
        act += r.n * r.kept
        tmp += r.n * (r.copies + r.held)
    for fa, ft in prof.head.fwd_points:  # (the head's own autocast copies are in its points)
        a, t = act + fa(b, s), tmp + ft(b, s)
        if a + t > best[0]:
            best = (a + t, a, t, "forward, logits and loss")
    return best[1], best[2], best[3]


class _BackwardPeak:
    """The largest activations + temporaries + gradients met while walking the blocks' backward.

    Parameter gradients are counted in the profiles' units and scaled to ``grad_bytes`` (what this
    GPU really holds, ZeRO-sharded or not). Accumulating (``grad_accum`` > 1) starts with all of
    them alive; each new one is then a temporary summed into ``.grad``. With the optimizer step in
    the backward, each new gradient is a temporary too -- stepped and freed as soon as it is
    made -- and only ``held`` ones (a tied weight's, waiting for its second use) stay."""

    def __init__(self, b: int, s: int, *, grad_bytes: int, total_param_grads: int,
                 accumulating: bool, in_backward: bool = False) -> None:
        self.b, self.s, self.accumulating = b, s, accumulating
        self.in_backward = in_backward
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
            for ba, bt, bg in p.bwd_points:
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
                         in_backward=loop.in_backward)
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


def _grads_alive(job: Job) -> bool:
    """Whether every parameter gradient exists when the micro-step's backward starts: earlier
    micro-steps made them (``grad_accum`` > 1), or ``zero_grad(set_to_none=False)`` kept them."""
    return job.grad_accum > 1 or not job.zero_grad_set_to_none


def fmt_gb(n: int) -> str:
    """Bytes as the summaries state them: decimal GB, two decimals."""
    return f"{n / 1e9:.2f} GB"

