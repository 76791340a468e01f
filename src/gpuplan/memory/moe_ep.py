"""One MoE layer's expert-parallel exchange and expert capacity, as the memory model counts them
(:mod:`gpuplan.parallel.moe_ep`, below both the memory and the speed model, holds the
formulas and their sources)."""

from __future__ import annotations

from ..parallel.moe_ep import (EpExchange, dropped_fraction_balanced, dropped_fraction_uniform,
                               ep_exchange, expert_capacity)

__all__ = ["EpExchange", "expert_capacity", "ep_exchange", "dropped_fraction_balanced",
           "dropped_fraction_uniform"]
