"""The README's quick start stays true: CI runs exactly its test command."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _code_blocks(text: str) -> list[str]:
    return re.findall(r"```\n(.*?)```", text, flags=re.S)


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    quick = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    blocks = [b.strip() for b in _code_blocks(quick)]
    assert len(blocks) == 2, blocks   # one installs and runs the main job, one runs the tests
    install_and_run, test_command = blocks
    assert install_and_run == "pip install . && gpuplan fit"
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert test_command in ci, "the .ci/run script must run the README's test command verbatim"
    assert "torch==2.13.0" in test_command   # a range could pull a multi-GB CUDA build
