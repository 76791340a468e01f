"""Megatron-Core's MoE dispatcher makes the host wait for the device once per MoE layer's forward
(the token counts are copied to the CPU before the all-to-all: token_dispatcher.py's
``_maybe_dtoh_and_synchronize``). The synced forward is timed by the in-order issue recursion;
these tests hold it to hand calculations and to the cases where it must equal the old pace."""

from __future__ import annotations

import pytest

from gpuplan.compute.device import default_efficiency, device_from_gpu
from gpuplan.compute.efficiency import constant
from gpuplan.compute.flops import _Bytes, run_form
from gpuplan.compute.flops import _moe_ops as ops
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


def test_drop_and_pad_removes_the_sync():
    # token_dispatcher.py _maybe_dtoh_and_synchronize copies and waits only if not drop_and_pad;
    # a capacity factor is exported with --moe-pad-expert-input-to-capacity
    assert moe_host_sync("megatron", 8, None)
    assert not moe_host_sync("megatron", 8, 1.0)


def _moe_ops(engine: str):
    arch = load_model("qwen3-30b-a3b").architecture
    form = run_form(arch, engine, decode=False, ep=8, gpu_arch="Hopper")
    nb = _Bytes(act=2, weight=2, head=2, embed=2, kv=2, grad=2)
    return {o.name: o for o in ops(arch, 4096, nb, form)}


def test_megatron_launches_one_expert_gemm_per_local_expert():
    # Qwen3-30B-A3B: 128 experts over EP 8 = 16 local experts; TE GroupedLinear's cuBLAS loop
    # issues 16 up and 16 down GEMMs (vLLM's fused_moe: one kernel each)
    meg, vllm = _moe_ops("megatron"), _moe_ops("vllm")
    assert meg["moe.up"].kernels == 128 // 8 == meg["moe.down"].kernels
    assert vllm["moe.up"].kernels == 1 == vllm["moe.down"].kernels
    assert meg["moe.up"].flops == vllm["moe.up"].flops  # same work, more launches


def test_serialized_host_term_is_launches_times_the_per_launch_cost():
    # one segment: k launches, each host h to issue and ~0 to run, after the
    # sync: the forward waits k x h (nothing left for the device to hide it under)
    h = constant("compile_host_s")
    k = 2 * 16  # the up and down GEMMs of 16 local experts
    assert synced_forward_s([(k * h, 1e-12, k)]) == pytest.approx(k * h)
