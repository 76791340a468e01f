"""No number moves by accident: every golden output (recorded on main before the layout refactor;
fit and speed re-recorded once, for the numbers issue 12 moved on purpose -- the commit says which)
comes out equal, value for value.

Keys added to an object since the recording are allowed (new fields are the public contract's
growth); a key removed, a value changed, or a list of another length fails, naming the path.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

GOLDEN = Path(__file__).resolve().parent
sys.path.insert(0, str(GOLDEN))

from cases import all_cases  # noqa: E402
from record import run_json  # noqa: E402


#: Keys whose values are wall-clock measurements of the run itself, not predictions.
VOLATILE = {"seconds"}


def diff(old: object, new: object, path: str = "$") -> str | None:
    """The first place where ``new`` does not keep ``old`` (None when it does)."""
    if isinstance(old, dict):
        if not isinstance(new, dict):
            return f"{path}: object became {type(new).__name__}"
        for k, v in old.items():
            if k in VOLATILE:
                continue
            if k not in new:
                return f"{path}.{k}: removed"
            d = diff(v, new[k], f"{path}.{k}")
            if d:
                return d
        return None
    if isinstance(old, list):
        if not isinstance(new, list) or len(new) != len(old):
            return f"{path}: list of {len(old)} became {new!r:.200}"
        for i, (a, b) in enumerate(zip(old, new)):
            d = diff(a, b, f"{path}[{i}]")
            if d:
                return d
        return None
    if type(old) is not type(new) or old != new:
        return f"{path}: {old!r:.200} became {new!r:.200}"
    return None


def test_diff_catches_changes():
    assert diff({"a": [1, {"b": 2.5}]}, {"a": [1, {"b": 2.5, "c": 0}], "d": 1}) is None
    assert diff({"a": [1, {"b": 2.5}]}, {"a": [1, {"b": 2.50001}]}) == "$.a[1].b: 2.5 became 2.50001"
    assert diff({"a": 1}, {"b": 1}) == "$.a: removed"
    assert diff({"a": [1]}, {"a": [1, 2]}).startswith("$.a: list of 1")
    assert diff({"a": 1}, {"a": 1.0}) is not None
    assert diff({"seconds": 4.4, "b": 1}, {"seconds": 5.3, "b": 1}) is None


@pytest.fixture(autouse=True)
def _empty_bench_db(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUPLAN_BENCH_DB", str(tmp_path / "empty.sqlite"))


def _params(group: str):
    recorded = json.loads((GOLDEN / f"golden_{group}.json").read_text())
    cases = {" ".join(a): a for a in all_cases()[group]}
    assert set(recorded) == set(cases), "cases.py and the recording differ: re-record on purpose"
    return [pytest.param(cases[k], v, id=k) for k, v in recorded.items()]


def test_golden_set_is_large_enough():
    n = sum(len(json.loads((GOLDEN / f"golden_{g}.json").read_text())) for g in all_cases())
    assert n >= 200


@pytest.mark.parametrize("argv,expected", _params("fit") + _params("speed") + _params("flops"))
def test_golden_analytic(argv, expected):
    assert diff(expected, run_json(argv)) is None, diff(expected, run_json(argv))


@pytest.mark.parametrize("argv,expected", _params("trace"))
def test_golden_trace(argv, expected):
    pytest.importorskip("torch")
    got = run_json(argv)
    assert diff(expected, got) is None, diff(expected, got)
