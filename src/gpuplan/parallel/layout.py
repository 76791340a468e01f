"""The parallel layout of a job as the accounting reads it: the degrees (TP, SP, PP, CP, EP and the
data-parallel remainder), the checks that need the architecture, the layers of each pipeline stage,
the micro-batches each stage holds in flight, and which share of every parameter tensor one rank
holds under Megatron-LM's sharding.

Conventions (each stated where a number depends on it):

* **TP** (Megatron-LM, Shoeybi et al. 2019): column-parallel Q/K/V, gate/up and fc1 (output
  dimension and bias split), row-parallel output and down projections (input dimension split,
  bias replicated), norms and routers replicated. The vocabulary is split too -- the token
  embedding is a ``VocabParallelEmbedding``, the output head column-parallel with a vocab-parallel
  cross-entropy -- as Megatron always does (:data:`VOCAB_PARALLEL`); learned position embeddings
  stay replicated. With fewer K/V heads than TP ranks each rank holds one whole K/V head
  (replicated over ``tp / kv_heads`` ranks), as vLLM and Megatron do.
* **PP**: layers split as evenly as possible, the first ``layers % stages`` stages taking one more
  (DeepSpeed's ``partition_uniform``); the embedding on the first stage, the final norm, head and
  loss on the last (a tied embedding is held by both, as Megatron does). With ``pp_embedding_part``
  / ``pp_loss_part`` the embedding / the head and loss count as one layer each in that split, at
  its start / end (Megatron-LM's ``--account-for-embedding-in-pipeline-split`` and
  ``--account-for-loss-in-pipeline-split``: ``(layers + 2) / (pp v)`` per part, one fewer
  transformer layer in the first stage's first chunk and the last stage's last chunk). With
  ``pp_first_stage_layers`` / ``pp_last_stage_layers`` (Megatron-LM's ``--decoder-first/last-
  pipeline-num-layers``) those stages hold the given layers, the others the rest evenly, each
  stage's layers cut evenly over its chunks (:func:`~.checks.uneven_parts`).
* **EP**: experts spread over ``ep`` ranks of the data-parallel (x context-parallel) group, each
  expert further split over the TP group (Megatron-Core's default ``expert_tensor_parallel_size
  = tensor_model_parallel_size``); dropless routing (Megatron's default, no capacity factor).
  With ``etp`` (expert TP) below TP the MoE layers fold (MoE Parallel Folding, Liu et al. 2025,
  arXiv 2504.14960; Megatron-Core's ``--expert-tensor-parallel-size``): each expert split over
  ``etp`` ranks, EP over ``tp x dp x cp / etp`` ranks of the stage, the expert-data-parallel
  group ``tp x dp x cp / (ep x etp)``.
* **ZeRO/FSDP** shards over the data-parallel x context-parallel group (the ranks that hold the
  same weights: Megatron's distributed optimizer and FSDP's data-parallel mesh); expert
  parameters over the expert-data-parallel group ``dp x cp / ep``.
"""

from __future__ import annotations

import functools
import math

from dataclasses import replace

from .._record import record
from .checks import check_layout, part_layers, pp_chunks
from .moe_ep import dropped_fraction_balanced, dropped_fraction_uniform, expert_capacity
from ..errors import InputError, opt
from ..models import Architecture, Model, ParamCounts, ParamTensor

__all__ = ["VOCAB_PARALLEL", "Layout", "layout_of", "check_layout", "part_layers", "stage_layers",
           "in_flight", "dual_in_flight", "chunk_forwards", "rank_model", "layout_notes", "mtp_params",
           "mtp_active_params", "mtp_rank_params", "tp_shape"]

#: The token embedding and output head are split over the TP group (Megatron-LM always does).
VOCAB_PARALLEL = True

#: Row-parallel linears (their input dimension is split); every other block linear is
#: column-parallel. BERT's ``intermediate.dense`` is column-parallel despite its name.
_ROW = frozenset({"o_proj", "out_proj", "c_proj", "down_proj", "w2", "fc2", "dense_4h_to_h",
                  "dense"})
