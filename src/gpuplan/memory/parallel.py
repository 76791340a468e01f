"""One rank of each pipeline stage of a parallel layout, ready for the single-GPU accounting.

A stage's rank holds its layers' parameter tensors TP-split (and ``experts / ep``), its model
states sharded by ZeRO over the data-parallel x context-parallel group (experts over ``dp x cp /
ep``), and the activations of the micro-batches its schedule keeps in flight, at ``seq / cp``
tokens, sequence-sharded under SP. On top of one micro-batch's timeline it adds the buffers of the
layout's communication:

* **p2p** (pp > 1): the received activation and the received gradient of one micro-batch
  (``b x s x h``, per TP rank ``/ tp`` under SP, as Megatron scatters them);
* **ring attention** (cp > 1): two K/V blocks in flight (the one being used and the one arriving)
  in forward; in backward the same two plus their dK/dV (Megatron-Core's
  ``AttnFuncWithCPAndKVP2P``);
* **all-to-all** (ep > 1, MoE stages): one all-to-all's send and receive buffers alive at once,
  ``b x s x top_k x h`` each (dropless, balanced routing; ``E x capacity`` rows under a capacity
  factor); dispatch and combine keep no hidden-sized tensor for backward beyond the experts'
  own input (:mod:`.moe_ep`, from Megatron-Core's and torchtitan's dispatchers);
* the TP all-reduce is in place (Megatron's ``_reduce``); SP's all-gather buffers are tensors of
  the replayed layer (:meth:`Graph.sp_gather`). NCCL's own buffers are in the overhead line.
"""

from __future__ import annotations

from dataclasses import replace

from .._record import record
from ..job import Job
from ..models import Model
from .activations import TrainActivations, regime_for, train_activations
from .activations.profile import Shard
from ..parallel import (Layout, check_layout, chunk_forwards, dual_in_flight, in_flight,
                        layout_notes, layout_of, mtp_rank_params, rank_model)
from .moe_ep import EpExchange, ep_exchange
from .results import TrainMemory
from .shape import seq_for
from .states import States, train_states

__all__ = ["StagePlan", "stage_plans", "rank_job"]


