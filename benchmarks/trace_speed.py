"""Speed and memory of the trace itself.

Targets (issue 4): a Llama-3.1-8B training step (batch 1, seq 2048, amp-bf16, AdamW) traced in
under 60 s and under 4 GB resident memory on a 2-core machine; a 70B inference trace in under 60 s.

Each case runs in a fresh Python process (so peak RSS is the trace's own, imports included) and is
timed twice: the trace call alone (``TraceResult.seconds``: model build and the two iterations) and
the whole process wall time (interpreter start, torch/transformers imports included).

    PYTHONPATH=src python benchmarks/trace_speed.py     # writes trace_speed_results.md
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

CASES = [
    dict(label="Llama-3.1-8B training step", model="llama-3.1-8b", mode="train", batch=1,
         seq=2048, precision="amp-bf16", optimizer="adamw", target_s=60, target_rss_gb=4),
    dict(label="Llama-3.1-70B inference (prefill + 1 decode)", model="llama-3.1-70b",
         mode="infer", batch=1, seq=2048, precision="bf16", target_s=60, target_rss_gb=None),
    dict(label="Llama-3.1-70B inference, batch 8 x 8192", model="llama-3.1-70b", mode="infer",
         batch=8, seq=8192, precision="bf16", target_s=60, target_rss_gb=None),
]

_CHILD = """
import json, resource, sys, time
t0 = time.perf_counter()
from gpuplan.trace import trace_step
case = json.loads(sys.argv[1])
kw = {k: case[k] for k in ("mode", "batch", "seq", "precision")}
if case["mode"] == "train":
    kw["optimizer"] = case["optimizer"]
r = trace_step(case["model"], **kw)
print(json.dumps({"trace_s": r.seconds, "total_s": time.perf_counter() - t0,
                  "rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "peak_bytes": r.total_bytes, "peak_phase": r.peak_phase,
                  "params": r.params}))
"""


def run_case(case: dict) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(HERE.parent / "src") + os.pathsep + env.get("PYTHONPATH", "")
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(case)], capture_output=True,
                         text=True, env=env, check=True)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    res["process_s"] = time.perf_counter() - t0
    return res


def main() -> int:
    import torch
    import transformers

    rows = []
    for case in CASES:
        res = run_case(case)
        rows.append((case, res))
        print(f"{case['label']:48s} trace {res['trace_s']:6.1f} s, process {res['process_s']:6.1f} s, "
              f"peak RSS {res['rss_kb'] / 1e6:5.2f} GB, traced peak {res['peak_bytes'] / 1e9:.1f} GB "
              f"({res['peak_phase']})", flush=True)
    lines = [
        "# Trace speed and memory",
        "",
        f"Regenerate with `PYTHONPATH=src python benchmarks/trace_speed.py` "
        f"({datetime.date.today().isoformat()}; {platform.machine()}, {os.cpu_count()} CPUs, "
        f"{torch.get_num_threads()} torch threads; torch {torch.__version__}, transformers "
        f"{transformers.__version__}). Each case is a fresh process; other work shared the "
        "machine, so times are indicative.",
        "",
        "| case | trace time | process wall time | peak RSS | target | traced peak |",
        "|---|---|---|---|---|---|",
    ]
    for case, res in rows:
        target = f"< {case['target_s']} s" + (f", < {case['target_rss_gb']} GB RSS"
                                              if case["target_rss_gb"] else "")
        lines.append(f"| {case['label']} | {res['trace_s']:.1f} s | {res['process_s']:.1f} s | "
                     f"{res['rss_kb'] / 1e6:.2f} GB | {target} | {res['peak_bytes'] / 1e9:.1f} GB "
                     f"({res['peak_phase']}) |")
    lines += ["", "Trace time: `TraceResult.seconds` (model build under FakeTensorMode and the "
              "two iterations, or prefill + decode). Process wall time adds interpreter start and "
              "the torch/transformers imports. Peak RSS: `ru_maxrss` of the process."]
    (HERE / "trace_speed_results.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
