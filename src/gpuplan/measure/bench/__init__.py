"""``gpuplan bench``: measure this machine -- CPU vs GPU matmul, bandwidth, transfers, launch overhead.

- :mod:`.run`: :func:`run_bench` and its :class:`BenchConfig` (torch imported when a run starts);
- :mod:`.timing`: the torch-free timing loop (warm-up, synchronized blocks, median + IQR);
- :mod:`.types`: the result values (:class:`BenchRun` and its parts), standard library only;
- :mod:`.machine`: which machine a run was measured on (the key stored runs are matched on).

Importing this package never imports torch.
"""

from __future__ import annotations

from .machine import machine_fingerprint, machine_key
from .run import BENCH_DTYPES, DEFAULT_BUDGET_S, BenchConfig, import_torch, max_size_for, run_bench
from .types import (
    BandwidthResult, BenchRun, Crossover, GPUInfo, Machine, MatmulResult, OverheadResult,
    crossovers, matmul_flops,
)

__all__ = [
    "BenchConfig", "run_bench", "import_torch", "max_size_for", "BENCH_DTYPES", "DEFAULT_BUDGET_S",
    "BenchRun", "MatmulResult", "BandwidthResult", "OverheadResult", "Crossover", "Machine",
    "GPUInfo", "crossovers", "matmul_flops", "machine_fingerprint", "machine_key",
]
