"""Reading *.safetensors headers -- names, shapes, dtypes -- without loading any tensor.

A safetensors file is an 8-byte little-endian header length N, N bytes of JSON, then the data.
Every header is first checked here with bounds (N <= 100 MB and N <= file size - 8; strict UTF-8
JSON object; no duplicate names; each entry a known dtype, a shape of whole numbers and
``data_offsets`` that lie inside the data section, match shape x dtype size and tile it without
gaps or overlaps), and only then opened with the ``safetensors`` library, which must agree. A
hostile file therefore never reaches a parser that would trust its numbers, and nothing in it is
executed.
"""

from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from .._record import record
from ..errors import MissingDependencyError, ModelFileError, printable, shown
from ..units import MB
from ._config import read_json_file
from .._extras import require

__all__ = ["MAX_HEADER_BYTES", "DTYPE_BITS", "HeaderTensor", "SafetensorsHeader",
           "read_header", "read_checkpoint_dir"]

#: Largest header accepted (the format's own reference implementation uses the same limit).
MAX_HEADER_BYTES = 100_000_000

#: Most keys one header may hold (counted as ``":`` before parsing, an upper bound). A tensor
#: entry has 4 (its name, dtype, shape, data_offsets); the largest single-file checkpoints hold a
#: few thousand tensors, so 400,000 keys (~100,000 tensors) is far above real files, and a header
#: of millions of keys is refused before json spends seconds and gigabytes on it.
MAX_HEADER_KEYS = 400_000

#: Largest model.safetensors.index.json accepted (real ones: ~100 kB for a 405B model).
MAX_INDEX_BYTES = 50 * MB

#: Bits per element of every dtype the safetensors format defines.
DTYPE_BITS: dict[str, int] = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8,
    "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32, "I64": 64, "U64": 64, "F64": 64, "C64": 64,
    "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}

INDEX_NAME = "model.safetensors.index.json"


@dataclass(frozen=True, slots=True)
class HeaderTensor:
    """One tensor as a header describes it."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    file: str
    """The file name (within its directory) that holds it."""

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@record(kw_only=False)
class SafetensorsHeader:
    path: Path
    tensors: tuple[HeaderTensor, ...]
    metadata: dict[str, str]


class _Duplicate(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict:
    out: dict = {}
    for k, v in pairs:
        if k in out:
            raise _Duplicate(k)
        out[k] = v
    return out


def _reject_constant(name: str) -> float:
    raise ValueError(f"non-standard JSON constant {name}")


def _is_uint(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _parse(path: Path) -> SafetensorsHeader:
    """The bounded, validating parse (no third-party code)."""
    size, n, raw = _read_header(path)
    obj = _header_json(path, raw)
    data_len = size - 8 - n
    metadata: dict[str, str] = {}
    tensors: list[HeaderTensor] = []
    spans: list[tuple[int, int, str]] = []
    for name, info in obj.items():
        if name == "__metadata__":
            if not isinstance(info, dict) or not all(isinstance(v, str) for v in info.values()):
                raise ModelFileError(path, "safetensors __metadata__ must map strings to strings")
            metadata = dict(info)
            continue
        tensor, (begin, end) = _header_tensor(path, name, info, data_len)
        spans.append((begin, end, name))
        tensors.append(tensor)
    _check_spans(path, spans, data_len)
    return SafetensorsHeader(path=path, tensors=tuple(tensors), metadata=metadata)


def _read_header(path: Path) -> tuple[int, int, bytes]:
    """(file size, header length, header bytes), each bound checked before it is read."""
    try:
        size = path.stat().st_size
        f = path.open("rb")
    except FileNotFoundError:
        raise ModelFileError(path, "no such safetensors file") from None
    except IsADirectoryError:
        raise ModelFileError(path, "is a directory, expected a .safetensors file") from None
    except PermissionError:
        raise ModelFileError(path, "permission denied reading the safetensors file") from None
    with f:
        if size < 8:
            raise ModelFileError(path, f"is {size} bytes, too short for a safetensors file "
                                       f"(8-byte header length first)")
        (n,) = struct.unpack("<Q", f.read(8))
        if n > MAX_HEADER_BYTES:
            raise ModelFileError(path, f"safetensors header length {n} bytes is over the "
                                       f"{MAX_HEADER_BYTES // MB} MB limit")
        if n > size - 8:
            raise ModelFileError(path, f"safetensors header length {n} bytes is larger than "
                                       f"the file ({size} bytes)")
        raw = f.read(n)
    if len(raw) != n:
        raise ModelFileError(path, "file shrank while its safetensors header was read")
    return size, n, raw


def _header_json(path: Path, raw: bytes) -> dict:
    """The header as a JSON object: UTF-8, no repeated keys, no NaN/Infinity."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ModelFileError(path, f"safetensors header is not UTF-8 (byte {e.start})") from None
    keys = raw.count(b'":')
    if keys > MAX_HEADER_KEYS:
        raise ModelFileError(path, f"safetensors header holds about {keys:,} keys; at most "
                                   f"{MAX_HEADER_KEYS:,} are read")
    try:
        obj = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_reject_constant)
    except _Duplicate as e:
        raise ModelFileError(path, f"safetensors header repeats the key {shown(e.args[0])}") from None
    except json.JSONDecodeError as e:
        raise ModelFileError(path, f"safetensors header is not valid JSON ({e.msg} at "
                                   f"character {e.pos})") from None
    except (ValueError, RecursionError) as e:
        raise ModelFileError(path, f"safetensors header is not valid JSON ({e})") from None
    if not isinstance(obj, dict):
        raise ModelFileError(path, "safetensors header is not a JSON object")
    return obj


