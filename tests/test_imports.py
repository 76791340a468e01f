"""Importing gpuplan and running an analytic plan must not import torch (DESIGN.md)."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("torch", "transformers", "numpy", "matplotlib", "safetensors")


def _modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys; print(' '.join(sorted(sys.modules)))"],
        capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_import_gpuplan_imports_nothing_heavy():
    mods = _modules_after("import gpuplan")
    assert not [m for m in HEAVY if m in mods]


def test_analytic_plan_imports_nothing_heavy():
    mods = _modules_after(
        "import gpuplan\n"
        "from gpuplan.models import from_param_count\n"
        "m = from_param_count(7_000_000_000)\n"
        "p = gpuplan.plan(gpuplan.Job(model=m), gpus=['H100-SXM-80GB'])\n"
        "assert p.train.model_states_bytes == 112 * 10**9\n")
    assert not [m for m in HEAVY if m in mods]


def test_cli_fit_json_imports_nothing_heavy():
    mods = _modules_after(
        "import io, contextlib\n"
        "from gpuplan.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert main(['fit', '--params', '7B', '--json']) == 0\n")
    assert not [m for m in HEAVY if m in mods]
