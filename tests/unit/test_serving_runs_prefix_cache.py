"""benchmarks/published/serving_runs.json's ``prefix_cache`` (the A100 sweep's server-log
reading, read by benchmarks/validate_capacity.py): each logged cumulative hit rate the reading
explains is the quotient it states (hits of 1,008 tokens, 63 whole 16-token blocks short of a
1,024-token prompt's last token, over the prompts queried), to the log's printed 0.1%, a row
runs a whole-prompt hit only where an earlier run on its server sent at least as many prompts,
and the prompts a row's server held when it began (``cached_prompts``) are the earlier run's
(or, alone, prompt 0: the client's test request)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

RUNS_FILE = Path(__file__).resolve().parents[2] / "benchmarks" / "published" / "serving_runs.json"
RUNS = json.loads(RUNS_FILE.read_text(encoding="utf-8"))["runs"]
CACHED = [r for r in RUNS if "prefix_cache" in r]
EXPLAINED = [r for r in CACHED if re.match(r"[\d.]+% = ", r["prefix_cache"]["reading"])]
WARM = [r for r in CACHED if "cached_prompts" in r["prefix_cache"]]


def _product(expr: str) -> int:
    """``(1 + 101) x 1,008`` -> 102 * 1008: terms joined by ' x ', a term an integer or a sum."""
    out = 1
    for term in expr.replace(",", "").split(" x "):
        out *= sum(int(t) for t in term.strip(" ()").split("+"))
    return out


def test_the_sweep_carries_its_server_reading():
    assert len(CACHED) == 13 and len(EXPLAINED) == 4 and len(WARM) == 10
    # a row runs its whole-prompt hit or the prompts cached before it, not both
    assert not [r for r in WARM if "hit_share" in r["prefix_cache"]]


@pytest.mark.parametrize("run", EXPLAINED, ids=[r["id"] for r in EXPLAINED])
def test_logged_rate_is_its_stated_quotient(run):
    pc = run["prefix_cache"]
    m = re.match(r"([\d.]+)% = (.+?) / \((.+?)\)", pc["reading"])
    rate, num, den = float(m.group(1)), _product(m.group(2)), _product(m.group(3))
    assert pc["hit_rate_logged"] == f"{rate}%"
    assert 100 * num / den == pytest.approx(rate, abs=0.05 + 1e-9)


@pytest.mark.parametrize("run", [r for r in CACHED if "hit_share" in r["prefix_cache"]],
                         ids=lambda r: r["id"])
def test_whole_prompt_hit_follows_a_run_at_least_as_large(run):
    runs_before = run["prefix_cache"]["runs_before_on_server"]
    before = [int(n) for n in re.findall(r"\b(\d+) \(", runs_before)]
    assert run["prefix_cache"]["hit_share"] == 1.0
    assert max(before) >= run["num_requests"]


@pytest.mark.parametrize("run", WARM, ids=lambda r: r["id"])
def test_cached_prompts_are_the_earlier_runs_on_that_server(run):
    pc = run["prefix_cache"]
    k = pc["cached_prompts"]
    if k == 1:  # benchmark_serving.py's initial test request sends prompt 0 before every run
        assert "test request" in pc["cached_prompts_reading"]
        return
    # prompts 0..k-1 of the seed-0 draw: the largest run before on the same server sent them,
    # on the 0.5-utilization pool (464,848 tokens) that holds such a run whole
    before = [int(n) for n in re.findall(r"(?:N = |, )(\d+)", pc["runs_before_on_server"])]
    assert k == max(before) < run["num_requests"]
    assert run["server_flags"]["gpu_memory_utilization"] == 0.5
    assert "464,848-token pool" in pc["cached_prompts_reading"]
