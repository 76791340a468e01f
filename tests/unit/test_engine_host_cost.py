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
    # vllm issue #6913: 0.2 ms at batch 1, 3.4 ms at batch 32 -> 0.1032 ms a sequence
    host = ENGINES["vllm"].serving_host
    assert host.step_s(1) == pytest.approx(0.2e-3)
    assert host.step_s(32) == pytest.approx(3.4e-3)
    assert host.step_s(8) == pytest.approx(0.2e-3 + 7 * 3.2e-3 / 31)
    assert not host.overlap


def test_vllm_decode_step_is_graph_step_plus_host_work():
    vllm, plain = _est("vllm"), _est("gpt-fast")  # the same CUDA-graph step, no host work
    d = vllm.step
    assert d.serve_host_s == pytest.approx(0.2e-3 + 7 * 3.2e-3 / 31)
    # no overlap: the whole host work follows the kernels' pace
    assert d.time_s == pytest.approx(max(d.device_time_s, d.host_time_s) + d.serve_host_s)
    assert vllm.tpot_s - plain.tpot_s == pytest.approx(d.serve_host_s, rel=1e-9)
    assert d.serve_host_exposed_s == pytest.approx(d.serve_host_s)
    # the breakdown still sums: kernels + launch gaps + the engine's host work
    assert d.kernel_time_s + d.launch_time_s + d.serve_host_exposed_s == pytest.approx(d.time_s)
    assert vllm.to_dict()["serve_host_exposed_s"] == pytest.approx(d.serve_host_s)


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
        job = Job(model="llama-3.1-8b", mode="infer", engine=engine, batch=8, seq=128, tp=2,
                  gpus=2)
        out[engine] = estimate_speed(model, gpu, job, new_tokens=64, measured=None)
    # one step of 8 sequences, whatever the ranks: 0.2 ms + 7 x 3.2/31 ms
    assert out["vllm"].tpot_s - out["gpt-fast"].tpot_s == pytest.approx(
        0.2e-3 + 7 * 3.2e-3 / 31, rel=1e-9)
