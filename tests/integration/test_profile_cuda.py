"""CUDA code paths on a CPU-only machine, by faking ``torch.cuda`` with a simulated GPU.

The fake GPU is a queue on the host clock: ``launch(s)`` enqueues ``s`` seconds of work that starts
when the previous work is done (or now); an event completes when all work enqueued before it has
finished; ``synchronize()`` sleeps until the queue is empty. Copies to "cuda" go through a fake
``Tensor.to``: from pageable memory they block the host until done (as CUDA's pageable copies
do), from pinned memory with non_blocking=True they are only enqueued.

Checked here: events are read only once complete; ``torch.cuda.synchronize`` runs twice per
profile (anchor and end), never per step; compute / data-loading / transfer / launch-bound loops
get their verdict; step times match the simulated GPU's work (the oracle); pageable copies bring
the pin_memory advice and pinned ones do not; memory statistics drive the memory advice.
"""

from __future__ import annotations

import time
import types

import pytest

torch = pytest.importorskip("torch")

from gpuplan.measure.profile import profile  # noqa: E402

PAGEABLE_BW = 0.5e9   # bytes/s of the simulated pageable copies
PINNED_BW = 2.0e9


class FakeGPU:
    def __init__(self, total_memory=80 * 10**9, peak_reserved=10 * 10**9):
        self.queue_end = 0.0
        self.sync_calls = 0
        self.events = 0
        self.pinned: set[int] = set()
        self.total_memory = total_memory
        self.peak_reserved = peak_reserved
        self.copy_times: list[float] = []  # host time each blocking copy took (an oracle)
        gpu = self

        class Event:
            def __init__(self, enable_timing=False):
                assert enable_timing, "profiler events must be timing events"
                self.t = None

            def record(self, stream=None):
                gpu.events += 1
                self.t = max(time.perf_counter(), gpu.queue_end)

            def query(self):
                return self.t is not None and time.perf_counter() >= self.t

            def synchronize(self):
                gpu._sleep_until(self.t)

            def elapsed_time(self, other):
                if not (self.query() and other.query()):
                    raise RuntimeError("elapsed_time on an event that has not completed")
                return (other.t - self.t) * 1e3

        self.Event = Event

    def _sleep_until(self, t):
        # sleep most of the way, spin the last millisecond (sleep overshoots on a busy machine)
        left = t - time.perf_counter()
        if left > 0.002:
            time.sleep(left - 0.001)
        while time.perf_counter() < t:
            pass

    def launch(self, seconds):
        self.queue_end = max(time.perf_counter(), self.queue_end) + seconds

    def synchronize(self, device=None):
        self.sync_calls += 1
        self._sleep_until(self.queue_end)

    def wait_idle(self):  # a host-blocking operation (pageable copy, .item())
        self._sleep_until(self.queue_end)


@pytest.fixture
def gpu(monkeypatch):
    g = FakeGPU()
    c = torch.cuda
    monkeypatch.setattr(c, "Event", g.Event)
    monkeypatch.setattr(c, "synchronize", g.synchronize)
    monkeypatch.setattr(c, "is_available", lambda: True)
    monkeypatch.setattr(c, "is_initialized", lambda: True)
    monkeypatch.setattr(c, "current_device", lambda: 0)
    monkeypatch.setattr(c, "current_stream", lambda device=None: "stream0")
    monkeypatch.setattr(c, "get_device_name", lambda device=None: "Fake GPU 80GB")
    monkeypatch.setattr(c, "get_device_properties", lambda device=None: types.SimpleNamespace(total_memory=g.total_memory))
    monkeypatch.setattr(c, "reset_peak_memory_stats", lambda device=None: None)
    monkeypatch.setattr(c, "max_memory_allocated", lambda device=None: int(g.peak_reserved * 0.9))
    monkeypatch.setattr(c, "max_memory_reserved", lambda device=None: g.peak_reserved)

    real_to = torch.Tensor.to

    def fake_to(self, *args, **kwargs):
        dev = kwargs.get("device", args[0] if args else None)
        if isinstance(dev, str) and dev.startswith("cuda"):
            t0 = time.perf_counter()
            busy_until = g.queue_end  # the copy starts after the work already queued
            nbytes = self.numel() * self.element_size()
            if id(self) in g.pinned and kwargs.get("non_blocking"):
                g.launch(nbytes / PINNED_BW)
            else:
                g.launch(nbytes / (PINNED_BW if id(self) in g.pinned else PAGEABLE_BW))
                g.wait_idle()  # pageable (or blocking) copies return when done
                # the copy's own time: from when it could start until the host had it back
                g.copy_times.append(time.perf_counter() - max(t0, busy_until))
            return self  # the data stays a CPU tensor; the timeline is what is simulated
        return real_to(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", fake_to)
    monkeypatch.setattr(torch.Tensor, "is_pinned", lambda self, device=None: id(self) in g.pinned)
    return g


class _GpuWork(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, gpu, fwd_s, bwd_s):
        ctx.gpu, ctx.bwd_s = gpu, bwd_s
        gpu.launch(fwd_s)
        return x * 1.0

    @staticmethod
    def backward(ctx, grad):
        ctx.gpu.launch(ctx.bwd_s)
        return grad, None, None, None


class FakeModel(torch.nn.Module):
    """A model whose forward and backward enqueue simulated GPU work; ``host_s`` of host time
    is spent issuing it (kernel launches)."""

    def __init__(self, gpu, fwd_s, bwd_s, host_fwd_s=0.0, host_bwd_s=0.0):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(4))
        self.gpu, self.fwd_s, self.bwd_s = gpu, fwd_s, bwd_s
        self.host_fwd_s, self.host_bwd_s = host_fwd_s, host_bwd_s

    def forward(self, x):
        if self.host_fwd_s:
            time.sleep(self.host_fwd_s)
        y = _GpuWork.apply(x[:, :4] * self.w, self.gpu, self.fwd_s, self.bwd_s)
        if self.host_bwd_s:
            y = _HostCost.apply(y, self.host_bwd_s)
        return y.sum()


