"""benchmarks/trtllm_load_breakdown.py's arithmetic (issues 29 and 31): the online rows' gap per
request in flight, the completed request rate, what an offline row's throughput leaves per
sequence per step, a sampler's pass over the logits, and the rows short of their stated rate with
no queue -- each against a value worked by hand from the published figures."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def bd():
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("trtllm_load_breakdown", BENCH /
                                                  "trtllm_load_breakdown.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _serving(rid: str) -> dict:
    runs = json.loads((BENCH / "published" / "serving_runs.json").read_text())["runs"]
    return next(r for r in runs if r["id"] == rid)


def test_completed_rate_is_output_tokens_over_output_length(bd):
    # perf-overview.md @258c754: 70B H100 TP4 202/214 at QPS 8 served 1390 output tok/s,
    # 1390 / 214 = 6.495 requests/s (the table's Tput column rounds it to 7)
    row = _serving("trtllm-online-llama-3.1-70b-h100-tp4-202-214-qps8")
    assert bd.achieved_rate(row) == pytest.approx(1390 / 214)
    assert bd.achieved_rate(row) == pytest.approx(6.4953, abs=1e-4)


def test_gap_per_request_in_flight(bd):
    # the same row: 8 x (57 + 214 x 25) / 1000 = 43.256 requests in flight; a simulated ITL of
    # 19.51 ms against 25 measured is 5.49 ms / 43.256 = 126.9 us per request
    assert bd.gap_per_request_us(19.51, 25.0, 43.256) == pytest.approx(126.92, abs=0.01)
    assert bd.gap_per_request_us(20.0, 20.0, 5.0) == 0.0
    assert bd.gap_per_request_us(21.0, 20.0, 4.0) == pytest.approx(-250.0)


def test_offline_gap_per_sequence(bd):
    # 18.69 ms steps of 428 sequences simulated at 22,524 tok/s against 21,109 measured: the
    # measured throughput is a step of 18.69 x 22524 / 21109 = 19.943 ms, 1.2528 ms longer,
    # 2.927 us per sequence
    assert bd.offline_gap_per_seq_us(18.69, 22524, 21109, 428) == pytest.approx(2.927, abs=0.001)
    # a simulation slower than measured leaves a negative gap
    assert bd.offline_gap_per_seq_us(10.0, 90.0, 100.0, 100) == pytest.approx(-10.0)


def test_logits_pass(bd):
    # 64 sequences x 128,256 fp32 logits, read and written: 2 x 64 x 128256 x 4 = 65,667,072 B,
    # at 3.35 TB/s 19.602 us
    assert bd.logits_pass_s(64, 128256, 4, 3.35e12) == pytest.approx(19.602e-6, rel=1e-4)
    assert bd.logits_pass_s(1, 1000, 2, 1e9, passes=1) == pytest.approx(2e-6)


def test_short_of_rate_needs_no_queue(bd):
    # a configuration's lowest rate is its TTFT baseline: qps8 completes 6.5/s (< 0.9 x 8) with
    # a TTFT of 57 ms <= 1.5 x 48 -> short of its rate; qps32 completes 14 (< 28.8) but its TTFT
    # of 116 > 72 is a queue -> not listed; qps4 completes 3.6 = 0.9 x 4 -> not under
    rows = [{"id": "x-202-214-qps2", "qps": 2, "achieved": 1.88, "ttft": 48.0},
            {"id": "x-202-214-qps4", "qps": 4, "achieved": 3.6, "ttft": 51.0},
            {"id": "x-202-214-qps8", "qps": 8, "achieved": 6.5, "ttft": 57.0},
            {"id": "x-202-214-qps32", "qps": 32, "achieved": 14.0, "ttft": 116.0},
            {"id": "y-467-16-qps2", "qps": 2, "achieved": 1.75, "ttft": 53.0}]
    assert [r["id"] for r in bd.short_of_rate(rows)] == ["x-202-214-qps8", "y-467-16-qps2"]
