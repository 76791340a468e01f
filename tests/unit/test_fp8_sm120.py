"""Consumer Blackwell's FP8 transposes: Transformer Engine decides whether a per-tensor FP8
tensor keeps a transposed copy by ``nvte_is_non_tn_fp8_gemm_supported()``
(transformer_engine/common/transformer_engine.cpp at NVIDIA/TransformerEngine @70f53666:
``(sm_arch >= 100 && sm_arch < 120) || sm_arch >= 130``), i.e. by the compute capability, not
by the architecture's name: an RTX 5090 (12.0) keeps the transposes Hopper keeps, a B200 (10.0)
does not. Bytes below are counted by hand from the element sizes."""

from __future__ import annotations

import pytest

from gpuplan.compute import estimate_speed
from gpuplan.compute.device import device_from_gpu
from gpuplan.fp8 import (NARROW_RECIPES, columnwise_bytes_per_element, fp8_weight_bytes,
                         keeps_columnwise, non_tn_fp8_gemm, weight_cast_bytes_per_element)
from gpuplan.hardware import get_gpu
from gpuplan.job import Job
from gpuplan.models import load_model

RTX5090 = device_from_gpu(get_gpu("RTX-5090"))
B200 = device_from_gpu(get_gpu("B200-SXM-180GB"))


@pytest.mark.parametrize("cc, want", [("8.9", False), ("9.0", False), ("10.0", True),
                                      ("10.3", True), ("11.0", True), ("12.0", False),
                                      ("12.1", False), ("13.0", True)])
def test_te_rule_by_compute_capability(cc, want):
    """The TE rule on sm_arch = 10 x major + minor; the architecture name passed beside it
    ("Blackwell" for every one) does not decide once a compute capability is known."""
    assert non_tn_fp8_gemm("Blackwell", cc) is want


def test_name_fallback_only_without_a_compute_capability():
    """No compute capability (a custom GPU, "") or a non-CUDA one (AMD's gfx942): the name
    decides, Hopper and Ada TN-only, Blackwell not -- the rule before this change."""
    assert non_tn_fp8_gemm("Hopper", None) is False
    assert non_tn_fp8_gemm("Ada Lovelace", "") is False
    assert non_tn_fp8_gemm("Blackwell", None) is True
    assert non_tn_fp8_gemm("CDNA 3", "gfx942") is True


def test_the_device_carries_the_catalog_compute_capability():
    assert (RTX5090.architecture, RTX5090.compute_capability) == ("Blackwell", "12.0")
    assert (B200.architecture, B200.compute_capability) == ("Blackwell", "10.0")


def test_rtx_5090_keeps_per_tensor_fp8_transposes_b200_does_not():
    """fp8-current on 1,000,000 linear weight elements: 1 B rowwise + 1 B transpose each on the
    RTX 5090 (2,000,000 B), the one 1-byte copy on the B200 (1,000,000 B). An activation's
    columnwise copy: 1 B an element on the 5090, none on the B200. MXFP8 keeps its columnwise
    copy (1 B + an e8m0 byte per 32) on both."""
    cur, mx = NARROW_RECIPES["fp8-current"], NARROW_RECIPES["mxfp8"]
    n = 1_000_000

    def weights(dev, recipe):
        return fp8_weight_bytes(recipe, n, dev.architecture, param_gather=False,
                                compute_capability=dev.compute_capability)[0]
    assert weights(RTX5090, cur) == 2_000_000
    assert weights(B200, cur) == 1_000_000
    assert keeps_columnwise(cur, "Blackwell", "12.0") and not keeps_columnwise(cur, "Blackwell",
                                                                                 "10.0")
    assert columnwise_bytes_per_element(cur, "Blackwell", "12.0") == 1.0
    assert columnwise_bytes_per_element(cur, "Blackwell", "10.0") == 0.0
    for dev in (RTX5090, B200):
        assert weights(dev, mx) == 2 * (n + n // 32)
        assert columnwise_bytes_per_element(mx, dev.architecture, dev.compute_capability) == \
            pytest.approx(1 + 1 / 32)


@pytest.mark.parametrize("recipe, cc, per", [
    ("fp8-current", "12.0", 2 + 2 + 1 + 1),  # 16-bit read, amax read, rowwise, transpose
    ("fp8-current", "10.0", 2 + 2 + 1),
    ("fp8-delayed", "12.0", 2 + 1 + 1),      # scale from the history: no amax pass
    ("fp8-delayed", "10.0", 2 + 1)])
def test_weight_cast_bytes_by_compute_capability(recipe, cc, per):
    assert weight_cast_bytes_per_element(NARROW_RECIPES[recipe], "Blackwell", cc) == per


_LLAMA8B_LINEAR = 32 * (4096 * 6144 + 4096 * 4096 + 3 * 4096 * 14336)


@pytest.mark.parametrize("gpu, per", [("RTX-PRO-6000-Blackwell", 2 + 2 + 1 + 1),
                                      ("B200-SXM-180GB", 2 + 2 + 1)])
def test_the_speed_model_reads_the_compute_capability(gpu, per):
    """Through estimate_speed: the one weight cast of a step of llama-3.1-8b under fp8-current
    writes the transpose on the RTX PRO 6000 Blackwell (compute capability 12.0), not on the
    B200 (10.0); its activation quantize writes a columnwise byte an element more on the RTX
    PRO (the quantize's bytes differ by exactly its element count)."""
    job = Job(model="llama-3.1-8b", mode="train", batch=1, seq=512, engine="megatron",
              precision="fp8-current", gpus=1, grad_accum=4)
    est = estimate_speed(load_model("llama-3.1-8b"), get_gpu(gpu), job, measured=None)
    casts = [t.op for t in est.step.ops if t.op.name == "fp8.weight_cast"]
    assert len(casts) == 1
    assert casts[0].bytes == pytest.approx(_LLAMA8B_LINEAR * per, rel=1e-12)
    quant = [t.op for t in est.step.ops if t.op.name == "fp8.quantize"]
    assert len(quant) == 1
    col = 1.0 if per == 6 else 0.0
    assert quant[0].bytes == pytest.approx(quant[0].flops * (2 + 2 + 1 + col), rel=1e-12)
