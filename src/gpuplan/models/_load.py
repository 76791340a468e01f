"""``load_model``: a catalog name, a config.json, a model directory, or *.safetensors files."""

from __future__ import annotations

import math
import os
import re
from collections import Counter
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Literal

from ..bounds import MAX_ARG_CHARS
from ..errors import InputError, ModelFileError, UnknownNameError, opt, printable, shown
from ..units import format_count, parse_count
from ._catalog import catalog_keys, catalog_model, resolve_catalog_name
from ._config import MAX_CONFIG_BYTES, parse_json_bytes, read_json_file
from ._counts import count_params
from ._families import SUPPORTED_FAMILIES, build_architecture
from ._types import COMPONENTS, Architecture, Model, ParamCounts, ParamTensor

if TYPE_CHECKING:
    from ._safetensors import HeaderTensor

__all__ = ["load_model", "from_param_count", "model_from_config", "model_from_checkpoint",
           "model_from_gguf"]

def _hub():
    """The hub and file readers' module (it imports the safetensors reader): a catalog name, the
    common case, needs neither (issue 27: a plan's start-up)."""
    from . import _hub as module

    return module


#: First name components that are the base-model prefix (``model.layers...``); checkpoints saved
#: from the base model, or by older code, omit them.
_BASE_PREFIXES = frozenset({"model", "transformer", "gpt_neox", "bert", "vit"})

#: Non-parameter buffers some checkpoints carry (GPT-2's causal mask, rotary tables, position
#: ids); they are skipped, not counted.
#: compiled on first use (re caches it): a catalog name reads no checkpoint
_BUFFER_RE = (r"(?:^|\.)(?:attn\.bias|attn\.masked_bias|inv_freq|position_ids|"
              r"rotary_emb\.[^.]+|attention\.bias|attention\.masked_bias)$")


def _normalize(name: str) -> tuple[str, int | None, int | None]:
    """Checkpoint name -> (key, layer, expert): the base prefix dropped, the first numeric
    component replaced by ``{i}`` and the second by ``{e}``, LayerNorm gamma/beta renamed."""
    parts = name.split(".")
    if len(parts) > 1 and parts[0] in _BASE_PREFIXES:
        parts = parts[1:]
    found: list[int] = []
    for k, p in enumerate(parts):
        if p.isdigit() and len(found) < 2:
            found.append(int(p))
            parts[k] = "{i}" if len(found) == 1 else "{e}"
    if parts[-1] == "gamma":
        parts[-1] = "weight"
    elif parts[-1] == "beta":
        parts[-1] = "bias"
    return (".".join(parts), found[0] if found else None,
            found[1] if len(found) > 1 else None)


def _generic_pattern(name: str) -> str:
    """Header name with its first two numeric components replaced by ``{i}`` and ``{e}``."""
    parts = name.split(".")
    n = 0
    for k, p in enumerate(parts):
        if p.isdigit() and n < 2:
            parts[k] = "{i}" if n == 0 else "{e}"
            n += 1
    return ".".join(parts)


def _guess_component(name: str) -> str:
    low = name.lower()
    last = low.rsplit(".", 1)[0]
    if ".experts." in low:
        return "experts"
    if "norm" in low or ".ln_" in low or low.startswith("ln_") or ".ln." in low:
        return "norms"
    if re.search(r"(^|\.)(gate|router)\.weight$", low) or "shared_expert_gate" in low:
        return "router"
    if any(s in low for s in ("embed_tokens", "wte.", "wpe.", "word_embeddings", "embed_in",
                              "position_embeddings", "token_type_embeddings", "embeddings.")):
        return "embeddings"
    if any(s in last for s in ("lm_head", "embed_out", "classifier", "cls.predictions")) or \
            low in ("output.weight",):
        return "head"
    if any(s in low for s in ("attn", "attention", "q_proj", "k_proj", "v_proj", "o_proj")):
        return "attention"
    if any(s in low for s in ("mlp", "ffn", "feed_forward", "fc1", "fc2", "dense_h_to_4h",
                              "dense_4h_to_h", "intermediate", "gate_proj", "up_proj",
                              "down_proj")):
        return "mlp"
    return "other"


