"""Megatron-Core's distributed optimizer without ``overlap_param_gather``: the weights'
all-gather runs synchronously after the optimizer step (distrib_optimizer.py ``step`` at
NVIDIA/Megatron-LM@0d8e0714, lines 2593-2599), so it is exposed whole; the gradients'
reduce-scatter still hides in the backward. Hand-computed."""

from __future__ import annotations

import pytest

from gpuplan.compute import estimate_speed
from gpuplan.compute.parallel import zero1_sync_gather_exposed_s
from gpuplan.hardware import get_gpu
from gpuplan.hardware.topology import topology_for
from gpuplan.job import Job
from gpuplan.models import load_model


def test_the_gather_share_is_exposed_and_the_reduce_scatter_keeps_its_tail():
    # full 3 s of half all-reduces: reduce-scatter at 2 B an element, all-gather at 1 B ->
    # gather 1 s, reduce-scatter 2 s; a 0.5 s backward window leaves 1.5 s of it, and the
    # hidden 0.5 s costs 20% of the SMs: 1 + 1.5 + 0.2 x 0.5 = 2.6 s
    assert zero1_sync_gather_exposed_s(3.0, 1.0, 2.0, 0.5, 0.1, 0.2) == pytest.approx(2.6)
    # a window longer than the reduce-scatter: only the last bucket's tail beside the gather
    assert zero1_sync_gather_exposed_s(3.0, 1.0, 2.0, 10.0, 0.1, 0.0) == pytest.approx(1.1)


def test_a_synchronous_gather_only_lengthens_a_data_parallel_step():
    # Llama 3.1 8B on 16 H100 (two nodes, ZeRO-1 over DP 16): the gather waits, the step grows
    model, gpu = load_model("llama-3.1-8b"), get_gpu("H100-SXM-80GB")
    job = Job(model="llama-3.1-8b", mode="train", engine="megatron", gpus=16, tp=1, pp=1,
              zero=1, batch=1, seq=4096, grad_accum=1, gpus_per_node=8)
    topo = topology_for(gpu, gpus_per_node=8)
    est = {o: estimate_speed(model, gpu, job, measured=None, gather_overlap=o,
                             topology=topo).layout for o in (True, False)}
    assert est[False].dp_comm_s == pytest.approx(est[True].dp_comm_s)
    assert est[False].dp_exposed_s > est[True].dp_exposed_s
    assert est[False].step_s > est[True].step_s
