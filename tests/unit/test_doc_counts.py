"""The counts the README and the catalog pages state are the catalogs' own sizes.

The README once said 18 GPUs and 28 models while the catalogs held 43 and 31: each count sentence
is read here and compared with the catalog, so a new entry without its docs fails this test.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import gpuplan
from gpuplan.hardware import DEFAULT_SHORTLIST, SOLVER_GPUS
from gpuplan.models import catalog_names

ROOT = Path(__file__).resolve().parents[2]
WORDS = {"seven": 7, "eight": 8, "nine": 9, "ten": 10}


def _count(path: str, pattern: str) -> int:
    """The number that ``pattern``'s group ``n`` finds (exactly once) in ``path``."""
    text = " ".join((ROOT / path).read_text().split())  # a sentence may break across lines
    hits = re.findall(pattern, text)
    assert len(hits) == 1, f"{path}: {pattern!r} found {len(hits)} times"
    word = hits[0]
    return WORDS[word] if word in WORDS else int(word.replace(",", ""))


GPUS = len(gpuplan.all_gpus())
MODELS = len(catalog_names())


@pytest.mark.parametrize("path, pattern, expected", [
    ("README.md", r"(\d+) GPU SKUs \(among them", GPUS),
    ("README.md", r"(\d+) model architectures stored as their config\.json", MODELS),
    ("README.md", r"parameter counts of all (\d+) catalog models", MODELS),
    ("docs/gpus.md", r"The catalog holds (\d+) SKUs", GPUS),
    ("docs/gpus.md", r"its (\w+)-GPU shortlist \(`DEFAULT_SHORTLIST`\)", len(DEFAULT_SHORTLIST)),
    ("docs/gpus.md", r"among the (\d+) datacenter and flagship cards of `SOLVER_GPUS`",
     len(SOLVER_GPUS)),
    ("docs/models.md", r"The catalog holds (\d+) models", MODELS),
])
def test_a_stated_count_is_the_catalog_size(path, pattern, expected):
    assert _count(path, pattern) == expected


def test_the_catalog_sizes_are_what_the_catalogs_hold():
    # counted from the shipped files, not through the functions the sentences are compared with
    assert MODELS == len(list((ROOT / "src/gpuplan/models/catalog").glob("*.json")))
    gpus = json.loads((ROOT / "src/gpuplan/hardware/gpus.json").read_text())["gpus"]
    assert GPUS == len(gpus)


def test_the_catalog_pages_list_every_entry_once():
    gpu_rows = re.findall(r"^\| ([A-Za-z0-9.+-]+) \| <https?://", (ROOT / "docs/gpus.md").read_text(),
                          re.M)
    assert sorted(gpu_rows) == sorted(g.name for g in gpuplan.all_gpus())
    text = (ROOT / "docs/models.md").read_text()
    start = text.index("## The catalog")
    table = text[start:text.index("\n## ", start + 1)]
    model_rows = re.findall(r"^\| `([^`]+)` \| ", table, re.M)
    assert sorted(model_rows) == sorted(catalog_names())
