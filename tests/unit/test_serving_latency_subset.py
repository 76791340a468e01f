"""Issue 31's must-hold subset of the speed validation: serving latency rows (vLLM, SGLang,
TensorRT-LLM, NIM; batch 1 to 64), over both published files (runs.json and serving_runs.json),
each measured figure once, its membership pinned so that a figure cannot join or leave it silently
(benchmarks/validate_speed.py ``serving_latency_figures``)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"

#: serving_runs.json's rows outside the subset, by hand from the rule (more than 64 requests in
#: flight): every "INF" row of more than 64 requests (all of them sent at once: TensorRT-LLM's and
#: kvcached's 500, the A100 sweep's 75-500), NIM at concurrency 100-250, and the rate
#: rows whose Little's law on the measured figures, rate x (TTFT + output x ITL), is over 64
#: (e.g. 70B H100 467/256 at 8 QPS: 8 x (0.092 + 256 x 0.032) = 66.3; 8B H100 202/214 at 32 QPS:
#: 32 x (0.027 + 214 x 0.011) = 76.2).
OUTSIDE_RATE = {
    "trtllm-online-llama-3.1-70b-h100-tp4-467-256-qps8",
    "trtllm-online-llama-3.1-70b-h100-tp4-467-256-qps16",
    "trtllm-online-llama-3.1-70b-h100-tp4-467-256-qps32",
    "trtllm-online-llama-3.1-70b-h100-tp4-467-16-qps32",
    "trtllm-online-llama-3.1-70b-h100-tp4-202-214-qps16",
    "trtllm-online-llama-3.1-70b-h100-tp4-202-214-qps32",
    "trtllm-online-llama-3.1-8b-h100-tp1-467-256-qps32",
    "trtllm-online-llama-3.1-8b-h100-tp1-202-214-qps32",
    "trtllm-online-llama-3.1-70b-h200-tp4-467-256-qps16",
    "trtllm-online-llama-3.1-70b-h200-tp4-467-256-qps32",
    "trtllm-online-llama-3.1-70b-h200-tp4-467-16-qps32",
    "trtllm-online-llama-3.1-70b-h200-tp4-202-214-qps16",
    "trtllm-online-llama-3.1-70b-h200-tp4-202-214-qps32",
    "trtllm-online-llama-3.1-8b-h200-tp1-467-256-qps32",
}
#: the runs.json rows of the subset: TensorRT-LLM's online rows, mean ITL at 2 requests/s; their
#: ITLs are serving_runs.json's rows of the same measurement (same table, commit, row)
RUNS_MEMBERS = {"trtllm-online-llama31-8b-h100-bf16-qps2-467-256":
                "trtllm-online-llama-3.1-8b-h100-tp1-467-256-qps2",
                "trtllm-online-llama31-70b-h100-bf16-tp4-qps2-467-256":
                "trtllm-online-llama-3.1-70b-h100-tp4-467-256-qps2",
                "trtllm-online-llama31-8b-h200-bf16-qps2-467-256":
                "trtllm-online-llama-3.1-8b-h200-tp1-467-256-qps2"}


@pytest.fixture(scope="module")
def vs():
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("validate_speed_subset",
                                                  BENCH / "validate_speed.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def _runs():
    return json.loads((BENCH / "published" / "runs.json").read_text())["runs"]


def _serving():
    return json.loads((BENCH / "published" / "serving_runs.json").read_text())["runs"]


def _rows(vs, scale=None):
    """runs.json's speed rows, predicted at ``scale`` x the measured rate (None: not predicted)."""
    return [vs.Row(run=r, predicted=None if scale is None else r["measured"]["value"] * scale,
                   measured=r["measured"]["value"], unit=r["measured"]["unit"], config="")
            for r in _runs() if r["kind"] in vs.SPEED_KINDS]


def test_runs_json_members(vs):
    """The three TensorRT-LLM online rows are runs.json's part; the batch-1 decode rows of
    gpt-fast and transformers (not serving engines) and TensorRT-LLM's max-throughput rows
    (tokens/s of the whole group, unbounded concurrency) are not."""
    assert {r.run["id"] for r in vs.serving_latency_rows(_rows(vs))} == set(RUNS_MEMBERS)


