"""The tensor list builder and the config helpers every family reader shares."""

from __future__ import annotations

from collections.abc import Iterable

from ._config import ConfigReader
from ._types import ParamTensor

__all__ = ["Tensors", "layer_groups", "head_dim_of", "dropout_of", "torch_dtype_of",
           "layer_types_of", "layer_type_list"]


class Tensors:
    """Collects ParamTensors; layer-indexed names use ``{i}`` (and ``{e}`` for experts)."""

    def __init__(self) -> None:
        self.items: list[ParamTensor] = []

    def add(self, name: str, shape: Iterable[int], count: int, component: str, module: str, *,
            linear: bool = False, transposed: bool = False, layer: int | None = None) -> None:
        self.items.append(ParamTensor(
            name=name, shape=tuple(shape), count=count, component=component,  # type: ignore[arg-type]
            module=module, linear=linear, transposed=transposed, layer=layer))

    def linear(self, prefix: str, out: int, inp: int, count: int, component: str, *,
               bias: bool, layer: int | None = None) -> None:
        """An nn.Linear: weight (out, in) and optionally bias (out,)."""
        module = prefix.rsplit(".", 1)[-1]
        self.add(f"{prefix}.weight", (out, inp), count, component, module, linear=True, layer=layer)
        if bias:
            self.add(f"{prefix}.bias", (out,), count, component, module, layer=layer)

    def conv1d(self, prefix: str, inp: int, out: int, count: int, component: str) -> None:
        """GPT-2's Conv1D: weight stored (in, out), always with a bias."""
        module = prefix.rsplit(".", 1)[-1]
        self.add(f"{prefix}.weight", (inp, out), count, component, module, linear=True,
                 transposed=True)
        self.add(f"{prefix}.bias", (out,), count, component, module)

    def norm(self, prefix: str, dim: int, count: int, *, bias: bool,
             layer: int | None = None) -> None:
        module = prefix.rsplit(".", 1)[-1]
        self.add(f"{prefix}.weight", (dim,), count, "norms", module, layer=layer)
        if bias:
            self.add(f"{prefix}.bias", (dim,), count, "norms", module, layer=layer)

    def embedding(self, name: str, rows: int, dim: int, module: str) -> None:
        self.add(name, (rows, dim), 1, "embeddings", module)


def layer_groups(indices: tuple[int, ...], num_layers: int) -> list[tuple[str, int, int | None]]:
    """How to name the tensors of ``indices``: one ``{i}`` pattern when they are all the layers,
    else one concrete entry per layer. Yields (index text, layer count, layer)."""
    if indices == tuple(range(num_layers)):
        return [("{i}", num_layers, None)]
    return [(str(i), 1, i) for i in indices]


def head_dim_of(r: ConfigReader, hidden: int, heads: int, *, default: int | None = None) -> int:
    if r.has("head_dim"):
        return r.integer("head_dim")
    if default is not None:
        return default
    if hidden % heads:
        raise r.fail(f'"hidden_size" {hidden} is not divisible by "num_attention_heads" {heads}; '
                     f'give "head_dim"')
    return hidden // heads


def dropout_of(r: ConfigReader, *keys: str, default: float = 0.0) -> float:
    return r.number(*keys, default=default, minimum=0.0, maximum=1.0)


def torch_dtype_of(r: ConfigReader) -> str | None:
    return r.string("torch_dtype", "dtype")


def layer_types_of(r: ConfigReader, num_layers: int) -> tuple[int, ...] | None:
    """Sliding layers from an explicit ``layer_types`` list, or None when the config has none."""
    types = layer_type_list(r, num_layers, ("full_attention", "sliding_attention"))
    if types is None:
        return None
    return tuple(i for i, t in enumerate(types) if t == "sliding_attention")


def layer_type_list(r: ConfigReader, num_layers: int,
                    allowed: tuple[str, ...]) -> tuple[str, ...] | None:
    """The config's ``layer_types`` (one attention kind per layer), checked against ``allowed``;
    None when the config has none (the family's default pattern applies)."""
    types = r.str_list("layer_types")
    if types is None:
        return None
    if len(types) != num_layers:
        raise r.fail(f'"layer_types" has {len(types)} entries for {num_layers} layers')
    for t in types:
        if t not in allowed:
            raise r.fail(f'"layer_types" holds {t!r}; expected one of '
                         + ", ".join(f'"{a}"' for a in allowed))
    return types
