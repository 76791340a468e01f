"""Attribution of one step's wall time to phases, from the marks taken at phase boundaries.

Pure Python, no torch. A *mark* is taken at every phase boundary (batch fetch begins/ends, root
forward begins/ends, backward, optimizer step, each device copy): the host clock ``t`` and, on
CUDA, ``g`` -- the moment the GPU reached that point of its stream (a CUDA event), mapped onto
the host clock. ``label`` names the phase of the interval that *starts* at the mark.

On the CPU everything runs on the host: interval ``i`` lasts ``t[i+1] - t[i]``.

On CUDA the host only enqueues work; a boundary is *complete* when both the host has reached it
and the GPU has finished everything enqueued before it: ``c = max(t, g)`` (made non-decreasing).
Each interval is charged ``c[i+1] - c[i]``: how far that phase pushed the step's completion.
The charges telescope, so they sum exactly to the step's wall time ``c[end] - c[start]``, and a
data wait that the GPU hid behind the previous step's work is charged only its *exposed* part.

GPU busy bounds (CUDA): the work of interval ``i`` is enqueued after ``t[i]`` and runs after
``g[i]``, finishing at ``g[i+1]``: busy at most ``g[i+1] - max(g[i], t[i])``. After ``t[i+1]`` the host has enqueued all
of it, so from ``max(g[i], t[i+1])`` until ``g[i+1]`` the GPU cannot have been idle: busy at least
``max(0, g[i+1] - max(g[i], t[i+1]))``. The rest of a forward/backward/optimizer interval is
*host-paced*: the GPU kept up with the host, whose launching (or a synchronizing call such as
``.item()``) set the pace.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from .types import COMPUTE_PHASES, PHASES

__all__ = ["Attribution", "attribute"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Attribution:
    """One step's time, split by phase."""

    duration_s: float
    parts_s: dict[str, float]
    gpu_busy_min_s: float | None = None
    gpu_busy_max_s: float | None = None
    host_paced_s: float | None = None
    other_gpu_busy_s: float | None = None


def attribute(
    t: Sequence[float],
    labels: Sequence[str],
    g: Sequence[float] | None = None,
) -> Attribution:
    """Split a step into phases.

    ``t``: host times of the marks, the last one being the step's end (the next step's start).
    ``labels``: the phase of each interval (``len(t) - 1`` of them).
    ``g``: device completion times of the same marks on the host clock (CUDA), or None (CPU).
    """
    n = len(t)
    if n < 2 or len(labels) != n - 1:
        raise ValueError(f"attribute: {n} marks need {max(n - 1, 0)} labels, got {len(labels)}")
    for lab in labels:
        if lab not in PHASES:
            raise ValueError(f"attribute: unknown phase {lab!r}; expected one of {PHASES}")
    parts = dict.fromkeys(PHASES, 0.0)
    if g is None:
        for i in range(n - 1):
            parts[labels[i]] += max(0.0, t[i + 1] - t[i])
        return Attribution(duration_s=sum(parts.values()), parts_s=parts)

    if len(g) != n:
        raise ValueError(f"attribute: {n} host marks but {len(g)} device marks")
    # Completion times, non-decreasing (guards against clock-mapping jitter).
    c = []
    prev = float("-inf")
    for ti, gi in zip(t, g):
        prev = max(prev, ti, gi)
        c.append(prev)
    busy_min = busy_max = paced = other_busy = 0.0
    for i in range(n - 1):
        charged = c[i + 1] - c[i]
        parts[labels[i]] += charged
        # The interval's GPU work was enqueued after t[i] and runs after g[i].
        upper = min(charged, max(0.0, g[i + 1] - max(g[i], t[i])))
        lower = min(upper, max(0.0, g[i + 1] - max(g[i], t[i + 1])))
        busy_max += upper
        busy_min += lower
        if labels[i] in COMPUTE_PHASES:
            paced += max(0.0, charged - lower)
        elif labels[i] == "other":
            other_busy += lower
    return Attribution(
        duration_s=c[-1] - c[0],
        parts_s=parts,
        gpu_busy_min_s=busy_min,
        gpu_busy_max_s=busy_max,
        host_paced_s=paced,
        other_gpu_busy_s=other_busy,
    )
