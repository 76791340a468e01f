"""Model inputs: the shipped catalog of popular architectures (their config.json numbers), a
user's config.json or model directory, safetensors headers, or a bare parameter count.

Every route ends in a :class:`Model`: exact parameter tensors split by component, and the
:class:`Architecture` when one is known.
"""

from __future__ import annotations

from ._types import COMPONENTS, Architecture, Model, ParamCounts, ParamTensor

__all__ = [
    "COMPONENTS", "Architecture", "Model", "ParamCounts", "ParamTensor",
    "load_model", "from_param_count", "catalog_names", "catalog_config", "architecture_from_config",
]


def load_model(spec: str) -> Model:  # pragma: no cover - implemented by the models work
    """A catalog name (``llama-3.1-8b``), a config.json path, or a model directory
    (config.json and optionally *.safetensors) -> :class:`Model`."""
    raise NotImplementedError


def from_param_count(n: int, *, name: str | None = None) -> Model:  # pragma: no cover
    """A model known only by its parameter count (``--params 7B``)."""
    raise NotImplementedError


def catalog_names() -> tuple[str, ...]:  # pragma: no cover
    raise NotImplementedError


def catalog_config(name: str) -> dict:  # pragma: no cover
    """The raw config.json dict of a catalog model (for transformers / the trace)."""
    raise NotImplementedError


def architecture_from_config(config: dict, *, name: str, source: str = "") -> Architecture:  # pragma: no cover
    raise NotImplementedError
