"""The analytic planner against the traced peaks of the validation zoo (no torch needed).

Reads ``trace_zoo_results.json`` (written by ``benchmarks/trace_zoo.py``, which traces every case
under FakeTensorMode with CUDA's dispatch emulated) and plans the same jobs with
``gpuplan.memory``: train amp-bf16 + AdamW (foreach) + sdpa, infer bf16 + sdpa, overhead excluded.

    PYTHONPATH=src python benchmarks/activation_agreement.py   # writes activation_agreement.md
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "integration"))


def main() -> int:
    from test_trace_agreement import analytic

    rows = [r for r in json.loads((HERE / "trace_zoo_results.json").read_text())["rows"]
            if r.get("traced_bytes")]
    lines = ["# Analytic planner vs traced peaks (validation zoo)", "",
             "Regenerate with `PYTHONPATH=src python benchmarks/activation_agreement.py`; the "
             "traced peaks come from `benchmarks/trace_zoo_results.json` "
             "(`benchmarks/trace_zoo.py`). Overhead excluded from the analytic total (a trace has "
             "none).", "",
             "| model | mode | batch x seq | checkpointing | traced | phase | analytic | phase | error |",
             "|---|---|---|---|---|---|---|---|---|"]
    worst = 0.0
    for r in rows:
        a, ph = analytic(r["model"], r["mode"], r["batch"], r["seq"], r["checkpointing"])
        err = (a - r["traced_bytes"]) / r["traced_bytes"]
        worst = max(worst, abs(err))
        lines.append(f"| {r['model']} | {r['mode']} | {r['batch']} x {r['seq']} | "
                     f"{r['checkpointing']} | {r['traced_bytes'] / 1e9:.3f} GB | {r['peak_phase']} | "
                     f"{a / 1e9:.3f} GB | {ph} | {100 * err:+.2f}% |")
    lines += ["", f"{len(rows)} cases; largest error {100 * worst:.2f}%."]
    (HERE / "activation_agreement.md").write_text("\n".join(lines) + "\n")
    print(lines[-1])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
