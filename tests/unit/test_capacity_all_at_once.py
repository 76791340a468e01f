"""What an "INF" serving row's own means say about its workload (validate_capacity.all_at_once),
checked by hand on TensorRT-LLM's online table (perf-overview.md @258c7540, 0.14.0, 500 requests).

Every request is sent at t=0, so the makespan is requests x output / (output tok/s), a request's
mean latency TTFT + (output - 1) x ITL, and Little's law gives (output tok/s) x ITL requests
decoding at once. With fixed lengths each request ends close to the last one (ratio near 1)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import validate_capacity as vc  # noqa: E402


def _run(run_id: str) -> dict:
    runs = json.loads(vc.RUNS.read_text())["runs"]
    return next(r for r in runs if r["id"] == run_id)


def test_202_214_row_by_hand():
    # LLaMA 3.1 8B, H200, TP 1, 202/214, QPS INF: 43 req/s, TTFT 1665 ms, ITL 19 ms, 9189 tok/s
    run = _run("trtllm-online-llama-3.1-8b-h200-tp1-202-214-qpsinf")
    got = vc.all_at_once(run, vc._measured_means(run))
    assert got["makespan_s"] == pytest.approx(500 * 214 / 9189)            # 11.644 s
    assert got["latency_s"] == pytest.approx(1.665 + 213 * 0.019)          # 5.712 s
    assert got["latency_over_makespan"] == pytest.approx(5.712 / 11.6443, rel=1e-4)  # 0.4905
    assert got["decoding"] == pytest.approx(9189 * 0.019)                  # 174.6


def test_fixed_length_row_by_hand():
    # LLaMA 3.1 8B, H200, TP 1, 467/256, QPS INF: TTFT 3237 ms, ITL 36 ms, 10121 tok/s
    run = _run("trtllm-online-llama-3.1-8b-h200-tp1-467-256-qpsinf")
    got = vc.all_at_once(run, vc._measured_means(run))
    assert got["makespan_s"] == pytest.approx(500 * 256 / 10121)           # 12.647 s
    assert got["latency_s"] == pytest.approx(3.237 + 255 * 0.036)          # 12.417 s
    assert got["latency_over_makespan"] == pytest.approx(12.417 / 12.6470, rel=1e-4)  # 0.9818
    assert got["decoding"] == pytest.approx(10121 * 0.036)                 # 364.4


def test_only_inf_rows_and_complete_figures():
    rated = _run("trtllm-online-llama-3.1-8b-h200-tp1-467-256-qps32")
    assert vc.all_at_once(rated, vc._measured_means(rated)) is None
    inf = _run("trtllm-online-llama-3.1-8b-h200-tp1-467-256-qpsinf")
    assert vc.all_at_once(inf, {"ttft_ms": 3237.0, "itl_ms": 36.0}) is None
    assert vc.all_at_once(inf, {}) is None


def test_the_table_separates_202_214_from_the_fixed_length_rows():
    # the published figures themselves: every 467/x INF row ends together (ratio >= 0.98),
    # every 202/214 INF row does not (0.47-0.51), on both models and both cards
    runs = [r for r in json.loads(vc.RUNS.read_text())["runs"]
            if r["source_group"] == "tensorrt-llm-online"]
    ratios = {r["id"]: vc.all_at_once(r, vc._measured_means(r)) for r in runs}
    ratios = {k: v["latency_over_makespan"] for k, v in ratios.items() if v is not None}
    assert len(ratios) == 12
    fixed = [v for k, v in ratios.items() if "-467-" in k]
    varied = [v for k, v in ratios.items() if "-202-214-" in k]
    assert len(fixed) == 8 and min(fixed) >= 0.975
    assert len(varied) == 4 and 0.46 < min(varied) and max(varied) < 0.52
