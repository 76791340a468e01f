#!/usr/bin/env bash
# Record `gpuplan bench` on this (CPU-only) machine: the full sweep with every thread, and a
# single-thread sweep (fp32, bf16, N <= 4096) that stays meaningful when the machine is shared.
# Then write benchmarks/bench_cpu_results.md from the two JSON files.
#
#     bash benchmarks/bench_cpu_record.sh          # from the repository root; ~3-5 minutes
set -euo pipefail
PY=${PYTHON:-python3}
export PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}"
export GPUPLAN_BENCH_DB=${GPUPLAN_BENCH_DB:-$(mktemp -d)/bench.sqlite}
cd "$(dirname "$0")/.."

"$PY" -m gpuplan bench --sweep --json --plot benchmarks/bench_cpu_sweep.png \
  > benchmarks/bench_cpu_results.json
"$PY" -m gpuplan bench --sweep --threads 1 --dtype fp32 --dtype bf16 \
  --size 64 --size 128 --size 256 --size 512 --size 1024 --size 2048 --size 4000 --size 4096 \
  --json --plot benchmarks/bench_cpu_sweep_1thread.png > benchmarks/bench_cpu_results_1thread.json
"$PY" benchmarks/bench_cpu_report.py benchmarks/bench_cpu_results.json \
  benchmarks/bench_cpu_results_1thread.json > benchmarks/bench_cpu_results.md
echo "wrote benchmarks/bench_cpu_results.md"