def _module_of(name: str) -> str:
    parts = name.split(".")
    return parts[-2] if len(parts) >= 2 else parts[0]


def _tensors_from_headers(headers: list[HeaderTensor], arch: Architecture | None
                          ) -> tuple[tuple[ParamTensor, ...], list[str], str | None]:
    """Group header tensors into ParamTensors (exact shapes and dtypes from the files), using the
    architecture's names, components and modules where they match. Returns (tensors, notes,
    dominant dtype)."""
    groups = _HeaderGroups(arch)
    for h in headers:
        groups.add(h)
    return groups.tensors(), groups.notes(), groups.dominant_dtype()


class _HeaderGroups:
    """Header tensors counted per (name or name pattern, shape, dtype, layer), with what matching
    them against the architecture found."""

    def __init__(self, arch: Architecture | None) -> None:
        self.arch = arch
        self.by_key: dict[str, ParamTensor] = {}
        self.by_layer: dict[tuple[str, int], ParamTensor] = {}
        for t in arch.tensors if arch is not None else ():
            key, _i, _e = _normalize(t.name)
            if t.layer is not None:
                self.by_layer[(key, t.layer)] = t
            else:
                self.by_key[key] = t
        self.groups: Counter[tuple] = Counter()
        self.meta: dict[tuple, tuple[str, str, bool, bool, int | None]] = {}
        self.matched: Counter[tuple[str, int | None]] = Counter()
        self.buffers: list[str] = []
        self.unmatched: list[str] = []
        self.mismatched: list[str] = []
        self.elements_by_dtype: Counter[str] = Counter()

    def add(self, h: HeaderTensor) -> None:
        key, i, _e = _normalize(h.name)
        t = self.by_layer.get((key, i)) if i is not None else None
        t = t or self.by_key.get(key)
        if t is None and re.search(_BUFFER_RE, h.name):
            self.buffers.append(h.name)
            return
        self.elements_by_dtype[h.dtype] += h.numel
        if t is not None:
            self.matched[(t.name, t.layer)] += 1
            if h.shape != t.shape and len(self.mismatched) < 3:
                self.mismatched.append(f"{h.name} is {list(h.shape)}, config.json implies "
                                       f"{list(t.shape)}")
            k = (t.name, h.shape, h.dtype, t.layer)
            self.meta[k] = (t.component, t.module, t.linear and len(h.shape) == len(t.shape),
                            t.transposed, t.layer)
        else:
            if self.arch is not None:
                self.unmatched.append(h.name)
            comp = _guess_component(h.name)
            k = (_generic_pattern(h.name), h.shape, h.dtype, None)
            linear = (len(h.shape) == 2 and h.name.endswith(".weight")
                      and comp in ("attention", "mlp", "experts", "head", "router"))
            self.meta[k] = (comp, _module_of(h.name), linear, False, None)
        self.groups[k] += 1

    def tensors(self) -> tuple[ParamTensor, ...]:
        """In the architecture's order; names it does not know after, by name and layer."""
        arch = self.arch
        order = {t.name: n for n, t in enumerate(arch.tensors)} if arch is not None else {}
        out = []
        for k, count in sorted(self.groups.items(),
                               key=lambda kv: (order.get(kv[0][0], len(order)), kv[0][0],
                                               kv[0][3] or 0)):
            name, shape, dtype, layer = k
            comp, module, linear, transposed, layer = self.meta[k]
            out.append(ParamTensor(name=name, shape=shape, count=count, component=comp,  # type: ignore[arg-type]
                                   module=module, linear=linear, dtype=dtype, layer=layer,
                                   transposed=transposed))
        return tuple(out)

    def notes(self) -> list[str]:
        notes: list[str] = []
        if self.buffers:
            notes.append(f"skipped {len(self.buffers)} non-parameter buffers in the checkpoint "
                         f"(e.g. {self.buffers[0]})")
        arch = self.arch
        if arch is None:
            return notes
        if self.unmatched:
            notes.append(f"{len(self.unmatched)} checkpoint tensors are not parameters of "
                         f"{arch.hf_class} per config.json (e.g. {self.unmatched[0]}); counted "
                         f"from the headers")
        missing = [(t.name, t.count - self.matched[(t.name, t.layer)]) for t in arch.tensors
                   if self.matched[(t.name, t.layer)] < t.count]
        if missing:
            n = sum(m for _, m in missing)
            notes.append(f"{n} tensors config.json implies are not in the checkpoint "
                         f"(e.g. {missing[0][0]})")
        if self.mismatched:
            notes.append("shapes differ from config.json: " + "; ".join(self.mismatched))
        return notes

    def dominant_dtype(self) -> str | None:
        counts = self.elements_by_dtype
        return counts.most_common(1)[0][0] if counts else None


