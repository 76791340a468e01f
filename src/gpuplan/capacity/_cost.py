"""The time of one engine step of an exact mix -- prefill chunks and decodes at their own
contexts -- from gpuplan's speed model (:func:`gpuplan.compute.estimate_speed`), cached by shape.

The speed model times two kinds of step on the replica's layout (TP/PP/EP collectives on the
topology, the engine's runtime and its launch cost, the weights read once a step):

* ``D(b, c)``: a decode step of ``b`` sequences at context ``c`` (:attr:`SpeedEstimate.tpot_s`);
* ``P(n)``: one prompt of ``n`` tokens (:attr:`SpeedEstimate.ttft_s` less the engine's
  per-request time, which is no part of a step), whose op list names its attention
  (``attn.core``) apart from the token-linear rest.

Both carry the serving engine's host work per step (scheduling, sampling, output processing:
:class:`gpuplan.engines.profiles.ServingHost`), after the kernels or, under an overlap
scheduler, beside them. The speed model times the engine profile's loop (vLLM's: async
scheduling, as from 0.14); a scheduler row says where the loop's own work
(``ServingHost.core_fixed_s``) runs for its version
(:attr:`._engines.SchedulerDefaults.async_scheduling`: between the steps for vLLM 0.8 and 0.11),
which :class:`StepCost` applies to each step the speed model returns (``async_scheduling``).

A decode step's attention reads each sequence's own keys, so its time is affine in the summed
context at a given ``b`` (checked: the speed model's D(b, c) is a straight line in c); the mix
is timed at the mean context. A step with prefill chunks is the decode step of its decodes
plus the token-linear part of the extra chunk tokens (``Plin(T) - Plin(b)``, ``Plin = P -
attention``) plus each chunk's attention: ``A(n, p) = Aself(n) (1 + 2p/n)`` for ``n`` new
tokens after ``p`` already cached (n x p keys beside the causal n x n / 2).

A pure step is the speed model's own figure: a lone prompt is P(n) at its exact ``n``, a decode
step D(b, c) at its exact ``b``, piecewise linear in the mean context between contexts 1 and
every multiple of 512 (the speed model's D is flat at short contexts, then straight). Inside a
mixed step the token-linear part and the chunk attention are read off a grid (tokens 1..32, then
every 32 to 1024, every 256 to 16384, every 2048 beyond), linearly between its points: the speed
model's GEMM tiling makes P(n) jagged by a few percent between tile multiples, and caching every
``n`` a step can mix would cost a speed-model call each.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import replace

from ..compute import estimate_speed
from ..hardware import GPU
from ..job import Job

__all__ = ["StepCost", "grid_points"]


def grid_points(n: int, kind: str) -> tuple[int, int]:
    """The cached grid points around ``n`` (equal when ``n`` is one)."""
    if kind == "context":
        if n < 1:
            return 1, 512
        step = 512
        lo = n - n % step
        return (lo, lo) if lo == n else (max(lo, 1), lo + step)
    else:
        if n <= 32:
            return n, n
        step = 32 if n <= 1024 else 256 if n <= 16384 else 2048
    lo = n - n % step
    return (lo, lo) if lo == n else (lo, lo + step)


class StepCost:
    """Step times of one replica (``job``'s layout and engine) of ``model`` on ``gpu``; the cache
    lives as long as the object, so a rate search reuses it."""

    def __init__(self, model, gpu: GPU, job: Job, *, max_len: int,
                 async_scheduling: bool | None = None) -> None:
        self.model, self.gpu, self.job, self.max_len = model, gpu, job, max_len
        self.async_scheduling = async_scheduling
        self._decode: dict[tuple[int, int], float] = {}
        self._exact: dict[int, float] = {}
        self._prefill: dict[int, tuple[float, float]] = {}
        self._request: float | None = None
        self.calls = 0

    def _speed(self, batch: int, seq: int, context: int):
        self.calls += 1
        job = self.job.with_(batch=batch, seq=seq, context=context)
        return estimate_speed(self.model, self.gpu, job, new_tokens=1, measured=None)

    def _async_shift(self, phase) -> float:
        """What the scheduler row's async scheduling changes in ``phase``'s time: the loop's own
        host work (:attr:`~gpuplan.compute.step.Phase.serve_core_s`) beside the step (True) or
        after it (False) where the engine profile says otherwise; 0 for None (the profile's),
        without such work, or where the two agree."""
        want = self.async_scheduling
        if (want is None or phase is None or not phase.serve_core_s
                or phase.serve_core_overlap == want):
            return 0.0
        return replace(phase, serve_core_overlap=want).time_s - phase.time_s

    def _decode_at(self, b: int, c: int) -> float:
        """D(b, c) at a grid context."""
        hit = self._decode.get((b, c))
        if hit is None:
            est = self._speed(b, 1, c)
            hit = self._decode[(b, c)] = est.tpot_s + self._async_shift(est.step)
        return hit

    def _prefill_pair(self, n: int) -> tuple[float, float]:
        """(P(n), its attention time) at a grid token count."""
        hit = self._prefill.get(n)
        if hit is None:
            est = self._speed(1, n, n)
            attn = sum(t.total_s for t in est.prefill.ops if t.op.name == "attn.core")
            hit = self._prefill[n] = (est.ttft_s - est.request_host_s
                                      + self._async_shift(est.prefill), attn)
        return hit

    def decode_s(self, b: int, context_sum: float) -> float:
        """A decode step of ``b`` sequences whose contexts sum to ``context_sum``."""
        c = context_sum / b
        lo, hi = grid_points(int(c), "context")
        t0 = self._decode_at(b, lo)
        if c == lo or hi == lo:
            return t0
        t1 = self._decode_at(b, hi)
        return t0 + (t1 - t0) * (c - lo) / (hi - lo)

    def _pair(self, n: int) -> tuple[float, float]:
        lo, hi = grid_points(n, "tokens")
        p0, a0 = self._prefill_pair(lo)
        if hi == lo:
            return p0, a0
        p1, a1 = self._prefill_pair(hi)
        w = (n - lo) / (hi - lo)
        return p0 + (p1 - p0) * w, a0 + (a1 - a0) * w

    def prefill_s(self, n: int) -> float:
        """One prompt of ``n`` tokens alone (the speed model's TTFT, at exactly ``n``)."""
        hit = self._exact.get(n)
        if hit is None:
            est = self._speed(1, n, n)
            hit = self._exact[n] = (est.ttft_s - est.request_host_s
                                    + self._async_shift(est.prefill))
        return hit

    @property
    def request_s(self) -> float:
        """Each request's time outside the steps (the engine's front end and first-token
        return: :attr:`gpuplan.compute.SpeedEstimate.request_host_s`), added to its TTFT."""
        if self._request is None:
            self._request = self._speed(1, 1, 1).request_host_s
        return self._request

    def _linear_s(self, n: int) -> float:
        p, a = self._pair(n)
        return p - a

    def _attn_s(self, n: int, prior: int) -> float:
        """A chunk of ``n`` new tokens after ``prior`` cached ones: the attention of the lone
        prompt with as many query-key pairs, ``m = sqrt(n^2 + 2 n p)`` tokens (``m^2 / 2 =
        n^2 / 2 + n p``), scaled by the rounding of ``m``. Where the kernel is compute-bound
        this is ``Aself(n) (1 + 2p/n)``; a short chunk after a long prefix (a prefix-cache hit's
        last block: 16 tokens after 1,008) is not ``1 + 2p/n`` = 127 times a 16-token
        prompt's attention, which is its kernels' fixed floor, but one floor and its FLOPs."""
        if not prior:
            return self._pair(n)[1]
        work = n * n + 2 * n * prior
        m = max(1, round(math.sqrt(work)))
        return self._pair(m)[1] * work / (m * m)

    def step_s(self, decodes: int, context_sum: float, chunks: list[tuple[int, int]]) -> float:
        """One step: ``decodes`` sequences decoding at contexts summing to ``context_sum``, and
        prefill ``chunks`` as (new tokens, tokens already cached before them)."""
        if not chunks:
            return self.decode_s(decodes, context_sum) if decodes else 0.0
        tokens = sum(n for n, _ in chunks)
        attn = sum(self._attn_s(n, p) for n, p in chunks)
        if not decodes:
            if len(chunks) == 1 and chunks[0][1] == 0:
                return self.prefill_s(tokens)
            return self._linear_s(tokens) + attn
        return (self.decode_s(decodes, context_sum) + self._linear_s(tokens + decodes)
                - self._linear_s(decodes) + attn)
