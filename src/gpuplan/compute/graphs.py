"""Megatron-Core's scoped Transformer Engine CUDA graphs (``--cuda-graph-impl transformer_engine
--cuda-graph-scope ...``): which kernels of a layer each scope captures, and the host issue
cost of the captured ones as graph replays.

What the source says (NVIDIA/Megatron-LM@b0cc2706ddc60d2aefd5fff346445b5c013036a8, the 26.02
Megatron-Bridge v0.3.0 pin, and @0d8e0714cd29c01e164fe6de9f532182bdffa942, the 25.11 v0.2.0
pin, alike here):

* transformer/transformer_layer.py ``_get_submodules_under_cudagraphs`` /
  ``_te_cuda_graph_capture``: one graphed callable a layer holding, in order, ``attn`` (the
  input layernorm and the self-attention with its residual add) and, in a MoE layer,
  ``moe_router`` (the pre-MLP layernorm and the router: its GEMM, top-k and aux-loss kernels).
  ``_te_cuda_graph_replay`` runs the attention eagerly first where ``attn`` is not in scope,
  then replays the graph, then resumes the MoE layer after it.
* ``moe_preprocess`` (only with ``moe_router``): MoELayer.preprocess, the token dispatcher's
  ``dispatch_preprocess`` -- for the alltoall dispatcher its metadata and the first permute
  (token_dispatcher.py; the D2H copy of the splits moves to "before_ep_alltoall", after the
  graph); for the flex dispatcher ``setup_metadata`` only (DeepEP's top-k launch; HybridEP's
  metadata runs inside its dispatch call, outside the graph).
* TE ``make_graphed_callables`` captures a forward and a backward graph per callable and
  micro-batch and replays each with one ``cudaGraphLaunch``: per layer holding a graph, a
  micro-batch's forward issues one launch for the captured kernels and its backward one
  (the graphed part's recompute, where a recompute module sits inside the scope, rides with
  the backward's).

``full`` (``--enable-cuda-graph``, whose ``cuda_graph_scope`` default is ``"full"`` at
NVIDIA/Megatron-LM@core_v0.15.0rc6 -- transformer_config.py lines 604-633, the Megatron-Core the
25.09 Megatron-Bridge performance scripts resolve -- and ``cuda_graph_impl "local"`` with no
scope at @0d8e0714, lines 1496-1527): Megatron-Core's own ``CudaGraphManager``
(transformer/cuda_graphs.py; module.py line 165 gives every TransformerLayer one) captures the
whole layer's forward, the MoE layer's router, dispatch, experts and combine included, as one
``torch.cuda.CUDAGraph`` and its backward as another; ``_CudagraphReplayNode`` replays each with
one ``graph.replay()`` after copying the new input into the graph's static input buffer where it
is not that buffer already (lines 410-482). A MoE layer holds only under token drop with its
experts' input padded to capacity (moe/README.md 'CUDA Graph Support' at @core_v0.15.0rc6: without
``--moe-expert-capacity-factor`` and ``--moe-pad-expert-input-to-capacity`` 'the resulting
dynamic shapes make MoE layers uncapturable'), and no layer beside activation recompute
(transformer_config.py @core_v0.15.0rc6 line 1356, 'CUDA graphs not supported with activation
recomputation'). Timed as the scopes are: every kernel of a layer's ops, forward and backward,
issued as the layer's two replays.

Modelled: the captured kernels' host issue, replaced by ``graph_replay_s`` per graph launch
(:data:`~.efficiency.CONSTANTS`); the narrow recipes' activation / gradient casts of the
captured GEMMs (their share of ``fp8.quantize``) with them. Not modelled: the device gap of a
replayed kernel (``graph_gap_s`` against ``stream_gap_s``: the phase has one gap), TE's static
input copies into the graph's buffers, and the graphs' memory pool.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from .efficiency import RuntimeOverheads, constant
from .time import OpTime

__all__ = ["SCOPE_OPS", "WHOLE_LAYER", "captured_kernels", "graphed_ops"]

#: The op names (or name prefixes, ending in ".") each scope captures whole: every launch of
#: the op, forward and backward. ``attn``: every op of the attention block (gpuplan names them
#: ``attn.*``: the norm, projections, MLA's down/up paths, the core, the residual add).
#: ``moe_router``: the pre-MLP norm and the router's ops (``moe.router*``, ``moe.topk*``,
#: ``moe.aux*``); the shared experts too in Megatron where not overlapped
#: (``moe_shared_expert_overlap`` False) -- not taken here. ``moe_preprocess``: a separate
#: ``moe.preprocess*`` op where the op list has one, and part of ``moe.dispatch``
#: (:data:`PREPROCESS_DISPATCH`).
SCOPE_OPS = {
    "attn": ("attn.",),
    "moe_router": ("mlp.norm", "moe.router", "moe.topk", "moe.aux"),
    "moe_preprocess": ("moe.preprocess",),
}

#: The scope that captures every op of a layer (Megatron-Core's whole-layer graphs).
WHOLE_LAYER = "full"

#: ``moe.dispatch`` launches ``moe_preprocess`` captures, (forward, backward), by dispatcher:
#: the alltoall dispatcher's first permute (make_row_id_map's three passes and the permute
#: kernel; its backward the one unpermute: :func:`~.flops.dispatch_op`); DeepEP's
#: setup_metadata top-k; none of HybridEP's (its metadata is part of its dispatch call).
PREPROCESS_DISPATCH = {"alltoall": (4, 1), "deepep": (1, 0), "hybridep": (0, 0)}


def captured_kernels(t: OpTime, scope: Sequence[str], dispatcher: str = "alltoall") -> int:
    """How many of one instance of ``t``'s launches the scoped graphs hold (0: none)."""
    name, phase = t.op.name, t.op.phase
    if t.op.group not in ("moe", "dense") or phase not in ("forward", "backward", "recompute"):
        return 0
    moe_layer = t.op.group == "moe"
    if WHOLE_LAYER in scope:
        return t.op.kernels
    for part in scope:
        if part != "attn" and not moe_layer:
            continue  # the router scopes exist only in MoE layers
        if any(name == p or name.startswith(p if p.endswith(".") else p + ".")
               or (not p.endswith(".") and name.startswith(p + "_"))
               for p in SCOPE_OPS.get(part, ())):
            return t.op.kernels
    if "moe_preprocess" in scope and moe_layer and name == "moe.dispatch":
        fwd, bwd = PREPROCESS_DISPATCH.get(dispatcher, (0, 0))
        return min(t.op.kernels, bwd if phase == "backward" else fwd)
    return 0


