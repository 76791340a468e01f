"""Issue 31's must-hold subset of the speed validation: serving latency rows (vLLM, SGLang,
TensorRT-LLM, NIM; batch 1 to 64), its membership pinned so that a row cannot join or leave it
silently (benchmarks/validate_speed.py ``serving_latency_rows``)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def vs():
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("validate_speed_subset", BENCH / "validate_speed.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def _runs():
    return json.loads((BENCH / "published" / "runs.json").read_text())["runs"]


def test_subset_membership(vs):
    """The three TensorRT-LLM online rows (mean ITL at 2 requests/s) are the subset; the batch-1
    decode rows of gpt-fast and transformers (not serving engines) and TensorRT-LLM's
    max-throughput rows (tokens/s of the whole group, unbounded concurrency) are not."""
    rows = [vs.Row(run=r, predicted=None, measured=r["measured"]["value"],
                   unit=r["measured"]["unit"], config="") for r in _runs()
            if r["kind"] in vs.SPEED_KINDS]
    ids = {r.run["id"] for r in vs.serving_latency_rows(rows)}
    assert ids == {"trtllm-online-llama31-8b-h100-bf16-qps2-467-256",
                   "trtllm-online-llama31-70b-h100-bf16-tp4-qps2-467-256",
                   "trtllm-online-llama31-8b-h200-bf16-qps2-467-256"}


def test_batch_is_littles_law_on_the_measured_figures(vs):
    """Llama 3.1 8B on an H100 at 2 requests/s, 256 output tokens, measured mean TTFT 23 ms and
    ITL 8 ms: 2 x (0.023 + 256 x 0.008) = 4.14 requests in flight, inside 1-64."""
    run = next(r for r in _runs() if r["id"] == "trtllm-online-llama31-8b-h100-bf16-qps2-467-256")
    assert vs.serving_batch(run) == pytest.approx(2 * (0.023 + 256 * 0.008))
    gptfast = next(r for r in _runs() if r["id"] == "gptfast-llama2-7b-bf16-a100")
    assert vs.serving_batch(gptfast) == 1.0  # stated batch, but gpt-fast is no serving engine


def test_section_reports_median_and_bar(vs):
    """The report's section gives the subset's median |error| and whether the 10% bar holds."""
    rows = [vs.Row(run=r, predicted=r["measured"]["value"] * 1.2, measured=r["measured"]["value"],
                   unit=r["measured"]["unit"], config="") for r in _runs()
            if r["kind"] in vs.SPEED_KINDS]
    text = "\n".join(vs._serving_latency_section(rows))
    assert "3 rows" in text and "median |error| 20.0%" in text and "bar met: no" in text
