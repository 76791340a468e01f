"""gpuplan capacity against published serving measurements (issue 29's "must hold": TTFT, ITL and
throughput within a 15% median error), from benchmarks/published/serving_runs.json through
benchmarks/validate_capacity.py. The table in the repository must be the one this code computes;
the bar is asserted where it is met and held as a strict xfail, with the measured median, where it
is not. Nothing in the simulation was fitted to these rows."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import validate_capacity as vc  # noqa: E402


@pytest.fixture(scope="module")
def rows():
    return vc.rows()


def test_every_row_is_predicted(rows):
    runs = json.loads(vc.RUNS.read_text())["runs"]
    assert len(rows) == len(runs) >= 20
    for r in rows:
        assert not r.why_not, (r.run["id"], r.why_not)
        for key, _ in vc.FIGURES:
            assert r.predicted[key] > 0
    # more than one independent source
    assert len({r.run["source_group"] for r in rows}) >= 2


def test_rows_cite_their_source():
    for run in json.loads(vc.RUNS.read_text())["runs"]:
        src = run["source"]
        assert src.get("url", "").startswith("https://"), run["id"]
        assert src.get("commit") or src.get("date"), run["id"]
        for key in ("engine", "model", "gpu", "tp", "precision", "input_len", "output_len"):
            assert run[key] is not None, (run["id"], key)
        # the figure as the source printed it
        for fig in run["measured"].values():
            assert float(fig["as_published"]) == fig["value"], run["id"]


def test_table_in_the_repository_is_current(rows):
    assert vc.OUT_MD.read_text() == vc.render(rows), \
        f"benchmarks/validate_capacity.md is stale: run `{vc.COMMAND}`"


def test_summary_by_hand(rows):
    for key, _ in vc.FIGURES:
        errs = sorted(abs(r.predicted[key] / r.run["measured"][key]["value"] - 1) for r in rows
                      if key in r.run["measured"])
        assert vc.summary(rows, key)["median_abs_error"] == pytest.approx(
            statistics.median(errs))
        assert vc.summary(rows, key)["worst_abs_error"] == pytest.approx(errs[-1])


def test_throughput_meets_the_bar(rows):
    # reached: 3.9% median over the 85 rows (benchmarks/validate_capacity.md)
    assert vc.summary(rows, "output_tokens_per_s")["median_abs_error"] <= vc.BAR


def test_errors_reached(rows):
    # what the model reads today, so a change that moves it is seen (validate_capacity.md):
    # TTFT 18.3% (85 rows), ITL 19.8% (80 rows), output tok/s 3.9% (85 rows) median |error|
    # (ITL 19.4% -> 19.8%: H100's FP8 GEMMs at their measured best-shape share 0.709, the NIM fp8 rows)
    assert vc.summary(rows, "ttft_ms")["median_abs_error"] == pytest.approx(0.183, abs=0.005)
    assert vc.summary(rows, "itl_ms")["median_abs_error"] == pytest.approx(0.198, abs=0.005)
    assert vc.summary(rows, "output_tokens_per_s")["median_abs_error"] == pytest.approx(
        0.039, abs=0.005)


@pytest.mark.xfail(strict=True, reason="issue 29's bar not met for TTFT: median |error| 18.3% "
                   "over 85 rows (TensorRT-LLM online table 14.4% once its 8.3 ms per-request cost is counted; "
                   "NIM 84.0%, its KV pool read at half "
                   "the served one's; vLLM on a 4090 48.9%)")
def test_ttft_meets_the_bar(rows):
    assert vc.summary(rows, "ttft_ms")["median_abs_error"] <= vc.BAR


@pytest.mark.xfail(strict=True, reason="issue 29's bar not met for ITL: median |error| 19.8% "
                   "over 80 rows (TensorRT-LLM online table 18.7%, NIM 24.0%)")
def test_itl_meets_the_bar(rows):
    assert vc.summary(rows, "itl_ms")["median_abs_error"] <= vc.BAR
