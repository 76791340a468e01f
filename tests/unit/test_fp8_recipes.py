"""FP8 / MXFP8 / NVFP4 training recipes (issue 30): hand calculations of their memory and time."""

from __future__ import annotations

import pytest

from gpuplan.errors import InputError
from gpuplan.fp8 import NARROW_RECIPES, amax_history_bytes, fp8_weight_bytes
from gpuplan.job import Job
from gpuplan.memory import train_memory
from gpuplan.models import load_model



# TE's GEMM profiling guide (docs/examples/gemm_profiling/gemm_profiling.rst @d0067d0d), the 12
# GEMMs of its 5B layer (19.17 TFLOP), kernel-only: B300 BF16 13.102 ms, FP8 current scaling
# 6.812 ms; H200 NVL 31.968 / 16.785 ms. Shares of the datasheet peaks (B300 2,250 / 4,500,
# H200 NVL 836 / 1,670 TFLOP/s) Blackwell over Hopper, over the MAMF best shapes' same ratio
# (B200 BF16 77.6% / Hopper 80.3%; FP8 76.3% / H200 73.4%)
TS_BF16 = (31.968 / 13.102) * (836 / 2250) / (0.776 / 0.803)
TS_FP8 = (16.785 / 6.812) * (1670 / 4500) / (0.763 / 0.734)

def _linear_elements(model) -> int:
    return sum(t.total for t in model.tensors if t.linear
               and t.component not in ("embeddings", "head"))


def test_70b_fp8_weight_copy_and_transpose_on_hopper():
    m = load_model("llama-3.1-70b")
    n = _linear_elements(m)
    # 80 layers x (q 8192^2 + k,v 2 x 8192 x 1024 + o 8192^2 + 3 x 8192 x 28672)
    assert n == 80 * (2 * 8192 * 8192 + 2 * 8192 * 1024 + 3 * 8192 * 28672)
    copies, dropped, _ = fp8_weight_bytes(NARROW_RECIPES["fp8-current"], n, "Hopper",
                                          param_gather=False)
    assert (copies, dropped) == (2 * n, 0)  # 1 byte FP8 + 1 byte transpose
    one, _, _ = fp8_weight_bytes(NARROW_RECIPES["fp8-current"], n, "Blackwell",
                                 param_gather=False)
    assert one == n
    mem = {p: train_memory(m, Job(model=m, mode="train", precision=p, engine="megatron"))
           for p in ("mixed-bf16", "fp8-current")}
    assert mem["fp8-current"].weights_bytes - mem["mixed-bf16"].weights_bytes == 2 * n


def test_param_gather_drops_the_bf16_copy_and_amax_history_bytes():
    n = 1000
    copies, dropped, _ = fp8_weight_bytes(NARROW_RECIPES["fp8-delayed"], n, "Hopper",
                                          param_gather=True)
    assert (copies, dropped) == (2 * n, 2 * n)
    # 560 linears (80 layers x 7), 3 tensors each, (1024 amaxes + scale + inverse) x fp32
    assert amax_history_bytes(NARROW_RECIPES["fp8-delayed"], 560) == 560 * 3 * 1026 * 4
    assert amax_history_bytes(NARROW_RECIPES["fp8-current"], 560) == 0
    # MXFP8: rowwise + columnwise copies, an e8m0 byte per 32 values each
    mx, _, _ = fp8_weight_bytes(NARROW_RECIPES["mxfp8"], 3200, "Blackwell", param_gather=False)
    assert mx == 2 * (3200 + 100)


def test_nvfp4_refused_on_h100_naming_b200():
    from gpuplan.compute import estimate_speed
    from gpuplan.hardware import get_gpu
    with pytest.raises(InputError, match="B200-SXM-180GB"):
        estimate_speed(load_model("llama-3.1-8b"), get_gpu("H100-SXM-80GB"),
                       Job(model="llama-3.1-8b", mode="train", precision="nvfp4",
                           engine="megatron"), measured=None)


def test_plain_fp8_is_the_engines_recipe_or_an_error():
    assert Job(model="gpt2", mode="train", precision="fp8", engine="megatron").precision \
        == "fp8-delayed"
    assert Job(model="gpt2", mode="train", precision="fp8", engine="torchtitan").precision \
        == "fp8-tensorwise"
    with pytest.raises(InputError, match="fp8-delayed, fp8-current"):
        Job(model="gpt2", mode="train", precision="fp8")
    with pytest.raises(InputError, match="does not run"):
        Job(model="gpt2", mode="train", precision="fp8-rowwise", engine="megatron")


