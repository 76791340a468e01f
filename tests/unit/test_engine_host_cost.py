"""A serving engine's host work per step and per request (issue 31: "serving engines have a
per-step cost the model does not carry"), checked by hand against the profiles' figures."""

from dataclasses import replace

import pytest

from gpuplan import Job, estimate_speed, get_gpu, load_model
from gpuplan.engines.profiles import ENGINES, ServingHost


def _est(engine: str, batch: int = 8):
    job = Job(model="llama-3.1-8b", mode="infer", engine=engine, batch=batch, seq=128)
    return estimate_speed(load_model("llama-3.1-8b"), get_gpu("H100-SXM-80GB"), job, new_tokens=64,
                          measured=None)


def test_vllm_output_processing_is_the_rfc_line():
    # vllm issue #6913: 0.2 ms at batch 1, 3.4 ms at batch 32 -> 0.1032 ms a sequence; run by
    # the V1 engine (vLLM >= 0.8, every version modelled) in the API-server process, beside
    # the EngineCore loop: an overlap
    host = ENGINES["vllm"].serving_host
    assert host.step_s(1) == pytest.approx(0.2e-3)
    assert host.step_s(32) == pytest.approx(3.4e-3)
    assert host.step_s(8) == pytest.approx(0.2e-3 + 7 * 3.2e-3 / 31)
    assert host.overlap


def test_vllm_decode_step_hides_output_processing_behind_the_kernels():
    vllm, plain = _est("vllm"), _est("gpt-fast")  # the same CUDA-graph step, no host work
    d = vllm.step
    assert d.serve_host_s == pytest.approx(0.2e-3 + 7 * 3.2e-3 / 31)  # 0.92 ms
    # beside the step: max(kernels, launches + output processing)
    assert d.time_s == pytest.approx(max(d.device_time_s, d.host_time_s + d.serve_host_s))
    # an 8B decode step of 8 sequences on an H100 reads ~16 GB of weights (several ms): the
    # 0.92 ms of output processing hides under it, the step is gpt-fast's
    assert d.device_time_s > d.host_time_s + d.serve_host_s
    assert vllm.tpot_s == pytest.approx(plain.tpot_s, rel=1e-9)
    assert d.serve_host_exposed_s == pytest.approx(0.0, abs=1e-12)
    # the breakdown still sums: kernels + launch gaps + the engine's exposed host work
    assert d.kernel_time_s + d.launch_time_s + d.serve_host_exposed_s == pytest.approx(d.time_s)


def test_vllm_output_processing_outlasting_the_kernels_sets_the_step():
    # 256 sequences: 0.2 ms + 255 x 3.2/31 ms = 26.5 ms of output processing a step, more than
    # the step's kernels (8B weights once, 256 short contexts): the host sets the pace
    vllm = _est("vllm", batch=256)
    d = vllm.step
    host = 0.2e-3 + 255 * 3.2e-3 / 31
    assert d.serve_host_s == pytest.approx(host)
    assert d.device_time_s < d.host_time_s + host
    assert d.time_s == pytest.approx(d.host_time_s + host)
    assert d.serve_host_exposed_s == pytest.approx(d.time_s - max(d.device_time_s, d.host_time_s))


def test_overlap_hides_host_work_behind_the_device():
    d = _est("vllm").step
    small = replace(d, serve_overlap=True)  # 0.92 ms of host work beside a multi-ms step
    assert small.time_s == pytest.approx(max(d.device_time_s, d.host_time_s + d.serve_host_s))
    assert small.time_s == pytest.approx(d.device_time_s)
    big = replace(d, serve_overlap=True, serve_host_s=2 * d.device_time_s)
    assert big.time_s == pytest.approx(d.host_time_s + 2 * d.device_time_s)


def test_trtllm_request_cost_is_in_ttft_not_in_the_step():
    trt = _est("trt-llm")
    assert trt.request_host_s == pytest.approx(8.3e-3)
    assert trt.ttft_s == pytest.approx(trt.prefill_time_s + trt.prefill_transfer.exposed_s
                                       + 8.3e-3)
    assert trt.step.serve_host_s == 0.0


def test_engines_without_host_work_move_nothing():
    for name in ("transformers", "gpt-fast"):
        est = _est(name)
        assert est.request_host_s == 0.0 and est.step.serve_host_s == 0.0


def test_capacity_adds_the_request_cost_to_ttft_once():
    from gpuplan.capacity._cost import StepCost

    gpu = get_gpu("H100-SXM-80GB")
    job = Job(model="llama-3.1-8b", mode="infer", engine="trt-llm")
    model = load_model("llama-3.1-8b")
    cost = StepCost(model, gpu, job, max_len=1024)
    est = estimate_speed(model, gpu, job.with_(batch=1, seq=256, context=256),
                         new_tokens=1, measured=None)
    assert cost.prefill_s(256) == pytest.approx(est.ttft_s - 8.3e-3)
    assert cost.request_s == pytest.approx(8.3e-3)


def test_serving_host_step_is_linear():
    h = ServingHost(fixed_s=1e-4, per_seq_s=2e-5)
    assert h.step_s(0) == 1e-4 and h.step_s(10) == pytest.approx(3e-4)


def test_tensor_parallel_step_carries_the_host_work_once():
    gpu, model = get_gpu("H100-SXM-80GB"), load_model("llama-3.1-8b")
    out = {}
    for engine in ("vllm", "gpt-fast"):
        job = Job(model="llama-3.1-8b", mode="infer", engine=engine, batch=256, seq=128, tp=2,
                  gpus=2)
        out[engine] = estimate_speed(model, gpu, job, new_tokens=64, measured=None)
    # one step of 256 sequences, whatever the ranks: 0.2 ms + 255 x 3.2/31 ms of output
    # processing once (not once a rank), longer than the TP2 step's kernels: it sets the step
    d = out["vllm"].step
    assert d.serve_host_s == pytest.approx(0.2e-3 + 255 * 3.2e-3 / 31)
    assert d.time_s == pytest.approx(d.host_time_s + d.serve_host_s, rel=1e-9)
    # the TP all-reduces are added after the step either way (the same for both engines: an
    # upper bound where the output processing, in another process, would also cover them)
    plain = out["gpt-fast"]
    assert out["vllm"].tpot_s - d.time_s == pytest.approx(plain.tpot_s - plain.step.time_s)
    assert out["vllm"].tpot_s > plain.tpot_s
