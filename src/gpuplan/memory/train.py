"""Training memory per GPU: the model states, the activations and temporaries of the step's
phases (forward, backward, optimizer step), and the runtime overhead, at the peak phase.

The seed document's table comes out exactly (7B, mixed precision, Adam: 14 + 14 + 28 + 56 =
112 GB); every other configuration is the same sum with different bytes."""

from __future__ import annotations


from .._record import record
from ..formats import OptimizerSpec, TrainingRecipe, get_optimizer
from ..fp8 import non_tn_fp8_gemm
from ..hardware import GPU
from ..job import Job
from ..models import Model
from ..parallel import check_layout
from .activations import TrainActivations, train_activations
from .activations.timeline import fmt_gb
from .optimizer import optimizer_label
from .overhead import (Overhead, OverheadLevel, graph_buffer_bytes, memory_args,
                       runtime_overhead)
from .parallel import StagePlan, stage_plans
from .results import Line, TrainMemory
from .shape import check_seq, seq_for
from .states import States, _narrow_tn_only, train_states

__all__ = ["train_memory"]


def train_memory(model: Model, job: Job, *, overhead_level: OverheadLevel = "expected",
                 overhead_overrides=None, gpu: GPU | None = None) -> TrainMemory:
    """Per-GPU memory of training ``model`` as ``job`` describes, at the peak of a step.

    Under a parallel layout (tp, pp, cp, ep > 1) every pipeline stage is planned for one of its
    ranks and the worst stage is the answer (``stage`` and ``layout`` say which and how).
    ``gpu``: the GPU it runs on, where its architecture moves the memory -- a per-tensor FP8
    recipe's weight transposes, kept where the FP8 GEMM is TN-only (:func:`gpuplan.fp8.
    non_tn_fp8_gemm` on its compute capability, the test the speed model reads); None: as
    Hopper holds them (the transposes kept, the upper bound)."""
    memory_args(model, job, overhead_level, overhead_overrides)
    check_seq(model, job)
    kw = dict(overhead_level=overhead_level, overhead_overrides=overhead_overrides)
    non_tn = gpu_non_tn_fp8(gpu)
    plans = stage_plans(model, job, non_tn)
    if plans is None:
        if job.moe_capacity_factor is not None or job.mtp_layers or job.cuda_graph_scope:
            # a capacity factor needs experts; MTP a layout (and a model with an MTP layer)
            check_layout(model.architecture, job)
        st = train_states(model, job, non_tn)
        # in-backward steps: one parameter's step temporaries at a time (per element stepped)
        per_elem = st.step_tmp / st.trainable if job.optimizer_in_backward and st.trainable else 0
        act = train_activations(model, job, grad_bytes=st.grads, step_per_elem=per_elem,
                                fsdp=st.fsdp)
        return _train_rank(model, job, st, act, **kw)
    results = [_train_rank(p.model, p.job, p.states, p.activations(), stage=p, **kw)
               for p in plans]
    worst = max(range(len(plans)), key=lambda i: results[i].total_bytes)
    return plans[worst].annotate(results[worst], [r.total_bytes for r in results])


def gpu_non_tn_fp8(gpu: GPU | None, job: Job | None = None) -> bool:
    """Whether ``gpu``'s FP8 GEMMs take any layout, as Transformer Engine tests it
    (:func:`gpuplan.fp8.non_tn_fp8_gemm`); False where no GPU is given. With ``job``: only
    where that moves its training memory -- a recipe whose weights keep a transpose on TN-only
    GPUs alone (per-tensor FP8, ``columnwise_copy`` "tn-only") -- so that caches keyed on it
    split no other job."""
    if job is not None and not (job.trains and _narrow_tn_only(job)):
        return False
    return gpu is not None and non_tn_fp8_gemm(gpu.architecture, gpu.compute_capability)


