"""Issue 30/31: the decode GEMV share of each quantized kernel (compute/efficiency.py
QUANT_KERNELS), by hand: a block GEMM's memory time is its bytes over the datasheet bandwidth times
the kernel's share, which the engine and the GPU's architecture pick."""
from __future__ import annotations

import pytest

from gpuplan.compute import estimate_speed
from gpuplan.compute.efficiency import QUANT_KERNELS, constant, quant_kernel
from gpuplan.hardware import get_gpu
from gpuplan.job import Job
from gpuplan.models import load_model


def _decode(gpu, precision, engine):
    m = load_model("llama-3.1-8b")
    est = estimate_speed(m, get_gpu(gpu), Job(model=m, mode="infer", infer_precision=precision,
                                              batch=1, seq=2048, engine=engine))
    gemms = [o for o in est.step.ops if o.op.kind == "matmul" and o.op.weight_elements
             and o.op.group not in ("head", "embedding")]
    assert gemms
    return est, gemms


@pytest.mark.parametrize("gpu, bw, engine, fmt, share", [
    # RTX 4090: 1,008 GB/s (catalog); AutoAWQ's GEMM kernel under transformers at the 16-bit share
    ("rtx-4090", 1008e9, "transformers", "awq-4bit", 0.685),
    # A100-80GB: 2,039 GB/s; vLLM's awq_marlin / gptq_marlin on Ampere
    ("a100-sxm-80gb", 2039e9, "vllm", "awq-4bit", 0.685),
    ("a100-sxm-80gb", 2039e9, "vllm", "gptq-4bit", 0.685),
    # no kernel entry: gpt-fast's own int4 share (42.3%), and Marlin is not chosen on Hopper
    ("a100-sxm-80gb", 2039e9, "gpt-fast", "awq-4bit", 0.423),
    ("h100-sxm-80gb", 3350e9, "vllm", "awq-4bit", 0.423),
])
def test_block_gemm_memory_time_is_bytes_over_the_kernels_share(gpu, bw, engine, fmt, share):
    est, gemms = _decode(gpu, fmt, engine)
    for t in gemms:
        # batch 1: memory-bound; time = bytes / (bandwidth x share), the share by hand
        assert t.memory_s == pytest.approx(t.op.bytes / (bw * share), rel=1e-9)


def test_the_16bit_head_keeps_the_16bit_share_under_a_4bit_kernel():
    est, _ = _decode("rtx-4090", "awq-4bit", "transformers")
    head = [o for o in est.step.ops if o.op.kind == "matmul" and o.op.group == "head"]
    assert head
    for t in head:
        assert t.memory_s == pytest.approx(t.op.bytes / (1008e9 * 0.685), rel=1e-9)


def test_kernel_choice_is_data_with_sources():
    assert quant_kernel("vllm", "w4a16", "Ada Lovelace").name == "marlin"
    assert quant_kernel("auto", "awq-4bit", "Ampere").name == "autoawq-gemm"  # auto = transformers
    assert quant_kernel("transformers", "nf4", "Ampere") is None  # bitsandbytes: not modelled
    for k in QUANT_KERNELS:
        assert k.source and 0 < constant(k.constant) <= 1
