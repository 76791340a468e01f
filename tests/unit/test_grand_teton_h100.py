"""Meta's Grand Teton H100 (H100-SXM-96GB: 96 GB HBM2e at 2.4 TB/s, torchtitan's
docs/performance.md @eaea6f6) times its GEMMs as the GH100 SXM5 die it is (issue 31, titan)."""

import pytest

from gpuplan.compute.device import default_efficiency, device_from_gpu
from gpuplan.compute.efficiency import gemm_wave_efficiency
from gpuplan.compute.flops import Op
from gpuplan.compute.time import time_ops
from gpuplan.hardware import get_gpu


def _gemm(m: int, k: int, n: int) -> Op:
    f = 2.0 * m * k * n
    return Op(name="mlp.up", op_class="mlp", kind="matmul", phase="forward", count=1, flops=f,
              counted_flops=f, bytes=float(m * k + k * n + 2 * m * n), parallel_work=m * n,
              kernels=1, shape=(1, m, k, n), weight_elements=k * n)


def test_fp8_share_is_the_h100_sxm_measured_one():
    # the MAMF table (stas00/ml-engineering @744d01e1): H100 SXM FP8 1,402.6 of 1,979 TFLOP/s
    d = device_from_gpu(get_gpu("H100-SXM-96GB"))
    assert default_efficiency(d).matmul_by_dtype["fp8"] == pytest.approx(1402.6 / 1979, abs=5e-4)
    # its BF16 share stays the default best-shape 0.80 (the MAMF BF16 row, 80.3%)
    assert default_efficiency(d).matmul_fraction("bf16") == pytest.approx(0.80)


def test_fp8_gemm_times_as_on_the_h100_sxm5():
    # a compute-bound FP8 GEMM of Llama 3.1 8B's MLP at 16,384 tokens: 2 M K N FLOPs at the FP8
    # dense peak (1,978.9 TFLOP/s) x 0.709 x the wave share -- the same on both SXM SKUs
    m, k, n = 16384, 4096, 14336
    w = gemm_wave_efficiency(1, m, n, 132, k)
    hand = 2.0 * m * k * n / (1978.9e12 * 0.709 * w)
    times = []
    for name in ("H100-SXM-96GB", "H100-SXM-80GB"):
        d = device_from_gpu(get_gpu(name))
        t = time_ops([_gemm(m, k, n)], d, default_efficiency(d), "fp8")[0]
        times.append(t.time_s)
    assert times[0] == pytest.approx(hand, rel=2e-3)
    assert times[0] == pytest.approx(times[1], rel=1e-9)
