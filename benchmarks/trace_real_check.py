"""The fake trace against a real CPU run of the same step, at sizes too slow for the test suite.

GPT-2 small (the catalog's full config) at batch 2, seq 256: amp-bf16 + AdamW, with and without
full checkpointing, and inference. ``--device cpu --real`` runs the step with real tensors under the
same recorder and emulations, so any difference is a fake-tensor artefact. The test suite runs the
same comparison on reduced configs (tests/integration/test_trace.py).

    PYTHONPATH=src python benchmarks/trace_real_check.py    # writes trace_real_check_results.md
"""

from __future__ import annotations

import datetime
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

CASES = [
    dict(mode="train", batch=2, seq=256, precision="amp-bf16", checkpointing="none"),
    dict(mode="train", batch=2, seq=256, precision="amp-bf16", checkpointing="selective",
         attention="eager"),
    dict(mode="train", batch=2, seq=256, precision="amp-bf16", checkpointing="full"),
    dict(mode="train", batch=2, seq=256, precision="mixed-bf16", checkpointing="none"),
    dict(mode="infer", batch=2, seq=256, precision="bf16"),
]


def main() -> int:
    import torch
    import transformers

    from gpuplan.trace import trace_step

    lines = [
        "# Fake trace vs real CPU run: GPT-2 small",
        "",
        f"Regenerate with `PYTHONPATH=src python benchmarks/trace_real_check.py` "
        f"({datetime.date.today().isoformat()}; torch {torch.__version__}, transformers "
        f"{transformers.__version__}). Bytes at each run's own peak, 512-byte rounding included.",
        "",
    ]
    for case in CASES:
        t0 = time.perf_counter()
        r = trace_step("gpt2", real=True, **case)
        m = r.measured
        title = ", ".join(f"{k} {v}" for k, v in case.items())
        lines += [f"## {title}", "",
                  f"traced peak {r.total_bytes:,} B ({r.peak_phase}); measured "
                  f"{m.peak_bytes:,} B ({m.peak_phase}); measured / traced = {m.ratio:.6f}; "
                  f"trace {r.seconds:.1f} s, real run {m.seconds:.1f} s", "",
                  "| field | traced | real | difference |", "|---|---|---|---|"]
        for k, v in r.per_gpu.items():
            mv = m.per_gpu[k]
            lines.append(f"| {k} | {v:,} | {mv:,} | {mv - v:+,} |")
        for ph, v in r.phase_peaks.items():
            mv = m.phase_peaks[ph]
            lines.append(f"| peak of the {ph} phase | {v:,} | {mv:,} | {mv - v:+,} |")
        lines.append("")
        print(title, r.total_bytes, m.peak_bytes, f"{m.ratio:.6f}",
              f"{time.perf_counter() - t0:.1f}s", flush=True)
    (HERE / "trace_real_check_results.md").write_text("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