def _graph_layers(ops: Sequence[OpTime], scope: Sequence[str], dispatcher: str) -> int:
    """Layers of one micro-batch that hold a graph: per layer group, its captured ops' count."""
    per_group: dict[str, int] = {}
    for t in ops:
        if t.op.phase == "forward" and captured_kernels(t, scope, dispatcher):
            per_group[t.op.group] = max(per_group.get(t.op.group, 0), t.op.count)
    return sum(per_group.values())


def graphed_ops(ops: Sequence[OpTime], scope: Sequence[str] | None, overheads: RuntimeOverheads | None,
                dispatcher: str = "alltoall") -> list[OpTime]:
    """``ops`` (one micro-batch's, every layer's instances in each op's count) with the scoped
    graphs' host cost: the captured launches of all of them together issue in
    ``2 x graph layers x graph_replay_s`` (a forward and a backward replay a layer holding a
    graph), spread evenly over those launches; an op partly captured keeps its own per-kernel
    cost for the rest. The narrow recipes' casts (``fp8.quantize``) are captured at the share
    of the blocks' narrow GEMM instances that sit inside the scope. Unchanged without a scope
    or without a GPU runtime's host costs."""
    if not scope or overheads is None:
        return list(ops)
    caught = {i: captured_kernels(t, scope, dispatcher) for i, t in enumerate(ops)}
    narrow = [t for t in ops if t.op.kind == "matmul" and t.op.weight_elements and t.op.shape
              and t.op.group in ("moe", "dense") and t.op.phase == "forward"]
    inside = sum(t.op.count for t in narrow if captured_kernels(t, scope, dispatcher))
    share = inside / max(1, sum(t.op.count for t in narrow))
    for i, t in enumerate(ops):
        if t.op.name == "fp8.quantize":
            caught[i] = round(t.op.kernels * share)
    launches = sum(c * ops[i].op.count for i, c in caught.items())
    graphs = 2 * _graph_layers(ops, scope, dispatcher)
    if launches <= 0 or graphs <= 0:
        return list(ops)
    per = graphs * constant("graph_replay_s") / launches
    out = []
    for i, t in enumerate(ops):
        c = caught[i]
        if c <= 0:
            out.append(t)
            continue
        own = t.op.host_s if t.op.host_s is not None else (
            overheads.host_bwd_s if t.op.phase in ("backward", "recompute")
            else overheads.host_fwd_s)
        k = t.op.kernels
        out.append(replace(t, op=replace(t.op, host_s=(c * per + (k - c) * own) / k)))
    return out