def _arch_from_file(path: Path, name: str) -> tuple[Architecture, tuple[str, ...]]:
    return _arch_from_config(read_json_file(path), name, str(path))


def _arch_from_config(config: dict, name: str, where: str) -> tuple[Architecture, tuple[str, ...]]:
    arch, notes = build_architecture(config, name=name, source=where, where=where)
    extra: list[str] = []
    q = config.get("quantization_config")
    if isinstance(q, dict):
        extra.append(f"config.json has a quantization_config (quant_method "
                     f"{q.get('quant_method')!r}): a checkpoint's header counts are its packed "
                     f"storage, not parameters")
    return arch, notes + tuple(extra)


def _dir_name(p: Path) -> str:
    return p.resolve().name or str(p)


def model_from_config(path: str | os.PathLike, *, name: str | None = None) -> Model:
    """A :class:`Model` from a config.json file alone (tensors implied by the architecture)."""
    p = Path(path)
    name = name or (_dir_name(p.parent) if p.name == "config.json" else p.stem)
    arch, notes = _arch_from_file(p, name)
    return Model(name=name, params=count_params(arch.tensors, arch), tensors=arch.tensors,
                 architecture=arch, source="config", notes=notes)


def model_from_config_bytes(data: bytes, *, name: str = "pasted config.json",
                            limit: int = MAX_CONFIG_BYTES) -> Model:
    """A :class:`Model` from the bytes of a config.json (pasted, uploaded), read as strictly as a
    file: at most ``limit`` bytes, strict JSON, nothing executed; errors name ``name``."""
    arch, notes = _arch_from_config(parse_json_bytes(data, where=name, limit=limit), name, name)
    return Model(name=name, params=count_params(arch.tensors, arch), tensors=arch.tensors,
                 architecture=arch, source="config", notes=notes)


def model_from_checkpoint(headers: list[HeaderTensor], *, name: str,
                          arch: Architecture | None, notes: list[str],
                          source: Literal["safetensors", "gguf"] = "safetensors",
                          config_refused: bool = False) -> Model:
    tensors, more, dominant = _tensors_from_headers(headers, arch)
    if not any(math.prod(t.shape) for t in tensors):
        raise ModelFileError(name, "the safetensors header holds no tensor with any elements "
                                   "(no parameters): nothing to plan")
    notes = list(notes) + more
    if arch is None:
        notes.append(("the config is not understood" if config_refused else "no config.json")
                     + ": the architecture (layers, heads, context) is unknown, so "
                     "activations and the KV cache cannot be estimated")
    return Model(name=name, params=count_params(tensors, arch), tensors=tensors,
                 architecture=arch, source=source, checkpoint_dtype=dominant,
                 notes=tuple(notes))


def _from_dir(d: Path, *, name: str | None = None) -> Model:
    """A model directory; an OS error reading it (permission denied, a name too long ...) is one
    :class:`ModelFileError` line."""
    try:
        return _read_dir(d, name=name)
    except OSError as e:
        raise ModelFileError(d, f"cannot be read ({e.strerror or type(e).__name__})") from None


