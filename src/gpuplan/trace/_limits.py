"""Limits of the trace (no torch here: the package re-exports them)."""

from __future__ import annotations

#: ``--real`` runs the step with real tensors on this machine's CPU: small models only.
REAL_MAX_PARAMS = 400_000_000
