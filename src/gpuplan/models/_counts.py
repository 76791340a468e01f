"""Parameter counts from a tensor list: total, by component, active per token, embeddings."""

from __future__ import annotations

from collections.abc import Iterable
from types import MappingProxyType

from ._types import COMPONENTS, Architecture, ParamCounts, ParamTensor

__all__ = ["count_params"]


def count_params(tensors: Iterable[ParamTensor], arch: Architecture | None = None) -> ParamCounts:
    """Exact counts of ``tensors``.

    ``active`` is what one token touches: everything except the routed experts it is not sent
    to, i.e. ``total - experts + experts * k / E`` (shared experts, routers, attention,
    embeddings and head count in full). It equals ``total`` for dense models and whenever the
    architecture (and so k and E) is unknown.
    """
    by = dict.fromkeys(COMPONENTS, 0)
    for t in tensors:
        by[t.component] = by.get(t.component, 0) + t.total
    total = sum(by.values())
    active = total
    routed = by["experts"]
    if arch is not None and arch.num_experts and routed:
        # Every expert has the same shapes, so the routed total divides by E exactly.
        active = total - routed + routed * arch.experts_per_token // arch.num_experts
    return ParamCounts(total=total, by_component=MappingProxyType(by), active=active,
                       embedding=by["embeddings"])
