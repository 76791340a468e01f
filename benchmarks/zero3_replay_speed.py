"""How long one plan takes where the DeepSpeed ZeRO-3 replay dominates (issue 32), and how many
coordinator steps it runs.

The cases: the fuzzer's slowest config_plan input (10,000 experts of 1e6 x 64 in 2 layers,
planned with ``plan(job, ["h100"], speed=False)``: nine per-rank replays of 60,005-120,009 uses)
and catalog MoE models under ``--gpus 64 --zero 3``. CPU seconds (``time.process_time``) of one
plan in a fresh process, with the replay cache empty; steps as ``engines.zero3._coordinator``
reports them. Rows go to solver_speed_results.md by hand, beside the commit measured.

    PYTHONPATH=src python benchmarks/zero3_replay_speed.py
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "fuzz"))


def main() -> int:
    import fuzz_surfaces as fs

    from gpuplan import Job, plan
    from gpuplan.engines import zero3
    from gpuplan.models import load_model
    from gpuplan.models._load import model_from_config_bytes

    call = fs._wide_experts()
    wide = model_from_config_bytes(json.dumps(call["config"]).encode())
    cases = [("config_plan reproducer", wide, call["job"])]
    for name in ("deepseek-v3", "qwen3-235b-a22b", "mixtral-8x7b"):
        cases.append((f"{name} --gpus 64 --zero 3", load_model(name),
                      dict(mode="train", batch=1, gpus=64, zero=3)))
    real = zero3._coordinator
    counts: list[tuple[int, int]] = []

    def counted(uses, *a, **kw):
        out = real(uses, *a, **kw)
        counts.append((len(uses), out[3]))
        return out

    zero3._coordinator = counted
    print("| case | replays | uses | steps | CPU s |")
    print("|---|---|---|---|---|")
    for name, m, kw in cases:
        zero3._replay.cache_clear()
        counts.clear()
        t = time.process_time()
        plan(Job(model=m, **kw), ["h100"], speed=False)
        dt = time.process_time() - t
        print(f"| {name} | {len(counts)} | {sum(u for u, _ in counts):,} | "
              f"{sum(s for _, s in counts):,} | {dt:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
