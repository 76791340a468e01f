"""Measuring this machine (``gpuplan bench``) and profiling a training loop (``gpuplan profile``).

Importing this package never imports torch: the bench imports it when a measurement runs, and the
stored results (:mod:`gpuplan.measure.store`) are read with the standard library only -- which is
how the speed model uses this machine's measured throughput and bandwidth.
"""

from __future__ import annotations

from ._bench_types import (
    BandwidthResult, BenchRun, Crossover, GPUInfo, Machine, MatmulResult, OverheadResult,
    crossovers, matmul_flops,
)
from .bench import BenchConfig, run_bench
from .store import (
    Measured, StoreError, default_db_path, latest_run, list_runs, load_run, machine_fingerprint,
    save_run,
)

__all__ = [
    "BenchConfig", "run_bench",
    "BenchRun", "MatmulResult", "BandwidthResult", "OverheadResult", "Crossover", "Machine",
    "GPUInfo", "crossovers", "matmul_flops",
    "Measured", "StoreError", "default_db_path", "latest_run", "list_runs", "load_run",
    "save_run", "machine_fingerprint",
]
