"""Time of one training step under a parallel layout (tensor, sequence, pipeline, context, expert
and sharded data parallelism) on a topology (:mod:`gpuplan.hardware.topology`).

The model, per GPU of the busiest pipeline stage (the last: it holds the output head):

- **compute**: the ops of one micro-batch on a tensor-parallel shard of the model (heads, KV heads,
  FFN width and the vocabulary divided by TP: Megatron's column/row and vocab-parallel split; the
  hidden size whole), ``ceil(layers / PP)`` layers plus the head, ``seq / CP`` tokens per sequence
  with attention over the whole sequence (``(s/CP)^2 x CP`` score work: ring attention, load
  balanced), timed by the roofline of :mod:`.time`; ``M`` micro-batches per step. With the
  embedding and/or the head and loss counted as pipeline parts (``pp_embedding_part`` /
  ``pp_loss_part``: :func:`gpuplan.parallel.layout.part_layers`), the busiest stage is the one whose
  layers plus embedding / head take longest; with an uneven split (``pp_first_stage_layers`` /
  ``pp_last_stage_layers``) likewise over the given stages: the slowest sets the pace.
- **pipeline bubble**: ``(PP - 1) / V`` micro-batch times (``(p-1)/m`` of the ideal step for GPipe
  and 1F1B, ``(p-1)/(v m)`` interleaved with V chunks: Narayanan et al. 2021, sec. 2.2).
  DualPipe (DeepSeek-V3 report, arXiv 2412.19437, sec. 3.2.1 and Table 2; deepseek-ai/DualPipe
  README): ``(PP/2 - 1)(F&B + B - 3W)``, F&B a forward and a backward chunk overlapped (their
  compute, the communication hidden), B a chunk's backward, W its weight-gradient part (half
  the backward GEMMs: :attr:`MicroCost.wgrad_s`); each rank holds stages ``i`` and
  ``PP - 1 - i`` (parameters 2x, so the pair's mean sets the pace), and the EP all-to-all and
  the pipeline sends run beside the paired chunk's compute ("both all-to-all and PP
  communication can be fully hidden during execution", sec. 3.2.1): exposed only what
  outlasts that compute (the report's node-limited routing, which trims the IB volume, is not
  modelled).
- **MTP** (``mtp_layers``, DeepSeek-V3 sec. 2.2; Megatron-Core's ``--mtp-num-layers``): each
  depth one more layer (the mean layer's time) and the head and loss once more on the last
  stage; its parameters (:func:`gpuplan.parallel.mtp_params`) in the stage's gradients and
  optimizer step.
- **TP collectives**: per layer two all-reduces in forward, two in backward (and two more when full
  checkpointing recomputes the forward) of ``b x s/CP x hidden`` activations (Megatron-LM, Shoeybi
  et al. 2019, fig. 4); with sequence parallelism each becomes an all-gather + reduce-scatter pair
  of the same volume (Korthikanti et al. 2022, sec. 4.2.2); distributed checkpoints add one
  all-gather of the layer input before each recompute. Exposed, unless ``tp_overlap``
  (Megatron-Core ``--tp-comm-overlap``): then hidden under the layer's matmuls, at the price
  of Transformer Engine's userbuffers itself (:func:`ub_overlap_price_s`: the ring exchanges'
  GEMMs in TP chunks, their reduce kernels, each reduce-scatter's last chunk); under an engine
  whose overlap is PyTorch's AsyncTP (the profile's ``tp_overlap_kind``: torchtitan) each
  collective hides under its own GEMM only (:func:`async_tp_exposed_s`).
- **CP ring**: per layer ``CP - 1`` passes of the local K and V in forward, twice that in backward
  (K, V and their gradients), overlapped with the attention kernels; what exceeds them is exposed;
  Transformer Engine's merges of the per-step outputs and gradients added to the layer
  (:func:`te_cp_merge_bytes`).
  Under PyTorch's context_parallel (the profile's ``cp_rotate`` "allgather": torchtitan) one K/V
  all-gather beside the first sub-SDPA, the fp32 K/V-gradient ring (:func:`torch_cp_exposed_s`)
  and the fp32 merges' memory traffic added to the layer (:func:`torch_cp_merge_bytes`); where
  the engine compiles the block with its attention (torchtitan under torch.compile,
  :func:`torch_cp_traced`) the ring is traced into the graph: every exchange waited for where
  it is issued, the forward merges fused.
- **EP all-to-all**: per MoE layer a dispatch and a combine of ``b x s/CP x top-k x hidden``
  activations in forward and in backward (and in the recompute), exposed; under the job's
  ``hybridep`` dispatcher inside an NVL72 rack, HybridEP's measured GB200 exchange instead
  (each token once per destination rank, :func:`hybridep_exchange_s`).
- **pipeline p2p**: each micro-batch sends its activations forward and receives their gradients
  back once per model chunk (``/ TP`` with sequence parallelism, Megatron's scatter-gather),
  exposed (blocking sends); under an engine that overlaps them on an interleaved schedule (the
  profile's ``p2p_overlap``: Megatron-LM's --overlap-p2p-communication) the steady state's
  sends run beside the next chunk's compute, exposed only where longer; under the batch-level
  EP overlap each merged forward-and-backward iteration posts its sends last and waits one hop
  (:func:`interleaved_p2p_exposed_s`).
- **data parallel**: the stage's gradients all-reduced (ZeRO 0-2; 1 and 2 reduce-scatter then
  all-gather the same bytes) or reduce-scattered and the weights gathered twice (ZeRO-3: 1.5x)
  over the DP x CP group, overlapped with the last micro-batch's backward (ZeRO-3: with the whole
  step); never less than the last 25 MiB bucket. Under an engine whose pipeline stage reduces
  only after its last backward (the profile's ``pp_grad_reduce``: torch.distributed.pipelining
  under torchtitan) the ZeRO-1/2 reduce-scatter of the last chunk runs beside nothing
  (:func:`pipeline_reduce_exposed_s`) and each micro-batch's gradient is accumulated unsharded
  in FSDP2's reduce dtype in its backward (:func:`pipeline_accumulate_bytes`). Then the
  optimizer step on the GPU's shard, as the job runs it (``optimizer_s``:
  :func:`~.step.optimizer_stretch_s`; one fused pass when not given, as the cluster search
  times every layout).

The collectives' times are NCCL's (:func:`~gpuplan.hardware.topology.collective_time`) at the
achievable share ``Efficiency.comm`` of each link.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Callable

from .._record import record
from ..engines.profiles import get_engine, resolve_engine
from ..fp8 import (NARROW_RECIPES, cast_bytes_per_element, columnwise_bytes_per_element,
                   gathers_rowwise_only)
from ..engines.zero3 import (MAX_LIVE, PREFETCH_BUCKET, SERIAL_GATHER_BUS_BPS,
                              deepspeed_gathered)
from ..hardware.topology import Topology, collective_time
from ..job import Job, part_layers, pp_chunks
from ..models._types import Architecture, Model
from ..parallel.layout import (Layout, mtp_active_params, mtp_params, mtp_rank_params,
                               tp_shape)
from ..parallel.moe_ep import ep_exchange
from .device import Device, Efficiency
from .graphs import graphed_ops
from .efficiency import constant, gemm_wave_efficiency, overlap_sm_share, resolve_runtime
from .flops import backward_ops, mtp_projection_ops, optimizer_op, recompute_ops
from .time import time_ops
from .step import (NORM_FED_LINEARS, STEP_LEVEL_OPS, PrecisionLayout, StepSpec, build_steps,
                   narrow_recompute_op, narrow_weights_gathered, qkv_shares)

__all__ = ["Layout", "MicroCost", "LayoutTime", "shard_arch", "micro_cost", "micro_costs",
           "lora_rank_tensors", "layout_time", "zero1_sync_gather_exposed_s",
           "shared_overlap_hidden_s", "fsdp_edge_share", "ep_all_to_all_s", "hybridep_applies",
           "hybridep_rows", "hybridep_exchange_s", "HYBRIDEP_GB200", "deepep_internode_applies",
           "deepep_nodes_reached", "deepep_internode_exchange_s", "DEEPEP_INTERNODE_H800",
           "HYBRIDEP_INTERNODE_H100", "hybridep_internode_applies", "internode_exchange_s",
           "async_tp_exposed_s", "torch_cp_exposed_s", "torch_cp_merge_bytes", "torch_cp_traced",
           "sdpa_kv_heads", "fsdp2_copy_bytes", "fsdp1_grad_cat_bytes", "pipeline_accumulate_bytes",
           "pipeline_reduce_exposed_s", "sharded_copy_bytes", "TP_GEMMS", "delayed_amax_reduce_s",
           "DELAYED_AMAXES", "moe_host_sync", "synced_forward_s", "model_flops_per_token",
           "zero3_gathers", "BUCKET_BYTES", "mtp_flops_per_token", "dualpipe_bubble_s",
           "ep_overlap_exposed_s", "ep_overlap_sm_share", "EP_DISPATCHER_SMS", "nccl_sm_share",
           "job_micro_options", "engine_layout_options", "tp_collectives_s", "fsdp2_reduce_width",
           "ub_split_s", "ub_overlap_price_s", "te_cp_merge_bytes", "UB_RING_DGRAD",
           "UB_RING_RS_RECIPES", "UB_PIPELINE_SPLITS", "UB_PIPELINE_SMS"]

#: Gradient bucket whose reduction cannot overlap anything (PyTorch DDP's 25 MiB).
BUCKET_BYTES = 25 * 1024 * 1024


def shard_arch(arch: Architecture, tp: int) -> Architecture:
    """One tensor-parallel rank's share of the blocks: heads, KV heads (replicated when fewer
    than TP), FFN and expert widths and the vocabulary divided by TP; hidden size whole."""
    if tp == 1:
        return arch
    kv = arch.num_kv_heads // tp if arch.num_kv_heads % tp == 0 else 1
    return replace(
        arch, num_heads=arch.num_heads // tp, num_kv_heads=kv,
        intermediate_size=math.ceil(arch.intermediate_size / tp),
        moe_intermediate_size=math.ceil(arch.moe_intermediate_size / tp),
        shared_expert_intermediate_size=math.ceil(arch.shared_expert_intermediate_size / tp),
        vocab_size=math.ceil(arch.vocab_size / tp) if arch.vocab_size else arch.vocab_size,
        tensors=())


def lora_rank_tensors(arch: Architecture, tp: int,
                      lora: tuple[int, tuple[str, ...] | None] | None) -> tuple:
    """The block tensors one TP rank holds (:func:`~gpuplan.parallel.tp_shape`: a
    column-parallel linear's output, a row-parallel one's input over TP), from which the step
    picks the linears LoRA adapts (:func:`~.step.adapted_linears`) and times their adapters at
    the rank's width; () without LoRA or without the model's tensor list (the adapters then
    untimed, as before). Megatron-Core's LoRA (NeMo's ParallelLinearAdapter, NVIDIA/NeMo@
    579983fb nemo/collections/nlp/modules/common/megatron/adapters/parallel_adapters.py) splits
    the adapter as its base: beside a column-parallel linear, A (hidden x r) column-parallel with
    its r outputs gathered and B (r x out / TP) column-parallel; beside a row-parallel one, A
    (in / TP x r) row-parallel and B whole. Timed here with A's r whole on every rank (the
    gather of T x r not charged): an upper bound of r x (hidden - hidden / TP) x T MACs."""
    if not lora or not arch.tensors:
        return ()
    return tuple(replace(t, shape=tp_shape(t, arch, tp)) for t in arch.tensors
                 if t.component not in ("embeddings", "head"))


@record
class MicroCost:
    """One micro-batch on one tensor-parallel rank, split into per-layer and the rest."""

    layers: int
    layer_fwd_s: float
    """One layer's forward (kernels + launches), averaged over the layers."""
    layer_bwd_s: float
    """One layer's backward and recompute."""
    attn_fwd_s: float
    """One layer's attention kernels in forward (the CP ring's overlap window)."""
    attn_bwd_s: float
    other_s: float
    """Embedding, final norm, head and loss, forward and backward."""
    hardware_flops: float
    """Counted matmul FLOPs of the micro-batch over all layers, recompute included."""
    embedding_s: float = 0.0
    """The embedding's share of ``other_s`` (the first stage's; the rest is the last's)."""
    tp_gemm_fwd_s: tuple[float, ...] = ()
    """One layer's forward GEMMs beside each TP collective, in the order the collectives run
    (:data:`TP_GEMMS`: QKV after the input's all-gather, the attention output before its
    reduce-scatter, the MLP's up/gate-up after the all-gather, its down before the
    reduce-scatter): AsyncTP's overlap windows."""
    tp_gemm_bwd_s: tuple[float, ...] = ()
    """The same GEMMs' input-gradient (dgrad) half of their backward, averaged over the layers."""
    wgrad_s: float = 0.0
    """One layer's weight-gradient GEMMs (half of its backward matmuls' time: dgrad and wgrad
    are two GEMMs of the forward's FLOPs), averaged over the layers: DualPipe's W."""
    edge_layers: int = 0
    """Blocks kept BF16 at each end under a narrow recipe (``first_last_layers_bf16``): the
    per-layer times above average them in; a pipeline stage that holds them runs them wide."""
    wide_layer_s: float = 0.0
    """One such block's forward and backward (recompute included); 0 when none."""
    step_cast_s: float = 0.0
    """The narrow recipe's weight casts of one step over all the layers, once per step, not per
    micro-batch: Transformer Engine casts a linear's weights in the first micro-batch
    (``is_first_microbatch``) and reuses the cast copies in the rest, Megatron-Core setting the
    flag once per step (megatron/core/extensions/transformer_engine.py TELinear /
    TEGroupedLinear ``forward``, pipeline_parallel/schedules.py ``forward_step``'s
    ``set_is_first_microbatch``, NVIDIA/Megatron-LM@d98e8a64); 0 under a wide recipe."""
    amax_reduces: float = 0.0
    """One layer's blocking amax all-reduces over the TP group per micro-batch under a recipe
    that takes each tensor's own scale (:attr:`gpuplan.fp8.NarrowRecipe.reduces_amax_over_tp`):
    the column-parallel GEMMs' inputs (QKV, MLP up) in the forward and in a recompute, the
    row-parallel GEMMs' output gradients (attention out, MLP down) in the backward
    (:func:`amax_reduces_per_layer`); charged only under sequence parallelism with TP > 1."""
    narrow_linears: float = 0.0
    """One layer's narrow linear GEMMs (forward instances, averaged over the layers): the
    amaxes a stage registers under delayed scaling (:func:`delayed_amax_reduce_s`); 0 under a
    wide recipe."""
    cp_traced: bool = False
    """The CP ring runs inside the compiled block (:func:`torch_cp_traced`): its exchanges are
    waited for where they are issued (:func:`torch_cp_exposed_s`) and its forward merges are
    fused (:func:`torch_cp_merge_bytes`)."""
    sp_quantize_s: float = 0.0
    """The change of one layer's forward time (negative: a saving) when sequence parallelism
    shards the tensors that are all-gathered before a GEMM: Transformer Engine quantizes them on
    the rank's sequence shard and gathers them narrow (:func:`sp_quantize_s`); applied where
    the layout runs sequence parallelism with TP > 1."""
    shared_parts_s: tuple[float, ...] = ()
    """One layer's shared-expert kernels, averaged over the layers, in the four stretches
    Megatron's ``moe_shared_expert_overlap`` runs beside an all-to-all: the first linear and
    its activation forward (beside the dispatch), the second linear forward (the combine), and
    the same two backward (:func:`shared_overlap_hidden_s`); () for a model without one."""
    ub_split_s: float = 0.0
    """One layer's added GEMM time when Transformer Engine's userbuffers overlap runs the TP
    GEMMs as ring exchanges (:func:`ub_split_s`): each such GEMM launched as TP chunks of
    ``tokens / TP`` rows, every chunk tiling and waving over the SMs on its own; charged only
    under a userbuffers TP overlap with sequence parallelism and TP > 1."""
    ub_pipeline_rs: bool = False
    """The row-parallel GEMMs' forward reduce-scatters run TE's default ``pipeline`` method
    (a wide recipe: :data:`UB_PIPELINE_SPLITS`), not the ring exchange of Megatron-Bridge's FP8
    configs: the last of its chunks' reduce-scatters is what stays exposed."""
    mtp_proj_s: float = 0.0
    """One multi-token-prediction module's work around its block, forward and backward: the two
    RMSNorms, the concatenation and the ``2H -> H`` projection (:func:`~.flops.mtp_projection_ops`);
    charged per MTP depth on the last pipeline stage, 0 for a model without an MTP layer."""

    def stage_casts_s(self, indices: tuple[int, ...] | list[int], extra: int = 0) -> float:
        """The weight casts of the blocks ``indices`` and ``extra`` more narrow blocks (a
        stage's MTP modules) once: :attr:`step_cast_s` over the narrow blocks, each narrow block
        its share (the BF16 edge blocks none)."""
        e = self.edge_layers if self.layers > 2 * self.edge_layers else 0
        narrow = sum(1 for i in indices if e <= i < self.layers - e) + max(0, extra)
        return self.step_cast_s * min(1.0, narrow / max(1, self.layers - 2 * e))

    @property
    def layer_s(self) -> float:
        return self.layer_fwd_s + self.layer_bwd_s

    def stage_layers_s(self, indices: tuple[int, ...] | list[int]) -> float:
        """Forward and backward of the layers ``indices`` (0-based over :attr:`layers`): the
        mean layer each, but the BF16 edge blocks among them wide and the rest narrow."""
        n = len(indices)
        e = self.edge_layers
        if not e or self.layers <= 2 * e:
            return n * self.layer_s
        wide = sum(1 for i in indices if i < e or i >= self.layers - e)
        narrow = (self.layers * self.layer_s - 2 * e * self.wide_layer_s) / (self.layers - 2 * e)
        return (n - wide) * narrow + wide * self.wide_layer_s


def micro_cost(arch: Architecture, device: Device, eff: Efficiency, prec: PrecisionLayout, *,
               tp: int, cp: int, batch: int, seq: int, checkpointing: str,
               attention: str, runtime: str = "auto", ep: int = 1,
               selective: str = "attention", bf16_edge_layers: int = 0,
               moe_sync: bool = False, engine: str = "transformers",
               capacity_factor: float | None = None,
               model_code: str | None = None,
               recompute_modules: tuple[str, ...] | None = None,
               dispatcher: str = "alltoall", repeat_kv: bool | None = None,
               cuda_graph_scope: tuple[str, ...] | None = None,
               weights_gathered: bool = False,
               lora: tuple[int, tuple[str, ...] | None] | None = None) -> MicroCost:
    """The roofline time of one micro-batch of ``batch`` sequences (``seq / cp`` tokens each) on
    one TP rank, with the attention work scaled to the whole sequence, as ``runtime`` runs it;
    its experts spread over ``ep`` ranks (each expert's GEMM at the tokens of all of them);
    ``selective``: the engine's selective-checkpointing policy (:func:`~.flops.recompute_ops`);
    ``moe_sync``: the host waits for the device once per MoE layer's forward
    (:func:`moe_host_sync`, :func:`synced_forward_s`); ``recompute_modules``: what selective
    checkpointing recomputes where Megatron-Core's modules are named (:data:`~.flops.MODULE_OPS`);
    ``repeat_kv``: the SDPA gets K and V at the query heads (:func:`sdpa_kv_heads`; None: the
    engine's); ``weights_gathered``: the narrow weights arrive cast, no compute-stream cast of
    them (:func:`~.step.narrow_weights_gathered`)."""
    return micro_costs(arch, device, eff, prec, tp=tp, cp=cp, batch=batch, seq=seq,
                       attention=attention, runtime=runtime, ep=ep,
                       selective=selective, bf16_edge_layers=bf16_edge_layers,
                       moe_sync=moe_sync, engine=engine,
                       capacity_factor=capacity_factor, model_code=model_code,
                       recompute_modules=recompute_modules, dispatcher=dispatcher,
                       repeat_kv=repeat_kv, cuda_graph_scope=cuda_graph_scope,
                       weights_gathered=weights_gathered, lora=lora)[checkpointing]


