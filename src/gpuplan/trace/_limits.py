"""Limits of the trace (no torch here: the package re-exports them)."""

from __future__ import annotations

#: ``--real`` runs the step with real tensors on this machine's CPU: small models only.
REAL_MAX_PARAMS = 400_000_000

#: Recipes the sharded (FSDP2) trace runs -> the step's own recipe (FSDP2's mixed precision is a
#: policy over an fp32 model).
SHARDED_RECIPES = {"fp32": "fp32", "bf16": "bf16", "mixed-bf16": "fp32"}
