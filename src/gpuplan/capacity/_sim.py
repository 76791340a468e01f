"""The engine's scheduler, step by step: a discrete-event simulation of continuous batching.

State goes in and comes out; one clock, no wall time, no global state. Each step the scheduler
picks its batch under the engine's budgets (:class:`._engines.SchedulerDefaults`): the running
requests first (a decode token each, or their prompt's next chunk), then waiting requests in
arrival order while tokens, sequence slots and KV blocks remain; the step is timed by
:class:`._cost.StepCost` for exactly that mix, and the clock moves by it. A request is admitted
only when the blocks it is scheduled for are free; when a running request cannot get its next
block the last-admitted one is preempted by recompute (its blocks freed, its prompt and output
so far prefilled again later). With ``prefilled`` (the decode pool of a disaggregated
deployment, :mod:`._disagg`) each request arrives with its prompt's KV cache and its first
token already made elsewhere: it is admitted straight into decoding. SGLang's order (a prefill batch when one can be formed, else a
decode batch) and TensorRT-LLM's reservation (blocks for the whole output at admission) are
fields of the scheduler, not other loops.
"""

from __future__ import annotations

from collections import deque

from .._record import record
from ..bounds import MAX_SIM_STEPS
from ..errors import InputError, opt
from ._engines import SchedulerDefaults
from ._workload import Workload

__all__ = ["SimTrace", "simulate"]


class _Req:
    __slots__ = ("i", "arrival", "n_in", "n_out", "prompt", "ctx", "gen", "blocks", "first",
                 "done", "sched", "last_step", "cached", "preempted", "seg", "full")

    def __init__(self, i: int, arrival: float, n_in: int, n_out: int, cached: int) -> None:
        self.i, self.arrival, self.n_in, self.n_out = i, arrival, n_in, n_out
        self.prompt = n_in          # tokens to prefill (prompt + output so far after a preemption)
        self.ctx = 0                # tokens whose KV is in the cache
        self.gen = 0                # output tokens made
        self.blocks = 0
        self.first = self.done = self.sched = -1.0
        self.last_step = -2           # the step that made its last token
        self.cached = cached        # prompt tokens the prefix cache serves
        self.preempted = 0
        self.seg: list | None = None  # preempted, its blocks in the free queue: [self, how many]
        self.full = 0               # its full blocks when preempted (the cache keeps only those)


@record
class SimTrace:
    """What the simulation measured, per request (arrays in request order) and over time."""

    arrival_s: tuple[float, ...]
    first_token_s: tuple[float, ...]
    done_s: tuple[float, ...]
    scheduled_s: tuple[float, ...]
    input_tokens: tuple[int, ...]
    output_tokens: tuple[int, ...]
    itl: tuple[tuple[float, int], ...]
    """Inter-token gaps as (gap, how many tokens had it)."""
    steps: int
    preemptions: int
    in_system_s: float
    """Time integral of the requests in the system (waiting or running), request-seconds."""
    running_s: float
    waiting_s: float
    kv_used_s: float
    """Time integral of the KV blocks in use, block-seconds."""
    kv_peak_blocks: int
    kv_blocks: int
    span_s: float
    """From the first arrival to the last completion."""
    start_s: float


