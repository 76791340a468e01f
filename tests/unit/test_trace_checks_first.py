"""small43: `gpuplan trace` refuses an argument it can check without torch before it imports torch
and transformers (it took 31 s to refuse `trace gpt2 --seq 2000` on a loaded machine). Each case
runs the CLI in a subprocess whose importer refuses torch and transformers and says so on
stderr: the refusal must be the argument's one line, exit 2, with no import of either tried."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
GUARD = """
import sys
class Guard:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "transformers"):
            sys.stderr.write("IMPORTED " + name + "\\n")
            raise ImportError(name)
        return None
sys.meta_path.insert(0, Guard())
from gpuplan.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _trace(*argv: str) -> tuple[int, str]:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    r = subprocess.run([sys.executable, "-c", GUARD, "trace", *argv], capture_output=True,
                       text=True, env=env, timeout=120)
    return r.returncode, r.stderr


@pytest.mark.parametrize("argv, says", [
    (("gpt2", "--seq", "2000"), "--seq 2000: gpt2 supports at most 1024 positions"),
    (("gpt2", "--real", "--device", "cuda"), "--real runs the step on this machine's CPU"),
    (("gpt2", "--tp", "2", "--mode", "infer"), "--tp 2 traces a tensor-parallel training step"),
    (("gpt2", "--gpus", "2", "--zero", "3", "--mode", "infer"), "--gpus/--zero trace an FSDP2"),
    (("gpt2", "--engine", "vllm", "--mode", "infer"), "--engine vllm"),
    (("gpt2", "--batch", "0"), "--batch"),
    (("no-such-model-xyz", "--seq", "128"), "no-such-model-xyz"),
], ids=["seq", "real-cuda", "tp-infer", "zero-infer", "engine", "batch", "model"])
def test_refused_before_torch_is_imported(argv, says):
    rc, err = _trace(*argv)
    assert "IMPORTED" not in err, err
    assert rc == 2 and err.count("\n") == 1 and says in err, err


def test_what_needs_torch_still_reports_it_first():
    """A valid trace needs torch: the guard's refusal is the install line, one line, exit 2."""
    rc, err = _trace("gpt2", "--seq", "128")
    assert "IMPORTED torch" in err and rc == 2
    assert err.strip().splitlines()[-1].startswith("gpuplan: error: gpuplan trace needs torch")
