"""The memory validation table (benchmarks/validate_memory.py): recomputed here from runs.json and
gpuplan, never read from the .md; the issue's bars asserted on the holdout runs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import validate_memory as vm  # noqa: E402


@pytest.fixture(scope="module")
def rows():
    return vm.rows()


def test_every_memory_run_is_expressed_or_says_why(rows):
    runs = json.loads(vm.RUNS.read_text())["runs"]
    ids = {r["id"] for r in runs if r["kind"] in ("train_memory", "infer_memory")}
    assert {r.run["id"] for r in rows} == ids
    assert not set(vm.EXPRESSED) & set(vm.NOT_EXPRESSIBLE)
    assert all(r.predicted is not None or r.reason for r in rows)


def test_measured_units_are_read_as_published():
    # nvidia-smi's "MB" is MiB; torchtune's GiB; "GB" decimal
    assert vm.measured_bytes({"measured": {"value": 14949, "unit": "MB (MiB) nvidia-smi"}}) \
        == 14949 * 2**20
    assert vm.measured_bytes({"measured": {"value": 60.0, "unit": "GiB peak active"}}) == 60 * 2**30
    assert vm.measured_bytes({"measured": {"value": 44.8, "unit": "GB peak per GPU"}}) == 44_800_000_000


def test_holdout_memory_meets_the_issue_bars(rows):
    s = vm.summary(rows, "holdout")
    assert s["expressed"] >= 1
    assert s["median_abs_error"] <= 0.04
    assert s["training_short_over_5pct"] == []


def test_holdout_covers_most_memory_runs(rows):
    s = vm.summary(rows, "holdout")
    assert s["expressed"] >= s["listed"] // 2


def test_calibrate_summary_is_reported_separately(rows):
    s = vm.summary(rows, "calibrate")
    assert s["split"] == "calibrate" and s["expressed"] >= 10
    assert s["worst_abs_error"] < 0.10


def test_the_written_table_is_current(rows):
    text = (ROOT / "benchmarks" / "validate_memory.md").read_text(encoding="utf-8")
    assert vm.report(rows) in text
