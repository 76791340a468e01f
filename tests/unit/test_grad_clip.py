"""Gradient clipping in the speed model: the passes of each implementation counted from its code,
the host reads that serialize an optimizer loop, and bad input."""

from __future__ import annotations

import math

import pytest

from gpuplan.compute import estimate_speed
from gpuplan.compute.efficiency import constant, grad_clip_cost
from gpuplan.errors import InputError
from gpuplan.hardware import get_gpu
from gpuplan.job import Job
from gpuplan.models import load_model

V100 = get_gpu("V100-SXM2-16GB")
A100 = get_gpu("A100-SXM-80GB")


def test_clip_costs_counted_from_the_code():
    # 300 tensors, 1e9 elements: torch's multi-tensor launches are capped at 36 tensors and
    # 20,971,520 elements each (ATen MultiTensorApply.cuh) -> 48 launches per pass
    launches = max(math.ceil(300 / 36), math.ceil(1e9 / 20_971_520))
    f = grad_clip_cost("foreach", tensors=300, elements=10**9)
    # _foreach_norm and _foreach_mul_, plus stack, norm, coefficient and clamp
    assert (f.kernels, f.host_reads, f.python_loop, f.accesses) == (2 * launches + 4, 0, False, 3)
    p = grad_clip_cost("per-tensor", tensors=300, elements=10**9)
    assert (p.kernels, p.host_reads, p.python_loop) == (2 * 300 + 4, 0, True)
    s = grad_clip_cost("per-tensor-sync", tensors=300, elements=10**9)
    assert (s.kernels, s.host_reads) == (2 * 300 + 4, 300)  # a .item() per tensor
    m = grad_clip_cost("multi-tensor-sync", tensors=300, elements=10**9)
    assert (m.kernels, m.host_reads, m.python_loop) == (2 * launches + 4, 1, False)
    with pytest.raises(ValueError):
        grad_clip_cost("clip", tensors=1, elements=1)


def _bert(**kw):
    model = load_model("bert-large-uncased")
    job = Job(model="bert-large-uncased", mode="train", precision="fp32", batch=4, seq=384,
              runtime="eager", **kw)
    return model, job


def test_clipping_reads_and_scales_every_gradient():
    model, job = _bert()
    plain = estimate_speed(model, V100, job, measured=None)
    clipped = estimate_speed(model, V100, job.with_(max_grad_norm=1.0), measured=None)
    (op,) = [t.op for t in clipped.step.ops if t.op.name == "optimizer.clip_grad_norm"]
    n = clipped.trainable_params
    assert op.bytes == 3 * 4 * n  # fp32 gradients: the norm reads them, the scale rewrites them
    assert not [t for t in plain.step.ops if t.op.name == "optimizer.clip_grad_norm"]
    assert clipped.step_time_s - plain.step_time_s >= op.bytes / V100.memory_bandwidth
    # mixed precision with an fp32 master: the master's gradients are clipped
    mixed = estimate_speed(model, V100, job.with_(precision="mixed-fp16", max_grad_norm=1.0),
                           measured=None, grad_clip_impl="multi-tensor-sync")
    (op,) = [t.op for t in mixed.step.ops if t.op.name == "optimizer.clip_grad_norm"]
    assert op.bytes == 3 * 4 * n


def test_a_host_read_per_tensor_serializes_the_optimizer_loop():
    model, job = _bert(max_grad_norm=1.0)
    free = estimate_speed(model, V100, job, measured=None, optimizer_impl="for-loop",
                          grad_clip_impl="per-tensor")
    synced = estimate_speed(model, V100, job, measured=None, optimizer_impl="for-loop",
                            grad_clip_impl="per-tensor-sync")
    ph = synced.step
    opt = [t for t in ph.ops if t.op.phase == "optimizer"]
    rest = [t for t in ph.ops if t.op.phase != "optimizer"]
    n = sum(c for _, c in ph.tensor_shares)
    assert n == sum(t.count for t in model.tensors)  # one read per parameter tensor
    assert sum(f * c for f, c in ph.tensor_shares) == pytest.approx(1.0)
    host, dev = ph._host_s(opt), ph._device_s(opt)
    stretch = ph.time_s - max(ph._device_s(rest), ph._host_s(rest))
    # run tensor by tensor, the stretch lies between the overlapped and the fully serial time,
    # plus the reads
    reads = n * constant("host_sync_s")
    assert max(host, dev) + reads <= stretch + 1e-12
    assert stretch <= host + dev + reads + 1e-12
    assert synced.step_time_s > free.step_time_s + reads * 0.99


def test_no_clip_outside_training_and_bad_values_refused():
    model, job = _bert(max_grad_norm=1.0)
    est = estimate_speed(model, A100, job.with_(mode="infer"), measured=None)
    assert not [t for t in est.step.ops if t.op.name == "optimizer.clip_grad_norm"]
    for bad in (0, -1.0, float("nan"), True, "1"):
        with pytest.raises(InputError, match="max_grad_norm"):
            Job(model="bert-large-uncased", max_grad_norm=bad)
    with pytest.raises(InputError, match="^grad_clip_impl 'sometimes': expected foreach") as e:
        estimate_speed(model, A100, job, measured=None, grad_clip_impl="sometimes")
    assert e.value.field == "grad_clip_impl" and e.value.value == "sometimes"


def test_a_parallel_layout_runs_the_optimizer_as_the_job_says():
    # under --tp the step's optimizer stretch is the same machinery as on one GPU: the clip, the
    # implementation and fp16 loss scaling all reach it (it was one fused pass whatever the job)
    model = load_model("llama-3.1-8b")
    job = Job(model="llama-3.1-8b", mode="train", batch=1, seq=2048, tp=2, gpus=2)

    def opt_s(j, **kw):
        return estimate_speed(model, A100, j, measured=None, **kw).layout.optimizer_s

    fused = opt_s(job, optimizer_impl="fused")
    assert opt_s(job) > 2 * fused  # torch's default on a GPU, foreach: 8 passes against 1
    # the clip reads this rank's fp32 master gradients three times: at least their bytes more
    clip = opt_s(job.with_(max_grad_norm=1.0), optimizer_impl="fused") - fused
    half = sum(t.total for t in model.tensors) / 2  # TP2: about half of the weights a rank
    assert clip >= 0.9 * 3 * 4 * half / A100.memory_bandwidth
    assert opt_s(job.with_(precision="mixed-fp16"), optimizer_impl="fused") > fused  # loss scaling
