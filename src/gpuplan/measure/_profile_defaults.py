"""The profiler's defaults, in a module light enough for the CLI to import when it builds its parser."""

#: Steps left out at the start (lazy initialization, allocator warm-up, autotuning, compilation).
DEFAULT_WARMUP = 3
#: Steps the CLI measures after the warm-up.
DEFAULT_STEPS = 50
