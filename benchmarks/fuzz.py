"""The large fuzzing budget of issue 14: ``python benchmarks/fuzz.py TARGET N [SEED]``.

TARGET is ``config`` (config.json reader), ``safetensors`` (safetensors header reader), ``cli``
(command lines), ``api`` (Job + plan, and the web API's fit), one of issue 32's structure-aware
targets of ``tests/fuzz/fuzz_surfaces.py`` (``gguf``, ``safetensors_struct``, ``config_plan``,
``hf_cache``, ``bench_store``, ``api_args``), qa43's targets of the recent features
(``tests/fuzz/fuzz_features.py``: ``features``, ``workload``, ``export``, ``web``), ``all`` (each of those in its own interpreter, N
inputs each), or ``kill`` (N SIGKILLs during bench writes, :func:`fuzz_targets.kill_writers`).
Each target first runs issue 32's reproducers for it; every input runs under a 3 GB address-space
limit (a MemoryError is counted as over 3 GB) and a 10 s alarm. The web server's raw requests
are ``benchmarks/fuzz_server.py``. The inputs come from the shared generators of
``tests/fuzz/fuzz_targets.py`` (the same ones the CI run drives with hypothesis), from a seeded
``random.Random``, so a run is reproducible. Printed as one JSON line: inputs, tracebacks
(exceptions other than InputError, with the first few inputs), outcomes that break the promise,
calls over 2 s, the slowest call, peak memory (ru_maxrss) and the exit codes seen. The figures are
recorded in ``benchmarks/fuzz_results.md``.
"""

from __future__ import annotations

import collections
import json
import os
import random
import resource
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "fuzz"))
sys.path.insert(0, str(ROOT / "src"))

import fuzz_surfaces as fs  # noqa: E402
import fuzz_targets as ft  # noqa: E402

TARGETS = {
    "config": (ft.config_bytes, ft.read_config),
    "safetensors": (ft.safetensors_bytes, ft.read_safetensors),
    "cli": (ft.cli_argv, ft.run_cli),
    "api": (ft.api_call, ft.run_api),
    **fs.TARGETS,
}

#: Issue 32's bounds on every input: the address space (what ``ulimit -v`` sets) and the time.
LIMIT_AS = 3 * 1024**3
LIMIT_S = 10


class _Hang(BaseException):
    pass


def _alarm(*_a) -> None:
    raise _Hang()


def fuzz(target: str, n: int, seed: int) -> dict:
    """``n`` inputs of ``target`` after the issue's reproducers for it, each under the address
    space limit (set on this process: a MemoryError is an input over 3 GB) and an alarm."""
    make, run = TARGETS[target]
    rng = random.Random(seed)
    signal.signal(signal.SIGALRM, _alarm)
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT_AS, LIMIT_AS))
    rcs: collections.Counter = collections.Counter()
    tracebacks, broken, hangs, over_memory, slow = [], [], [], [], 0
    slowest, rss_step = (0.0, None), (0, None)
    todo = list(fs.reproducers().get(target, []))
    for i in range(n + len(todo)):
        arg = todo[i] if i < len(todo) else make(rng)
        t = time.perf_counter()
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        signal.alarm(LIMIT_S)
        try:
            o = ft.outcome(run, arg)
        except _Hang:
            hangs.append(repr(arg)[:200])
            continue
        except MemoryError:
            over_memory.append(repr(arg)[:200])
            continue
        except Exception as e:  # noqa: BLE001 -- counting every one is the point
            tb = traceback.extract_tb(e.__traceback__)[-1]
            tracebacks.append(f"{type(e).__name__}: {str(e)[:120]} at {tb.filename}:{tb.lineno} "
                              f"for {repr(arg)[:200]}")
            continue
        finally:
            signal.alarm(0)
        dt = time.perf_counter() - t
        grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss
        if grew > rss_step[0]:
            rss_step = (grew, repr(arg)[:200])
        slow += dt >= 2.0
        if dt > slowest[0]:
            slowest = (dt, repr(arg)[:200])
        rcs[o["rc"]] += 1
        why = ft.check_outcome(o)
        if why:
            broken.append(f"{why} for {repr(arg)[:200]}")
    return {"target": target, "inputs": n + len(todo), "reproducers": len(todo), "seed": seed,
            "tracebacks": len(tracebacks), "broken": len(broken), "hangs_10s": len(hangs),
            "over_3gb": len(over_memory), "calls_over_2s": slow,
            "slowest_s": round(slowest[0], 3), "slowest_input": slowest[1],
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "largest_rss_step_mb": round(rss_step[0] / 1024, 1), "largest_step_input": rss_step[1],
            "exit_codes": dict(rcs), "first_tracebacks": tracebacks[:5],
            "first_broken": broken[:5], "first_hangs": hangs[:3],
            "first_over_3gb": over_memory[:3]}


def fuzz_all(n: int, seed: int) -> None:
    """Every target in its own interpreter (one JSON line each), so each has the whole limit."""
    import subprocess

    for target in TARGETS:
        t = time.perf_counter()
        p = subprocess.run([sys.executable, __file__, target, str(n), str(seed)],
                           capture_output=True, text=True)
        line = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else json.dumps(
            {"target": target, "rc": p.returncode, "stderr": p.stderr[-2000:]})
        d = json.loads(line)
        d["wall_s"] = round(time.perf_counter() - t, 1)
        print(json.dumps(d), flush=True)


def main() -> None:
    target, n = sys.argv[1], int(sys.argv[2])
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 14
    if target == "all":
        return fuzz_all(n, seed)
    os.environ.setdefault("GPUPLAN_BENCH_DB", str(Path(tempfile.mkdtemp()) / "empty.sqlite"))
    result = ft.kill_writers(n, seed) if target == "kill" else fuzz(target, n, seed)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