def _header_tensor(path: Path, name: str, info: object,
                   data_len: int) -> tuple[HeaderTensor, tuple[int, int]]:
    """One tensor entry, checked (a known dtype, a shape, offsets inside the data section that
    span exactly the bytes the shape needs), and its data offsets."""
    label = f"tensor {shown(name)}"
    if not isinstance(info, dict):
        raise ModelFileError(path, f"{label}: expected an object with dtype, shape and "
                                   f"data_offsets")
    dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
        raise ModelFileError(path, f"{label}: unknown dtype {shown(dtype)}")
    if not isinstance(shape, list) or not all(_is_uint(d) for d in shape):
        raise ModelFileError(path, f"{label}: shape {shown(shape)} is not a list of whole numbers")
    if (not isinstance(offsets, list) or len(offsets) != 2
            or not all(_is_uint(o) for o in offsets) or offsets[0] > offsets[1]):
        raise ModelFileError(path, f"{label}: data_offsets {shown(offsets)} is not "
                                   f"[begin, end] with 0 <= begin <= end")
    begin, end = offsets
    if end > data_len:
        raise ModelFileError(path, f"{label}: data_offsets [{begin}, {end}] run past the end "
                                   f"of the file (data section is {data_len} bytes)")
    bits = math.prod(shape) * DTYPE_BITS[dtype]
    if bits % 8 or bits // 8 != end - begin:
        raise ModelFileError(path, f"{label}: data_offsets span {end - begin} bytes but "
                                   f"shape {shown(shape)} of {dtype} needs {_bytes_text(bits)}")
    return (HeaderTensor(name=name, dtype=dtype, shape=tuple(shape), nbytes=end - begin,
                         file=path.name), (begin, end))


