"""The DeepSpeed ZeRO-3 replay as it was before issue 32 (src/gpuplan/engines/zero3.py at commit
5331473): one use per submodule and parameter, persisted ones included. The reference the closed
forms of the bounded replay are held equal to (tests/fuzz/test_bounded.py)."""

from __future__ import annotations

import bisect
import math

from gpuplan.engines.zero3 import Gathered, _module_of



def replay(tensors, layers: int, tied: bool, full: bool, knobs) -> Gathered:
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


def _forward_order(tensors: tuple, layers: int,
                   tied: bool) -> tuple[list, list[list], list]:
    """The submodule uses of one forward: the embeddings, each layer's submodules in the order
    the model lists its tensors (experts one after another, each expert's own submodules
    together), then whatever else (the final norm) and the head."""
    embed: dict[str, list[tuple[str, int]]] = {}
    other: dict[str, list[tuple[str, int]]] = {}
    head: dict[str, list[tuple[str, int]]] = {}
    per_layer: list = []  # (tensor, only layer, copies)
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

    layer_uses: list[list] = []
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
        uses: list = []
        for mod, ps in mods.items():
            if mod == "{experts}":
                uses += [(m, tuple(p)) for e in sorted(experts) for m, p in experts[e].items()]
            else:
                uses.append((mod, tuple(ps)))
        layer_uses.append(uses)
    pre = [(m, tuple(ps)) for m, ps in embed.items()]
    post = [(m, tuple(ps)) for m, ps in other.items()] + [(m, tuple(ps)) for m, ps in head.items()]
    return pre, layer_uses, post


def _coordinator(uses: list, numel: dict[str, int], knobs,
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
