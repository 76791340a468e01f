"""DeepSpeed ZeRO-3: how many full-size parameters one rank holds gathered at once.

DeepSpeed does not gather a transformer layer at a time, as FSDP does with one wrapped unit per
block. Its parameter coordinator (``deepspeed/runtime/zero/partitioned_param_coordinator.py``,
read at 0.19.8) hooks every submodule and, from the second step on, replays the order in which
the first step used them:

* **fetch**: before a submodule runs, its own parameters (not its children's) are all-gathered;
* **prefetch**: then it pops further parameter uses off the recorded queue and gathers those not
  yet gathered, while the elements it has chosen are fewer than
  ``min(stage3_max_live_parameters - available, stage3_prefetch_bucket_size)`` -- so at least one
  parameter, however large, whenever fewer than the live cap are gathered, and none above it;
* **release**: after the submodule runs, its parameters are freed unless a later use was already
  prefetched, or they are used again within the next ``stage3_max_reuse_distance`` elements of
  the recorded order (counting every parameter of every submodule visited);
* parameters of at most ``stage3_param_persistence_threshold`` elements (norms, biases) are never
  freed: every rank keeps them whole;
* the embeddings are not freed after their backward (their post-backward hook hangs on inputs
  that need a gradient, and token ids get none) but at its end, with the leftovers.

Under activation checkpointing the recompute runs each layer's forward again inside the
backward, so the order is: forward, the head's backward, then per layer (last first) its
recompute and its backward. :func:`deepspeed_gathered` replays that order with the defaults
below (what :mod:`gpuplan.export.deepspeed` leaves in the config it writes, unless the Job sets
them) and returns the most elements gathered at any point -- the peak, taken as coinciding with
the step's memory peak. DeepSpeed itself, run on the CPU, is the oracle
(tests/integration/test_zero3_deepspeed_oracle.py); what it does that this does not: a prefetch
round on entering every module, parameter-less containers included (it matters only where the
prefetch bucket, not the live cap, stops a round).
"""

from __future__ import annotations

import bisect
import functools
import math

from .._record import record
from ..models import Model, ParamTensor

__all__ = ["PREFETCH_BUCKET", "MAX_LIVE", "MAX_REUSE", "PERSISTENCE", "Gathered",
           "deepspeed_gathered", "count_text"]

#: DeepSpeed's ``zero_optimization`` defaults (deepspeed/runtime/zero/config.py, 0.19.8).
PREFETCH_BUCKET = 50_000_000      # stage3_prefetch_bucket_size
MAX_LIVE = 1_000_000_000          # stage3_max_live_parameters
MAX_REUSE = 1_000_000_000         # stage3_max_reuse_distance
PERSISTENCE = 100_000             # stage3_param_persistence_threshold


def count_text(n: int) -> str:
    """A ``stage3_*`` count as a DeepSpeed config writes it: 1e9 for 1,000,000,000, else in
    full (200,000,000)."""
    e = len(str(n)) - 1
    return f"1e{e}" if n == 10 ** e else f"{n:,}"


@record(kw_only=False)
class Gathered:
    """The most parameter elements a rank holds gathered under ZeRO-3."""

    live: int
    """Elements of freed-after-use parameters gathered at once, at the worst point."""
    persisted: int
    """Elements of the parameters small enough to stay gathered for good."""
    where: str
    """What is gathered at the worst point, in module names."""
    fetched: int = 0
    """Elements all-gathered over one step (forward, any recompute, backward): every fetch
    and prefetch of a freed-after-use parameter. The persisted ones are gathered once, before
    the first step, and not counted."""
    partitioned: int = 0
    """Elements of the freed-after-use parameters (each counted once)."""

    @property
    def gathers(self) -> float:
        """All-gathers of the partitioned weights per step, in whole-model units: 2 when every
        parameter is freed after its forward and fetched again for its backward, 3 with a
        checkpointed recompute in between, less where the reuse distance keeps parameters
        gathered across uses (a model under ~5e8 parameters: 1)."""
        return self.fetched / self.partitioned if self.partitioned else 0.0

    @property
    def elements(self) -> int:
        return self.live + self.persisted


