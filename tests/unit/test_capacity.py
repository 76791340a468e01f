"""Physics oracles for `gpuplan capacity` (issue 29): the simulation against the speed model at
vanishing load, Little's law, the saturation bound, monotone latency in the rate, determinism,
a closed loop at concurrency 1, and KV exhaustion causing preemptions."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuplan import Job, estimate_speed, get_gpu, load_model
from gpuplan.capacity._cost import StepCost
from gpuplan.capacity._engines import scheduler_for
from gpuplan.capacity._plan import Deployment
from gpuplan.capacity._result import SLO
from gpuplan.capacity._sim import simulate
from gpuplan.capacity._workload import Dist, make_workload, parse_arrivals, parse_dist
from gpuplan.errors import InputError

GPU = get_gpu("h100")


@pytest.fixture(scope="module")
def model():
    return load_model("llama-3.1-8b")


@pytest.fixture(scope="module")
def dep(model):
    return Deployment(model, GPU, Job(model="x", mode="infer"), max_model_len=4096)


def _wl(rate=None, n=200, i=1000, o=64, seed=0, concurrency=None):
    return make_workload(input=Dist("fixed", i), output=Dist("fixed", o), rate=rate,
                         concurrency=concurrency, requests=n, seed=seed)


def _speed(model, batch, seq, context):
    job = Job(model="x", mode="infer", engine="vllm", batch=batch, seq=seq, context=context)
    return estimate_speed(model, GPU, job, new_tokens=1, measured=None)


@pytest.mark.parametrize("n", [1, 100, 777, 2000, 3000])
def test_pure_prefill_step_is_the_speed_model(model, n):
    cost = StepCost(model, GPU, Job(model="x", mode="infer", engine="vllm"), max_len=4096)
    assert cost.step_s(0, 0, [(n, 0)]) == pytest.approx(_speed(model, 1, n, n).ttft_s, rel=1e-3)


@pytest.mark.parametrize("b,c", [(1, 1), (1, 1024), (7, 1500), (64, 2048), (200, 3000)])
def test_pure_decode_step_is_the_speed_model(model, b, c):
    cost = StepCost(model, GPU, Job(model="x", mode="infer", engine="vllm"), max_len=4096)
    assert cost.step_s(b, b * c, []) == pytest.approx(_speed(model, b, 1, c).tpot_s, rel=1e-3)


def test_vanishing_rate_ttft_is_one_prefill_and_tpot_one_decode(model, dep):
    r = dep.run(_wl(rate=0.001, n=20, i=1000, o=64))
    assert r.ttft_s.p50 == pytest.approx(_speed(model, 1, 1000, 1000).ttft_s, rel=0.02)
    # batch-1 decode at the request's mean context (1000 + 63/2)
    assert r.tpot_s.p50 == pytest.approx(_speed(model, 1, 1, 1032).tpot_s, rel=0.02)
    assert r.preemptions == 0


def test_vanishing_rate_without_async_scheduling_adds_the_engine_core(model):
    # vLLM 0.11 (no async scheduling): the EngineCore's own work runs between the steps, after
    # the speed model's step (whose vLLM profile, the default version's, runs it beside)
    dep11 = Deployment(model, GPU, Job(model="x", mode="infer"), engine_version="0.11",
                       max_model_len=4096)
    assert not dep11.sched.async_scheduling
    r = dep11.run(_wl(rate=0.001, n=20, i=1000, o=64))
    est = _speed(model, 1, 1, 1032)
    assert est.step.serve_core_overlap
    after = replace(est.step, serve_core_overlap=False).time_s
    assert after == pytest.approx(est.step.time_s + est.step.serve_core_s)  # 8B: kernels longer
    assert r.tpot_s.p50 == pytest.approx(est.tpot_s - est.step.time_s + after, rel=0.02)
    pre = _speed(model, 1, 1000, 1000)
    lone = pre.ttft_s + pre.prefill.serve_core_s
    assert r.ttft_s.p50 == pytest.approx(lone, rel=0.02)


def test_littles_law(dep):
    r = dep.run(_wl(rate=8, n=400))
    mean_e2e = r.e2e_s.mean
    assert r.concurrency_mean == pytest.approx(r.throughput["requests_per_s"] * mean_e2e,
                                               rel=0.02)
    assert r.running_mean + r.waiting_mean == pytest.approx(r.concurrency_mean, rel=1e-9)


def test_throughput_never_exceeds_the_saturation_bound(model, dep):
    r = dep.run(_wl(rate=1000, n=600, i=500, o=128))
    b = dep.sched.max_num_seqs
    bound = b / _speed(model, b, 1, 1).tpot_s  # the decode step at max batch, shortest context
    assert r.throughput["output_tokens_per_s"] <= bound


def test_latency_percentiles_rise_with_the_rate(dep):
    rs = [dep.run(_wl(rate=x, n=300, seed=3)) for x in (1, 10, 40)]
    for a, b in zip(rs, rs[1:]):
        assert b.ttft_s.p99 >= a.ttft_s.p99
        assert b.e2e_s.p99 >= a.e2e_s.p99
        assert b.tpot_s.p50 >= a.tpot_s.p50


def test_one_seed_one_answer(dep):
    a = dep.run(_wl(rate=5, n=100, seed=7)).to_dict()
    b = dep.run(_wl(rate=5, n=100, seed=7)).to_dict()
    c = dep.run(_wl(rate=5, n=100, seed=8)).to_dict()
    assert a == b and a != c


def test_closed_loop_at_concurrency_one_is_the_sequential_sum(model, dep):
    n, i, o = 5, 800, 32
    r = dep.run(_wl(concurrency=1, n=n, i=i, o=o))
    one = dep.cost.prefill_s(i) + sum(dep.cost.decode_s(1, i + k + 1) for k in range(o - 1))
    assert r.e2e_s.mean == pytest.approx(one, rel=1e-9)
    assert r.throughput["requests_per_s"] == pytest.approx(1 / one, rel=1e-9)


def test_kv_exhaustion_preempts_by_recompute(model):
    sched = scheduler_for("vllm").on_gpu(GPU.memory_bytes, GPU.name)
    cost = StepCost(model, GPU, Job(model="x", mode="infer", engine="vllm"), max_len=4096)
    wl = _wl(rate=1000, n=64, i=1000, o=400)
    small = simulate(wl, cost, sched, 8000)  # room for ~5 full requests
    big = simulate(wl, cost, sched, 10**6)
    assert small.preemptions > 0 and big.preemptions == 0
    assert all(d > 0 for d in small.done_s)  # every request still finishes
    # TensorRT-LLM's reservation never evicts
    trt = replace(scheduler_for("trt-llm"), block_size=16)
    assert simulate(wl, cost, trt, 8000).preemptions == 0


def test_prefix_hits_shorten_ttft(dep):
    wl = _wl(rate=0.01, n=10, i=2000, o=8)
    assert dep.run(wl, prefix_hit=0.9).ttft_s.p50 < 0.5 * dep.run(wl).ttft_s.p50


def test_slo_attainment_and_cost(dep):
    r = dep.run(_wl(rate=2, n=100), slo=SLO(ttft_s=10.0, tpot_s=1.0), price=2.0)
    assert r.meets_slo and r.attainment == 1.0
    assert r.cost_per_m_output_tokens == pytest.approx(
        2.0 / 3600 / r.throughput["output_tokens_per_s"] * 1e6)
    assert not dep.run(_wl(rate=2, n=100), slo=SLO(ttft_s=1e-4)).meets_slo


@pytest.mark.parametrize("bad", ["0", "-1", "abc", "gamma:0", "gamma:x"])
def test_bad_arrivals_and_rates(bad):
    with pytest.raises(InputError):
        if bad in ("0", "-1"):
            _wl(rate=float(bad))
        else:
            parse_arrivals(bad)


@pytest.mark.parametrize("bad", ["uniform:5:1", "normal:x:1", "weird:1:2", "0", "lognormal:9:9"])
def test_bad_distributions(bad):
    with pytest.raises(InputError):
        parse_dist(bad, what="--input-dist")


@pytest.mark.parametrize("b,n", [(1, 512), (32, 1024), (128, 2048), (256, 4000)])
def test_a_mixed_step_reads_the_weights_once(model, b, n):
    """A step with a prefill chunk beside decodes costs more than either alone and less than
    the two run as separate steps (the weights are read once, not twice)."""
    cost = StepCost(model, GPU, Job(model="x", mode="infer", engine="vllm"), max_len=4096)
    dec, pre = cost.step_s(b, b * 1500, []), cost.step_s(0, 0, [(n, 0)])
    mixed = cost.step_s(b, b * 1500, [(n, 0)])
    assert max(dec, pre) < mixed < dec + pre


def test_a_chunk_after_a_cached_prefix_costs_more_attention(model):
    cost = StepCost(model, GPU, Job(model="x", mode="infer", engine="vllm"), max_len=4096)
    assert cost.step_s(0, 0, [(512, 3000)]) > cost.step_s(0, 0, [(512, 0)])


def test_max_rate_is_the_edge_of_the_slo(dep):
    from gpuplan.capacity import max_rate

    slo = SLO(ttft_s=0.5, tpot_s=0.03)

    def make(r):
        return _wl(rate=r, n=150, i=1000, o=32, seed=1)
    best, res = max_rate(dep, slo, make=make, iters=8)
    assert best > 0 and res.meets_slo
    assert not dep.run(make(best * 1.25), slo=slo).meets_slo


def test_sglang_runs_prefill_and_decode_in_separate_steps(model):
    """SGLang's prefill-first order: a prompt arriving while others decode stalls their next
    token for a whole prefill step, so its ITL tail is at least one prefill long; vLLM mixes the
    chunk into the decode step (its tail is the mixed step, shorter than prefill + decode)."""
    job = Job(model="x", mode="infer")
    wl = _wl(rate=4, n=80, i=2000, o=64, seed=2)
    sg = Deployment(model, GPU, job, engine="sglang", max_model_len=4096).run(wl)
    vl = Deployment(model, GPU, job, engine="vllm", max_model_len=4096).run(wl)
    pre = StepCost(model, GPU, job.with_(engine="sglang"), max_len=4096).prefill_s(2000)
    assert sg.itl_s.p99 >= pre
    assert vl.itl_s.p99 < sg.itl_s.p99


def test_plot_of_latency_against_rate(dep, tmp_path):
    pytest.importorskip("matplotlib")
    from gpuplan.report.capacity import plot_rates

    rows = [(x, dep.run(_wl(rate=x, n=60))) for x in (1, 4, 16)]
    out = tmp_path / "rates.png"
    plot_rates(rows, str(out), slo=SLO(ttft_s=1.0, tpot_s=0.05))
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_fit_and_capacity_give_one_kv_budget():
    """One deployment, two commands: capacity's KV tokens, blocks and batch budgets are the ones
    `fit --mode infer --engine E` reports (gpuplan.memory.kv_budget behind both)."""
    from gpuplan.capacity import Deployment
    from gpuplan.hardware import get_gpu
    from gpuplan.job import Job
    from gpuplan.memory import kv_budget
    from gpuplan.models import load_model

    model, gpu = load_model("llama-3.1-8b"), get_gpu("H100-SXM-80GB")
    for engine, kw in (("vllm", {}), ("vllm", {"engine_version": "0.10"}),
                       ("sglang", {}), ("trt-llm", {"gpu_memory_utilization": 0.8})):
        job = Job(model=model, mode="infer", engine=engine)
        dep = Deployment(model, gpu, job, engine=engine, max_model_len=8192, **kw)
        b = kv_budget(model, gpu, job, max_model_len=8192, **kw)
        assert (dep.kv_tokens, dep.block_size) == (b.kv_tokens, b.block_size), engine
        assert dep.sched.max_num_seqs == b.max_num_seqs
        assert dep.sched.max_num_batched_tokens == b.max_num_batched_tokens
        assert dep.sched.version == b.version


def test_the_library_serves_the_jobs_engine_as_the_cli_and_the_web_do(cli):
    """One truth (onetruth43): ``gpuplan.capacity(model, gpu, job=Job(engine="sglang"))`` ran
    vLLM (its ``engine`` keyword's default "vllm" replaced the job's engine: 144,768 KV tokens
    and vLLM's TTFT for qwen3-30b-a3b on an H100 where `gpuplan capacity --engine sglang` and
    ``POST /api/capacity`` give SGLang's 96,340). The job's serving engine is the default now;
    a conflicting keyword is refused."""
    import json

    import gpuplan

    m, gpu = load_model("qwen3-30b-a3b"), get_gpu("H100-SXM-80GB")
    work = dict(rate=0.001, requests=4, input=2048, output=128)
    lib = gpuplan.capacity(m, gpu, job=Job(model=m, mode="infer", engine="sglang"), **work)
    code, out, err = cli("capacity", "qwen3-30b-a3b", "--gpu", "H100-SXM-80GB", "--engine",
                         "sglang", *(f"--{k}={v}" for k, v in work.items()), "--json")
    assert code == 0, err
    want = json.loads(out)
    got = lib.to_dict()
    assert got["engine"] == want["engine"] == "sglang"
    assert got["kv"]["kv_tokens"] == want["kv"]["kv_tokens"]
    assert got["ttft_s"]["mean"] == pytest.approx(want["ttft_s"]["mean"], rel=1e-9)
    assert got["tpot_s"]["mean"] == pytest.approx(want["tpot_s"]["mean"], rel=1e-9)
    with pytest.raises(InputError, match="engine vllm for a job of engine sglang"):
        gpuplan.capacity(m, gpu, job=Job(model=m, mode="infer", engine="sglang"),
                         engine="vllm", **work)
