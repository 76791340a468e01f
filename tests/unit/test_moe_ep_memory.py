"""MoE under expert parallelism: the all-to-all buffers and the capacity factor, by hand.

The oracle is the engines' code, not a trace (transformers runs MoE on one GPU):
Megatron-Core's MoEAlltoAllTokenDispatcher and moe_utils.get_capacity
(NVIDIA/Megatron-LM megatron/core/transformer/moe @d98e8a64) and torchtitan's all-to-all
dispatcher (pytorch/torchtitan torchtitan/models/common/token_dispatcher.py @b5bcd76c); see
gpuplan.memory.moe_ep. Mixtral-8x7B: hidden 4096, 8 experts, top-2 (its config.json).
"""

from __future__ import annotations

import math

import pytest

from gpuplan.compute.flops import _Bytes, _moe_ops, run_form
from gpuplan.errors import InputError
from gpuplan.job import Job
from gpuplan.memory.moe_ep import (dropped_fraction_balanced, dropped_fraction_uniform,
                                   ep_exchange, expert_capacity)
from gpuplan.memory.parallel import stage_plans
from gpuplan.models import load_model

H, E, K = 4096, 8, 2


@pytest.fixture(scope="module")
def mixtral():
    m = load_model("mixtral-8x7b")
    a = m.architecture
    assert (a.hidden_size, a.num_experts, a.experts_per_token) == (H, E, K)
    return m


def _plan(model, **kw):
    job = Job(model=model, mode="train", engine="megatron", batch=1, seq=2048, **kw)
    return stage_plans(model, job)[0]


@pytest.mark.parametrize("ep", [2, 4])
def test_dropless_buffers_under_ep(mixtral, ep):
    # 2048 tokens x top-2 = 4096 rows sent and (balanced) received, whatever the EP degree;
    # one all-to-all has its send and its receive buffer alive: 2 x 4096 x 4096 x 2 B (bf16)
    p = _plan(mixtral, gpus=ep, ep=ep)
    x = p.ep_exchange()
    assert (x.rows, x.capacity) == (4096, None)
    assert x.buffer_bytes == 4096 * 4096 * 2 == 33_554_432
    assert p.buffers(False) == p.buffers(True) == 2 * 33_554_432
    assert x.saved_bytes == 0 and x.index_bytes == 8 * 4096


def test_sequence_parallel_sends_its_share(mixtral):
    # TP 2 with SP: a rank's MoE layer routes 1024 of the 2048 tokens
    p = _plan(mixtral, gpus=4, tp=2, ep=2, sequence_parallel=True)
    assert p.ep_exchange().rows == 1024 * 2
    assert p.buffers(False) == 2 * 2048 * H * 2


def test_no_buffer_without_ep(mixtral):
    assert _plan(mixtral, gpus=2, tp=2).buffers(False) == 0


@pytest.mark.parametrize("ep", [2, 4])
def test_capacity_pads_the_buffers(mixtral, ep):
    # cf 1.1: ceil(2048 x 2 / 8 x 1.1) = ceil(563.2) = 564 rows per expert; 8 x 564 = 4512
    p = _plan(mixtral, gpus=ep, ep=ep, moe_capacity_factor=1.1)
    x = p.ep_exchange()
    assert (x.capacity, x.rows) == (564, 4512)
    assert p.buffers(False) == 2 * 4512 * H * 2 == 73_924_608


def test_capacity_formula_is_megatrons():
    # get_capacity(num_tokens=T * topk, num_experts=E, capacity_factor=cf)
    assert expert_capacity(2048, 8, 2, 1.0) == 512
    assert expert_capacity(2048, 8, 2, 1.25) == 640
    assert expert_capacity(100, 8, 2, 1.0) == 25
    assert expert_capacity(101, 8, 2, 1.0) == 26  # 202 / 8 = 25.25 -> 26
    assert ep_exchange(2048, 8, 2, H, 2, 4, 0.5).rows == 8 * 256


