"""FP8 param gather moves the narrow weights at 1 byte an element (plus block scales) in the
data-parallel all-gather, the embedding and head at 2 -- checked by hand calculation."""

from __future__ import annotations

import pytest

from gpuplan.compute import estimate_speed
from gpuplan.fp8 import NARROW_RECIPES, gathered_bytes_per_element, narrow_elements
from gpuplan.hardware import get_gpu
from gpuplan.job import Job
from gpuplan.models import load_model

# Llama 3.1 8B: 8,030,261,248 parameters (Meta's model card count of the HF checkpoint); its
# untied embedding and lm_head are 128,256 x 4,096 each.
L8_PARAMS = 8_030_261_248
L8_EDGE = 2 * 128_256 * 4_096
L8_G = ((L8_PARAMS - L8_EDGE) * 1 + L8_EDGE * 2) / L8_PARAMS  # 1.130843...


@pytest.mark.parametrize("name, per", [
    ("fp8-current", 1.0),            # one fp32 scale per tensor: left out
    ("fp8-blockwise", 1 + 4 / 16384),  # an fp32 scale per 128 x 128 block
    ("mxfp8", 1 + 1 / 32),           # an e8m0 byte per 32 values
    ("nvfp4", 0.5 + 1 / 16),         # e2m1 nibbles, an e4m3 byte per 16 values
])
def test_gathered_bytes_per_element(name, per):
    # 800 of 1000 elements narrow, 200 stay bf16
    got = gathered_bytes_per_element(NARROW_RECIPES[name], 1000, 800)
    assert got == pytest.approx((800 * per + 200 * 2) / 1000)


def test_narrow_elements_leave_embedding_and_head():
    assert narrow_elements(L8_PARAMS, 128_256, 4_096, tied=False) == L8_PARAMS - L8_EDGE
    assert narrow_elements(1000, 10, 10, tied=True) == 900
    assert narrow_elements(100, 10, 10, tied=False) == 0


def _est(**kw):
    job = Job(model="llama-3.1-8b", mode="train", **kw)
    return estimate_speed(load_model("llama-3.1-8b"), get_gpu("H100-SXM-80GB"), job,
                          measured=None)


def test_megatron_distributed_optimizer_gathers_fp8():
    # ZeRO-1: gradients reduce-scattered (2 B), weights all-gathered: 2 B -> L8_G; each half an
    # all-reduce, so the data-parallel time scales by (2 + L8_G) / (2 + 2)
    kw = dict(engine="megatron", precision="fp8-current", batch=1, seq=4096, gpus=16, tp=2,
              zero=1, sequence_parallel=True, grad_accum=4)
    base, fp8 = _est(**kw), _est(**kw, fp8_param_gather=True)
    assert fp8.layout.dp_comm_s / base.layout.dp_comm_s == pytest.approx((2 + L8_G) / 4, rel=1e-6)
    assert any("1.131 B an element" in n for n in fp8.notes)


def test_fsdp2_float8_all_gather_bytes():
    # ZeRO-3 (torchtitan FSDP2): a reduce-scatter of the gradients in its reduce dtype (fp32,
    # 4 B: torchtitan's --training.mixed_precision_reduce float32) and two all-gathers of the
    # weights a micro-batch: (4 + 2 w) / 2 all-reduce bytes an element, w = 2 -> L8_G
    kw = dict(engine="torchtitan", precision="fp8-tensorwise", batch=1, seq=4096, gpus=8, zero=3)
    base, fp8 = _est(**kw), _est(**kw, fp8_param_gather=True)
    assert base.scaling.gradient_bytes == pytest.approx(4 * L8_PARAMS, rel=1e-9)
    assert fp8.scaling.gradient_bytes == pytest.approx((2 + L8_G) * L8_PARAMS, rel=1e-9)


def test_no_param_gather_no_change():
    kw = dict(engine="megatron", precision="fp8-current", batch=1, seq=4096, gpus=16, tp=2,
              zero=1, sequence_parallel=True, grad_accum=4)
    bf16 = _est(**{**kw, "precision": "mixed-bf16"})
    assert not any("fp8_param_gather" in n for n in _est(**kw).notes + bf16.notes)


def _est_b200(**kw):
    job = Job(model="llama-3.1-8b", mode="train", **kw)
    return estimate_speed(load_model("llama-3.1-8b"), get_gpu("B200-SXM-180GB"), job,
                          measured=None)


def test_megatron_mxfp8_param_gather_moves_bf16():
    # Megatron-Core's MXFP8 param gather (reuse_grad_buf_for_mxfp8_param_ag, which
    # Megatron-Bridge's bf16_with_mxfp8_mixed sets beside fp8_param_gather) all-gathers the BF16
    # weights through the gradient buffer and casts them after: the data-parallel bytes are the
    # 16-bit gather's, 2 B an element, not 1 + 1/32 -- while fp8-current on the same layout
    # gathers (2 + L8_G) / 4 of them
    kw = dict(engine="megatron", batch=1, seq=4096, gpus=16, tp=2, zero=1,
              sequence_parallel=True, grad_accum=4)
    mx, mx_gather = _est_b200(precision="mxfp8", **kw), _est_b200(
        precision="mxfp8", fp8_param_gather=True, **kw)
    assert mx_gather.layout.dp_comm_s == pytest.approx(mx.layout.dp_comm_s, rel=1e-9)
    assert any("16 bits through the gradient buffer" in n for n in mx_gather.notes)
    cs, cs_gather = _est_b200(precision="fp8-current", **kw), _est_b200(
        precision="fp8-current", fp8_param_gather=True, **kw)
    assert cs_gather.layout.dp_comm_s / cs.layout.dp_comm_s == pytest.approx((2 + L8_G) / 4,
                                                                              rel=1e-6)
