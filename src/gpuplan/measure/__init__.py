"""Measuring this machine (``gpuplan bench``) and profiling a training loop (``gpuplan profile``).

Importing this package never imports torch: the bench imports it when a measurement runs, and the
stored results (:mod:`gpuplan.measure.store`) are read with the standard library only -- which is
how the speed model uses this machine's measured throughput and bandwidth.
"""

from __future__ import annotations

# Exported lazily (PEP 562): importing this package, as every command does to find the stored
# bench results, must not pay for the bench and profiler modules.
_EXPORTS = {
    "BandwidthResult": "._bench_types", "BenchRun": "._bench_types", "Crossover": "._bench_types",
    "GPUInfo": "._bench_types", "Machine": "._bench_types", "MatmulResult": "._bench_types",
    "OverheadResult": "._bench_types", "crossovers": "._bench_types",
    "matmul_flops": "._bench_types",
    "BenchConfig": ".bench", "run_bench": ".bench",
    "Measured": ".store", "StoreError": ".store", "default_db_path": ".store",
    "latest_run": ".store", "list_runs": ".store", "load_run": ".store",
    "machine_fingerprint": ".store", "save_run": ".store",
}

__all__ = [
    "BenchConfig", "run_bench",
    "BenchRun", "MatmulResult", "BandwidthResult", "OverheadResult", "Crossover", "Machine",
    "GPUInfo", "crossovers", "matmul_flops",
    "Measured", "StoreError", "default_db_path", "latest_run", "list_runs", "load_run",
    "save_run", "machine_fingerprint",
]


def __getattr__(name: str):
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
