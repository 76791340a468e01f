"""The bench's GPU code paths on a CPU-only machine: fake ``torch.cuda``, virtual device time.

How the fake works
------------------
* ``torch.cuda`` queries (is_available, device_count, names, capability, properties, mem_get_info,
  synchronize, Event, device) are monkeypatched.
* The bench makes every device tensor with ``host.to(device)`` and copies back with ``.cpu()``;
  the one place it builds a device (``bench._torch_device``) is routed to the CPU, and a
  TorchFunctionMode marks tensors that live "on the GPU", makes ``.to``/``.cpu`` real copies, and
  advances a *virtual clock* by a cost model for every op (matmul, copies, tiny kernels).
* ``_timing.perf_counter`` reads the virtual clock. Every clock read checks that no device work is
  in flight (a ``torch.cuda.synchronize`` or a blocking copy since the last device op); any read
  with work in flight is recorded as a violation.

Because device time is virtual and exact, the tests can compute the expected medians, the
end-to-end times (copies included), the percent of the catalog's dense peak and the crossover
sizes by hand from the cost model below, independently of the bench's code.
"""

from __future__ import annotations

import json
import math
from contextlib import nullcontext
from importlib import resources
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
from torch.overrides import TorchFunctionMode  # noqa: E402

import gpuplan.hardware as hw  # noqa: E402
from gpuplan.errors import InputError, UnsupportedError  # noqa: E402
from gpuplan.measure.bench import run as bench, timing as _timing  # noqa: E402
from gpuplan.measure.bench import BenchConfig, run_bench  # noqa: E402

# ---- the cost model (seconds) ---------------------------------------------------------------------
GPU_RATE = {"fp32": 50e12, "tf32": 400e12, "bf16": 700e12, "fp16": 650e12}  # FLOP/s
CPU_RATE = 1e11       # FLOP/s, every dtype
LAUNCH = 20e-6        # every GPU kernel
CPU_OP = 1e-6         # every CPU op
H2D = {False: 10e9, True: 25e9}   # bytes/s, pageable / pinned
D2H = {False: 8e9, True: 24e9}
COPY_LATENCY = 10e-6
DEV_COPY = 3e12       # bytes/s, read + write counted
HOST_COPY = 20e9      # bytes/s, read + write counted

H100_NAME = "NVIDIA H100 80GB HBM3"
# H100 SXM5 from NVIDIA's H100 datasheet: BF16 tensor core "1,979 TFLOPS*" with *sparsity, i.e.
# 989.4 dense; TF32 989 sparse / 494.7 dense; FP32 67; FP16 = BF16. Used only until the shared
# catalog (hardware/gpus.json) lands; the test prefers the real catalog's record.
_TMP_H100 = {
    "name": "H100-SXM-80GB", "vendor": "NVIDIA", "architecture": "Hopper",
    "memory_bytes": 85520809984, "memory": "80 GB HBM3", "memory_bandwidth_GBps": 3350,
    "dense_tflops": {"fp64": 33.5, "fp32": 66.9, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4,
                     "fp8": 1978.9, "int8": 1978.9},
    "sparse_tflops": {"tf32": 989.4, "bf16": 1978.9, "fp16": 1978.9},
    "sm_count": 132, "max_threads_per_sm": 2048, "pcie_gen": 5, "pcie_lanes": 16,
    "interconnect": "NVLink 4", "interconnect_GBps": 900, "device_names": [H100_NAME],
    "aliases": [], "source": "NVIDIA H100 Tensor Core GPU datasheet (test fixture)",
}


def _h100_record() -> tuple[dict, bool]:
    """The H100-SXM record of the real catalog if it exists, else the fixture (and whether real)."""
    f = resources.files("gpuplan.hardware").joinpath("gpus.json")
    if f.is_file():
        for rec in json.loads(f.read_text("utf-8"))["gpus"]:
            if rec["name"].upper().startswith("H100-SXM"):
                return rec, True
    return _TMP_H100, False