class _HostCost(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, s):
        ctx.s = s
        return x * 1.0

    @staticmethod
    def backward(ctx, grad):
        time.sleep(ctx.s)
        return grad, None


class FakeSGD(torch.optim.SGD):
    def __init__(self, params, gpu, opt_s):
        super().__init__(params, lr=0.0)
        self.gpu, self.opt_s = gpu, opt_s

    def step(self, closure=None):
        self.gpu.launch(self.opt_s)
        return super().step(closure)


class LoopClock:
    """The test loop's own clocks: when each iteration ended, how long each batch took to make."""

    def __init__(self):
        self.ends: list[float] = []
        self.loads: list[float] = []

    def steps(self, report):
        # measured step k runs from fetch k (just after iteration k-1 ended) to fetch k+1
        return [self.ends[s.index] - self.ends[s.index - 1] for s in report.per_step]


def _run(gpu, *, n=8, batch_bytes=4096, fwd=0.0, bwd=0.0, opt=0.0, host_fwd=0.0, host_bwd=0.0,
         load_s=0.0, pinned=False, item=False, warmup=1, clock=None):
    model = FakeModel(gpu, fwd, bwd, host_fwd, host_bwd)
    optim = FakeSGD(model.parameters(), gpu, opt)
    numel = batch_bytes // 4
    batches = [torch.ones(4, numel // 4) for _ in range(n + warmup)]
    if pinned:
        gpu.pinned.update(id(b) for b in batches)

    clock = clock if clock is not None else LoopClock()

    def loader():
        for b in batches:
            t = time.perf_counter()
            if load_s:
                time.sleep(load_s)
            clock.loads.append(time.perf_counter() - t)
            yield b

    with profile(model, optim, warmup=warmup, device="cuda") as prof:
        for b in prof.wrap(loader()):
            x = b.to("cuda", non_blocking=pinned)
            loss = model(x)
            optim.zero_grad()
            loss.backward()
            optim.step()
            if item:
                gpu.wait_idle()  # loss.item(): the host waits for the GPU
            clock.ends.append(time.perf_counter())
    return prof.report()


@pytest.mark.parametrize("item", [False, True], ids=["async", "item-each-step"])
def test_compute_bound_gpu_loop(gpu, item):
    fwd, bwd, opt = 0.010, 0.020, 0.003
    clock = LoopClock()
    r = _run(gpu, fwd=fwd, bwd=bwd, opt=opt, item=item, clock=clock)
    assert r.verdict == "compute"
    assert r.device == "cuda:0" and r.gpu is not None
    work = fwd + bwd + opt
    if item:
        # The host waits for the GPU every step: the loop's own clock is the step time.
        assert sum(s.duration_s for s in r.per_step) == pytest.approx(sum(clock.steps(r)), rel=0.05)
    else:
        # The host runs ahead: the simulated GPU's queue (fwd + bwd + opt per step, plus a 4 kB
        # copy) sets the pace.
        assert r.step_time_s == pytest.approx(work, rel=0.10)
        assert r.breakdown["forward"] == pytest.approx(fwd / work, abs=0.06)
        assert r.breakdown["backward"] == pytest.approx(bwd / work, abs=0.06)
        assert r.breakdown["optimizer"] == pytest.approx(opt / work, abs=0.06)
    assert r.gpu.busy_fraction_min > 0.7
    # Two synchronizations per profile (clock anchor and end), none per step.
    assert gpu.sync_calls == 2
    # Each step's parts sum to its duration.
    for s in r.per_step:
        assert sum(s.parts_s.values()) == pytest.approx(s.duration_s, rel=1e-9, abs=1e-12)
    # fp32 parameters, no autocast on a GPU: the mixed-precision advice.
    assert any("autocast" in a for a in r.advice)


def test_data_loading_bound_gpu_loop(gpu):
    clock = LoopClock()
    r = _run(gpu, fwd=0.002, bwd=0.003, load_s=0.030, clock=clock)
    assert r.verdict == "data-loading"
    # The steps tile the loop's own clock ...
    assert sum(s.duration_s for s in r.per_step) == pytest.approx(sum(clock.steps(r)), rel=0.05)
    # ... and the GPU's 5 ms of work runs during the next wait, so only (load - 5 ms) of each
    # load is exposed.
    load = sum(clock.loads[s.index] for s in r.per_step)
    exposed = sum(s.parts_s["data_wait"] for s in r.per_step)
    assert exposed == pytest.approx(load - 0.005 * r.steps, rel=0.10)
    assert gpu.sync_calls == 2


def test_transfer_bound_pageable_copies_get_pin_memory_advice(gpu):
    nbytes = 8_000_000  # 16 ms at the simulated pageable 0.5 GB/s
    r = _run(gpu, batch_bytes=nbytes, fwd=0.001, bwd=0.002)
    assert r.verdict == "transfer"
    t = r.transfer
    assert t.h2d_bytes_per_step == nbytes  # numel * element_size of each batch
    assert t.pageable_fraction == 1.0
    assert t.non_blocking_fraction == 0.0
    assert t.copies_per_step == 1
    # The copies' own durations (timed inside the fake .to) give the bandwidth oracle. The
    # profiler times the same copies from outside the call: with a second test run on this
    # 2-core machine the host's jitter around the 16 ms sleeps reached 5.5%, hence 10%.
    measured = [gpu.copy_times[s.index] for s in r.per_step]
    assert t.bandwidth_bytes_per_s == pytest.approx(nbytes * len(measured) / sum(measured), rel=0.10)
    assert any("pin_memory=True" in a and "non_blocking=True" in a for a in r.advice)


def test_pinned_non_blocking_copies_get_no_pin_memory_advice(gpu):
    nbytes = 40_000_000  # 20 ms at the simulated pinned 2 GB/s
    r = _run(gpu, batch_bytes=nbytes, fwd=0.001, bwd=0.002, pinned=True)
    assert r.transfer.pageable_fraction == 0.0
    assert r.transfer.non_blocking_fraction == 1.0
    assert r.verdict == "transfer"
    assert not any("pin_memory=True" in a for a in r.advice)
    assert any("keep data on the GPU" in a for a in r.advice)


def test_launch_bound_loop_is_host_overhead(gpu):
    # The host spends 15 + 10 ms issuing work that takes the GPU 0.5 + 0.5 ms.
    r = _run(gpu, fwd=0.0005, bwd=0.0005, host_fwd=0.015, host_bwd=0.010)
    assert r.verdict == "host-overhead"
    assert r.gpu.busy_fraction_min < 0.2
    assert any("torch.compile" in a and "CUDA graphs" in a for a in r.advice)


def test_memory_near_limit_advises_checkpointing(gpu):
    gpu.peak_reserved = int(0.95 * gpu.total_memory)
    r = _run(gpu, fwd=0.005, bwd=0.010, opt=0.001, n=4)
    assert r.gpu.peak_reserved_bytes == gpu.peak_reserved
    assert r.gpu.total_memory_bytes == gpu.total_memory
    assert r.gpu.peak_allocated_bytes == int(gpu.peak_reserved * 0.9)
    assert any("gradient checkpointing" in a for a in r.advice)


def test_autocast_suppresses_mixed_precision_advice(gpu, monkeypatch):
    monkeypatch.setattr(torch, "is_autocast_enabled", lambda *a: True)
    r = _run(gpu, fwd=0.005, bwd=0.010, n=4)
    assert r.verdict == "compute"
    assert not any("autocast" in a for a in r.advice)


def test_no_per_step_sync_even_with_many_steps(gpu):
    _run(gpu, n=30, fwd=0.0005, bwd=0.0005)
    assert gpu.sync_calls == 2
    assert gpu.events > 30 * 4  # events were used instead


def test_cuda_first_used_mid_run(gpu, monkeypatch):
    """device=None: host clocks until CUDA is initialized, then events; host-timed steps are dropped."""
    state = {"init": False}
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: state["init"])
    model = FakeModel(gpu, 0.002, 0.002)
    opt = FakeSGD(model.parameters(), gpu, 0.0)
    with profile(model, opt, warmup=1) as prof:
        for i, b in enumerate(prof.wrap([torch.ones(4, 8) for _ in range(10)])):
            if i == 3:
                state["init"] = True  # e.g. the first .cuda() call of the script
            model(b).backward()
            opt.step()
    r = prof.report()
    assert r.device == "cuda:0"
    assert any("CUDA was first used" in n for n in r.notes)
    # the switch happens at fetch 4: steps 0-2 (host-timed) and step 3 (open) are dropped; step 4
    # is the warm-up; steps 5-9 are measured (step 9 ends at the fetch that finds no more batches)
    assert r.steps == 5
    assert [s.index for s in r.per_step] == [5, 6, 7, 8, 9]
    assert gpu.sync_calls == 2
