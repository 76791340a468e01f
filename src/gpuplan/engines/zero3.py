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

import functools
import itertools
import math
import operator

from .._record import record
from ..bounds import MAX_REPLAY_PARAMS
from ..models import Model, ParamTensor

__all__ = ["SERIAL_GATHER_BUS_BPS", "PREFETCH_BUCKET", "MAX_LIVE", "MAX_REUSE", "PERSISTENCE", "Gathered",
           "deepspeed_gathered", "count_text"]

#: DeepSpeed's ``zero_optimization`` defaults (deepspeed/runtime/zero/config.py, 0.19.8).
PREFETCH_BUCKET = 50_000_000      # stage3_prefetch_bucket_size
MAX_LIVE = 1_000_000_000          # stage3_max_live_parameters
MAX_REUSE = 1_000_000_000         # stage3_max_reuse_distance
PERSISTENCE = 100_000             # stage3_param_persistence_threshold

#: The bus bandwidth (bytes/s per GPU) DeepSpeed ZeRO-3's waited-for weight gathers reached
#: before its prefetch (``gather_overlap`` False), whatever the link: each parameter gathered
#: into a list of shards, copied out and synchronized before the next. DeepSpeed #1174
#: (2021-06-19, DeepSpeed 0.3.16, one p4d: 8 A100 on NVLink, ~240 GB/s a GPU for NCCL): a
#: 5.1B-parameter BERT's forward took ~480 ms under ZeRO-3 against ~60 ms under ZeRO-2, so its
#: 10.2 GB of fp16 weights were gathered in ~420 ms -- 7/8 x 10.2 GB / 0.42 s ~ 21 GB/s of bus
#: bandwidth a GPU. A measured figure of that code path, not fitted to a validation row.
SERIAL_GATHER_BUS_BPS = 7 / 8 * 10.2e9 / 0.42


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


# One use of a submodule: its label, its freed-after-use parameters as (key, elements), the
# elements of all its parameters (the persisted ones too: the reuse distance counts them) and
# the prefetch rounds it stands for (a run of submodules with persisted parameters only, e.g.
# 10^7 tiny experts, is one use of many rounds: they fetch and release nothing).
_Use = tuple[str, tuple[tuple[str, int], ...], int, int]


def deepspeed_gathered(model: Model, full_checkpointing: bool, *,
                       prefetch_bucket: int = PREFETCH_BUCKET, max_live: int = MAX_LIVE,
                       max_reuse: int = MAX_REUSE,
                       persistence: int = PERSISTENCE) -> Gathered | None:
    """DeepSpeed's gathered peak for ``model`` (one rank's tensors, after any tensor or pipeline
    split) under the ``stage3_*`` settings given (its defaults unless said); None when the model
    has no tensor list to replay, or more freed-after-use parameters than
    ``bounds.MAX_REPLAY_PARAMS`` (the caller then states its per-unit estimate)."""
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


def _copies(t: ParamTensor, layers: int) -> tuple[int | None, int]:
    """(the only layer, copies in each layer it is in) of a per-layer tensor."""
    if t.layer is not None:
        return t.layer, t.count
    return None, max(1, math.ceil(t.count / layers))


def _keys(t: ParamTensor, layers: int) -> int:
    """How many distinct parameters the replay names for ``t``."""
    if "{i}" in t.name or t.layer is not None:
        only, copies = _copies(t, layers)
        return copies * (1 if only is not None else layers)
    return t.count


