"""Measuring this machine (``gpuplan bench``) and profiling a training loop (``gpuplan profile``).

- :mod:`gpuplan.measure.bench`: the bench (run, timing, result types, machine identity);
- :mod:`gpuplan.measure.store`: the bench database (standard library only);
- :mod:`gpuplan.measure.profile`: the training-loop profiler (:class:`~gpuplan.measure.profile.Profiler`).

Importing this package never imports torch: the bench imports it when a measurement runs, and the
stored results (:mod:`gpuplan.measure.store`) are read with the standard library only -- which is
how the speed model uses this machine's measured throughput and bandwidth.
"""

from __future__ import annotations

_BENCH_NAMES = frozenset({
    "BenchConfig", "run_bench", "BenchRun", "MatmulResult", "BandwidthResult", "OverheadResult",
    "Crossover", "Machine", "GPUInfo", "crossovers", "matmul_flops",
})
_STORE_NAMES = frozenset({
    "Measured", "StoreError", "default_db_path", "latest_run", "list_runs", "load_run", "save_run",
    "machine_fingerprint",
})

__all__ = [
    "BenchConfig", "run_bench",
    "BenchRun", "MatmulResult", "BandwidthResult", "OverheadResult", "Crossover", "Machine",
    "GPUInfo", "crossovers", "matmul_flops",
    "Measured", "StoreError", "default_db_path", "latest_run", "list_runs", "load_run",
    "save_run", "machine_fingerprint",
]


def __getattr__(name: str):
    # Loaded on first use (PEP 562): the speed model imports gpuplan.measure._paths on every
    # planning command to find the stored bench results, and that must not pay for the bench and
    # the store (about 60 ms) when nothing has been measured.
    if name in _BENCH_NAMES:
        from . import bench

        return getattr(bench, name)
    if name in _STORE_NAMES:
        from . import store

        return getattr(store, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
