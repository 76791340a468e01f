"""FP8 / MXFP8 / NVFP4 training recipes (issue 30): hand calculations of their memory and time."""

from __future__ import annotations

import pytest

from gpuplan.errors import InputError
from gpuplan.fp8 import NARROW_RECIPES, amax_history_bytes, fp8_weight_bytes
from gpuplan.job import Job
from gpuplan.memory import train_memory
from gpuplan.models import load_model


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
    eff = default_efficiency(dev)  # one matmul fraction for both dtypes
    m = k = n = 16384
    op = Op(name="mlp.up", op_class="matmul", kind="matmul", phase="forward", count=1,
            flops=2.0 * m * k * n, counted_flops=2.0 * m * k * n, bytes=2.0 * (m * k + k * n
            + m * n), parallel_work=m * n, kernels=1, weight_elements=k * n,
            shape=(1, m, k, n), group="dense")
    bf16 = time_ops([op], dev, eff, "bf16")[0].time_s
    fp8 = time_ops([op], dev, eff, "fp8")[0].time_s
    assert fp8 == pytest.approx(bf16 / 2, rel=0.02)  # 1978.9 vs 989.4 TFLOP/s dense