@functools.lru_cache(maxsize=256)
def _replay(tensors: tuple[ParamTensor, ...], layers: int, tied: bool, full: bool,
            knobs: _Knobs) -> Gathered | None:
    small = knobs.persistence
    freed = sum(_keys(t, layers) for t in tensors if t.numel > small)
    if freed > MAX_REPLAY_PARAMS:
        return None
    # persisted parameters in closed form: never fetched nor released, counted once each
    persisted = sum(t.numel * _keys(t, layers) for t in tensors if t.numel <= small)
    if not freed:  # nothing to fetch: the replay would walk every use to gather nothing
        return Gathered(live=0, persisted=persisted, where="", fetched=0, partitioned=0)
    pre, layer_uses, post = _forward_order(tensors, layers, tied, small)
    forward = pre + [u for lay in layer_uses for u in lay] + post
    if full:
        backward = list(reversed(post))
        for lay in reversed(layer_uses):
            backward += lay + list(reversed(lay))
        backward += list(reversed(pre))
    else:
        backward = list(reversed(forward))
    uses = forward + backward
    numel = dict(itertools.chain.from_iterable(map(_PS, uses)))  # key -> elements
    # The embeddings' backward never releases: DeepSpeed hangs a module's post-backward hook on
    # its inputs that require a gradient (parameter_offload.py), and token and position ids get
    # none, so they stay gathered until release_backward_leftovers at the end of the backward
    # (stage3.py) -- checked against DeepSpeed itself (tests/integration/
    # test_zero3_deepspeed_oracle.py).
    uses, kept = _merge_idle(uses, len(uses) - len(pre))
    live, where, fetched, _ = _coordinator(uses, knobs, kept)
    return Gathered(live=live, persisted=persisted, where=where, fetched=fetched,
                    partitioned=sum(numel.values()))


def _merge_idle(uses: list[_Use], first_kept: int) -> tuple[list[_Use], frozenset[int]]:
    """Each run of consecutive uses that fetch nothing (only persisted parameters) as one use of
    their elements and prefetch rounds together, and the new indices of the uses from
    ``first_kept`` on. The replay is the same: such a use gathers and releases nothing, its
    rounds stop at the first that can do nothing (and the next use's would too), the gathered
    total only grows across the run (its peak is the run's end), and the reuse distance is
    counted in elements. A 10^4-layer model of tiny experts but a large router walked 500,000
    uses to fetch one parameter a layer; now about two uses a layer."""
    n = len(uses)
    empty = bytes(map(operator.not_, map(_PS, uses)))
    runs: list[tuple[int, int]] = []  # [s, e): the runs of two or more idle uses
    pos = empty.find(b"\x01\x01")
    while pos >= 0:
        end = empty.find(0, pos)
        end = n if end < 0 else end
        runs.append((pos, end))
        pos = empty.find(b"\x01\x01", end)
    if not runs:
        return uses, frozenset(range(first_kept, n))
    out: list[_Use] = []
    prev = 0
    for s, e in runs:
        out += uses[prev:s]
        out.append((uses[s][0], (), sum(map(_ELEMENTS, uses[s:e])),
                    sum(map(_ROUNDS, uses[s:e]))))
        prev = e
    out += uses[prev:]
    # the new index of each use from first_kept on: less the uses merged before it
    kept: list[int] = []
    shift, r = 0, 0
    for j in range(first_kept, n):
        while r < len(runs) and runs[r][1] <= j:
            shift += runs[r][1] - runs[r][0] - 1
            r += 1
        s = runs[r][0] if r < len(runs) else n
        kept.append(s - shift if j >= s else j - shift)
    return out, frozenset(kept)


_Mods = dict[str, list]  # module -> [[(key, elements) of the freed-after-use ones], elements]


def _add(mods: _Mods, mod: str, key: str, n: int, small: int) -> None:
    entry = mods.setdefault(mod, [[], 0])
    if n > small:
        entry[0].append((key, n))
    entry[1] += n


def _uses(mods: _Mods) -> list[_Use]:
    return [(m, tuple(ps), n, 1) for m, (ps, n) in mods.items()]