# One use of a submodule: its label and its parameters as (key, elements).
_Use = tuple[str, tuple[tuple[str, int], ...]]


def deepspeed_gathered(model: Model, full_checkpointing: bool, *,
                       prefetch_bucket: int = PREFETCH_BUCKET, max_live: int = MAX_LIVE,
                       max_reuse: int = MAX_REUSE,
                       persistence: int = PERSISTENCE) -> Gathered | None:
    """DeepSpeed's gathered peak for ``model`` (one rank's tensors, after any tensor or pipeline
    split) under the ``stage3_*`` settings given (its defaults unless said); None when the model
    has no tensor list to replay."""
    arch = model.architecture
    if arch is None or not model.tensors or not arch.num_layers:
        return None
    return _replay(model.tensors, arch.num_layers, bool(arch.tie_word_embeddings),
                   full_checkpointing, _Knobs(prefetch_bucket, max_live, max_reuse, persistence))


@record(kw_only=False)
class _Knobs:
    prefetch_bucket: int
    max_live: int
    max_reuse: int
    persistence: int


def _module_of(name: str) -> str:
    return name.rsplit(".", 1)[0] if "." in name else name


@functools.lru_cache(maxsize=256)
def _replay(tensors: tuple[ParamTensor, ...], layers: int, tied: bool, full: bool,
            knobs: _Knobs) -> Gathered:
    pre, layer_uses, post = _forward_order(tensors, layers, tied)
    forward = pre + [u for lay in layer_uses for u in lay] + post
    if full:
        backward = list(reversed(post))
        for lay in reversed(layer_uses):
            backward += lay + list(reversed(lay))
        backward += list(reversed(pre))
    else:
        backward = list(reversed(forward))
    uses = forward + backward
    numel = {k: n for _, ps in uses for k, n in ps}
    persisted = sum(n for n in numel.values() if n <= knobs.persistence)
    # The embeddings' backward never releases: DeepSpeed hangs a module's post-backward hook on
    # its inputs that require a gradient (parameter_offload.py), and token and position ids get
    # none, so they stay gathered until release_backward_leftovers at the end of the backward
    # (stage3.py) -- checked against DeepSpeed itself (tests/integration/
    # test_zero3_deepspeed_oracle.py).
    kept = frozenset(range(len(uses) - len(pre), len(uses)))
    live, where, fetched = _coordinator(uses, numel, knobs, kept)
    partitioned = sum(n for n in numel.values() if n > knobs.persistence)
    return Gathered(live=live, persisted=persisted, where=where, fetched=fetched,
                    partitioned=partitioned)


def _forward_order(tensors: tuple[ParamTensor, ...], layers: int,
                   tied: bool) -> tuple[list[_Use], list[list[_Use]], list[_Use]]:
    """The submodule uses of one forward: the embeddings, each layer's submodules in the order
    the model lists its tensors (experts one after another, each expert's own submodules
    together), then whatever else (the final norm) and the head."""
    embed: dict[str, list[tuple[str, int]]] = {}
    other: dict[str, list[tuple[str, int]]] = {}
    head: dict[str, list[tuple[str, int]]] = {}
    per_layer: list[tuple[ParamTensor, int | None, int]] = []  # (tensor, only layer, copies)
    for t in tensors:
        if "{i}" in t.name or t.layer is not None:
            if t.layer is not None:
                per_layer.append((t, t.layer, t.count))
            else:
                per_layer.append((t, None, max(1, math.ceil(t.count / layers))))
            continue
        group = (embed if t.component == "embeddings" else head if t.component == "head"
                 else other)
        mod = _module_of(t.name)
        group.setdefault(mod, []).extend((f"{t.name}#{c}", t.numel) for c in range(t.count))
    if tied and not head and embed:
        # the head is the input embedding's matrix, used again (and gathered again) at the end
        first = next(iter(embed.values()))
        head["lm_head (tied)"] = [max(first, key=lambda p: p[1])]

    layer_uses: list[list[_Use]] = []
    for i in range(layers):
        mods: dict[str, list[tuple[str, int]]] = {}
        experts: dict[int, dict[str, list[tuple[str, int]]]] = {}
        for t, only, copies in per_layer:
            if only is not None and only != i:
                continue
            if "{e}" in t.name:
                if not experts:
                    mods["{experts}"] = []  # where the experts run, in the layer's order
                for e in range(copies):
                    name = t.name.replace("{i}", str(i)).replace("{e}", str(e))
                    experts.setdefault(e, {}).setdefault(_module_of(name), []).append(
                        (name, t.numel))
                continue
            name = t.name.replace("{i}", str(i))
            mods.setdefault(_module_of(name), []).extend(
                (f"{name}#{c}", t.numel) for c in range(copies))
        uses: list[_Use] = []
        for mod, ps in mods.items():
            if mod == "{experts}":
                uses += [(m, tuple(p)) for e in sorted(experts) for m, p in experts[e].items()]
            else:
                uses.append((mod, tuple(ps)))
        layer_uses.append(uses)
    pre = [(m, tuple(ps)) for m, ps in embed.items()]
    post = [(m, tuple(ps)) for m, ps in other.items()] + [(m, tuple(ps)) for m, ps in head.items()]
    return pre, layer_uses, post


