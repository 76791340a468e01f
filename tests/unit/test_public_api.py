"""The public API is what the README lists, and every listed name resolves (httpx tests its
__all__ the same way)."""

from __future__ import annotations

import re
from pathlib import Path

import gpuplan

README = Path(__file__).resolve().parents[2] / "README.md"


def _documented() -> list[str]:
    text = README.read_text()
    para = text[text.index("The public API (`gpuplan.__all__`"):].split("\n\n")[0]
    para = para.split(":", 1)[1]  # the list after the heading sentence
    return re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", para)


def test_all_is_the_documented_api():
    assert sorted(gpuplan.__all__) == sorted(_documented())
    assert len(set(gpuplan.__all__)) == len(gpuplan.__all__)


def test_every_public_name_resolves():
    for name in gpuplan.__all__:
        assert getattr(gpuplan, name) is not None, name


def test_an_unknown_name_is_an_attribute_error():
    try:
        gpuplan.no_such_thing  # noqa: B018
    except AttributeError as e:
        assert "no_such_thing" in str(e)
    else:
        raise AssertionError("gpuplan.no_such_thing resolved")