def micro_costs(arch: Architecture, device: Device, eff: Efficiency, prec: PrecisionLayout, *,
                tp: int, cp: int, batch: int, seq: int, attention: str,
                runtime: str = "auto", ep: int = 1,
                selective: str = "attention", bf16_edge_layers: int = 0,
                moe_sync: bool = False, engine: str = "transformers",
                capacity_factor: float | None = None,
                model_code: str | None = None,
                recompute_modules: tuple[str, ...] | None = None,
                dispatcher: str = "alltoall",
                repeat_kv: bool | None = None,
                cuda_graph_scope: tuple[str, ...] | None = None,
                weights_gathered: bool = False,
                lora: tuple[int, tuple[str, ...] | None] | None = None) -> dict[str, MicroCost]:
    """:func:`micro_cost` for every checkpointing level from one build (the levels differ only by
    the recomputed forward ops). ``bf16_edge_layers``: blocks kept BF16 at each end under a
    narrow recipe, averaged over the layers. ``lora``: (rank, targets) of LoRA adapters on a
    frozen base (:func:`lora_rank_tensors`): no weight gradients, the adapters' passes on the
    rank's share of each adapted linear; None: full training.
    ``moe_sync``: each MoE layer's forward is timed from a drained queue
    (:func:`synced_forward_s`) rather than paced with the rest of the step. ``engine``: the
    job's engine, whose code the micro-batch runs (its kernels, its experts' form, its loop);
    ``model_code``: the job's model code where not the engine's (None: the engine's). With edge
    blocks the costs also carry one wide block's time (:attr:`MicroCost.wide_layer_s`,
    from a second build without them), so a pipeline stage that holds them is timed apart."""
    kw = dict(tp=tp, cp=cp, batch=batch, seq=seq, attention=attention, runtime=runtime, ep=ep,
              selective=selective, moe_sync=moe_sync, engine=engine,
              capacity_factor=capacity_factor, model_code=model_code,
              recompute_modules=recompute_modules, dispatcher=dispatcher, repeat_kv=repeat_kv,
              cuda_graph_scope=cuda_graph_scope, weights_gathered=weights_gathered, lora=lora)
    out = _micro_costs(arch, device, eff, prec, bf16_edge_layers=bf16_edge_layers, **kw)
    edge = min(bf16_edge_layers, arch.num_layers // 2)
    if edge <= 0:
        return out
    narrow = _micro_costs(arch, device, eff, prec, **kw)
    if narrow["none"].layer_s == out["none"].layer_s:
        return out  # no block kept wide (a wide recipe: the same step)
    n = arch.num_layers
    # the mean is ((n - 2e) narrow + 2e wide) / n: one wide block from the two builds
    return {k: replace(c, edge_layers=edge, wide_layer_s=narrow[k].layer_s
                       + (c.layer_s - narrow[k].layer_s) * n / (2 * edge))
            for k, c in out.items()}


def _layer_spec(batch: int, seq: int, attention: str, runtime: str, engine: str,
                model_code: str | None,
                lora: tuple[int, tuple[str, ...] | None] | None) -> StepSpec:
    """One TP rank's micro-batch as a single-device training step (LoRA's rank and targets
    where ``lora``)."""
    job = Job(model="layout", mode="train", batch=batch, seq=seq, attention=attention,
              runtime=runtime, engine=engine, model_code=model_code,
              lora_rank=lora[0] if lora else None, lora_targets=lora[1] if lora else None)
    return StepSpec.of(job, mode="train", seq=seq, new_tokens=1, trainable=None,
                       single_device=True)


def _micro_costs(arch: Architecture, device: Device, eff: Efficiency, prec: PrecisionLayout, *,
                 tp: int, cp: int, batch: int, seq: int, attention: str, runtime: str, ep: int,
                 selective: str, moe_sync: bool, engine: str, capacity_factor: float | None,
                 model_code: str | None, recompute_modules: tuple[str, ...] | None = None,
                 bf16_edge_layers: int = 0, dispatcher: str = "alltoall",
                 repeat_kv: bool | None = None, weights_gathered: bool = False,
                 cuda_graph_scope: tuple[str, ...] | None = None,
                 lora: tuple[int, tuple[str, ...] | None] | None = None) -> dict[str, MicroCost]:
    """:func:`micro_costs` from one build, the edge blocks averaged in; the scoped CUDA
    graphs' host issue (:func:`~.graphs.graphed_ops`) on the layers' ops and their recompute."""
    spec = replace(_layer_spec(batch, seq // cp, attention, runtime, engine, model_code, lora),
                   ep=ep, bf16_edge_layers=bf16_edge_layers,
                   moe_capacity_factor=capacity_factor, moe_dispatcher=dispatcher,
                   sdpa_repeat_kv=repeat_kv, narrow_weights_gathered=weights_gathered)
    step, _, _, _ = build_steps(shard_arch(arch, tp), 0, lora_rank_tensors(arch, tp, lora),
                                device, eff, prec, spec)
    narrow = NARROW_RECIPES.get(prec.name)
    casts, raw = _step_casts([t for t in step.ops if t.op.group != "optimizer"], narrow)
    ops = graphed_ops(raw, cuda_graph_scope, step.overheads, dispatcher)
    wide = prec.name not in UB_RING_RS_RECIPES  # TE's default pipeline reduce-scatters
    # the blocks' forward: the step-level casts count their own passes (STEP_LEVEL_OPS)
    fwd = tuple(t.op for t in raw if t.op.phase == "forward" and t.op.name not in STEP_LEVEL_OPS)
    out = {}
    gap = step.launch_s if step.overheads is None else step.overheads.device_gap_s
    cast_s = sum(t.total_s + t.op.kernels * t.op.count * gap for t in casts)
    proj_s = _mtp_proj_s(arch, batch * (seq // cp), device, eff, prec, gap)
    sp_s = sp_quantize_s(ops, arch.num_layers, prec, tp, device.architecture,  # every level's
                         device.compute_capability)
    for level in ("none", "selective", "full"):
        again = narrow and narrow_recompute_op(fwd, narrow, level, selective, prec.act)
        extra = time_ops((*recompute_ops(fwd, level, attention, policy=selective,
                                         qkv_shares=qkv_shares(arch),
                                         modules=recompute_modules), *([again] if again else [])),
                         device, eff, prec.dtype)
        # a recompute inside the graphed scope replays with the backward's graph
        every = graphed_ops([*raw, *extra], cuda_graph_scope, step.overheads, dispatcher)
        synced = moe_sync and step.overheads is not None and _moe_layers(arch) > 0
        waits = MOE_HOST_SYNCS.get(dispatcher, (1, 0)) if synced else (0, 0)
        # with a sync per MoE layer the layers' forward (and, with one in the backward too,
        # their backward) is timed apart: the pace of the rest
        paced = [t for t in every if not (synced and _layer_forward(t))
                 and not (waits[1] and _layer_backward(t))]
        pace = 1.0
        if step.overheads is not None:  # the host issues ahead: the slower of the two sets it
            device_s = step._device_s(paced)
            pace = max(1.0, step._host_s(paced) / device_s) if device_s > 0 else 1.0
        cost = _cost_of(every, arch.num_layers, cp, gap, pace)
        if synced:
            cost = _synced_layer_cost(cost, ops, every, step, arch, cp, pace, waits)
        if cp > 1:
            cost = _with_cp_merges(cost, level, shard_arch(arch, tp), batch, seq // cp, cp,
                                   prec, engine, device.memory_bandwidth * eff.memory,
                                   repeat_kv, traced=torch_cp_traced(engine, runtime))
        out[level] = replace(cost, mtp_proj_s=proj_s, step_cast_s=cast_s, ub_pipeline_rs=wide,
                             ub_split_s=ub_split_s(every, arch.num_layers, tp, device, eff,
                                                   prec.act, pipeline_rs=wide),
                             amax_reduces=amax_reduces_per_layer(every, arch.num_layers, prec),
                             narrow_linears=_narrow_linears_per_layer(fwd, arch.num_layers, narrow),
                             sp_quantize_s=sp_s)
    return out


#: The TP GEMMs Transformer Engine's userbuffers overlap runs as a ring exchange in the
#: backward (their input gradient's GEMM over the all-gathered output gradient, TP chunks):
#: ``proj_dgrad`` and ``fc2_dgrad`` are RingExchangeOverlapCfg in every Megatron-Bridge
#: TransformerLayerTPOverlapCfg the dense Llama recipes pick (src/megatron/bridge/training/
#: comm_overlap.py, e.g. userbuffers_fp8_h100_h16384_tp8_cp2_mbs1_seqlen8192,
#: NVIDIA-NeMo/Megatron-Bridge@df0289c1); QKV's and the MLP up's dgrad / wgrad are bulk
#: overlaps (one whole GEMM beside the collective). In the forward all four run as ring
#: exchanges (qkv_fprop, fc1_fprop: all-gather; proj_fprop, fc2_fprop: reduce-scatter) in the
#: FP8 configs.
UB_RING_DGRAD = ("attn.out", "mlp.down")

#: Transformer Engine's default userbuffers config of a method (``initialize_ub``'s
#: ``get_default_config``, transformer_engine/pytorch/module/base.py, NVIDIA/
#: TransformerEngine@bf4b2b9f): proj_fprop and fc2_fprop run the ``pipeline`` method, the GEMM
#: in 4 launches over its output columns on all but 16 SMs (``set_sm_margin``: cuBLAS gets
#: ``sm_count - num_sm``), each chunk reduce-scattered by a userbuffers kernel on those 16 as
#: the next computes. Megatron-LM's --tp-comm-overlap without a config file takes these, as do
#: the BF16 Megatron-Bridge configs (num_sm 8-32 per GEMM: approximated by the default 16);
#: Megatron-Bridge's FP8 configs set both to RingExchangeOverlapCfg (:func:`ub_split_s`).
UB_PIPELINE_SPLITS = 4
UB_PIPELINE_SMS = 16

#: The recipes whose userbuffers configs ring-exchange proj_fprop and fc2_fprop: Megatron-
#: Bridge picks its ``userbuffers_fp8_*`` TransformerLayerTPOverlapCfg for FP8-CS and FP8-MX
#: (scripts/performance/configs/llama/llama3_llm_pretrain.py, llama31_llm_pretrain.py @df0289c1;
#: NVFP4 the same config, though its performance scripts turn the overlap off). Every other
#: recipe runs the ``pipeline`` method: TE's default, Megatron-Bridge's BF16 configs, and the
#: NeMo 24.07 launcher's H100 FP8 configs of its delayed-scaling era (launcher_scripts/conf/
#: training/tp_overlap/ub_cfg_h100_h8192_tp4_mbs1_seqlen4096.yaml and _seqlen8192.yaml,
#: NVIDIA/NeMo-Framework-Launcher tag 24.07 = 8325688d: proj_fprop pipeline num_sm 24,
#: fc2_fprop pipeline num_sm 16, num_splits 4, set_sm_margin 1).
UB_RING_RS_RECIPES = ("fp8-current", "mxfp8", "nvfp4")


def ub_split_s(ops: list, layers: int, tp: int, device: Device, eff: Efficiency,
               act: int, pipeline_rs: bool = False) -> float:
    """One layer's added kernel time when the TP GEMMs run as userbuffers ring exchanges.
    Transformer Engine's CommOverlapP2PBase::split_overlap_ag / split_overlap_rs
    (transformer_engine/common/comm_gemm_overlap/comm_gemm_overlap.cpp, NVIDIA/
    TransformerEngine@815bf369; aggregate False, as Megatron-Bridge's configs set it) launch one
    cuBLAS GEMM per TP rank's chunk of ``tokens / TP`` rows, so each chunk tiles and waves over
    the SMs on its own (:func:`~.efficiency.gemm_wave_efficiency`): a chunk's output of fewer
    tiles leaves more of its last wave idle. Forward (and recompute): the four TP GEMMs; backward:
    the dgrad half of :data:`UB_RING_DGRAD` (its output is the forward's K wide). Compute-bound
    time only: ``compute x (eff(M) / eff(M / TP) - 1)``, no more than what the chunks add over
    the op's roofline time. A reduce-scatter's ring (the attention out and MLP down GEMMs in the
    forward) then sums the TP chunks it received into the rank's shard on the main stream
    (``reduce_bf16``: reads ``TP`` chunks of ``M / TP x N`` at ``act`` bytes, writes one).
    ``pipeline_rs``: those two run TE's default ``pipeline`` method instead
    (:data:`UB_PIPELINE_SPLITS` launches of ``N / 4`` on ``sm_count - UB_PIPELINE_SMS`` SMs;
    no reduce kernel)."""
    if tp <= 1 or device.sm_count <= 0:
        return 0.0
    extra = 0.0
    rate = device.memory_bandwidth * eff.memory
    for t in ops:
        op = t.op
        if op.kind != "matmul" or op.name not in TP_GEMMS or not op.shape or op.groups > 1:
            continue
        b, m, k, n = op.shape
        chunk = max(1, m // tp)
        if op.phase == "backward":
            if op.name not in UB_RING_DGRAD:
                continue
            compute, memory, n, k = t.compute_s / 2, t.memory_s / 2, k, n  # dgrad: M x K out
        else:
            compute, memory = t.compute_s, t.memory_s
            if op.name in UB_RING_DGRAD and pipeline_rs and device.sm_count > UB_PIPELINE_SMS:
                sms = device.sm_count - UB_PIPELINE_SMS
                whole = gemm_wave_efficiency(b, m, n, device.sm_count, k)
                split = gemm_wave_efficiency(b, m, max(1, n // UB_PIPELINE_SPLITS), sms, k)
                slow = compute * whole / split * device.sm_count / sms
                extra += max(0.0, max(slow, memory) - max(compute, memory)) * op.count
                continue
            if op.name in UB_RING_DGRAD and rate > 0:  # the row-parallel GEMM's reduce-scatter
                extra += (tp + 1) * b * chunk * n * act / rate * op.count
        whole = gemm_wave_efficiency(b, m, n, device.sm_count, k)
        split = gemm_wave_efficiency(b, chunk, n, device.sm_count, k)
        extra += max(0.0, max(compute * whole / split, memory) - max(compute, memory)) * op.count
    return extra / max(1, layers)


def _synced_layer_cost(cost: MicroCost, ops: list, every: list, step: Any, arch: Architecture,
                       cp: int, pace: float, waits: tuple[int, int]) -> MicroCost:
    """``cost`` with each MoE layer's forward -- and, where its dispatcher also waits in the
    backward (``waits``: :data:`MOE_HOST_SYNCS`), its backward -- timed from a drained queue
    (:func:`synced_forward_s`), one :data:`~.efficiency.CONSTANTS` ``host_sync_s`` a wait; the
    other layers as paced alone. The backward's recompute stays paced with the rest."""
    layers = arch.num_layers
    moe = _moe_layers(arch) / layers
    fwd_ops = [t for t in ops if _layer_forward(t)]
    free = cost.layer_fwd_s / pace  # the layers' forward paced alone would be
    free = max(free, step._host_s(fwd_ops) / layers)
    one = synced_forward_s(_issue_order(fwd_ops, step, layers, cp))
    cost = replace(cost, layer_fwd_s=moe * (one + waits[0] * constant("host_sync_s"))
                   + (1 - moe) * free)
    if not waits[1]:
        return cost
    bwd_ops = [t for t in ops if _layer_backward(t)]
    gap = step.overheads.device_gap_s
    again = sum((t.total_s * (cp if t.op.kind == "attention" else 1)
                 + t.op.kernels * t.op.count * gap) * pace
                for t in every if t.op.phase == "recompute"
                and t.op.group not in ("embedding", "head")) / layers
    free_b = max(step._device_s(bwd_ops), step._host_s(bwd_ops)) / layers
    one_b = synced_forward_s(_issue_order(bwd_ops, step, layers, cp, backward=True))
    return replace(cost, layer_bwd_s=again + moe * (one_b + waits[1] * constant("host_sync_s"))
                   + (1 - moe) * free_b)


def _step_casts(ops: list, narrow) -> tuple[list, list]:
    """(the weight casts charged once a step, the rest) of one micro-batch's timed ops: the
    casts come once per step where the recipe caches its narrow weights (TE's first
    micro-batch), in every micro-batch's forward and backward where not (torchao)."""
    once = narrow is not None and narrow.caches_weight
    casts = [t for t in ops if once and t.op.name == "fp8.weight_cast"]
    return casts, [t for t in ops if not (once and t.op.name == "fp8.weight_cast")]


def sp_quantize_s(ops: list, layers: int, prec: PrecisionLayout, tp: int,
                  architecture: str, compute_capability: str = "") -> float:
    """:attr:`MicroCost.sp_quantize_s` from one micro-batch's timed ops: the micro-batch's
    ``fp8.quantize`` charges each quantized tensor whole, rowwise and columnwise
    (:func:`gpuplan.fp8.columnwise_bytes_per_element`). Under sequence parallelism the tensors
    all-gathered before a GEMM -- a column-parallel :data:`TP_GEMMS` GEMM's input, a
    row-parallel one's output gradient -- are quantized on the ``1 / tp`` sequence shard, and a
    per-tensor FP8 tensor gathered rowwise only (:func:`gpuplan.fp8.gathers_rowwise_only`) gets
    its transposed copy after the gather, an FP8 read and write (2 bytes) of the whole tensor
    where the GEMM is TN-only (Hopper, Ada, sm_120: :func:`gpuplan.fp8.non_tn_fp8_gemm`;
    Transformer Engine v2.9 layernorm_linear.py / linear.py forward and backward, @70f53666).
    The change is timed at the quantize op's own rate (its time over its bytes); 0 under a wide
    recipe, torchao's (its own tensor-parallel casts are not modelled here) or TP 1. A linear whose
    norm writes its narrow input (:func:`~.step.norm_fused_elements`) is left out: the quantize op
    already charges it only the transposed copy of the whole (gathered) tensor, made after the
    gather (Transformer Engine v1.8 layernorm_linear.py: the norm's FP8 output gathered,
    ``fp8_transpose`` of ``ln_out_total`` in the backward)."""
    recipe = NARROW_RECIPES.get(prec.name)
    quant = [t for t in ops if t.op.name == "fp8.quantize" and t.op.bytes > 0]
    if (recipe is None or tp <= 1 or not quant or layers <= 0
            or not recipe.implementation.startswith("te.")):
        return 0.0
    names = {t.op.name for t in ops}
    fused = {n for n, norm in NORM_FED_LINEARS.items()
             if recipe.fused_norm_cast and norm in names}
    gathered = 0
    for t in ops:
        o = t.op
        if (o.kind == "matmul" and not o.wide and o.name in TP_GEMMS and o.shape
                and o.phase == "forward" and o.name not in fused):
            col = TP_GEMMS[o.name] % 2 == 0  # its input gathered; else its output gradient
            gathered += o.shape[0] * o.shape[1] * (o.shape[2] if col else o.shape[3]) * o.count
    row = cast_bytes_per_element(recipe)
    col = columnwise_bytes_per_element(recipe, architecture, compute_capability)
    whole = row + col
    if gathers_rowwise_only(recipe):
        transpose = 2.0 if col else 0.0
        sharded = row / tp + transpose
    else:
        sharded = whole / tp
    rate = sum(t.op.bytes for t in quant) / sum(t.total_s for t in quant)
    return gathered * (sharded - whole) / rate / layers


def amax_reduces_per_layer(ops: list, layers: int, prec: PrecisionLayout) -> float:
    """The amax all-reduces of one micro-batch per layer (:attr:`MicroCost.amax_reduces`): each
    narrow :data:`TP_GEMMS` GEMM whose quantized tensor is a sequence shard all-gathered before
    it -- a column-parallel GEMM's input in the forward (and again in its recompute), a
    row-parallel GEMM's output gradient in the backward (Transformer Engine sets the TP group
    as the amax reduction group of exactly those two quantizers; the sourced detail is at
    :attr:`gpuplan.fp8.NarrowRecipe.reduces_amax_over_tp`); 0 where the recipe reduces none."""
    recipe = NARROW_RECIPES.get(prec.name)
    if recipe is None or not recipe.reduces_amax_over_tp or layers <= 0:
        return 0.0
    n = 0
    for t in ops:
        o = t.op
        if o.kind != "matmul" or o.wide or o.name not in TP_GEMMS:
            continue
        gathered_input = TP_GEMMS[o.name] % 2 == 0  # after the all-gather: column-parallel
        if gathered_input == (o.phase in ("forward", "recompute")):
            n += o.count
    return n / layers


def _narrow_linears_per_layer(fwd: tuple, layers: int, recipe) -> float:
    """:attr:`MicroCost.narrow_linears`: the forward's narrow linear GEMM instances (the blocks'
    weighted matmuls, not the embedding, the head or a block kept BF16) over ``layers``."""
    if recipe is None or layers <= 0:
        return 0.0
    return sum(o.count for o in fwd if o.kind == "matmul" and o.weight_elements and o.shape
               and o.group not in ("embedding", "head") and not o.wide) / layers


#: fp32 amaxes Transformer Engine keeps per GEMM under delayed scaling, forward (input, weight,
#: output) and backward (output gradient, input gradient): ``num_fp8_tensors`` =
#: ``num_gemms * 3`` / ``* 2`` (NVIDIA/TransformerEngine@v1.8 transformer_engine/pytorch/module/
#: base.py ``set_meta_tensor``).
DELAYED_AMAXES = (3, 2)


def delayed_amax_reduce_s(cost: "MicroCost", lay: Layout, topo: Topology, eff: Efficiency,
                          prec: PrecisionLayout, stage_layers: int) -> float:
    """One micro-batch's blocking amax all-reduces on a stage under delayed scaling
    (:attr:`gpuplan.fp8.NarrowRecipe.reduces_amax_per_region`): each of the stage's model
    chunks is one ``fp8_autocast`` region, reduced at its forward's exit and once in its
    backward, over the TP x CP ranks (Megatron-Core core_r0.8.0's amax group; later versions'
    data-parallel ranks not charged), each reduction carrying every amax the stage registered
    under the recipe (:data:`DELAYED_AMAXES` per narrow GEMM, fp32). On the compute stream,
    so exposed. The concatenation and the bulk history update (two launches a reduction, a
    few microseconds) are not timed. 0 under another recipe or where TP x CP is 1."""
    recipe = NARROW_RECIPES.get(prec.name)
    group = lay.tp * lay.cp
    if recipe is None or not recipe.reduces_amax_per_region or group <= 1:
        return 0.0
    gemms = cost.narrow_linears * stage_layers
    return lay.chunks * sum(collective_time("all-reduce", 4 * n * gemms, group, topo,
                                            efficiency=eff.comm) for n in DELAYED_AMAXES)


def _mtp_proj_s(arch: Architecture, tokens: int, device: Device, eff: Efficiency,
                prec: PrecisionLayout, gap: float) -> float:
    """One MTP module's norms, concatenation and ``2H -> H`` projection over ``tokens`` tokens,
    forward and backward, with their launches (:attr:`MicroCost.mtp_proj_s`); 0 without MTP."""
    if not arch.mtp_layers:
        return 0.0
    fwd = tuple(mtp_projection_ops(arch, tokens, prec.act, prec.weight))
    ops = (*fwd, *backward_ops(fwd, act_bytes=prec.act, grad_bytes=prec.grad))
    timed = time_ops(ops, device, eff, prec.dtype)
    return sum(t.total_s + t.op.kernels * t.op.count * gap for t in timed)


def sdpa_kv_heads(arch: Architecture, engine: str, repeat_kv: bool | None = None) -> int:
    """The K/V heads of the SDPA call under ``engine`` on a rank holding ``arch`` (a TP shard):
    the query heads where its model code repeats K and V first (the profile's
    ``sdpa_repeat_kv``: torchtitan; ``repeat_kv`` True or False says it for the job's own
    code), else the KV heads."""
    repeated = get_engine(engine).sdpa_repeat_kv if repeat_kv is None else repeat_kv
    return arch.num_heads if repeated else arch.num_kv_heads


def _with_cp_merges(cost: MicroCost, level: str, shard: Architecture, batch: int,
                    s_local: int, cp: int, prec: PrecisionLayout, engine: str,
                    rate: float, repeat_kv: bool | None = None, *,
                    traced: bool = False) -> MicroCost:
    """``cost`` with its CP ring's merge traffic at ``rate`` bytes/s: PyTorch's
    context_parallel (:func:`torch_cp_merge_bytes`, ``traced``: inside the compiled block) or
    Transformer Engine's P2P ring (:func:`te_cp_merge_bytes`), by the engine's ``cp_rotate``;
    a full recompute merges its forward again; ``repeat_kv``: as :func:`sdpa_kv_heads` takes
    it."""
    if get_engine(engine).cp_rotate == "allgather":
        f_b, b_b = torch_cp_merge_bytes(shard, batch, s_local, cp, prec.act,
                                        kv_heads=sdpa_kv_heads(shard, engine, repeat_kv),
                                        traced=traced)
    else:
        f_b, b_b = te_cp_merge_bytes(shard, batch, s_local, cp, prec.act)
        traced = False
    again = f_b if level == "full" else 0.0
    return replace(cost, layer_fwd_s=cost.layer_fwd_s + f_b / rate,
                   layer_bwd_s=cost.layer_bwd_s + (b_b + again) / rate, cp_traced=traced)


def torch_cp_traced(engine: str, runtime: str) -> bool:
    """Whether PyTorch's context-parallel ring runs inside a compiled graph under ``engine``
    at ``runtime``: torchtitan (the profile's ``cp_rotate`` "allgather") compiles each
    TransformerBlock whole, ``torch.compile(transformer_block, fullgraph=True)``
    (torchtitan@9dec370 torchtitan/parallelisms/parallelize_llama.py ``apply_compile``), so
    its SDPA -- which ``context_parallel`` replaces by the ring -- is traced with the block
    (fullgraph admits no graph break). Traced, a functional collective waits at once:
    ``_maybe_wrap_tensor`` returns ``wait_tensor(self)`` when ``_are_we_tracing()``, the
    AsyncCollectiveTensor that waits at first use being eager's only
    (torch/distributed/_functional_collectives.py, torch 2.5-2.6). Inductor moves a wait
    later only under ``reorder_for_compute_comm_overlap``, False by default
    (torch/_inductor/config.py; torchtitan@9dec370 sets only ``_micro_pipeline_tp``); its
    ``reorder_for_locality``, which sinks producers to their first user (the collective with
    its wait), runs on inference graphs only (fx_passes/post_grad.py ``post_grad_passes``:
    ``if is_inference and config.reordering``, 2024), and leaves a collective beside its wait
    either way (pytorch/pytorch#150074, #152252, 2025-04: the compiled schedule holds the
    collective and its wait together unless those passes are turned on)."""
    return (get_engine(engine).cp_rotate == "allgather"
            and resolve_runtime(runtime, "train", engine) == "compile")


def te_cp_merge_bytes(arch: Architecture, batch: int, s_local: int, cp: int,
                      act: int) -> tuple[float, float]:
    """(forward, backward) bytes one layer's Transformer Engine P2P context-parallel attention
    moves merging its ``cp`` per-step results on a rank of ``arch``'s (TP-sharded) heads,
    ``s_local`` tokens each (AttnFuncWithCPAndKVP2P, transformer_engine/pytorch/attention/
    dot_product_attention/context_parallel.py, NVIDIA/TransformerEngine@7d0365b3, bshd/sbhd
    with the causal load balance, attention not FP8). Forward: the first step's output
    rescaled into ``out`` (``flash_attn_fwd_out_correction_init``: read and write, ``2 act``
    an element), each later step's added in (``flash_attn_fwd_out_correction``: read the
    step's output and ``out``, write ``out``: ``3 act``) on every row where the step is below
    the rank's diagonal, on the second half of the rows elsewhere
    (``..._second_half_out_correction``): ``3 act (1 + (cp - i) / cp)`` for step ``i``
    averaged over the ranks, ``4.5 act (cp - 1)`` over the later steps. Backward: the same
    copy-then-add pattern for dQ over the query elements and dK, dV over the K/V elements
    (``dq.copy_`` / ``dq.add_``, ``dk``/``dv`` likewise into the buffer sent on), taken at the
    forward's average. The softmax statistics' corrections (one fp32 per row and head) are
    left out: under 1/``head_dim`` of the above."""
    q = batch * s_local * arch.num_heads * arch.head_dim
    kv = 2 * batch * s_local * arch.num_kv_heads * arch.head_dim
    per = act * (2 + 4.5 * (cp - 1))
    return q * per, (q + kv) * per


def torch_cp_merge_bytes(arch: Architecture, batch: int, s_local: int, cp: int,
                         act: int, *, kv_heads: int | None = None,
                         traced: bool = False) -> tuple[float, float]:
    """One layer's memory traffic (bytes, forward and backward) of PyTorch's context-parallel
    SDPA around its sub-SDPA calls, on the busiest CP rank (the last: every later step a full
    merge), counted from torch.distributed.tensor.experimental._attention's eager code with
    ``convert_to_f32`` on (its default). ``E`` = the rank's output elements (batch x local
    heads x ``s_local`` x head dim), ``K`` = its K and V elements.

    Forward (``_SDPAMerger``): step 0 casts the block output to fp32 (2 + 4 B/E); each later
    step casts (6), takes ``out - block_out`` (8 + 4), scales it by ``sigmoid(block_lse - lse)``
    (4 + 4) and subtracts (8 + 4): 38 B/E; ``results`` casts back (6). Backward: fp32 gradient
    accumulators zeroed (4 B/E, 4 B/K) and step 0's gradients added (2 + 4 + 4: 10 each); each
    later step adds the query gradient (10 B/E), updates the K/V gradient's first half and
    re-cats it (``_partial_update``: 5 + 8), cats it for the ring (8) and cats K and V for the
    rotater (4): 10 B/E + 25 B/K; the ends cast back to the input dtype (6 B/E, 6 B/K). ``act``
    other than 2 scales the 16-bit reads and writes.

    K and V themselves: ``_templated_ring_attention`` and its backward each begin with
    ``key.contiguous()`` / ``value.contiguous()`` (4 B/K: the ``(b, s, h, d)`` projections
    transposed to ``(b, h, s, d)`` are not contiguous), and the forward too cats K and V for
    the rotater before every step but the last (``torch.cat([key.flatten(), value.flatten()])``,
    4 B/K): ``4 cp`` B/K in forward, 4 more in backward. ``kv_heads``: the heads of the K and
    V the SDPA is called with (:func:`sdpa_kv_heads`; None: ``arch.num_kv_heads``).

    The flash backward's own passes, once per call and so ``CP - 1`` more times than one
    call over the whole sequence: ``flash_bwd_dot_do_o_kernel`` reads dO and O (4 B/E) and
    clears the fp32 dQ accumulator (4), ``flash_bwd_convert_dq_kernel`` reads it (4) and
    writes dQ (2): 14 B/E a later step (Dao-AILab/flash-attention
    csrc/flash_attn/src/flash_bwd_launch_template.h run_flash_bwd_seqk_parallel, flash_api.cpp
    mha_bwd's dq_accum; torch's bundled FlashAttention-2 is that code). The first call's are
    the whole-sequence kernel's and left to it.

    ``traced``: the ring inside the compiled block, its merges fused
    (:func:`_traced_cp_merge_bytes`)."""
    heads = arch.num_heads
    kv = arch.num_kv_heads if kv_heads is None else kv_heads
    e = batch * heads * s_local * arch.head_dim
    k = batch * 2 * kv * s_local * arch.head_dim
    r = act / 2  # the 16-bit tensors' bytes per element over 2
    fwd = (e * ((2 * r + 4) + (cp - 1) * (2 * r + 36) + (4 + 2 * r))
           + k * 4 * r * cp)  # contiguous(), then a cat before each of the cp - 1 later steps
    bwd = (e * (4 + (2 * r + 8) + (cp - 1) * ((2 * r + 8) + (6 * r + 8)) + (4 + 2 * r))
           + k * (4 * r + 4 + (2 * r + 8) + (cp - 1) * (21 + 4 * r) + (4 + 2 * r)))
    if traced:
        return _traced_cp_merge_bytes(e, k, cp, r)
    return fwd, bwd


def _traced_cp_merge_bytes(e: float, k: float, cp: int, r: float) -> tuple[float, float]:
    """:func:`torch_cp_merge_bytes` for the ring inside the compiled block
    (:func:`torch_cp_traced`), over ``e`` output and ``k`` K/V elements, ``r`` the 16-bit
    tensors' bytes over 2. Inductor fuses each later step's merge into one kernel over the
    tensors the sub-SDPA calls (extern kernels) leave between them: it reads the running ``out`` (fp32, 4 B/E) and the step's
    output (2) and writes ``out`` (4), the first reading step 0's output itself (2: its cast
    fused in) and the last writing the result in the input dtype (2: ``results``' cast fused
    in): ``(CP - 1)(8 + 2) - 4`` B/E. The K/V cats before the later steps are dead in the
    graph (the all-gather rotater's ``exchange_buffers`` reads its argument only the first
    time), so only the first one's 4 B/K stays, beside ``contiguous()``'s, in forward and in
    backward. Backward: the zeroed accumulators fold into step 0's gradients (read 2, write
    4: 6 B/E, 6 B/K); a later step's query-gradient add reads and writes what it did
    (10 B/E); its K/V-gradient update and the cat for the ring become one kernel writing the
    ring's buffer: the received gradient read (4), the step's half read (1), the buffer
    written (4): 9 B/K against eager's 21; the ends' casts and the flash backward's own
    passes as in eager."""
    fwd = e * ((cp - 1) * (8 + 2 * r) - 8 + 4 * r) + k * 8 * r
    bwd = (e * ((2 * r + 4) + (cp - 1) * ((2 * r + 8) + (6 * r + 8)) + (4 + 2 * r))
           + k * (4 * r + (2 * r + 4) + (cp - 1) * (8 + r) + 4 * r + (4 + 2 * r)))
    return fwd, bwd


def job_micro_options(job: Job, ep: int) -> dict[str, Any]:
    """The keywords :func:`micro_cost` / :func:`micro_costs` take from ``job`` (its training
    runtime, the engine's selective policy and MoE sync, the edge blocks, capacity factor, model
    code and recompute modules) at expert-parallel degree ``ep``: one place, so ``speed`` and
    the cluster search time a layout's micro-batch alike."""
    return dict(runtime=resolve_runtime(job.runtime, "train", job.engine), ep=ep,
                selective=get_engine(job.engine).selective,
                bf16_edge_layers=job.first_last_layers_bf16,
                moe_sync=moe_host_sync(resolve_engine(job.engine), ep, job.moe_capacity_factor),
                engine=job.engine, capacity_factor=job.moe_capacity_factor,
                model_code=job.model_code, recompute_modules=job.recompute_modules,
                dispatcher=job.moe_dispatcher, cuda_graph_scope=job.cuda_graph_scope,
                weights_gathered=narrow_weights_gathered(job),
                lora=None if job.lora_rank is None else (job.lora_rank, job.lora_targets))


def engine_layout_options(engine: str, precision: str | None = None) -> dict[str, Any]:
    """The engine profile's facts :func:`layout_time` reads (how it hides TP, rotates CP's K/V,
    feeds SDPA, copies FSDP2's buffers, sends between pipeline stages and, under the job's
    ``precision``, what its TP all-gathers move): one place, so ``speed`` and the cluster
    search read them alike."""
    e = get_engine(engine)
    return dict(tp_overlap_kind=e.tp_overlap_kind, cp_rotate=e.cp_rotate,
                repeat_kv=e.sdpa_repeat_kv, fsdp2_reduce_bytes=e.fsdp2_reduce_bytes,
                p2p_overlap=e.p2p_overlap, fsdp1_grad_cat=e.fsdp1_grad_cat,
                pp_grad_reduce=e.pp_grad_reduce,
                tp_gather_bytes=1.0 if precision in e.tp_narrow_gather else None)


def moe_host_sync(engine: str, ep: int, capacity_factor: float | None = None) -> bool:
    """Whether ``engine``'s MoE layer makes the host wait for the device in each forward.
    ``capacity_factor``: the job's drop-and-pad capacity (gpuplan's Megatron export writes it
    with ``--moe-pad-expert-input-to-capacity``): the padded splits are known on the host, and
    ``_maybe_dtoh_and_synchronize`` copies and waits only ``if not self.drop_and_pad`` (same
    file, lines 921-958), so no sync.

    Megatron-Core's token dispatchers need the routed token counts on the host before the
    expert-parallel exchange (its all-to-all's split sizes, Transformer Engine's GroupedLinear
    m_splits): MoEAlltoAllTokenDispatcher.preprocess sets the sync point "before_ep_alltoall"
    when EP > 1 and ``_maybe_dtoh_and_synchronize`` copies ``tokens_per_expert`` / the splits to
    the CPU and calls ``d2h_event.synchronize()`` there (megatron/core/transformer/moe/
    token_dispatcher.py lines 452-470, 586-596, 921-958 at NVIDIA/Megatron-LM@
    d98e8a64ddf34856e74b24714e3bedb2f5a39553); the flex (DeepEP / HybridEP) managers read
    ``tokens_per_expert.sum()`` on the host too unless given an upper bound (lines 1045, 1173).
    The backward reuses the splits already on the host: no sync there. Megatron-Bridge's Qwen3
    MoE recipes run the alltoall or flex dispatcher without a full-layer CUDA graph
    (src/megatron/bridge/recipes/qwen/h100/qwen3_moe.py at NVIDIA-NeMo/Megatron-Bridge@
    067f987df03b8355b03192d88d70f1709fedf51a: cuda_graph_impl "none", or graphs scoped to
    moe_router and moe_preprocess only, which end before the sync)."""
    return engine == "megatron" and ep > 1 and capacity_factor is None


def _layer_forward(t: Any) -> bool:
    return t.op.phase == "forward" and t.op.group not in ("embedding", "head")


def _layer_backward(t: Any) -> bool:
    return t.op.phase == "backward" and t.op.group not in ("embedding", "head", "optimizer")


#: Host waits per MoE layer of Megatron-Core's dropless token dispatchers, (forward, backward),
#: counted from NVIDIA/Megatron-LM@b0cc2706ddc60d2aefd5fff346445b5c013036a8 (the 26.02 pin)
#: megatron/core/transformer/moe/token_dispatcher.py and fused_a2a.py:
#:
#: * ``alltoall``: one, ``d2h_event.synchronize()`` at the sync point "before_ep_alltoall"
#:   (``_maybe_dtoh_and_synchronize``, lines 862-899: the splits and tokens_per_expert copied
#:   to the host on a side stream, waited for before the exchange); the backward's all-to-alls
#:   reuse the host splits.
#: * ``deepep``: four -- DeepEP's non-cached ``buffer.dispatch``, where "the CPU will wait for
#:   GPU's signal to arrive" (fused_a2a.py FusedDispatch.forward, the received counts as a
#:   Python list), then ``_DeepepManager._indices_to_multihot`` (lines 1198-1226): two boolean-
#:   mask selections (``indices[mask]``, ``probs[mask]``: a nonzero each, whose output size the
#:   host reads) and ``repeat_interleave(mask.sum(dim=1))`` without ``output_size`` (the host
#:   reads the repeats' sum); ``tokens_per_expert`` is a CPU tensor from there on (its
#:   ``.sum().item()`` and TE GroupedLinear's ``.tolist()`` read host memory). One in the
#:   backward: ``probs[mask]``'s gradient is an index-put over the same boolean mask, which
#:   takes its nonzero again (ATen's index_backward -> _index_put_impl_); DeepEP's cached
#:   dispatch and combine in the backward take their sizes from the handle.
#: * ``hybridep``: one, HybridEP's dispatch without an upper bound on the permuted tokens
#:   ("None means no up-bound, will cause a CPU sync": _HybridEPManager, lines 986-987).
MOE_HOST_SYNCS = {"alltoall": (1, 0), "deepep": (4, 1), "hybridep": (1, 0)}


def _issue_order(fwd: list, step: Any, layers: int, cp: int,
                 backward: bool = False) -> list[tuple[float, float, int]]:
    """One layer's forward ops as (host issue s, device s, kernels) per op, averaged over the
    layers, rotated to start where the sync releases the host: after the router's top-k (the
    dispatch's all-to-all is the first op issued from a drained queue). ``backward``: the
    layer's backward ops, run in reverse, from the dispatch's backward (where DeepEP's wait is:
    :data:`MOE_HOST_SYNCS`)."""
    o = step.overheads
    seq = []
    for t in (reversed(fwd) if backward else fwd):
        k = t.op.kernels * t.op.count
        scale = cp if t.op.kind == "attention" else 1
        host = step._host_s([t])
        dev = t.total_s * scale + k * o.device_gap_s
        seq.append((t.op.name, host / layers, dev / layers, max(1, round(k / layers))))
    cut = next((i + (0 if backward else 1) for i, e in enumerate(seq)
                if e[0] == ("moe.dispatch" if backward else "moe.topk")), 0)
    seq = seq[cut:] + seq[:cut]
    return [(h, d, k) for _, h, d, k in seq]


def synced_forward_s(ops: list[tuple[float, float, int]]) -> float:
    """The time from a drained queue to the next sync over ``ops`` issued in order, each as
    (host issue s, device s, kernels): each kernel starts when the host has issued it and the
    device has finished the one before (finish = max(finish, issued) + run), so the host's
    issue overlaps the device's work only within the segment -- what a sync per MoE layer
    leaves of "the host runs ahead" (the max of the two totals when the queue never drains)."""
    issued = finish = 0.0
    for host, dev, k in ops:
        for _ in range(k):
            issued += host / k
            finish = max(finish, issued) + dev / k
    return max(finish, issued)


#: The dense layer's GEMMs that sit beside a TP collective (Megatron's column/row split with
#: sequence parallelism): all-gather -> attn.qkv, attn.out -> reduce-scatter, all-gather ->
#: mlp.up / mlp.gate_up, mlp.down -> reduce-scatter; index = the collective's place in the layer.
TP_GEMMS = {"attn.qkv": 0, "attn.out": 1, "mlp.up": 2, "mlp.gate_up": 2, "mlp.down": 3}


def _cost_of(ops: list, layers: int, cp: int, launch_s: float, pace: float = 1.0) -> MicroCost:
    sums = {"fwd": 0.0, "bwd": 0.0, "afwd": 0.0, "abwd": 0.0, "other": 0.0, "emb": 0.0,
            "wgrad": 0.0}
    gemm = {"forward": [0.0] * 4, "backward": [0.0] * 4}
    shared = [0.0] * 4  # fc1 + act fwd, fc2 fwd, fc1 + act bwd, fc2 bwd
    hw = 0.0
    for t in ops:
        if t.op.name.startswith("moe.shared_") and t.op.phase in ("forward", "backward"):
            part = (0 if t.op.name != "moe.shared_down" else 1) \
                + (2 if t.op.phase == "backward" else 0)
            shared[part] += t.total_s + t.op.kernels * t.op.count * launch_s
        if t.op.kind == "matmul" and t.op.name in TP_GEMMS and t.op.phase in gemm:
            # the backward op is dgrad + wgrad, two GEMMs of the forward's FLOPs: dgrad is half
            part = t.total_s if t.op.phase == "forward" else t.total_s / 2
            gemm[t.op.phase][TP_GEMMS[t.op.name]] += part
        scale = cp if t.op.kind == "attention" else 1  # (s/cp)^2 built; s^2/cp is the work
        hw += t.op.counted_flops * t.op.count * scale
        s = ((t.total_s * scale) + t.op.kernels * t.op.count * launch_s) * pace
        if t.op.group in ("embedding", "head"):
            sums["other"] += s
            sums["emb"] += s if t.op.group == "embedding" else 0.0
            continue
        fwd = t.op.phase == "forward"
        sums["fwd" if fwd else "bwd"] += s
        if t.op.kind == "attention":
            sums["afwd" if fwd else "abwd"] += t.total_s * scale
        if t.op.kind == "matmul" and t.op.phase == "backward":
            sums["wgrad"] += s / 2
    L = layers
    return MicroCost(layers=L, layer_fwd_s=sums["fwd"] / L, layer_bwd_s=sums["bwd"] / L,
                     attn_fwd_s=sums["afwd"] / L, attn_bwd_s=sums["abwd"] / L,
                     other_s=sums["other"], hardware_flops=hw, embedding_s=sums["emb"],
                     tp_gemm_fwd_s=tuple(g / L for g in gemm["forward"]),
                     tp_gemm_bwd_s=tuple(g / L for g in gemm["backward"]),
                     wgrad_s=sums["wgrad"] / L,
                     shared_parts_s=tuple(s / L for s in shared) if any(shared) else ())


def shared_overlap_hidden_s(ep_layer_s: float, parts: tuple[float, ...]) -> float:
    """A layer's expert-parallel all-to-all time the shared expert hides under Megatron-Core's
    ``moe_shared_expert_overlap`` (NVIDIA/Megatron-LM@0d8e0714: token_dispatcher.py
    MoEAlltoAllTokenDispatcher launches the shared expert's ``linear_fc1_forward_and_act`` on
    its own stream right after the dispatch all-to-all is issued, lines 696-697, and
    ``linear_fc2_forward`` after the combine's, lines 836-838; shared_experts.py
    ``set_tensor_grad_fn_sequence_sr`` orders the backward's the same way): ``ep_layer_s`` the
    layer's four all-to-alls (dispatch and combine, forward and backward: the same bytes each,
    a quarter apiece), ``parts`` the shared expert's four stretches
    (:attr:`MicroCost.shared_parts_s`); each hides at most its own all-to-all."""
    if not parts:
        return 0.0
    quarter = ep_layer_s / 4
    return sum(min(quarter, p) for p in parts)


def _shared_hidden_s(lay: Layout, ep_layer_s: float, cost: MicroCost) -> float:
    """:func:`shared_overlap_hidden_s` where ``lay`` runs the overlap (not under DualPipe,
    whose all-to-alls already sit beside the paired chunk); else 0."""
    if not lay.shared_overlap or lay.dual:
        return 0.0
    return shared_overlap_hidden_s(ep_layer_s, cost.shared_parts_s)


def model_flops_per_token(arch: Architecture, device: Device, eff: Efficiency,
                          prec: PrecisionLayout, seq: int, attention: str) -> float:
    """Model FLOPs (no recompute) of training one token of the whole model at ``seq``."""
    job = Job(model="layout", mode="train", batch=1, seq=seq, attention=attention)
    spec = StepSpec.of(job, mode="train", seq=seq, new_tokens=1, trainable=None,
                       single_device=True)
    step, _, _, _ = build_steps(arch, 0, (), device, eff, prec, spec)
    return step.model_flops / seq


def mtp_flops_per_token(arch: Architecture, seq: int, depth: int) -> float:
    """Training FLOPs (forward and backward, 3x the forward) one token spends in ``depth``
    multi-token-prediction modules (DeepSeek-V3 sec. 2.2): per module its block's and the 2H -> H
    projection's matmuls at the parameters the token runs through
    (:func:`gpuplan.parallel.mtp_active_params`: 2 FLOPs each), the shared head's ``2 H V``, and
    causal attention over the sequence (``2 x heads x (qk + v head dims) x (s + 1) / 2``; MLA's
    dims where it has them)."""
    if not depth:
        return 0.0
    if arch.mla is not None:
        qk, v = arch.mla.qk_nope_head_dim + arch.mla.qk_rope_head_dim, arch.mla.v_head_dim
    else:
        qk = v = arch.head_dim
    attn = 2 * arch.num_heads * (qk + v) * (seq + 1) / 2
    fwd = 2 * mtp_active_params(arch, depth) + depth * (2 * arch.hidden_size * arch.vocab_size
                                                        + attn)
    return 3 * fwd


def fsdp2_copy_bytes(elements: float, *, zero: int, micro_batches: int, gathers: float,
                     gathered_bytes: float, grad_bytes: float, reduce_bytes: float,
                     grad_elements: float | None = None) -> float:
    """The step's memory traffic (bytes) of FSDP2's copies on the compute stream around its
    collectives, on a rank whose units hold ``elements`` parameters unsharded.

    torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py: the copy-in into the all-gather
    buffer runs on its own stream (``all_gather_copy_in_stream``), but
    ``foreach_all_gather_copy_out`` makes the current stream wait for the gather and copies the
    gathered buffer into each parameter there (``split_with_sizes_copy``: ``gathered_bytes``
    read and written an element), and ``foreach_reduce`` builds the reduce-scatter input on
    the compute stream with ``_chunk_cat`` of the unsharded gradients (``grad_bytes`` read,
    ``reduce_bytes`` written: the reduce dtype) before the reduce-scatter stream waits on it.
    ZeRO-3 (reshard after forward) does both for every micro-batch, ``gathers`` copy-outs
    (2 for FSDP: :func:`zero3_gathers`); ZeRO-2 (no reshard: torchtitan under PP, where the
    pipeline's stage turns gradient sync off until the last backward) once a step.
    ``grad_elements``: the parameters that have a gradient, where fewer than ``elements`` (LoRA:
    the adapters; ``FSDPParamGroup.post_backward`` hands ``foreach_reduce`` only the parameters
    whose ``.grad`` is set, so a frozen base is gathered and copied out but never chunk-cat);
    None: all of them."""
    copy_out = elements * 2 * gathered_bytes
    cat = (elements if grad_elements is None else grad_elements) * (grad_bytes + reduce_bytes)
    if zero >= 3:
        return micro_batches * (gathers * copy_out + cat)
    return copy_out + cat


def fsdp1_grad_cat_bytes(grad_elements: float, *, micro_batches: int,
                         grad_bytes: float) -> float:
    """The step's memory traffic (bytes) of torch FSDP1's one copy on the compute stream, on a
    rank whose units hold ``grad_elements`` parameters with a gradient: each backward joins a
    unit's per-weight gradients into its flat gradient with the backward of the ``torch.split``
    that made the weights' views (``at::cat``: ``grad_bytes`` read and written an element;
    :attr:`gpuplan.engines.profiles.EngineProfile.fsdp1_grad_cat`), every micro-batch whatever
    the stage -- the views are split again at every unshard, and under ``no_sync`` too. Its
    other copies run off the compute stream (the low-precision shard's cast before the
    all-gather on the pre-unshard stream, the gradient's pre-divide on the post-backward
    stream: torch/distributed/fsdp/_runtime_utils.py), as FSDP2's copy-in is left out of
    :func:`fsdp2_copy_bytes`."""
    return micro_batches * grad_elements * 2 * grad_bytes


def sharded_copy_bytes(elements: float, *, fsdp1_grad_cat: bool, zero: int, micro_batches: int,
                       gathers: float, gathered_bytes: float, grad_bytes: float,
                       reduce_bytes: float, grad_elements: float | None = None) -> float:
    """The step's compute-stream copy traffic (bytes) of a sharded data-parallel rank holding
    ``elements`` parameters: torch FSDP1's gradient cat where its profile times that
    (``fsdp1_grad_cat``: :func:`fsdp1_grad_cat_bytes`, over ``grad_elements`` where fewer have a
    gradient), else FSDP2's copies (:func:`fsdp2_copy_bytes`). The one rule for the step with a
    layout (``_layout_copy_s``) and without (compute/speed.py ``_fsdp2_copy_s``)."""
    if fsdp1_grad_cat:
        return fsdp1_grad_cat_bytes(elements if grad_elements is None else grad_elements,
                                    micro_batches=micro_batches, grad_bytes=grad_bytes)
    return fsdp2_copy_bytes(elements, zero=zero, micro_batches=micro_batches, gathers=gathers,
                            gathered_bytes=gathered_bytes, grad_bytes=grad_bytes,
                            reduce_bytes=reduce_bytes, grad_elements=grad_elements)


def dualpipe_bubble_s(pp: int, f_and_b_s: float, b_s: float, w_s: float) -> float:
    """DualPipe's bubble, ``(PP/2 - 1)(F&B + B - 3W)`` (DeepSeek-V3 report Table 2;
    deepseek-ai/DualPipe README): ``f_and_b_s`` a forward and a backward chunk overlapped,
    ``b_s`` a chunk's full backward, ``w_s`` its weight-gradient part."""
    return (pp / 2 - 1) * max(0.0, f_and_b_s + b_s - 3 * w_s)


@record
class LayoutTime:
    """One training step under a layout, per GPU of the busiest stage; seconds."""

    layout: Layout
    stage_layers: int
    compute_s: float
    """M micro-batches of the stage's layers and head."""
    bubble_s: float
    tp_comm_s: float
    """Exposed TP (or SP) collectives."""
    cp_comm_s: float
    ep_comm_s: float
    pp_comm_s: float
    dp_comm_s: float
    """The data-parallel collectives in full."""
    dp_exposed_s: float
    optimizer_s: float
    tokens_per_step: int
    """Tokens of the whole step over all GPUs (global batch x seq)."""
    model_flops_per_token: float
    peak_flops: float
    hardware_flops_per_gpu: float
    """Counted FLOPs one GPU of the busiest stage runs in the step, recompute included."""
    topology: Topology
    fsdp_copy_s: float = 0.0
    """FSDP2's copy-out of the gathered weights and chunk-cat of the gradients on the compute
    stream (:func:`fsdp2_copy_bytes`), the step's; 0 where the engine's are not timed."""
    p2p_overlapped: bool = False
    """The pipeline's steady-state sends ran beside compute (:func:`interleaved_p2p_exposed_s`)."""

    @property
    def links(self) -> dict[str, str]:
        """Which link each group rides."""
        return _links(self.layout, self.topology)

    @property
    def notes(self) -> tuple[str, ...]:
        return _layout_notes(self.layout, self.topology, self.p2p_overlapped)

    @property
    def step_s(self) -> float:
        return (self.compute_s + self.bubble_s + self.tp_comm_s + self.cp_comm_s
                + self.ep_comm_s + self.pp_comm_s + self.dp_exposed_s + self.optimizer_s
                + self.fsdp_copy_s)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.step_s

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.tokens_per_s / self.layout.gpus

    @property
    def mfu(self) -> float:
        return self.model_flops_per_token * self.tokens_per_s_per_gpu / self.peak_flops

    @property
    def tflops_per_gpu(self) -> float:
        """Model TFLOP/s per GPU (the MFU numerator)."""
        return self.model_flops_per_token * self.tokens_per_s_per_gpu / 1e12

    @property
    def hfu(self) -> float:
        return self.hardware_flops_per_gpu / (self.step_s * self.peak_flops)

    @property
    def bubble_fraction(self) -> float:
        return self.bubble_s / self.step_s

    def to_dict(self) -> dict:
        return {"layout": self.layout.to_dict(), "stage_layers": self.stage_layers,
                "step_time_s": self.step_s, "compute_s": self.compute_s,
                "bubble_s": self.bubble_s, "bubble_fraction": self.bubble_fraction,
                "tp_comm_exposed_s": self.tp_comm_s, "cp_comm_exposed_s": self.cp_comm_s,
                "ep_comm_exposed_s": self.ep_comm_s, "pp_comm_exposed_s": self.pp_comm_s,
                "dp_comm_s": self.dp_comm_s, "dp_comm_exposed_s": self.dp_exposed_s,
                "optimizer_s": self.optimizer_s, "fsdp_copy_s": self.fsdp_copy_s,
                "tokens_per_step": self.tokens_per_step,
                "tokens_per_s": self.tokens_per_s,
                "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu, "mfu": self.mfu,
                "hfu": self.hfu, "tflops_per_gpu": self.tflops_per_gpu,
                "links": dict(self.links), "topology": self.topology.to_dict(),
                "notes": list(self.notes)}


def _moe_layers(arch: Architecture) -> int:
    if not arch.is_moe:
        return 0
    return len(arch.moe_layers) if arch.moe_layers else arch.num_layers


def stage_params(arch: Architecture, params: int, lay: Layout) -> int:
    """Parameters one GPU holds (before ZeRO): the model over TP x PP, the experts also over EP."""
    expert = 0
    if arch.is_moe and lay.ep > 1:
        mats = 3 if arch.mlp == "gated" else 2
        width = arch.moe_intermediate_size or arch.intermediate_size
        expert = _moe_layers(arch) * arch.num_experts * mats * arch.hidden_size * width
        expert = min(expert, params)
    dense = params - expert
    if lay.folded:  # each expert over expert TP ranks, not TP (MoE Parallel Folding)
        return math.ceil(dense / (lay.tp * lay.pp) + expert / (lay.ep * lay.expert_tp * lay.pp))
    return math.ceil((dense + expert / lay.ep) / (lay.tp * lay.pp))


def ub_overlap_price_s(cost: MicroCost, lay: Layout, topo: Topology, eff: Efficiency,
                       act_bytes: float) -> float:
    """What one layer's userbuffers TP overlap costs beyond the collectives it hides, under
    sequence parallelism with TP > 1 (0 otherwise): the ring exchanges' GEMMs in TP chunks and
    their reduce kernels (:attr:`MicroCost.ub_split_s`), and per forward reduce-scatter (the
    attention out and MLP down, again in a full recompute) what is left after its last GEMM
    chunk -- a ring's last chunk sent to its peer (``act_bytes / TP``), or TE's pipeline
    method's last of :data:`UB_PIPELINE_SPLITS` chunks reduce-scattered."""
    if not lay.sequence_parallel or lay.tp <= 1:
        return 0.0
    n_rs = 2 + (2 if lay.checkpointing == "full" else 0)
    if cost.ub_pipeline_rs:
        last = collective_time("reduce-scatter", act_bytes / UB_PIPELINE_SPLITS, lay.tp, topo,
                               efficiency=eff.comm)
    else:
        last = collective_time("send-recv", act_bytes / lay.tp, 2, topo, efficiency=eff.comm)
    return cost.ub_split_s + n_rs * last


def _comm_per_micro_batch(arch: Architecture, cost: MicroCost, lay: Layout, topo: Topology,
                          eff: Efficiency, act: int, stage_layers: int, *,
                          tp_overlap: bool, tp_overlap_kind: str = "userbuffers",
                          cp_rotate: str = "p2p",
                          repeat_kv: bool = False,
                          tp_gather_bytes: float | None = None,
                          ep_dispatcher: str = "alltoall") -> tuple[float, float, float]:
    """Exposed (TP, CP, EP) communication of one micro-batch on one stage; ``repeat_kv``: the
    K/V exchanged has the query heads (the engine's ``sdpa_repeat_kv``); ``tp_gather_bytes``:
    the bytes an element of the TP all-gathers moves (:func:`tp_collectives_s`; None: ``act``);
    ``ep_dispatcher``: the job's MoE dispatcher (``hybridep`` inside an NVL72 rack: HybridEP's
    measured exchange, :func:`hybridep_exchange_s`; otherwise NCCL's all-to-all)."""
    s_local = lay.seq // lay.cp
    act_bytes = lay.batch * s_local * arch.hidden_size * act
    gather_bytes = None if tp_gather_bytes is None else act_bytes * tp_gather_bytes / act
    n_tp = 4 + (2 if lay.checkpointing == "full" else 0)
    tp = n_tp * tp_collectives_s(act_bytes, lay.tp, topo, eff, gather_bytes)
    regather = 0.0
    if lay.distribute_checkpoints:  # the layer input gathered back before its recompute
        regather = collective_time("all-gather", act_bytes, lay.tp, topo, efficiency=eff.comm)
    if tp_overlap and tp_overlap_kind == "async-tp" and lay.sequence_parallel and lay.tp > 1:
        tp = regather + async_tp_exposed_s(cost, lay, topo, eff, act_bytes, gather_bytes)
    else:
        tp += regather
        if tp_overlap:
            tp = max(0.0, tp - 0.9 * cost.layer_s)  # userbuffers overlap under the layer's GEMMs
            tp += ub_overlap_price_s(cost, lay, topo, eff, act_bytes)
    if lay.sequence_parallel and lay.tp > 1 and cost.amax_reduces:
        # each waits on the compute stream between the amax and the cast: nothing hides it
        tp += cost.amax_reduces * collective_time("all-reduce", 4, lay.tp, topo,
                                                  efficiency=eff.comm)
    cp = 0.0
    if lay.cp > 1:
        kv_local = arch.num_kv_heads // lay.tp if arch.num_kv_heads % lay.tp == 0 else 1
        if repeat_kv:
            kv_local = arch.num_heads // lay.tp
        kv_bytes = lay.batch * s_local * 2 * kv_local * arch.head_dim * act
        if cp_rotate == "allgather":
            cp = torch_cp_exposed_s(cost, lay, topo, eff, kv_bytes, act)
        else:
            step = collective_time("send-recv", kv_bytes, 2, topo, stride=lay.tp,
                                   efficiency=eff.comm)
            ring_f, ring_b = (lay.cp - 1) * step, 2 * (lay.cp - 1) * step
            cp = max(0.0, ring_f - cost.attn_fwd_s) + max(0.0, ring_b - cost.attn_bwd_s)
    ep = _ep_exchanges_s(arch, lay, topo, eff, act, act_bytes, ep_dispatcher)
    return tp * stage_layers, cp * stage_layers, ep * stage_layers


def _ep_exchanges_s(arch: Architecture, lay: Layout, topo: Topology, eff: Efficiency, act: int,
                    act_bytes: float, dispatcher: str) -> float:
    """One layer's exposed EP exchanges of one micro-batch (the MoE layers' share of a layer):
    a dispatch and a combine forward, the same pair backward (the dispatch's gradient is a
    combine, the combine's a dispatch), once more for a full recompute; HybridEP's measured
    exchange where it applies (:func:`hybridep_applies`: an NVL72 rack), DeepEP's or
    HybridEP's measured internode one over whole nodes (:func:`deepep_internode_applies`,
    :func:`hybridep_internode_applies`), NCCL's all-to-all otherwise."""
    moe = _moe_layers(arch)
    if lay.ep <= 1 or not moe:
        return 0.0
    tok = act_bytes * max(1, arch.experts_per_token) * _padded_share(arch, lay)
    stride = lay.tp * lay.cp
    if lay.folded:
        # folded (MoE Parallel Folding, arXiv 2504.14960): a rank dispatches its own
        # sequence-parallel share of the TP group's tokens (gathered over the expert TP
        # group only), and EP's ranks sit next to one another past the expert TP group
        # (Megatron-Core's expert rank order tp-ep-dp)
        tok = tok * lay.expert_tp // lay.tp
        stride = lay.expert_tp
    n_a2a = 4 + (2 if lay.checkpointing == "full" else 0)
    if hybridep_applies(dispatcher, lay, topo):
        rows = tok / (arch.hidden_size * act * max(1, arch.experts_per_token))
        one = hybridep_exchange_s(rows, arch.num_experts, arch.experts_per_token, lay.ep,
                                  arch.hidden_size)
    elif deepep_internode_applies(dispatcher, lay, topo) \
            or hybridep_internode_applies(dispatcher, lay, topo):
        rows = tok / (arch.hidden_size * act * max(1, arch.experts_per_token))
        nodes = topo.link(lay.ep, stride)[1]
        rows *= deepep_nodes_reached(arch.num_experts, arch.experts_per_token, nodes,
                                     arch.router_groups)
        table = DEEPEP_INTERNODE_H800 if dispatcher == "deepep" else HYBRIDEP_INTERNODE_H100
        one = internode_exchange_s(rows, lay.ep, arch.hidden_size, table)
    else:
        one = collective_time("all-to-all", tok, lay.ep, topo, stride=stride, efficiency=eff.comm)
    return moe / arch.num_layers * n_a2a * one


#: HybridEP's measured exchange on GB200 (NVL72), by EP ranks: (dispatch, combine) algorithm
#: bandwidth in bytes/s, the bytes being the rows a rank receives in the dispatch (each token
#: once per destination rank, however many of its experts that rank holds) times the hidden
#: size at 2 bytes, and the same rows back in the combine (tests/test_hybrid_ep.py:
#: ``nvl_recv_bytes = dispatched_hidden.numel() * 2``, ``nvl_combine = nvl_dispatch``). From
#: deepseek-ai/DeepEP branch hybrid-ep, docs/README_Hybrid-EP.md "GB200 Platform", HybridEP,
#: Torch API, SM count 32 (Megatron-Bridge's performance scripts set moe_hybridep_num_sms 32:
#: scripts/performance/utils/helpers.py at v0.2.0), dispatch in BF16 (Megatron-Core does not
#: dispatch FP8 on GB200: NVIDIA/Megatron-LM docs/discussions/deepseek-v3-gb200-optimization/
#: deepseek-v3-gb200-optimization.md, FAQ 1, at 402bc50b), at 94a9f8f6b146c07d97ec58f67cd6d303
#: 296d6098 (2026-07-10); measured at 4096 tokens, hidden 7168, top-8, a random uniform router,
#: 8 local experts a rank. Between two rank counts the rate is interpolated; past 36 (the
#: largest measured) the 36-rank rate is held -- NOT measured there (EP 64 in particular).
HYBRIDEP_GB200 = {8: (545.71e9, 568.94e9), 16: (523.48e9, 521.55e9), 24: (507.32e9, 483.76e9),
                  32: (484.22e9, 464.54e9), 36: (479.02e9, 447.89e9)}


def _ep_stride(lay: Layout) -> int:
    """The rank distance between neighbours of the EP group: the expert TP group's size when
    folded (Megatron-Core's expert rank order tp-ep-dp), else TP x CP (tp-cp-ep-dp)."""
    return lay.expert_tp if lay.folded else lay.tp * lay.cp


def hybridep_applies(dispatcher: str, lay: Layout, topo: Topology) -> bool:
    """Whether a layout's EP exchange is HybridEP's measured one (:data:`HYBRIDEP_GB200`): the
    job's dispatcher is ``hybridep``, the topology an NVL72 rack's NVLink domain, and the EP
    group inside one such domain."""
    if dispatcher != "hybridep" or lay.ep <= 1 or topo.nvlink_domain != 72:
        return False
    return topo.link(lay.ep, _ep_stride(lay))[1] == 1


def hybridep_rows(tokens: float, experts: int, top_k: int, ep: int) -> float:
    """Rows a rank receives in HybridEP's dispatch when each of ``ep`` ranks routes ``tokens``
    tokens to ``top_k`` of ``experts`` experts uniformly without replacement, ``experts / ep`` a
    rank: a token goes once to each rank holding one of its experts, so a rank receives
    ``tokens x ep x (1 - C(E - E/ep, k) / C(E, k))`` rows (DeepSeek-V3, E 256, k 8: 7.27 ranks a
    token at EP 32, 7.68 at EP 64, against the 8 copies of a plain all-to-all)."""
    return tokens * ep * (1.0 - _miss_share(experts, top_k, ep))


def _miss_share(experts: int, top_k: int, holders: int) -> float:
    """``C(E - E/holders, k) / C(E, k)``: the chance that none of a token's ``top_k`` experts,
    drawn uniformly without replacement from ``experts`` held in ``holders`` equal blocks, lies
    in a given block (:func:`hybridep_rows`' ranks, :func:`deepep_nodes_reached`' nodes)."""
    local = experts // holders
    miss = 1.0
    for i in range(top_k):
        miss *= (experts - local - i) / (experts - i)
    return miss


def _rates_at(table: dict[int, tuple[float, float]], ep: int) -> tuple[float, float]:
    """A measured (dispatch, combine) rate ``table`` by EP ranks (:data:`HYBRIDEP_GB200`,
    :data:`DEEPEP_INTERNODE_H800`) read at ``ep``: linear between two measured sizes, the end
    one held outside them."""
    ranks = sorted(table)
    if ep <= ranks[0] or ep >= ranks[-1]:
        return table[ranks[0] if ep <= ranks[0] else ranks[-1]]
    lo = max(r for r in ranks if r <= ep)
    hi = min(r for r in ranks if r >= ep)
    if lo == hi:
        return table[lo]
    w = (ep - lo) / (hi - lo)
    return tuple((1 - w) * a + w * b for a, b in zip(table[lo], table[hi]))


def hybridep_exchange_s(tokens: float, experts: int, top_k: int, ep: int, hidden: int) -> float:
    """Seconds of one HybridEP exchange on GB200 -- the mean of a dispatch and a combine, so a
    layer's forward (a dispatch and a combine) is twice it -- for a rank routing ``tokens``
    tokens over ``ep`` ranks: :func:`hybridep_rows` rows of ``hidden`` BF16 elements at
    :data:`HYBRIDEP_GB200`'s measured rates."""
    if ep <= 1 or tokens <= 0:
        return 0.0
    nbytes = hybridep_rows(tokens, experts, max(1, top_k), ep) * hidden * 2
    dispatch, combine = _rates_at(HYBRIDEP_GB200, ep)
    return 0.5 * (nbytes / dispatch + nbytes / combine)


#: DeepEP's normal (training) kernels across nodes, measured: (dispatch, combine) "bottleneck
#: bandwidth" in bytes/s by EP ranks, the bytes being each token once per node it reaches
#: (tests/test_internode.py: ``num_rdma_token_sent`` counts a token's distinct destination
#: nodes, its own included; ``rdma_send_bytes = num_rdma_token_sent x hidden x 2``, the combine
#: the same bytes back): the kernels send a token over RDMA once to each node holding one of
#: its experts and forward it over NVLink there. From deepseek-ai/DeepEP README.md "Normal
#: kernels with NVLink and RDMA forwarding" at 92fe2deaec24bc92ebd9de276daa6ca9ed602ed4
#: (2025-11-05, the V1 kernels Megatron-Core's flex dispatcher calls; docs/legacy.md at
#: b306af06 keeps the table): H800, one CX7 InfiniBand 400 Gb/s NIC a GPU, 8 GPUs a node,
#: 4096 tokens a rank, hidden 7168, top-4 groups, top-8 experts, FP8 dispatch, BF16 combine.
#: Megatron-Core dispatches BF16 through DeepEP (fused_a2a.py FusedDispatch passes ``x`` as
#: given, no FP8 cast, at NVIDIA/Megatron-LM@0d8e0714); taken at the same rate, as the
#: BF16 combine's 50 GB/s beside the FP8 dispatch's 51 shows the NIC, not the payload's
#: format, bounds it. Between the measured EP sizes the rate is interpolated; outside 16-64 or
#: off 400 Gb/s NICs the exchange stays NCCL's all-to-all (:func:`deepep_internode_applies`).
#: Taken at any tokens a rank, though measured at 4096 only (NOT measured at the 2048 of the
#: 25.09 H100 DeepSeek-V3 row's sequence-parallel share, where a smaller exchange may run
#: below these rates).
DEEPEP_INTERNODE_H800 = {16: (43e9, 43e9), 32: (58e9, 57e9), 64: (51e9, 50e9)}

#: The NIC rate DEEPEP_INTERNODE_H800 was measured behind: 400 Gb/s a GPU (CX7), bytes/s.
DEEPEP_NIC_BPS = 400e9 / 8


def deepep_internode_applies(dispatcher: str, lay: Layout, topo: Topology) -> bool:
    """Whether a layout's EP exchange is DeepEP's measured internode one
    (:data:`DEEPEP_INTERNODE_H800`): the job's dispatcher is ``deepep``, the EP group whole
    nodes of adjacent ranks (as DeepEP's benchmark ran: every GPU of each node, its own NIC)
    across two or more nodes, EP within the measured 16-64, the network 400 Gb/s a GPU."""
    return dispatcher == "deepep" and _whole_nodes_within(lay, topo, DEEPEP_INTERNODE_H800)


def _whole_nodes_within(lay: Layout, topo: Topology, table: dict) -> bool:
    """Whether the EP group is whole nodes of adjacent ranks (every GPU of each node, its own
    NIC: as DeepEP's and HybridEP's internode benchmarks ran) across two or more nodes, EP
    within ``table``'s measured sizes, the network 400 Gb/s a GPU (:data:`DEEPEP_NIC_BPS`)."""
    if lay.ep <= 1:
        return False
    ranks = sorted(table)
    return (_ep_stride(lay) == 1 and topo.link(lay.ep, 1)[1] > 1
            and lay.ep % topo.gpus_per_node == 0 and ranks[0] <= lay.ep <= ranks[-1]
            and abs(topo.inter.bandwidth - DEEPEP_NIC_BPS) <= 0.01 * DEEPEP_NIC_BPS)


def deepep_nodes_reached(experts: int, top_k: int, nodes: int,
                         router_groups: tuple[int, int] = (1, 1)) -> float:
    """Nodes a token's ``top_k`` experts of ``experts`` lie on, over an EP group of ``nodes``
    nodes holding the experts in contiguous blocks (Megatron-Core's expert placement), its own
    node counted (as DeepEP's ``num_rdma_token_sent`` counts it). Node-limited routing --
    ``router_groups`` (groups, groups a token may pick) with a group a node, Megatron-Core's
    group_limited_topk (moe_utils.py at NVIDIA/Megatron-LM@0d8e0714; DeepSeek-V3: 8 groups, 4
    picked, Megatron-Bridge DeepSeekV3ModelProvider moe_router_num_groups 8 /
    moe_router_group_topk 4) -- reaches at most the picked groups' nodes: taken at that bound
    (a simulation of the rule on random logits, as moe_router_force_load_balancing routes, gives
    3.97 of 4 for DeepSeek-V3 on 8 nodes). Otherwise the experts uniform without replacement:
    ``nodes x (1 - C(E - E/nodes, k) / C(E, k))``."""
    groups, picked = router_groups
    if groups == nodes and 1 <= picked < nodes:
        return float(picked)
    return nodes * (1.0 - _miss_share(experts, top_k, nodes))


def deepep_internode_exchange_s(rows: float, ep: int, hidden: int) -> float:
    """Seconds of one DeepEP internode exchange -- the mean of a dispatch and a combine, so a
    layer's forward is twice it -- of ``rows`` (a rank's tokens x the nodes each reaches:
    :func:`deepep_nodes_reached`) of ``hidden`` BF16 elements at
    :data:`DEEPEP_INTERNODE_H800`'s measured rates for ``ep`` ranks."""
    return internode_exchange_s(rows, ep, hidden, DEEPEP_INTERNODE_H800)


def internode_exchange_s(rows: float, ep: int, hidden: int,
                         table: dict[int, tuple[float, float]]) -> float:
    """Seconds of one internode exchange -- the mean of a dispatch and a combine -- of ``rows``
    (a rank's tokens x the nodes each reaches, its own counted: :func:`deepep_nodes_reached`)
    of ``hidden`` BF16 elements at ``table``'s measured (dispatch, combine) rates for ``ep``
    ranks (:data:`DEEPEP_INTERNODE_H800`, :data:`HYBRIDEP_INTERNODE_H100`: both count the
    bytes so, a token once per node reached)."""
    if ep <= 1 or rows <= 0:
        return 0.0
    dispatch, combine = _rates_at(table, ep)
    nbytes = rows * hidden * 2
    return 0.5 * (nbytes / dispatch + nbytes / combine)


#: HybridEP's normal kernels across nodes, measured on H100: (dispatch, combine) "IB bandwidth"
#: in bytes/s by EP ranks. HybridEP crosses nodes as DeepEP's internode kernels do: "Similar to
#: DeepEP, Hybrid-EP first performs IB communication between peer GPUs [the same local rank on
#: each node], then each rank distributes the received inter-node data locally" over NVLink,
#: and its combine pre-reduces inside the node before the RDMA send (docs/
#: Hybrid-EP_Implementation.md, "RDMA communication pattern", 8.1, 8.2); the dispatch sends a
#: token once to each remote node holding one of its experts (hybrid_ep_backend.cuh: one
#: ``attn_to_rdma_map`` flag a token a remote node). Its bytes are DeepEP's: tests/
#: test_hybrid_ep.py's ``rdma_send_bytes = num_rdma x HIDDEN_DIM x 2``, ``num_rdma`` each
#: token's distinct destination nodes, its own included (tests/utils.py
#: count_rdma_send_from_routing_map: "To align with the implementation in the DeepEP, we do
#: not set the local node map to zeros"), the combine the same bytes back. From deepseek-ai/
#: DeepEP branch hybrid-ep, docs/README_Hybrid-EP.md "H100 Platform" (added at 7febc6e2,
#: 2026-02-09; the same at 94a9f8f6b146c07d97ec58f67cd6d303296d6098, 2026-07-10): 4096 tokens,
#: hidden 7168, top-8, a random uniform router, 8 local experts, Torch API, Dispatch (BF16)
#: and Combine at SM count 16 -- 16 ranks 54.47 / 53.35 GB/s, 32 ranks 47.36 / 52.53, 64 ranks
#: 41.24 / 46.57 (at 8 SMs 57.74 / 56.96, 46.54 / 50.68, 41.46 / 47.68: no faster at 16, so
#: the network bounds it). Megatron-Core dispatches BF16 through HybridEP ("HybridEP
#: dispatcher does not support fp8 dispatch now": fused_a2a.py init_hybrid_ep_buffer at
#: NVIDIA/Megatron-LM@d7288711, the 26.04 Megatron-Bridge v0.4.0 pin) with
#: num_sms_dispatch_api = num_sms_combine_api = moe_hybridep_num_sms, which Megatron-Bridge's
#: performance scripts set to 32 (scripts/performance/utils/overrides.py at v0.4.0 / v0.5.0):
#: NOT measured at 32 SMs; the largest measured, 16, taken. The README names no NIC: taken
#: as 400 Gb/s a GPU (DGX H100's CX7, DeepEP's H800 benchmark's), so it applies where
#: DEEPEP_INTERNODE_H800 would (:func:`hybridep_internode_applies`). Measured at 4096 tokens a
#: rank and hidden 7168 only: taken at any size, NOT measured at Qwen3-30B-A3B's hidden 2048
#: (a token 4 KB against 14 KB, the exchange under a third of the bytes, where the Torch API's
#: fixed costs weigh more: the README's kernel-only 71.71 GB/s against its Torch API 54.47 at
#: 16 ranks puts 0.52 of the 2.15 ms outside the kernel there); the Torch API was timed with
#: a cached handle (tests/test_hybrid_ep.py at 7febc6e2: ``buffer.dispatch(..., handle)``).
#: Between the measured EP sizes interpolated; outside 16-64, NCCL's all-to-all.
HYBRIDEP_INTERNODE_H100 = {16: (54.47e9, 53.35e9), 32: (47.36e9, 52.53e9),
                           64: (41.24e9, 46.57e9)}


def hybridep_internode_applies(dispatcher: str, lay: Layout, topo: Topology) -> bool:
    """Whether a layout's EP exchange is HybridEP's measured internode one
    (:data:`HYBRIDEP_INTERNODE_H100`): the job's dispatcher is ``hybridep``, outside an NVL72
    rack's one NVLink domain (there :func:`hybridep_applies`), the EP group whole nodes of
    adjacent ranks across two or more nodes, EP within the measured 16-64, the network
    400 Gb/s a GPU."""
    return (dispatcher == "hybridep" and not hybridep_applies(dispatcher, lay, topo)
            and _whole_nodes_within(lay, topo, HYBRIDEP_INTERNODE_H100))


def _padded_share(arch: Architecture, lay: Layout, tokens: int | None = None) -> float:
    """Rows an all-to-all sends under the layout's capacity factor over the dropless ``T x
    top-k`` (``E x capacity / (T x top-k)``, Megatron's drop-and-pad); 1 when dropless."""
    if lay.moe_capacity_factor is None or not arch.num_experts:
        return 1.0
    if tokens is None:
        tokens = lay.batch * (lay.seq // lay.cp)
    k = max(1, arch.experts_per_token)
    return ep_exchange(tokens, arch.num_experts, k, 1, 1, lay.ep,
                       lay.moe_capacity_factor).rows / (tokens * k)


def tp_collectives_s(act_bytes: float, n: int, topo: Topology, eff: Efficiency,
                     gather_bytes: float | None = None) -> float:
    """One TP all-reduce's worth of a layer's collectives (an all-reduce, or under sequence
    parallelism the all-gather and the reduce-scatter it splits into) of ``act_bytes`` over ``n``
    ranks. ``gather_bytes``: what the all-gather moves where it is narrower than the
    reduce-scatter -- torchao's Float8 TP styles under a tensor-wise recipe (the engine's
    ``tp_narrow_gather``: torchtitan) gather float8 (the layer input cast to e4m3 before its
    all-gather, the output gradient to e5m2 before the backward's) and reduce-scatter the
    16-bit outputs and input gradients: a reduce-scatter of ``act_bytes`` and an all-gather of
    ``gather_bytes``. None: one all-reduce of ``act_bytes`` (as before)."""
    if gather_bytes is None:
        return collective_time("all-reduce", act_bytes, n, topo, efficiency=eff.comm)
    return (collective_time("reduce-scatter", act_bytes, n, topo, efficiency=eff.comm)
            + collective_time("all-gather", gather_bytes, n, topo, efficiency=eff.comm))


def async_tp_exposed_s(cost: MicroCost, lay: Layout, topo: Topology, eff: Efficiency,
                       act_bytes: float, gather_bytes: float | None = None) -> float:
    """One layer's exposed TP communication under PyTorch's AsyncTP (micro-pipelined TP).

    Inductor's ``micro_pipeline_tp_pass`` (torch/_inductor/fx_passes/micro_pipeline_tp.py)
    rewrites only two patterns: an all-gather whose output feeds matmuls
    (``fuse_all_gather_matmul`` -> ``symm_mem.fused_all_gather_matmul``) and a reduce-scatter
    of one matmul's output (``fuse_matmul_reduce_scatter`` ->
    ``symm_mem.fused_matmul_reduce_scatter``). Each is decomposed into TP pieces: the matmul on
    the local shard runs while the next shard arrives, so a collective hides only under *its
    own* GEMM, never under attention, norms or the other GEMMs of the layer: with ``n`` ranks
    the first (last) piece has nothing to overlap, and the exposed time is
    ``max(0, c - g (n - 1) / n)`` for a collective of ``c`` seconds beside a GEMM of ``g``.
    Per layer and pass the four of Megatron's split with sequence parallelism (all-gather ->
    QKV, out-proj -> reduce-scatter, all-gather -> up, down -> reduce-scatter); the backward
    mirrors them (each reduce-scatter's gradient is an all-gather before the input-gradient
    GEMM and the reverse), beside the dgrad GEMMs; full checkpointing repeats the forward.
    Measured in torchtitan (discuss.pytorch.org/t/209487, Sep 2024: "Up to ~29% forward pass
    speedup and ~8% E2E speedup in Llama3 7B", "Up to ~20% forward pass speedup and ~8% E2E
    speedup in Llama3 70B") -- far from the collectives' whole share.

    ``gather_bytes``: the all-gathers' bytes where narrower than ``act_bytes`` (torchao's Float8
    TP styles, :func:`tp_collectives_s`): the forward's all-gathers (before QKV and the MLP's
    up) and the backward's (the output gradients', before the out-proj's and down's dgrad)
    move them; the reduce-scatters ``act_bytes``."""
    n = lay.tp
    ag = collective_time("all-gather", act_bytes if gather_bytes is None else gather_bytes, n,
                         topo, efficiency=eff.comm)
    rs = collective_time("reduce-scatter", act_bytes, n, topo, efficiency=eff.comm)

    def exposed(comm: tuple[float, ...], gemms: tuple[float, ...]) -> float:
        g = tuple(gemms) + (0.0,) * (4 - len(gemms))
        return sum(max(0.0, c - w * (n - 1) / n) for c, w in zip(comm, g))

    fwd = exposed((ag, rs, ag, rs), cost.tp_gemm_fwd_s)
    passes = fwd * (2 if lay.checkpointing == "full" else 1)
    # backward: each forward all-gather's gradient is a reduce-scatter and the reverse
    return passes + exposed((rs, ag, rs, ag), cost.tp_gemm_bwd_s)


def torch_cp_exposed_s(cost: MicroCost, lay: Layout, topo: Topology, eff: Efficiency,
                       kv_bytes: float, act: int) -> float:
    """One layer's exposed K/V exchange under PyTorch's context parallel with the all-gather
    rotater (torch.distributed.tensor.experimental._attention: ``_templated_ring_attention``
    and its backward; torchtitan@9dec370 config_manager.py:
    ``--experimental.context_parallel_rotate_method`` "allgather" by default, "all-gather all
    kv shards on ranks after the first sub-SDPA computation").

    Forward (and the recompute under full checkpointing): one all-gather of every rank's K and
    V (``CP x kv_bytes``), issued before step 0 and waited for at step 1, so it hides under the
    first sub-SDPA only -- one of the ``CP`` equal steps of the round-robin split (step 0 the
    causal local block, each later one half a full block). Backward: the same all-gather beside
    step 0's backward, and the K/V gradients passed round the ring by an all-to-all
    (``dkv_rotater``, ``_RotateMethod.ALL_TO_ALL``) in fp32 (``convert_to_f32``: ``4 / act``
    times the K/V bytes) after every step, each waited for after the next step's sub-SDPA
    backward; the last one is waited for at once, exposed.

    Where the ring is traced into the compiled block (``cost.cp_traced``,
    :func:`torch_cp_traced`) each collective is waited for where it is issued: every
    all-gather (forward, recompute, backward) and all ``CP`` K/V-gradient exchanges exposed."""
    n = lay.cp
    gather = collective_time("all-gather", n * kv_bytes, n, topo, stride=lay.tp,
                             efficiency=eff.comm)
    full = lay.checkpointing == "full"
    fwd_step = cost.attn_fwd_s / n
    bwd_step = max(0.0, cost.attn_bwd_s - (cost.attn_fwd_s if full else 0.0)) / n
    passes = 2 if full else 1
    dkv = collective_time("send-recv", kv_bytes * 4 / act, 2, topo, stride=lay.tp,
                          efficiency=eff.comm)
    if cost.cp_traced:
        return (passes + 1) * gather + n * dkv
    fwd = passes * max(0.0, gather - fwd_step)
    bwd = max(0.0, gather - bwd_step) + (n - 1) * max(0.0, dkv - bwd_step) + dkv
    return fwd + bwd


def ep_all_to_all_s(arch: Architecture, tokens: int, lay: Layout, topo: Topology,
                    eff: Efficiency, act: int) -> float:
    """One forward's expert-parallel exchange on a rank holding ``tokens``: per MoE layer a
    dispatch (each token's hidden state to the ranks of its top-k experts) and a combine (the
    expert outputs back), each an all-to-all of ``tokens x top-k x hidden`` elements over the EP
    group, on the topology's links (NVLink inside a node, the inter-node network past it:
    :func:`~gpuplan.hardware.topology.collective_time`). Exposed (not overlapped); not validated
    against a measured EP step."""
    moe = _moe_layers(arch)
    if lay.ep <= 1 or not moe:
        return 0.0
    nbytes = (tokens * max(1, arch.experts_per_token) * arch.hidden_size * act
              * _padded_share(arch, lay, tokens))
    return 2 * moe * collective_time("all-to-all", nbytes, lay.ep, topo, stride=lay.expert_tp,
                                     efficiency=eff.comm)


def zero3_gathers(sharding: str, checkpointing: str, model: Model | Architecture | None = None,
                  *, max_live: int | None = None, prefetch_bucket: int | None = None) -> float:
    """All-gathers of the weights per micro-batch under ZeRO-3, in whole-model units.

    FSDP: 2, forward and backward. It skips the release in a forward recomputed inside backward
    (torch ``_runtime_utils._post_forward``: ``BACKWARD_PRE``; FSDP2
    ``FSDPParamGroup.post_forward``: ``is_bw()``), so its backward uses the recompute's gather.

    DeepSpeed, given a ``model`` with its tensor list: what its parameter coordinator fetches in
    a step (:func:`gpuplan.engines.zero3.deepspeed_gathered`, ``Gathered.gathers``) under the
    ``stage3_*`` settings given (its defaults otherwise) -- every parameter in forward and again
    in backward, and once more for a checkpointed layer's recompute (its hooks release after
    every forward call, the recompute's included), except where the reuse distance (1e9
    elements) keeps a parameter gathered from one use to the next: a model under ~5e8
    parameters is gathered once a step; a 175B GPT with full checkpointing 2.66 times, its MLP
    weights kept from recompute to backward. DeepSpeed itself on the CPU checks the count
    (tests/integration/test_zero3_deepspeed_oracle.py). Without tensors: 2, or 3 with full
    checkpointing, the count before the reuse distance. Under a TP or PP layout the whole
    model's count stands for each rank's: a rank's TP-split modules are smaller, so as many or
    more of them stay within the reuse distance (the traffic is, if anything, overstated)."""
    full = checkpointing == "full"
    if sharding != "deepspeed":
        return 2.0
    if isinstance(model, Model):
        g = deepspeed_gathered(model, full, max_live=max_live or MAX_LIVE,
                               prefetch_bucket=prefetch_bucket or PREFETCH_BUCKET)
        if g is not None and g.partitioned:
            return g.gathers
    return 3.0 if full else 2.0


def _dp_comm(grad_bytes: float, lay: Layout, topo: Topology, eff: Efficiency,
             window_s: float, gather_bytes: float | None = None,
             sm_share: float = 0.0, reduce_bytes: float | None = None,
             backward_s: float | None = None, edge_share: float = 0.0) -> tuple[float, float]:
    """(all of it, exposed) of the data-parallel gradient (and ZeRO-3 weight) traffic. ZeRO-3
    gathers the weights (forward, backward) and reduce-scatters the gradients for every
    micro-batch -- resharded after each backward (DeepSpeed stage 3; FSDP's default) -- so its
    1.5 all-reduces' bytes come once per micro-batch, overlapped with the whole step; 2 with
    DeepSpeed and full checkpointing, less where its reuse distance keeps weights gathered
    (:func:`zero3_gathers`, ``lay.weight_gathers``). ``gather_bytes``: the bytes of the weights'
    all-gather where they differ from the gradients' (FP8 param gather: 1 byte an element for
    the narrow weights); ZeRO-1/2 then reduce-scatter the gradients and all-gather those bytes,
    half an all-reduce each. None: the same bytes as the gradients. ``sm_share``: the share of
    the SMs the overlapped collectives hold (:func:`~.efficiency.overlap_sm_share`): the compute
    beside their hidden stretch runs that much slower, which the exposed time carries.
    ``reduce_bytes``: the bytes of the gradients' reduce-scatter where the engine reduces in
    another dtype than it keeps them (FSDP2's ``reduce_dtype`` fp32 under torchtitan's
    mixed precision: 4 bytes an element); None: ``grad_bytes``. Under hybrid sharding
    (``lay.replicas`` > 1) :func:`_hsdp_comm`; ``backward_s`` is then the stretch that hides the
    replicas' all-reduce (None: ``window_s``). ``edge_share``: the share of the bytes in FSDP's
    units that nothing hides (:func:`fsdp_edge_share`): their all-gather starts each
    micro-batch and their reduce-scatter ends it, exposed whatever the window; 0: one bucket's
    all-reduce (DDP's last bucket) is the least exposed."""
    n = lay.dp * lay.cp
    if n == 1 or grad_bytes <= 0:
        return 0.0, 0.0
    g = grad_bytes if gather_bytes is None or lay.zero == 0 else gather_bytes
    r = grad_bytes if reduce_bytes is None or lay.zero == 0 else reduce_bytes
    gathers = 1.0
    per_mb = 1
    if lay.zero == 3:
        gathers = (lay.weight_gathers if lay.weight_gathers is not None
                   else zero3_gathers(lay.sharding, lay.checkpointing))
        per_mb = lay.micro_batches
        if lay.replicas > 1:
            return _hsdp_comm(g, r, gathers, lay, topo, eff, window_s,
                              window_s if backward_s is None else backward_s, sm_share,
                              edge_share)
    # in all-reduces of the gradients: (1 + gathers) / 2 a micro-batch under ZeRO-3, 1 otherwise
    factor = (r + gathers * g) / (2 * grad_bytes) * per_mb
    full = factor * collective_time("all-reduce", grad_bytes, n, topo, stride=lay.tp,
                                    efficiency=eff.comm)
    last = collective_time("all-reduce", min(BUCKET_BYTES, grad_bytes), n, topo, stride=lay.tp,
                           efficiency=eff.comm)
    if lay.zero == 3 and edge_share > 0:  # FSDP's first units' gather, last units' scatter
        last = per_mb * _edge_s(g * edge_share, r * edge_share, n, lay, topo, eff)
    if lay.zero == 3 and not lay.gather_overlap:  # the gathers serial, the reduce-scatter not
        # the gathers' share of the traffic (``g`` bytes each) and the gradients' reduce-scatter;
        # waited-for gathers run at least at DeepSpeed 2021's measured serial rate
        gather = full * gathers * g / (grad_bytes + gathers * g)
        rs = full - gather
        serial = max(gather, gathers * lay.micro_batches * g * (n - 1) / n
                     / SERIAL_GATHER_BUS_BPS)
        tail = max(rs - window_s, last)
        return serial + rs, serial + tail + sm_share * max(0.0, rs - tail)
    if lay.zero in (1, 2) and not lay.gather_overlap:
        return full, zero1_sync_gather_exposed_s(full, g, r, window_s, last, sm_share)
    tail = max(full - window_s, last)
    return full, tail + sm_share * max(0.0, full - tail)


def zero1_sync_gather_exposed_s(full: float, gather_bytes: float, reduce_bytes: float,
                                window_s: float, last: float, sm_share: float) -> float:
    """The exposed data-parallel time of a ZeRO-1/2 step whose weights' all-gather is not
    overlapped (Megatron-Core's distributed optimizer without ``overlap_param_gather``: "If not
    overlapping all-gather for parameters, launch synchronous all-gather communication calls
    here", ``start_param_sync`` for every model chunk after the update --
    megatron/core/optimizer/distrib_optimizer.py ``step`` at
    NVIDIA/Megatron-LM@0d8e0714cd29c01e164fe6de9f532182bdffa942, lines 2593-2599): ``full``
    carries the reduce-scatter and the all-gather, half an all-reduce each at their bytes
    (``reduce_bytes``, ``gather_bytes``); the all-gather's share is exposed whole, the
    reduce-scatter still hides in the backward (``window_s``) but for its tail (``last``)."""
    gather = full * gather_bytes / (reduce_bytes + gather_bytes)
    rs = full - gather
    tail = max(rs - window_s, last) if rs > 0 else 0.0
    return gather + tail + sm_share * max(0.0, rs - tail)


def fsdp_edge_share(arch: Architecture, lay: Layout, stage_layers: int, total: int) -> float:
    """The share of a rank's parameters in the FSDP units no compute hides: the root unit (the
    embedding, the head where untied) and one block, whose all-gather starts a micro-batch's
    forward and whose reduce-scatter ends its backward -- "the first block during forward pass
    and the last block during backward pass are not able to overlap" (the IBM/PyTorch FSDP
    post, https://pytorch.org/blog/maximizing-training/, 2024-03-13, appendix); the root's
    parameters stay gathered from forward into backward (FSDP1 ``_post_forward_reshard``: not
    the root; FSDP2's root ``post_forward_mesh_info`` None), so its gather is the first and
    its reduce-scatter (the embedding's gradient, the last computed) the last. Under a pipeline
    a stage's one block (its ends are another stage's). ``total``: the model's parameters.
    0 where not FSDP's ZeRO-3."""
    if lay.zero != 3 or lay.sharding != "fsdp2" or stage_layers < 1:
        return 0.0
    if lay.pp > 1:
        return 1.0 / stage_layers
    root = arch.vocab_size * arch.hidden_size * (1 if arch.tie_word_embeddings else 2)
    if total <= root:
        return 1.0
    return (root + (total - root) / arch.num_layers) / total


def _edge_s(gather_bytes: float, reduce_bytes: float, n: int, lay: Layout, topo: Topology,
            eff: Efficiency) -> float:
    """The edge units' all-gather and reduce-scatter over the ``n`` ranks of the shard group
    (``tp`` apart): exposed at the ends of a micro-batch (:func:`fsdp_edge_share`)."""
    return (collective_time("all-gather", gather_bytes, n, topo, stride=lay.tp,
                            efficiency=eff.comm)
            + collective_time("reduce-scatter", reduce_bytes, n, topo, stride=lay.tp,
                              efficiency=eff.comm))


def fsdp2_reduce_width(sharding: str, zero: int, fsdp2_reduce_bytes: int) -> int:
    """Bytes an element of the gradients' reduce-scatter moves in FSDP2's reduce dtype, where
    the engine's is timed (``fsdp2_reduce_bytes``: torchtitan's ``reduce_dtype`` fp32) and FSDP
    shards them (ZeRO-2/3); 0: the gradients' own width. One rule for the layout path
    (:func:`_reduce_bytes`) and the data-parallel one (``speed._dp_scaling``)."""
    return fsdp2_reduce_bytes if fsdp2_reduce_bytes and sharding == "fsdp2" and zero >= 2 else 0


def _reduce_bytes(lay: Layout, elements: float, fsdp2_reduce_bytes: int) -> float | None:
    """The gradients' reduce-scatter bytes in FSDP2's reduce dtype (:func:`fsdp2_reduce_width`);
    None: the gradients' own bytes."""
    width = fsdp2_reduce_width(lay.sharding, lay.zero, fsdp2_reduce_bytes)
    return elements * width if width else None


def _stage_dp_comm(grad_bytes: float, lay: Layout, topo: Topology, eff: Efficiency,
                   window_s: float, gather_bytes: float | None, sm_share: float,
                   reduce_bytes: float | None, backward_s: float, edge_share: float,
                   after_backward_s: float | None) -> tuple[float, float]:
    """:func:`_dp_comm` of a stage, with ZeRO-1/2's reduce-scatter issued only after the stage's
    last backward where ``after_backward_s`` is given (:func:`_pipeline_sync`: the rank's other
    chunks' backward that still hides theirs; :func:`pipeline_reduce_exposed_s`)."""
    full, exposed = _dp_comm(grad_bytes, lay, topo, eff, window_s, gather_bytes, sm_share,
                             reduce_bytes, backward_s, edge_share)
    if after_backward_s is None or lay.zero not in (1, 2) or full <= 0:
        return full, exposed
    g = grad_bytes if gather_bytes is None else gather_bytes
    r = grad_bytes if reduce_bytes is None else reduce_bytes
    return full, pipeline_reduce_exposed_s(full, g, r, lay.chunks, after_backward_s, window_s,
                                           sm_share, lay.gather_overlap)


def _pipeline_sync(lay: Layout, mine: float, prec: PrecisionLayout, device: Device,
                   eff: Efficiency, reduce_bytes: int, pp_grad_reduce: str,
                   chunk_bwd_s: float) -> tuple[float | None, float]:
    """(the backward that hides the earlier chunks' reduce-scatters, or None where the
    gradients are reduced beside the last backward as usual; the step's accumulation time) of
    a pipeline stage holding ``mine`` parameters a GPU under ``pp_grad_reduce``
    (:attr:`gpuplan.engines.profiles.EngineProfile.pp_grad_reduce`). Under
    ``after-last-backward`` with ZeRO-1/2 over more than one rank: the last chunk's last round
    of backwards (ScheduleInterleaved1F1B's ``microbatches_per_round``, ``m // max(1, m //
    pp)`` micro-batches of one chunk; ``chunk_bwd_s`` the stage's backward of one micro-batch,
    all its chunks) runs after the other chunks' last backward and hides their reduce-scatters
    (the earliest chunks' get more: one round is the least), and the gradients accumulate in
    FSDP2's reduce dtype (``reduce_bytes``; none where it is the gradients' own:
    :func:`pipeline_accumulate_bytes`) at the memory rate."""
    if (pp_grad_reduce != "after-last-backward" or lay.pp == 1 or lay.zero not in (1, 2)
            or lay.dp * lay.cp <= 1):
        return None, 0.0
    m = lay.micro_batches
    hide = m // max(1, m // lay.pp) * chunk_bwd_s / lay.chunks
    nbytes = (pipeline_accumulate_bytes(mine, m, prec.grad, reduce_bytes)
              if reduce_bytes > prec.grad else 0.0)
    return hide, nbytes / (device.memory_bandwidth * eff.memory)


def pipeline_accumulate_bytes(elements: float, micro_batches: int, grad_bytes: float,
                              reduce_bytes: float) -> float:
    """The step's memory traffic (bytes) of FSDP2's unsharded gradient accumulation on a
    pipeline stage whose gradient sync is off until the last backward (torch.distributed.
    pipelining's stage), on a rank holding ``elements`` parameters unsharded, where the reduce
    dtype (``reduce_bytes``) is wider than the gradients (``grad_bytes``). torch/distributed/
    fsdp/_fully_shard/_fsdp_param_group.py ``post_backward`` with ``reduce_grads`` False: each
    parameter's ``accumulate_unsharded_grad_if_needed`` (``unsharded_accumulated_grad +=
    unsharded_param.grad``: the fp32 sum read and written, the 16-bit gradient read) and then
    ``to_accumulated_grad_if_needed`` (the first micro-batch's gradient cast to the reduce
    dtype: read and written), on the compute stream in each backward; and at the reduce, the
    chunk-cat reads the fp32 sum where :func:`fsdp2_copy_bytes` counts the 16-bit gradient."""
    first = grad_bytes + reduce_bytes
    later = (micro_batches - 1) * (2 * reduce_bytes + grad_bytes)
    return elements * (first + later + reduce_bytes - grad_bytes)


def pipeline_reduce_exposed_s(full: float, gather_bytes: float, reduce_bytes: float,
                              chunks: int, hide_s: float, window_s: float,
                              sm_share: float = 0.0, gather_overlap: bool = True) -> float:
    """The exposed part of a pipeline stage's ZeRO-1/2 traffic (``full`` seconds: the
    gradients' reduce-scatter, ``reduce_bytes``, and the weights' all-gather,
    ``gather_bytes``) when the reduce-scatter is issued after the stage's last backward:
    torch.distributed.pipelining's ``backward_maybe_with_nosync`` runs the last micro-batch's
    backward with FSDP's gradient sync off and then calls ``post_backward`` on every FSDP
    param group of the stage (``run_post_backward``; ``_root_post_backward_final_callback``
    makes the compute stream wait for the reduce-scatters before the optimizer step). The
    last chunk's share (``1 / chunks``) runs beside nothing; the earlier chunks' beside
    ``hide_s`` of the last chunk's backwards. The all-gather (at the next step's first
    forward, FSDP2's prefetch) hides under ``window_s`` as before, unless not
    ``gather_overlap``; the hidden traffic slows the compute beside it by ``sm_share``."""
    rs = full * reduce_bytes / (reduce_bytes + gather_bytes)
    ag = full - rs
    tail = rs / chunks + max(0.0, rs * (chunks - 1) / chunks - hide_s)
    tail += max(0.0, ag - window_s) if gather_overlap else ag
    return tail + sm_share * max(0.0, full - tail)


def _hsdp_comm(gather_bytes: float, reduce_bytes: float, gathers: float, lay: Layout,
               topo: Topology, eff: Efficiency, window_s: float, backward_s: float,
               sm_share: float, edge_share: float = 0.0) -> tuple[float, float]:
    """(all of it, exposed) of ZeRO-3's traffic under hybrid sharding: per micro-batch
    ``gathers`` all-gathers of the weights and one reduce-scatter of the gradients inside the
    shard group (``lay.zero_group`` ranks ``tp`` apart: a node's NVLink when it fits there),
    then each rank's gradient shard all-reduced across the ``lay.replicas`` groups (ranks
    ``tp x shard group`` apart: the network, one GPU of each node). torch FSDP1
    ``_runtime_utils._post_backward_reshard``/``_reduce_grad`` (HYBRID_SHARD: the reduce-scatter,
    then ``dist.all_reduce`` of the shard over ``_inter_node_pg`` on the same stream) and FSDP2's
    2-D mesh (``foreach_reduce``: reduce-scatter over the shard mesh, all-reduce over the
    replicate mesh) do the same. The gathers and the reduce-scatter hide beside the step's
    compute (``window_s``); the all-reduce runs in the backward only (``backward_s``), "no
    inter-node traffic during the pre-fetch stage for forward pass" (the IBM/PyTorch FSDP
    post, https://pytorch.org/blog/maximizing-training/, 2024-03-13, appendix); the last
    bucket's all-reduce stays exposed, or with ``edge_share`` (:func:`fsdp_edge_share`) the
    first units' gather and the last units' reduce-scatter and all-reduce."""
    n, stride = lay.zero_group, lay.tp
    ag = collective_time("all-gather", gather_bytes, n, topo, stride=stride, efficiency=eff.comm)
    rs = collective_time("reduce-scatter", reduce_bytes, n, topo, stride=stride,
                         efficiency=eff.comm)
    shard = reduce_bytes / n
    ar = collective_time("all-reduce", shard, lay.replicas, topo, stride=stride * n,
                         efficiency=eff.comm)
    last = collective_time("all-reduce", min(BUCKET_BYTES, shard), lay.replicas, topo,
                           stride=stride * n, efficiency=eff.comm)
    m = lay.micro_batches
    if edge_share > 0:
        last = m * (_edge_s(gather_bytes * edge_share, reduce_bytes * edge_share, n, lay, topo,
                            eff) + collective_time("all-reduce", shard * edge_share,
                                                   lay.replicas, topo, stride=stride * n,
                                                   efficiency=eff.comm))
    full = m * (gathers * ag + rs + ar)
    tail = max(full - window_s, m * ar - backward_s, last)
    return full, tail + sm_share * max(0.0, full - tail)


def _bubble_s(lay: Layout, per_mb: float, stage_layers: int, cost: MicroCost) -> float:
    """The pipeline's idle time a step: (pp - 1) / chunks micro-batches for 1F1B and the
    interleaved schedule, DualPipe's own (:func:`dualpipe_bubble_s`) for a dual layout."""
    if lay.dual:
        return dualpipe_bubble_s(lay.pp, per_mb, stage_layers * cost.layer_bwd_s,
                                 stage_layers * cost.wgrad_s)
    return (lay.pp - 1) / lay.chunks * per_mb


def layout_time(arch: Architecture, cost: MicroCost, lay: Layout, topo: Topology, *,
                device: Device, eff: Efficiency, prec: PrecisionLayout, params: int,
                flops_per_token: float, state_bytes_per_param: float, tp_overlap: bool = False,
                optimizer_s: Callable[[int, float], float] | None = None, repeat_kv: bool = False,
                tp_overlap_kind: str = "userbuffers", cp_rotate: str = "p2p",
                gather_bytes_per_element: float | None = None, tp_gather_bytes: float | None = None,
                fsdp2_reduce_bytes: int = 0, p2p_overlap: str = "none",
                ep_dispatcher: str = "alltoall", fsdp1_grad_cat: bool = False,
                pp_grad_reduce: str = "overlapped") -> LayoutTime:
    """The step of ``lay`` from one micro-batch's ``cost`` (see the module docstring).
    ``optimizer_s(elements, share)``: the optimizer stretch of a rank's shard of ``elements``, its
    stage holding ``share`` of the parameters (:func:`~.step.optimizer_stretch_s`); None: one fused
    pass (the cluster search's). ``gather_bytes_per_element``: a gathered weight element's mean
    bytes where gathered narrow (:func:`gpuplan.fp8.gathered_bytes_per_element`); None: as the
    gradients. ``tp_overlap_kind``: ``"userbuffers"`` (Megatron-Core's --tp-comm-overlap) or
    ``"async-tp"`` (:func:`async_tp_exposed_s`). ``cp_rotate``: ``p2p`` (a send/recv ring) or
    ``allgather`` (:func:`torch_cp_exposed_s`). ``repeat_kv``: the engine's SDPA takes K and V at
    the query heads. ``fsdp2_reduce_bytes``: FSDP2's reduce dtype, its copies timed
    (:func:`fsdp2_copy_bytes`; 0: not), or ``fsdp1_grad_cat`` (:func:`fsdp1_grad_cat_bytes`).
    ``p2p_overlap``: ``none`` or ``interleaved`` (:func:`interleaved_p2p_exposed_s`);
    ``pp_grad_reduce``: the stages' gradient sync (:func:`_pipeline_sync`); ``tp_gather_bytes``:
    a TP all-gather's bytes an element (:func:`tp_collectives_s`)."""
    one = _comm_per_micro_batch(
        arch, cost, lay, topo, eff, prec.act, 1, tp_overlap=tp_overlap, cp_rotate=cp_rotate,
        tp_overlap_kind=tp_overlap_kind, repeat_kv=repeat_kv, tp_gather_bytes=tp_gather_bytes,
        ep_dispatcher=ep_dispatcher)
    stage_layers, t_mb, held = _busiest_stage(arch, cost, lay, sum(one))
    tp_c, cp_c, ep_c = (c * stage_layers for c in one)
    tp_c += delayed_amax_reduce_s(cost, lay, topo, eff, prec, stage_layers)
    ep_c -= stage_layers * _shared_hidden_s(lay, one[2], cost)
    m = lay.micro_batches
    overlapped = p2p_overlap == "interleaved" and lay.chunks > 1 and not lay.dual
    ep_c, pp_c = _pipeline_sends(arch, lay, topo, eff, prec.act, ep_c, t_mb, overlapped,
                                 ep_overlap_sm_share(ep_dispatcher, device), _tail_s(cost, lay))
    mine = stage_params(arch, params, lay) * (2 if lay.dual else 1) + mtp_rank_params(arch, lay)
    hide, accum = _pipeline_sync(lay, mine, prec, device, eff, fsdp2_reduce_bytes,
                                 pp_grad_reduce, stage_layers * cost.layer_bwd_s)
    per_mb = t_mb + tp_c + cp_c + ep_c + accum / m  # the accumulation: in each backward
    bubble = _bubble_s(lay, per_mb, stage_layers, cost)
    window = (m * t_mb if lay.zero == 3 else stage_layers * cost.layer_bwd_s)
    dp_full, dp_exp = _stage_dp_comm(
        mine * prec.grad, lay, topo, eff, window, None if gather_bytes_per_element is None
        else mine * gather_bytes_per_element, nccl_sm_share(device),
        _reduce_bytes(lay, mine, fsdp2_reduce_bytes), m * stage_layers * cost.layer_bwd_s,
        fsdp_edge_share(arch, lay, stage_layers, params), hide)
    local = max(1, mine // (lay.zero_group if lay.zero >= 1 else 1))  # the optimizer's shard
    opt_s = (_optimizer_s(local, state_bytes_per_param, device, eff, prec) if optimizer_s is None
             else optimizer_s(local, mine / max(1, params + mtp_params(arch, lay.mtp_layers))))
    copy_s = accum + _layout_copy_s(lay, mine, prec, device, eff, gather_bytes_per_element,
                                    fsdp2_reduce_bytes, fsdp1_grad_cat)
    casts = cost.stage_casts_s(held, stage_layers - len(held))  # once a step, not per micro-batch
    return LayoutTime(
        layout=lay, stage_layers=stage_layers, compute_s=m * t_mb + casts, bubble_s=bubble,
        tp_comm_s=m * tp_c, cp_comm_s=m * cp_c, ep_comm_s=m * ep_c, pp_comm_s=pp_c,
        dp_comm_s=dp_full, dp_exposed_s=dp_exp, optimizer_s=opt_s,
        tokens_per_step=lay.batch * m * lay.dp * lay.seq,
        model_flops_per_token=flops_per_token + mtp_flops_per_token(arch, lay.seq, lay.mtp_layers),
        peak_flops=device.peak(prec.dtype),
        hardware_flops_per_gpu=m * cost.hardware_flops * stage_layers / arch.num_layers,
        topology=topo, fsdp_copy_s=copy_s, p2p_overlapped=overlapped and lay.pp > 1)


def _layout_copy_s(lay: Layout, mine: float, prec: PrecisionLayout, device: Device,
                   eff: Efficiency, gather_bytes_per_element: float | None,
                   reduce_bytes: int, fsdp1_grad_cat: bool = False) -> float:
    """FSDP2's copies of a step on a rank of ``lay`` holding ``mine`` parameters of its stage
    (:func:`fsdp2_copy_bytes`), or FSDP1's gradient cat (``fsdp1_grad_cat``:
    :func:`fsdp1_grad_cat_bytes`), at the memory rate; 0 where not timed or nothing is
    sharded."""
    if not (reduce_bytes or fsdp1_grad_cat) or lay.zero < 2 or lay.dp * lay.cp <= 1:
        return 0.0
    gathers = (lay.weight_gathers if lay.weight_gathers is not None
               else zero3_gathers(lay.sharding, lay.checkpointing))
    nbytes = sharded_copy_bytes(
        mine, fsdp1_grad_cat=fsdp1_grad_cat, zero=lay.zero, micro_batches=lay.micro_batches,
        gathers=gathers, gathered_bytes=(prec.weight_store if gather_bytes_per_element is None
                                         else gather_bytes_per_element),
        grad_bytes=prec.weight_store, reduce_bytes=reduce_bytes)
    return nbytes / (device.memory_bandwidth * eff.memory)


def _pipeline_sends(arch: Architecture, lay: Layout, topo: Topology, eff: Efficiency, act: int,
                    ep_c: float, t_mb: float, overlapped: bool = False,
                    sm_share: float = 0.0, tail_s: float = 0.0) -> tuple[float, float]:
    """(exposed EP all-to-all of a micro-batch, the step's exposed pipeline p2p): each
    micro-batch sends its activations forward and their gradients back once per chunk
    (blocking); DualPipe runs a micro-batch's all-to-alls and sends beside the paired chunk's
    compute ``t_mb``, exposed only what outlasts it (carried by the all-to-all's share).
    ``overlapped``: the interleaved schedule's sends beside compute
    (:func:`interleaved_p2p_exposed_s`). ``sm_share``: the SMs the EP overlap's hidden
    all-to-all kernels hold (:func:`ep_overlap_sm_share`). ``tail_s``: what a merged
    iteration of the EP overlap runs after posting its sends (:func:`interleaved_p2p_exposed_s`).

    Every boundary is timed as the slowest one: a chain of stages that spans nodes while its
    first pair shares one (TP1 PP4 DP4 on 16 GPUs of 8 a node: 0-4 NVLink, 4-8 the network) sends
    every micro-batch across the network at its middle boundary, and the pipeline moves at its
    slowest hop (qa42 found the first pair's hop timed for all of them)."""
    p2p_bytes = lay.batch * (lay.seq // lay.cp) * arch.hidden_size * act
    if lay.sequence_parallel:
        p2p_bytes /= lay.tp
    if lay.ep_overlap and not lay.dual:
        ep_c = ep_overlap_exposed_s(ep_c, t_mb, lay, sm_share)
    if lay.pp == 1:
        return ep_c, 0.0
    hop = collective_time("send-recv", p2p_bytes, 2, topo, stride=_pp_stride(lay, topo),
                          efficiency=eff.comm)
    if lay.dual:
        return max(0.0, ep_c + 2 * hop - t_mb), 0.0
    if overlapped:
        return ep_c, interleaved_p2p_exposed_s(hop, t_mb, lay, tail_s)
    return ep_c, 2 * lay.chunks * lay.micro_batches * hop


def _tail_s(cost: MicroCost, lay: Layout) -> float:
    """What the EP overlap's merged iteration runs after posting its pipeline sends: the first
    layer's delayed attention weight gradient (QKV and the output projection; timed as their
    dgrad halves, the same FLOPs) (:func:`interleaved_p2p_exposed_s`); 0 without the overlap."""
    return sum(cost.tp_gemm_bwd_s[:2]) if lay.ep_overlap else 0.0


def interleaved_p2p_exposed_s(hop: float, t_mb: float, lay: Layout, tail_s: float = 0.0) -> float:
    """The step's exposed pipeline p2p under Megatron's interleaved schedule with
    ``overlap_p2p_comm`` (megatron/core/pipeline_parallel/schedules.py
    forward_backward_pipelining_with_interleaving, NVIDIA/Megatron-LM@d98e8a64): ``hop`` one
    send/recv of a chunk's activations (or their gradients), ``t_mb`` one micro-batch through
    the stage (all its chunks, forward and backward). The warm-up forwards and the cool-down
    backwards send blocking (``send_forward_recv_forward`` without ``overlap_p2p_comm`` unless
    ``overlap_p2p_comm_warmup_flush``, off by default); there are ``(pp - 1) x 2 + (chunks -
    1) x pp`` of each on the first stage (``num_warmup_microbatches`` with
    ``microbatch_group_size_per_vp_stage`` at its default, pp), at most the step's ``micro_batches
    x chunks``. Each steady-state 1F1B iteration posts its forward send (``pp_post_forward``)
    before its backward chunk and its backward send before the next forward chunk and waits
    for them only in ``pp_pre_forward`` / ``pp_pre_backward``, so its two hops run beside one
    chunk's forward and backward (``t_mb / chunks``), exposed only what outlasts them.

    Under the batch-level EP overlap (``lay.ep_overlap``) the steady state is
    ``combined_1f1b_schedule_for_interleaved_pipelining`` instead (``forward_backward_helper_
    wrapper``, schedules.py line 1302 at NVIDIA/Megatron-LM@0d8e0714, the 25.11 pin; line 1322
    at @b0cc2706, the 26.02 pin), whose merged iteration of a forward chunk and a backward chunk
    (``TransformerModelChunkSchedulePlan.run``, megatron/core/models/common/
    model_chunk_schedule_plan.py there) waits for both receives first (``pre_forward``,
    ``pre_backward``) and posts both sends last (``post_forward``, ``post_backward``), with
    only the first layer's delayed attention weight gradient (``tail_s``) after them. A
    chunk's forward on a stage then needs what the stage before sent at the end of its own
    iteration: round the ring of ``pp`` stages (a micro-batch's next chunk comes ``pp``
    forwards later on the first stage, and each stage's warm-up runs 2 forwards fewer than the
    one before) the ``pp`` iterations carry ``pp`` hops, so each steady iteration waits
    ``max(0, hop - tail_s)``, whatever its length; the warm-up is one forward longer
    (``get_pp_rank_microbatches``' + 1 for the overlap), and where a stage's merged
    iterations meet its neighbour's blocking warm-up and cool-down sends, 2 (pp - 1) of
    those on the step's critical path hide ``min(hop, tail_s)`` each behind the tail (the
    schedule's dependencies, simulated event by event in tests/unit/test_p2p_overlap.py,
    give this form exactly)."""
    passes = lay.micro_batches * lay.chunks
    combined = lay.ep_overlap and lay.pp > 1
    lone = min(passes, (lay.pp - 1) * 2 + (lay.chunks - 1) * lay.pp + (1 if combined else 0))
    paired = passes - lone
    if combined and paired > 0:
        return (2 * lone * hop + paired * max(0.0, hop - tail_s)
                - 2 * (lay.pp - 1) * min(hop, tail_s))
    return 2 * lone * hop + paired * max(0.0, 2 * hop - t_mb / lay.chunks)


def ep_overlap_exposed_s(ep_c: float, t_mb: float, lay: Layout, sm_share: float = 0.0) -> float:
    """One micro-batch's exposed all-to-all under Megatron-Core's batch-level EP overlap
    (``lay.ep_overlap``; megatron/core/pipeline_parallel/combined_1f1b.py at
    NVIDIA/Megatron-LM@d98e8a64): in the steady state the forward of micro-batch i+1 runs merged
    with the backward of micro-batch i, layer by layer, each one's all-to-alls on the
    communication stream beside the other's compute, so a pair exposes only what its
    all-to-alls (``ep_c`` a micro-batch) outlast its compute (``t_mb``). The warm-up forwards
    and the cool-down backwards have no partner and keep theirs: per the first stage's count in
    schedules.py ``get_pp_rank_microbatches`` there, ``(pp - 1) x 2 + (chunks - 1) x pp + 1``
    chunk passes of the step's ``micro_batches x chunks`` under the interleaved schedule
    (``microbatch_group_size_per_vp_stage`` at its default, pp; the + 1 the extra forward the
    overlap schedules), and with PP 1 the first forward and the last backward (one micro-batch's
    worth, combined_1f1b_schedule_for_no_pipelining). ``sm_share``: the share of the SMs the
    dispatcher's kernels hold while they run (:func:`ep_overlap_sm_share`); the paired
    compute beside the hidden part (``min(ep_c, t_mb)``) runs on the rest, so that part still
    costs ``sm_share`` of itself, the rule the overlapped DP collectives follow
    (:func:`~.efficiency.overlap_sm_share`)."""
    passes = lay.micro_batches * lay.chunks
    if lay.pp > 1:
        lone = (lay.pp - 1) * 2 + (lay.chunks - 1) * lay.pp + 1
    else:
        lone = 1
    share = min(1.0, lone / max(1, passes))
    paired = max(0.0, ep_c - t_mb) + sm_share * min(ep_c, t_mb)
    return share * ep_c + (1 - share) * paired


#: SMs a flex dispatcher's kernels hold while they run. ``deepep``: DeepEP's
#: ``Buffer.set_num_sms(config.moe_deepep_num_sms)`` (token_dispatcher.py line 1167 at
#: NVIDIA/Megatron-LM@0d8e0714cd29c01e164fe6de9f532182bdffa942, the 25.11 pin, line 1153 at
#: @b0cc2706ddc60d2aefd5fff346445b5c013036a8, the 26.02 pin), default 20
#: (transformer_config.py line 215 / 722 there), which neither Megatron-Bridge tag's
#: performance scripts change (no moe_deepep_num_sms under scripts/performance at
#: NVIDIA-NeMo/Megatron-Bridge v0.2.0 = 7af9601c, v0.3.0 = 21b02e0c). ``hybridep``:
#: HybridEPBuffer's num_sms_dispatch_api / num_sms_combine_api = config.moe_hybridep_num_sms
#: (token_dispatcher.py lines 1058-1059 / 1044-1045 there), which both tags' performance
#: scripts set to 32 (scripts/performance/utils/helpers.py line 113 at v0.2.0, overrides.py
#: line 69 at v0.3.0; Megatron-Core's default is 16). ``alltoall`` (NCCL's all-to-all, a grouped
#: send/recv) has no entry: its CTAs are :func:`~.efficiency.overlap_sm_share`'s, one a p2p
#: channel (NVIDIA/nccl issue #1598, 2025-02-08: torch's all_to_all_single launched
#: ncclDevKernel_SendRecv with 16 blocks; issue #2421, 2026-09-18: 32 a kernel on two GB300s,
#: NCCL 2.31.2 -- the 24 measured for an all-gather on H100 lies between), each holding its SM
#: alone (NVIDIA/nccl issue #689, sjeaugey, 2023-08: "NCCL CTAs won't share an SM with compute
#: kernels").
EP_DISPATCHER_SMS = {"deepep": 20, "hybridep": 32}


def ep_overlap_sm_share(dispatcher: str, device: Device) -> float:
    """Share of ``device``'s SMs the EP dispatcher's all-to-all kernels hold under the batch-level
    overlap (:func:`ep_overlap_exposed_s`): DeepEP's and HybridEP's set SM counts
    (:data:`EP_DISPATCHER_SMS`) over the SM count; NCCL's all-to-all the overlapped NCCL
    collectives' share (:func:`~.efficiency.overlap_sm_share`: NVIDIA NVLink-switch boards only).
    0 for an unknown SM count."""
    if device.sm_count <= 0:
        return 0.0
    if dispatcher in EP_DISPATCHER_SMS:
        return min(1.0, EP_DISPATCHER_SMS[dispatcher] / device.sm_count)
    return nccl_sm_share(device)


def nccl_sm_share(device: Device) -> float:
    """:func:`~.efficiency.overlap_sm_share` of ``device``: the SMs an overlapped NCCL
    collective holds on it."""
    return overlap_sm_share(device.sm_count, vendor=device.vendor,
                            interconnect=device.interconnect)


def _busiest_stage(arch: Architecture, cost: MicroCost, lay: Layout,
                   comm_per_layer: float = 0.0) -> tuple[int, float, tuple[int, ...]]:
    """(layers, one micro-batch's compute) of the busiest stage: ``ceil(layers / PP)`` layers and
    the head (the last stage) by default; with the embedding and/or loss as pipeline parts, the
    stage whose layers plus embedding (first) or head and loss (last) take longest. MTP: each
    depth one more layer and the head and loss once more on the last stage. DualPipe: rank
    ``i`` runs half the micro-batches as stage ``i`` and half as stage ``PP - 1 - i``, so the
    pair's mean is its micro-batch time. The layers returned are those whose communication the
    stage runs (the MTP modules' counted); where the stages differ, the busiest is the one
    whose compute (under DualPipe or MTP: plus ``comm_per_layer`` per such layer) is
    longest. Blocks kept BF16 at each end (:attr:`MicroCost.edge_layers`) are timed wide on
    the stages that hold them, the rest narrow. Third: the blocks (0-based) whose weights the
    busiest rank holds (both of its stages' under DualPipe), which its weight casts cover."""
    if lay.sequence_parallel and lay.tp > 1:  # the gathered tensors quantized on their shard
        cost = replace(cost, layer_fwd_s=cost.layer_fwd_s + cost.sp_quantize_s)
    head_s = cost.other_s - cost.embedding_s
    mtp_s = lay.mtp_layers * (cost.layer_s + head_s + cost.mtp_proj_s)
    if lay.pp == 1 or not (lay.embedding_part or lay.loss_part or lay.uneven or lay.dual
                           or cost.edge_layers):
        n = math.ceil(arch.num_layers / lay.pp)
        held = tuple(range(max(0, arch.num_layers - n), arch.num_layers))  # the last stage's
        return n + lay.mtp_layers, n * cost.layer_s + cost.other_s + mtp_s, held
    stages = []
    for stage, held in enumerate(lay.stages(arch.num_layers)):
        n = len(held) + (lay.mtp_layers if stage == lay.pp - 1 else 0)
        # the BF16 edge blocks run wide on the stages that hold them (the first and last)
        stages.append((n, cost.stage_layers_s(held)
                       + (cost.embedding_s if stage == 0 else 0.0)
                       + (head_s + mtp_s if stage == lay.pp - 1 else 0.0), tuple(held)))
    if lay.dual:
        stages = [(math.ceil((a[0] + b[0]) / 2), (a[1] + b[1]) / 2, a[2] + b[2])
                  for a, b in zip(stages, reversed(stages))]
    if not (lay.dual or lay.mtp_layers):
        comm_per_layer = 0.0  # the stages' compute alone, as before DualPipe and MTP
    best, worst = (0, -1.0, ()), -1.0
    for n, t, held in stages:
        if t + n * comm_per_layer > worst:
            best, worst = (n, t, held), t + n * comm_per_layer
    return best


def _optimizer_s(n: int, state_bytes: float, device: Device, eff: Efficiency,
                 prec: PrecisionLayout) -> float:
    """The optimizer step on ``n`` parameters: memory-bound, its launches added (the roofline
    of :func:`~.time.time_ops` for an op that fills the device)."""
    op = optimizer_op(n, state_bytes_total=state_bytes * n, grad_bytes=prec.grad,
                      weight_bytes=prec.weight_store, master_bytes=prec.master,
                      weight_reads=1.0 if prec.master_remainder else 0.0)
    compute = op.flops / (device.vector_flops * eff.matmul_fraction("fp32"))
    return max(compute, op.bytes / (device.memory_bandwidth * eff.memory)) \
        + op.kernels * eff.launch_s


def _pp_stride(lay: Layout, topo: Topology) -> int:
    """The rank distance of the pipeline's slowest boundary: stages sit ``tp x cp x dp`` ranks
    apart (Megatron's tp-cp-ep-dp-pp order, PP outermost); a chain that spans nodes crosses them
    at some boundary, and every micro-batch crosses every boundary, so that hop paces it."""
    stride = lay.tp * lay.cp * lay.dp
    return max(stride, topo.gpus_per_node) if lay.pp * stride > topo.gpus_per_node else stride


def _links(lay: Layout, topo: Topology) -> dict[str, str]:
    groups = {"tp": (lay.tp, 1), "cp": (lay.cp, lay.tp), "dp": (lay.dp * lay.cp, lay.tp),
              "ep": (lay.ep, _ep_stride(lay)),
              "pp": (2 if lay.pp > 1 else 1, _pp_stride(lay, topo))}
    return {k: topo.link(n, s)[0].name for k, (n, s) in groups.items() if n > 1}


def _layout_notes(lay: Layout, topo: Topology,
                  p2p_overlapped: bool = False) -> tuple[str, ...]:
    notes = [f"topology: {topo.stated}"]
    if lay.tp > topo.gpus_per_node:
        notes.append(f"TP {lay.tp} spans nodes ({topo.gpus_per_node} GPUs each): its all-reduces "
                     "cross the network")
    if lay.dual:
        notes.append(f"DualPipe over {lay.pp} stages: bubble (PP/2 - 1)(F&B + B - 3W), two "
                     "stages' parameters a rank, the EP all-to-all and p2p sends beside the "
                     "paired chunk's compute (exposed: what outlasts it)")
    elif lay.pp > 1:
        notes.append(f"pipeline bubble (p-1)/(v m) = {lay.pp - 1}/({lay.chunks} x "
                     f"{lay.micro_batches}); " + (
                         ("p2p sends of the steady state posted after each merged forward "
                          "and backward chunk of the EP overlap, one hop waited an iteration"
                          if lay.ep_overlap else
                          "p2p sends of the steady state beside the next chunk's compute")
                         + " (--overlap-p2p-communication), the warm-up and cool-down sends "
                         "blocking" if p2p_overlapped else "p2p sends counted as blocking"))
    if lay.mtp_layers:
        notes.append(f"MTP depth {lay.mtp_layers} on the last stage: one more layer and the "
                     "head per depth (DeepSeek-V3 sec. 2.2)")
    if lay.ep_overlap and lay.ep > 1 and not lay.dual:
        notes.append("batch-level EP overlap (Megatron-Core --overlap-moe-expert-parallel-comm): "
                     "each micro-batch's all-to-alls beside the paired micro-batch's compute, "
                     "the warm-up and cool-down passes' exposed; the overlapped compute runs "
                     "on the SMs the all-to-all kernels leave")
    return tuple(notes)


@record
class ServeTime:
    """Serving under TP x PP (x DP replicas): one decode step and one prefill of a replica's
    batch; the stages run one after the other for a token (no micro-batch pipelining)."""

    layout: Layout
    decode_compute_s: float
    decode_comm_s: float
    prefill_compute_s: float
    prefill_comm_s: float
    topology: Topology

    @property
    def decode_s(self) -> float:
        """Time per output token (one decode step of the replica's batch)."""
        return self.decode_compute_s + self.decode_comm_s

    @property
    def prefill_s(self) -> float:
        return self.prefill_compute_s + self.prefill_comm_s

    @property
    def tokens_per_s(self) -> float:
        """Decode tokens per second over all replicas."""
        return self.layout.dp * self.layout.batch / self.decode_s

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.tokens_per_s / self.layout.gpus

    def to_dict(self) -> dict:
        return {"layout": self.layout.to_dict(), "decode_s": self.decode_s,
                "decode_compute_s": self.decode_compute_s, "decode_comm_s": self.decode_comm_s,
                "prefill_s": self.prefill_s, "prefill_compute_s": self.prefill_compute_s,
                "prefill_comm_s": self.prefill_comm_s, "tokens_per_s": self.tokens_per_s,
                "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
                "topology": self.topology.to_dict()}


def serve_time(arch: Architecture, decode_s: float, prefill_s: float, lay: Layout,
               topo: Topology, eff: Efficiency, act: int) -> ServeTime:
    """Add the TP all-reduces (two per layer, of the step's activations) and the pipeline hops
    to a TP rank's decode and prefill times over all layers (``decode_s``, ``prefill_s``)."""
    def comm(tokens: int) -> float:
        nbytes = tokens * arch.hidden_size * act
        tp = 2 * arch.num_layers * collective_time("all-reduce", nbytes, lay.tp, topo,
                                                   efficiency=eff.comm)
        tp += ep_all_to_all_s(arch, tokens, lay, topo, eff, act)
        hop = collective_time("send-recv", nbytes, 2, topo, stride=lay.tp, efficiency=eff.comm)
        return tp + (lay.pp - 1) * hop if lay.pp > 1 else tp
    return ServeTime(layout=lay, decode_compute_s=decode_s, decode_comm_s=comm(lay.batch),
                     prefill_compute_s=prefill_s, prefill_comm_s=comm(lay.batch * lay.seq),
                     topology=topo)
