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
from pathlib import Path

from .._extras import require
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


def _field_value(field: object) -> object:
    """A metadata value: a scalar, a string, or (for arrays) the number of elements -- all this
    module needs, read the same way by every gguf version (parts/data/types)."""
    types = [t.name for t in field.types]  # type: ignore[attr-defined]
    parts, data = field.parts, field.data  # type: ignore[attr-defined]
    if not types:
        return None
    if types[0] == "ARRAY":
        return len(data)
    value = parts[data[0]]
    if types[0] == "STRING":
        return bytes(value).decode("utf-8", errors="replace")
    v = value.tolist()
    return v[0] if isinstance(v, list) and len(v) == 1 else v


def _open(path: Path, gguf: object):
    with path.open("rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise ModelFileError(path, "is not a GGUF file (it does not start with the bytes 'GGUF')")
    try:
        return gguf.GGUFReader(str(path), "r")  # type: ignore[attr-defined]
    except Exception as e:  # noqa: BLE001 -- any parse failure of the library is a bad file
        raise ModelFileError(path, f"rejected by the gguf library: {type(e).__name__}: "
                                   f"{str(e)[:200]}") from None


def read_gguf(path: str | os.PathLike) -> GgufHeader:
    """Read a .gguf file's header (the ``gguf`` package memory-maps the file; no weight is read
    into memory)."""
    p = Path(path)
    if not p.is_file():
        raise ModelFileError(p, "no such GGUF file")
    gguf = require("gguf", feature="reading a .gguf file")
    reader = _open(p, gguf)
    meta = {k: _field_value(f) for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    arch = str(meta.get("general.architecture") or "")
    if not arch:
        raise ModelFileError(p, 'has no "general.architecture" in its metadata')
    tensors: list[HeaderTensor] = []
    skipped: list[str] = []
    for t in reader.tensors:
        if t.name in _BUFFERS:
            skipped.append(t.name)
            continue
        gtype = t.tensor_type.name
        shape = tuple(int(d) for d in reversed(list(t.shape)))  # ggml lists ne[0] (the row) first
        try:
            nbytes = ggml_tensor_bytes(gtype, shape)
        except InputError as e:
            raise ModelFileError(p, f"tensor {t.name!r}: {e}") from None
        if nbytes != int(t.n_bytes):
            raise ModelFileError(p, f"tensor {t.name!r}: {gtype} {list(shape)} is {nbytes} bytes "
                                    f"but the file gives it {int(t.n_bytes)}")
        tensors.append(HeaderTensor(name=hf_name(t.name), dtype=gtype, shape=shape,
                                    nbytes=nbytes, file=p.name))
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
