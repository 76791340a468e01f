"""The CPU-vs-GPU verdicts as library functions: hand-computed cases of the policy (a job) and of
one product (``gpuplan flops matmul``), and the CLI rendering what the library decided."""

from __future__ import annotations

import json

import pytest

from gpuplan.cli import main
from gpuplan.compute import (
    MIN_USEFUL_SPEEDUP, SHORT_JOB_S, compare_matmul, count_matmul, cpu_vs_gpu, matmul_verdict,
)
from gpuplan.hardware import get_gpu
from gpuplan.hardware.cpu import detect_cpu


def test_policy_constants_are_the_documented_ones():
    assert (MIN_USEFUL_SPEEDUP, SHORT_JOB_S) == (2.0, 600.0)  # docs/speed.md, section 8


def test_a_cpu_faster_than_the_gpu_needs_no_gpu():
    v = cpu_vs_gpu(cpu="C", cpu_step_s=0.002, gpu="G", gpu_step_s=0.010)
    assert v.speedup == 0.2 and not v.needs_gpu
    assert v.verdict.startswith("No GPU needed: this CPU is 5.0x faster than the G")
    assert v.cpu_job_s is None and v.gpu_job_s is None


def test_a_small_speedup_needs_no_gpu():
    v = cpu_vs_gpu(cpu="C", cpu_step_s=0.015, gpu="G", gpu_step_s=0.010)  # 1.5x < 2x
    assert v.speedup == pytest.approx(1.5) and not v.needs_gpu
    assert "only 1.5x faster" in v.verdict and "(10.0 ms vs 15.0 ms per step)" in v.verdict


def test_a_short_whole_job_needs_no_gpu_even_when_the_gpu_is_much_faster():
    # 100 steps: the CPU takes 100 x 5 s = 500 s < 600 s; the GPU 100 x 0.1 s = 10 s
    v = cpu_vs_gpu(cpu="C", cpu_step_s=5.0, gpu="G", gpu_step_s=0.1, job_steps=100)
    assert v.speedup == pytest.approx(50) and not v.needs_gpu
    assert (v.cpu_job_s, v.gpu_job_s) == (500.0, pytest.approx(10.0))
    assert "finishes the whole job in" in v.verdict
    # 200 steps: 1000 s on the CPU, past the limit: the GPU pays off
    v = cpu_vs_gpu(cpu="C", cpu_step_s=5.0, gpu="G", gpu_step_s=0.1, job_steps=200)
    assert v.needs_gpu and v.cpu_job_s == 1000.0
    assert v.verdict.startswith("A GPU pays off: the G is 50x faster") and "whole job" in v.verdict


def test_a_request_is_the_whole_job_of_decoder_inference():
    v = cpu_vs_gpu(cpu="C", cpu_step_s=1.0, gpu="G", gpu_step_s=0.1, cpu_request_s=700.0,
                   gpu_request_s=70.0)
    assert (v.cpu_job_s, v.gpu_job_s) == (700.0, 70.0) and v.needs_gpu
    # issue 12: a request a person waits for is judged by latency -- 10x faster is never "no GPU
    # needed", however short the CPU's whole job
    v = cpu_vs_gpu(cpu="C", cpu_step_s=1.0, gpu="G", gpu_step_s=0.1, cpu_request_s=300.0,
                   gpu_request_s=30.0)
    assert v.needs_gpu and v.workload == "interactive" and "latency" in v.rule
    assert v.rule in v.verdict
    # the same numbers as batch work (throughput): the CPU finishes within 10 minutes
    v = cpu_vs_gpu(cpu="C", cpu_step_s=1.0, gpu="G", gpu_step_s=0.1, cpu_request_s=300.0,
                   gpu_request_s=30.0, interactive=False)
    assert not v.needs_gpu and v.workload == "batch" and "throughput" in v.verdict
    # without the GPU's request time there is no whole-job comparison
    v = cpu_vs_gpu(cpu="C", cpu_step_s=1.0, gpu="G", gpu_step_s=0.1, cpu_request_s=300.0)
    assert v.cpu_job_s is None and v.needs_gpu