def _coordinator(uses: list[_Use], numel: dict[str, int], knobs: _Knobs,
                 kept: frozenset[int] = frozenset()) -> tuple[int, str, int]:
    """Replay DeepSpeed's fetch, prefetch and release over ``uses`` (those in ``kept`` release
    nothing); the most non-persisted elements gathered at once, the modules gathered then, and
    the elements fetched over the whole replay."""
    n = len(uses)
    queue = [(k, j) for j, (_, ps) in enumerate(uses) for k, _ in ps]
    # prefix[m]: elements of the uses before m (the reuse-distance walk counts them all)
    prefix = [0]
    for _, ps in uses:
        prefix.append(prefix[-1] + sum(c for _, c in ps))
    # next_use[j][k]: the next use of parameter k after use j (n if none)
    next_use: list[dict[str, int]] = [{} for _ in range(n)]
    seen: dict[str, int] = {}
    for j in range(n - 1, -1, -1):
        for k, _ in uses[j][1]:
            next_use[j][k] = seen.get(k, n)
        for k, _ in uses[j][1]:
            seen[k] = j
    owner = {k: label for label, ps in uses for k, _ in ps}

    gathered: dict[str, int] = {}  # non-persisted parameters gathered (insertion order)
    available = 0
    recent: dict[str, int] = {}
    ptr = 0
    peak, where, fetched = 0, "", 0
    for j, (label, ps) in enumerate(uses):
        for k, c in ps:
            if c > knobs.persistence and k not in gathered:
                gathered[k] = c
                available += c
                fetched += c
        # the current use's own entries leave the queue (unless a prefetch took them)
        wanted = {k for k, _ in ps if recent.get(k, -1) < j}
        popped: set[str] = set()
        while ptr < len(queue) and len(popped) < len(wanted):
            k, s = queue[ptr]
            ptr += 1
            recent[k] = s
            popped.add(k)
        budget = min(knobs.max_live - available, knobs.prefetch_bucket)
        chosen = 0
        while ptr < len(queue) and chosen < budget:
            k, s = queue[ptr]
            ptr += 1
            recent[k] = max(recent.get(k, -1), s)
            c = numel[k]
            if c > knobs.persistence and k not in gathered:
                gathered[k] = c
                available += c
                chosen += c
                fetched += c
        if available > peak:
            peak = available
            names = list(dict.fromkeys(owner[k] for k in gathered))
            where = " + ".join(names[:4]) + (f" + {len(names) - 4} more" if len(names) > 4 else "")
        # release after the use: not if prefetched for a later use, nor used again within the
        # reuse distance (the walk from the next use on stops once it has counted MAX_REUSE)
        if j in kept:
            continue
        last = min(bisect.bisect_left(prefix, prefix[j + 1] + knobs.max_reuse, lo=j + 1) - 1, n - 1)
        for k, c in ps:
            if k not in gathered or recent.get(k, -1) > j + 1 or next_use[j][k] <= last:
                continue
            del gathered[k]
            available -= c
    return peak, where, fetched