def _read_dir(d: Path, *, name: str | None = None) -> Model:
    name = name or _dir_name(d)
    cfg = d / "config.json"
    arch = None
    notes: list[str] = []
    if cfg.is_dir():
        raise ModelFileError(cfg, "is a directory; a model directory's config.json must be a "
                                  "file")
    unlisted: str | None = None
    refused: ModelFileError | None = None
    if cfg.is_file():
        arch, arch_notes, unlisted, refused = _dir_arch(cfg, name)
        notes.extend(arch_notes)
    from ._safetensors import read_checkpoint_dir

    headers, st_notes = read_checkpoint_dir(d)
    notes.extend(st_notes)
    if not headers and refused is not None:
        raise refused
    if not headers:
        if arch is None:
            raise ModelFileError(d, "holds neither a config.json nor *.safetensors files")
        others = [p.name for p in sorted(d.glob("*.bin"))[:1] + sorted(d.glob("*.pt"))[:1]]
        if others:
            notes.append(f"{others[0]} is not read (pickle files are never opened); counts come "
                         f"from config.json")
        return Model(name=name, params=count_params(arch.tensors, arch), tensors=arch.tensors,
                     architecture=arch, source="config", notes=tuple(notes))
    model = model_from_checkpoint(headers, name=name, arch=arch, notes=notes,
                                  config_refused=refused is not None)
    if unlisted is None or arch is None:
        return model
    return replace(model, notes=model.notes + (_unlisted_note(model, arch, unlisted),))


def _dir_arch(cfg: Path, name: str) -> tuple[Architecture | None, tuple[str, ...], str | None,
                                             ModelFileError | None]:
    """A directory's config.json: (architecture, notes, the unlisted model_type planned as its
    nearest family or None, the refusal of a config not understood at all). A config of an
    unlisted model_type that cannot be planned even as its nearest family leaves the weights to
    the safetensors headers; a supported family's bad config is refused as ever."""
    config = read_json_file(cfg)
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or model_type in SUPPORTED_FAMILIES:
        arch, notes = _arch_from_config(config, name, str(cfg))
        return arch, notes, None, None
    try:
        arch, notes = _arch_from_config(config, name, str(cfg))
    except ModelFileError as e:
        return None, (f"config.json is not understood ({e.problem}): the weights are read "
                      "from the safetensors headers alone",), None, e
    return arch, notes, model_type, None


def _unlisted_note(model: Model, arch: Architecture, model_type: str) -> str:
    """What the plan of an unlisted model_type's checkpoint takes from where."""
    by_dtype: Counter[str] = Counter()
    for t in model.tensors:
        by_dtype[t.dtype or "?"] += t.total
    dtypes = ", ".join(f"{format_count(n)} {dt}" for dt, n in by_dtype.most_common())
    implied = count_params(arch.tensors, arch).total
    diff = model.params.total - implied
    return (f"the weights of this {model_type} checkpoint are its own, from the safetensors "
            f"headers ({sum(t.count for t in model.tensors):,} tensors, "
            f"{model.params.total:,} parameters: {dtypes}); {arch.family}'s layout from "
            f"config.json implies {implied:,} ({diff:+,}); activations, the KV cache and FLOPs "
            f"are {arch.family}'s, so layers {arch.family} lacks (extra norms, fused or "
            "reshaped projections, other attention kinds) are not modeled there")


def _looks_like_path(s: str) -> bool:
    """A file-system path rather than a name: starts with ./ ../ / ~ (or a drive), ends in a
    model-file suffix, or holds a separator without being shaped like a hub id (org/name)."""
    if s.startswith(("./", "../", "/", "~", ".\\", "..\\", "\\")) or s in (".", ".."):
        return True
    if s.lower().endswith(_hub().PATH_SUFFIXES) or (len(s) > 1 and s[1] == ":"):
        return True
    return ("/" in s or "\\" in s or os.sep in s) and not _hub().is_hub_id(s)


_SIZE = r"(\d+(?:\.\d+)?)([bmk])(?![a-z])"  # compiled on first use


def _size_tokens(name: str) -> frozenset[str]:
    """Size tokens of a model name ("14b", "1.5b", "4k"): names of different sizes are different
    models, never typos of each other."""
    return frozenset(m.group(0) for m in re.finditer(_SIZE, name.lower()))