def test_fp8_gemm_takes_half_the_bf16_time_when_compute_bound():
    from gpuplan.compute.device import default_efficiency, device_from_gpu
    from gpuplan.compute.flops import Op
    from gpuplan.compute.time import time_ops
    from gpuplan.hardware import get_gpu
    dev = device_from_gpu(get_gpu("H100-SXM-80GB"))
    eff = default_efficiency(dev)  # H100 SXM: BF16 at the default 0.80, FP8 at its own 0.709
    m = k = n = 16384
    op = Op(name="mlp.up", op_class="matmul", kind="matmul", phase="forward", count=1,
            flops=2.0 * m * k * n, counted_flops=2.0 * m * k * n, bytes=2.0 * (m * k + k * n
            + m * n), parallel_work=m * n, kernels=1, weight_elements=k * n,
            shape=(1, m, k, n), group="dense")
    bf16 = time_ops([op], dev, eff, "bf16")[0].time_s
    fp8 = time_ops([op], dev, eff, "fp8")[0].time_s
    # 1978.9 vs 989.4 TFLOP/s dense, at 1,402.6 / 1,979 = 70.9% against 80%: (989.4 / 1978.9) x
    # (0.80 / 0.709) = 0.564 of the BF16 time (the same tiles and waves for both)
    assert fp8 / bf16 == pytest.approx(989.4 / 1978.9 * 0.80 / 0.709, rel=0.002)


def test_blackwell_and_hopper_fp8_matmuls_take_their_measured_best_shape_shares():
    """The MAMF table's best-shape matmuls (ml-engineering @744d01e1): B200 SXM BF16 1,745.0 of
    2,250 and FP8 3,432.5 of 4,500 TFLOP/s; GB200 1,822.0 of 2,500 and 3,615.6 of 5,000; H100
    SXM FP8 1,402.6 of 1,979. Elsewhere (A100, H100 BF16) the 0.80 default stays. Blackwell's
    rows scaled to training shapes (TS_BF16, TS_FP8: TE's GEMM profiling guide, by hand)."""
    from gpuplan.compute.device import default_efficiency, device_from_gpu
    from gpuplan.compute.flops import Op
    from gpuplan.compute.time import time_ops
    from gpuplan.hardware import get_gpu

    def eff(name):
        return default_efficiency(device_from_gpu(get_gpu(name)))
    b200, gb200, h100 = eff("B200-SXM-180GB"), eff("GB200-NVL72"), eff("H100-SXM-80GB")
    assert b200.matmul_fraction("bf16") == pytest.approx(1745.0 / 2250 * TS_BF16, abs=5e-4)
    assert b200.matmul_fraction("fp8") == pytest.approx(3432.5 / 4500 * TS_FP8, abs=5e-4)
    assert gb200.matmul_fraction("bf16") == pytest.approx(1822.0 / 2500 * TS_BF16, abs=5e-4)
    assert gb200.matmul_fraction("fp8") == pytest.approx(3615.6 / 5000 * TS_FP8, abs=5e-4)
    assert h100.matmul_fraction("fp8") == pytest.approx(1402.6 / 1979, abs=5e-4)
    assert h100.matmul_fraction("bf16") == 0.80 == eff("A100-SXM-80GB").matmul_fraction("fp8")
    # no FP4 best-shape figure: NVFP4 takes the chip's BF16 share times NVFP4's over BF16's in
    # one B200 run (torchao PR #2427: 6144^3 0.611 / 0.646; H100 has no FP4 rate)
    assert b200.matmul_fraction("fp4") == pytest.approx(1745.0 / 2250 * TS_BF16 * 0.611 / 0.646,
                                                        abs=1e-3)
    assert gb200.matmul_fraction("fp4") == pytest.approx(1822.0 / 2500 * TS_BF16 * 0.611 / 0.646,
                                                         abs=1e-3)
    assert "fp4" not in h100.matmul_by_dtype
    assert "ml-engineering" in b200.basis["matmul_fp8"]
    # a compute-bound FP8 GEMM: GB200 over B200 by 5,000 x 0.723 / (4,500 x 0.763) = 1.053
    # (the measured best shapes' 3,615.6 / 3,432.5), not the peaks' 1.111
    m = k = n = 16384
    op = Op(name="mlp.up", op_class="matmul", kind="matmul", phase="forward", count=1,
            flops=2.0 * m * k * n, counted_flops=2.0 * m * k * n, bytes=2.0 * (m * k + k * n
            + m * n), parallel_work=m * n, kernels=1, weight_elements=k * n,
            shape=(1, m, k, n), group="dense")
    t = {g: time_ops([op], device_from_gpu(get_gpu(g)), e, "fp8")[0].time_s
         for g, e in (("B200-SXM-180GB", b200), ("GB200-NVL72", gb200))}
    assert t["B200-SXM-180GB"] / t["GB200-NVL72"] == pytest.approx(5000 * 0.723 / (4500 * 0.763),
                                                                   rel=1e-6)
    # and 2 x 16384^3 FLOPs at 4,500 TFLOP/s x 0.763 x TS_FP8 x the wave efficiency (16,384
    # tiles of 128 x 128 over 148 SMs: 111 waves, the last 0.7 full -> 16384 / (111 x 148))
    assert t["B200-SXM-180GB"] == pytest.approx(2 * 16384 ** 3 / (4500e12 * 0.763 * TS_FP8
                                                                  * 16384 / (111 * 148)), rel=1e-3)