def _train_rank(model: Model, job: Job, st: States, act: TrainActivations, *,
                overhead_level: OverheadLevel, overhead_overrides,
                stage: StagePlan | None = None) -> TrainMemory:
    """One rank's memory at the peak of its step (the whole model, or a pipeline stage's
    rank under a parallel layout: ``stage``)."""
    recipe = job.train_recipe
    opt = get_optimizer(job.optimizer)
    buffers = model.architecture.buffer_bytes if model.architecture else 0
    phases = _train_phases(job, st, act, buffers)
    peak_phase = max(phases, key=lambda p: phases[p].total)
    at_peak = phases[peak_phase]
    overhead = runtime_overhead(
        gpus=stage.gpus if stage else job.gpus, zero=job.zero,
        grad_bytes=st.trainable * recipe.grad_bytes, grad_elem_bytes=recipe.grad_bytes,
        dynamic=at_peak.gradients + at_peak.activations + at_peak.temporaries,
        level=overhead_level, overrides=overhead_overrides, data_parallel=job.gpus,
        sharding=job.sharding, graph_buffers=_graph_buffers(model, job, stage),
        engine=job.engine)
    notes = [*check_seq(model, job), *st.notes, *act.notes, *(stage.notes if stage else ())]
    if st.host:
        notes.append(f"host memory per GPU process: {st.host:,} bytes")
    return TrainMemory(
        precision=recipe.name, optimizer=opt.name,
        params=stage.params if stage else model.params.total,
        trainable_params=st.trainable,
        weights_bytes=st.weights_trainable + st.base + buffers + st.fp8,
        gradients_bytes=at_peak.gradients, master_weights_bytes=st.master,
        optimizer_bytes=st.opt, activations_bytes=at_peak.activations,
        temporaries_bytes=at_peak.temporaries, gathered_params_bytes=at_peak.gathered,
        overhead_bytes=overhead.bytes, total_bytes=at_peak.total + overhead.bytes,
        peak_phase=peak_phase, host_bytes=st.host, overhead=overhead, paged_bytes=st.paged,
        lines=_train_lines(model, recipe, opt, st, act, at_peak, overhead, overhead_level,
                           buffers, job.optimizer_in_backward),
        notes=tuple(notes), activations_known=act.known,
        phases={p: v.total for p, v in phases.items()},
        activation_detail=({"saved_bytes": act.saved_bytes,
                            "per_layer_saved_bytes": list(act.per_layer_bytes),
                            "forward_peak_at": act.forward_detail,
                            "backward_peak_at": act.backward_detail} if act.known else {}),
    )


def _graph_buffers(model: Model, job: Job, stage: StagePlan | None) -> int:
    """The whole-layer CUDA graphs' static buffers on this rank (:func:`~.overhead.
    graph_buffer_bytes`): hidden states of the rank's tokens, sequence-parallel under TP."""
    arch = model.architecture
    if job.cuda_graph_scope != ("full",) or arch is None:
        return 0
    if stage is None:  # seq_for: the model's default where the job gives none (it was a crash)
        return graph_buffer_bytes(job.batch * seq_for(model, job), arch.hidden_size, 1)
    lay = stage.layout
    seq = stage.seq if stage.seq is not None else seq_for(model, job)
    tokens = job.batch * seq // (lay.tp if lay.sequence_parallel else 1)
    return graph_buffer_bytes(tokens, arch.hidden_size, stage.in_flight if lay.pp > 1 else 1)


def _master_label(st: States) -> str:
    """The master line's label: remainders, none (``master_weights`` none), or a copy."""
    if st.master_remainder:
        return "16-bit remainders of the fp32 master (its top half the bf16 weights)"
    if not st.master_b:
        return "no master copy (the optimizer steps the 16-bit weights)"
    return f"{st.master_b * 8}-bit master copy of the weights"


def _train_lines(model: Model, recipe: TrainingRecipe, opt: OptimizerSpec, st: States,
                 act: TrainActivations, at_peak: _Phase, overhead: Overhead,
                 overhead_level: OverheadLevel, buffers: int = 0,
                 in_backward: bool = False) -> tuple[Line, ...]:
    """The rows of the table, at the peak phase."""
    n = model.params.total
    per_param = lambda b: b / n  # noqa: E731
    lines = []
    if buffers:
        lines.append(Line(key="weights", label="buffers (non-parameter)", bytes=buffers,
                          note="the causal mask the model registers"))
    if st.base:
        lines.append(Line(key="weights", label=st.base_label, bytes=st.base,
                          bytes_per_param=per_param(st.base)))
    fsdp = st.fsdp
    w_bits = (fsdp.elem if fsdp is not None else recipe.weight_bytes) * 8
    g_bits = (fsdp.elem if fsdp is not None else recipe.grad_bytes) * 8
    lines += [
        Line(key="weights", label=f"weights, {w_bits}-bit"
             + (" (adapters)" if st.base else "") + (" shards (FSDP2)" if fsdp else ""),
             bytes=st.weights_trainable, bytes_per_param=per_param(st.weights_trainable)),
        *([Line(key="weights", label=st.fp8_label, bytes=st.fp8,
                bytes_per_param=per_param(st.fp8),
                note=st.fp8_note)]
          if st.fp8 else []),
        Line(key="gradients", label=f"gradients, {g_bits}-bit",
             bytes=at_peak.gradients, bytes_per_param=per_param(st.grads),
             at_peak=_gradients_at_peak(at_peak, st.grads, in_backward)),
        Line(key="master_weights", label=_master_label(st),
             bytes=st.master,
             bytes_per_param=per_param(st.master),
             at_peak=_HOST if st.host and not st.master and recipe.master_bytes else ""),
        Line(key="optimizer", label=optimizer_label(opt, st.state_b), bytes=st.opt,
             bytes_per_param=per_param(st.opt), at_peak=_HOST if st.host and not st.opt else "",
             note=(f"{st.paged:,} bytes paged: CUDA managed memory, evicted to host memory "
                   "when the GPU runs short; torch's allocator statistics do not count them"
                   if st.paged else "")),
    ]
    if st.gathered:
        released = ""
        if at_peak.phase == "optimizer":
            released = "released after the backward" + (
                ", but for the small ones kept" if at_peak.gathered else "")
        lines.append(Line(key="gathered_params", label=st.gathered_label,
                          bytes=at_peak.gathered, note=st.gathered_note, at_peak=released))
    elif fsdp is not None and at_peak.gathered:
        lines.append(Line(key="gathered_params", label="gathered FSDP2 units",
                          bytes=at_peak.gathered, note="the root unit"
                          + (" and the blocks gathered" if at_peak.gathered > fsdp.root else "")
                          + f" at the {at_peak.phase} peak"))
    lines.append(Line(key="activations", label="activations", bytes=at_peak.activations,
                      note=act.summary, at_peak=_activations_at_peak(at_peak, act)))
    if at_peak.temporaries:
        lines.append(Line(key="temporaries", label="step temporaries", bytes=at_peak.temporaries,
                          note=at_peak.detail))
    lines.append(Line(key="overhead", label=f"runtime overhead ({overhead_level})",
                      bytes=overhead.bytes))
    return tuple(lines)


