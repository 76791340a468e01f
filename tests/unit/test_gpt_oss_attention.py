"""gpt-oss's attention as each engine runs it (models/_types.py FUSED_ATTENTION): eager with
materialized scores under transformers' model code, fused (its 128-token window's key blocks
skipped, the sinks inside the kernel or rescaled after it) under the serving engines,
torchtitan and Megatron. The figures are counted by hand from the shapes of gpt-oss-20b's
config (64 query heads of 64, 24 layers, every even layer windowed at 128 keys)."""

from __future__ import annotations

import pytest

from gpuplan.compute import estimate_speed
from gpuplan.compute.flops import FLASH_BLOCK, StepShape, build_forward_ops, run_form
from gpuplan.hardware import get_gpu
from gpuplan.job import Job
from gpuplan.memory import infer_memory
from gpuplan.models import load_model
from gpuplan.models._types import attention_for

S = 8192  # prompt tokens: 64 FlashAttention key blocks of 128


@pytest.fixture(scope="module")
def oss():
    return load_model("gpt-oss-20b")


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trt-llm", "torchtitan", "megatron"])
def test_engines_with_their_own_sink_kernels_run_gpt_oss_fused(engine):
    assert attention_for("gpt_oss", "sdpa", engine) == "sdpa"
    assert attention_for("gpt_oss", "eager", engine) == "eager"  # the job's own choice stays
    assert attention_for("bloom", "sdpa", engine) == "eager"  # ALiBi's rule is unchanged


@pytest.mark.parametrize("engine", [None, "auto", "transformers", "deepspeed", "fsdp2",
                                    "torchtune", "gpt-fast"])
def test_transformers_model_code_runs_gpt_oss_eager(engine):
    # transformers 5.25: _supports_sdpa False, an unset implementation falls back to eager
    assert attention_for("gpt_oss", "sdpa", engine) == "eager"
    assert attention_for("llama", "sdpa", engine) == "sdpa"


def _ops(arch, engine: str, attention: str) -> dict:
    ops = build_forward_ops(arch, StepShape(batch=1, q_len=S, kv_len=S), act_bytes=2,
                            weight_bytes=2, attention=attention,
                            form=run_form(arch, engine, decode=False))
    return {(o.group, o.name): o for o in ops}


def test_vllm_times_the_window_layers_over_their_128_keys(oss):
    a = oss.architecture
    assert a.sliding_window == 128 and len(a.sliding_window_layers) == a.num_layers // 2
    ops = _ops(a, "vllm", "sdpa")
    H, d, b, m = a.num_heads, a.head_dim, FLASH_BLOCK, S // FLASH_BLOCK
    rows = H * S
    # full layer: query block i computes key blocks 0..i -> b^2 * m(m+1)/2 elements a head
    full = b * b * m * (m + 1) // 2
    # a 128-key window reaches one block back: block 0 computes one, every later block two
    window = b * b * (1 + 2 * (m - 1))
    # 4 FLOPs a score element and head dim (QK^T and PV); the sink: one more softmax element
    # (5 FLOPs: compute/flops.py _SOFTMAX_FLOPS) a query row, inside the kernel
    assert ops[("moe", "attn.core")].flops == pytest.approx(4 * H * d * full + 5 * rows)
    assert ops[("sliding-window moe", "attn.core")].flops == pytest.approx(
        4 * H * d * window + 5 * rows)
    assert not any(name == "attn.sinks" for _, name in ops)  # no kernel of its own


def test_torchtitan_rescales_the_output_by_the_sinks(oss):
    a = oss.architecture
    sinks = _ops(a, "torchtitan", "sdpa")[("moe", "attn.sinks")]
    out = a.num_heads * S * a.head_dim
    # out * sigmoid(lse - sinks): the bf16 output read and written, the fp32 LSE read
    assert sinks.bytes == 2 * 2 * out + 4 * a.num_heads * S


def test_transformers_concatenates_the_sinks_to_the_materialized_scores(oss):
    a = oss.architecture
    ops = _ops(a, "transformers", "eager")
    n = a.num_heads * S * (S + 1)  # the scores with the sink column, per layer
    # torch.cat and the slice after the softmax: each reads and writes the bf16 scores
    assert ops[("moe", "attn.sinks")].bytes == 4 * n * 2
    assert ops[("sliding-window moe", "attn.sinks")].bytes == 4 * n * 2  # eager masks, not skips


def test_vllm_prefill_is_faster_and_says_fused(oss):
    gpu = get_gpu("h100")
    job = Job(model="gpt-oss-20b", mode="infer", batch=1, seq=S)
    fused = estimate_speed(oss, gpu, job.with_(engine="vllm"))
    eager = estimate_speed(oss, gpu, job.with_(engine="transformers"))
    assert any("attention: fused" in n for n in fused.notes)
    assert any("attention: eager" in n for n in eager.notes)
    # eager computes the whole 8192^2 square on every layer; fused skips above the diagonal
    # and, on half the layers, everything past the window
    assert fused.ttft_s < 0.5 * eager.ttft_s


def test_vllm_prefill_holds_no_score_matrix(oss):
    job = Job(model="gpt-oss-20b", mode="infer", batch=1, seq=2048)
    eager = infer_memory(oss, job.with_(engine="transformers"))
    fused = infer_memory(oss, job.with_(engine="vllm"))
    # eager's peak holds at least one layer's (heads, s, s + 1) bf16 scores with the sinks
    scores = 64 * 2048 * 2049 * 2
    assert eager.activations_bytes - fused.activations_bytes >= scores