def _numbers(name: str) -> tuple[str, ...]:
    """Every number in a name, in order ("qwen2.5-14b" -> 2.5, 14): a version or a size."""
    return tuple(re.findall(r"\d+(?:\.\d+)?", name.lower()))


def _suggestable(name: str, known: list[str]) -> list[str]:
    """The known names a "did you mean" may offer for ``name``: those of the same size and
    version (Qwen3-14B is not a typo of Qwen2.5-14B)."""
    mine = _size_tokens(name)
    if not mine:
        return known
    nums = _numbers(name.rsplit("/", 1)[-1])

    def same_version(k: str) -> bool:  # "3" and "3.1" may be a typo; "2.5" and "3" not
        other = _numbers(k.rsplit("/", 1)[-1])
        if len(other) != len(nums) or len(nums) < 2:
            return True  # no version to compare (the size decides)
        return all(a == b or a.split(".")[0] == b.split(".")[0] for a, b in zip(nums, other))

    return [k for k in known if _size_tokens(k) == mine and same_version(k)]


def _near(name: str, known: list[str]) -> list[str]:
    """Close names for a hub id: a stricter cutoff than catalog typos, since org/name strings
    share many letters by chance."""
    import difflib  # only an error pays for it (keeps `gpuplan fit` start-up short)

    by_lower = {k.lower(): k for k in known}
    hits = difflib.get_close_matches(name.lower(), list(by_lower), n=3, cutoff=0.8)
    return [by_lower[h] for h in hits]


def model_from_gguf(path: str | os.PathLike) -> Model:
    """A :class:`Model` from a .gguf file's header: the architecture from its metadata (llama
    and qwen2 styles), each tensor with its GGML type (``ParamTensor.dtype``)."""
    from ._gguf import ARCH_FAMILIES, gguf_config, read_gguf

    h = read_gguf(path)
    name = h.path.stem
    notes = list(h.notes)
    cfg = gguf_config(h)
    arch = None
    if cfg is not None:
        arch, arch_notes = build_architecture(cfg, name=name, source=str(h.path),
                                              where=f"{h.path} (GGUF metadata)")
        notes.extend(arch_notes)
    else:
        notes.append(f"GGUF architecture {h.arch!r} is not mapped to a transformers config "
                     f"(mapped: {', '.join(ARCH_FAMILIES)}); counts come from the tensor headers")
    return model_from_checkpoint(list(h.tensors), name=name, arch=arch, notes=notes,
                                 source="gguf")


def _from_hub_snapshot(snap: Path, repo_id: str, h) -> Model:
    """A cached repo: its snapshot folder, or config.json alone when the cache holds only some
    of the shards its index names."""
    from ._safetensors import INDEX_NAME, MAX_INDEX_BYTES

    index = _hub().cached_file(h, repo_id, INDEX_NAME)
    if index is not None:
        wmap = read_json_file(index, limit=MAX_INDEX_BYTES, what="safetensors index").get(
            "weight_map")
        files = sorted(set(wmap.values())) if isinstance(wmap, dict) else []
        have = [f for f in files if isinstance(f, str) and (snap / f).is_file()]
        if files and len(have) < len(files):
            m = model_from_config(snap / "config.json", name=repo_id)
            note = (f"the cache holds {len(have)} of the {len(files)} weight shards: counts "
                    f"come from config.json")
            return replace(m, notes=m.notes + (note,))
    return _from_dir(snap, name=repo_id)


