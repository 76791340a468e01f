"""``gpuplan capacity``'s search shows a bar on stderr only when stderr is a terminal and the
output is not ``--json``: run under a pseudo-terminal (stderr) with stdout a pipe."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pty = pytest.importorskip("pty", reason="no pseudo-terminals on this platform")

SRC = Path(__file__).resolve().parents[2] / "src"
SEARCH = ["capacity", "llama-3.1-8b", "--gpu", "h100", "--rate", "8", "--requests", "40",
          "--input", "500", "--output", "16", "--max-model-len", "4096", "--slo-ttft", "1",
          "--slo-tpot", "0.05", "--max-gpus", "8"]


def run(argv, *, tty: bool) -> tuple[int, str, str]:
    """(exit status, stdout, what reached stderr) of ``gpuplan ARGV``."""
    env = {**os.environ, "PYTHONPATH": str(SRC), "COLUMNS": "100", "TERM": "xterm"}
    env.pop("FORCE_COLOR", None)
    env.pop("TTY_INTERACTIVE", None)
    if not tty:
        p = subprocess.run([sys.executable, "-m", "gpuplan", *argv], capture_output=True,
                           text=True, env=env, timeout=300)
        return p.returncode, p.stdout, p.stderr
    master, slave = pty.openpty()
    p = subprocess.Popen([sys.executable, "-m", "gpuplan", *argv], stdout=subprocess.PIPE,
                         stderr=slave, env=env)
    os.close(slave)
    err = b""
    while True:  # drain the terminal as the child writes (it would block on a full buffer)
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed its end
            break
        if not chunk:
            break
        err += chunk
    with p.stdout:
        out = p.stdout.read().decode()
    p.wait(timeout=300)
    os.close(master)
    return p.returncode, out, err.decode(errors="replace")


def test_a_search_on_a_terminal_shows_the_bar_on_stderr_only():
    rc, out, err = run(SEARCH, tty=True)
    assert rc == 0, err
    assert "simulating" in err and "\x1b[?25l" in err  # the bar, its cursor hidden
    # the bar's count: at most the bound, 1..8 replicas of TP1 bisected (8 .bit_length() = 4)
    # plus TP2 (4 -> 3), TP4 (2 -> 2), TP8 (1 -> 1): 10 simulations; then each of the search's
    # 7 KV dtype / token budget variants (fp8 KV x the budgets 2048, 8192, 16384, less the
    # default) at most as many again plus one probe per layout: 7 x (10 + 4) = 98, 108 in all
    assert "/108" in err
    assert "simulating" not in out and "\x1b[" not in out and "layouts tried" in out


def test_json_and_a_pipe_show_no_bar():
    rc, out, err = run(SEARCH + ["--json"], tty=True)
    assert rc == 0 and "simulating" not in err and "\x1b[?25l" not in err
    assert json.loads(out)["meets_slo"] is True
    rc, out, err = run(SEARCH, tty=False)
    assert rc == 0 and "simulating" not in err and "\x1b[" not in err


def test_the_search_reports_each_simulation_against_its_bound():
    from gpuplan.capacity import SLO, make_workload, parse_dist
    from gpuplan.capacity._search import search
    from gpuplan.hardware import resolve_gpu
    from gpuplan.job import Job
    from gpuplan.models import load_model

    model = load_model("llama-3.1-8b")
    gpu, _ = resolve_gpu("h100")
    job = Job(model="llama-3.1-8b", mode="infer", engine="vllm")
    wl = make_workload(rate=8, requests=40, input=parse_dist("500", what="input"),
                       output=parse_dist("16", what="output"))
    seen, totals = [], []
    search(model, gpu, job, wl, SLO(ttft_s=1.0, tpot_s=0.05), max_gpus=8, max_model_len=4096,
           progress=lambda: seen.append(1), progress_total=totals.append)
    assert totals == [108]  # the bound above
    assert 4 <= len(seen) <= 108  # at least one simulation per layout (4 layouts), at most the bound
