"""Issue 31 (awq): FasterTransformer's masked multi-head attention, the decode attention of
AutoAWQ's fused modules, timed by its thread blocks' chains of dependent loads
(compute/efficiency.py single_query_attention_trips / _s), by hand from the kernel's code
(AutoAWQ v0.1.6 awq_cuda/attention/decoder_masked_multihead_attention.cu and _template.hpp)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from gpuplan.compute import estimate_speed
from gpuplan.compute.device import device_from_gpu
from gpuplan.compute.efficiency import single_query_attention_s, single_query_attention_trips
from gpuplan.errors import InputError
from gpuplan.hardware import get_gpu
from gpuplan.job import Job
from gpuplan.models import load_model

# the RTX 4090's memory latency (gpus.json memory_latency: markdewing/AI_kernels 4090.dat,
# 635.8 cycles a dependent load) at its rated 2,520 MHz boost clock
_LAT_4090 = 635.8 / 2520e6


@pytest.mark.parametrize("head_dim, keys, trips", [
    # 128 threads (timestep below 2,048), 2 threads a key: 64 keys an iteration, ceil(1998/64)
    # = 32; values: 128 x 2 B / 16 B = 16 threads a timestep, 8 timesteps an iteration,
    # ceil(1998/8) = 250; + the new token's Q/K and V loads: 284
    (128, 1998, 32 + 250 + 2),
    # head dim 64: 8 threads a value, 16 timesteps an iteration, ceil(1998/16) = 125
    (64, 1998, 32 + 125 + 2),
    # 80 runs the 128 kernel (Dh_MAX 128): the same loop as 128
    (80, 1998, 284),
    # 32 keys: 128 threads, ceil(32/64) = 1, ceil(32/8) = 4
    (128, 32, 1 + 4 + 2),
    # below 32 keys: 64 threads, 4 a key: 16 keys an iteration (1); 64 / 16 = 4 timesteps an
    # iteration, ceil(16/4) = 4
    (128, 16, 1 + 4 + 2),
    # from 2,048 keys: 256 threads, 1 a key: ceil(3000/256) = 12; 256 / 16 = 16 timesteps an
    # iteration, ceil(3000/16) = 188
    (128, 3000, 12 + 188 + 2),
])
def test_round_trips_follow_the_kernels_loops(head_dim, keys, trips):
    assert single_query_attention_trips(head_dim, keys) == trips


def test_seconds_are_trips_times_latency_per_wave():
    # 32 heads x 1 sequence on 128 SMs: one wave; 284 x 252.3 ns = 71.65 us
    t = single_query_attention_s(32, 128, 1998, sm_count=128, max_threads_per_sm=1536,
                                 latency_s=_LAT_4090)
    assert t == pytest.approx(284 * _LAT_4090, rel=1e-12)
    assert t == pytest.approx(71.65e-6, rel=1e-3)
    # 128 threads a block, 1,536 a SM: 12 blocks resident; 128 x 12 = 1,536 blocks fill one
    # wave, one more block takes a second
    one = single_query_attention_s(1536, 128, 1998, sm_count=128, max_threads_per_sm=1536,
                                   latency_s=_LAT_4090)
    two = single_query_attention_s(1537, 128, 1998, sm_count=128, max_threads_per_sm=1536,
                                   latency_s=_LAT_4090)
    assert one == pytest.approx(t) and two == pytest.approx(2 * t)
    # no latency on record: nothing timed by the chain
    assert single_query_attention_s(32, 128, 1998, sm_count=128, max_threads_per_sm=1536,
                                    latency_s=0.0) == 0.0


def test_device_reads_the_catalogs_memory_latency():
    assert device_from_gpu(get_gpu("rtx-4090")).memory_latency_s == pytest.approx(252.3e-9,
                                                                                  rel=1e-3)
    assert device_from_gpu(get_gpu("a100-sxm-80gb")).memory_latency_s == 0.0


def _decode(gpu: str, kernel: str | None, context: int = 1998, batch: int = 1):
    m = load_model("mistral-7b")
    job = Job(model=m, mode="infer", infer_precision="awq-4bit", batch=batch, seq=2048,
              engine="transformers", context=context)
    return estimate_speed(m, get_gpu(gpu), job, decode_attention=kernel, measured=None)


def _op(est, name):
    (t,) = [o for o in est.step.ops if o.op.name == name]
    return t


def test_mistral_decode_attention_under_ft_is_latency_bound_at_batch_1():
    # Mistral 7B: 32 heads of 128 over 8 KV heads; at 1,998 keys its cache read is
    # 1998 x 2 x 8 x 128 x 2 B = 8.2 MB a layer, 8.1 us at 1,008 GB/s: the chain, 71.65 us,
    # times it
    ft, sdpa = _decode("rtx-4090", "ft-mmha"), _decode("rtx-4090", None)
    core = _op(ft, "attn.core")
    assert core.op.shape == (32, 1, 128, 1998)
    assert core.memory_s == pytest.approx(284 * _LAT_4090, rel=1e-12)
    assert _op(sdpa, "attn.core").memory_s < 10e-6
    # the kernel rotates Q and K itself: no rotary kernels beside it
    assert not [o for o in ft.step.ops if o.op.name == "attn.rotary"]
    assert [o for o in sdpa.step.ops if o.op.name == "attn.rotary"]
    assert any("FasterTransformer" in n for n in ft.notes)


def test_batch_8_is_bandwidth_bound_where_its_bytes_outlast_the_chain():
    # batch 8 x 32 heads = 256 blocks, one wave (12 resident a SM): the chain is still 71.65 us,
    # but the blocks together stream 8 x 1998 x 2 x 8 x 128 x 2 B = 65,470,464 B of cache, plus
    # the queries in and out (2 x 8 x 4096 x 2 B) and the new K and V (8 x 2 x 1024 x 2 B):
    # 65,634,304 B at 1,008 GB/s x 0.85 (memory_default) = 76.60 us, the longer
    est = _decode("rtx-4090", "ft-mmha", batch=8)
    core = _op(est, "attn.core")
    assert core.op.bytes == 65_470_464 + 131_072 + 32_768
    assert core.memory_s == pytest.approx(65_634_304 / (1008e9 * 0.85), rel=1e-9)
    assert core.memory_s > 284 * _LAT_4090


def test_without_a_latency_on_record_the_bytes_time_it():
    ft, sdpa = _decode("a100-sxm-80gb", "ft-mmha"), _decode("a100-sxm-80gb", None)
    assert _op(ft, "attn.core").memory_s == pytest.approx(_op(sdpa, "attn.core").memory_s)
    assert any("latency is not on record" in n for n in ft.notes)


def test_an_unknown_decode_attention_kernel_is_refused():
    with pytest.raises(InputError, match="decode_attention 'flash-decoding'"):
        _decode("rtx-4090", "flash-decoding")


def test_ft_decode_runs_one_fused_qkv_launch():
    # AutoAWQ's fuse_qkv: q, k and v concatenated into one WQLinear, one launch reading the
    # 4096-wide input once: Mistral's 4096 x (4096 + 2 x 1024) = 4096 x 6144 matrix either way
    ft, sdpa = _decode("rtx-4090", "ft-mmha"), _decode("rtx-4090", None)
    q_ft, q_sdpa = _op(ft, "attn.qkv"), _op(sdpa, "attn.qkv")
    assert q_sdpa.op.kernels == 3 and q_ft.op.kernels == 1
    assert q_ft.op.weight_elements == q_sdpa.op.weight_elements == 4096 * 6144
    assert q_sdpa.op.bytes - q_ft.op.bytes == 2 * 4096 * 2  # two input reads fewer


def _awq_ops(version: str) -> dict:
    m = load_model("mistral-7b")
    arch = replace(m.architecture, checkpoint_kernel=version)
    job = Job(model=m, mode="infer", infer_precision="awq-4bit", batch=8, seq=64,
              engine="transformers", context=32)
    est = estimate_speed(arch, get_gpu("rtx-4090"), job, measured=None)
    return {t.op.name: t for t in est.step.ops}


@pytest.mark.parametrize("version, sums", [("gemm", True), ("gemv", False)])
def test_awq_gemm_sums_its_eight_split_k_partials(version, sums):
    # AutoAWQ's WQLinear_GEMM: gemm_forward_cuda(..., 8) writes 8 partials of rows x out
    # features (16-bit) and returns _out_feats.sum(0): per launch one reduction kernel reading
    # the 8 partials and writing the output; the GEMV kernel writes its output itself
    names, gemv = _awq_ops(version), _awq_ops("gemv")
    if not sums:
        assert not [n for n in names if n.endswith(".splitk_sum")]
        return
    # the GEMM writes 8 partials where the GEMV writes 1: 7 x 8 rows x 6144 x 2 B more for QKV
    assert names["attn.qkv"].op.bytes - gemv["attn.qkv"].op.bytes == 7 * 8 * 6144 * 2
    for name, n_out, launches in (("attn.qkv", 6144, 3), ("attn.out", 4096, 1),
                                  ("mlp.gate_up", 2 * 14336, 2), ("mlp.down", 4096, 1)):
        s = names[f"{name}.splitk_sum"]
        assert s.op.kernels == launches and s.op.count == 32
        # 8 rows x n_out outputs: read 8 partials, write 1, 2 bytes each
        assert s.op.bytes == (8 + 1) * 8 * n_out * 2
        assert s.op.host_s == pytest.approx(4e-6)  # the dispatcher's cost, issued from C++
    # the head is a 16-bit nn.Linear: no partials
    assert "logits.head.splitk_sum" not in names
