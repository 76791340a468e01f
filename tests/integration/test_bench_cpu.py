"""The bench on this machine's real CPU, at small sizes and short budgets."""

from __future__ import annotations

import os
import sys

import pytest

torch = pytest.importorskip("torch")

from gpuplan.errors import InputError, MissingDependencyError, UnsupportedError  # noqa: E402
from gpuplan.hardware.cpu import detect_cpu  # noqa: E402
from gpuplan.measure.bench import run as bench  # noqa: E402
from gpuplan.measure.bench import BenchConfig, max_size_for, run_bench  # noqa: E402

QUICK = dict(budget_s=0.05, copy_bytes=1 << 20)


@pytest.fixture(scope="module")
def cpu_run():
    return run_bench(BenchConfig(sizes=(64, 128), dtypes=("fp32",), device="cpu", **QUICK))


def test_real_cpu_matmuls_are_timed_and_interpreted(cpu_run):
    assert [(m.device, m.dtype, m.size) for m in cpu_run.matmul] == [("cpu", "fp32", 64),
                                                                     ("cpu", "fp32", 128)]
    cpu = detect_cpu()
    for m in cpu_run.matmul:
        assert 0 < m.min_s <= m.median_s and m.iqr_s >= 0 and m.samples >= 3 and m.inner >= 1
        # achieved FLOP/s is 2 N^3 / median; percent is of the *estimated* fp32 peak
        assert m.tflops == pytest.approx(2 * m.size**3 / m.median_s / 1e12)
        if cpu.peak_fp32_flops:
            assert m.percent_of_peak == pytest.approx(
                100 * 2 * m.size**3 / m.median_s / cpu.peak_fp32_flops)
            assert m.peak_source.startswith("estimate:")
        assert m.end_to_end_median_s is None and m.device_median_s is None


def test_all_threads_are_used_stated_and_restored(cpu_run):
    affinity = len(os.sched_getaffinity(0))
    assert cpu_run.settings["threads"] == affinity
    assert all(m.threads == affinity for m in cpu_run.matmul)
    assert "every CPU" in cpu_run.settings["threads_basis"]
    assert torch.get_num_threads() == cpu_run.settings["threads_default"]


def test_bandwidth_and_dispatch_overhead_on_the_cpu(cpu_run):
    (bw,) = cpu_run.bandwidth
    assert bw.kind == "host_copy" and bw.nbytes == 1 << 20
    assert bw.bytes_per_s == pytest.approx(2 * (1 << 20) / bw.median_s)
    (ov,) = cpu_run.overhead
    assert ov.kind == "op_dispatch" and 0 < ov.median_s < 1e-3


def test_no_gpu_gives_cpu_results_and_one_line_saying_so():
    run = run_bench(BenchConfig(sizes=(64,), device="all", bandwidth=False, **QUICK))
    assert {m.device for m in run.matmul} == {"cpu"}
    assert sum("No CUDA device" in n for n in run.notes) == 1
    # asking for the GPU by name on a machine without one is an error, not a CPU run (issue 15)
    with pytest.raises(InputError, match="device cuda"):
        run_bench(BenchConfig(sizes=(64,), device="cuda", bandwidth=False, **QUICK))


def test_seed_default_is_one_4000_fp32_case():
    cfg = BenchConfig()
    assert cfg.sizes is None and cfg.dtypes is None and not cfg.sweep
    plan = bench._plan(torch, cfg, detect_cpu(), [bench._Device(name="cpu", label="x", index=None,
                                                                tdev=None)], [])
    assert [(c.dtype, c.size) for c in plan if c.what == "matmul"] == [("fp32", 4000)]


def test_sweep_plans_powers_of_two_and_4000_for_each_native_dtype():
    cpu = detect_cpu()
    plan = bench._plan(torch, BenchConfig(sweep=True, bandwidth=False), cpu,
                       [bench._Device(name="cpu", label="x", index=None, tdev=None)], [])
    sizes = [64, 128, 256, 512, 1024, 2048, 4000, 4096, 8192]
    assert [(c.dtype, c.size) for c in plan] == [(d, n) for d in cpu.native_matmul_dtypes
                                                 for n in sizes]


@pytest.mark.parametrize("kw,match", [
    (dict(sizes=(0,)), r"size 0: expected a whole number >= 1"),
    (dict(sizes=(-5,)), r"size -5"),
    (dict(dtypes=("fp8",)), r"dtype 'fp8': expected one of fp32, tf32, bf16, fp16"),
    (dict(device="gpu"), r"device 'gpu'"),
    (dict(budget_s=0), r"budget 0"),
    (dict(threads=0), r"threads 0"),
])
def test_bad_configuration_is_one_clear_line(kw, match):
    with pytest.raises(InputError, match=match) as e:
        BenchConfig(**kw)
    assert "\n" not in str(e.value)


def test_too_large_for_host_memory_names_the_limit(monkeypatch):
    monkeypatch.setattr(bench, "available_memory_bytes", lambda: 2 * 10**9)
    # 3 x N^2 x 4 B <= 2e9  ->  N <= sqrt(2e9 / 12) = 12909.9
    with pytest.raises(InputError, match=r"size 20000: .*4\.8 GB.*largest that fits is size 12909"):
        run_bench(BenchConfig(sizes=(20000,), device="cpu", **QUICK))
    assert max_size_for(2 * 10**9, "bf16") == 18257  # sqrt(2e9 / 6) = 18257.4