def test_serving_runs_members_each_figure_once(vs):
    """serving_runs.json's 109 rows: 35 outside (21 INF rows of more than 64 requests:
    TensorRT-LLM's 12, kvcached's 500 and the A100 sweep's 8 of 75-500; NIM at C = 100/150/200/250;
    14 rate rows over 64 in flight) -- the other 74 give TTFT and ITL (the vLLM 4090 rows TTFT only:
    no ITL published), less the three ITLs runs.json holds: 46 x 2 - 3 + 8 + 5 = 102 figures from
    TensorRT-LLM, NIM and vLLM's 4090 rows, plus 5 x 2 from DataCrunch's SGLang rows (all at most
    45-52 in flight) = 112, plus 10 x 2 from the vLLM rows of issue 29 (kvcached at 16 req/s, 5.5 in
    flight; the vLLM blog's four at concurrency 8; the A100 sweep's N = 1-50 sent at once) = 132,
    and 135 with runs.json's three. Five of those A100 rows differ only in N and the blog's BF16-
    and FP8-KV rows only in the KV dtype: each is its own measurement."""
    outside = {s["id"] for s in _serving()
               if s["load"].get("request_rate") is None and not s["load"].get("concurrency")
               and s["num_requests"] > 64}
    outside |= {s["id"] for s in _serving() if (s["load"].get("concurrency") or 0) >= 100}
    assert len(outside) == 21 + 4
    outside |= OUTSIDE_RATE
    seen = {vs._runs_key(r.run) for r in vs.serving_latency_rows(_rows(vs))}
    members = vs.serving_runs_members(seen)
    assert {s["id"] for s, *_ in members} == {s["id"] for s in _serving()} - outside
    dup = set(RUNS_MEMBERS.values())
    assert not any(s["id"] in dup and label == "ITL" for s, _, label, _ in members)
    assert {s["id"] for s, _, label, _ in members if label == "TTFT"} >= dup
    assert len(members) == 132
    keys = [vs._serving_key(s, label) for s, _, label, _ in members] + sorted(seen)
    assert len(keys) == len(set(keys)) == 135
    engines = {vs._serving_engine(s) for s, *_ in members}
    assert engines == {"trt-llm", "nim", "vllm", "sglang"}


