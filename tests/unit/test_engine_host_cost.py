"""A serving engine's host work per step and per request (issue 31: "serving engines have a
per-step cost the model does not carry"), checked by hand against the profiles' figures."""

from dataclasses import replace

import pytest

from gpuplan import Job, estimate_speed, get_gpu, load_model
from gpuplan.engines.profiles import ENGINES, ServingHost, get_engine


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


#: vLLM's EngineCore per step, by hand from the PR descriptions: schedule() 0.2 ms,
#: _update_states 0.18 ms, _prepare_inputs 0.05 ms (vllm PR #42131); update_from_output 0.142 ms
#: at 128 sequences and 0.287 ms at 256 (PR #46112)
_CORE_FIXED = 0.2e-3 + 0.18e-3 + 0.05e-3
_CORE_SEQ = (0.287e-3 - 0.142e-3) / 128


def test_vllm_engine_core_is_the_prs_figures():
    host = ENGINES["vllm"].serving_host
    assert host.core_step_s(0) == pytest.approx(0.43e-3)
    # the per-sequence line through PR #46112's two batches
    assert host.core_step_s(256) - host.core_step_s(128) == pytest.approx(0.287e-3 - 0.142e-3)
    assert host.core_step_s(8) == pytest.approx(0.43e-3 + 8 * 1.1328e-6, rel=1e-4)
    # the profile's loop is the default version's (0.21): async scheduling, on from 0.14
    assert host.core_overlap


def test_vllm_decode_step_hides_output_processing_behind_the_kernels():
    vllm, plain = _est("vllm"), _est("gpt-fast")  # the same CUDA-graph step, no host work
    d = vllm.step
    assert d.serve_host_s == pytest.approx(0.2e-3 + 7 * 3.2e-3 / 31)  # 0.92 ms
    core = _CORE_FIXED + 8 * _CORE_SEQ
    assert d.serve_core_s == pytest.approx(core)
    # output processing beside the step: max(kernels, launches + it); the EngineCore's own work
    # for the next step beside it too (async scheduling): max(that, launches + its work)
    assert d.time_s == pytest.approx(max(d.device_time_s, d.host_time_s + d.serve_host_s,
                                         d.host_time_s + core))
    # an 8B decode step of 8 sequences on an H100 reads ~16 GB of weights (several ms): the
    # 0.92 ms of output processing and the loop's 0.44 ms hide under it, the step is gpt-fast's
    assert d.device_time_s > d.host_time_s + max(d.serve_host_s, core)
    assert vllm.tpot_s == pytest.approx(plain.tpot_s, rel=1e-9)
    assert d.serve_host_exposed_s == pytest.approx(0.0, abs=1e-12)
    # the breakdown still sums: kernels + launch gaps + the engine's exposed host work
    assert d.kernel_time_s + d.launch_time_s + d.serve_host_exposed_s == pytest.approx(d.time_s)


def test_without_async_scheduling_the_engine_core_follows_the_step():
    vllm, plain = _est("vllm"), _est("gpt-fast")
    d = replace(vllm.step, serve_core_overlap=False)  # vLLM 0.8-0.13
    core = _CORE_FIXED + 8 * _CORE_SEQ
    # schedule, execute, update_from_output in turn: the GPU waits for the loop's work
    assert d.time_s == pytest.approx(plain.step.time_s + core, rel=1e-9)
    assert d.serve_host_exposed_s == pytest.approx(core)
    assert d.kernel_time_s + d.launch_time_s + d.serve_host_exposed_s == pytest.approx(d.time_s)
    # beside the step, a loop slower than the kernels sets it
    slow = replace(vllm.step, serve_core_s=3 * d.device_time_s)
    assert slow.time_s == pytest.approx(d.host_time_s + 3 * d.device_time_s)


def test_vllm_output_processing_outlasting_the_kernels_sets_the_step():
    # 256 sequences: 0.2 ms + 255 x 3.2/31 ms = 26.5 ms of output processing a step, more than
    # the step's kernels (8B weights once, 256 short contexts): the host sets the pace
    vllm = _est("vllm", batch=256)
    d = vllm.step
    host = 0.2e-3 + 255 * 3.2e-3 / 31
    core = _CORE_FIXED + 256 * _CORE_SEQ
    assert d.serve_host_s == pytest.approx(host)
    assert d.device_time_s < d.host_time_s + host
    assert core < host  # the loop's 0.72 ms beside the step is under the output processing
    assert d.time_s == pytest.approx(d.host_time_s + host)
    assert d.serve_host_exposed_s == pytest.approx(d.time_s - max(d.device_time_s, d.host_time_s))


def test_overlap_hides_host_work_behind_the_device():
    d = replace(_est("vllm").step, serve_core_s=0.0)  # the output processing alone
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
    assert d.serve_core_s == pytest.approx(_CORE_FIXED + 256 * _CORE_SEQ)
    assert d.time_s == pytest.approx(d.host_time_s + d.serve_host_s, rel=1e-9)
    # the TP all-reduces are added after the step either way (the same for both engines: an
    # upper bound where the output processing, in another process, would also cover them)
    plain = out["gpt-fast"]
    assert out["vllm"].tpot_s - d.time_s == pytest.approx(plain.tpot_s - plain.step.time_s)
    assert out["vllm"].tpot_s > plain.tpot_s


