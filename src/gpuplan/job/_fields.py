"""Types checked from the annotations: every field of the job's configs is checked against its
own annotation (bools are bools, whole numbers whole and in their range, a Literal's value one
of its choices, names short strings, a list of names a tuple), so a config validates itself with
no table of its own beyond the ranges (:data:`BOUNDS_OF`). The same annotations read a JSON
value (:func:`from_json`) for :meth:`gpuplan.Job.from_dict`."""

from __future__ import annotations

import types
from dataclasses import fields
from functools import cache
from typing import Literal, Union, get_args, get_origin, get_type_hints

from ..bounds import check_int, check_number
from ..errors import InputError, closest, opt, shown
from ..models import Model

__all__ = ["BOUNDS_OF", "check_fields", "check_value", "from_json", "hints_of", "choice"]

#: A number field's range in :data:`gpuplan.bounds.BOUNDS` (every whole-number or real field of
#: a job config is listed: a field missing here is a bug the checker names).
BOUNDS_OF = {
    "batch": "batch", "seq": "seq", "grad_accum": "grad_accum", "gpus": "gpus", "tp": "gpus",
    "pp": "gpus", "cp": "gpus", "ep": "gpus", "gpus_per_node": "gpus", "loss_chunks": "loss_chunks",
    "context": "context", "lora_rank": "lora_rank", "micro_batches": "grad_accum",
    "stage3_max_live_parameters": "count", "stage3_prefetch_bucket_size": "count",
    "lora_dropout": "fraction", "max_grad_norm": "grad_norm", "zero": "zero",
    "first_last_layers_bf16": "edge_layers", "pp_first_stage_layers": "grad_accum",
    "pp_last_stage_layers": "grad_accum", "etp": "gpus",
    "moe_capacity_factor": "capacity_factor", "mtp_layers": "edge_layers",
    "power_limit_w": "power", "dp_shard": "gpus", "fp8_amax_history": "count",
}

#: Longest string a name field takes.
_MAX_NAME = 256
#: Most items of a list-of-names field.
_MAX_ITEMS = 1000


@cache
def hints_of(cls: type) -> dict[str, object]:
    """Field -> resolved annotation, in field order."""
    hints = get_type_hints(cls)
    return {f.name: hints[f.name] for f in fields(cls)}


def alternatives(hint: object) -> tuple:
    if get_origin(hint) in (Union, types.UnionType):
        return get_args(hint)
    return (hint,)


def choice(value: object, options: tuple[str, ...], field: str) -> str:
    """``value`` when it is one of ``options``, else one line with the nearest."""
    if value not in options:
        near = closest(str(value)[:_MAX_NAME], options, n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        raise InputError(f"{opt(field)} {shown(value)}: expected one of {', '.join(options)}"
                         f"{hint}", field=field, value=value, accepted=", ".join(options),
                         fix={field: near[0]} if near else None)
    return value


def check_fields(obj: object) -> None:
    """Every field of ``obj`` (a frozen config) against its annotation, in field order; the first
    bad one is one line naming it. A list where a tuple of names belongs becomes the tuple."""
    for name, hint in hints_of(type(obj)).items():
        value = getattr(obj, name)
        out = check_value(name, value, hint)
        if out is not value:
            object.__setattr__(obj, name, out)


def check_value(name: str, value: object, hint: object) -> object:
    """``value`` as the field ``name`` annotated ``hint`` takes it (a list of names as a tuple),
    else one line naming the field."""
    alts = alternatives(hint)
    if value is None and type(None) in alts:
        return value
    t = next(a for a in alts if a is not type(None))
    if t is bool:
        if not isinstance(value, bool):
            raise InputError(f"{opt(name)} {shown(value)}: expected true or false (got "
                             f"{type(value).__name__})", field=name, value=value,
                             accepted="true or false")
        return value
    if t is int:
        if name == "zero":
            if isinstance(value, bool) or value not in (0, 1, 2, 3):
                raise InputError(f"{opt(name)} {shown(value)}: expected a ZeRO stage 0, 1, 2 "
                                 "or 3", field=name, value=value, accepted="0, 1, 2 or 3")
            return value
        return check_int(value, BOUNDS_OF[name], field=name)
    if t is float:
        check_number(value, BOUNDS_OF[name], field=name)
        return value
    if t is str or get_origin(t) is Literal:
        if not isinstance(value, str):
            raise InputError(f"{opt(name)} {shown(value)}: expected a string (got "
                             f"{type(value).__name__})", field=name, value=value)
        if len(value) > _MAX_NAME:
            raise InputError(f"{opt(name)} {shown(value)}: too long for a name; the help lists "
                             "the choices", field=name, value=value)
        if get_origin(t) is Literal:
            choice(value, get_args(t), name)
        return value
    if get_origin(t) is tuple:
        return _names(name, value)
    if t is Model or (isinstance(t, type) and issubclass(t, Model)):
        raise InputError(f"{opt(name)} {shown(value)}: expected a name, a path or a Model "
                         f"(got {type(value).__name__})", field=name, value=value)
    raise TypeError(f"{name}: no check for annotation {hint!r}")  # a bug, not an input


def _names(name: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise InputError(f"{opt(name)} {shown(value)}: expected a list of module names such "
                         "as ['q_proj', 'v_proj']", field=name, value=value)
    if not 0 < len(value) <= _MAX_ITEMS or not all(
            isinstance(t, str) and 0 < len(t) <= _MAX_NAME for t in value):
        raise InputError(f"{opt(name)} {shown(value)}: expected 1 to {_MAX_ITEMS} module names "
                         "(strings) such as ['q_proj', 'v_proj']", field=name, value=value)
    return tuple(value)


def _accepts(t: object, value: object) -> tuple[bool, object]:
    """Whether a JSON value fits one type of a field's annotation, and the value to use."""
    if t is type(None):
        return value is None, None
    if t is bool:
        return isinstance(value, bool), value
    if t is int:
        return isinstance(value, int) and not isinstance(value, bool), value
    if t is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return ok, float(value) if ok else value
    if t is str or get_origin(t) is Literal:  # a Literal's choice is checked by the config
        return isinstance(value, str), value
    if get_origin(t) is tuple:
        ok = isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)
        return ok, tuple(value) if ok else value
    return False, value  # Model: a dict names its model by a string


_KIND = {bool: "true or false", int: "a whole number", float: "a number", str: "a string",
         type(None): "null"}


def from_json(key: str, value: object, hint: object) -> object:
    """A JSON value as the field annotated ``hint`` takes it, else one line naming the key."""
    alts = alternatives(hint)
    for t in alts:
        ok, out = _accepts(t, value)
        if ok:
            return out
    kinds = [_KIND.get(t) or ("a list of strings" if get_origin(t) is tuple else
                              "one of " + ", ".join(get_args(t)) if get_origin(t) is Literal
                              else "") for t in alts]
    raise InputError(f"{opt(key)} {shown(value)}: expected "
                     f"{' or '.join(k for k in kinds if k)}", field=key, value=value)
