"""The allocation recorder: a TorchDispatchMode that sees every tensor storage an op creates and a
weak reference that sees it freed.

It works the same on fake and on real tensors (PyTorch's own ``MemTracker`` uses the same two
mechanisms; it is not used directly because it files everything created in backward as one "Temp",
everything in the optimizer step as optimizer state, and refuses a second iteration).

Every allocation is an event (storage id, bytes, phase, module); categories are decided late, when
the step knows what a storage turned out to be (a gradient, an optimizer state, a KV cache entry),
and the timeline, the peak and the breakdown at the peak are computed by replaying the events.
Sizes are rounded up to the CUDA caching allocator's 512-byte blocks (``kMinBlockSize`` in
``c10/cuda/CUDACachingAllocator.cpp``), as ``MemTracker`` does for CUDA tensors.
"""

from __future__ import annotations

import weakref
from array import array
from dataclasses import dataclass

import torch
from torch.distributed._tools.mod_tracker import ModTracker
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.weak import WeakIdKeyDictionary

BLOCK = 512

#: Fine categories, in display order. ``host`` storages are not device memory and are excluded.
CATEGORIES = ("parameters", "buffers", "master_weights", "gradients", "optimizer_state",
              "kv_cache", "activations", "backward", "autocast_cache", "optimizer_temporaries",
              "other", "gathered_params", "host")
_CAT_INDEX = {c: i for i, c in enumerate(CATEGORIES)}