def _forward_order(tensors: tuple[ParamTensor, ...], layers: int, tied: bool,
                   small: int) -> tuple[list[_Use], list[list[_Use]], list[_Use]]:
    """The submodule uses of one forward: the embeddings, each layer's submodules in the order
    the model lists its tensors (experts one after another, each expert's own submodules
    together), then whatever else (the final norm) and the head. Parameters of at most
    ``small`` elements are not named one by one (only their elements are counted)."""
    embed: _Mods = {}
    other: _Mods = {}
    head: _Mods = {}
    per_layer: list[tuple[ParamTensor, int | None, int]] = []  # (tensor, only layer, copies)
    for t in tensors:
        if "{i}" in t.name or t.layer is not None:
            per_layer.append((t, *_copies(t, layers)))
            continue
        group = (embed if t.component == "embeddings" else head if t.component == "head"
                 else other)
        mod = _module_of(t.name)
        if t.numel <= small:
            _add(group, mod, "", 0, small)
            group[mod][1] += t.total
        else:
            for c in range(t.count):
                _add(group, mod, f"{t.name}#{c}", t.numel, small)
    if tied and not head and embed:
        # the head is the input embedding's matrix, used again (and gathered again) at the end
        first = _module_of(next(t.name for t in tensors if "{i}" not in t.name
                                and t.layer is None and t.component == "embeddings"))
        big = max((t for t in tensors if "{i}" not in t.name and t.layer is None
                   and t.component == "embeddings" and _module_of(t.name) == first),
                  key=lambda t: t.numel)
        head["lm_head (tied)"] = [[(f"{big.name}#0", big.numel)] if big.numel > small else [],
                                  big.numel]
    layer_uses = [_layer_uses(per_layer, i, small) for i in range(layers)]
    return _uses(embed), layer_uses, _uses(other) + _uses(head)


def _layer_uses(per_layer: list[tuple[ParamTensor, int | None, int]], i: int,
                small: int) -> list[_Use]:
    """Layer ``i``'s submodule uses, its experts in place (one after another)."""
    mods: _Mods = {}
    expert_ts: list[tuple[ParamTensor, int]] = []
    for t, only, copies in per_layer:
        if only is not None and only != i:
            continue
        if "{e}" in t.name:
            if not expert_ts:
                mods["{experts}"] = [[], 0]  # where the experts run, in the layer's order
            expert_ts.append((t, copies))
            continue
        name = t.name.replace("{i}", str(i))
        if t.numel <= small:
            _add(mods, _module_of(name), "", 0, small)
            mods[_module_of(name)][1] += t.numel * copies
        else:
            for c in range(copies):
                _add(mods, _module_of(name), f"{name}#{c}", t.numel, small)
    uses: list[_Use] = []
    for mod, (ps, n) in mods.items():
        uses += _expert_uses(expert_ts, i, small) if mod == "{experts}" else [(mod, tuple(ps), n, 1)]
    return uses


def _expert_uses(expert_ts: list[tuple[ParamTensor, int]], i: int, small: int) -> list[_Use]:
    """The experts' submodule uses in layer ``i``: each expert's submodules together. Experts
    whose parameters are all persisted fetch and release nothing: their uses are one use of as
    many prefetch rounds (closed form, whatever the expert count)."""
    copies = max((c for _, c in expert_ts), default=0)
    if all(t.numel <= small for t, _ in expert_ts):
        per_module: dict[str, int] = {}  # module -> the experts that have it
        for t, c in expert_ts:
            m = _module_of(t.name)
            per_module[m] = max(per_module.get(m, 0), c)
        n = sum(t.numel * c for t, c in expert_ts)
        label = _module_of(expert_ts[0][0].name).replace("{i}", str(i))
        return [(label, (), n, sum(per_module.values()))] if copies else []
    # each expert's modules in the order its tensors come (the names formatted once per layer)
    forms = [(t.name.replace("{i}", str(i)), t.numel, c) for t, c in expert_ts]
    forms = [(name, _module_of(name), n, c) for name, n, c in forms]
    uses: list[_Use] = []
    template: list = []
    if all(c == copies and m.count("{e}") == 1 and name.count("{e}") == 1
           for name, m, _, c in forms):
        # every expert has every tensor: one template of its modules, each name split at {e}
        # (none that could name another's module for some expert, which the loop below merges)
        mods: _Mods = {}
        for name, mod, n, _ in forms:
            _add(mods, mod, name, n, small)
        template = [(mod.split("{e}"), [(k.split("{e}"), c) for k, c in ps], total)
                    for mod, (ps, total) in mods.items()]
        heads = {h for (h, _), _, _ in template}
        if any(h != g and h.startswith(g) for h in heads for g in heads):
            template = []
    if len(template) == 1 and len(template[0][1]) == 1:  # one module of one freed matrix
        ((h, t), (((x, y), c),), total), = template
        return [(h + s + t, ((x + s + y, c),), total, 1) for s in map(str, range(copies))]
    if template:
        return [(h + s + t, tuple([(x + s + y, c) for (x, y), c in ps]), total, 1)
                for s in map(str, range(copies)) for (h, t), ps, total in template]
    for e in range(copies):
        s = str(e)
        mods: _Mods = {}
        for name, mod, n, c in forms:
            if e < c:
                _add(mods, mod.replace("{e}", s), name.replace("{e}", s), n, small)
        uses += _uses(mods)
    return uses


