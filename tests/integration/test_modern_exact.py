"""Issue 28's families, op by op: the analytic peak (overhead excluded) within 3% of the trace
of transformers' own code under FakeTensorMode on small configs of each family's shape rules
(benchmarks/modern_agreement.py; the cases still outside 3% are listed in
benchmarks/modern_agreement.md and are not asserted here). The prefill cases of the families
with sliding or chunked layers (gemma3_text, gpt_oss, llama4_text) run at two shapes: one whose
peak is a layer's MLP/experts and one (gpt_oss 1 x 512) whose peak is eager attention's
scores beside the sinks' softmax."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from modern_agreement import compare  # noqa: E402

CASES = [
    ("qwen3", "train"), ("qwen3", "infer"), ("qwen3_moe", "train"), ("qwen3_moe", "infer"),
    ("gemma3_text", "train"), ("glm4_moe", "train"), ("glm4_moe", "infer"),
    ("llama4_text", "train"), ("deepseek_v3", "train"), ("deepseek_v3", "infer"),
    ("gpt_oss", "train"),
    ("gemma3_text", "infer"), ("gpt_oss", "infer"), ("llama4_text", "infer"),
    ("deepseek_v2", "train"), ("deepseek_v2", "infer"),
    ("deepseek_v2:lite", "train"), ("deepseek_v2:lite", "infer"),
    # Nemotron (relu2, LayerNorm1P, half-rotary): train within 2%; prefill is 5.0% under the
    # trace at 2 x 256 (-5.5% at 1 x 512), as much with relu as with relu2 -- open, not asserted
    ("nemotron", "train"),
    # OLMo 2 (post-norm, QK-norm over the whole projections, fp32 rotary tables)
    ("olmo2", "train"), ("olmo2", "infer"),
]
SHAPES = [(fam, mode, 2, 256) for fam, mode in CASES] + [
    ("gemma3_text", "infer", 1, 512), ("gpt_oss", "infer", 1, 512),
    ("llama4_text", "infer", 3, 192),
    # one sequence of 512: OLMo 2's fp32 (cos, sin) of (1, s, head_dim) were -2.18% of the
    # prefill peak when counted in the model dtype (-0.18% in fp32)
    ("olmo2", "infer", 1, 512),
]


@pytest.mark.parametrize("fam,mode,batch,seq", SHAPES,
                         ids=[f"{f}-{m}-{b}x{s}" for f, m, b, s in SHAPES])
def test_modern_peak_agrees_with_trace(fam, mode, batch, seq, tmp_path):
    prec = "amp-bf16" if mode == "train" else "bf16"
    traced, analytic = compare(fam, mode, batch, seq, prec, workdir=str(tmp_path))
    assert abs(analytic - traced) <= 0.03 * traced, (traced, analytic,
                                                     f"{(analytic - traced) / traced:+.2%}")


#: Dense MLA (no MoE layer), issue 28 item 1: held to 1% (train with amp-bf16 and pure bf16,
#: prefill) at shapes that move b and s apart, with and without q_lora_rank, the value's head
#: size below and above the query's (CUDA's memory-efficient kernel) and equal to it (flash).
#: Before the kernel and the rotary table were modelled: +1.0% to +5.4% (benchmarks/
#: modern_agreement.md).
DENSE_MLA = [(fam, mode, prec, b, s)
             for fam in ("deepseek_v3:dense", "deepseek_v3:dense_q", "deepseek_v3:dense_flash",
                         "deepseek_v2:dense")
             for mode, prec in (("train", "amp-bf16"), ("train", "bf16"), ("infer", "bf16"))
             for b, s in ((1, 512), (2, 256), (1, 1024))]


@pytest.mark.parametrize("fam,mode,prec,batch,seq", DENSE_MLA,
                         ids=[f"{f}-{m}-{p}-{b}x{s}" for f, m, p, b, s in DENSE_MLA])
def test_dense_mla_within_one_percent(fam, mode, prec, batch, seq, tmp_path):
    traced, analytic = compare(fam, mode, batch, seq, prec, workdir=str(tmp_path))
    assert abs(analytic - traced) <= 0.01 * traced, (traced, analytic,
                                                     f"{(analytic - traced) / traced:+.2%}")
