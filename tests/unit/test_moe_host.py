"""One Megatron-Core MoE layer's launches and host waits beyond the ops themselves, counted by
hand from the code (issue 30): Transformer Engine's current-scaling quantize (four launches:
zero the amax, amax, scale, cast), DDP's Python ``main_grad`` adds for the weights TE does not
accumulate itself (the norms', the router's), the router GEMM left 16-bit, and the host waits of
each token dispatcher (alltoall one forward; DeepEP four forward and one backward), the layer's
backward timed from a drained queue where it waits there."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from gpuplan.compute import parallel
from gpuplan.compute.efficiency import constant
from gpuplan.compute.flops import StepShape, build_forward_ops, run_form
from gpuplan.compute.parallel import (MOE_HOST_SYNCS, MicroCost, _issue_order,
                                      _synced_layer_cost, synced_forward_s)
from gpuplan.compute.step import _main_grad_add_op, _megatron_wide_router, _scale_launch_op
from gpuplan.fp8 import NARROW_RECIPES
from gpuplan.models import load_model

QWEN = load_model("qwen3-30b-a3b").architecture


def _fwd(arch=QWEN, engine: str = "megatron", ep: int = 8, gpu_arch: str = "Hopper"):
    shape = StepShape(batch=1, q_len=4096, kv_len=4096, train=True)
    return build_forward_ops(arch, shape, act_bytes=2, weight_bytes=1.0,
                             form=run_form(arch, engine, decode=False, ep=ep, gpu_arch=gpu_arch))


def test_qwen3_30b_is_the_layer_counted():
    assert (QWEN.num_layers, QWEN.hidden_size, QWEN.head_dim, QWEN.num_experts) == (
        48, 2048, 128, 128)
    assert QWEN.qk_norm not in ("none", "l2")


def test_current_scaling_adds_three_launches_per_dense_cast():
    # the dense linears a layer quantizes under TE: linear_qkv and linear_proj (the router runs
    # 16-bit, the experts split by split); two casts each (input forward, output gradient
    # backward), 3 launches beyond the cast (zero_amax, amax, scale): 48 x 2 x 2 x 3 = 576
    fwd = _megatron_wide_router(_fwd(), NARROW_RECIPES["fp8-current"])
    op = _scale_launch_op(fwd, NARROW_RECIPES["fp8-current"])
    assert op.kernels == 48 * 2 * 2 * 3 == 576
    assert op.bytes == 0.0 and op.host_s == constant("eager_host_bwd_s")


def test_the_router_is_not_quantized_under_te():
    fwd = _fwd()
    wide = _megatron_wide_router(fwd, NARROW_RECIPES["fp8-current"])
    assert [o.name for o in wide if o.wide] == ["moe.router"]
    # with the router narrow it would be a third dense linear: 48 x 3 x 2 x 3 = 864
    assert _scale_launch_op(fwd, NARROW_RECIPES["fp8-current"]).kernels == 864
    # torchao's recipes are not TE's: left as they are
    assert not any(o.wide for o in _megatron_wide_router(fwd, NARROW_RECIPES["fp8-tensorwise"]))


@pytest.mark.parametrize("recipe", ["mxfp8", "fp8-delayed", "fp8-blockwise"])
def test_one_kernel_casts_add_nothing(recipe):
    assert _scale_launch_op(_fwd(gpu_arch="Blackwell"), NARROW_RECIPES[recipe]) is None


def test_ddp_adds_the_norms_and_the_routers_gradients_from_python():
    # a Qwen3 MoE layer: input RMSNorm 1, QK-norm 2, pre-MLP RMSNorm 1, router 1 = 5 adds;
    # 10 B an element over 2048 + 2 x 128 + 2048 + 2048 x 128 = 266,496 elements a layer
    op = _main_grad_add_op(_fwd(), QWEN)
    assert op.kernels == 48 * 5 == 240
    assert op.bytes == 48 * 10 * (2048 + 2 * 128 + 2048 + 2048 * 128) == 127_918_080
    assert op.phase == "backward" and op.host_s is None  # a Python hook: eager's cost


def test_a_dense_model_without_qk_norm_adds_two_a_layer():
    llama = load_model("llama-3.1-8b").architecture
    op = _main_grad_add_op(_fwd(llama, ep=1), llama)
    assert op.kernels == llama.num_layers * 2 == 64


def test_the_dispatchers_waits():
    assert MOE_HOST_SYNCS == {"alltoall": (1, 0), "deepep": (4, 1), "hybridep": (1, 0)}


# -- the backward from a drained queue ------------------------------------------------------------

def _t(name: str, phase: str, host: float, dev: float, kernels: int = 1):
    op = SimpleNamespace(name=name, phase=phase, kind="elementwise", kernels=kernels, count=1,
                         group="mlp", host=host)
    return SimpleNamespace(op=op, total_s=dev)


STEP = SimpleNamespace(overheads=SimpleNamespace(device_gap_s=0.0),
                       _host_s=lambda ts: sum(t.op.host for t in ts),
                       _device_s=lambda ts: sum(t.total_s for t in ts))


def test_the_backward_runs_reversed_from_the_dispatch():
    bwd = [_t("attn.norm", "backward", 1, 2), _t("moe.topk", "backward", 3, 4),
           _t("moe.dispatch", "backward", 5, 6), _t("moe.up", "backward", 7, 8)]
    # reversed: up, dispatch, topk, norm; rotated to begin at the dispatch (DeepEP's wait)
    assert _issue_order(bwd, STEP, 1, 1, backward=True) == [
        (5, 6, 1), (3, 4, 1), (1, 2, 1), (7, 8, 1)]


def test_a_backward_wait_times_the_moe_layer_from_idle(monkeypatch):
    # one MoE layer: backward ops dispatch (host 10, device 1), up (host 1, device 10):
    # from idle the dispatch issues by 10 and runs to 11, up issues by 11 and runs to 21: 21,
    # against max(11, 11) = 11 paced; plus one host_sync_s for DeepEP's backward wait
    monkeypatch.setattr(parallel, "_moe_layers", lambda arch: 1)
    ops = [_t("moe.dispatch", "backward", 10, 1), _t("moe.up", "backward", 1, 10)]
    arch = SimpleNamespace(num_layers=1)
    cost = MicroCost(layers=1, layer_fwd_s=0.0, layer_bwd_s=11.0, attn_fwd_s=0.0,
                     attn_bwd_s=0.0, other_s=0.0, hardware_flops=0.0)
    assert synced_forward_s([(10, 1, 1), (1, 10, 1)]) == 21
    out = _synced_layer_cost(cost, ops, ops, STEP, arch, 1, 1.0, (0, 1))
    assert out.layer_bwd_s == pytest.approx(21 + constant("host_sync_s"))
    # without a backward wait (alltoall, HybridEP) the backward stays paced
    assert _synced_layer_cost(cost, ops, ops, STEP, arch, 1, 1.0, (0, 0)).layer_bwd_s == 11.0


def test_each_forward_wait_costs_one_host_read(monkeypatch):
    # one MoE layer's forward from a drained queue: topk (host 2, device 1) then dispatch (host
    # 1, device 5); rotated to begin after the top-k: dispatch issues by 1, runs to 6; topk
    # issues by 3, runs to 7: 7, plus host_sync_s a wait -- alltoall 1, DeepEP 4
    monkeypatch.setattr(parallel, "_moe_layers", lambda arch: 1)
    ops = [_t("moe.topk", "forward", 2, 1), _t("moe.dispatch", "forward", 1, 5)]
    cost = MicroCost(layers=1, layer_fwd_s=6.0, layer_bwd_s=0.0, attn_fwd_s=0.0,
                     attn_bwd_s=0.0, other_s=0.0, hardware_flops=0.0)
    arch = SimpleNamespace(num_layers=1)
    for name, waits in MOE_HOST_SYNCS.items():
        out = _synced_layer_cost(cost, ops, ops, STEP, arch, 1, 1.0, waits)
        assert out.layer_fwd_s == pytest.approx(7 + waits[0] * constant("host_sync_s")), name
