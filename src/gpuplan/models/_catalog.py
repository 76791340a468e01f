"""The shipped catalog: one JSON file per model in ``models/catalog/``.

Each file is the published config.json's numbers (facts, unchanged) plus a ``_gpuplan`` block:
``name`` (the catalog key), ``aliases``, ``source`` (the URL of the config.json on the Hugging
Face Hub), ``hf_class`` (the class whose parameters are counted) and optional ``notes``. NeMo's
GPT-3 and Nemotron have no config.json on the Hub: their ``source`` is the
NeMo-Framework-Launcher training yaml at a commit, its numbers written in the keys of the
transformers class with the same tensors (the notes map each).
Lookups are case-insensitive over names and aliases.
"""

from __future__ import annotations

import copy
import json
from functools import cache
import os

from .._record import record
from ..errors import ModelFileError, UnknownNameError
from ._counts import count_params
from ._families import HF_CLASSES, build_architecture
from ._types import Architecture, Model

__all__ = ["CatalogEntry", "catalog_names", "catalog_entry", "catalog_config",
           "catalog_architecture", "catalog_model", "resolve_catalog_name", "catalog_keys"]

_META = "_gpuplan"


@record
class CatalogEntry:
    """A catalog model's identity and provenance."""

    name: str
    """The catalog key (``llama-3.1-8b``)."""
    aliases: tuple[str, ...]
    """Other accepted names, including the Hub repository id."""
    source: str
    """URL of the config.json the numbers come from (for NeMo's models: the training yaml)."""
    hf_class: str
    """The transformers class whose parameters are counted."""
    family: str
    """config.json ``model_type``."""
    notes: str = ""
    """Which version, and anything that differs from the file at ``source``."""


@cache
def _load() -> tuple[dict[str, tuple[CatalogEntry, dict]], dict[str, str]]:
    entries: dict[str, tuple[CatalogEntry, dict]] = {}
    index: dict[str, str] = {}
    folder = os.path.join(os.path.dirname(__file__), "catalog")
    for fname in sorted(os.listdir(folder)):
        if not fname.endswith(".json"):
            continue
        where = f"gpuplan catalog file {fname}"
        try:
            with open(os.path.join(folder, fname), encoding="utf-8") as f:
                raw = json.load(f)
            meta = raw.pop(_META)
            entry = CatalogEntry(name=meta["name"], aliases=tuple(meta.get("aliases", ())),
                                 source=meta["source"], hf_class=meta["hf_class"],
                                 family=raw["model_type"], notes=meta.get("notes", ""))
        except (ValueError, KeyError, TypeError, AttributeError) as e:  # a packaging bug
            raise ModelFileError(where, f"malformed catalog entry ({e!r})") from None
        if HF_CLASSES.get(entry.family) != entry.hf_class:
            raise ModelFileError(where, f"hf_class {entry.hf_class} does not match the "
                                        f"{entry.family} family")
        for key in (entry.name, *entry.aliases):
            low = key.lower()
            if low in index:
                raise ModelFileError(where, f"name {key!r} is already used by {index[low]}")
            index[low] = entry.name
        entries[entry.name] = (entry, raw)
    return entries, index


def catalog_names() -> tuple[str, ...]:
    """Every catalog model's name, sorted."""
    return tuple(sorted(_load()[0]))


def catalog_keys() -> tuple[str, ...]:
    """Names and aliases (what "did you mean" chooses from)."""
    entries = _load()[0]
    return tuple(k for e, _ in entries.values() for k in (e.name, *e.aliases))


def resolve_catalog_name(spec: str) -> str | None:
    """The catalog name ``spec`` refers to (case-insensitive, aliases included), or None."""
    return _load()[1].get(spec.strip().lower())


def _get(name: str) -> tuple[CatalogEntry, dict]:
    key = resolve_catalog_name(name)
    if key is None:
        raise UnknownNameError("model", name, catalog_keys(),
                               hint="`gpuplan models` lists the catalog")
    return _load()[0][key]


def catalog_entry(name: str) -> CatalogEntry:
    return _get(name)[0]


def catalog_config(name: str) -> dict:
    """A fresh copy of the catalog model's config.json dict (without the ``_gpuplan`` block), for
    transformers (``AutoConfig.for_model(**cfg)``) or the trace."""
    return copy.deepcopy(_get(name)[1])


@cache
def _built(name: str) -> tuple[Architecture, tuple[str, ...]]:
    entry, raw = _get(name)
    return build_architecture(raw, name=entry.name, source=entry.source,
                              where=f"catalog model {entry.name}")


def catalog_architecture(name: str) -> Architecture:
    return _built(resolve_catalog_name(name) or name)[0]


@cache
def catalog_model(name: str) -> Model:
    entry = catalog_entry(name)
    arch, built_notes = _built(entry.name)
    # the reader's notes (multi-token-prediction layers, the shipped weight format ...) follow
    # the entry's own
    notes = ((entry.notes,) if entry.notes else ()) + built_notes
    return Model(name=entry.name, params=count_params(arch.tensors, arch), tensors=arch.tensors,
                 architecture=arch, source="catalog", notes=notes)
