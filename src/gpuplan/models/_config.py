"""Reading config.json: a size-bounded read, strict JSON, and typed access to its keys.

Every problem becomes one :class:`~gpuplan.errors.ModelFileError` line naming the file (or, for a
dict handed in from Python, the model name) and the key: ``config.json: "hidden_size" is 'big';
expected a whole number >= 1``. Nothing in the file is executed: ``auto_map`` and remote code are
ignored, the file is data.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping

from .._io import json_problem, read_bounded
from ..bounds import BOUNDS
from ..errors import ModelFileError, shown
from ..units import MB

__all__ = ["MAX_CONFIG_BYTES", "read_json_file", "parse_json_bytes", "check_json_shape",
           "ConfigReader"]

#: The largest config.json accepted (real ones are a few kB; ViT's with 1000 labels is ~70 kB).
MAX_CONFIG_BYTES = 5 * MB

#: Upper bound on any single dimension read from a config (a sanity limit, far above real models).
MAX_DIM = 2**31 - 1

#: Keys that count layers: at most ``bounds.BOUNDS["layers"]`` (10^4; the deepest published
#: transformer has under 200), so no per-layer structure grows without bound.
_LAYER_KEYS = frozenset({"num_hidden_layers", "n_layer", "num_layers", "n_layers",
                         "encoder_layers", "decoder_layers"})

#: Deepest nesting of JSON arrays/objects accepted (real configs: 3 or 4), and most values
#: (keys, list items) in one file: checked without recursion before anything walks the data.
MAX_JSON_DEPTH = 64
MAX_JSON_VALUES = 1_000_000

_REQUIRED = object()


def _reject_constant(name: str) -> float:
    raise ValueError(f"non-standard JSON constant {name}")


def read_json_file(path: str | os.PathLike, *, limit: int = MAX_CONFIG_BYTES,
                   what: str = "config.json") -> dict:
    """Read a JSON object from ``path``: bounded size, UTF-8, strict JSON (no NaN/Infinity)."""
    return parse_json_bytes(read_bounded(path, limit, what=what), where=path, limit=limit)


def parse_json_bytes(data: bytes, *, where: str | os.PathLike = "config.json",
                     limit: int = MAX_CONFIG_BYTES) -> dict:
    """The same strict reading for bytes already in memory (a config.json pasted into the web
    page): at most ``limit`` bytes, UTF-8, strict JSON, a JSON object; errors name ``where``."""
    if len(data) > limit:
        raise ModelFileError(where, f"is {len(data):,} bytes; at most {limit:,} are read")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ModelFileError(where, f"is not UTF-8 text (byte {e.start})") from None
    try:
        obj = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as e:
        raise ModelFileError(where, f"is not valid JSON ({json_problem(e)})") from None
    if not isinstance(obj, dict):
        raise ModelFileError(where, f"must hold a JSON object, found a JSON {_json_kind(obj)}")
    check_json_shape(obj, where)
    return obj


def check_json_shape(obj: object, where: str | os.PathLike, *, depth: int = MAX_JSON_DEPTH,
                     values: int = MAX_JSON_VALUES) -> None:
    """Refuse JSON nested deeper than ``depth`` or holding more than ``values`` values, walking
    it with an explicit stack (no recursion, so no RecursionError whatever the input)."""
    stack: list[tuple[object, int]] = [(obj, 1)]
    seen = 0
    while stack:
        v, d = stack.pop()
        if d > depth:
            raise ModelFileError(where, f"JSON is nested more than {depth} levels deep; a "
                                        "config.json is 3 or 4")
        items = v.values() if isinstance(v, dict) else v if isinstance(v, list) else ()
        for child in items:
            seen += 1
            if isinstance(child, (dict, list)):
                stack.append((child, d + 1))
        if seen > values:
            raise ModelFileError(where, f"JSON holds more than {values:,} values")


def _json_kind(v: object) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"


def _show(v: object) -> str:
    return shown(v)


class ConfigReader:
    """Typed, validated access to one config dict. ``where`` names it in every error."""

    def __init__(self, config: Mapping[str, object], where: str) -> None:
        if not isinstance(config, Mapping):
            raise ModelFileError(where, f"config must be a JSON object, found {type(config).__name__}")
        self.config = config
        self.where = where
        self.notes: list[str] = []
        """Things worth telling the user (defaults that matter), gathered while reading."""

    def fail(self, problem: str) -> ModelFileError:
        return ModelFileError(self.where, problem)

    def _lookup(self, keys: tuple[str, ...]) -> tuple[str, object] | None:
        for k in keys:
            if k in self.config and self.config[k] is not None:
                return k, self.config[k]
        return None

    def has(self, *keys: str) -> bool:
        return self._lookup(keys) is not None

    def integer(self, *keys: str, default: object = _REQUIRED, minimum: int = 1,
            maximum: int = MAX_DIM) -> int:
        """A whole number (JSON integer, not a boolean) in [minimum, maximum]."""
        found = self._lookup(keys)
        if found is None:
            if default is _REQUIRED:
                names = " or ".join(f'"{k}"' for k in keys)
                raise self.fail(f"missing required key {names}")
            return default  # type: ignore[return-value]
        k, v = found
        if k in _LAYER_KEYS:
            maximum = min(maximum, int(BOUNDS["layers"].high))
        if isinstance(v, bool) or not isinstance(v, int):
            if isinstance(v, float) and v.is_integer() and minimum <= v <= maximum:
                # 4096.0: transformers would carry it as a float and fail in nn.Linear.
                raise self.fail(f'"{k}" is {_show(v)}, a float; expected a whole number '
                                f'(write {int(v)})')
            raise self.fail(f'"{k}" is {_show(v)}; expected a whole number >= {minimum}')
        if v < minimum:
            raise self.fail(f'"{k}" is {_show(v)}; expected a whole number >= {minimum}')
        if v > maximum:
            raise self.fail(f'"{k}" is {_show(v)}; larger than the limit {maximum}')
        return v

    def optional_integer(self, key: str, *, default: int | None, minimum: int = 1) -> int | None:
        """Like :meth:`integer`, but an explicit JSON null means "none" (not "the default")."""
        if key in self.config and self.config[key] is None:
            return None
        return self.integer(key, default=default, minimum=minimum)

    def boolean(self, *keys: str, default: bool) -> bool:
        found = self._lookup(keys)
        if found is None:
            return default
        k, v = found
        if not isinstance(v, bool):
            raise self.fail(f'"{k}" is {_show(v)}; expected true or false')
        return v

    def number(self, *keys: str, default: float, minimum: float = 0.0,
              maximum: float = math.inf) -> float:
        found = self._lookup(keys)
        if found is None:
            return default
        k, v = found
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise self.fail(f'"{k}" is {_show(v)}; expected a number')
        if not (minimum <= v <= maximum):
            raise self.fail(f'"{k}" is {_show(v)}; expected a number in [{minimum}, {maximum}]')
        return float(v)

    def string(self, *keys: str, default: str | None = None) -> str | None:
        found = self._lookup(keys)
        if found is None:
            return default
        k, v = found
        if not isinstance(v, str):
            raise self.fail(f'"{k}" is {_show(v)}; expected a string')
        return v

    def int_list(self, key: str, *, maximum: int) -> tuple[int, ...]:
        """A list of whole numbers in [0, maximum) (layer indices)."""
        v = self.config.get(key)
        if v is None:
            return ()
        if not isinstance(v, list):
            raise self.fail(f'"{key}" is {_show(v)}; expected a list of layer indices')
        out = []
        for x in v:
            if isinstance(x, bool) or not isinstance(x, int) or not (0 <= x < maximum):
                raise self.fail(f'"{key}" holds {_show(x)}; expected layer indices 0..{maximum - 1}')
            out.append(x)
        return tuple(out)

    def str_list(self, key: str) -> tuple[str, ...] | None:
        v = self.config.get(key)
        if v is None:
            return None
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise self.fail(f'"{key}" is {_show(v)}; expected a list of strings')
        return tuple(v)
