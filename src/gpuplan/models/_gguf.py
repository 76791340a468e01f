"""Reading a .gguf file's header -- architecture metadata and each tensor's name, shape and GGML
type -- with the ``gguf`` package (the optional extra ``gpuplan[gguf]``), without reading weights.

The metadata of the llama-style architectures (``llama``, which llama.cpp also uses for Mistral,
and ``qwen2``) becomes the config.json numbers they came from, so the architecture, its
activations and its KV cache are known; tensor names become transformers' names so the header
tensors match the architecture's. Any other architecture is read from its headers alone. Each
tensor keeps its GGML type, and its bytes (block size x type size) are checked against the byte
span the file gives it.
"""

from __future__ import annotations

import os
import re
import struct
from pathlib import Path

from .._extras import require
from ..bounds import MAX_FILE_ITEMS
from ..errors import InputError, ModelFileError
from ._ggml import ggml_tensor_bytes
from ._safetensors import HeaderTensor

__all__ = ["GgufHeader", "read_gguf", "gguf_config"]

#: GGUF architectures whose metadata maps onto a transformers config (model_type).
ARCH_FAMILIES = {"llama": "llama", "qwen2": "qwen2"}

# llama.cpp's tensor names (gguf-py constants.TENSOR_NAMES) -> transformers' names, llama style.
_GLOBAL = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
_BLOCK = {
    "attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm", "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}
_BLK_RE = re.compile(r"^blk\.(\d+)\.([a-z_]+)\.(weight|bias)$")
#: Non-parameter tensors some files carry (llama 3's rope scaling factors).
_BUFFERS = ("rope_freqs.weight",)


class GgufHeader:
    """What a .gguf header says: architecture name, metadata values, tensors (transformers'
    names, PyTorch-order shapes, GGML type names)."""

    def __init__(self, path: Path, arch: str, meta: dict[str, object],
                 tensors: tuple[HeaderTensor, ...], notes: tuple[str, ...]) -> None:
        self.path = path
        self.arch = arch
        self.meta = meta
        self.tensors = tensors
        self.notes = notes


def hf_name(name: str) -> str:
    """A GGUF tensor name in transformers' spelling (unchanged when not a llama-style name)."""
    stem, _, suffix = name.rpartition(".")
    if stem in _GLOBAL and suffix in ("weight", "bias"):
        return f"{_GLOBAL[stem]}.{suffix}"
    m = _BLK_RE.match(name)
    if m and m.group(2) in _BLOCK:
        return f"model.layers.{m.group(1)}.{_BLOCK[m.group(2)]}.{m.group(3)}"
    return name


#: GGUF value types (gguf-py GGUFValueType): struct format of the fixed-size ones.
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
            10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
_U64 = struct.Struct("<Q")
#: Longest metadata string kept (architecture names, a chat template); longer ones are skipped.
MAX_KEPT_STRING = 1 << 16
#: GGML_MAX_DIMS: a tensor has at most 4 dimensions.
MAX_DIMS = 4


class _Cursor:
    """A GGUF header read front to back; every declared size is checked against the bytes left
    before anything is read or allocated."""

    def __init__(self, path: Path, f, size: int) -> None:
        self.path, self.f, self.size, self.pos = path, f, size, 0

    def fail(self, problem: str) -> ModelFileError:
        return ModelFileError(self.path, f"{problem} (at byte {self.pos} of {self.size})")

    def need(self, n: int, what: str) -> None:
        if n > self.size - self.pos:
            raise self.fail(f"{what} declares {n} bytes but only {self.size - self.pos} remain")

    def read(self, n: int, what: str) -> bytes:
        self.need(n, what)
        data = self.f.read(n)
        if len(data) != n:
            raise self.fail(f"file shrank while its {what} was read")
        self.pos += n
        return data

    def skip(self, n: int, what: str) -> None:
        self.need(n, what)
        self.f.seek(n, 1)
        self.pos += n

    def skip_strings(self, n: int, what: str, chunk: int = 1 << 20) -> None:
        """Skip ``n`` length-prefixed strings unread, walking the lengths in a buffer of at most
        ``chunk`` bytes (a 2-million-token vocabulary: ~1 s, no string made)."""
        buf, i = b"", 0
        for _ in range(n):
            if len(buf) - i < 8:
                buf = buf[i:] + self.f.read(min(chunk, self.size - self.pos - len(buf) + i))
                i = 0
                if len(buf) < 8:
                    raise self.fail(f"{what}: the file ends inside its length")
            (length,) = _U64.unpack_from(buf, i)
            self.pos += 8
            i += 8
            if length > self.size - self.pos:
                raise self.fail(f"{what} declares {length} bytes but only "
                                f"{self.size - self.pos} remain")
            self.pos += length
            i += length
            if i > len(buf):  # past the buffer: go on from the file
                self.f.seek(i - len(buf), 1)
                buf, i = b"", 0
        self.f.seek(i - len(buf), 1)  # back to the end of the last string

    def unpack(self, fmt: str, what: str):
        return struct.unpack(fmt, self.read(struct.calcsize(fmt), what))[0]

    def count(self, what: str, item_bytes: int) -> int:
        """A uint64 count of items of at least ``item_bytes`` each, bounded by the file."""
        n = self.unpack("<Q", what)
        if n > MAX_FILE_ITEMS:
            raise self.fail(f"{what} {n} is over the {MAX_FILE_ITEMS:,} gpuplan reads")
        self.need(n * item_bytes, f"{what} {n}")
        return n

    def string(self, what: str, *, keep: int = MAX_KEPT_STRING) -> str | None:
        n = self.unpack("<Q", f"{what} length")
        if n > keep:
            self.skip(n, what)
            return None
        return self.read(n, what).decode("utf-8", errors="replace")


def _value(c: _Cursor, vtype: int, key: str) -> object:
    """One metadata value: a scalar, a string (None when too long to keep), or for an array the
    number of its items -- all this module needs; an array's items are skipped unread."""
    if vtype in _SCALARS:
        return c.unpack(_SCALARS[vtype], f"value of {key!r}")
    if vtype == _STRING:
        return c.string(f"value of {key!r}")
    if vtype != _ARRAY:
        raise c.fail(f"metadata {key!r} has an unknown value type {vtype}")
    itype = c.unpack("<I", f"item type of {key!r}")
    if itype in _SCALARS:
        width = struct.calcsize(_SCALARS[itype])
        n = c.count(f"array {key!r} of items", width)
        c.skip(n * width, f"array {key!r}")
    elif itype == _STRING:
        n = c.count(f"array {key!r} of strings", 8)
        c.skip_strings(n, f"a string of {key!r}")
    else:  # nested arrays: no metadata gpuplan reads is one
        raise c.fail(f"metadata {key!r} is an array of type {itype}, which gpuplan does not read")
    return n


def _parse(path: Path, type_name) -> tuple[dict[str, object], list[tuple[str, tuple, str, int]],
                                           int, int]:
    """(metadata, tensors as (name, ggml dims, type name, offset), data start, file size)."""
    size = path.stat().st_size
    with path.open("rb") as f:
        c = _Cursor(path, f, size)
        if c.read(4, "magic") != b"GGUF":
            raise ModelFileError(path, "is not a GGUF file (it does not start with the bytes "
                                       "'GGUF')")
        version = c.unpack("<I", "version")
        if version not in (2, 3):
            raise c.fail(f"GGUF version {version} is not one gpuplan reads (2 or 3)")
        n_tensors = c.unpack("<Q", "tensor count")
        n_kv = c.count("metadata key count", 8 + 4 + 1)
        if n_tensors > MAX_FILE_ITEMS:
            raise c.fail(f"tensor count {n_tensors} is over the {MAX_FILE_ITEMS:,} gpuplan reads")
        meta: dict[str, object] = {}
        for _ in range(n_kv):
            key = c.string("metadata key") or ""
            meta[key] = _value(c, c.unpack("<I", f"type of {key!r}"), key)
        c.need(n_tensors * (8 + 4 + 4 + 8), f"tensor count {n_tensors}")
        tensors = []
        for _ in range(n_tensors):
            name = c.string("tensor name") or ""
            nd = c.unpack("<I", f"dimensions of {name!r}")
            if not 1 <= nd <= MAX_DIMS:
                raise c.fail(f"tensor {name!r} has {nd} dimensions (1 to {MAX_DIMS})")
            dims = tuple(c.unpack("<Q", f"shape of {name!r}") for _ in range(nd))
            tid = c.unpack("<I", f"type of {name!r}")
            tensors.append((name, dims, type_name(c, name, tid), c.unpack("<Q", "offset")))
        align = meta.get("general.alignment", 32)
        if not isinstance(align, int) or align < 1 or align & (align - 1) or align > 1 << 20:
            raise c.fail(f"general.alignment {align!r} is not a power of two up to 2^20")
        return meta, tensors, -(-c.pos // align) * align, size


def _check_spans(path: Path, spans: list[tuple[int, int, str]], data_len: int) -> None:
    """Each tensor's bytes lie inside the data section and overlap no other's."""
    at, prev = 0, ""
    for begin, end, name in sorted(spans):
        if begin < at:
            raise ModelFileError(path, f"tensor {name!r} at offset {begin} overlaps {prev!r} "
                                       f"(which ends at {at})")
        if end > data_len:
            raise ModelFileError(path, f"tensor {name!r}: bytes {begin}..{end} lie past the end "
                                       f"of the data section ({data_len} bytes)")
        at, prev = end, name


def read_gguf(path: str | os.PathLike) -> GgufHeader:
    """Read a .gguf file's header with a bounded parse of its own (no weight is read or mapped):
    every count and length the file declares is checked against the bytes left before it is
    read, arrays are skipped unread (their length kept), tensors' spans checked for bounds and
    overlap. The ``gguf`` package gives the GGML type ids' names."""
    p = Path(path)
    if not p.is_file():
        raise ModelFileError(p, "no such GGUF file")
    with p.open("rb") as f:
        if f.read(4) != b"GGUF":
            raise ModelFileError(p, "is not a GGUF file (it does not start with the bytes 'GGUF')")
    gguf = require("gguf", feature="reading a .gguf file")

    def type_name(c: _Cursor, name: str, tid: int) -> str:
        try:
            return gguf.GGMLQuantizationType(tid).name  # type: ignore[attr-defined]
        except ValueError:
            raise c.fail(f"tensor {name!r} has an unknown GGML type {tid}") from None

    meta, raw, data_start, size = _parse(p, type_name)
    meta = {k: v for k, v in meta.items() if not k.startswith("GGUF.")}
    arch = str(meta.get("general.architecture") or "")
    if not arch:
        raise ModelFileError(p, 'has no "general.architecture" in its metadata')
    tensors: list[HeaderTensor] = []
    skipped: list[str] = []
    spans: list[tuple[int, int, str]] = []
    for name, dims, gtype, offset in raw:
        shape = tuple(int(d) for d in reversed(dims))  # ggml lists ne[0] (the row) first
        try:
            nbytes = ggml_tensor_bytes(gtype, shape)
        except InputError as e:
            raise ModelFileError(p, f"tensor {name!r}: {e}") from None
        spans.append((offset, offset + nbytes, name))
        if name in _BUFFERS:
            skipped.append(name)
            continue
        tensors.append(HeaderTensor(name=hf_name(name), dtype=gtype, shape=shape,
                                    nbytes=nbytes, file=p.name))
    _check_spans(p, spans, max(0, size - data_start))
    notes = (f"skipped {', '.join(skipped)} (not a parameter)",) if skipped else ()
    return GgufHeader(p, arch, meta, tuple(tensors), notes)


def gguf_config(h: GgufHeader) -> dict | None:
    """The config.json numbers a llama-style GGUF's metadata holds, or None when the
    architecture is not one gpuplan maps (then the headers alone are counted)."""
    family = ARCH_FAMILIES.get(h.arch)
    a = h.arch
    if family is None or h.meta.get(f"{a}.expert_count"):
        return None
    m = h.meta
    names = {t.name for t in h.tensors}
    vocab = m.get(f"{a}.vocab_size") or m.get("tokenizer.ggml.tokens")
    if not vocab:
        vocab = next((t.shape[0] for t in h.tensors if t.name == "model.embed_tokens.weight"),
                     None)
    cfg: dict[str, object] = {
        "model_type": family,
        "hidden_size": m.get(f"{a}.embedding_length"),
        "num_hidden_layers": m.get(f"{a}.block_count"),
        "num_attention_heads": m.get(f"{a}.attention.head_count"),
        "num_key_value_heads": m.get(f"{a}.attention.head_count_kv",
                                     m.get(f"{a}.attention.head_count")),
        "intermediate_size": m.get(f"{a}.feed_forward_length"),
        "vocab_size": vocab,
        "max_position_embeddings": m.get(f"{a}.context_length"),
        "tie_word_embeddings": "lm_head.weight" not in names,
        "hidden_act": "silu",
    }
    for key, gkey in (("rms_norm_eps", "attention.layer_norm_rms_epsilon"),
                      ("rope_theta", "rope.freq_base"), ("head_dim", "attention.key_length")):
        if m.get(f"{a}.{gkey}") is not None:
            cfg[key] = m[f"{a}.{gkey}"]
    if any(v is None for v in cfg.values()):
        return None
    return cfg
