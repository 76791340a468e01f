"""The parallel layout's one home (issue 27): the :class:`Layout` type, the layout checks and
their fixes (:mod:`.checks`: heads over TP, layers over the pipeline's parts, experts over EP,
ring attention's chunks, the engine's split), and the per-rank model derived one way, tensor by
tensor (:mod:`.layout`: which share of every parameter one rank holds, the layers of each stage,
the micro-batches in flight) -- read by memory, compute and the cluster search alike."""

from __future__ import annotations

from .checks import (PP_SCHEDULES, check_layout, divisors, nearest, part_layers, pipeline_fix,
                     pp_chunks, tp_fix)
from .layout import (VOCAB_PARALLEL, Layout, chunk_forwards, dual_in_flight, in_flight,
                     layout_notes, layout_of, mtp_active_params, mtp_params, mtp_rank_params,
                     rank_model, stage_layers, tp_shape)

__all__ = ["Layout", "layout_of", "layout_notes", "rank_model", "stage_layers", "in_flight",
           "dual_in_flight", "chunk_forwards", "VOCAB_PARALLEL", "PP_SCHEDULES", "check_layout", "pp_chunks",
           "part_layers", "pipeline_fix", "tp_fix", "nearest", "divisors", "mtp_params",
           "mtp_active_params", "mtp_rank_params", "tp_shape"]
