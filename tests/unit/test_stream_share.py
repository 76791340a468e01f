"""The H200 SXM's streaming share (compute/device.py ``stream_share``): the default 0.85 stays the
H100 SXM's, and a same-die sibling measured by the same harness reads the default times its
measured share over the H100's. Azure's BabelStream tables (Azure/AI-benchmarking-guide
@8fd0c6e1, ND H100 v5 / ND H200 v5): Copy 2.90 TB/s of 3.35 and 4.01 of 4.8. The figures
below are worked by hand from those two tables and the datasheets, not read back from the code.
"""

from __future__ import annotations

import pytest

from gpuplan.compute import default_efficiency, device_from_gpu, time_ops
from gpuplan.compute.device import MEASURED_STREAM, STREAM_ANCHOR, stream_share
from gpuplan.compute.flops import Op
from gpuplan.hardware import get_gpu

# (4.01 / 4.8) / (2.90 / 3.35) = 0.835417 / 0.865672 = 0.965050
H200_RATIO = 0.965050
H200_STREAM = 0.85 * H200_RATIO  # 0.820293
H200_GEMV = 0.685 * H200_RATIO  # 0.661059


def _decode_linear(k: int, n: int) -> Op:
    """One decode row through a K x N bf16 weight (as flops._mm builds it)."""
    return Op(name="mlp.down", op_class="mlp", kind="matmul", phase="forward", count=1,
              flops=2.0 * k * n, counted_flops=2.0 * k * n,
              bytes=2 * k + 2 * k * n + 2 * n, parallel_work=n, kernels=1,
              weight_elements=k * n, shape=(1, 1, k, n), weight_bytes=2 * k * n)


def test_h200_share_is_the_default_times_the_measured_ratio():
    share, basis = stream_share("H200-SXM-141GB", 4.8e12)
    assert share == pytest.approx(H200_STREAM, abs=5e-6)
    assert share == pytest.approx(0.8203, abs=5e-5)
    assert "Azure/AI-benchmarking-guide@8fd0c6e1" in basis and "Copy 4.01" in basis


def test_anchor_and_unmeasured_skus_keep_the_default():
    assert stream_share(STREAM_ANCHOR, 3.35e12) is None
    for name in ("H100-SXM-80GB", "H200-NVL-141GB", "A100-SXM-80GB"):
        eff = default_efficiency(device_from_gpu(get_gpu(name)))
        assert eff.memory == 0.85, name
    eff = default_efficiency(device_from_gpu(get_gpu("H200-SXM-141GB")))
    assert eff.memory == pytest.approx(H200_STREAM, abs=5e-6)
    assert eff.basis["memory"].startswith("default: 0.820 of the datasheet")


def test_measured_skus_are_the_anchors_same_die_siblings():
    """The ratio stands for the HBM alone only where the die, its SMs and clocks are the same."""
    anchor = get_gpu(STREAM_ANCHOR)
    for name in MEASURED_STREAM:
        gpu = get_gpu(name)
        assert (gpu.architecture, gpu.sm_count, gpu.peak_flops["bf16"]) == \
            (anchor.architecture, anchor.sm_count, anchor.peak_flops["bf16"]), name


def test_h200_decode_weights_stream_at_the_scaled_gemv_share():
    """llama-3.1-8b's down projection at one row: 4096 x 14336 x 2 B = 117,440,512 B of weights,
    read at 4.8 TB/s x 0.661059 = 3.1731 TB/s in 37.012 us (at 0.685 it was 35.717 us); the
    H100's is unchanged at 3.35 TB/s x 0.685 = 2.2948 TB/s, 51.177 us."""
    k, n = 4096, 14336
    op = _decode_linear(k, n)
    (h200,) = time_ops([op], (d := device_from_gpu(get_gpu("H200-SXM-141GB"))),
                       default_efficiency(d), "bf16")
    assert h200.memory_s == pytest.approx(117_440_512 / (4.8e12 * H200_GEMV), rel=1e-5)
    assert h200.memory_s == pytest.approx(37.012e-6, rel=1e-4)
    (h100,) = time_ops([op], (d := device_from_gpu(get_gpu("H100-SXM-80GB"))),
                       default_efficiency(d), "bf16")
    assert h100.memory_s == pytest.approx(51.177e-6, rel=1e-4)
