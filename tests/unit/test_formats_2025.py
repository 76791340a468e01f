"""The inference formats of issue 30 part 2: their bytes per weight by hand (values, block scales,
tensor scales), and the units each runs on per SKU -- FP4 tensor cores on Blackwell (and, for the OCP
MX formats, CDNA 4), a dequantizing 16-bit GEMM elsewhere -- through the speed model's op times."""

from __future__ import annotations

import pytest

from gpuplan.compute import estimate_speed
from gpuplan.compute.device import device_from_gpu
from gpuplan.compute.efficiency import constant
from gpuplan.compute.step import infer_precision
from gpuplan.errors import UnsupportedError
from gpuplan.formats import WEIGHT_FORMATS, get_weight_format, weights_bytes_in_format
from gpuplan.hardware import get_gpu
from gpuplan.job import Job
from gpuplan.models import load_model
from gpuplan.models._types import ParamTensor

OUT, IN = 4096, 4096
PROJ = ParamTensor(name="model.layers.0.mlp.up_proj.weight", shape=(OUT, IN), count=1,
                   component="mlp", module="up_proj", linear=True)


@pytest.mark.parametrize("name, nbytes, bits", [
    # e2m1 two per byte; one e4m3 byte per 16 inputs; one fp32 per tensor
    ("nvfp4", OUT * (IN // 2 + IN // 16) + 4, 4.5),
    # e2m1 two per byte; one e8m0 byte per 32 inputs
    ("mxfp4", OUT * (IN // 2 + IN // 32), 4.25),
    # e4m3 one byte each; one e8m0 byte per 32
    ("mxfp8", OUT * (IN + IN // 32), 8.25),
    # e4m3 + an fp32 scale per output channel
    ("fp8-channel", OUT * IN + 4 * OUT, 8 + 32 / IN),
    # e4m3 + one fp32 per 128 x 128 block (DeepSeek-V3)
    ("fp8-block", OUT * IN + 4 * (OUT // 128) * (IN // 128), 8 + 32 / 128**2),
    # int4 packed two per byte + a 16-bit scale per 128 inputs, symmetric (no zero point)
    ("w4a16", OUT * IN // 2 + 2 * OUT * (IN // 128), 4.125),
    ("w4a8", OUT * IN // 2 + 2 * OUT * (IN // 128), 4.125),
])
def test_bytes_per_weight_with_their_scales(name, nbytes, bits):
    fmt = get_weight_format(name)
    assert fmt.tensor_bytes(PROJ) == nbytes
    # the stated bits (used without shapes); fp8-channel states 8, its scale depends on the rows
    assert fmt.bits == pytest.approx(8.0 if name == "fp8-channel" else bits)
    # the tensor scale aside, the effective bits are the bytes per weight x 8
    assert (nbytes - (4 if name == "nvfp4" else 0)) * 8 / (OUT * IN) == pytest.approx(bits)


def test_formats_keep_embeddings_and_head_in_16_bit():
    head = ParamTensor(name="lm_head.weight", shape=(128256, 4096), count=1, component="head",
                       module="lm_head", linear=True)
    for name in ("nvfp4", "mxfp8", "fp8-channel", "w4a16", "w4a8"):
        assert get_weight_format(name).tensor_bytes(head) == 2 * 128256 * 4096


# gpt-oss-120b's MXFP4 checkpoint at its published 60.8 GiB: tests/unit/test_models_2025.py


def _infer(model, gpu, precision, *, batch=1, seq=2048):
    m = load_model(model)
    return estimate_speed(m, get_gpu(gpu), Job(model=m, mode="infer", infer_precision=precision,
                                               batch=batch, seq=seq, engine="vllm"))


def _block_gemms(phase):
    """The linear layers of the blocks (what the format converts): matmuls with weights, not the
    head or the embedding."""
    return [o for o in phase.ops if o.op.kind == "matmul" and o.op.weight_elements
            and o.op.group not in ("head", "embedding")]


def test_a_memory_bound_decode_reads_nvfp4_weights_at_4_5_bits():
    bf16, fp4 = _infer("llama-3.1-8b", "b200", "bf16"), _infer("llama-3.1-8b", "b200", "nvfp4")
    for a, b in zip(_block_gemms(bf16.step), _block_gemms(fp4.step)):
        assert a.op.name == b.op.name and b.memory_s > b.compute_s  # batch 1: memory-bound
        w = a.op.weight_elements * a.op.count
        # the weight bytes by hand: 2 bytes vs 4.5 bits, the rest (activations) the same
        assert a.op.bytes * a.op.count - b.op.bytes * b.op.count == pytest.approx(w * (2 - 4.5 / 8))
        # the bytes ~ 4.5/16 of bf16's (weights dominate at batch 1); the time also carries the
        # GEMV's bandwidth share at 4-bit vs 16-bit weights (gpt-fast's A100 table: 42.3% vs 68.5%)
        assert b.op.bytes / a.op.bytes == pytest.approx(4.5 / 16, rel=0.01)
        share = constant("gemv_bw_4bit") / constant("gemv_bw_16bit")
        # the weight stream sets a skinny matmul's time (compute/time.py _bandwidth): 4.5 / 16
        assert b.op.weight_bytes / a.op.weight_bytes == pytest.approx(4.5 / 16, rel=1e-12)
        assert b.memory_s / a.memory_s == pytest.approx(4.5 / 16 / share, rel=1e-9)


def test_an_fp4_prefill_on_b200_runs_twice_the_fp8_compute_rate():
    fp8 = _infer("llama-3.1-8b", "b200", "fp8", batch=8, seq=4096)
    fp4 = _infer("llama-3.1-8b", "b200", "nvfp4", batch=8, seq=4096)
    assert fp4.dtype == "fp4" and fp8.dtype == "fp8"
    pairs = list(zip(_block_gemms(fp8.prefill), _block_gemms(fp4.prefill)))
    assert pairs
    for a, b in pairs:
        assert a.dtype == "fp8" and b.dtype == "fp4"
        # B200: 9 PF vs 4.5 PF dense, at NVFP4's share (BF16's 1,745 / 2,250 x torchao #2427's
        # 0.611 / 0.646) over FP8's measured best shape (3,432.5 / 4,500), each at training
        # shapes (TE's GEMM profiling guide: BF16's and FP8's factors, test_fp8_recipes)
        ts_bf16 = (31.968 / 13.102) * (836 / 2250) / (0.776 / 0.803)
        ts_fp8 = (16.785 / 6.812) * (1670 / 4500) / (0.763 / 0.734)
        assert a.compute_s / b.compute_s == pytest.approx(
            2.0 * (1745.0 / 2250 * ts_bf16 * 0.946) / (3432.5 / 4500 * ts_fp8), rel=2e-3)
    # attention and the head stay bf16 in both
    assert {o.dtype for o in fp4.prefill.ops if o.op.kind == "attention"} == {"bf16"}


def test_mxfp4_on_h100_is_a_w4a16_gemm_at_the_bf16_rate():
    bf16 = _infer("llama-3.1-8b", "h100", "bf16", batch=8, seq=4096)
    mx = _infer("llama-3.1-8b", "h100", "mxfp4", batch=8, seq=4096)
    assert mx.dtype == "bf16"
    for a, b in zip(_block_gemms(bf16.prefill), _block_gemms(mx.prefill)):
        assert b.dtype == "bf16" and b.compute_s == pytest.approx(a.compute_s)
    assert any("mxfp4 weights are read at 4.25 bits and multiplied in bf16" in n for n in mx.notes)


@pytest.mark.parametrize("gpu, nvfp4, mxfp4, mxfp8", [
    ("B200-SXM-180GB", "fp4", "fp4", "fp8"),
    ("GB300-NVL72", "fp4", "fp4", "fp8"),
    ("MI355X", "bf16", "fp4", "fp8"),         # CDNA 4 has the OCP MX units, not NVFP4's e4m3/16
    ("H100-SXM-80GB", "bf16", "bf16", "bf16"),  # no block-scaled MMA: dequantizing GEMMs
    ("MI300X", "bf16", "bf16", "bf16"),
    ("A100-SXM-80GB", "bf16", "bf16", "bf16"),
])
def test_the_gemm_dtype_of_each_format_on_each_sku(gpu, nvfp4, mxfp4, mxfp8):
    d = device_from_gpu(get_gpu(gpu))
    got = tuple(infer_precision(f, d, False).dtype for f in ("nvfp4", "mxfp4", "mxfp8"))
    assert got == (nvfp4, mxfp4, mxfp8)
    # a checkpoint that ships MXFP4 weights only (gpt-oss: 16-bit activations) stays W4A16
    assert infer_precision("mxfp4", d, False, shipped="mxfp4").dtype == "bf16"
    assert infer_precision("w4a16", d, False).dtype == "bf16"


def test_w4a8_runs_at_the_fp8_rate_and_is_refused_without_fp8():
    h100 = device_from_gpu(get_gpu("h100"))
    lay = infer_precision("w4a8", h100, False)
    assert lay.dtype == "fp8" and lay.weight == pytest.approx(4.125 / 8)
    with pytest.raises(UnsupportedError, match="w4a16") as e:
        infer_precision("w4a8", device_from_gpu(get_gpu("a100")), False)
    # the request key of an inference format is infer_precision (web: "request keys and values")
    assert e.value.fix == {"infer_precision": "w4a16"} and e.value.field == "infer_precision"
    with pytest.raises(UnsupportedError, match=r"\(Ampere architecture\) has no FP8 tensor cores"):
        infer_precision("fp8", device_from_gpu(get_gpu("a100")), False)


def test_gpt_oss_on_b200_keeps_its_experts_w4a16():
    est = _infer("gpt-oss-20b", "b200", "mxfp4")
    assert est.dtype == "bf16"


def test_fp8_on_ampere_is_refused_except_as_vllms_w8a16():
    # vLLM docs (FP8 W8A8): "Turing/Ampere GPUs are supported for W8A16 (weight-only FP8)
    # utilizing Marlin kernels"; torch._scaled_mm (transformers' FP8 path) needs >= 8.9
    a100 = device_from_gpu(get_gpu("a100"))
    for name in ("fp8", "fp8-channel", "fp8-block"):
        with pytest.raises(UnsupportedError, match=f"^infer_precision {name}: A100-SXM-80GB "
                           r"\(Ampere architecture\) has no FP8 tensor cores.*engine vllm"):
            infer_precision(name, a100, False)
        lay = infer_precision(name, a100, False, engine="vllm")
        assert lay.dtype == "bf16" and lay.weight == pytest.approx(WEIGHT_FORMATS[name].bits / 8)
    with pytest.raises(UnsupportedError, match="w4a16"):  # no W4A8 without fp8, under any engine
        infer_precision("w4a8", a100, False, engine="vllm")
    est = _infer("llama-3.1-8b", "a100", "fp8")
    assert est.dtype == "bf16" and any("fp8 weights are read at 8.00 bits and multiplied in "
                                       "bf16" in n for n in est.notes)
