"""A loop that synchronizes around every forward (AutoAWQ's examples/benchmark.py): each step runs
from host and device idle, kernel by kernel (Phase.sync_per_step), checked by hand."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuplan.compute import estimate_speed
from gpuplan.compute.efficiency import RuntimeOverheads
from gpuplan.compute.flops import Op
from gpuplan.compute.step import Phase
from gpuplan.compute.time import OpTime
from gpuplan.errors import InputError
from gpuplan.hardware import get_gpu
from gpuplan.job import Job
from gpuplan.models import load_model

US = 1e-6


def _op(name: str, count: int, kernels: int, run_us: float) -> OpTime:
    """``count`` instances of ``kernels`` kernels that run ``run_us`` per instance in all."""
    op = Op(name=name, op_class="mlp", kind="elementwise", phase="forward", count=count, flops=0.0,
            counted_flops=0.0, bytes=0.0, parallel_work=1, kernels=kernels)
    return OpTime(op=op, compute_s=0.0, memory_s=run_us * US, occupancy=1.0, dtype="fp16")


def _phase(ops: list[OpTime], host_us: float, gap_us: float = 1.0) -> Phase:
    o = RuntimeOverheads(runtime="compile", host_fwd_s=host_us * US, host_bwd_s=host_us * US,
                         host_fixed_s=0.0, device_gap_s=gap_us * US)
    return Phase(name="decode", batch=1, q_len=1, kv_len=16, ops=tuple(ops), launch_s=0.0,
                 peak_flops=1e12, dtype="fp16", overheads=o)


def test_short_and_long_kernels_alternating_expose_the_host():
    """An embedding (1 kernel, runs 0 + 1 us gap), two layers of [a 2-kernel op running 2 us per
    instance (1 us a kernel + 1 us gap = 2 us each), a 1-kernel op running 10 us (11 us)], a head
    (5 us + 1 = 6 us); the host issues each kernel in 4 us. Device 1 + 2 * (2 + 2 + 11) + 6 = 37
    us, host 8 * 4 = 32 us: overlapped, 37 us. From idle, kernel k starts at max(issued at 4k,
    the one before done): 4+1=5; 8+2=10; 12+2=14; 16+11=27; max(27,20)+2=29; 31; 31+11=42;
    42+6=48 us."""
    ops = [_op("embed", 1, 1, 0.0), _op("small", 2, 2, 2.0), _op("big", 2, 1, 10.0),
           _op("head", 1, 1, 5.0)]
    free = _phase(ops, host_us=4.0)
    assert free.device_time_s == pytest.approx(37 * US)
    assert free.host_time_s == pytest.approx(32 * US)
    assert free.time_s == pytest.approx(37 * US)
    synced = replace(free, sync_per_step=True)
    assert synced.time_s == pytest.approx(48 * US)
    # the kernels' own time is 0 + 2 * (2 + 10) + 5 = 29 us: the rest is launches and waits
    assert synced.launch_time_s == pytest.approx((48 - 29) * US)


def test_device_bound_from_the_first_kernel_waits_only_for_its_issue():
    """Every kernel runs longer (5 us + 1 us gap) than the host issues the next (1 us): from idle
    the device waits only for the first issue, 1 + 3 * 6 = 19 us; a host-bound step (issue 10 us
    a kernel, run 2 us) ends with its last kernel: 3 * 10 + 2 = 32 us."""
    dev = _phase([_op("x", 1, 3, 15.0)], host_us=1.0)
    assert replace(dev, sync_per_step=True).time_s == pytest.approx(19 * US)
    host = _phase([_op("x", 1, 3, 3.0)], host_us=10.0)
    assert replace(host, sync_per_step=True).time_s == pytest.approx(32 * US)


def test_the_estimate_of_a_synchronized_loop():
    """Llama 3.2 1B's decode on an RTX 4090 as AutoAWQ's benchmark runs it (fused modules: the
    compile runtime): with the waits the step is the kernel-by-kernel one, at least the slower of
    host and device; without them, exactly that slower one. A training job ignores the switch."""
    m = load_model("llama-3.2-1b")
    gpu = get_gpu("RTX-4090")
    job = Job(model="llama-3.2-1b", mode="infer", batch=1, seq=2048, runtime="compile",
              infer_precision="awq-4bit")
    free = estimate_speed(m, gpu, job, new_tokens=2048, measured=None)
    synced = estimate_speed(m, gpu, job, new_tokens=2048, measured=None, host_sync_per_step=True)
    assert not free.step.sync_per_step and synced.step.sync_per_step
    assert free.step.time_s == pytest.approx(max(free.step.host_time_s, free.step.device_time_s))
    assert synced.step.time_s == pytest.approx(synced.step._kernel_paced_s())
    assert synced.step.time_s > free.step.time_s
    assert synced.prefill is not None and synced.prefill.sync_per_step
    train = Job(model="llama-3.2-1b", mode="train", batch=1, seq=512)
    assert (estimate_speed(m, gpu, train, measured=None, host_sync_per_step=True).step_time_s
            == estimate_speed(m, gpu, train, measured=None).step_time_s)
    with pytest.raises(InputError, match="host_sync_per_step"):
        estimate_speed(m, gpu, job, measured=None, host_sync_per_step="yes")