_FIRST, _PS, _SECOND, _ELEMENTS, _ROUNDS = (operator.itemgetter(0), operator.itemgetter(1),
                                            operator.itemgetter(1), operator.itemgetter(2),
                                            operator.itemgetter(3))

#: Longest period, in uses, searched for a run of identical uses to skip (an expert is one to
#: three submodules; its fused form one).
_MAX_PERIOD = 8
#: Fewest periods a run must last for the replay to look for a repeating state in it.
_MIN_PERIODS = 16
#: Most queue entries and gathered modules a skip compares (the state's size).
_MAX_WINDOW = 512


def _tables(uses: list[_Use], knobs: _Knobs, kept: frozenset[int]) -> tuple:
    """:func:`_coordinator`'s flat tables over ``uses``: the queue (entries' parameters, their
    uses and each use's slice), each parameter's neighbours, module and size, which entries the
    reuse distance releases, and which uses share a shape a period on."""
    # the setup is flat lists built by C-level maps (a few hundred ns an entry): it is most of
    # the work where the runs are skipped
    n = len(uses)
    lens = list(map(len, map(_PS, uses)))
    qstart = list(itertools.accumulate(lens, initial=0))
    slices = list(map(slice, qstart, qstart[1:]))
    flat = list(itertools.chain.from_iterable(map(_PS, uses)))  # (key, elements) per entry
    keys = list(map(_FIRST, flat))
    ids = dict(zip(dict.fromkeys(keys), itertools.count()))  # numbered in order first named
    qk = list(map(ids.__getitem__, keys))  # the recorded queue: parameter, and its use
    qs = list(itertools.chain.from_iterable(map(itertools.repeat, range(n), lens)))
    qlen = len(qk)
    # prv[p]: the previous queue entry of the same parameter (-1 if none), succ[p] the next
    # (qlen if none); nxt[p]: the next use of entry p's parameter after p's own use (n if none)
    prv = [-1] * qlen
    succ = [qlen] * qlen
    where_at = [-1] * len(ids)
    for p in range(qlen):
        prv[p] = where_at[qk[p]]
        where_at[qk[p]] = p
    # a parameter's module: the last use naming it labels it
    label_of = list(map(_FIRST, map(uses.__getitem__, map(qs.__getitem__, where_at))))
    where_at = [qlen] * len(ids)
    for p in range(qlen - 1, -1, -1):
        succ[p] = where_at[qk[p]]
        where_at[qk[p]] = p
    size = list(map(_SECOND, map(flat.__getitem__, where_at)))  # its elements as first named
    qs_end = qs + [n]
    nxt = list(map(qs_end.__getitem__, succ))
    if any(map(operator.eq, map((qs + [-2]).__getitem__, prv), qs)):
        # a parameter named twice in one use: its next use is the next in another use
        for p in range(qlen - 1, -1, -1):
            q = succ[p]
            if q < qlen and qs[q] == qs[p]:
                nxt[p] = nxt[q]
    # prefix[m]: elements of the uses before m (the reuse-distance walk counts them all). The
    # walk from use j + 1 on stops at the first use m with prefix[m] >= prefix[j + 1] +
    # MAX_REUSE, so entry p of use j is released (unless prefetched) where its next use is
    # that m or later, or none (prefix[n] taken as past every bound)
    prefix = list(itertools.accumulate(map(_ELEMENTS, uses), initial=0))
    reuse = knobs.max_reuse
    reach = prefix[:n] + [prefix[n] + reuse]
    free = list(map(operator.ge, map(reach.__getitem__, nxt),
                    map(operator.add, map(prefix[1:].__getitem__, qs), itertools.repeat(reuse))))
    # each use's shape: equal shapes replay alike from equal states, numbered (the sizes and
    # releases of its entries as one number each, its elements, rounds, whether it keeps)
    qshape = list(map(operator.add, map(operator.mul, map(size.__getitem__, qk),
                                        itertools.repeat(2)), free))
    tok = zip(map(tuple, map(qshape.__getitem__, slices)), map(_ELEMENTS, uses),
              map(_ROUNDS, uses), map(kept.__contains__, range(n)))
    shapes: dict = {}
    tid = list(map(shapes.setdefault, tok, itertools.count()))
    # same[P]: byte u is 1 where use u + P has use u's shape
    same = [b""] + [bytes(map(operator.eq, tid, tid[P:])) for P in range(1, _MAX_PERIOD + 1)]
    return n, qstart, qk, qs, qlen, prv, label_of, size, free, same, ids