_HOST = "in host memory (offloaded)"


def _gradients_at_peak(at_peak: _Phase, full: int, in_backward: bool = False) -> str:
    """Where the parameter gradients are when the peak phase holds fewer than all of them."""
    if at_peak.gradients >= full or not full:
        return ""
    if in_backward:
        return "stepped and freed in the backward, one parameter at a time"
    if at_peak.phase == "forward":
        return "none yet (backward makes them)"
    if at_peak.gradients == 0:
        return "none yet (the peak precedes them)"
    return f"{fmt_gb(at_peak.gradients)} of {fmt_gb(full)} made by the backward peak"


def _activations_at_peak(at_peak: _Phase, act: TrainActivations) -> str:
    """Where the activations are when the peak phase holds none."""
    if at_peak.activations:
        return ""
    if not act.known:
        return "not included"
    if at_peak.phase == "optimizer":
        return "freed before the optimizer step"
    return ""


@record(kw_only=False)
class _Phase:
    """What the GPU holds at the peak of one phase of the step."""

    weights: int
    gradients: int
    master: int
    optimizer: int
    activations: int
    temporaries: int
    gathered: int
    detail: str = ""
    phase: str = ""

    @property
    def total(self) -> int:
        return (self.weights + self.gradients + self.master + self.optimizer + self.activations
                + self.temporaries + self.gathered)


def _train_phases(job: Job, st: States, act: TrainActivations,
                  buffers: int = 0) -> dict[str, _Phase]:
    """Memory at the peak of each phase of a step (DESIGN.md, "What a training step really
    holds"). zero_grad(set_to_none=True) frees the gradients after the step, so the first
    micro-step's forward runs without them; with gradient accumulation, or gradients zeroed in
    place (``zero_grad_set_to_none=False``), the forward and backward run with all of them alive. The optimizer step holds the gradients, the
    states and the step's temporaries; the activations are gone by then."""
    grads = st.grads
    base = dict(weights=st.weights_trainable + st.base + buffers + st.fp8, master=st.master,
                optimizer=st.opt)
    # FSDP2: what is gathered depends on where the phase's peak is (the timeline places it);
    # nothing is gathered in the optimizer step
    fwd_g, bwd_g, step_g = ((act.forward_gathered, act.backward_gathered, 0)
                            if st.fsdp is not None else (st.gathered, st.gathered, st.gathered_kept))
    accum = grads if job.grad_accum > 1 or not job.zero_grad_set_to_none else 0
    if job.optimizer_in_backward:
        # each parameter was stepped in the backward as its gradient was made, then freed:
        # no step of its own after it, no gradients left for one
        step = _Phase(gradients=0, activations=0, temporaries=0, phase="optimizer",
                      detail="stepped in the backward", gathered=step_g, **base)
    else:
        step = _Phase(gradients=grads, activations=0, temporaries=st.step_tmp,
                      detail=st.step_detail or "optimizer step", phase="optimizer",
                      gathered=step_g, **base)
    return {
        "forward": _Phase(gradients=accum, activations=act.forward_peak,
                          temporaries=act.forward_temporaries, detail=act.forward_detail,
                          phase="forward", gathered=fwd_g, **base),
        "backward": _Phase(gradients=act.backward_grads if act.known else grads,
                           activations=act.backward_peak,
                           temporaries=act.backward_temporaries, detail=act.backward_detail,
                           phase="backward", gathered=bwd_g, **base),
        "optimizer": step,
    }

