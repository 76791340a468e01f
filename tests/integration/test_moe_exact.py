"""The analytic MoE peak (overhead excluded, as test_trace_agreement does) within 3% of the
trace of transformers' own Mixtral / Qwen2-MoE code under FakeTensorMode, training and
inference (the wider grid: benchmarks/moe_agreement.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from moe_agreement import compare, config  # noqa: E402

CASES = [
    ("mixtral", (256, 8, 2), "train", 4, 512, "mixed-bf16", "none"),
    ("mixtral", (256, 8, 2), "train", 4, 512, "mixed-bf16", "full"),
    ("mixtral", (256, 4, 1), "train", 4, 512, "amp-bf16", "selective"),
    ("mixtral", (256, 8, 2), "infer", 4, 512, "bf16", "none"),
    ("mixtral", (384, 16, 4), "infer", 1, 2048, "bf16", "none"),
    ("qwen2_moe", (256, 8, 2), "train", 4, 512, "mixed-bf16", "none"),
    ("qwen2_moe", (256, 4, 1), "train", 4, 512, "mixed-bf16", "full"),
    ("qwen2_moe", (256, 8, 2), "train", 4, 512, "bf16", "none"),
    ("qwen2_moe", (256, 8, 2), "infer", 4, 512, "bf16", "none"),
    ("qwen2_moe", (256, 8, 2), "infer", 1, 2048, "bf16", "none"),
    ("qwen2_moe", (384, 16, 4), "infer", 8, 128, "bf16", "none"),
]


@pytest.mark.parametrize("fam,shape,mode,b,s,prec,ck", CASES,
                         ids=[f"{c[0]}-{c[1][1]}e-top{c[1][2]}-{c[2]}-{c[5]}-{c[6]}-{c[3]}x{c[4]}"
                              for c in CASES])
def test_moe_peak_agrees_with_trace(fam, shape, mode, b, s, prec, ck):
    traced, analytic = compare(config(fam, *shape), mode, b, s, prec, ck)
    assert abs(analytic - traced) <= 0.03 * traced, (traced, analytic,
                                                     f"{(analytic - traced) / traced:+.2%}")
