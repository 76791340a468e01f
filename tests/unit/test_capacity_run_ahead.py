"""SGLang's overlap scheduler forms each batch while the step before it runs (SchedulerDefaults.
run_ahead; sglang scheduler.py event_loop_overlap): a request that arrives mid-step joins the
batch after the next one. Timed by hand with a cost of fixed step lengths."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuplan.capacity._engines import scheduler_for
from gpuplan.capacity._sim import simulate
from gpuplan.capacity._workload import Request, Workload
from gpuplan.engines.profiles import get_engine

PREFILL_S, DECODE_S = 0.040, 0.010


class _FixedCost:
    """A prefill step takes 40 ms, a decode step 10 ms, whatever the batch."""

    request_s = 0.0

    def step_s(self, decodes, context_sum, chunks):
        return PREFILL_S if chunks else DECODE_S


def _two_requests(second_at: float) -> Workload:
    return Workload(requests=(Request(0.0, 100, 5), Request(second_at, 100, 5)), rate=1.0)


def _ttfts(run_ahead: bool, second_at: float) -> list[float]:
    sched = replace(scheduler_for("sglang"), run_ahead=run_ahead)
    tr = simulate(_two_requests(second_at), _FixedCost(), sched, 10**6)
    return [f - a for f, a in zip(tr.first_token_s, tr.arrival_s)]


def test_sglang_runs_ahead_by_default():
    assert scheduler_for("sglang").run_ahead
    # vLLM runs one step ahead from 0.14 (async scheduling on by default), not before
    assert not scheduler_for("vllm", "0.11").run_ahead and scheduler_for("vllm", "0.14").run_ahead
    assert not scheduler_for("trt-llm", "0.14").run_ahead
    host = get_engine("sglang").serving_host
    assert host is not None and host.overlap and host.step_s(64) == 0.0


def test_a_request_arriving_mid_step_waits_one_step_more():
    # A: prefill 0-40 ms, then decodes 40-50, 50-60, 60-70 ... B arrives at 55 ms, inside the
    # step 50-60. Forming each batch when the last one ends, B's prefill runs 60-100 ms: TTFT
    # 45 ms. Running ahead, the batch starting at 60 was formed at 50 (before B), so B is
    # prefilled 70-110 ms: TTFT 55 ms, one decode step more.
    plain = _ttfts(False, 0.055)
    ahead = _ttfts(True, 0.055)
    assert plain == pytest.approx([PREFILL_S, 0.100 - 0.055])
    assert ahead == pytest.approx([PREFILL_S, 0.110 - 0.055])


def test_no_delay_for_a_request_arriving_at_an_idle_engine():
    # B arrives at 1 s, long after A finished (40 + 4 x 10 ms): the idle loop takes it at once
    assert _ttfts(True, 1.0) == pytest.approx([PREFILL_S, PREFILL_S])