def rounded(nbytes: int) -> int:
    return -(-nbytes // BLOCK) * BLOCK if nbytes > 0 else 0


@dataclass
class Replay:
    """The result of replaying the events with final categories."""

    peak_bytes: int
    peak_event: int
    peak_phase: str
    peak_module: str
    at_peak: dict[str, int]
    unrounded_at_peak: int
    timeline: list[dict]
    phase_peaks: dict[str, int]


class Recorder(TorchDispatchMode):
    """Records storage allocations and frees with the current phase and module."""

    def __init__(self, track_modules: bool = True) -> None:
        super().__init__()
        self.track_modules = track_modules
        self._sid_of: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self._refs: dict[int, weakref.ref] = {}
        self.nbytes: list[int] = []        # per sid, exact bytes
        self.category: list[int] = []      # per sid
        self.ev_sid = array("q")           # +sid+1 for alloc, -(sid+1) for free
        self.ev_phase = array("b")
        self.ev_module = array("i")
        self.phases: list[str] = ["setup"]
        self._phase_index = {"setup": 0}
        self.phase = 0
        self.modules: list[str] = ["-"]
        self._module_index = {"-": 0}
        self.mod_tracker = ModTracker()
        self.default_category = _CAT_INDEX["other"]
        self.param_sids: set[int] = set()
        self.autocast_active = False
        self.counts_autocast_cache = 0
        self.item_placeholders = 0
        self.allow_item_placeholder = False
        self.op_of: list[int] = []         # per sid: index into self.op_names (what allocated it)
        self.op_names: list[str] = ["-"]
        self._op_index = {"-": 0}
        self._current_op = 0
        #: the operator being dispatched (names the culprit when one fails)
        self.in_flight = None
        #: a label standing in for the module (the optimizer step runs outside any module)
        self.module_label: str | None = None
        #: op -> handler(func, args, kwargs) replacing the call (fake-tensor emulations)
        self.overrides: dict = {}

    # ------------------------------------------------------------------ bookkeeping

    def set_phase(self, name: str, category: str) -> None:
        idx = self._phase_index.get(name)
        if idx is None:
            idx = self._phase_index[name] = len(self.phases)
            self.phases.append(name)
        self.phase = idx
        self.default_category = _CAT_INDEX[category]

    def _module(self) -> int:
        if not self.track_modules:
            return 0
        parents = self.mod_tracker.parents
        if self.module_label is not None:
            name = self.module_label
        elif len(parents) <= 1:
            name = "-"
        else:
            name = max((p for p in parents if p != "Global"), key=lambda p: (p.count("."), p))
            if self.mod_tracker.is_bw:
                name += " (backward)"
        idx = self._module_index.get(name)
        if idx is None:
            idx = self._module_index[name] = len(self.modules)
            self.modules.append(name)
        return idx

    def sid(self, t: torch.Tensor) -> int | None:
        try:
            st = t.untyped_storage()
        except (NotImplementedError, RuntimeError):
            return None
        return self._sid_of.get(st)

    def track(self, t: torch.Tensor, category: str | None = None) -> int | None:
        """Track ``t``'s storage (if new) and optionally (re)assign its category. A DTensor
        (FSDP2's sharded parameters, gradients and optimizer states) is its local shard."""
        if not isinstance(t, torch.Tensor) or t.is_sparse:
            return None
        local = getattr(t, "_local_tensor", None)
        if isinstance(local, torch.Tensor):
            t = local
        try:
            st = t.untyped_storage()
        except (NotImplementedError, RuntimeError):
            return None
        return self.track_storage(st, category)

    def track_storage(self, st, category: str | None = None) -> int:
        """Track a storage (if new; as freed and allocated again if resized in place, as FSDP2
        frees and re-allocates its gathered parameters with ``UntypedStorage.resize_``)."""
        sid = self._sid_of.get(st)
        if sid is None:
            sid = len(self.nbytes)
            self._sid_of[st] = sid
            self.nbytes.append(st.nbytes())
            self.category.append(self.default_category)
            self.op_of.append(self._current_op)
            self._refs[sid] = weakref.ref(st, self._freed(sid))
            self.ev_sid.append(sid + 1)
            self.ev_phase.append(self.phase)
            self.ev_module.append(self._module())
        elif st.nbytes() != self.nbytes[sid]:  # resized in place: free the old, allocate the new
            self.ev_sid.append(-(sid + 1))
            self.ev_phase.append(self.phase)
            self.ev_module.append(0)
            new = len(self.nbytes)
            self.nbytes.append(st.nbytes())
            self.category.append(self.category[sid])
            self.op_of.append(self._current_op)
            self._sid_of[st] = new
            del self._refs[sid]  # its free is the event just recorded
            self._refs[new] = weakref.ref(st, self._freed(new))
            self.ev_sid.append(new + 1)
            self.ev_phase.append(self.phase)
            self.ev_module.append(self._module())
            sid = new
        if category is not None:
            self.category[sid] = _CAT_INDEX[category]
        return sid

    def _freed(self, sid: int):
        def cb(_ref) -> None:
            if self._refs.pop(sid, None) is not None:
                self.ev_sid.append(-(sid + 1))
                self.ev_phase.append(self.phase)
                self.ev_module.append(0)
        return cb

    def classify(self, tensors, category: str) -> int:
        """Give every (tracked or new) storage of ``tensors`` the ``category``."""
        n = 0
        for t in tree_leaves(tensors):
            if isinstance(t, torch.Tensor) and self.track(t, category) is not None:
                n += 1
        return n

    # ------------------------------------------------------------------ dispatch

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default and self.allow_item_placeholder:
            from torch._subclasses.fake_tensor import FakeTensor

            if isinstance(args[0], FakeTensor):
                # A host sync for a number (``.item()``) where its value cannot change what is
                # allocated (the optimizer step; transformers' packed-batch check, answered "not
                # packed"): a placeholder keeps the fake trace going.
                self.item_placeholders += 1
                dt = args[0].dtype
                return True if dt == torch.bool else (1.0 if dt.is_floating_point else 1)
        self.in_flight = func
        handler = self.overrides.get(func)
        if handler is not None:
            out = handler(func, args, kwargs or {})
        else:
            out = func(*args, **(kwargs or {}))
        self.in_flight = None
        name = func.__name__
        idx = self._op_index.get(name)
        if idx is None:
            idx = self._op_index[name] = len(self.op_names)
            self.op_names.append(name)
        self._current_op = idx
        if (self.autocast_active and func is torch.ops.aten._to_copy.default and args
                and isinstance(args[0], torch.Tensor)):
            src = self.sid(args[0])
            if src is not None and src in self.param_sids and isinstance(out, torch.Tensor):
                self.counts_autocast_cache += 1
                self.track(out, "autocast_cache")
                self._current_op = 0
                return out
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self.track(t)
        self._current_op = 0
        return out

    def __enter__(self):
        if self.track_modules:
            self.mod_tracker.__enter__()
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            if self.track_modules:
                self.mod_tracker.__exit__(*exc)

    # ------------------------------------------------------------------ replay

    def replay(self, start_event: int, *, max_points: int = 600) -> Replay:
        """Replay all events; report the peak (and the timeline) from ``start_event`` on."""
        size = [rounded(b) for b in self.nbytes]
        best, best_i, phase_peaks = self._peak(size, start_event)
        at_peak, unrounded, timeline = self._breakdown(size, start_event, best_i, max_points)
        n = len(self.ev_sid)
        phase = self.phases[self.ev_phase[best_i]] if best_i < n else "setup"
        module = self.modules[self.ev_module[best_i]] if best_i < n else "-"
        return Replay(peak_bytes=best, peak_event=best_i - start_event, peak_phase=phase,
                      peak_module=module, at_peak=at_peak, unrounded_at_peak=unrounded,
                      timeline=timeline, phase_peaks=phase_peaks)

    def _peak(self, size: list[int], start_event: int) -> tuple[int, int, dict[str, int]]:
        """First pass: the peak total from ``start_event`` on, its event, and each phase's peak."""
        host = _CAT_INDEX["host"]
        cat = self.category
        ev_sid = self.ev_sid
        total = 0
        best = -1
        best_i = start_event
        phase_peaks: dict[str, int] = {}
        for i in range(len(ev_sid)):
            e = ev_sid[i]
            s = (e if e > 0 else -e) - 1
            if cat[s] == host:
                continue
            total += size[s] if e > 0 else -size[s]
            if i >= start_event:
                ph = self.phases[self.ev_phase[i]]
                if total > phase_peaks.get(ph, -1):
                    phase_peaks[ph] = total
                if total > best:
                    best, best_i = total, i
        if best < 0:  # no event after start: the state at start is the peak
            best = total
        return best, best_i, phase_peaks

    def _breakdown(self, size: list[int], start_event: int, best_i: int,
                   max_points: int) -> tuple[dict[str, int], int, list[dict]]:
        """Second pass: the categories at the peak, the unrounded total there, and the timeline
        sampled to about ``max_points`` points (the peak and the last event always included)."""
        ncat = len(CATEGORIES)
        host = _CAT_INDEX["host"]
        cat = self.category
        ev_sid = self.ev_sid
        cur = [0] * ncat
        raw = 0
        at_peak: dict[str, int] = {}
        unrounded = 0
        stride = max(1, max(1, len(ev_sid) - start_event) // max_points)
        timeline: list[dict] = []

        def by_category() -> dict[str, int]:
            return {CATEGORIES[k]: cur[k] for k in range(ncat) if CATEGORIES[k] != "host"}

        for i in range(len(ev_sid)):
            e = ev_sid[i]
            s = (e if e > 0 else -e) - 1
            c = cat[s]
            if c != host:
                cur[c] += size[s] if e > 0 else -size[s]
                raw += self.nbytes[s] if e > 0 else -self.nbytes[s]
            if i == best_i:
                at_peak, unrounded = by_category(), raw
            if i >= start_event and ((i - start_event) % stride == 0 or i == best_i
                                     or i == len(ev_sid) - 1):
                point = {"event": i - start_event, "phase": self.phases[self.ev_phase[i]]}
                point.update(by_category())
                timeline.append(point)
        if not at_peak:
            at_peak, unrounded = by_category(), raw
        return at_peak, unrounded, timeline