def _torch_dtype_name(t) -> str:
    return {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[t.dtype]


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            yield from _tensors(o)
    elif isinstance(obj, dict):
        for o in obj.values():
            yield from _tensors(o)


def _on_gpu(t) -> bool:
    return getattr(t, "_fake_cuda", False)


def _mark(t):
    t._fake_cuda = True
    return t


class FakeCuda:
    """Fake CUDA devices: a virtual clock, an op log and the in-flight check."""

    def __init__(self, names=(H100_NAME,), cc=(9, 0), free=70 * 10**9, total=80 * 10**9):
        self.names = list(names)
        self.cc = cc
        self.free = free
        self.total = total
        self.t = 0.0
        self.in_flight = False
        self.log: list[tuple] = []
        self.violations: list[str] = []
        self.clock_reads = 0
        self.syncs = 0

    # -- the virtual clock ----------------------------------------------------------------------
    def clock_read(self, what: str) -> float:
        self.clock_reads += 1
        if self.in_flight:
            self.violations.append(f"{what} read at t={self.t} with device work in flight")
        self.log.append(("clock", what))
        return self.t

    def device_op(self, what: str, cost: float, **info) -> None:
        self.t += cost
        self.in_flight = True
        self.log.append((what, info))

    def sync(self, *_a, **_k) -> None:
        self.syncs += 1
        self.in_flight = False
        self.log.append(("sync", {}))

    # -- torch.cuda -----------------------------------------------------------------------------
    def install(self, monkeypatch) -> "FakeCuda":
        fake = self
        cuda = torch.cuda

        class Event:
            def __init__(self, enable_timing=False, **_):
                self.at = None

            def record(self, stream=None):
                self.at = fake.t
                fake.log.append(("record", {}))

            def synchronize(self):
                fake.in_flight = False

            def elapsed_time(self, end):
                fake.clock_read("event.elapsed_time")
                return (end.at - self.at) * 1e3

        props = lambda i: SimpleNamespace(  # noqa: E731
            name=fake.names[i], total_memory=fake.total, major=fake.cc[0], minor=fake.cc[1],
            multi_processor_count=132)
        monkeypatch.setattr(cuda, "is_available", lambda: True)
        monkeypatch.setattr(cuda, "device_count", lambda: len(fake.names))
        monkeypatch.setattr(cuda, "get_device_name", lambda i=0: fake.names[i])
        monkeypatch.setattr(cuda, "get_device_capability", lambda i=0: fake.cc)
        monkeypatch.setattr(cuda, "get_device_properties", props)
        monkeypatch.setattr(cuda, "mem_get_info", lambda i=0: (fake.free, fake.total))
        monkeypatch.setattr(cuda, "synchronize", fake.sync)
        monkeypatch.setattr(cuda, "Event", Event)
        monkeypatch.setattr(cuda, "device", lambda i: nullcontext())
        monkeypatch.setattr(bench, "_torch_device", lambda torch_, spec: torch.device("cpu"))
        monkeypatch.setattr(_timing, "perf_counter", lambda: fake.clock_read("perf_counter"))

        def pin_memory(self, *a, **k):
            out = self.clone()
            out._fake_pinned = True
            return out
        monkeypatch.setattr(torch.Tensor, "pin_memory", pin_memory)
        return self

    def mode(self) -> "_Mode":
        return _Mode(self)


class _Mode(TorchFunctionMode):
    def __init__(self, fake: FakeCuda):
        super().__init__()
        self.fake = fake

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        fake = self.fake
        ins = list(_tensors((args, kwargs)))
        gpu = any(_on_gpu(t) for t in ins)
        if func is torch.Tensor.to:  # the bench's only way onto the device: an H2D copy
            src = args[0]
            out = func(*args, **kwargs)
            out = _mark(out.clone() if out is src else out)
            pinned = getattr(src, "_fake_pinned", False)
            fake.device_op("h2d", src.nbytes / H2D[pinned] + COPY_LATENCY, nbytes=src.nbytes)
            return out
        if func is torch.Tensor.cpu:  # the bench's only way back: a blocking D2H copy
            src = args[0]
            out = func(*args, **kwargs)
            if _on_gpu(src):
                out = out.clone()
                fake.device_op("d2h", src.nbytes / D2H[False] + COPY_LATENCY, nbytes=src.nbytes)
                fake.in_flight = False  # .cpu() waits for the stream
            return out
        if func is torch.matmul:  # time is virtual: skip the real arithmetic (CPU and "GPU")
            a, b = args[0], args[1]
            out = kwargs.get("out")
            if out is None:
                out = torch.empty(a.shape[0], b.shape[1], dtype=a.dtype)
        else:
            out = func(*args, **kwargs)
        name = getattr(func, "__name__", str(func))
        if func is torch.matmul:
            a = args[0]
            n = a.shape[0]
            if gpu:
                dt = _torch_dtype_name(a)
                prec = getattr(torch.backends.cuda.matmul, "fp32_precision", None)
                if dt == "fp32" and prec == "tf32":
                    dt = "tf32"
                fake.device_op("matmul", 2 * n**3 / GPU_RATE[dt] + LAUNCH, n=n, dtype=dt)
            else:
                fake.t += 2 * n**3 / CPU_RATE + CPU_OP
                fake.log.append(("cpu_matmul", {"n": n}))
        elif func is torch.Tensor.copy_:
            dst, src = args[0], args[1]
            pinned = getattr(src, "_fake_pinned", False) or getattr(dst, "_fake_pinned", False)
            if _on_gpu(dst) and _on_gpu(src):
                fake.device_op("dev_copy", 2 * src.nbytes / DEV_COPY + LAUNCH, nbytes=src.nbytes)
            elif _on_gpu(dst):
                fake.device_op("h2d", src.nbytes / H2D[pinned] + COPY_LATENCY, nbytes=src.nbytes)
            elif _on_gpu(src):
                fake.device_op("d2h", src.nbytes / D2H[pinned] + COPY_LATENCY, nbytes=src.nbytes)
            else:
                fake.t += 2 * src.nbytes / HOST_COPY + CPU_OP
            return out  # copy_ returns its destination, which stays where it is
        elif gpu:
            fake.device_op(name, LAUNCH)
        else:
            fake.t += CPU_OP
        if gpu:
            for t in _tensors(out):
                _mark(t)
        return out


@pytest.fixture
def fake(monkeypatch):
    rec, real = _h100_record()
    if not real or not rec.get("device_names"):
        by_key = {rec["name"].lower(): hw._from_record({**rec, "device_names": [H100_NAME]})}
        monkeypatch.setattr(hw, "_catalog", lambda: (by_key, {}))
    f = FakeCuda().install(monkeypatch)
    f.h100 = rec
    return f


def _run(fake, **kw):
    kw.setdefault("threads", 1)
    kw.setdefault("budget_s", 0.05)
    kw.setdefault("copy_bytes", 1 << 20)
    with fake.mode():
        return run_bench(BenchConfig(**kw))


# ---- hand-computed expectations ------------------------------------------------------------------

def gpu_mm(n, dt):
    return 2 * n**3 / GPU_RATE[dt] + LAUNCH


def cpu_mm(n):
    return 2 * n**3 / CPU_RATE + CPU_OP


def end_to_end(n, dt):
    nbytes = n * n * {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2}[dt]
    h2d = nbytes / H2D[False] + COPY_LATENCY
    d2h = nbytes / D2H[False] + COPY_LATENCY
    return 2 * h2d + gpu_mm(n, dt) + d2h


# ---- tests ---------------------------------------------------------------------------------------

def test_every_clock_read_happens_with_no_device_work_in_flight(fake):
    run = _run(fake, sizes=(64, 256), dtypes=("fp32", "bf16"), device="cuda")
    assert fake.violations == []
    assert fake.clock_reads > 100 and fake.syncs > 50
    assert {m.device for m in run.matmul} == {"cuda:0"}
    # Every timed GPU measurement read the clock right after a sync: look at the log directly.
    last = None
    for i, (what, _) in enumerate(fake.log):
        if what == "clock":
            assert last in (None, "sync", "d2h"), fake.log[max(0, i - 5):i + 1]
        elif what != "record":
            last = what


def test_the_in_flight_check_catches_a_missing_sync(fake):
    """Negative control: timing device work without ``sync`` is caught by the fake."""
    x = _mark(torch.ones(4))
    with fake.mode():
        _timing.measure(lambda: x.add_(1.0), budget_s=0.01)
    assert fake.violations


def test_compute_and_end_to_end_times_follow_the_cost_model(fake):
    run = _run(fake, sizes=(64, 128, 256), dtypes=("fp32",), device="cuda")
    by = {m.size: m for m in run.matmul}
    for n in (64, 128, 256):
        m = by[n]
        assert m.median_s == pytest.approx(gpu_mm(n, "fp32"), rel=1e-9)
        assert m.iqr_s == pytest.approx(0, abs=1e-12)
        # copies in and out are inside the end-to-end time, and only there
        assert m.end_to_end_median_s == pytest.approx(end_to_end(n, "fp32"), rel=1e-9)
        assert m.device_median_s == pytest.approx(gpu_mm(n, "fp32"), rel=1e-9)
        assert m.tflops == pytest.approx(2 * n**3 / gpu_mm(n, "fp32") / 1e12, rel=1e-9)


def test_end_to_end_blocks_contain_both_input_copies_and_the_result_copy(fake):
    _run(fake, sizes=(64,), dtypes=("fp32",), device="cuda", bandwidth=False)
    # Split the log into timed regions (between consecutive perf_counter reads).
    regions, cur = [], []
    for what, info in fake.log:
        if what == "clock":
            regions.append(cur)
            cur = []
        else:
            cur.append(what)
    e2e = [r for r in regions if "d2h" in r]
    assert e2e, "no end-to-end region was timed"
    for r in e2e:
        calls = r.count("matmul")
        assert calls >= 1
        assert r.count("h2d") == 2 * calls and r.count("d2h") == calls
    compute = [r for r in regions if "matmul" in r and "h2d" not in r]
    assert compute and all("d2h" not in r for r in compute)


def test_tf32_is_switched_on_only_for_tf32_and_restored(fake):
    before = getattr(torch.backends.cuda.matmul, "fp32_precision", None)
    run = _run(fake, sizes=(128,), dtypes=("fp32", "tf32"), device="cuda", bandwidth=False)
    by = {m.dtype: m for m in run.matmul}
    assert by["fp32"].median_s == pytest.approx(gpu_mm(128, "fp32"), rel=1e-9)
    assert by["tf32"].median_s == pytest.approx(gpu_mm(128, "tf32"), rel=1e-9)
    assert by["tf32"].tf32 and not by["fp32"].tf32
    assert getattr(torch.backends.cuda.matmul, "fp32_precision", None) == before


def test_percent_of_peak_uses_the_catalogs_dense_figure(fake):
    run = _run(fake, sizes=(2048,), dtypes=("bf16",), device="cuda", bandwidth=False,
               end_to_end=False)
    (m,) = run.matmul
    dense = fake.h100["dense_tflops"]["bf16"] * 1e12
    achieved = 2 * 2048**3 / gpu_mm(2048, "bf16")  # from the cost model, not from the result
    expected = 100 * achieved / dense
    assert m.percent_of_peak == pytest.approx(expected, rel=1e-9)
    assert m.peak_flops == pytest.approx(dense)
    assert "dense" in m.peak_source
    sparse = fake.h100.get("sparse_tflops", {}).get("bf16")
    if sparse:  # the sparse figure would halve the percentage; it must not be the one used
        assert m.percent_of_peak != pytest.approx(100 * achieved / (sparse * 1e12), rel=1e-3)


def test_unknown_gpu_gets_measured_numbers_and_a_warning_never_a_peak(fake):
    fake.names = [H100_NAME, "NVIDIA Imaginary X1"]
    run = _run(fake, sizes=(64,), dtypes=("fp32",), device="cuda", bandwidth=False)
    by = {m.device: m for m in run.matmul}
    assert by["cuda:0"].percent_of_peak is not None
    assert by["cuda:1"].percent_of_peak is None and by["cuda:1"].peak_flops is None
    assert by["cuda:1"].median_s == pytest.approx(gpu_mm(64, "fp32"), rel=1e-9)
    assert sum("Imaginary X1" in w and "not in gpuplan's catalog" in w for w in run.warnings) == 1
    from gpuplan.report.bench import run_to_json
    doc = run_to_json(run)
    rows = {r["device"]: r for r in doc["matmul"]}
    assert "percent_of_peak" not in rows["cuda:1"] and "percent_of_peak" in rows["cuda:0"]


def test_crossover_compute_and_end_to_end(fake):
    sizes = (64, 128, 256, 512)
    run = _run(fake, sizes=sizes, dtypes=("fp32",), device="all", bandwidth=False)
    (c,) = run.crossovers
    assert c.gpu == "cuda:0" and c.sizes == sizes
    # Hand-derived from the cost model:
    #  N=64:  CPU 2*64^3/1e11 + 1us = 6.2 us;  GPU 20.0 us            -> CPU wins
    #  N=128: CPU 42.9 us;  GPU 20.1 us -> GPU wins on compute;  end-to-end 2*16.6 + 20.1 + 18.2
    #         = 71.5 us -> CPU still wins counting the copies
    #  N=256: CPU 336.5 us; end-to-end 2*36.2 + 20.7 + 42.8 = 135.9 us -> GPU wins
    expect_cpu = [cpu_mm(n) for n in sizes]
    assert c.cpu_s == pytest.approx(expect_cpu, rel=1e-9)
    assert c.gpu_end_to_end_s == pytest.approx([end_to_end(n, "fp32") for n in sizes], rel=1e-9)
    assert c.compute_crossover == 128
    assert c.end_to_end_crossover == 256


def test_bandwidth_and_launch_overhead(fake):
    nbytes = 1 << 20
    run = _run(fake, sizes=(64,), dtypes=("fp32",), device="all", copy_bytes=nbytes)
    bw = {(b.device, b.kind): b for b in run.bandwidth}
    assert set(bw) == {("cpu", "host_copy"), ("cuda:0", "device_copy"), ("cuda:0", "h2d_pageable"),
                       ("cuda:0", "h2d_pinned"), ("cuda:0", "d2h_pageable"),
                       ("cuda:0", "d2h_pinned")}
    assert bw["cuda:0", "h2d_pinned"].median_s == pytest.approx(nbytes / H2D[True] + COPY_LATENCY)
    assert bw["cuda:0", "h2d_pageable"].median_s == pytest.approx(nbytes / H2D[False] + COPY_LATENCY)
    assert bw["cuda:0", "d2h_pinned"].median_s == pytest.approx(nbytes / D2H[True] + COPY_LATENCY)
    assert bw["cuda:0", "d2h_pageable"].median_s == pytest.approx(nbytes / D2H[False] + COPY_LATENCY)
    # a copy moves the buffer twice (read + write), so bytes_per_s = 2 * nbytes / time
    t_dev = 2 * nbytes / DEV_COPY + LAUNCH
    assert bw["cuda:0", "device_copy"].bytes_per_s == pytest.approx(2 * nbytes / t_dev)
    t_host = 2 * nbytes / HOST_COPY + CPU_OP
    assert bw["cpu", "host_copy"].bytes_per_s == pytest.approx(2 * nbytes / t_host)
    ov = {(o.device, o.kind): o.median_s for o in run.overhead}
    assert ov["cuda:0", "kernel_launch"] == pytest.approx(LAUNCH)
    assert ov["cpu", "op_dispatch"] == pytest.approx(CPU_OP)
    assert fake.violations == []


def test_sweep_dtypes_follow_the_compute_capability(fake):
    fake.cc = (7, 5)  # a T4: no bf16, no tf32
    run = _run(fake, sizes=(64,), sweep=True, device="cuda", bandwidth=False, end_to_end=False)
    assert [m.dtype for m in run.matmul] == ["fp32", "fp16"]
    with pytest.raises(UnsupportedError, match=r"no native bf16.*dtype fp16"):
        _run(fake, sizes=(64,), dtypes=("bf16",), device="cuda")
    # with --device all the GPU is skipped for that dtype, with a note
    run = _run(fake, sizes=(64,), dtypes=("bf16",), device="all", bandwidth=False)
    assert {m.device for m in run.matmul} == {"cpu"}
    assert any("no native bf16" in n for n in run.notes)


def test_too_large_for_device_memory_names_the_limit(fake):
    fake.free = 10**9
    # 3 * N^2 * 4 B <= 1e9  ->  N <= sqrt(1e9 / 12) = 9128.7
    with pytest.raises(InputError, match=r"size 10000: .*cuda:0.*largest that fits is size 9128"):
        _run(fake, sizes=(10000,), dtypes=("fp32",), device="cuda")
    assert math.isqrt(10**9 // 12) == 9128


def test_machine_fingerprint_records_the_gpus(fake):
    run = _run(fake, sizes=(64,), dtypes=("fp32",), device="cuda", bandwidth=False)
    (g,) = run.machine.gpus
    assert g.name == H100_NAME and g.compute_capability == "9.0" and g.sm_count == 132
    assert g.memory_bytes == fake.total and g.catalog_name == fake.h100["name"]


def test_plot_marks_the_crossover(fake, tmp_path):
    pytest.importorskip("matplotlib")
    from gpuplan.report.bench import plot_run

    run = _run(fake, sizes=(64, 128, 256, 512), dtypes=("fp32",), device="all", bandwidth=False)
    out = tmp_path / "bench.png"
    plot_run(run, str(out))
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir()] == ["bench.png"]  # no temp file left behind