def test_dropped_fraction():
    # balanced demand 512 per expert: cf 0.75 keeps 384 -> a quarter dropped; cf >= 1 none
    assert dropped_fraction_balanced(2048, 8, 2, 0.75) == pytest.approx(0.25)
    assert dropped_fraction_balanced(2048, 8, 2, 1.0) == 0.0
    # uniform routing, 2 tokens, 2 experts, top-1, cf 1: capacity 1; an expert is asked for
    # X ~ Binomial(2, 1/2) rows and drops one when X = 2 (probability 1/4): E[(X-1)+] = 1/4 of
    # its mean demand 1
    assert dropped_fraction_uniform(2, 2, 1, 1.0) == pytest.approx(0.25)
    # 3 tokens, 3 experts, top-1, cf 1: capacity 1; X ~ Bin(3, 1/3): E[(X-1)+] =
    # 1 x P(2) + 2 x P(3) = 1 x 6/27 + 2 x 1/27 = 8/27, over the mean demand 1
    assert dropped_fraction_uniform(3, 3, 1, 1.0) == pytest.approx(8 / 27)
    # enough capacity for every token: nothing dropped
    assert dropped_fraction_uniform(16, 8, 2, 8.0) == 0.0


def test_capacity_pads_the_expert_gemms(mixtral):
    a = mixtral.architecture
    nb = _Bytes(act=2, weight=2, head=2, embed=2, kv=2, grad=2)
    T, n_up = 2048, 2 * a.moe_intermediate_size if a.moe_intermediate_size else 2 * a.intermediate_size
    ie = n_up // 2
    for cf, rows in ((None, T * K), (1.1, 4512), (0.5, 8 * 256)):
        form = run_form(a, "megatron", decode=False, ep=4, capacity_factor=cf)
        ops = {o.name: o for o in _moe_ops(a, T, nb, form)}
        assert ops["moe.up"].shape[1] == ops["moe.down"].shape[1] == rows
        assert ops["moe.up"].flops == 2 * rows * H * n_up
        assert ops["moe.down"].flops == 2 * rows * ie * H
        # model FLOPs count the routed rows only: padding is executed, not counted; dropped
        # rows are neither
        routed = min(rows, T * K)
        assert ops["moe.up"].counted_flops == pytest.approx(2 * routed * H * n_up)
        assert ops["moe.down"].counted_flops == pytest.approx(2 * routed * ie * H)


def test_capacity_grows_the_kept_expert_rows(mixtral):
    # the experts' row-wise tensors scale with the padded rows: cf 2 keeps more than dropless
    # and the difference is what those rows add (cf 1 -> the same rows, the same bytes)
    base = _plan(mixtral, gpus=2, ep=2).activations().kept_bytes
    same = _plan(mixtral, gpus=2, ep=2, moe_capacity_factor=1.0).activations().kept_bytes
    more = _plan(mixtral, gpus=2, ep=2, moe_capacity_factor=2.0).activations().kept_bytes
    assert same == base < more


def test_bad_capacity_factor_is_one_line(mixtral):
    for bad in (0, -1.0):
        with pytest.raises(InputError, match="moe_capacity_factor|capacity") as e:
            Job(model="mixtral-8x7b", mode="train", engine="megatron", moe_capacity_factor=bad)
        assert "\n" not in str(e.value)
    for engine in ("torchtitan", "transformers"):
        with pytest.raises(InputError, match="only Megatron-Core") as e:
            Job(model="mixtral-8x7b", mode="train", engine=engine, moe_capacity_factor=1.0)
        assert "\n" not in str(e.value)
    with pytest.raises(InputError, match="has no experts") as e:
        _plan(load_model("llama-3.1-8b"), gpus=2, tp=2, moe_capacity_factor=1.0)
    assert "\n" not in str(e.value)
    assert not math.isnan(dropped_fraction_uniform(10**6, 128, 8, 0.5))