def _blocks(tokens: int, bs: int) -> int:
    return -(-tokens // bs)


def simulate(workload: Workload, cost, sched: SchedulerDefaults, kv_tokens: int, *,
             prefix_hit: float = 0.0, prefilled: bool = False) -> SimTrace:
    """Serve ``workload`` on one replica whose KV cache holds ``kv_tokens`` tokens, stepping
    ``sched``'s scheduler with ``cost.step_s`` for each step's time. ``prefilled``: every
    request arrives with its prompt in the cache and its first token made (at its arrival), so
    it only decodes its ``output_tokens - 1`` others (each needs ``output_tokens`` >= 2)."""
    bs = sched.block_size
    st = _State(workload, sched, kv_tokens // bs, prefix_hit, prefilled)
    # the engine's per-request time (front end, first token's return: StepCost.request_s), once
    # per request: a decode pool's requests had theirs in the prefill pool
    st.request_s = 0.0 if prefilled else getattr(cost, "request_s", 0.0)
    _check_steps(st, kv_tokens, prefilled)
    while st.completed < st.n:
        if st.steps >= MAX_SIM_STEPS:
            raise InputError(f"capacity: the simulation reached {MAX_SIM_STEPS} steps with "
                             f"{st.completed} of {st.n} requests served on this replica, the "
                             f"most one simulation runs (a step makes a token; long outputs at "
                             f"a low rate decode alone); give fewer {opt('requests')} or a "
                             f"shorter {opt('output')}", field="requests", value=st.n)
        st.arrive()
        if not st.running and not st.waiting:
            st.idle()
            continue
        st.new_step()
        chunks = st.schedule_mixed() if sched.mixed else st.schedule_prefill_first()
        if not st.n_dec and not chunks:
            raise RuntimeError("capacity: the scheduler formed an empty step (a request larger "
                               "than the KV cache should have been refused)")
        # the decodes' contexts already count the token each writes this step
        dt = cost.step_s(st.n_dec, st.ctx_sum, [(n, r.ctx) for r, n in chunks])
        st.advance(dt, chunks)
    return st.trace()


def _check_steps(st: "_State", kv_tokens: int, prefilled: bool) -> None:
    """Refuse before simulating a workload whose decode steps alone exceed
    :data:`~gpuplan.bounds.MAX_SIM_STEPS`. A step decodes at most one token per running request,
    so the steps are at least the longest output, the outputs over ``max_num_seqs``, and -- a
    request's k-th decode holds at least k of its own output tokens in the cache, which holds
    ``kv_tokens`` -- the sum of the outputs' squares over twice the cache."""
    outs = [r.n_out - (1 if prefilled else 0) for r in st.reqs]
    total = sum(outs)
    need = max(max(outs), total / max(1, st.sched.max_num_seqs),
               sum(n * n for n in outs) / (2 * max(1, kv_tokens)))
    if need > MAX_SIM_STEPS:
        raise InputError(f"capacity: {st.n} requests on one replica with outputs of "
                         f"{total / st.n:.0f} tokens on average (up to {max(outs)}) need at "
                         f"least {need:.3g} decode steps with a KV cache of {kv_tokens} tokens, "
                         f"over the {MAX_SIM_STEPS} steps one simulation runs; give fewer "
                         f"{opt('requests')} or a shorter {opt('output')}", field="requests",
                         value=st.n)


class _State:
    def __init__(self, workload: Workload, sched: SchedulerDefaults, blocks: int,
                 prefix_hit: float, prefilled: bool = False) -> None:
        self.sched, self.total_blocks, self.free = sched, blocks, blocks
        self.request_s = 0.0
        self.bs = sched.block_size
        seen: set[str] = set(workload.cached_prefixes)
        reqs = []
        for i, r in enumerate(workload.requests):
            cached = 0
            if sched.prefix_caching:
                if r.prefix_id is not None:
                    if r.prefix_id in seen:
                        cached = min(r.prefix_tokens, r.input_tokens - 1)
                    seen.add(r.prefix_id)
                elif prefix_hit > 0:
                    cached = min(int(prefix_hit * r.input_tokens), r.input_tokens - 1)
                cached -= cached % self.bs  # the cache hits whole blocks
            q = _Req(i, r.arrival_s, r.input_tokens, r.output_tokens, 0 if prefilled else cached)
            if prefilled:  # the KV of the prompt came over the link; its first token was made
                q.ctx, q.gen, q.first = r.input_tokens, 1, r.arrival_s
            reqs.append(q)
        self.reqs, self.n = reqs, len(reqs)
        self.closed = workload.concurrency is not None
        self.next = min(workload.concurrency, self.n) if self.closed else 0
        self.waiting: deque[_Req] = deque(reqs[:self.next] if self.closed else ())
        self.running: list[_Req] = []
        self.t = self.start = 0.0 if self.closed else reqs[0].arrival
        self.completed = self.steps = self.preemptions = self.kv_peak = 0
        self.in_system = self.run_int = self.wait_int = self.kv_int = 0.0
        self.itl: dict[float, int] = {}
        self.step_end: list[float] = []
        self.n_dec = self.ctx_sum = 0
        self.irregular: list[tuple[_Req, int]] = []
        self.finished: list[_Req] = []
        # the free block queue, head first, as [owner, blocks] runs (owner: a preempted request
        # whose blocks the prefix cache still holds, else None), where a preempted request keeps
        # its cache (SchedulerDefaults.preempt_keeps_cache); None: not tracked
        self.fq: deque | None = deque([[None, blocks]]) if sched.preempt_keeps_cache else None
        self.last_start: float | None = None  # when the step that just ended began
        self.cutoff: float | None = None      # the latest arrival this step's batch can admit

    def new_step(self) -> None:
        # a scheduler that runs one step ahead (SchedulerDefaults.run_ahead) formed this batch
        # when the step before it began: what arrived since waits for the next one
        self.cutoff = (self.last_start if self.sched.run_ahead and self.running
                       and self.last_start is not None else None)
        self.n_dec = self.ctx_sum = 0
        self.irregular = []
        self.finished = []

    def _decode(self, r: _Req) -> None:
        """``r`` decodes in the step being formed: its state moves to after the step (the time
        of its token is known when the step is timed)."""
        r.ctx += 1
        r.gen += 1
        self.n_dec += 1
        self.ctx_sum += r.ctx
        if r.last_step != self.steps - 1:
            self.irregular.append((r, r.last_step))
        r.last_step = self.steps
        if r.gen >= r.n_out:
            self.finished.append(r)

    def arrive(self) -> None:
        if self.closed:
            return
        reqs, t = self.reqs, self.t
        while self.next < self.n and reqs[self.next].arrival <= t:
            r = reqs[self.next]
            self.in_system += t - r.arrival  # in the system since it arrived, mid-step
            self.wait_int += t - r.arrival
            self.waiting.append(r)
            self.next += 1

    def idle(self) -> None:
        self.last_start = None  # the idle loop forms the next batch as its request arrives
        self.t = max(self.t, self.reqs[self.next].arrival)

    def _grow(self, r: _Req, tokens: int) -> bool:
        """Blocks for ``r`` to hold ``tokens``; False when the pool has too few."""
        need = _blocks(tokens, self.bs) - r.blocks
        if need <= 0:
            return True
        if need > self.free:
            return False
        self.free -= need
        r.blocks += need
        if self.fq is not None:
            revive = 0
            if r.seg is not None:  # its surviving full blocks leave the queue where they are
                seg, r.seg = r.seg, None
                revive = r.cached // self.bs
                seg[0], seg[1] = None, seg[1] - revive
            self._take(need - revive)
        return True

    def _take(self, k: int) -> None:
        """``k`` blocks off the free queue's head (vLLM's ``get_new_blocks``: the least recently
        freed first, evicting what the prefix cache held there)."""
        fq = self.fq
        while k > 0:
            seg = fq[0]
            if seg[1] > k:
                seg[1] -= k
                return
            k -= seg[1]
            seg[1] = 0
            fq.popleft()

    def _release(self, r: _Req, keep: bool) -> None:
        """``r``'s blocks back to the free queue's tail; ``keep``: as a preempted request's, which
        the prefix cache holds until they reach the head (its last block first)."""
        if self.fq is None or not r.blocks:
            return
        if keep:
            r.full = min(r.ctx, r.n_in + r.gen - 1) // self.bs
            r.seg = [r, r.blocks]
            self.fq.append(r.seg)
        elif self.fq and self.fq[-1][0] is None:
            self.fq[-1][1] += r.blocks
        else:
            self.fq.append([None, r.blocks])

    def _preempt(self, r: _Req) -> None:
        self._release(r, True)
        self.free += r.blocks
        r.blocks = 0
        r.prompt = r.n_in + r.gen
        r.ctx = 0
        r.cached = 0
        r.preempted += 1
        self.preemptions += 1
        self.running.remove(r)
        self.waiting.appendleft(r)

    def _admit_need(self, r: _Req, n: int) -> int:
        """Tokens ``r`` must hold to be admitted with a first chunk of ``n``."""
        s = self.sched
        if s.admission == "reserve":
            return r.n_in + r.n_out
        if s.admission == "ratio":
            held = sum(s.new_token_ratio * (q.n_out - q.gen) for q in self.running)
            return r.ctx + n + int(held) + int(s.new_token_ratio * (r.n_out - r.gen))
        return r.ctx + n

    def _admit(self, budget: int, chunks: list) -> int:
        """Waiting requests in arrival order while the budgets and the blocks allow."""
        s = self.sched
        while self.waiting and budget > 0 and len(self.running) < s.max_num_seqs:
            r = self.waiting[0]
            if self.cutoff is not None and r.sched < 0 and r.arrival > self.cutoff:
                break  # received after this batch was formed (run_ahead)
            if r.seg is not None:  # preempted: what the cache still holds of it
                r.cached = r.ctx = min(r.seg[1], r.full) * self.bs
            if r.ctx == 0 and r.cached:
                r.ctx = r.cached
            left = r.prompt - r.ctx
            if left <= 0 and r.gen and not r.blocks:  # arrived prefilled: it decodes at once
                need = self._admit_need(r, 1)
                if s.admission == "ratio":
                    if _blocks(need, self.bs) - r.blocks > self.free:
                        break
                    need = r.ctx + 1
                if not self._grow(r, need):
                    break
                self.waiting.popleft()
                if r.sched < 0:
                    r.sched = self.t
                self.running.append(r)
                if s.mixed:  # SGLang's decode batch (prefill-first) takes it in its own loop
                    self._decode(r)
                budget -= 1
                continue
            n = min(left, budget) if s.chunked_prefill else left
            if n > budget:
                break
            need = self._admit_need(r, n)
            if s.admission == "ratio":
                if _blocks(need, self.bs) - r.blocks > self.free:
                    break
                ok = self._grow(r, r.ctx + n)
            else:
                ok = self._grow(r, need)
            if not ok:
                break
            self.waiting.popleft()
            if r.sched < 0:
                r.sched = self.t
            self.running.append(r)
            chunks.append((r, n))
            budget -= n
        return budget

    def schedule_mixed(self) -> list:
        """vLLM V1 / TensorRT-LLM: running first (decodes and continuing chunks), then new.
        Returns the prefill chunks; the decodes are counted into the state."""
        budget = self.sched.max_num_batched_tokens
        chunks: list = []
        before = self.preemptions
        bs, running, decode = self.bs, self.running, self._decode
        # the common case inlined (:meth:`_decode`): a decode with room in its last block
        step, prev = self.steps, self.steps - 1
        irregular, finished = self.irregular, self.finished
        i = fast = ctx_sum = 0
        while i < len(running) and budget > 0:
            r = running[i]
            ctx = r.ctx
            if ctx >= r.prompt and r.blocks * bs > ctx:
                r.ctx = ctx = ctx + 1
                ctx_sum += ctx
                r.gen += 1
                if r.last_step != prev:
                    irregular.append((r, r.last_step))
                r.last_step = step
                if r.gen >= r.n_out:
                    finished.append(r)
                fast += 1
                budget -= 1
                i += 1
                continue
            left = r.prompt - ctx
            n = 1 if left <= 0 else min(left, budget)
            while not self._grow(r, r.ctx + n):
                victim = running[-1]  # never one scheduled already: those come before r
                self._preempt(victim)
                if victim is r:
                    break
            else:
                if left <= 0:
                    decode(r)
                else:
                    chunks.append((r, n))
                budget -= n
                i += 1
            # else r itself was preempted: the list shrank, the index stays
        self.n_dec += fast
        self.ctx_sum += ctx_sum
        if self.preemptions == before:  # vLLM admits nothing new in a step that preempted
            self._admit(budget, chunks)
        return chunks

    def schedule_prefill_first(self) -> list:
        """SGLang: a prefill batch (continuing chunks and new requests) when one forms, else a
        decode batch of every running request."""
        budget = self.sched.max_num_batched_tokens
        chunks: list = []
        for r in self.running:
            left = r.prompt - r.ctx
            if left > 0 and budget > 0:
                n = min(left, budget)
                if self._grow(r, r.ctx + n):
                    chunks.append((r, n))
                    budget -= n
        self._admit(budget, chunks)
        if chunks:
            return chunks
        i = 0
        while i < len(self.running):
            r = self.running[i]
            while not self._grow(r, r.ctx + 1):
                victim = self.running[-1]
                self._preempt(victim)  # SGLang's retract_decode, by recompute
                if victim is r:
                    break
            else:
                self._decode(r)
                i += 1
        return chunks

    def advance(self, dt: float, chunks: list) -> None:
        self.last_start = self.t
        t = self.t = self.t + dt
        self.step_end.append(t)
        self.steps += 1
        nrun, nwait = len(self.running), len(self.waiting)
        self.in_system += (nrun + nwait) * dt
        self.run_int += nrun * dt
        self.wait_int += nwait * dt
        used = self.total_blocks - self.free
        self.kv_int += used * dt
        self.kv_peak = max(self.kv_peak, used)
        itl, ends = self.itl, self.step_end
        common = self.n_dec - len(self.irregular)  # their last token ended the step before
        if common:
            itl[dt] = itl.get(dt, 0) + common
        for r, prev in self.irregular:
            g = t - (ends[prev] if prev >= 0 else r.first)  # < 0: its first token came prefilled
            itl[g] = itl.get(g, 0) + 1
        finished = self.finished
        for r, n in chunks:
            r.ctx += n
            if r.ctx >= r.prompt:
                r.gen += 1
                if r.first < 0:
                    # the engine's per-request time (front end, first-token return) on top
                    r.first = t + self.request_s
                else:
                    g = t - ends[r.last_step]
                    itl[g] = itl.get(g, 0) + 1
                r.last_step = self.steps - 1
                if r.gen >= r.n_out:
                    finished.append(r)
        for r in finished:
            self._finish(r)

    def _finish(self, r: _Req) -> None:
        r.done = self.t + self.request_s
        self._release(r, False)
        self.free += r.blocks
        r.blocks = 0
        self.running.remove(r)
        self.completed += 1
        if self.closed and self.next < self.n:
            q = self.reqs[self.next]
            q.arrival = self.t
            self.waiting.append(q)
            self.next += 1

    def trace(self) -> SimTrace:
        reqs = self.reqs
        start = min(r.arrival for r in reqs)
        end = max(r.done for r in reqs)
        return SimTrace(
            arrival_s=tuple(r.arrival for r in reqs), first_token_s=tuple(r.first for r in reqs),
            done_s=tuple(r.done for r in reqs), scheduled_s=tuple(r.sched for r in reqs),
            input_tokens=tuple(r.n_in for r in reqs), output_tokens=tuple(r.n_out for r in reqs),
            itl=tuple(sorted(self.itl.items())), steps=self.steps,
            preemptions=self.preemptions, in_system_s=self.in_system, running_s=self.run_int,
            waiting_s=self.wait_int, kv_used_s=self.kv_int, kv_peak_blocks=self.kv_peak,
            kv_blocks=self.total_blocks, span_s=end - start, start_s=start)
