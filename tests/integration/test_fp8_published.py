"""benchmarks/validate_fp8.md is what benchmarks/validate_fp8.py writes today, and gpuplan's FP8
training speed meets issue 30's bars against the published runs (benchmarks/published/
fp8_runs.json) -- or the bar is a strict xfail carrying the figure measured now."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _module():
    path = ROOT / "benchmarks" / "validate_fp8.py"
    spec = importlib.util.spec_from_file_location("validate_fp8", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["validate_fp8"] = mod
    spec.loader.exec_module(mod)
    return mod


V = _module()
ROWS = V.rows()
S = V.summary(ROWS)


def test_md_is_current():
    assert V.OUT_MD.read_text() == V.render(ROWS), f"rerun: {V.COMMAND}"


def test_every_run_predicted_or_explained():
    assert len(ROWS) == 42
    for r in ROWS:
        assert (r.predicted is None) == bool(r.why_not), r.run["id"]
    # the DeepSeek-V3 figure is the report's 14.8T tokens over 2.664M H800 GPU-hours
    ds = next(r for r in ROWS if r.run["id"] == "deepseek-v3-h800-x2048-pretrain")
    assert ds.measured == pytest.approx(14.8e12 / (2.664e6 * 3600), rel=1e-3)


# measured now (issue 30's uneven pipelines and expert-TP folding, and the per-SKU best-shape
# matmul fractions of the MAMF table -- efficiency.MEASURED_MATMUL: 38 rows predicted, 4 listed):
# median 18.2%, worst 374.4% (Qwen3-30B-A3B on 16 H100: 4.74x optimistic -- the MoE rows' expert
# GEMMs and all-to-alls run far slower than gpuplan's defaults say; DeepSeek-V3 1.08-1.88x, B200
# 1.58-1.88x against GB200 1.08-1.19x; the folded Qwen3-235B H100 rows 0.67-0.68x; dense Llama
# rows: Hopper median 8.5% / worst 13.7%, Blackwell median 17.8% / worst 24.7%, all optimistic
# but two H100 70B rows at 0.91x)
@pytest.mark.xfail(strict=True, reason="median |error| 18.2% > 10% (dense Llama on Blackwell "
                   "median 17.8% optimistic, MoE rows 0.7-4.7x)")
def test_median_within_10_percent():
    assert S["median"] <= V.MEDIAN_BAR, S


@pytest.mark.xfail(strict=True, reason="worst |error| 374.4% > 20% (Qwen3-30B-A3B, 16 H100)")
def test_worst_within_20_percent():
    assert S["worst"] <= V.WORST_BAR, S


def test_the_uneven_and_folded_rows_are_predicted():
    """Issue 30: the Megatron-Bridge DeepSeek-V3 rows (uneven pipeline) and the Qwen3-235B H100
    rows (EP 32 over TP x DP with expert TP 1) are Jobs now; the one FP8/BF16 pair is predicted."""
    for r in ROWS:
        j = r.run["job"]
        if r.run["source_group"] == "megatron-bridge" and (
                r.run["model"]["catalog"] == "deepseek-v3" or j["ep"] and j["tp"] > 1
                and j["ep"] > r.run["hardware"]["count"] // (j["tp"] * j["pp"])):
            assert r.predicted is not None, (r.run["id"], r.why_not)
    assert S["speedup_checked"] == S["speedup_pairs"] == 1


def test_fp8_over_bf16_speedup_within_10_percent():
    """The one published pair (DeepSeek-V3 on GB200, 25.11): 1.157x predicted against 1.280x
    (9.6%; 1.141x, 10.9%, before GB200's FP8 and BF16 matmuls took their own measured shares)."""
    checked = [(m, p) for _, _, m, p in V.speedups(ROWS) if p is not None]
    assert checked and all(abs(p / m - 1) <= V.SPEEDUP_BAR for m, p in checked), checked
