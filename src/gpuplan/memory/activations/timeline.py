"""The training step's timeline: activations, temporaries and parameter gradients at the forward
peak and the backward peak of one micro-step, assembled from a :class:`~.profile.StepProfile`.

Forward walks the blocks in order (inside the last layer, then the head: logits and loss);
backward walks them in reverse (the loss's logits gradient, the layers, the embeddings), with the
parameter gradients appearing as each block's backward produces them.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...job import Job
from ...models import Model
from ..shape import seq_for
from .profile import StepProfile, step_profile

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
    per_layer_bytes: tuple[int, ...] = ()
    """Saved bytes of each distinct layer kind (dense, MoE), no checkpointing."""
    notes: tuple[str, ...] = ()


def train_activations(model: Model, job: Job, *, grad_bytes: int,
                      seq: int | None = None, batch: int | None = None) -> TrainActivations:
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
    prof = step_profile(model, job, seq=s)
    key = (id(prof), b, s, grad_bytes, job.grad_accum > 1, arch.tie_word_embeddings,
           job.attention)
    hit = _TIMELINES.get(key)
    if hit is not None and hit[0] is prof:
        return hit[1]
    out = _train_from_profile(prof, b, s, grad_bytes=grad_bytes,
                              accumulating=job.grad_accum > 1, tied=arch.tie_word_embeddings,
                              attention=job.attention)
    if len(_TIMELINES) > 8192:
        _TIMELINES.clear()
    _TIMELINES[key] = (prof, out)
    return out


_TIMELINES: dict[tuple, tuple[StepProfile, "TrainActivations"]] = {}


def _train_from_profile(prof: StepProfile, b: int, s: int, *, grad_bytes: int, accumulating: bool,
                        tied: bool, attention: str) -> TrainActivations:
    ckpt = prof.checkpointing
    E, H = prof.embed, prof.head
    inputs = prof.inputs(b, s)
    mask = prof.mask(b, s)
    L = []
    for n, p in prof.layers:
        saved = p.saved(b, s)
        kept = prof.layer_input(b, s) if ckpt == "full" else saved
        L.append((n, p, saved, kept, p.autocast_copies(b, s), p.held(b, s), p.param_grads(b, s)))
    saved_layers = sum(n * kept for n, _, _, kept, _, _, _ in L)
    copies_layers = sum(n * c for n, _, _, _, c, _, _ in L)
    e_saved, h_saved = E.saved(b, s), H.saved(b, s)
    e_copies, h_copies = E.autocast_copies(b, s), H.autocast_copies(b, s)
    e_pg, h_pg = E.param_grads(b, s), H.param_grads(b, s)
    total_pg = e_pg + h_pg + sum(n * pg for n, *_, pg in L)
    scale = grad_bytes / total_pg if total_pg else 0.0
    grads_before = grad_bytes if accumulating else 0

    # ---- forward: inside the last layer, then the head (logits, loss) ----------------------
    best_f = (-1, 0, 0, "")
    act = inputs + e_saved
    tmp = mask + e_copies
    for n, p, saved, kept, copies, held, _ in L:
        a0 = act + (n - 1) * kept
        t0 = tmp + (n - 1) * (copies + held)
        for fa, ft in (p.fwd_points_nosave if ckpt == "full" else p.fwd_points):
            a, t = fa(b, s), ft(b, s)
            if a0 + a + t0 + t > best_f[0]:
                best_f = (a0 + a + t0 + t, a0 + a, t0 + t, "forward")
        act += n * kept
        tmp += n * (copies + held)
    for fa, ft in H.fwd_points:  # (the head's own autocast copies are in its points)
        a, t = act + fa(b, s), tmp + ft(b, s)
        if a + t > best_f[0]:
            best_f = (a + t, a, t, "forward, logits and loss")
    _, fwd_act, fwd_tmp, fwd_where = best_f

    # ---- backward: the loss (the logits spike), the layers in reverse, the embeddings -------
    # The KV cache and the masks die with the forward. Autocast's weight copies are saved by the
    # graph (freed layer by layer) -- unless the layers were checkpointed, then the recompute
    # makes them again one layer at a time.
    best = [-1, 0, 0, 0, ""]

    def consider(a, t, gr, where):
        if a + t + gr > best[0]:
            best[:] = [a + t + gr, a, t, gr, where]

    def walk(points_plain, points_acc, a0, t0, pg0, where, accumulate_into=False):
        if accumulating or accumulate_into:
            for ba, bt, _ in points_acc:
                consider(a0 + ba(b, s), t0 + bt(b, s),
                         grads_before + (0 if accumulating else round(pg0 * scale)), where)
        else:
            for ba, bt, bg in points_plain:
                consider(a0 + ba(b, s), t0 + bt(b, s), round((pg0 + bg(b, s)) * scale), where)

    act = inputs + e_saved + saved_layers + h_saved
    tmp = e_copies + h_copies + (0 if ckpt == "full" else copies_layers)
    pg = 0
    walk(H.bwd_points, H.bwd_points_acc, act, tmp, pg, "start of backward (logits gradient)")
    act -= h_saved
    tmp -= h_copies
    pg += h_pg
    flow = prof.layer_input(b, s)  # the hidden-state gradient passed down the layers
    for n, p, saved, kept, copies, held, lpg in reversed(L):
        for k in sorted({0, n - 1}):
            walk(p.bwd_points, p.bwd_points_acc, act - k * kept,
                 tmp + flow - (0 if ckpt == "full" else k * copies), pg + k * lpg,
                 "backward through the layers")
        act -= n * kept
        if ckpt != "full":
            tmp -= n * copies
        pg += n * lpg
    walk(E.bwd_points, E.bwd_points_acc, act, tmp + flow, pg,
         "end of backward (embedding gradient)", accumulate_into=tied)
    _, bwd_act, bwd_tmp, bwd_grads, bwd_where = best

    saved_all = inputs + e_saved + sum(n * saved for n, _, saved, *_ in L) + h_saved
    kept_all = inputs + e_saved + saved_layers + h_saved
    summary = (f"{fmt_gb(saved_all)} saved for backward at batch {b} x seq {s}"
               + (f"; {ckpt} checkpointing keeps {fmt_gb(kept_all)}" if ckpt != "none" else "")
               + f"; {attention} attention")
    return TrainActivations(
        known=True, forward_peak=fwd_act, forward_temporaries=fwd_tmp, forward_detail=fwd_where,
        backward_peak=bwd_act, backward_temporaries=bwd_tmp, backward_grads=bwd_grads,
        backward_detail=bwd_where, summary=summary, saved_bytes=saved_all,
        per_layer_bytes=tuple(saved for _, _, saved, *_ in L), notes=prof.notes)


def fmt_gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB"

