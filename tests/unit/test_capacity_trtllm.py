"""TensorRT-LLM's scheduler in the capacity simulation, checked by hand on toy pools (issue 29).

What is simulated, from TensorRT-LLM's code:

* ``GUARANTEED_NO_EVICT`` (cpp/tensorrt_llm/batch_manager/capacityScheduler.cpp @02a10fed,
  ``GuaranteedNoEvictScheduler::impl``): a running request keeps the blocks to drive it to
  completion; a waiting one is admitted, in order, only while ``enoughAvailableBlocks`` holds
  for its prompt plus its whole output, and the first that does not fit stops the loop; at
  most ``maxNumRequests`` (``max_batch_size``) are scheduled.
* ``MicroBatchScheduler`` (cpp/tensorrt_llm/batch_manager/microBatchScheduler.cpp @0a949d31):
  without context chunking a context request needs its whole prompt inside ``max_num_tokens``
  together with the step's generation tokens (one each), else the loop breaks.

A stub step of 1 ms makes every time a count of steps.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuplan.capacity._engines import scheduler_for
from gpuplan.capacity._sim import simulate
from gpuplan.capacity._workload import Dist, make_workload

STEP = 1e-3


class _Step:
    """Every step takes 1 ms, whatever it holds; no per-request time."""

    request_s = 0.0

    def step_s(self, n_dec, ctx_sum, chunks):
        return STEP


def _trt(**kw):
    return replace(scheduler_for("trt-llm", "1.0"), prefix_caching=False, **kw)


def _closed(n, i, o):
    # n clients at once, one request each: every request arrives at 0
    return make_workload(input=Dist("fixed", i), output=Dist("fixed", o), concurrency=n,
                         requests=n, seed=0)


def _steps(times):
    return [round(t / STEP) for t in times]


def test_reserve_ahead_admits_only_what_the_whole_output_fits():
    # 20-token prompts, 44 output tokens: 64 tokens = 2 blocks of 32 reserved at admission.
    # A pool of 5 blocks runs 2 at once (4 blocks), though each prompt alone needs 1 block.
    # By hand: A, B prefill in step 1 (first token), decode 43 tokens in steps 2-44 and free
    # their blocks; C, D prefill in step 45, finish in 88; E prefills in 89, finishes in 132.
    sched = _trt()
    assert sched.admission == "reserve" and sched.block_size == 32
    tr = simulate(_closed(5, 20, 44), _Step(), sched, kv_tokens=5 * 32)
    assert _steps(tr.first_token_s) == [1, 1, 45, 45, 89]
    assert _steps(tr.done_s) == [44, 44, 88, 88, 132]
    assert tr.preemptions == 0
    assert tr.kv_peak_blocks == 4
    assert tr.steps == 132


def test_incremental_admission_on_the_same_pool_overcommits_and_preempts():
    # the same pool under vLLM's rule (blocks for what is scheduled now): all 5 prompts (1
    # block each) are admitted at once, and the pool runs out when they cross 32 tokens
    sched = _trt(admission="incremental", preemption="recompute")
    tr = simulate(_closed(5, 20, 44), _Step(), sched, kv_tokens=5 * 32)
    assert _steps(tr.first_token_s) == [1, 1, 1, 1, 1]
    assert tr.preemptions > 0


def test_max_batch_size_caps_the_running_requests():
    # a pool with room for all 5, but max_batch_size 2: the same timeline as the small pool
    tr = simulate(_closed(5, 20, 44), _Step(), _trt(max_num_seqs=2), kv_tokens=1000 * 32)
    assert _steps(tr.first_token_s) == [1, 1, 45, 45, 89]
    assert tr.kv_peak_blocks == 4


def test_max_num_tokens_without_chunking_breaks_at_the_first_prompt_that_does_not_fit():
    # max_num_tokens 50, prompts of 20, one token per generation request:
    # step 1: A, B (40; C's 20 would make 60); step 2: 2 decodes + C, D (42; E: 62 > 50);
    # step 3: 4 decodes + E (24)
    sched = _trt(max_num_batched_tokens=50)
    assert not sched.chunked_prefill
    tr = simulate(_closed(5, 20, 44), _Step(), sched, kv_tokens=1000 * 32)
    assert _steps(tr.first_token_s) == [1, 1, 2, 2, 3]


@pytest.mark.parametrize("n", [1, 3, 7])
def test_reserved_blocks_never_exceed_the_pool(n):
    # 3 blocks: one request of 64 tokens (2 blocks) at a time, whatever the load
    tr = simulate(_closed(n, 20, 44), _Step(), _trt(), kv_tokens=3 * 32)
    assert tr.kv_peak_blocks == 2
    assert _steps(tr.first_token_s) == [1 + 44 * k for k in range(n)]


@pytest.mark.parametrize("version", ["0.14", "1.0"])
@pytest.mark.parametrize("gpu", ["a100", "h100"])
def test_deployment_runs_trtllm_max_batch_size_on_every_card(version, gpu):
    # TensorRT-LLM's max_batch_size does not depend on the card (release notes @b47198a2,
    # 0.14.0: "The default max_batch_size of the trtllm-build command is set to 2048";
    # tensorrt_llm/llmapi/llm_args.py: 2048), where vLLM's max_num_seqs is 256 on an A100
    from gpuplan import Job, get_gpu, load_model
    from gpuplan.capacity._plan import Deployment

    model = load_model("llama-3.1-8b")
    job = Job(model="llama-3.1-8b", mode="infer")
    trt = Deployment(model, get_gpu(gpu), job, engine="trt-llm", engine_version=version,
                     max_model_len=4096)
    assert trt.sched.max_num_seqs == 2048
    assert trt.block_size == (64 if version == "0.14" else 32)
    vllm = Deployment(model, get_gpu(gpu), job, engine="vllm", engine_version="0.11",
                      max_model_len=4096)
    assert vllm.sched.max_num_seqs == (256 if gpu == "a100" else 1024)