_KV = frozenset({"k_proj", "v_proj", "key", "value"})
#: Projections every TP rank holds whole: MLA's query and key/value down-projections (vLLM's
#: ReplicatedLinear in DeepseekV2MLAAttention; Megatron's linear_q/kv_down_proj), whose latent
#: every rank's heads read.
_REPLICATED = frozenset({"q_a_proj", "kv_a_proj_with_mqa"})
_FUSED_QKV = frozenset({"query_key_value", "qkv_proj"})


@record
class Layout:
    """A job's parallel layout, resolved: the degrees (TP, SP, PP, CP, EP and the data-parallel
    remainder), the pipeline's shape, and what a step under it needs beside them (micro-batch,
    sequence, ZeRO, checkpointing, whose ZeRO-3). The one layout type: memory, compute and the
    cluster search all read it."""

    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    dp: int = 1
    sequence_parallel: bool = False
    schedule: str = "1f1b"
    """The pipeline schedule's name: gpipe, 1f1b, interleaved (its chunks: ``chunks``) or
    dualpipe (two stages a rank, :attr:`dual`)."""
    chunks: int = 1
    """Model chunks per stage (interleaved:V)."""
    micro_batches: int = 1
    embedding_part: bool = False
    """The embedding is one layer-equivalent part of the pipeline split (first stage)."""
    loss_part: bool = False
    """The head and loss are one layer-equivalent part of the pipeline split (last stage)."""
    first_stage_layers: int | None = None
    """Transformer layers on the first stage (an uneven split); None: the even split."""
    last_stage_layers: int | None = None
    """Transformer layers on the last stage (an uneven split); None: the even split."""
    etp: int | None = None
    """Expert tensor-parallel degree; None: ``tp`` (no folding)."""
    moe_capacity_factor: float | None = None
    """MoE drop-and-pad capacity factor (:mod:`.moe_ep`); None: dropless."""
    mtp_layers: int = 0
    """Multi-token-prediction depth trained on the last stage (:func:`mtp_params`)."""
    ep_overlap: bool = False
    """Megatron-Core's batch-level EP overlap: a micro-batch's all-to-alls beside another
    micro-batch's compute (:attr:`gpuplan.job.ParallelLayout.ep_overlap`)."""
    shared_overlap: bool = False
    """The shared expert beside the dispatcher's all-to-alls
    (:attr:`gpuplan.job.ParallelLayout.moe_shared_expert_overlap`)."""
    batch: int = 1
    """Sequences per micro-batch per data-parallel rank."""
    seq: int = 2048
    zero: int = 0
    checkpointing: str = "none"
    distribute_checkpoints: bool = False
    """Full checkpointing's layer inputs split over the TP group (one all-gather a layer in
    backward, before its recompute)."""
    sharding: str = "deepspeed"
    """Whose ZeRO-3 (:data:`gpuplan.job.Sharding`): DeepSpeed gathers the weights again for a
    checkpointed layer's recompute, FSDP keeps the recompute's gather for the backward."""
    weight_gathers: float | None = None
    """ZeRO-3's all-gathers of the weights per micro-batch, in whole-model units
    (:func:`gpuplan.compute.parallel.zero3_gathers` of the model); None: the count without a
    tensor list."""
    dp_shard: int | None = None
    """Hybrid sharding (HSDP): the data-parallel ranks of one shard group
    (:attr:`gpuplan.job.ShardingConfig.dp_shard`); None: every data-parallel rank."""
    gather_overlap: bool = True
    """ZeRO-3's weight all-gathers run beside the compute (a prefetch on its own stream: FSDP,
    DeepSpeed since its PR #1453, January 2022); False: each one waited for before the layer
    runs, as DeepSpeed ZeRO-3 did before (PR #1188, June 2021: "each all_gather calls
    torch.cuda.synchronize()"), only the gradients' reduce-scatter overlapped. Under ZeRO-1/2,
    False: the weights' all-gather after the optimizer step, synchronous (Megatron-Core's
    distributed optimizer without ``overlap_param_gather``)."""

    @classmethod
    def of(cls, job, seq: int | None = None) -> "Layout":
        """The layout of a :class:`gpuplan.Job` (read by attribute), at ``seq`` (default the
        job's, or 2048 when it leaves it to the model)."""
        name, v = pp_chunks(job.pp_schedule)
        return cls(tp=job.tp, pp=job.pp, cp=job.cp, ep=job.ep, dp=job.dp,
                   sequence_parallel=job.sequence_parallel, schedule=name, chunks=v,
                   micro_batches=job.micro_batches or job.grad_accum,
                   embedding_part=job.pp_embedding_part, loss_part=job.pp_loss_part,
                   first_stage_layers=job.pp_first_stage_layers,
                   last_stage_layers=job.pp_last_stage_layers, etp=job.etp,
                   moe_capacity_factor=job.moe_capacity_factor,
                   mtp_layers=job.mtp_layers or 0, ep_overlap=job.ep_overlap,
                   shared_overlap=job.moe_shared_expert_overlap, batch=job.batch, seq=seq or job.seq or 2048, zero=job.zero,
                   checkpointing=job.checkpointing,
                   distribute_checkpoints=job.distribute_checkpoints, sharding=job.sharding,
                   dp_shard=job.dp_shard)

    @property
    def sp(self) -> bool:
        return self.sequence_parallel

    @property
    def pp_schedule(self) -> str:
        """The schedule as a job spells it (``interleaved:4``)."""
        return self.schedule + (f":{self.chunks}" if self.chunks > 1 else "")

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.cp * self.dp

    @property
    def dual(self) -> bool:
        """DualPipe: each rank holds the parameters of two stages, ``i`` and ``pp - 1 - i``
        (the report's Table 2: parameters 2x)."""
        return self.schedule == "dualpipe" and self.pp > 1

    @property
    def trivial(self) -> bool:
        """Data parallel only (the single-GPU accounting sharded by ZeRO)."""
        return self.tp == self.pp == self.cp == self.ep == 1

    @property
    def zero_group(self) -> int:
        """Ranks ZeRO/FSDP shards the dense weights over: the data-parallel x context-parallel
        group, or under hybrid sharding one shard group of it (``dp_shard x cp``)."""
        return (self.dp if self.dp_shard is None else min(self.dp, self.dp_shard)) * self.cp

    @property
    def replicas(self) -> int:
        """Copies of the sharded states under hybrid sharding (``dp / dp_shard``; 1 otherwise):
        the group each gradient shard is all-reduced over."""
        return self.dp // (self.zero_group // self.cp)

    @property
    def expert_tp(self) -> int:
        """Ranks each expert is split over (Megatron-Core's ``expert_tensor_parallel_size``)."""
        return self.tp if self.etp is None else self.etp

    @property
    def folded(self) -> bool:
        """The MoE layers use their own grid (MoE Parallel Folding): expert TP differs from TP."""
        return self.expert_tp != self.tp

    @property
    def expert_group(self) -> int:
        """The ranks EP spreads over: tp x dp x cp / expert TP (Megatron-Core forms the expert
        groups over the attention's TP x DP x CP ranks of a stage; with expert TP = TP that is
        the data-parallel x context-parallel group)."""
        return max(1, self.tp * self.dp * self.cp // self.expert_tp)

    @property
    def expert_zero_group(self) -> int:
        return max(1, self.expert_group // self.ep)

    @property
    def uneven(self) -> bool:
        """The first and/or last stage's layers are given (not the even split)."""
        return self.pp > 1 and (self.first_stage_layers is not None
                                or self.last_stage_layers is not None)

    def label(self) -> str:
        parts = [f"TP{self.tp}", f"PP{self.pp}", f"CP{self.cp}", f"DP{self.dp}"
                 + (f"(HSDP {self.replicas}x{self.zero_group // self.cp})"
                    if self.replicas > 1 else "")]
        if self.ep > 1:
            parts.insert(3, f"EP{self.ep}" + (f" ETP{self.expert_tp}" if self.folded else ""))
        sched = f" {self.pp_schedule}" if self.pp > 1 else ""
        if self.pp > 1 and (self.embedding_part or self.loss_part):
            sched += " +emb/loss parts"
        if self.uneven:
            sched += "".join(f" {k} stage {n} layers" for k, n in
                             (("first", self.first_stage_layers), ("last", self.last_stage_layers))
                             if n is not None)
        sp = " SP" if self.sequence_parallel else ""
        return (" ".join(parts) + f"{sp} ZeRO-{self.zero} mb{self.batch}x{self.micro_batches}"
                f"{sched} ckpt={self.checkpointing}")

    def to_dict(self) -> dict:
        """The layout of a step (``gpuplan cluster``'s and ``speed``'s JSON)."""
        return {"tp": self.tp, "pp": self.pp, "cp": self.cp, "ep": self.ep, "dp": self.dp,
                "schedule": self.pp_schedule, "chunks": self.chunks,
                "micro_batches": self.micro_batches, "batch": self.batch, "seq": self.seq,
                "zero": self.zero, "sequence_parallel": self.sequence_parallel,
                "checkpointing": self.checkpointing, "gpus": self.gpus,
                "pp_embedding_part": self.embedding_part, "pp_loss_part": self.loss_part,
                **self._new_keys()}

    def _new_keys(self) -> dict:
        """The uneven split and expert TP, written only when used (the JSON of every other
        layout stays as it was)."""
        out = {}
        if self.uneven:
            out.update(pp_first_stage_layers=self.first_stage_layers,
                       pp_last_stage_layers=self.last_stage_layers)
        if self.etp is not None:
            out["etp"] = self.etp
        if self.mtp_layers:
            out["mtp_layers"] = self.mtp_layers
        if self.ep_overlap:
            out["ep_overlap"] = True
        if self.shared_overlap:
            out["moe_shared_expert_overlap"] = True
        if self.replicas > 1:  # hybrid sharding: the shard group and its replicas
            out.update(dp_shard=self.zero_group // self.cp, dp_replicas=self.replicas)
        return out

    def degrees_dict(self) -> dict:
        """The degrees alone (the accounting's ``layout`` object in ``fit --json``)."""
        return {"tp": self.tp, "pp": self.pp, "cp": self.cp, "ep": self.ep, "dp": self.dp,
                "sequence_parallel": self.sequence_parallel, "pp_schedule": self.pp_schedule,
                "micro_batches": self.micro_batches, "vocab_parallel": VOCAB_PARALLEL,
                "pp_embedding_part": self.embedding_part, "pp_loss_part": self.loss_part,
                **self._new_keys()}

    def parts(self, num_layers: int) -> tuple[int, ...]:
        """Transformer layers of each of the ``pp x chunks`` pipeline parts (:func:`part_layers`)."""
        return part_layers(num_layers, self.pp, self.chunks, self.embedding_part, self.loss_part,
                           *self._split())

    def stages(self, num_layers: int) -> tuple[tuple[int, ...], ...]:
        """Layer indices of each stage (:func:`stage_layers`)."""
        return stage_layers(num_layers, self.pp, self.chunks, self.embedding_part,
                            self.loss_part, *self._split())

    def stage_totals(self, num_layers: int) -> tuple[int, ...]:
        """Transformer layers of each stage (all its chunks)."""
        return tuple(len(s) for s in self.stages(num_layers))

    def _split(self) -> tuple[int | None, int | None]:
        return (self.first_stage_layers, self.last_stage_layers) if self.uneven else (None, None)


def mtp_params(arch: Architecture, depth: int) -> int:
    """Parameters ``depth`` multi-token-prediction modules add to training (DeepSeek-V3 report,
    arXiv 2412.19437 sec. 2.2: each module a transformer block, a 2H -> H projection and two
    RMSNorms, the embedding and the output head shared with the main model): the checkpoint's
    MTP layer (``arch.mtp_params``, :func:`gpuplan.models._modern._mtp`: block, norms,
    projection and its own copies of the embedding and head) less those two copies. 0 when
    ``depth`` is 0; raises when the architecture holds no MTP layer to copy."""
    if not depth:
        return 0
    if not arch.mtp_layers or not arch.mtp_params:
        raise InputError(f"{opt('mtp_layers')} {depth}: {arch.name}'s config has no "
                         "multi-token-prediction layer (num_nextn_predict_layers) to train; drop "
                         f"{opt('mtp_layers')}", field="mtp_layers", value=depth)
    one = arch.mtp_params // arch.mtp_layers - 2 * arch.vocab_size * arch.hidden_size
    return depth * one


def mtp_active_params(arch: Architecture, depth: int) -> int:
    """Of :func:`mtp_params`, those one token runs through: the routed experts it is not sent
    to left out (``(E - k) x 3 H x W`` per module, gated experts)."""
    if not depth:
        return 0
    idle = 0
    if arch.num_experts:
        mats = 3 if arch.mlp == "gated" else 2
        idle = (arch.num_experts - arch.experts_per_token) * mats * arch.hidden_size \
            * (arch.moe_intermediate_size or arch.intermediate_size)
    return mtp_params(arch, depth) - depth * idle


def mtp_rank_params(arch: Architecture, lay: Layout) -> int:
    """The last stage's rank's share of the MTP modules' parameters (:func:`mtp_params`): their
    routed experts over EP (and expert TP), the rest over TP."""
    mtp = mtp_params(arch, lay.mtp_layers)
    if not mtp:
        return 0
    expert = 0
    if arch.is_moe and lay.ep > 1:
        mats = 3 if arch.mlp == "gated" else 2
        expert = lay.mtp_layers * arch.num_experts * mats * arch.hidden_size \
            * (arch.moe_intermediate_size or arch.intermediate_size)
    return math.ceil((mtp - expert) / lay.tp + expert / (lay.ep * lay.expert_tp))


def layout_of(job) -> Layout:
    """:meth:`Layout.of` a job at its own sequence."""
    return Layout.of(job)


def layout_notes(arch: Architecture | None, job) -> tuple[str, ...]:
    """What the layout assumes that the user should read (stated in the output)."""
    lay = layout_of(job)
    if lay.trivial:
        return ()
    notes = [f"layout: tp {lay.tp} x pp {lay.pp} x cp {lay.cp} x dp {lay.dp}"
             + (f", ep {lay.ep} within dp x cp" if lay.ep > 1 else "")
             + (", sequence parallel" if lay.sp else "")
             + (f", {lay.schedule}" + (f":{lay.chunks}" if lay.chunks > 1 else "")
                + f" with {lay.micro_batches} micro-batches" if lay.pp > 1 else "")]
    if lay.tp > 1:
        notes.append("tensor parallel as Megatron-LM shards it: vocabulary split over the TP "
                     "group (vocab-parallel embedding and head), norms replicated")
    if lay.tp > job.gpus_per_node:
        notes.append(f"tp {lay.tp} spans more than one node ({job.gpus_per_node} GPUs per "
                     "node): its all-reduces cross the inter-node link")
    if arch is not None and lay.tp > arch.num_kv_heads:
        notes.append(f"{arch.num_kv_heads} K/V heads over tp {lay.tp}: each rank holds one "
                     "K/V head (replicated)")
    cf = job.moe_capacity_factor
    if lay.ep > 1 and cf is None:
        notes.append("MoE routing dropless (no capacity factor), balanced over expert ranks")
    elif cf is not None and arch is not None and arch.num_experts:
        tokens = lay.batch * (lay.seq // lay.cp) // (lay.tp if lay.sp else 1)
        k = max(1, arch.experts_per_token)
        cap = expert_capacity(tokens, arch.num_experts, k, cf)
        drop = dropped_fraction_uniform(tokens, arch.num_experts, k, cf)
        notes.append(f"MoE capacity factor {cf:g}: each expert runs {cap} rows of a rank's "
                     f"{tokens} tokens x top-{k} (Megatron-Core's drop-and-pad, ceil(T x k / E x "
                     f"cf)); {drop:.2%} of the assignments dropped under uniform random routing "
                     f"({dropped_fraction_balanced(tokens, arch.num_experts, k, cf):.2%} if "
                     "perfectly balanced)")
    return tuple(notes)


@functools.lru_cache(maxsize=64)
def stage_layers(num_layers: int, pp: int, chunks: int = 1, embedding: bool = False,
                 loss: bool = False, first: int | None = None,
                 last: int | None = None) -> tuple[tuple[int, ...], ...]:
    """Layer indices held by each pipeline stage. Layers are cut into ``pp * chunks`` parts as
    evenly as possible, the first ``layers % parts`` parts one layer longer (DeepSpeed's
    ``partition_uniform``; with ``embedding`` / ``loss`` those count as one layer each:
    :func:`part_layers`; ``first`` / ``last``: an uneven split, :func:`uneven_parts`); stage
    ``i`` holds parts ``i, i + pp, i + 2 pp, ...`` (interleaved)."""
    sizes = part_layers(num_layers, pp, chunks, embedding, loss, first, last)
    bounds = [0]
    for n in sizes:
        bounds.append(bounds[-1] + n)
    return tuple(tuple(i for k in range(stage, len(sizes), pp)
                       for i in range(bounds[k], bounds[k + 1])) for stage in range(pp))


def in_flight(schedule: str, pp: int, stage: int, micro_batches: int, chunks: int = 1) -> int:
    """Model-chunk micro-batches whose activations stage ``stage`` holds at its peak (divide by
    ``chunks`` for whole-stage micro-batches).

    GPipe (Huang et al. 2019): every micro-batch's forward runs before the first backward: all
    ``m``. 1F1B (PipeDream-Flush, Narayanan et al. 2021): stage ``i`` runs ``pp - i - 1`` warm-up
    forwards and one more before its first backward: ``min(m, pp - i)``. Interleaved 1F1B with
    ``v`` chunks (Narayanan et al. 2021; Megatron-LM's ``forward_backward_pipelining_with_
    interleaving``): ``2 (pp - i - 1) + (v - 1) pp`` warm-up chunk forwards plus one, at most
    ``m v`` -- on the first stage ``pp v + pp - 1`` chunks, i.e. activations of ``L (1 + (pp - 1)
    / (pp v))`` layers (Korthikanti et al. 2022, sec. 4.2.3). DualPipe (DeepSeek-V3 report,
    arXiv 2412.19437, Table 2; deepseek-ai/DualPipe README's table): ``pp + 1`` micro-batches of
    a stage's activations on every rank (:func:`dual_in_flight`: the rank's two stages'), at most
    ``m``."""
    m = micro_batches
    if schedule == "gpipe":
        return m * chunks
    if schedule == "dualpipe":
        return min(m, sum(dual_in_flight(pp, stage)))
    if schedule == "interleaved":
        return min(m * chunks, 2 * (pp - stage - 1) + (chunks - 1) * pp + 1)
    return min(m, pp - stage)


def dual_in_flight(pp: int, stage: int) -> tuple[int, int]:
    """DualPipe: (micro-batches of stage ``stage``, of its twin ``pp - 1 - stage``) whose
    activations that rank holds at its peak, ``pp - stage`` and ``stage + 1`` (``pp + 1`` in
    all: the report's Table 2). Each direction runs as 1F1B: deepseek-ai/DualPipe@3da1bbe
    dualpipe/dualpipe.py ``step``, rank ``r``, ``h = min(r, pp - 1 - r)``: steps 1-2 run
    ``2 (pp/2 - h - 1) + h + 1`` forwards of phase 0 and ``h + 1`` of phase 1 before the first
    backward; later steps free one for each forward. Phase 0 is the forward direction on the
    first half of the ranks (stage ``r``) and the reverse one on the second (stage ``pp - 1 -
    r``), so rank ``r`` holds ``pp - r`` of stage ``r`` and ``r + 1`` of stage ``pp - 1 - r``
    (rank 0: 16 of stage 0 and 1 of stage 15 at PP 16)."""
    return pp - stage, stage + 1


def chunk_forwards(schedule: str, pp: int, stage: int, micro_batches: int, chunks: int,
                   chunk: int) -> int:
    """How many of the :func:`in_flight` model-chunk micro-batches at stage ``stage``'s peak are
    chunk ``chunk``'s. Interleaved: forwards run in groups of ``pp`` micro-batches per chunk,
    chunk after chunk (Megatron-LM's ``get_model_chunk_id``: forward ``k`` is chunk
    ``(k mod pp v) // pp``; ``microbatch_group_size_per_vp_stage`` = pp, its default)."""
    n = in_flight(schedule, pp, stage, micro_batches, chunks)
    if chunks == 1:
        return n
    if schedule != "interleaved":
        return min(n, micro_batches)
    full, rest = divmod(n, pp * chunks)
    return min(micro_batches, full * pp + min(pp, max(0, rest - chunk * pp)))


def tp_shape(t: ParamTensor, arch: Architecture, tp: int) -> tuple[int, ...]:
    """One TP rank's shape of ``t`` (Megatron's column / row split; the vocabulary padded)."""
    shape = list(t.shape)
    if tp == 1:
        return t.shape
    vocab = arch.vocab_size
    if t.component in ("embeddings", "head"):
        if VOCAB_PARALLEL and vocab and shape and shape[0] == vocab and len(shape) == 2:
            shape[0] = -(-vocab // tp)  # padded up to a multiple of tp
        return tuple(shape)
    if t.component not in ("attention", "mlp", "experts") or not t.module:
        return t.shape
    if t.module in _REPLICATED:
        return t.shape
    row = (t.module in _ROW or t.name.endswith(("down_proj", "down_proj_bias"))) \
        and "intermediate" not in t.name
    n = len(shape)
    out_axis = (n - 1 if t.transposed else max(n - 2, 0))
    in_axis = (n - 2 if t.transposed else n - 1)
    if row:
        if t.linear and n >= 2:
            shape[in_axis] //= tp
        return tuple(shape)  # a row-parallel bias is replicated
    # a linear's output dimension; a fused expert bias (experts, out) its last; 1-D its only
    axis = out_axis if t.linear else (n - 1 if t.component == "experts" else 0)
    kv, d, heads = arch.num_kv_heads, arch.head_dim, arch.num_heads
    kv_rank = max(1, kv // tp)
    if t.module in _KV and t.component == "attention":
        shape[axis] = shape[axis] * kv_rank // kv
    elif t.module in _FUSED_QKV and shape[axis] == (heads + 2 * kv) * d:
        shape[axis] = (heads // tp + 2 * kv_rank) * d
    else:
        shape[axis] //= tp
    return tuple(shape)


def _stage_count(t: ParamTensor, arch: Architecture, layers: tuple[int, ...],
                 first: bool, last: bool) -> int:
    """How many of ``t``'s ``count`` tensors a stage holding ``layers`` has."""
    if t.layer is not None:
        return t.count if t.layer in layers else 0
    if "{i}" not in t.name:
        if t.component == "embeddings":
            tied_head = arch.tie_word_embeddings and last and t.shape[:1] == (arch.vocab_size,)
            return t.count if (first or tied_head) else 0
        return t.count if last else 0  # the final norm and the head
    moe = _moe_set(arch)
    if t.component == "experts" or (t.component == "router" and moe):
        here, pool = sum(1 for i in layers if i in moe), len(moe)
    elif t.component == "mlp" and moe and len(moe) < arch.num_layers \
            and "shared_expert" not in t.name:
        here, pool = sum(1 for i in layers if i not in moe), arch.num_layers - len(moe)
    else:
        here, pool = len(layers), arch.num_layers
    if not pool:
        return 0
    return t.count * here // pool


def _moe_set(arch: Architecture) -> frozenset[int]:
    """The MoE layers' indices (every layer of a MoE model that names none)."""
    return _moe_indices(tuple(arch.moe_layers or ()), arch.num_layers, bool(arch.num_experts))


@functools.lru_cache(maxsize=64)
def _moe_indices(named: tuple[int, ...], layers: int, moe: bool) -> frozenset[int]:
    return frozenset(i for i in (named or (range(layers) if moe else ())) if 0 <= i < layers)


def _rank_arch(arch: Architecture, lay: Layout, layers: tuple[int, ...]) -> Architecture:
    t = lay.tp
    idx = {i: k for k, i in enumerate(layers)}
    moe_all = arch.moe_layers or (tuple(range(arch.num_layers)) if arch.num_experts else ())
    moe = tuple(idx[i] for i in moe_all if i in idx)
    slide = tuple(idx[i] for i in arch.sliding_window_layers if i in idx)
    return replace(
        arch, num_layers=len(layers), num_heads=arch.num_heads // t,
        num_kv_heads=max(1, arch.num_kv_heads // t),
        intermediate_size=arch.intermediate_size // t,
        # the experts' activations per rank: folded (expert TP < TP) a rank runs its own tp-th of
        # the tokens through etp-split experts, the same bytes as all tokens through tp-split
        moe_intermediate_size=arch.moe_intermediate_size // t,
        shared_expert_intermediate_size=arch.shared_expert_intermediate_size // t,
        vocab_size=-(-arch.vocab_size // t) if VOCAB_PARALLEL else arch.vocab_size,
        num_experts=arch.num_experts if moe else 0, moe_layers=moe,
        experts_per_token=arch.experts_per_token if moe else 0,
        sliding_window=arch.sliding_window if slide else None, sliding_window_layers=slide,
        tensors=())


_RANK: dict[tuple, tuple[Model, Model]] = {}


def rank_model(model: Model, job, stage: int, part: str = "all") -> Model:
    """What one rank of pipeline stage ``stage`` holds: its layers' tensors (and the embedding on
    the first stage, the head on the last), TP-split and with ``experts / ep`` experts, as a
    :class:`Model` whose architecture is the rank's (heads, K/V heads, MLP widths and vocabulary
    per TP rank; the stage's layers). ``part="experts"``: only its expert tensors. Cached per
    model and layout."""
    lay = layout_of(job)
    key = (id(model), lay.tp, lay.pp, lay.chunks, lay.embedding_part, lay.loss_part, lay.ep,
           lay._split(), lay.expert_tp, stage, part)
    hit = _RANK.get(key)
    if hit is not None and hit[0] is model:
        return hit[1]
    out = _build_rank_model(model, lay, stage, experts_only=part == "experts")
    if len(_RANK) > 1024:
        _RANK.clear()
    _RANK[key] = (model, out)
    return out


def _build_rank_model(model: Model, lay: Layout, stage: int, experts_only: bool) -> Model:
    arch = model.architecture
    layers = lay.stages(arch.num_layers)[stage]
    first, last = stage == 0, stage == lay.pp - 1
    tensors = []
    for t in model.tensors:
        if experts_only and t.component != "experts":
            continue
        n = _stage_count(t, arch, layers, first, last)
        if t.component == "experts":
            n //= lay.ep
        if n:
            split = lay.expert_tp if t.component == "experts" else lay.tp
            tensors.append(replace(t, shape=tp_shape(t, arch, split), count=n))
    by: dict[str, int] = {}
    for t in tensors:
        by[t.component] = by.get(t.component, 0) + t.total
    total = sum(by.values())
    emb = sum(t.total for t in tensors if t.component == "embeddings")
    active = total  # (FLOP counts are not taken from a rank model)
    return Model(name=model.name, params=ParamCounts(total=total, by_component=by,
                                                     active=active, embedding=emb),
                 tensors=tuple(tensors), architecture=_rank_arch(arch, lay, layers),
                 source=model.source, checkpoint_dtype=model.checkpoint_dtype)

