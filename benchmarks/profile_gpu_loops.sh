#!/usr/bin/env bash
# One run of the prepared GPU loops (needs a CUDA GPU; a few minutes). Results: benchmarks/profile_gpu_results/ (or $OUT).
cd "$(dirname "$0")/.." && PYTHONPATH=src "${PYTHON:-python}" benchmarks/profile_gpu_loops.py --out "${OUT:-benchmarks/profile_gpu_results}" "$@"