def test_in_flight_is_littles_law_on_the_measured_figures(vs):
    """Llama 3.1 8B on an H100 at 2 requests/s, 256 output tokens, measured mean TTFT 23 ms and
    ITL 8 ms: 2 x (0.023 + 256 x 0.008) = 4.14 requests in flight, inside 1-64."""
    run = next(r for r in _runs() if r["id"] == "trtllm-online-llama31-8b-h100-bf16-qps2-467-256")
    assert vs.serving_batch(run) == pytest.approx(2 * (0.023 + 256 * 0.008))
    gptfast = next(r for r in _runs() if r["id"] == "gptfast-llama2-7b-bf16-a100")
    assert vs.serving_batch(gptfast) == 1.0  # stated batch, but gpt-fast is no serving engine
    by_id = {s["id"]: s for s in _serving()}
    # the same measurement in serving_runs.json reads the same count
    assert vs.serving_in_flight(by_id["trtllm-online-llama-3.1-8b-h100-tp1-467-256-qps2"]) == \
        pytest.approx(2 * (0.023 + 256 * 0.008))
    # 70B H200 467/256 at 8 QPS, TTFT 84 ms, ITL 27 ms: 56.0, in; 70B H100: 66.3, out
    assert vs.serving_in_flight(by_id["trtllm-online-llama-3.1-70b-h200-tp4-467-256-qps8"]) == \
        pytest.approx(8 * (0.084 + 256 * 0.027))
    assert vs.serving_in_flight(by_id["trtllm-online-llama-3.1-70b-h100-tp4-467-256-qps8"]) == \
        pytest.approx(8 * (0.092 + 256 * 0.032))
    # under one in flight (70B H100 467/16 at 2 QPS: 2 x (0.053 + 16 x 0.018) = 0.68) the engine
    # runs one request at a time: batch 1, a member
    assert vs.serving_in_flight(by_id["trtllm-online-llama-3.1-70b-h100-tp4-467-16-qps2"]) == \
        pytest.approx(0.682)
    assert vs.serving_in_flight(by_id["nim-llama-3.3-70b-h100-fp8-tp2-5000-500-c50"]) == 50
    # a row whose lengths are drawn per request counts its served output (the line's
    # total_output_tokens / completed = 308712 / 600 = 514.5, run as 515), not the 1024 asked:
    # 405B at 2 req/s, median TTFT 244.26 ms, ITL 43.30 ms: 2 x (0.24426 + 515 x 0.0433) = 45.1
    # (89.2 at 1024 tokens, which would drop it); the line's own mean E2E says 2 x 29.97 = 59.9
    dc = by_id["datacrunch-sglang-llama-3.1-405b-h200-tp8-random1024-rps2"]
    assert vs.serving_in_flight(dc) == pytest.approx(2 * (0.24426 + 515 * 0.0433), rel=1e-3)
    assert vs.serving_in_flight(by_id["trtllm-online-llama-3.1-8b-h100-tp1-467-16-qpsinf"]) == 500
    # an "INF" row of 10 requests sent at once holds 10 in flight (a member), of 75 not
    n10 = by_id["dl-vllm-qwen2-7b-a100-util05-1024-1024-n10"]
    assert vs.serving_in_flight(n10) == 10
    assert vs.serving_in_flight(by_id["dl-vllm-qwen2-7b-a100-util05-1024-1024-n75"]) == 75


def test_key_tells_apart_what_the_source_tells_apart(vs):
    """Two all-at-once runs of 10 and 20 requests, and the vLLM blog's BF16- and FP8-KV runs of
    one workload, are four measurements: their keys differ in the count and in the KV dtype."""
    by_id = {s["id"]: s for s in _serving()}
    a, b = (by_id[f"dl-vllm-qwen2-7b-a100-util05-1024-1024-n{n}"] for n in (10, 20))
    assert vs._serving_key(a, "TTFT") != vs._serving_key(b, "TTFT")
    assert vs._serving_key(a, "TTFT")[5] == ("all", 10)
    bf, f8 = (by_id[f"vllm-blog-fp8kv-llama-3.1-8b-h100-20k-2k-c8-kv{k}"] for k in ("bf16", "fp8"))
    assert vs._serving_key(bf, "ITL") != vs._serving_key(f8, "ITL")
    assert ("kv_dtype", "fp8") in vs._serving_key(f8, "ITL")[7]


def test_section_reports_median_and_bar(vs):
    """The report's section gives the subset's median |error| and whether the 10% bar holds:
    every runs.json rate predicted at measured / 1.25 (its latency +25%) and every serving_runs
    figure at 1.25 x measured read +25.0%."""
    def fake(srow):
        return SimpleNamespace(predicted={k: v["value"] * 1.25
                                          for k, v in srow["measured"].items()})
    text = "\n".join(vs._serving_latency_section(_rows(vs, scale=1 / 1.25), fake))
    assert "135 figures" in text and "median |error| 25.0%" in text and "bar met: no" in text
    assert "engines present: nim, sglang, trt-llm, vllm; 0 not predicted" in text
    # the 12 TTFTs at 2 QPS of TensorRT-LLM's online table (4 model/GPU setups x 3
    # lengths) fitted engines/profiles.py's TensorRT-LLM request time: reported without them too
    assert "12 of them" in text and "without them 123 figures" in text
    text = "\n".join(vs._serving_latency_section(
        _rows(vs, scale=1 / 1.05),
        lambda s: SimpleNamespace(predicted={k: v["value"] * 0.95
                                             for k, v in s["measured"].items()})))
    assert "median |error| 5.0%" in text and "bar met: yes" in text
