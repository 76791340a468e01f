"""Megatron-Core's MoE dispatcher makes the host wait for the device once per MoE layer's forward
(the token counts are copied to the CPU before the all-to-all: token_dispatcher.py's
``_maybe_dtoh_and_synchronize``). The synced forward is timed by the in-order issue recursion;
these tests hold it to hand calculations and to the cases where it must equal the old pace."""

from __future__ import annotations

import pytest

from gpuplan.compute.device import default_efficiency, device_from_gpu
from gpuplan.compute.efficiency import constant
from gpuplan.compute.parallel import micro_cost, moe_host_sync, synced_forward_s
from gpuplan.compute.step import train_precision
from gpuplan.hardware import get_gpu
from gpuplan.models import load_model


def test_lopsided_ops_add_host_and_device_after_a_sync():
    # a host-heavy op (1.0 s to issue, 0.1 s to run) then a device-heavy one (0.1 s, 2.0 s):
    # the second is issued at 1.1 s, the device is free at 1.1 s, so it ends at 3.1 s -- not
    # max(1.1, 2.1) = 2.1 s, the pace when the host could have issued it earlier
    assert synced_forward_s([(1.0, 0.1, 1), (0.1, 2.0, 1)]) == pytest.approx(3.1)


def test_one_sided_segments_cost_their_side_plus_one_kernel_of_the_other():
    # device-bound: 4 kernels of 0.025 s issue, 0.25 s run: 0.025 + 4 x 0.25
    assert synced_forward_s([(0.1, 1.0, 4)]) == pytest.approx(1.025)
    # host-bound: 4 kernels issued every 0.25 s, each running 0.025 s after its issue
    assert synced_forward_s([(1.0, 0.1, 4)]) == pytest.approx(1.025)


def test_only_megatron_under_expert_parallelism_syncs():
    assert moe_host_sync("megatron", 8)
    assert not moe_host_sync("megatron", 1)
    assert not moe_host_sync("vllm", 8)


def _cost(model: str, sync: bool):
    gpu = get_gpu("h100")
    device = device_from_gpu(gpu)
    eff = default_efficiency(device)
    prec = train_precision("mixed-bf16", device, False)
    return micro_cost(load_model(model).architecture, device, eff, prec, tp=1, cp=1, batch=1,
                      seq=4096, checkpointing="none", attention="sdpa", runtime="compile", ep=8,
                      moe_sync=sync)


def test_sync_lengthens_a_moe_forward_by_at_least_the_read_and_leaves_dense_alone():
    free, synced = _cost("qwen3-30b-a3b", False), _cost("qwen3-30b-a3b", True)
    assert synced.layer_fwd_s >= free.layer_fwd_s + constant("host_sync_s") - 1e-12
    assert synced.layer_bwd_s == pytest.approx(free.layer_bwd_s)  # no sync in the backward
    dense_free, dense_sync = _cost("llama-3.1-8b", False), _cost("llama-3.1-8b", True)
    assert dense_sync.layer_fwd_s == pytest.approx(dense_free.layer_fwd_s)
