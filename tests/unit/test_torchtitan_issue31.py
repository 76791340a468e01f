"""Issue 31 (titan): torchtitan's published runs' mechanisms, by hand. Meta's Grand Teton H100
(H100-SXM-96GB: 96 GB HBM2e at 2.4 TB/s, torchtitan's docs/performance.md @eaea6f6) times its
GEMMs as the GH100 SXM5 die it is; a checkpointed block under a narrow recipe casts its linears'
inputs again, and only those."""

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


def _linear(name: str, m: int, k: int, n: int, count: int = 32, group: str = "dense") -> Op:
    f = 2.0 * m * k * n
    return Op(name=name, op_class="mlp", kind="matmul", phase="forward", count=count, flops=f,
              counted_flops=f, bytes=float(2 * (m * k + k * n + m * n)), parallel_work=m * n,
              kernels=1, shape=(1, m, k, n), weight_elements=k * n, group=group)


def test_checkpointed_blocks_cast_their_inputs_again():
    # Llama 3.1 8B's four block linears at 16,384 tokens, 32 layers: inputs 16,384 x (4,096 x 3
    # + 14,336) = 16,384 x 26,624 elements a layer; the head (group "head") is not narrow
    from gpuplan.compute.step import narrow_recompute_op
    from gpuplan.fp8 import NARROW_RECIPES
    t = 16384
    fwd = (_linear("attn.qkv", t, 4096, 6144), _linear("attn.out", t, 4096, 4096),
           _linear("mlp.gate_up", t, 4096, 28672), _linear("mlp.down", t, 14336, 4096),
           _linear("logits.head", t, 4096, 128256, count=1, group="head"))
    r = NARROW_RECIPES["fp8-tensorwise"]
    inputs = 32 * t * (3 * 4096 + 14336)
    # full checkpointing: the whole cast again, its amax pass included: read 2 B for the amax,
    # read 2 B and write 1 B for the cast = 5 B an element
    full = narrow_recompute_op(fwd, r, "full", "op")
    assert full.flops == inputs and full.bytes == pytest.approx(5.0 * inputs)
    assert full.phase == "recompute" and full.kernels == 4 * 32
    # torchtitan's op policy: max(abs(x)) is on its save list, so only the cast re-runs: 3 B
    sel = narrow_recompute_op(fwd, r, "selective", "op")
    assert sel.bytes == pytest.approx(3.0 * inputs)
    # Megatron's attention-only selective recompute and no checkpointing re-run no linear input
    assert narrow_recompute_op(fwd, r, "selective", "attention") is None
    assert narrow_recompute_op(fwd, r, "none", "op") is None
