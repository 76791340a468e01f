"""Hugging Face hub ids (``meta-llama/Llama-3.1-8B``): the local cache, and ``--download``.

The cache is read through ``huggingface_hub``'s own API (``try_to_load_from_cache``,
``scan_cache_dir``), so ``HF_HOME`` / ``HF_HUB_CACHE`` and its layout
(``models--org--name/refs/main``, ``snapshots/<rev>/config.json``) are honoured exactly as
transformers honours them. ``--download`` fetches config.json (into that cache) and the
safetensors headers by HTTP byte ranges (``get_safetensors_metadata``): never the weights.
``huggingface_hub`` is the optional extra ``gpuplan[hub]``, imported only here, when a hub id is
given.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType

from .._record import record
from .._extras import require
from .._io import read_bounded
from ..errors import InputError, ModelFileError, opt, shown
from ._safetensors import DTYPE_BITS, HeaderTensor

__all__ = ["is_hub_id", "hub", "cache_dir", "cached_snapshot", "cached_repo_ids", "download",
           "Downloaded"]

# The hub's repo-id rule (huggingface_hub.utils.validate_repo_id): org/name, letters, digits and
# "-_.", no "--" or "..", at most 96 characters.
# \Z, not $: "$" also matches before a final newline, which let "org/name\n" through.
_HUB_ID = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*\Z")
#: What ``refs/main`` in the cache may hold: a commit hash (40 hex digits; 64 for SHA-256 repos).
_REF = re.compile(r"\A[0-9a-f]{40}([0-9a-f]{24})?\Z")
#: Largest ``refs/main`` read (a hash and a newline are 41 bytes).
MAX_REF_BYTES = 256

#: File endings that make an argument a path, never a hub id.
PATH_SUFFIXES = (".json", ".gguf", ".safetensors")


def is_hub_id(s: str) -> bool:
    """True when ``s`` has the shape of a hub model id (``org/name``) and not of a file path."""
    return (len(s) <= 96 and bool(_HUB_ID.match(s)) and "--" not in s and ".." not in s
            and not s.lower().endswith(PATH_SUFFIXES))


def hub(repo_id: str) -> ModuleType:
    """``huggingface_hub``, or the one-line missing-extra error."""
    # its submodules load lazily: name the two read here as attributes
    return require("huggingface_hub", "huggingface_hub.constants", "huggingface_hub.errors",
                   feature=f"reading the hub id {repo_id!r}")


def cache_dir(h: ModuleType) -> str:
    """The cache huggingface_hub reads (``HF_HUB_CACHE``, else ``$HF_HOME/hub``)."""
    return str(h.constants.HF_HUB_CACHE)


def _check_ref(h: ModuleType, repo_id: str) -> None:
    """``refs/main`` of ``repo_id`` in the cache, checked before huggingface_hub reads it (it
    reads the whole file as text: a huge or non-UTF-8 one was a traceback): at most
    :data:`MAX_REF_BYTES`, ASCII, a commit hash."""
    ref = Path(cache_dir(h)) / f"models--{repo_id.replace('/', '--')}" / "refs" / "main"
    if not ref.is_file():
        return
    text = read_bounded(ref, MAX_REF_BYTES, what="hub cache ref").decode("ascii", "replace")
    if not _REF.match(text.strip()):
        raise ModelFileError(ref, f"holds {shown(text.strip()[:60])}, not a commit hash; delete "
                                  "it (or the model's folder) and download again")


def cached_snapshot(h: ModuleType, repo_id: str) -> Path | None:
    """The snapshot folder of ``repo_id``'s ``main`` revision when the cache holds its
    config.json, else None."""
    got = cached_file(h, repo_id, "config.json")
    return got.parent if got is not None else None


def cached_file(h: ModuleType, repo_id: str, filename: str) -> Path | None:
    """One cached file of ``repo_id`` (main revision), or None."""
    _check_ref(h, repo_id)
    try:
        got = h.try_to_load_from_cache(repo_id, filename, cache_dir=cache_dir(h))
    except (OSError, ValueError) as e:  # UnicodeDecodeError is a ValueError
        raise ModelFileError(Path(cache_dir(h)), f"the cache entry of {repo_id} is unreadable: "
                                                 f"{type(e).__name__}") from None
    return Path(got) if isinstance(got, str) else None


def cached_repo_ids(h: ModuleType) -> list[str]:
    """Model repos in the cache (for "did you mean"); empty when there is no cache."""
    try:
        info = h.scan_cache_dir(cache_dir(h))
    except (h.CacheNotFound, OSError, ValueError):
        return []
    return sorted(r.repo_id for r in info.repos if r.repo_type == "model")


@record(kw_only=False)
class Downloaded:
    """What ``--download`` brought: config.json (now in the cache) and the safetensors headers."""

    config: Path
    headers: tuple[HeaderTensor, ...]
    notes: tuple[str, ...]


def _headers_from_metadata(repo_id: str, meta: object) -> tuple[HeaderTensor, ...]:
    """HeaderTensors from huggingface_hub's SafetensorsRepoMetadata, checked like a local header
    (known dtype, whole-number shape, byte span equal to shape x dtype size)."""
    out: list[HeaderTensor] = []
    for fname, fmeta in sorted(meta.files_metadata.items()):  # type: ignore[attr-defined]
        for name, info in fmeta.tensors.items():
            shape = tuple(info.shape)
            begin, end = info.data_offsets
            bits = DTYPE_BITS.get(info.dtype)
            if bits is None or not all(isinstance(d, int) and d >= 0 for d in shape):
                raise InputError(f"{repo_id}: {fname} header lists tensor {name!r} as "
                                 f"{info.dtype} {list(shape)}, which gpuplan cannot read")
            n = 1
            for d in shape:
                n *= d
            if n * bits != 8 * (end - begin):
                raise InputError(f"{repo_id}: {fname} header gives tensor {name!r} "
                                 f"{end - begin} bytes, but {info.dtype} {list(shape)} needs "
                                 f"{n * bits / 8:g}")
            out.append(HeaderTensor(name=name, dtype=info.dtype, shape=shape,
                                    nbytes=end - begin, file=fname))
    return tuple(out)


def _network_errors(h: ModuleType) -> tuple[type[BaseException], ...]:
    """What a failed connection raises: huggingface_hub's own offline errors, and the transport
    errors of whichever HTTP library this huggingface_hub version speaks through (httpx2 in 2.x,
    httpx in 1.x, requests before)."""
    import importlib  # noqa: PLC0415  (the hub boundary: only after a download failed)

    errs: list[type[BaseException]] = [h.errors.LocalEntryNotFoundError]
    errs += [e for e in (getattr(h.errors, "OfflineModeIsEnabled", None),) if e is not None]
    for module, attr in (("httpx2", "TransportError"), ("httpx", "TransportError"),
                         ("requests", "ConnectionError")):
        try:
            errs.append(getattr(importlib.import_module(module), attr))
        except (ImportError, AttributeError):
            continue
    return tuple(errs)


def download(h: ModuleType, repo_id: str) -> Downloaded:
    """Fetch ``repo_id``'s config.json and safetensors headers (not the weights). Every failure
    is one :class:`InputError` line: gated, missing, no config.json, or no network."""
    errors = h.errors
    try:
        config = Path(h.hf_hub_download(repo_id, "config.json", cache_dir=cache_dir(h)))
        notes: list[str] = []
        try:
            meta = h.get_safetensors_metadata(repo_id)
            headers = _headers_from_metadata(repo_id, meta)
        except errors.NotASafetensorsRepoError:
            headers = ()
            notes.append(f"{repo_id} has no safetensors weights: counts come from config.json")
    except errors.GatedRepoError:
        raise InputError(f"{repo_id} is a gated repository: accept its terms on "
                         f"https://huggingface.co/{repo_id} and log in (`hf auth login`), then "
                         f"run again with {opt('download')}") from None
    except errors.RepositoryNotFoundError:
        raise InputError(f"{repo_id}: no such model repository on the Hugging Face hub (or it "
                         "is private: log in with `hf auth login`)") from None
    except _network_errors(h):  # before EntryNotFoundError: the local miss is a subclass of it
        raise InputError(f"{repo_id}: cannot reach the Hugging Face hub (no network, or "
                         "HF_HUB_OFFLINE is set); on a machine with a network run `hf download "
                         f"{repo_id} config.json` and copy the cache, or give a local "
                         "config.json") from None
    except (errors.EntryNotFoundError, errors.RevisionNotFoundError):
        raise InputError(f"{repo_id} has no config.json on its main revision; give a local "
                         "config.json or model directory instead") from None
    except errors.HfHubHTTPError as e:
        code = getattr(getattr(e, "response", None), "status_code", "?")
        raise InputError(f"{repo_id}: the Hugging Face hub answered HTTP {code}; try again "
                         "later, or give a local config.json") from None
    return Downloaded(config=config, headers=headers, notes=tuple(notes))
