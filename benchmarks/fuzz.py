"""The large fuzzing budget of issue 14: ``python benchmarks/fuzz.py TARGET N [SEED]``.

TARGET is ``config`` (config.json reader), ``safetensors`` (safetensors header reader), ``cli``
(command lines), ``api`` (Job + plan, and the web API's fit) or ``kill`` (N SIGKILLs during bench
writes, :func:`fuzz_targets.kill_writers`). The inputs come from the shared generators of
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

import fuzz_targets as ft  # noqa: E402

TARGETS = {
    "config": (ft.config_bytes, ft.read_config),
    "safetensors": (ft.safetensors_bytes, ft.read_safetensors),
    "cli": (ft.cli_argv, ft.run_cli),
    "api": (ft.api_call, ft.run_api),
}


class _Hang(BaseException):
    pass


def _alarm(*_a) -> None:
    raise _Hang()


def fuzz(target: str, n: int, seed: int) -> dict:
    make, run = TARGETS[target]
    rng = random.Random(seed)
    signal.signal(signal.SIGALRM, _alarm)
    rcs: collections.Counter = collections.Counter()
    tracebacks, broken, hangs, slow = [], [], [], 0
    slowest = (0.0, None)
    for _ in range(n):
        arg = make(rng)
        t = time.perf_counter()
        signal.alarm(10)
        try:
            o = ft.outcome(run, arg)
        except _Hang:
            hangs.append(repr(arg)[:200])
            continue
        except Exception as e:  # noqa: BLE001 -- counting every one is the point
            tb = traceback.extract_tb(e.__traceback__)[-1]
            tracebacks.append(f"{type(e).__name__}: {str(e)[:120]} at {tb.filename}:{tb.lineno} "
                              f"for {repr(arg)[:200]}")
            continue
        finally:
            signal.alarm(0)
        dt = time.perf_counter() - t
        slow += dt >= 2.0
        if dt > slowest[0]:
            slowest = (dt, repr(arg)[:200])
        rcs[o["rc"]] += 1
        why = ft.check_outcome(o)
        if why:
            broken.append(f"{why} for {repr(arg)[:200]}")
    return {"target": target, "inputs": n, "seed": seed, "tracebacks": len(tracebacks),
            "broken": len(broken), "hangs_10s": len(hangs), "calls_over_2s": slow,
            "slowest_s": round(slowest[0], 3), "slowest_input": slowest[1],
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "exit_codes": dict(rcs), "first_tracebacks": tracebacks[:5],
            "first_broken": broken[:5], "first_hangs": hangs[:3]}


def main() -> None:
    target, n = sys.argv[1], int(sys.argv[2])
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 14
    os.environ.setdefault("GPUPLAN_BENCH_DB", str(Path(tempfile.mkdtemp()) / "empty.sqlite"))
    result = ft.kill_writers(n, seed) if target == "kill" else fuzz(target, n, seed)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
