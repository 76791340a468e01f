"""Training memory per GPU: the model states, the activations and temporaries of the step's
phases (forward, backward, optimizer step), and the runtime overhead, at the peak phase.

The seed document's table comes out exactly (7B, mixed precision, Adam: 14 + 14 + 28 + 56 =
112 GB); every other configuration is the same sum with different bytes."""

from __future__ import annotations

from dataclasses import dataclass

from ..formats import get_optimizer, get_recipe
from ..job import Job
from ..models import Model
from .activations import TrainActivations, train_activations
from .optimizer import optimizer_label
from .overhead import OverheadLevel, runtime_overhead
from .results import Line, TrainMemory
from .shape import check_seq
from .states import train_states

__all__ = ["train_memory"]


def train_memory(model: Model, job: Job, *, overhead_level: OverheadLevel = "expected",
                 overhead_overrides=None) -> TrainMemory:
    """Per-GPU memory of training ``model`` as ``job`` describes, at the peak of a step."""
    recipe = get_recipe(job.precision)
    opt = get_optimizer(job.optimizer)
    n = model.params.total
    st = train_states(model, job)
    notes = list(st.notes)
    state_b, trainable, base_bytes, base_label = st.state_b, st.trainable, st.base, st.base_label
    weights_trainable, grads, master, opt_bytes = st.weights_trainable, st.grads, st.master, st.opt
    g, z, host, gathered = job.gpus, job.zero, st.host, st.gathered
    weights = weights_trainable + base_bytes
    check_seq(model, job)
    act = train_activations(model, job, grad_bytes=grads)
    notes.extend(act.notes)
    step_tmp, step_detail = st.step_tmp, st.step_detail

    phases = _train_phases(job, weights=weights, grads=grads, master=master, opt_bytes=opt_bytes,
                           gathered=gathered, act=act, step_tmp=step_tmp, step_detail=step_detail)
    peak_phase = max(phases, key=lambda p: phases[p].total)
    at_peak = phases[peak_phase]
    overhead = runtime_overhead(
        gpus=g, zero=z, grad_bytes=trainable * recipe.grad_bytes, grad_elem_bytes=recipe.grad_bytes,
        dynamic=at_peak.gradients + at_peak.activations + at_peak.temporaries,
        level=overhead_level, overrides=overhead_overrides)
    total = at_peak.total + overhead.bytes

    per_param = lambda b: b / n  # noqa: E731
    lines = []
    if base_bytes:
        lines.append(Line(key="weights", label=base_label, bytes=base_bytes,
                          bytes_per_param=per_param(base_bytes)))
    lines += [
        Line(key="weights", label=f"weights, {recipe.weight_bytes * 8}-bit"
             + (" (adapters)" if base_bytes else ""),
             bytes=weights_trainable, bytes_per_param=per_param(weights_trainable)),
        Line(key="gradients", label=f"gradients, {recipe.grad_bytes * 8}-bit",
             bytes=at_peak.gradients, bytes_per_param=per_param(grads)),
        Line(key="master_weights", label="32-bit master copy of the weights", bytes=master,
             bytes_per_param=per_param(master)),
        Line(key="optimizer", label=optimizer_label(opt, state_b), bytes=opt_bytes,
             bytes_per_param=per_param(opt_bytes)),
    ]
    if gathered:
        lines.append(Line(key="gathered_params", label="gathered ZeRO-3/FSDP units",
                          bytes=gathered, note="largest wrapped unit, current + prefetched"))
    lines.append(Line(key="activations", label="activations", bytes=at_peak.activations,
                      note=act.summary))
    if at_peak.temporaries:
        lines.append(Line(key="temporaries", label="step temporaries", bytes=at_peak.temporaries,
                          note=at_peak.detail))
    lines.append(Line(key="overhead", label=f"runtime overhead ({overhead_level})",
                      bytes=overhead.bytes))
    if host:
        notes.append(f"host memory per GPU process: {host:,} bytes")

    return TrainMemory(
        precision=recipe.name, optimizer=opt.name, params=n, trainable_params=trainable,
        weights_bytes=weights, gradients_bytes=at_peak.gradients, master_weights_bytes=master,
        optimizer_bytes=opt_bytes, activations_bytes=at_peak.activations,
        temporaries_bytes=at_peak.temporaries, gathered_params_bytes=gathered,
        overhead_bytes=overhead.bytes, total_bytes=total, peak_phase=peak_phase, host_bytes=host,
        overhead=overhead, lines=tuple(lines), notes=tuple(notes),
        activations_known=act.known, phases={p: v.total for p, v in phases.items()},
        activation_detail=({"saved_bytes": act.saved_bytes,
                            "per_layer_saved_bytes": list(act.per_layer_bytes),
                            "forward_peak_at": act.forward_detail,
                            "backward_peak_at": act.backward_detail} if act.known else {}),
    )



@dataclass(frozen=True)
class _Phase:
    weights: int
    gradients: int
    master: int
    optimizer: int
    activations: int
    temporaries: int
    gathered: int
    detail: str = ""

    @property
    def total(self) -> int:
        return (self.weights + self.gradients + self.master + self.optimizer + self.activations
                + self.temporaries + self.gathered)


def _train_phases(job: Job, *, weights: int, grads: int, master: int, opt_bytes: int,
                  gathered: int, act: TrainActivations, step_tmp: int,
                  step_detail: str) -> dict[str, _Phase]:
    """Memory at the peak of each phase of a step (DESIGN.md, "What a training step really
    holds"). zero_grad(set_to_none=True) frees the gradients after the step, so the first
    micro-step's forward runs without them; with gradient accumulation the last micro-step's
    forward and backward run with all of them alive. The optimizer step holds the gradients, the
    states and the step's temporaries; the activations are gone by then."""
    base = dict(weights=weights, master=master, optimizer=opt_bytes, gathered=gathered)
    accum = grads if job.grad_accum > 1 else 0
    return {
        "forward": _Phase(gradients=accum, activations=act.forward_peak,
                          temporaries=act.forward_temporaries, detail=act.forward_detail, **base),
        "backward": _Phase(gradients=act.backward_grads if act.known else grads,
                           activations=act.backward_peak,
                           temporaries=act.backward_temporaries, detail=act.backward_detail,
                           **base),
        "optimizer": _Phase(gradients=grads, activations=0, temporaries=step_tmp,
                            detail=step_detail or "optimizer step", **base),
    }