def _bytes_text(bits: int) -> str:
    """Bytes for ``bits`` as a message shows them (a float would overflow past 2^1024)."""
    return f"{bits / 8:g}" if bits.bit_length() < 1000 else shown(bits // 8)


def _check_spans(path: Path, spans: list[tuple[int, int, str]], data_len: int) -> None:
    """The tensors tile the data section: no overlap, no gap, nothing left over."""
    at = 0
    for begin, end, name in sorted(spans):
        if begin != at:
            what = "overlaps the previous tensor" if begin < at else f"leaves a gap at byte {at}"
            raise ModelFileError(path, f"tensor {shown(name)}: data_offsets [{begin}, {end}] {what}")
        at = end
    if at != data_len:
        raise ModelFileError(path, f"data section is {data_len} bytes but the tensors cover {at}")


def _library_check(header: SafetensorsHeader) -> None:
    """Open the (already validated) file with the safetensors library; it must agree."""
    lib_mod = require("safetensors", "numpy", feature="reading *.safetensors headers")
    SafetensorError, safe_open = lib_mod.SafetensorError, lib_mod.safe_open
    path = header.path
    try:
        # framework="numpy": nothing is loaded (get_slice reads the header only), and numpy is
        # far lighter than torch.
        with safe_open(str(path), framework="numpy") as f:
            lib = {k: (f.get_slice(k).get_dtype(), tuple(f.get_slice(k).get_shape()))
                   for k in f.keys()}
    except SafetensorError as e:
        raise ModelFileError(path, f"rejected by the safetensors library: {e}") from None
    except ImportError as e:  # numpy missing
        raise MissingDependencyError(e.name or "numpy", "safetensors",
                                     "reading *.safetensors headers") from None
    ours = {t.name: (t.dtype, t.shape) for t in header.tensors}
    if lib != ours:
        diff = sorted(set(lib.items()) ^ set(ours.items()))[:1]
        raise ModelFileError(path, f"the safetensors library reads the header differently "
                                   f"({diff})")


#: Largest file the safetensors library cross-checks: it memory-maps the whole file, so a 5 GB
#: checkpoint would need 5 GB of address space (``ulimit -v`` on HPC login nodes refuses it)
#: although only the header is read. Larger files are read by the bounded parse alone, which
#: checks every entry and offset itself.
LIBRARY_CHECK_MAX_BYTES = 256 * MB


def read_header(path: str | os.PathLike) -> SafetensorsHeader:
    """Validate and read one file's header (names, dtypes, shapes, byte sizes); only the 8-byte
    length and the header are read, never the data."""
    header = _parse(Path(path))
    if header.path.stat().st_size <= LIBRARY_CHECK_MAX_BYTES:
        _library_check(header)
    return header


def _safe_member(d: Path, name: object, index: Path) -> Path:
    """A file named by the index must be a plain file name inside ``d``."""
    if (not isinstance(name, str) or not name or "/" in name or "\\" in name
            or name in (".", "..") or not name.endswith(".safetensors")):
        raise ModelFileError(index, f"weight_map names file {name!r}; expected a plain "
                                    f"*.safetensors file name in the same directory")
    p = d / name
    if not p.is_file():
        raise ModelFileError(index, f"weight_map names {name}, which is not in {d}")
    return p


def read_checkpoint_dir(d: Path) -> tuple[list[HeaderTensor], list[str]]:
    """Every tensor of the checkpoint in directory ``d`` (sharded with an index, or not), and
    notes. Returns ([], []) when ``d`` holds no safetensors files."""
    notes: list[str] = []
    index = d / INDEX_NAME
    if index.is_file():
        idx = read_json_file(index, limit=MAX_INDEX_BYTES, what="safetensors index")
        wmap = idx.get("weight_map")
        if not isinstance(wmap, dict) or not wmap:
            raise ModelFileError(index, '"weight_map" must be a non-empty object mapping tensor '
                                        'names to shard files')
        files = sorted({_safe_member(d, v, index) for v in wmap.values()})
    else:
        wmap = None
        files = sorted(p for p in d.glob("*.safetensors") if p.is_file())
        consolidated = [p for p in files if p.name.startswith("consolidated")]
        if consolidated and len(consolidated) < len(files):
            # Mistral's repositories ship the same weights twice: consolidated*.safetensors
            # (Mistral's own names) beside the transformers shards.
            files = [p for p in files if p not in consolidated]
            notes.append("skipped " + ", ".join(p.name for p in consolidated)
                         + " (the same weights in Mistral's native layout)")
    if not files:
        return [], notes

    seen: dict[str, str] = {}
    tensors: list[HeaderTensor] = []
    for p in files:
        for t in read_header(p).tensors:
            if t.name in seen:
                raise ModelFileError(p, f"tensor {shown(t.name)} is also in {printable(seen[t.name])}")
            seen[t.name] = p.name
            tensors.append(t)
    if wmap is not None:
        for name, fname in wmap.items():
            where = seen.get(name)
            if where is None:
                raise ModelFileError(index, f"weight_map puts {name!r} in {fname}, but no shard "
                                            f"holds it")
            if where != fname:
                raise ModelFileError(index, f"weight_map puts {name!r} in {fname}, but it is in "
                                            f"{where}")
        extra = [n for n in seen if n not in wmap]
        if extra:
            notes.append(f"{len(extra)} tensors in the shards are not in the index "
                         f"(e.g. {extra[0]}); counted")
    return tensors, notes
