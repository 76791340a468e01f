"""benchmarks/published/serving_runs.json's ``prefix_cache`` (the A100 sweep's server-log
reading, read by benchmarks/validate_capacity.py): each logged cumulative hit rate the reading
explains is the quotient it states (hits of 1,008 tokens, 63 whole 16-token blocks short of a
1,024-token prompt's last token, over the prompts queried), to the log's printed 0.1%, and a row
runs a whole-prompt hit only where an earlier run on its server sent at least as many prompts."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

RUNS_FILE = Path(__file__).resolve().parents[2] / "benchmarks" / "published" / "serving_runs.json"
RUNS = json.loads(RUNS_FILE.read_text(encoding="utf-8"))["runs"]
CACHED = [r for r in RUNS if "prefix_cache" in r]
EXPLAINED = [r for r in CACHED if re.match(r"[\d.]+% = ", r["prefix_cache"]["reading"])]


def _product(expr: str) -> int:
    """``(1 + 101) x 1,008`` -> 102 * 1008: terms joined by ' x ', a term an integer or a sum."""
    out = 1
    for term in expr.replace(",", "").split(" x "):
        out *= sum(int(t) for t in term.strip(" ()").split("+"))
    return out


def test_the_sweep_carries_its_server_reading():
    assert len(CACHED) == 13 and len(EXPLAINED) == 4


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