def test_sweep_sizes_that_do_not_fit_are_skipped_with_a_note(monkeypatch):
    # 3 x 128^2 x 4 B = 196,608 B fits in 200 kB; 256 (786,432 B) does not
    monkeypatch.setattr(bench, "available_memory_bytes", lambda: 200_000)
    monkeypatch.setattr(bench, "SWEEP_SIZES", (64, 128, 256))
    run = run_bench(BenchConfig(sweep=True, dtypes=("fp32",), device="cpu", bandwidth=False,
                                budget_s=0.05))
    assert [m.size for m in run.matmul] == [64, 128]
    assert any("Skipped" in n and "256x256" in n for n in run.notes)


def test_tf32_on_the_cpu_alone_is_refused():
    with pytest.raises(UnsupportedError, match="dtype fp32"):
        run_bench(BenchConfig(sizes=(64,), dtypes=("tf32",), device="cpu", **QUICK))


def test_without_torch_one_line_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(MissingDependencyError, match=r"needs torch.*pip install 'gpuplan\[torch\]'"):
        run_bench(BenchConfig(sizes=(64,)))


def test_progress_is_reported_for_every_case_and_at_the_end():
    seen = []
    run = run_bench(BenchConfig(sizes=(64, 96), device="cpu", **QUICK),
                    progress=lambda label, done, total: seen.append((label, done, total)))
    total = len(run.matmul) + len(run.bandwidth) + len(run.overhead)
    assert [d for _, d, _ in seen] == list(range(total + 1))
    assert all(t == total for _, _, t in seen)
    assert seen[0][0] == "cpu fp32 64x64 matmul" and seen[-1][0] == "done"


def test_out_of_memory_during_a_run_is_a_clear_error_or_a_skip(monkeypatch):
    real = bench._matmul

    def oom(torch_, dev, dtype, n, *a, **k):
        if n == 96:
            raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate")
        return real(torch_, dev, dtype, n, *a, **k)
    monkeypatch.setattr(bench, "_matmul", oom)
    with pytest.raises(InputError, match=r"size 96: .*out of memory.*smaller size"):
        run_bench(BenchConfig(sizes=(64, 96), device="cpu", bandwidth=False, **QUICK))
    monkeypatch.setattr(bench, "SWEEP_SIZES", (64, 96))
    run = run_bench(BenchConfig(sweep=True, dtypes=("fp32",), device="cpu", bandwidth=False,
                                **QUICK))
    assert [m.size for m in run.matmul] == [64]
    assert any("Skipped" in n and "96x96" in n for n in run.notes)


def test_a_busy_machine_is_stated(monkeypatch):
    monkeypatch.setattr(bench, "_load", lambda: 4.0 * (os.cpu_count() or 1))
    run = run_bench(BenchConfig(sizes=(64,), device="cpu", bandwidth=False, **QUICK))
    assert sum("already busy" in w for w in run.warnings) == 1
    assert run.settings["load_average_1min_start"] == 4.0 * (os.cpu_count() or 1)
    monkeypatch.setattr(bench, "_load", lambda: 0.0)
    run = run_bench(BenchConfig(sizes=(64,), device="cpu", bandwidth=False, **QUICK))
    assert not any("already busy" in w for w in run.warnings)


def test_the_cpu_peak_is_of_the_cores_in_use():
    cpu = detect_cpu()
    if not cpu.peak_fp32_flops:
        pytest.skip("no CPU peak estimate on this machine")
    run = run_bench(BenchConfig(sizes=(64,), device="cpu", threads=1, bandwidth=False, **QUICK))
    (m,) = run.matmul
    assert m.threads == 1
    # one thread can use one core: the estimate for all cores divided by the core count
    assert m.peak_flops == pytest.approx(cpu.peak_fp32_flops / cpu.physical_cores)
    if cpu.physical_cores > 1:
        assert "scaled to the 1 of" in m.peak_source


def test_measurements_started_on_a_crowded_machine_are_warned_about(monkeypatch):
    cpus = os.cpu_count() or 1
    monkeypatch.setattr(bench, "_runnable", lambda: cpus + 3)
    run = run_bench(BenchConfig(sizes=(64, 96), device="cpu", bandwidth=False, **QUICK))
    (w,) = [w for w in run.warnings if "runnable tasks" in w]
    assert w.startswith(f"2 of 2 measurements") and f"up to {cpus + 3} on {cpus}" in w
    assert run.settings["crowded_cases"] == 2
    monkeypatch.setattr(bench, "_runnable", lambda: 1)
    run = run_bench(BenchConfig(sizes=(64,), device="cpu", bandwidth=False, **QUICK))
    assert run.settings["crowded_cases"] == 0 and not any("runnable" in w for w in run.warnings)


def test_runnable_reads_proc_loadavg():
    r = bench._runnable()
    if os.path.exists("/proc/loadavg"):
        assert isinstance(r, int) and r >= 1  # this process is running
    else:
        assert r is None
