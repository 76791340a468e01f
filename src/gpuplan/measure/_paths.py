"""Where the bench database lives: decided once, in the speed model's standard-library reader
(:mod:`gpuplan.compute.measured`), which ``gpuplan.measure`` imports (the arrow points down)."""

from __future__ import annotations

from ..compute.measured import db_path, default_db_path

__all__ = ["default_db_path", "db_path"]
