"""What an import and each analytic command pull in: the one import-cost test (DESIGN.md: the
analytic core never imports torch; click's test_imports.py keeps an allow-list the same way).

Every case runs in a fresh interpreter and lists the top-level modules it ended with. Beside
gpuplan and the standard library, only the packages named for that case may appear.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

#: rich and what it imports itself: the terminal tables (never on a --json path).
RICH = {"rich", "markdown_it", "mdurl", "pygments"}
#: sqlite3's C module and the like are standard library; anything else is third party.
STDLIB = set(sys.stdlib_module_names) | {"_sqlite3", "__main__", "_distutils_hack"}

CASES = {
    "import gpuplan": ("import gpuplan", set()),
    "an analytic plan": (
        "import gpuplan\n"
        "from gpuplan.models import from_param_count\n"
        "p = gpuplan.plan(gpuplan.Job(model=from_param_count(7_000_000_000)),\n"
        "                 gpus=['H100-SXM-80GB'])\n"
        "assert p.train.model_states_bytes == 112 * 10**9\n", set()),
    "the speed model and the solver": (
        "import gpuplan\n"
        "job = gpuplan.Job(model='llama-3.1-8b', mode='train')\n"
        "m = gpuplan.load_model('llama-3.1-8b')\n"
        "gpuplan.estimate_speed(m, gpuplan.get_gpu('h100'), job)\n"
        "gpuplan.suggest(m, job, gpuplan.get_gpu('RTX-4090'), mode='train')\n", set()),
}
JSON_COMMANDS = [
    ["fit", "llama-3.1-8b", "--json"], ["fit", "--params", "7B", "--suggest", "--json"],
    ["speed", "llama-3.1-8b", "--gpu", "h100", "--json"], ["speed", "gpt2", "--gpu", "h100",
                                                             "--vs-cpu", "--json"],
    ["flops", "model", "gpt2", "--json"], ["flops", "matmul", "64x64", "64x64", "--gpu", "h100",
                                            "--json"],
    ["gpus", "--json"], ["models", "--json"],
]  # (`doctor` imports torch on purpose, when installed: it reports torch's CUDA)
TEXT_COMMANDS = [["fit", "llama-3.1-8b", "--gpu", "h100"], ["speed", "gpt2", "--gpu", "h100"],
                 ["gpus"], ["models"], ["trace", "--help"], ["profile", "--help"],
                 ["bench", "--help"], ["--help"]]


def _third_party(code: str, env_db: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys, json\n"
         "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"],
        capture_output=True, text=True, env={"GPUPLAN_BENCH_DB": env_db, "PATH": "/usr/bin"})
    assert out.returncode == 0, out.stderr[-2000:]
    mods = set(json.loads(out.stdout.strip().splitlines()[-1]))
    return {m for m in mods if m not in STDLIB and m != "gpuplan" and not m.startswith("_")}


def _cli(argv: list[str]) -> str:
    return ("import contextlib, io\nfrom gpuplan.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try:\n"
            f"        rc = main({argv!r})\n"
            "    except SystemExit as e:\n"
            "        rc = e.code\n"
            "assert rc in (0, None), rc\n")


@pytest.mark.parametrize("name", CASES)
def test_library_imports_nothing_beyond_its_allow_list(name, tmp_path):
    code, allowed = CASES[name]
    assert _third_party(code, str(tmp_path / "db.sqlite")) <= allowed


@pytest.mark.parametrize("argv", JSON_COMMANDS, ids=" ".join)
def test_json_commands_import_no_third_party_package(argv, tmp_path):
    assert _third_party(_cli(argv), str(tmp_path / "db.sqlite")) == set()


@pytest.mark.parametrize("argv", TEXT_COMMANDS, ids=" ".join)
def test_text_commands_import_only_rich(argv, tmp_path):
    assert _third_party(_cli(argv), str(tmp_path / "db.sqlite")) <= RICH


def test_the_check_sees_a_third_party_import(tmp_path):
    assert "rich" in _third_party("import rich", str(tmp_path / "db.sqlite"))