def test_interactive_rule_by_hand():
    def needs(cpu_s: float, gpu_s: float) -> bool:
        return cpu_vs_gpu(cpu="C", cpu_step_s=cpu_s, gpu="G", gpu_step_s=gpu_s,
                          cpu_request_s=cpu_s, gpu_request_s=gpu_s).needs_gpu

    assert needs(0.2, 0.02)          # 10x faster: always worth it
    assert not needs(0.5, 0.1)       # 5x, but the CPU answers within a second
    assert needs(3.0, 1.0)           # 3x on a request that keeps a person waiting 3 s
    assert not needs(3.0, 2.0)       # 1.5x: not worth a GPU


def test_matmul_verdict_by_hand():
    faster, text = matmul_verdict("G", gpu_s=20e-6, gpu_compute_s=1e-6, cpu_s=2e-6)
    assert not faster
    assert text == ("No GPU needed for this product: this CPU (2 µs) beats the G end to end "
                    "(20 µs, of which launches and copies 19 µs)")
    faster, text = matmul_verdict("G", gpu_s=0.002, gpu_compute_s=0.0015, cpu_s=0.05)
    assert faster and text == "The G is 25.0x faster than this CPU end to end (2.0 ms vs 50.0 ms)"
    assert matmul_verdict("G", gpu_s=1.0, gpu_compute_s=0.5, cpu_s=1.0)[0] is False  # a tie: CPU


def test_compare_matmul_times_both_devices_and_applies_the_verdict():
    mm = count_matmul(4096, 4096, 4096)
    h100 = get_gpu("H100-SXM-80GB")
    cpu = detect_cpu()
    c = compare_matmul(mm, h100, dtype="bf16", cpu=cpu, measured=None)
    assert c.gpu == "H100-SXM-80GB" and c.gpu_time.dtype == "bf16"
    assert c.small.tiles == 32 * 32  # 4096 / 128 per side
    if cpu.peak_fp32_flops:
        assert c.cpu_time.dtype == "fp32"
        assert c.speedup == c.cpu_time.total_s / c.gpu_time.total_s
        assert (c.gpu_faster, c.verdict) == matmul_verdict(
            "H100-SXM-80GB", gpu_s=c.gpu_time.total_s, gpu_compute_s=c.gpu_time.compute_s,
            cpu_s=c.cpu_time.total_s)
    alone = compare_matmul(mm, h100, dtype="bf16", cpu=None, measured=None)
    assert alone.cpu_time is None and alone.verdict is None and alone.times == (alone.gpu_time,)


def test_flops_matmul_json_is_the_library_comparison(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("GPUPLAN_BENCH_DB", str(tmp_path / "none.sqlite"))
    assert main(["flops", "matmul", "1x3", "3x2", "--gpu", "H100-SXM-80GB", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    c = compare_matmul(count_matmul(1, 3, 2), get_gpu("H100-SXM-80GB"), cpu=detect_cpu())
    assert out["verdict"] == c.verdict
    assert out["times"] == [t.to_dict() for t in c.times]


def test_old_spellings_still_work_with_a_note(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("GPUPLAN_BENCH_DB", str(tmp_path / "none.sqlite"))
    assert main(["speed", "gpt2", "--gpu", "H100-SXM-80GB", "--attention", "flash",
                 "--recompute", "full", "--json"]) == 0
    got = capsys.readouterr()
    assert "gpuplan: note: --attention flash is now spelled sdpa" in got.err
    assert "gpuplan: note: --recompute is now spelled --checkpointing" in got.err
    old = json.loads(got.out)
    assert main(["speed", "gpt2", "--gpu", "H100-SXM-80GB", "--attention", "sdpa",
                 "--checkpointing", "full", "--json"]) == 0
    new = capsys.readouterr()
    assert new.err == "" and json.loads(new.out) == old
    assert old["attention"] == "sdpa" and old["recompute"] == "full"