def _find_run(j: int, ptr: int, n: int, qstart: list[int],
              same: list[bytes]) -> tuple[int, int, int, int] | None:
    """The run of identical uses starting at ``j`` with the shortest period that repeats at
    least ``_MIN_PERIODS`` times: (period, its queue entries, the run's end, the first use to
    look for a repeated state at); None when there is none."""
    for P in range(1, min(_MAX_PERIOD, n - j - 1) + 1):
        e = same[P].find(0, j)
        e = len(same[P]) if e < 0 else e
        Q = qstart[j + P] - qstart[j]
        if e - j >= _MIN_PERIODS * P and Q:
            # uses j .. e+P-1 periodic; the state can repeat once the prefetch has gone past
            # what it held on entering: first look after as many periods
            return P, Q, e + P, j + P * (max(0, ptr - qstart[j]) // Q + 2)
    return None


def _try_skip(j: int, ptr: int, available: int, fetched: int, steps: int, owners: dict,
              run: tuple, n: int, tables: tuple, gathered: list[bool],
              recent: list[int]) -> tuple:
    """One look for a skip at use ``j`` (:func:`_coordinator`'s docstring says when one is
    taken): the replay's state after it, the run's state, and whether it skipped."""
    qstart, qk, prv, label_of, same = tables
    run_p, run_q, run_end, base, next_try, gap, base_state, base_fetched = run
    if j >= run_end:  # a run of identical uses: its state a period on equal to now's, skip
        found = _find_run(j, ptr, n, qstart, same)
        if found is None:
            run_p, next_try = 0, j + 1
        else:
            run_p, run_q, run_end, next_try = found
            base, gap = -1, 1
    if run_p and j >= next_try and (j + (2 if base >= 0 else 3) * run_p > run_end
                                    or qstart[run_end] - ptr < 2 * run_q):
        # too near the run's end for any skip: the one a state equal a period on (or
        # now, if a base is set) allows moves ``min(...) - 1 <= 0`` periods, and ``j``
        # and the queue's place only grow -- replay the rest of the run one by one
        next_try = run_end
    if run_p and j >= next_try and ptr >= qstart[j]:
        state = _skip_state(j, ptr, available, qstart, qk, gathered, recent, owners,
                            label_of)
        P = run_p
        if state is not None:
            steps += len(state[2]) + len(state[3]) + 1
        if state is not None and base >= 0 and state == base_state:
            Q = qstart[j] - qstart[base]
            k = max(0, min((run_end - j) // P, (qstart[run_end] - ptr) // Q) - 1)
            a, b = ptr, ptr + k * Q
            if k > 0 and not any(gathered[qk[p]] for p in range(qstart[base], qstart[j])) \
                    and _fresh(a, b, qstart[base], j, qk, prv, gathered, recent):
                land = j + k * P
                sj, sl = qstart[j], qstart[land]
                win = [(gathered[qk[p]], recent[qk[p]]) for p in range(sj, ptr)]
                relabel = {label_of[qk[p]]: label_of[qk[p + k * Q]]
                           for p in range(sj, ptr) if win[p - sj][0]}
                for p in range(sj, ptr):
                    gathered[qk[p]] = False
                for p, (g, r) in zip(range(sl, b), win):
                    recent[qk[p]] = r + k * P
                    gathered[qk[p]] = g
                steps += 2 * (ptr - sj) + len(owners)
                owners = {relabel.get(m, m): c for m, c in owners.items()}
                fetched += k * (fetched - base_fetched)
                ptr = b
                j = land
                base, next_try = -1, j + 1
                return (j, ptr, fetched, steps, owners,
                        (run_p, run_q, run_end, base, next_try, gap, base_state,
                         base_fetched), True)
        if state is None or base >= 0:  # too large, or not repeating yet: back off
            next_try, gap, base = j + gap * P, gap * 2, -1
        elif _fresh(ptr, ptr + qstart[j + P] - qstart[j], qstart[j], j, qk, prv,
                    gathered, recent):
            base, base_state, base_fetched, next_try = j, state, fetched, j + P
        else:
            next_try, gap = j + gap * P, gap * 2
    return (j, ptr, fetched, steps, owners,
            (run_p, run_q, run_end, base, next_try, gap, base_state, base_fetched), False)


def _coordinator(uses: list[_Use], knobs: _Knobs,
                 kept: frozenset[int] = frozenset()) -> tuple[int, str, int, int]:
    """Replay DeepSpeed's fetch, prefetch and release over ``uses`` (those in ``kept`` release
    nothing); the most non-persisted elements gathered at once, the modules gathered then, the
    elements fetched over the whole replay, and the steps it took.

    Parameters are numbered and the state is flat lists (gathered, last recorded use, size),
    the rounds inlined. Runs of identical uses (a layer's experts, forward or backward) are
    skipped in closed form once the state repeats: where the uses ``j .. j+P`` and the next
    ``P`` have the same shapes (sizes, elements, rounds, which releases the reuse distance
    allows), every parameter ahead is untouched and distinct, and the state at ``j + P`` --
    elements gathered, the queue's place, the gathered and recorded use of every entry between
    the current use and the queue's place, the gathered modules' order -- is the state at ``j``
    moved on by ``P`` uses, each further period repeats it exactly (the replay is a function
    of that state and the uses ahead): the peak is not passed again, the fetched elements grow
    by the period's, and the state lands moved on by whole periods; once the run's end (or the
    queue's) is too near for a skip of one period, the rest is replayed without looking, so a
    run costs its warm-up and a skip, whatever its length. Steps: one per use
    replayed, one per entry taken off the queue, one per entry a skip compares or writes."""
    n, qstart, qk, qs, qlen, prv, label_of, size, free, same, ids = _tables(uses, knobs, kept)
    gathered = [False] * len(ids)
    recent = [-1] * len(ids)
    owners: dict[str, int] = {}  # module -> its parameters gathered, in the order first gathered
    max_live, bucket = knobs.max_live, knobs.prefetch_bucket
    available = fetched = ptr = steps = 0
    peak, where = 0, ""
    # the run being skipped: period, its queue entries, end, base use, next look, back-off,
    # the base's state and fetched elements
    run: tuple = (0, 0, -1, -1, 0, 1, (), 0)
    j = 0
    while j < n:
        if j >= run[4] and n - j > 4:
            j, ptr, fetched, steps, owners, run, skipped = _try_skip(
                j, ptr, available, fetched, steps, owners, run, n,
                (qstart, qk, prv, label_of, same), gathered, recent)
            if skipped:
                continue
        label, _, _, rounds = uses[j]
        mine = qk[qstart[j]:qstart[j + 1]]
        for i in mine:  # fetch
            if not gathered[i]:
                gathered[i] = True
                c = size[i]
                available += c
                fetched += c
                m = label_of[i]
                owners[m] = owners.get(m, 0) + 1
        # the current use's own entries leave the queue (unless a prefetch took them)
        wanted = len({i for i in mine if recent[i] < j})
        if wanted:
            popped: set[int] = set()
            while ptr < qlen and len(popped) < wanted:
                i = qk[ptr]
                recent[i] = qs[ptr]
                popped.add(i)
                ptr += 1
            steps += len(popped)
        for _ in range(rounds):  # prefetch rounds (a run of idle uses: one each, until idle)
            budget = min(max_live - available, bucket)
            if budget <= 0 or ptr >= qlen:
                break
            chosen = 0
            while ptr < qlen and chosen < budget:
                i = qk[ptr]
                s = qs[ptr]
                ptr += 1
                steps += 1
                if s > recent[i]:
                    recent[i] = s
                if not gathered[i]:
                    gathered[i] = True
                    c = size[i]
                    chosen += c
                    available += c
                    fetched += c
                    m = label_of[i]
                    owners[m] = owners.get(m, 0) + 1
        steps += 1
        if available > peak:
            peak = available
            names = list(itertools.islice(owners, 4))
            more = len(owners) - 4
            where = " + ".join(names) + (f" + {more} more" if more > 0 else "")
        # release after the use: not if prefetched for a later use, nor used again within the
        # reuse distance (the walk from the next use on stops once it has counted MAX_REUSE)
        if j not in kept and mine:
            for p in range(qstart[j], qstart[j + 1]):
                i = qk[p]
                if gathered[i] and recent[i] <= j + 1 and free[p]:
                    gathered[i] = False
                    available -= size[i]
                    m = label_of[i]
                    owners[m] -= 1
                    if not owners[m]:
                        del owners[m]
        j += 1
    return peak, where, fetched, steps


def _skip_state(j: int, ptr: int, available: int, qstart: list[int], qk: list[int],
                gathered: list[bool], recent: list[int], owners: dict[str, int],
                label_of: list[str]) -> tuple | None:
    """The replay's state at use ``j`` relative to ``j`` (None when larger than
    ``_MAX_WINDOW``): elements gathered, the queue's place, each entry's (gathered, recorded use)
    from the current use to the queue's place, and the gathered modules in order -- those of
    these entries by their place, the rest by name."""
    sj = qstart[j]
    if ptr - sj + len(owners) > _MAX_WINDOW:
        return None
    window = tuple((gathered[qk[p]], recent[qk[p]] - j) for p in range(sj, ptr))
    place: dict[str, int] = {}
    for p in range(sj, ptr):
        if gathered[qk[p]]:
            place.setdefault(label_of[qk[p]], p - sj)
    mods = tuple((place[m], c) if m in place else (m, c) for m, c in owners.items())
    return available, ptr - sj, window, mods


def _fresh(a: int, b: int, lo: int, j: int, qk: list[int], prv: list[int],
           gathered: list[bool], recent: list[int]) -> bool:
    """Whether the queue entries ``a .. b`` name parameters seen in no entry from ``lo`` on
    before them, none gathered nor recorded for use ``j`` or later: a replay from ``j`` takes
    them as if never used."""
    b = min(b, len(qk))
    if a >= b:
        return True
    ahead = qk[a:b]
    return (max(prv[a:b]) < lo and not any(map(gathered.__getitem__, ahead))
            and max(map(recent.__getitem__, ahead)) < j)
