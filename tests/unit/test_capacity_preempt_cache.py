"""The prefix cache across preemption and across runs, timed by hand with a cost that records
each step's prefill chunks:

* vLLM V1 frees a preempted request's blocks to the free queue's tail, its last block first,
  and finds the survivors by hash when it is scheduled again (SchedulerDefaults.
  preempt_keeps_cache; vllm/v1/core/kv_cache_manager.py ``free``: "the tail blocks are evicted
  first"), so it re-prefills only what was evicted meanwhile;
* a workload's ``cached_prefixes`` are in the cache when the run starts (a server's earlier
  runs), so the first request naming one hits it;
* a chunk's attention after a long cached prefix costs the lone prompt with as many
  query-key pairs, not ``1 + 2p/n`` times the short chunk's own (StepCost._attn_s)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuplan import Job, get_gpu, load_model
from gpuplan.capacity._cost import StepCost
from gpuplan.capacity._engines import scheduler_for
from gpuplan.capacity._sim import simulate
from gpuplan.capacity._workload import Request, Workload


class _Recording:
    """Every step 10 ms; keeps each step's prefill chunks as (new tokens, cached before)."""

    request_s = 0.0

    def __init__(self) -> None:
        self.chunks: list[list[tuple[int, int]]] = []

    def step_s(self, decodes, context_sum, chunks):
        if chunks:
            self.chunks.append(list(chunks))
        return 0.010


def _two(keep: bool):
    # two 32-token prompts, 40 tokens out each, on 8 blocks of 16 (128 tokens)
    sched = replace(scheduler_for("vllm", "0.8"), max_num_batched_tokens=4096,
                    preempt_keeps_cache=keep)
    wl = Workload(requests=(Request(0.0, 32, 40), Request(0.0, 32, 40)), rate=1.0)
    cost = _Recording()
    tr = simulate(wl, cost, sched, 8 * 16)
    return tr, cost.chunks


def test_vllm_keeps_a_preempted_requests_cache():
    assert all(scheduler_for("vllm", v).preempt_keeps_cache for v in ("0.8", "0.11", "0.14"))
    assert not scheduler_for("sglang").preempt_keeps_cache


def test_a_preempted_request_reprefills_only_its_evicted_tail():
    # Step 1 prefills both prompts (2 blocks each) and makes their first tokens; step s >= 2
    # decodes token s. After step 33 each holds 64 tokens in 4 blocks, the pool is full, and in
    # step 34 A's 65th token needs a fifth block: B (admitted last) is preempted with 33 tokens
    # made, its 4 blocks (all full: 64 <= 32 + 33 - 1) to the free queue's tail, last first.
    # A's fifth block is the queue's head: B's last block. A ends at step 40 (40 tokens). B is
    # scheduled again with 32 + 33 = 65 tokens: 3 blocks survive, 48 cached, 17 to prefill.
    tr, chunks = _two(True)
    assert tr.preemptions == 1
    assert chunks[0] == [(32, 0), (32, 0)]
    assert chunks[1:] == [[(17, 48)]]
    # without the cache every one of the 65 tokens is prefilled again
    tr, chunks = _two(False)
    assert tr.preemptions == 1 and chunks[1:] == [[(65, 0)]]


def test_prefixes_cached_before_the_run_hit_at_once():
    sched = replace(scheduler_for("vllm", "0.8"), max_num_batched_tokens=4096)
    reqs = (Request(0.0, 100, 2, "p0", 100), Request(0.0, 100, 2, "p1", 100))
    cost = _Recording()
    simulate(Workload(requests=reqs, concurrency=2, cached_prefixes=("p0",)), cost, sched,
             10**5)
    # p0's whole blocks short of the last token: 99 - 99 % 16 = 96 cached; p1 is new
    assert cost.chunks[0] == [(4, 96), (100, 0)]


@pytest.fixture(scope="module")
def cost():
    gpu = get_gpu("a100")
    return StepCost(load_model("qwen2.5-7b"), gpu, Job(model="x", mode="infer", engine="vllm"),
                    max_len=4096)


def test_a_short_chunk_after_a_long_prefix_costs_its_query_key_pairs(cost):
    # a lone prompt's attention is unchanged
    assert cost._attn_s(1024, 0) == cost._pair(1024)[1]
    # 16 tokens after 1,008 cached form 16 x 1,008 + 16 x 16 / 2 = 16,256 query-key pairs, a
    # 1,024-token prompt 524,288: the chunk cannot take longer (read as 1 + 2p/n = 127 times a
    # 16-token prompt's kernel floor it did: 1.77 against 1.30 ms)
    assert cost._attn_s(16, 1008) < cost._attn_s(1024, 0)
    # it is the attention of the lone prompt with as many pairs: sqrt(16^2 + 2 x 16 x 1008)
    assert cost._attn_s(16, 1008) == pytest.approx(
        cost._pair(180)[1] * (16 * 16 + 2 * 16 * 1008) / 180 ** 2)
    # more cached keys, more time
    assert cost._attn_s(16, 4080) > cost._attn_s(16, 1008)