def test_async_scheduling_by_vllm_version():
    from gpuplan.capacity import scheduler_for

    # vLLM 0.14.0's release notes: "Async scheduling is now enabled by default"
    for v in ("0.14", "0.19.0", "0.21"):
        s = scheduler_for("vllm", v)
        assert s.async_scheduling and s.run_ahead
    for v in ("0.8", "0.10.1", "0.11.2", "0.13"):
        s = scheduler_for("vllm", v)
        assert not s.async_scheduling and not s.run_ahead


def test_capacity_puts_the_engine_core_beside_the_step_under_async_scheduling():
    from gpuplan.capacity._cost import StepCost

    gpu, model = get_gpu("H100-SXM-80GB"), load_model("llama-3.1-8b")
    job = Job(model="llama-3.1-8b", mode="infer", engine="vllm")
    sync = StepCost(model, gpu, job, max_len=1024, async_scheduling=False)
    asy = StepCost(model, gpu, job, max_len=1024, async_scheduling=True)
    profile = StepCost(model, gpu, job, max_len=1024)  # the profile's loop: async
    plain = StepCost(model, gpu, job.with_(engine="gpt-fast"), max_len=1024)
    core = _CORE_FIXED + 8 * _CORE_SEQ
    # 8 decodes at context 512: the 8B step's kernels outlast the loop, so under async
    # scheduling the step is the kernels' (gpt-fast's); without it the loop's work follows it
    assert asy.decode_s(8, 8 * 512) == pytest.approx(plain.decode_s(8, 8 * 512), rel=1e-9)
    assert profile.decode_s(8, 8 * 512) == pytest.approx(asy.decode_s(8, 8 * 512), rel=1e-12)
    assert sync.decode_s(8, 8 * 512) == pytest.approx(plain.decode_s(8, 8 * 512) + core,
                                                       rel=1e-9)
    # a lone prompt: the same, at one sequence
    assert sync.prefill_s(256) - asy.prefill_s(256) == pytest.approx(_CORE_FIXED + _CORE_SEQ)


def test_async_scheduling_off_under_pipeline_parallelism():
    from gpuplan.capacity._plan import Deployment

    gpu, model = get_gpu("H100-SXM-80GB"), load_model("llama-3.1-8b")
    # vLLM 0.14.0's notes: async scheduling "Excludes ... pipeline parallel"
    pp = Deployment(model, gpu, Job(model="x", mode="infer", pp=2, gpus=2),
                    engine_version="0.19.0", max_model_len=4096)
    assert not pp.sched.async_scheduling and not pp.sched.run_ahead
    assert not pp.cost.async_scheduling
    one = Deployment(model, gpu, Job(model="x", mode="infer"), engine_version="0.19.0",
                     max_model_len=4096)
    assert one.sched.async_scheduling and one.sched.run_ahead and one.cost.async_scheduling


def test_speed_and_capacity_agree_that_pipeline_parallelism_serializes_the_loop(cli):
    """One truth (onetruth43): capacity turned vLLM's async scheduling off under PP (above) but
    `gpuplan speed` kept the profile's overlap, so a vLLM TP4 PP2 job's batch-1 TPOT read
    17.52 ms in speed and fit and 17.95 ms in capacity at a vanishing rate -- the loop's own
    0.43 ms (schedule 0.2 + update_states 0.18 + prepare_inputs 0.05). The profile's rule
    (ServingHost.overlaps_core) is read by both now; at PP 1 the loop stays beside the step."""
    import json

    job = ["llama-3.1-70b", "--gpu", "H100-SXM-80GB", "--engine", "vllm", "--tp", "4"]
    for pp, overlapped in ((2, False), (1, True)):
        lay = [*job, "--pp", str(pp)]
        code, out, err = cli("speed", *lay, "--gpus", str(4 * pp), "--mode", "infer", "--seq",
                             "2048", "--json")
        assert code == 0, err
        speed = json.loads(out)
        assert speed["step"]["serve_core_overlap"] is overlapped
        code, out, err = cli("capacity", *lay, "--max-model-len", "16384", "--rate", "0.001",
                             "--requests", "4", "--input", "2048", "--output", "128", "--json")
        assert code == 0, err
        cap = json.loads(out)
        assert cap["scheduler"]["async_scheduling"] is overlapped
        assert cap["tpot_s"]["mean"] == pytest.approx(speed["tpot_s"], rel=1e-6), pp
        assert cap["ttft_s"]["mean"] == pytest.approx(speed["ttft_s"], rel=1e-6), pp
    serial = get_engine("vllm").serving_host
    assert serial.overlaps_core(1) and not serial.overlaps_core(2)
    # the loop serialized costs its own work, at batch 1
    assert serial.core_step_s(1) == pytest.approx(_CORE_FIXED + _CORE_SEQ)
