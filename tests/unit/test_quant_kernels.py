"""Issue 30/31: the decode GEMV share of each quantized kernel (compute/efficiency.py
QUANT_KERNELS), by hand: a block GEMM's memory time is its bytes over the datasheet bandwidth times
the kernel's share, which the engine and the GPU's architecture pick."""
from __future__ import annotations

from dataclasses import replace

import pytest

from gpuplan.compute import estimate_speed
from gpuplan.compute.efficiency import QUANT_KERNELS, constant, quant_kernel
from gpuplan.errors import ModelFileError
from gpuplan.hardware import get_gpu
from gpuplan.job import Job
from gpuplan.models import architecture_from_config, load_model


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
        # batch 1: memory-bound; the weights at bandwidth x share (the share by hand), all the
        # bytes (split-K partials included) at no more than the streaming 0.85, the longer
        # (issues 29/31: compute/time.py _bandwidth)
        want = max(t.op.weight_bytes / (bw * share), t.op.bytes / (bw * 0.85))
        assert t.memory_s == pytest.approx(want, rel=1e-9)
        assert t.memory_s == pytest.approx(t.op.weight_bytes / (bw * share), rel=1e-9)


def test_the_16bit_head_keeps_the_16bit_share_under_a_4bit_kernel():
    est, _ = _decode("rtx-4090", "awq-4bit", "transformers")
    head = [o for o in est.step.ops if o.op.kind == "matmul" and o.op.group == "head"]
    assert head
    for t in head:
        assert t.memory_s == pytest.approx(t.op.weight_bytes / (1008e9 * 0.685), rel=1e-9)
        assert t.op.weight_bytes == t.op.weight_elements * 2  # 16-bit


def test_kernel_choice_is_data_with_sources():
    assert quant_kernel("vllm", "w4a16", "Ada Lovelace").name == "marlin"
    assert quant_kernel("auto", "awq-4bit", "Ampere").name == "autoawq-gemm"  # auto = transformers
    assert quant_kernel("transformers", "nf4", "Ampere") is None  # bitsandbytes: not modelled
    for k in QUANT_KERNELS:
        assert k.source and 0 < constant(k.constant) <= 1


# -- AutoAWQ's GEMV kernel (issue 31): the checkpoint's quantization_config version picks it ------

_LLAMA = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008,
          "num_hidden_layers": 2, "num_attention_heads": 32, "num_key_value_heads": 32,
          "vocab_size": 32000, "max_position_embeddings": 4096}


@pytest.mark.parametrize("qc, kernel", [
    ({"quant_method": "awq", "version": "GEMV"}, "gemv"),  # AutoAWQ writes it upper-case
    ({"quant_method": "awq", "version": "gemm"}, "gemm"),
    ({"quant_method": "awq", "format": "gemv_fast"}, "gemv_fast"),  # transformers 5's name
    ({"quant_method": "awq"}, "gemm"),  # AwqConfig's default
    ({"quant_method": "fp8"}, None),
    (None, None),
])
def test_the_config_reader_keeps_an_awq_checkpoints_kernel(qc, kernel):
    cfg = dict(_LLAMA, **({"quantization_config": qc} if qc else {}))
    assert architecture_from_config(cfg, name="t").checkpoint_kernel == kernel


def test_a_malformed_awq_version_is_an_error_naming_it():
    cfg = dict(_LLAMA, quantization_config={"quant_method": "awq", "version": 3})
    with pytest.raises(ModelFileError, match="version"):
        architecture_from_config(cfg, name="t")


def test_the_checkpoints_version_picks_the_kernel():
    assert quant_kernel("transformers", "awq-4bit", "Ada Lovelace", "gemv").name == "autoawq-gemv"
    assert quant_kernel("transformers", "awq-4bit", "Ada Lovelace", "gemm").name == "autoawq-gemm"
    assert quant_kernel("transformers", "awq-4bit", "Ada Lovelace").name == "autoawq-gemm"
    # gemv_fast has no entry: the width-based share; vLLM's Marlin repacks any AWQ checkpoint
    assert quant_kernel("transformers", "awq-4bit", "Ada Lovelace", "gemv_fast") is None
    assert quant_kernel("vllm", "awq-4bit", "Ampere", "gemv").name == "marlin"


def _awq_decode(batch, version, model="llama-3.1-8b", gpu="rtx-4090"):
    m = load_model(model)
    m = replace(m, architecture=replace(m.architecture, checkpoint_kernel=version))
    est = estimate_speed(m, get_gpu(gpu), Job(
        model=m, mode="infer", infer_precision="awq-4bit", batch=batch, seq=2048,
        engine="transformers"))
    return est, [o for o in est.step.ops if o.op.kind == "matmul" and o.op.weight_elements]


# the RTX 4090's L2 as measured (gpus.json l2_cache: smallscientist1/cuda_microbenchmark
# analysis_RTX4090.md): 3,645 GB/s over a 2 x 16 MiB footprint it keeps whole
_L2_RATE, _L2_KEEPS, _PACKED = 3645e9, 32 * 2**20, (4 + 20 / 128) / 8
# AutoAWQ's GEMV kernel's share: TinyChat's Llama-2-7B on an RTX 4090 with the same
# gemv_cuda.cu, 3.627 GB of weights at 195 tokens/s = 707 GB/s of 1,008 (gemv_bw_awq_gemv)
_GEMV = 0.702