@record(kw_only=False)
class StagePlan:
    """One rank of one pipeline stage: what the single-GPU accounting runs on."""

    index: int
    layout: Layout
    model: Model
    """The rank's parameter tensors and architecture (:func:`~.layout.rank_model`)."""
    job: Job
    """The rank's job: data parallel over the ZeRO group, the pipeline's micro-batches as
    gradient-accumulation steps."""
    states: States
    shard: Shard
    seq: int | None
    """Tokens of each sequence on this rank (``seq / cp``)."""
    in_flight: int
    """Model-chunk micro-batches whose activations the stage holds at its peak."""
    layers: tuple[int, ...]
    gpus: int
    params: int
    """Parameters of the whole model."""
    full_layers: int
    """Transformer layers of the whole model."""
    notes: tuple[str, ...]
    twin_kept: int = 0
    """DualPipe: what one micro-batch keeps for backward on the rank's other stage ``pp - 1 -
    index`` (its layers, embedding or head, and MTP modules); 0 otherwise."""

    def buffers(self, backward: bool, in_layers: bool = True) -> int:
        """Communication buffers alive at the forward (or backward) peak, bytes. ``in_layers``
        False: the peak is past the layers (the embedding's backward), where no ring-attention
        K/V block or MoE all-to-all buffer is alive."""
        lay, arch = self.layout, self.model.architecture
        if arch is None or self.seq is None:
            return 0
        regime = regime_for(self.job.precision)
        b, s, h = self.job.batch, self.seq, arch.hidden_size
        rows = b * s // (lay.tp if lay.sp else 1)
        out = 0
        if lay.pp > 1:
            out += 2 * rows * h * regime.param
        if not in_layers:
            return out
        if lay.cp > 1:
            kv_block = 2 * b * s * arch.num_kv_heads * arch.head_dim * regime.compute
            out += (4 if backward else 2) * kv_block
        if lay.ep > 1 and arch.num_experts:
            out += self.ep_exchange().transient_bytes
        return out

    def ep_exchange(self) -> EpExchange | None:
        """One MoE layer's all-to-all on this rank (:mod:`.moe_ep`): the rows it sends and
        receives (balanced routing; dropless, or padded to the job's capacity factor) and the
        transient peak of their send and receive buffers. None without experts."""
        lay, arch = self.layout, self.model.architecture
        if arch is None or self.seq is None or not arch.num_experts:
            return None
        tokens = self.job.batch * self.seq // (lay.tp if lay.sp else 1)
        return ep_exchange(tokens, arch.num_experts, arch.experts_per_token, arch.hidden_size,
                           regime_for(self.job.precision).param, lay.ep,
                           self.job.moe_capacity_factor)

    def activations(self) -> TrainActivations:
        """One micro-batch's timeline on this rank, plus the other micro-batches in flight and
        the communication buffers."""
        act = train_activations(self.model, self.job, grad_bytes=self.states.grads,
                                seq=self.seq, shard=self.shard, fsdp=self.states.fsdp)
        if not act.known:
            return act
        v = self.layout.chunks
        live, idle = self.layer_chunks()
        if self.layout.dual:
            own, twin = dual_in_flight(self.layout.pp, self.index)
            held = (own - 1) * act.kept_bytes + twin * self.twin_kept
        else:
            held = max(0, self.in_flight - idle - live) * act.kept_bytes // live
        held += self.mtp_kept(act.kept_bytes)
        fwd = self.buffers(False)
        bwd = self.buffers(True, in_layers=not act.backward_detail.startswith("end of backward"))
        summary = act.summary
        if self.layout.pp > 1:
            summary += (f"; {self.in_flight / v:g} micro-batches in flight "
                        f"({self.layout.schedule})")
        return replace(act, forward_peak=act.forward_peak + held,
                       backward_peak=act.backward_peak + held,
                       forward_temporaries=act.forward_temporaries + fwd,
                       backward_temporaries=act.backward_temporaries + bwd, summary=summary)

    def mtp_kept(self, kept: int) -> int:
        """What the MTP modules keep for backward on this stage: each depth one layer's share of
        the stage's kept activations (``kept`` over its layers) for every micro-batch of the last
        stage in flight on this rank. Its head's logits are not added. Under DualPipe the last
        stage's micro-batches in flight are :func:`dual_in_flight`'s (1 on either rank that
        holds it); rank 0 counts its share in :attr:`twin_kept`."""
        lay = self.layout
        if not (lay.mtp_layers and self.index == lay.pp - 1 and self.layers):
            return 0
        whole = (dual_in_flight(lay.pp, self.index)[0] if lay.dual
                 else max(1, self.in_flight // lay.chunks))
        return lay.mtp_layers * whole * kept // len(self.layers)

    def kept_per_micro_batch(self) -> int:
        """What one micro-batch keeps for backward on this stage, its MTP modules' share
        included (what the DualPipe twin rank holds of it: :attr:`twin_kept`)."""
        act = train_activations(self.model, self.job, grad_bytes=self.states.grads,
                                seq=self.seq, shard=self.shard, fsdp=self.states.fsdp)
        if not act.known:
            return 0
        lay = self.layout
        mtp = (lay.mtp_layers * act.kept_bytes // len(self.layers)
               if lay.mtp_layers and self.index == lay.pp - 1 and self.layers else 0)
        return act.kept_bytes + mtp

    def layer_chunks(self) -> tuple[int, int]:
        """(this stage's chunks that hold transformer layers, in-flight micro-batches of its
        chunks that hold none). A chunk with only the embedding (or only the head and loss:
        ``pp_embedding_part`` / ``pp_loss_part`` with one-layer parts) keeps no layer's
        activations, so the micro-batches it has in flight are not counted at a layer chunk's
        share of the stage's kept activations. (0 idle, all ``chunks`` live otherwise.)"""
        lay = self.layout
        if not (lay.embedding_part or lay.loss_part) or not self.model.architecture:
            return lay.chunks, 0
        sizes = lay.parts(self.full_layers)[self.index::lay.pp]
        empty = [c for c, n in enumerate(sizes) if n == 0]
        idle = sum(chunk_forwards(lay.schedule, lay.pp, self.index, lay.micro_batches,
                                  lay.chunks, c) for c in empty)
        return lay.chunks - len(empty), idle

    def annotate(self, mem: TrainMemory, totals: list[int]) -> TrainMemory:
        """The worst stage's memory, saying which stage it is and the layout."""
        return replace(mem, layout=self.layout.degrees_dict(), stage=self.describe(totals),
                       notes=(*mem.notes, *_stage_note(self, totals)))

    def describe(self, totals: list[int] | None = None) -> dict:
        lay = self.layout
        d = {"index": self.index, "stages": lay.pp,
             "layers": [self.layers[0], self.layers[-1]] if self.layers else [],
             "num_layers": len(self.layers), "embedding": self.shard.first,
             "head": self.shard.last, "in_flight_micro_batches": self.in_flight / lay.chunks,
             "params_per_rank": self.model.params.total}
        if totals is not None:
            d["stage_totals_bytes"] = list(totals)
        return d


def _stage_note(p: StagePlan, totals: list[int]) -> tuple[str, ...]:
    if p.layout.pp == 1:
        return ()
    return (f"worst pipeline stage: {p.index} of {p.layout.pp} (layers {_runs(p.layers)}"
            + (", embedding" if p.shard.first else "")
            + (", head and loss" if p.shard.last else "")
            + f"), {_count(p.in_flight / p.layout.chunks, 'micro-batch')} in flight",)


def _count(n: float, noun: str) -> str:
    return f"{n:.3g} {noun}" + ("" if n == 1 else "es" if noun.endswith("h") else "s")


def _runs(layers: tuple[int, ...]) -> str:
    """Layer indices as their contiguous runs: ``8-15, 24-31`` (an interleaved stage's chunks),
    the first three and a count beyond them."""
    runs: list[list[int]] = []
    for i in layers:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    text = [f"{a}-{b}" if b > a else f"{a}" for a, b in runs]
    return ", ".join(text[:3]) + (f" and {len(text) - 3} more chunks" if len(text) > 3 else "")


def rank_job(job: Job, lay: Layout) -> Job:
    """The job one rank runs, in the single-GPU vocabulary: data parallel over the ZeRO group
    (dp x cp), the pipeline's micro-batches as accumulation steps (gradients accumulate over
    them)."""
    accum = lay.micro_batches if lay.pp > 1 else job.grad_accum
    return job._evolve(gpus=lay.zero_group, dp_shard=None, tp=1, pp=1, cp=1, ep=1,
                       sequence_parallel=False,
                       distribute_checkpoints=False,
                       pp_schedule="1f1b", micro_batches=None, grad_accum=accum,
                       pp_embedding_part=False, pp_loss_part=False,
                       mtp_layers=None)  # the stage plan adds the MTP modules itself


def _states(model: Model, job: Job, rank: Model, rjob: Job, lay: Layout, stage: int,
            non_tn_fp8: bool = False) -> States:
    """The rank's model states; expert parameters sharded by ZeRO over the expert-data-parallel
    group (dp x cp / ep) rather than dp x cp."""
    st = train_states(rank, rjob, non_tn_fp8)
    if lay.ep == 1 or job.zero == 0 or job.lora_rank is not None:
        return st
    experts = rank_model(model, job, stage, part="experts")
    if not experts.tensors:
        return st
    a = train_states(experts, rjob, non_tn_fp8)
    b = train_states(experts, rjob._evolve(gpus=lay.expert_zero_group), non_tn_fp8)
    fix = {f: getattr(st, f) + getattr(b, f) - getattr(a, f)
           for f in ("weights_trainable", "grads", "master", "opt", "host", "step_tmp")}
    return replace(st, **fix)


#: The model states that scale with the parameters a rank holds.
_STATE_FIELDS = ("trainable", "weights_trainable", "grads", "master", "opt", "host", "step_tmp")


def _rank_states(model: Model, job: Job, rank: Model, rjob: Job, lay: Layout,
                 stage: int, non_tn_fp8: bool = False) -> States:
    """The states of stage ``stage``'s rank: DualPipe's rank also holds stage ``pp - 1 - stage``
    (parameters 2x: DeepSeek-V3 report Table 2), and the last stage's the MTP modules
    (:func:`gpuplan.parallel.mtp_rank_params`, at the stage's bytes per parameter)."""
    st = _states(model, job, rank, rjob, lay, stage, non_tn_fp8)
    last, last_params = st, rank.params.total  # the last stage's states, which hold the MTP
    if lay.dual:
        twin = lay.pp - 1 - stage
        twin_rank = rank_model(model, job, twin)
        other = _states(model, job, twin_rank, rjob, lay, twin, non_tn_fp8)
        if twin == lay.pp - 1:
            last, last_params = other, twin_rank.params.total
        st = replace(st, **{f: getattr(st, f) + getattr(other, f)
                            for f in (*_STATE_FIELDS, "fp8")})
    holds_mtp = stage == lay.pp - 1 or (lay.dual and stage == 0)
    extra = mtp_rank_params(model.architecture, lay) if holds_mtp else 0
    if extra and last_params:
        # at the last stage's own bytes per parameter (not the DualPipe pair's sum)
        share = extra / last_params
        st = replace(st, **{f: getattr(st, f) + round(getattr(last, f) * share)
                            for f in _STATE_FIELDS if f != "trainable"},
                     trainable=st.trainable + extra)
    return st


def stage_plans(model: Model, job: Job, non_tn_fp8: bool = False) -> list[StagePlan] | None:
    """One :class:`StagePlan` per pipeline stage, or None for a data-parallel-only job (planned
    as one GPU sharded by ZeRO). ``non_tn_fp8``: the GPU's FP8 GEMMs take any layout
    (:func:`gpuplan.memory.states.train_states`)."""
    lay = layout_of(job)
    if lay.trivial:
        return None
    arch = model.architecture
    check_layout(arch, job)
    rjob = rank_job(job, lay)
    s = seq_for(model, job)
    s_rank = s // lay.cp if s is not None else None
    notes = layout_notes(arch, job)
    plans = []
    for i, layers in enumerate(lay.stages(arch.num_layers)):
        rank = rank_model(model, job, i)
        shard = Shard(sp=lay.tp if lay.sp else 1, ep=lay.ep, first=i == 0, last=i == lay.pp - 1,
                      ckpt_split=lay.tp if job.distribute_checkpoints else 1)
        plans.append(StagePlan(
            index=i, layout=lay, model=rank, job=rjob,
            states=_rank_states(model, job, rank, rjob, lay, i, non_tn_fp8), shard=shard,
            seq=s_rank,
            in_flight=in_flight(lay.schedule, lay.pp, i, lay.micro_batches, lay.chunks),
            layers=layers, gpus=job.gpus, params=model.params.total,
            full_layers=arch.num_layers, notes=notes))
    if lay.dual:
        kept = [p.kept_per_micro_batch() for p in plans]
        plans = [replace(p, twin_kept=kept[lay.pp - 1 - p.index]) for p in plans]
    return plans
