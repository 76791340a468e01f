"""Model inputs: the shipped catalog of popular architectures (their config.json numbers), a
user's config.json or model directory, safetensors headers, a .gguf file's header, a Hugging Face
hub id found in the local cache (or fetched with ``download=True``: config and headers only), or a
bare parameter count.

Every route ends in a :class:`Model`: exact parameter tensors split by component, and the
:class:`Architecture` when one is known. Importing this package imports neither torch nor numpy;
reading *.safetensors headers imports the ``safetensors`` library (and numpy), a .gguf file the
``gguf`` package, and a hub id ``huggingface_hub``, each when it happens.
"""

from __future__ import annotations

from collections.abc import Mapping

from ._catalog import (CatalogEntry, catalog_config, catalog_entry, catalog_keys,
                       catalog_names)
from ._counts import count_params
from ._families import HF_CLASSES, SUPPORTED_FAMILIES, build_architecture
from ._ggml import GGML_TYPES, ggml_tensor_bytes
from ._lora import DEFAULT_LORA_TARGETS, lora_linears
from ._load import from_param_count, load_model, model_from_config_bytes, model_from_gguf
from ._types import COMPONENTS, Architecture, Model, ParamCounts, ParamTensor

__all__ = [
    "COMPONENTS", "Architecture", "Model", "ParamCounts", "ParamTensor", "CatalogEntry",
    "SUPPORTED_FAMILIES", "HF_CLASSES",
    "load_model", "from_param_count", "model_from_config_bytes", "catalog_names", "catalog_config", "catalog_entry",
    "catalog_keys", "architecture_from_config", "count_params", "read_header",
    "is_hub_id", "model_from_gguf", "GGML_TYPES", "ggml_tensor_bytes",
    "DEFAULT_LORA_TARGETS", "lora_linears",
]


def architecture_from_config(config: Mapping[str, object], *, name: str,
                             source: str = "") -> Architecture:
    """Normalize a config.json dict into an :class:`Architecture` with its exact tensor list.

    Raises :class:`~gpuplan.errors.ModelFileError` naming ``source`` (or ``name``) and the key
    for a missing or malformed value, and for a ``model_type`` outside
    :data:`SUPPORTED_FAMILIES`.
    """
    arch, _notes = build_architecture(config, name=name, source=source, where=source or name)
    return arch


def __getattr__(name: str):
    """The safetensors and hub readers on first use (PEP 562): a catalog name needs neither."""
    if name == "read_header":
        from ._safetensors import read_header as value
    elif name == "is_hub_id":
        from ._hub import is_hub_id as value
    else:
        raise AttributeError(f"module 'gpuplan.models' has no attribute {name!r}")
    return value