def _read_s(t, bw, share, dram=0.0):
    """A weight matmul's DRAM time by hand (issues 29/31, compute/time.py _bandwidth): its
    weights (and their ``dram`` re-reads) at bandwidth x ``share``, all its bytes at no more
    than the streaming 0.85, the longer."""
    return max((t.op.weight_bytes + dram) / (bw * share), (t.op.bytes + dram) / (bw * 0.85))


@pytest.mark.parametrize("batch", [2, 8])
def test_gemv_rereads_come_from_the_l2_where_a_matrix_fits(batch):
    # AutoAWQ gemv_cuda.cu: grid z = the batch's rows, each reloading the whole packed matrix
    # one matrix after the row before it: row 1 from DRAM at 1,008 GB/s x 70.2%, rows 2.. from
    # the L2. Llama 3.1 8B's launches by hand: qkv 4096 x 6144 x 0.52 B = 13.1 MB, o 8.7 MB,
    # gate and up (two launches) 4096 x 14336 x 0.52 B = 30.5 MB each, down the same: all
    # under 32 MiB = 33.6 MB
    _, ops = _awq_decode(batch, "gemv")
    blocks = [t for t in ops if t.op.group not in ("head", "embedding")]
    assert {t.op.name for t in blocks} >= {"attn.qkv", "attn.out", "mlp.gate_up", "mlp.down"}
    for t in blocks:
        assert t.op.shape[0] * t.op.shape[1] == batch
        launch = {"attn.qkv": 4096 * 6144, "attn.out": 4096 * 4096,
                  "mlp.gate_up": 4096 * 14336, "mlp.down": 14336 * 4096}[t.op.name]
        assert launch * _PACKED <= _L2_KEEPS
        reread = (batch - 1) * t.op.weight_elements * _PACKED
        assert t.memory_s == pytest.approx(
            _read_s(t, 1008e9, _GEMV) + reread / _L2_RATE, rel=1e-9)
    # the 16-bit head is a cuBLAS GEMV at the 16-bit share, read once for the batch
    for t in ops:
        if t.op.group == "head":
            assert t.memory_s == pytest.approx(_read_s(t, 1008e9, 0.685), rel=1e-9)


def test_gemv_rereads_a_matrix_over_the_l2s_window_from_dram():
    # Llama 3.1 70B: gate and up are 8192 x 28672 x 0.52 B = 122 MB a launch, over 32 MiB:
    # every row from DRAM; its o projection, 8192 x 8192 x 0.52 B = 34.9 MB, is over too
    _, ops = _awq_decode(8, "gemv", model="llama-3.1-70b")
    assert {t.op.name for t in ops} >= {"mlp.gate_up", "mlp.down", "attn.out"}
    for t in ops:
        if t.op.name in ("mlp.gate_up", "mlp.down", "attn.out"):
            assert t.op.weight_elements / t.op.kernels * _PACKED > _L2_KEEPS
            reread = 7 * t.op.weight_elements * _PACKED
            assert t.memory_s == pytest.approx(_read_s(t, 1008e9, _GEMV, reread), rel=1e-9)


def test_gemv_rereads_from_dram_on_a_gpu_without_an_l2_measurement():
    # the A100's catalog record gives no l2_cache: every row from DRAM at 2,039 GB/s x 70.2%
    # (the 4090's share, applied to Ampere as an assumption)
    _, ops = _awq_decode(4, "gemv", gpu="a100-sxm-80gb")
    blocks = [t for t in ops if t.op.group not in ("head", "embedding")]
    assert blocks
    for t in blocks:
        reread = 3 * t.op.weight_elements * _PACKED
        assert t.memory_s == pytest.approx(_read_s(t, 2039e9, _GEMV, reread), rel=1e-9)


def test_gemv_at_batch_1_and_gemm_at_batch_8_read_the_weights_once():
    # batch 1: each kernel reads the packed weights once, the GEMV at its share (70.2%), the
    # GEMM at the 16-bit one (68.5%) with its 8 split-K partials written (7 more outputs)
    _, ops_v = _awq_decode(1, "gemv")
    _, ops_m = _awq_decode(1, "gemm")
    blocks_v = {t.op.name: t for t in ops_v if t.op.group not in ("head", "embedding")}
    blocks_m = {t.op.name: t for t in ops_m if t.op.group not in ("head", "embedding")}
    for name, t in blocks_v.items():
        assert t.memory_s == pytest.approx(_read_s(t, 1008e9, _GEMV), rel=1e-9)
        m = blocks_m[name]
        assert m.op.bytes - t.op.bytes == 7 * m.op.shape[3] * 2
        assert m.op.weight_bytes == t.op.weight_bytes
        assert m.memory_s == pytest.approx(_read_s(m, 1008e9, 0.685), rel=1e-9)
    _, ops8 = _awq_decode(8, "gemm")
    for t in ops8:
        if t.op.kind == "matmul":
            assert t.memory_s == pytest.approx(_read_s(t, 1008e9, 0.685), rel=1e-9)
    # above 8 rows WQLinear_GEMV runs gemmv2_forward_cuda (a split-K GEMM): once again, at the
    # GEMV entry's share (gemmv2 has no entry of its own)
    _, ops9 = _awq_decode(9, "gemv")
    for t in ops9:
        w = _GEMV if t.op.group not in ("head", "embedding") else 0.685
        assert t.memory_s == pytest.approx(_read_s(t, 1008e9, w), rel=1e-9)
