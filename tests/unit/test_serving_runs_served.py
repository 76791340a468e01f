"""benchmarks/published/serving_runs.json's served lengths (``input_len_served``,
``output_len_served``, read by benchmarks/validate_capacity.py): each mean is the quotient its
``from`` text states (two of the source's own figures), the length run is that mean rounded,
and it lies within the length asked (a served mean over it would be a transcription slip)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

RUNS_FILE = Path(__file__).resolve().parents[2] / "benchmarks" / "published" / "serving_runs.json"
_DATA = json.loads(RUNS_FILE.read_text(encoding="utf-8"))
RUNS = _DATA["runs"] if isinstance(_DATA, dict) else _DATA
#: (id, key, served, the longest length the source's draw allows): the length asked, or for a row
#: whose source states a spread about it (``length_spread``: the vLLM blog's "+-15% variance") the
#: length asked times 1 + the spread
SERVED = [(r["id"], key, r[key], r[key.replace("_served", "")] * (1 + r.get("length_spread", 0)))
          for r in RUNS for key in ("input_len_served", "output_len_served") if key in r]


def test_there_are_served_rows():
    assert len(SERVED) >= 10  # 5 vLLM output rows, 5 SGLang rows with both


@pytest.mark.parametrize("rid,key,served,asked", SERVED, ids=[f"{s[0]}:{s[1]}" for s in SERVED])
def test_served_mean_is_its_stated_quotient(rid, key, served, asked):
    m = re.search(r"=\s*([\d.]+)\s*/\s*([\d.]+)", served["from"])
    assert m, served["from"]
    num, den = float(m.group(1)), float(m.group(2))
    # the quotient rounded to the two decimals the mean is written with
    assert num / den == pytest.approx(served["mean"], abs=0.005)
    assert served["run_as"] == round(served["mean"])
    assert 1 <= served["mean"] <= asked
