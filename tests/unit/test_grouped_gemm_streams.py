"""Transformer Engine's grouped GEMM as one cuBLAS launch per expert over 4 streams (issue 30):
at most four experts' products share the SMs at a time (transformer_engine/common/gemm/
cublaslt_gemm.cu multi_stream_cublas_gemm, common/util/multi_stream.cpp at NVIDIA/
TransformerEngine@fe8fad59c), so each set of four tiles and waves on its own. Expected values
are computed by hand here."""

from __future__ import annotations

import pytest

from gpuplan.compute.efficiency import (
    grouped_gemm_efficiency, grouped_gemm_s, grouped_rounds_efficiency,
)
from gpuplan.compute.flops import TE_GEMM_STREAMS, RunForm, _Bytes, _moe_ops
from gpuplan.models import load_model

# Qwen3-30B-A3B at EP8, MBS 1 x 4096 tokens on a B200 (148 SMs): 32,768 token-expert rows over
# 16 local experts (2,048 each); the gate-up GEMM's N is 2 x 768 = 1,536, its K 2,048.
ROWS, GROUPS, N_UP, HIDDEN, SMS = 32768, 16, 1536, 2048, 148


def test_te_runs_four_streams():
    assert TE_GEMM_STREAMS == 4


def test_one_grouped_schedule_against_four_at_a_time_by_hand():
    # one expert: 2,048 / 128 x 1,536 / 128 = 16 x 12 = 192 tiles, all full
    # all 16 together: 3,072 tiles over 148 SMs -> 21 waves (3,108 slots): 3072 / 3108
    assert grouped_gemm_efficiency(GROUPS, ROWS, N_UP, SMS, HIDDEN) == pytest.approx(3072 / 3108)
    # four at a time: 768 tiles -> 6 waves (888 slots), four such rounds: 768 / 888
    assert grouped_gemm_efficiency(GROUPS, ROWS, N_UP, SMS, HIDDEN, concurrent=4) == \
        pytest.approx(768 / 888)
    # no fewer experts than streams: nothing changes (4 local experts, the EP32 rows)
    assert grouped_gemm_efficiency(4, 4 * 2048, N_UP, SMS, HIDDEN, concurrent=4) == \
        pytest.approx(grouped_gemm_efficiency(4, 4 * 2048, N_UP, SMS, HIDDEN))


def test_a_last_round_of_fewer_by_hand():
    # 5 experts, 4 at a time: a round of four (768 / 888) and one of one (192 tiles -> 2 waves,
    # 296 slots: 192 / 296); time 4 / (768/888) + 1 / (192/296) = 4.625 + 1.541667
    expected = 5 / (4 * 888 / 768 + 296 / 192)
    assert expected == pytest.approx(0.810811, rel=1e-5)
    assert grouped_gemm_efficiency(5, 5 * 2048, N_UP, SMS, HIDDEN, concurrent=4) == \
        pytest.approx(expected)
    assert grouped_rounds_efficiency(5, 4, {4: 0.5, 1: 0.25}.__getitem__) == \
        pytest.approx(5 / (4 / 0.5 + 1 / 0.25))
    assert grouped_rounds_efficiency(3, 0, {3: 0.7}.__getitem__) == 0.7


def test_the_backward_wgrad_waves_four_at_a_time_by_hand():
    rate, shape = 1e15, (1, ROWS, HIDDEN, N_UP)
    fwd = 2.0 * ROWS * HIDDEN * N_UP
    # dgrad: 2,048 x 2,048 out per expert = 256 tiles; four at a time 1,024 -> 7 waves (1,036)
    # wgrad: 2,048 x 1,536 out per expert (inner: its 2,048 rows) = 192 tiles -> 768 / 888
    expected = fwd / (rate * 1024 / 1036) + fwd / (rate * 768 / 888)
    assert grouped_gemm_s(2 * fwd, shape, GROUPS, rate, SMS, backward=True, concurrent=4) == \
        pytest.approx(expected)
    # one schedule: dgrad 4,096 tiles -> 28 waves (4,144); wgrad 3,072 -> 21 (3,108)
    assert grouped_gemm_s(2 * fwd, shape, GROUPS, rate, SMS, backward=True) == \
        pytest.approx(fwd / (rate * 4096 / 4144) + fwd / (rate * 3072 / 3108))


def test_megatrons_expert_gemms_carry_the_streams_and_others_do_not():
    arch = load_model("qwen3-30b-a3b").architecture
    nb = _Bytes(act=2, weight=2, head=2, embed=2, kv=2, grad=2)
    te = _moe_ops(arch, 4096, nb, RunForm(ep=8, grouped_experts=True, expert_gemm_loop=True))
    one = _moe_ops(arch, 4096, nb, RunForm(ep=8, grouped_experts=True))
    assert {o.name: o.concurrent for o in te if o.name in ("moe.up", "moe.down")} == \
        {"moe.up": 4, "moe.down": 4}
    assert all(o.concurrent == 0 for o in one)