def _from_hub(s: str, download: bool) -> Model:
    h = _hub().hub(s)
    snap = _hub().cached_snapshot(h, s)
    if snap is None:
        exact = {r.lower(): r for r in _hub().cached_repo_ids(h)}.get(s.lower())
        snap = _hub().cached_snapshot(h, exact) if exact else None
        s = exact or s
    if snap is not None and not download:
        return _from_hub_snapshot(snap, s, h)
    if download:
        got = _hub().download(h, s)
        arch, notes = _arch_from_file(got.config, s)
        if not got.headers:
            return Model(name=s, params=count_params(arch.tensors, arch), tensors=arch.tensors,
                         architecture=arch, source="config", notes=notes + got.notes)
        return model_from_checkpoint(list(got.headers), name=s, arch=arch,
                                     notes=list(notes + got.notes))
    hub = _hub()
    known = _suggestable(s, [*hub.cached_repo_ids(h), *catalog_keys()])
    near = _near(s, known) or _near(s.split("/", 1)[1], known)
    hint = f"; did you mean {', '.join(repr(n) for n in near)}?" if near else ""
    raise InputError(f"model {s!r} is not a local path, in gpuplan's catalog or in the Hugging "
                     f"Face cache ({_hub().cache_dir(h)}){hint} ({opt('download')} fetches its "
                     "config.json "
                     f"and safetensors headers, not the weights)")


def load_model(spec: str | os.PathLike, *, download: bool = False) -> Model:
    """A catalog name (``llama-3.1-8b``, any case, aliases such as ``gpt2-small`` or the Hub id),
    a config.json path, a model directory (config.json and/or *.safetensors, sharded or not), one
    .safetensors or .gguf file, or a Hugging Face hub id (``org/name``) found in the local cache
    -> :class:`Model`.

    ``download=True`` lets a hub id that is not cached be fetched: config.json and the
    safetensors headers only (byte ranges), never the weights. Nothing is downloaded otherwise.
    """
    if not isinstance(spec, (str, os.PathLike)):
        raise InputError(f"model {shown(spec)}: expected a catalog name or a path")
    s = os.fspath(spec)
    if isinstance(s, bytes):
        s = os.fsdecode(s)
    if not s.strip():
        raise InputError("model '': expected a catalog name (see `gpuplan models`), a hub id "
                         "(org/name) or a path to a config.json or model directory")
    if len(s) > MAX_ARG_CHARS or "\0" in s:
        raise InputError(f"model {shown(s)}: not a catalog name, and not a usable path (at most "
                         f"{MAX_ARG_CHARS} characters, no NUL)")
    key = resolve_catalog_name(s) if isinstance(spec, str) else None
    if key is not None:
        return catalog_model(key)
    try:
        return _load_path(s, hub=isinstance(spec, str), download=download)
    except OSError as e:  # a name over 255 bytes, a loop of links, a vanished directory ...
        raise ModelFileError(printable(s, 80), f"cannot be read as a model file or directory "
                                               f"({e.strerror or type(e).__name__})") from None


def _load_path(s: str, *, hub: bool, download: bool) -> Model:
    p = Path(s).expanduser()
    if p.is_dir():
        return _from_dir(p)
    if p.is_file():
        return _from_file(p)
    if p.exists():
        raise ModelFileError(p, "is not a regular file or directory")
    if hub and _hub().is_hub_id(s):
        return _from_hub(s, download)
    if _looks_like_path(s):
        raise ModelFileError(s, "no such file or directory")
    raise UnknownNameError("model", s, _suggestable(s, list(catalog_keys())),
                           hint="see `gpuplan models`; or give a hub id (org/name), a "
                                "config.json, a model directory or a .gguf file")


def _from_file(p: Path) -> Model:
    if p.suffix == ".safetensors":
        from ._safetensors import read_header

        return model_from_checkpoint(list(read_header(p).tensors), name=p.stem, arch=None,
                                     notes=[])
    if p.suffix.lower() == ".gguf":
        return model_from_gguf(p)
    return model_from_config(p)


def from_param_count(n: int | str, *, name: str | None = None) -> Model:
    """A model known only by its parameter count (``--params 7B``): no split by component (all
    of it is ``other``), no architecture."""
    total = parse_count(n)
    by = dict.fromkeys(COMPONENTS, 0)
    by["other"] = total
    params = ParamCounts(total=total, by_component=MappingProxyType(by), active=total,
                         embedding=0)
    return Model(name=name or f"{format_count(total)}-parameter model", params=params,
                 source="count",
                 notes=("only the parameter count is known: no split by component, and no "
                        "architecture for activations or the KV cache",))
