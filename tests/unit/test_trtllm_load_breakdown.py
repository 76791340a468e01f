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


def _row(rid: str, in_flight: float, pred: float, meas: float) -> dict:
    return {"id": rid, "in_flight": in_flight, "pred": pred, "meas": meas}


def test_gpu_pairs_match_the_same_load_on_both_gpus(bd):
    # a pair is the same id with h100 -> h200; a row with no twin, or one past 64 in flight on
    # either GPU, makes no pair
    rows = [_row("m-h100-tp4-467-256-qps2", 10.9, 18.66, 21),
            _row("m-h100-tp4-467-256-qps16", 273.1, 40.24, 66),
            _row("m-h100-tp1-202-214-qps2", 3.0, 6.87, 7),
            _row("m-h200-tp4-467-256-qps2", 9.3, 13.82, 18),
            _row("m-h200-tp4-467-256-qps16", 40.0, 32.88, 60)]
    pairs = bd.gpu_pairs(rows)
    assert [k for k, _, _ in pairs] == ["m-tp4-467-256-qps2"]
    assert pairs[0][1]["in_flight"] == 10.9 and pairs[0][2]["in_flight"] == 9.3


def test_host_cost_contradicted(bd):
    # perf-overview.md @258c754, 70B TP4 467/256 at QPS 2: H100 21 ms measured against 18.66
    # simulated (2.34 ms gap, 10.9 in flight), H200 18 against 13.82 (4.18 ms, 9.3 in flight):
    # fewer in flight on the H200 and a gap 1.84 ms larger -- beyond the 1 ms of rounding too
    h100, h200 = _row("a", 10.9, 18.66, 21), _row("b", 9.3, 13.82, 18)
    assert bd.host_cost_contradicted(h100, h200)
    assert bd.host_cost_contradicted(h100, h200, margin_ms=1.0)
    assert not bd.host_cost_contradicted(h100, h200, margin_ms=2.0)
    # 8B TP1 467/256 at QPS 2: gaps 1.00 and 1.04 ms -- larger on the H200, within rounding
    h100, h200 = _row("a", 4.1, 7.00, 8), _row("b", 3.1, 4.96, 6)
    assert bd.host_cost_contradicted(h100, h200)
    assert not bd.host_cost_contradicted(h100, h200, margin_ms=1.0)
    # more requests in flight on the H200 explains a larger gap there: not a contradiction
    assert not bd.host_cost_contradicted(_row("a", 2.0, 7.0, 8), _row("b", 3.0, 5.0, 7))


def test_toward(bd):
    # 8B H100 202/214 INF (perf-overview.md @258c754): TTFT 1,657 ms measured; 1,171 simulated
    # at the default batch, 2,286 at 256 -- 629 ms off against 486 ms off, so not nearer
    assert not bd.toward(1657, 1171, 2286)
    assert bd.toward(1657, 1171, 1500)
    assert not bd.toward(21, 23.1, 18.9)      # 2.1 off either way: not strictly nearer
    assert bd.toward(8291, 17340, 11108)


def test_batch_limited_passes_the_limit_and_leaves_the_row(bd, monkeypatch):
    seen = []

    class _Row:
        predicted = {"ttft_ms": 1.0}

    def predict(run):
        seen.append(run)
        return _Row()

    monkeypatch.setattr(bd.validate_capacity, "predict", predict)
    row = _serving("trtllm-online-llama-3.1-8b-h100-tp1-202-214-qpsinf")
    before = json.dumps(row, sort_keys=True)
    assert bd.batch_limited(row, 256) == {"ttft_ms": 1.0}
    assert seen[0]["server_flags"] == {"max_num_seqs": 256}
    assert seen[0]["id"] == row["id"] and json.dumps(row, sort_keys=True) == before


def test_batch_limit_section_counts_rows_moved_toward_the_measured(bd):
    # one row whose limit moves all three figures nearer the measured ones, one that moves TTFT
    # away: 1 of 2 at each limit
    meas = {"ttft_ms": 100.0, "itl_ms": 20.0, "output_tokens_per_s": 1000.0}
    good = {"ttft_ms": 110.0, "itl_ms": 21.0, "output_tokens_per_s": 1500.0}
    bad = {"ttft_ms": 300.0, "itl_ms": 21.0, "output_tokens_per_s": 1500.0}
    base = {"ttft_ms": 50.0, "itl_ms": 30.0, "output_tokens_per_s": 2000.0}
    rows = [{"id": "a", "meas": meas, "sims": {None: base, 256: good, 128: good}},
            {"id": "b", "meas": meas, "sims": {None: base, 256: bad, 128: bad}}]
    text = "\n".join(bd._batch_limit_section(rows))
    assert "1 of 2 at 256, 1 of 2 at 128" in text
    assert "1.50-1.50x the measured" in text


def test_makespan_excess(bd):
    # perf-overview.md @258c754, 8B H100 202/214 at QPS 32: 4825 output tok/s -> 22.547 req/s
    # completed, a makespan of 500 / 22.547 = 22.176 s; the arrivals take 500 / 32 = 15.625 s and
    # a mean request 27 + 213 x 11 = 2370 ms, so it ended 22.176 - 17.995 = 4.18 s late; the
    # Poisson spread of 500 gaps at 32/s is sqrt(500) / 32 = 0.699 s (5.98 sd)
    excess, sd = bd.makespan_excess(_serving("trtllm-online-llama-3.1-8b-h100-tp1-202-214-qps32"))
    assert excess == pytest.approx(500 * 214 / 4825 - 500 / 32 - 2.370, abs=1e-9)
    assert excess == pytest.approx(4.181, abs=1e-3)
    assert sd == pytest.approx(0.6988, abs=1e-4)


def test_makespan_rows_leave_out_queued_rows(bd):
    ids = {r["id"] for r in bd.makespan_rows()}
    # 70B H100 202/214 at QPS 16: TTFT 74 ms against 48 at QPS 2, over 1.5x -- a queue
    assert "trtllm-online-llama-3.1-70b-h100-tp4-202-214-qps16" not in ids
    # 8B H100 202/214 at QPS 32: 27 against 19 ms, within 1.5x
    assert "trtllm-online-llama-3.1-8b-h100-tp1-202-214-qps32" in ids
