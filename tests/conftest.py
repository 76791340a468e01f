"""Fixtures shared by every test folder.

tests/unit/        pure and fast: no torch (the library, the CLI in-process, the readers)
tests/integration/ torch on CPU: the trace, the bench, the profiler, torch as the oracle
tests/e2e/         the CLI and the package as a user meets them: subprocesses, venvs, the docs
tests/web/         the web API in-process and the page in a real browser
tests/fuzz/        hostile input: the reproducers, the corpus, a bounded hypothesis budget
tests/golden/      the recorded outputs no refactor may move
"""

from __future__ import annotations

from collections.abc import Callable

import pytest


@pytest.fixture
def cli(capsys) -> Callable[..., tuple[int, str, str]]:
    """Run ``gpuplan ARGV...`` in-process: ``(exit status, stdout, stderr)``."""
    from gpuplan.cli import main

    def run(*argv: str) -> tuple[int, str, str]:
        rc = main(list(argv))
        out, err = capsys.readouterr()
        return rc, out, err

    return run


@pytest.fixture
def empty_bench_db(tmp_path, monkeypatch):
    """No stored bench run reaches a prediction: the bench database is a fresh, absent file."""
    path = tmp_path / "bench.sqlite"
    monkeypatch.setenv("GPUPLAN_BENCH_DB", str(path))
    return path
