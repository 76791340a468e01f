"""``record``: a frozen dataclass, built with one small ``exec`` instead of six.

Every result and input type of gpuplan is a frozen dataclass, and there are about a hundred on
the path of one ``gpuplan fit``. On Python 3.10-3.12, ``dataclasses.dataclass(frozen=True)``
compiles ``__init__``, ``__repr__``, ``__eq__``, ``__hash__``, ``__setattr__`` and
``__delattr__`` with one ``exec`` each; that was a fifth of the command's start-up (issue 10's
start-up figure). Python 3.13 batches the six into one ``exec`` itself; this module does the
better on the older versions -- only ``__init__`` (whose signature carries the defaults) is
compiled; the other five are closures over the field names -- and hands 3.13+ to the standard
library unchanged.

The class is a real dataclass: ``dataclasses`` collects its fields (``fields``, ``replace``,
``asdict``, ``is_dataclass`` and ``__match_args__`` work as ever) and only the six methods come
from here, generated from the same field attributes with the same semantics as 3.11's: equality
on the tuple of ``compare`` fields of the same class, the hash of the ``hash``/``compare`` fields,
``repr`` fields in the repr, ``FrozenInstanceError`` on assignment and deletion, defaults,
default factories, ``init=False`` fields and ``__post_init__``. What this does not cover
(``InitVar``, ``slots``, a frozen dataclass base) is handed to ``dataclasses`` whole.
``tests/unit/test_record.py`` holds the two constructions equal.

``__init__`` itself is compiled when the class is first instantiated (issue 27: about half of the
records a command imports are never built by it, and the compile was two thirds of a record's
cost). Until then the class carries a stand-in that compiles it, puts it in its place and runs
it; the stand-in's ``__signature__`` is the compiled method's, so ``inspect.signature`` and the
doc of an undocumented class read the same before and after.
"""

from __future__ import annotations

import dataclasses
import inspect
import operator
import reprlib
import sys
from dataclasses import MISSING, FrozenInstanceError

__all__ = ["record"]

_BATCHED_BY_STDLIB = sys.version_info >= (3, 13)


@dataclasses.dataclass(frozen=True)
class _Frozen:
    """Its ``__dataclass_params__`` (frozen, eq, repr, init) is what a record carries."""


_FROZEN_PARAMS = _Frozen.__dataclass_params__


class _Factory:
    """The marker default of a parameter whose field has a default factory."""

    def __repr__(self) -> str:
        return "<factory>"


_HAS_FACTORY = _Factory()


def record(cls=None, /, *, kw_only: bool = True):
    """``@record`` is ``@dataclass(frozen=True, kw_only=True)``; ``@record(kw_only=False)`` is
    ``@dataclass(frozen=True)``."""

    def wrap(c):
        return _build(c, kw_only)

    return wrap if cls is None else wrap(cls)


def _stdlib_only(cls) -> bool:
    if _BATCHED_BY_STDLIB or "__slots__" in cls.__dict__:
        return True
    # an InitVar pseudo-field (annotated as a string or as the object): its value reaches
    # __post_init__ only through the standard library's __init__
    if any("InitVar" in (a if isinstance(a, str) else repr(a))
           for a in cls.__dict__.get("__annotations__", {}).values()):
        return True
    return any(getattr(b, "__dataclass_params__", None) is not None for b in cls.__mro__[1:])


def _build(cls, kw_only: bool):
    if _stdlib_only(cls):
        return dataclasses.dataclass(cls, frozen=True, kw_only=kw_only)
    own = set(cls.__dict__)
    explicit_hash = "__hash__" in own and not (cls.__dict__["__hash__"] is None and "__eq__" in own)
    documented = bool(cls.__dict__.get("__doc__"))
    if not documented:  # a stand-in, or dataclasses reads object.__init__'s signature for it
        cls.__doc__ = cls.__name__
    # dataclasses collects and checks the fields, generating no method
    dataclasses.dataclass(cls, init=False, repr=False, eq=False, kw_only=kw_only)
    fields = list(dataclasses.fields(cls))  # the real fields: no ClassVar pseudo-field
    signature = _signature(fields)
    for name, fn in {"__init__": _lazy_init(cls, fields, signature),
                     **_methods(cls, fields)}.items():
        if name in ("__setattr__", "__delattr__") and name in own:
            raise TypeError(f"Cannot overwrite attribute {name} in class {cls.__name__}")
        if (name in own and name != "__hash__") or (name == "__hash__" and explicit_hash):
            continue  # the class's own method stays, as dataclasses leaves it
        fn.__qualname__ = f"{cls.__qualname__}.{name}"
        setattr(cls, name, fn)
    cls.__dataclass_params__ = _FROZEN_PARAMS
    if not documented:  # the signature as the doc, as dataclasses writes it
        shown = inspect.signature(cls) if "__init__" in own else signature.replace(
            parameters=list(signature.parameters.values())[1:])
        cls.__doc__ = cls.__name__ + str(shown).replace(" -> None", "")
    return cls


def _signature(fields) -> inspect.Signature:
    """The compiled ``__init__``'s signature, built without compiling it: ``self``, the positional
    init fields, then the keyword-only ones; defaults (``<factory>`` for a default factory) and
    the fields' annotations; ``-> None``."""
    kind = inspect.Parameter
    params = [kind("self", kind.POSITIONAL_OR_KEYWORD)]
    keyword = []
    for f in fields:
        if not f.init:
            continue
        default = (f.default if f.default is not MISSING else
                   _HAS_FACTORY if f.default_factory is not MISSING else kind.empty)
        p = kind(f.name, kind.KEYWORD_ONLY if f.kw_only else kind.POSITIONAL_OR_KEYWORD,
                 default=default, annotation=f.type)
        (keyword if f.kw_only else params).append(p)
    return inspect.Signature(params + keyword, return_annotation=None)


def _lazy_init(cls, fields, signature: inspect.Signature):
    """The stand-in ``__init__``: on the first instance, the compiled one replaces it."""

    def __init__(self, *args, **kwargs):
        real = compiled_init(cls)
        real(self, *args, **kwargs)

    __init__.__signature__ = signature
    __init__._record_fields = fields  # what compiled_init compiles
    return __init__


def compiled_init(cls):
    """``cls.__init__``, compiled now if the class still has its stand-in (tests compare the two
    signatures; the stand-in calls this on the first instance)."""
    stand_in = cls.__dict__.get("__init__")
    fields = getattr(stand_in, "_record_fields", None)
    if fields is None:
        return stand_in
    real = _init(cls, fields)
    real.__qualname__ = f"{cls.__qualname__}.__init__"
    cls.__init__ = real
    return real


def _params(fields, env: dict) -> str:
    positional, keyword = [], []
    for f in fields:
        if not f.init:
            continue
        if f.default is not MISSING:
            env[f"_d_{f.name}"] = f.default
            p = f"{f.name}=_d_{f.name}"
        elif f.default_factory is not MISSING:
            p = f"{f.name}=_HAS_FACTORY"
        else:
            p = f.name
        (keyword if f.kw_only else positional).append(p)
    return ", ".join(["self", *positional, *(["*", *keyword] if keyword else [])])


def _init_lines(cls, fields, env: dict) -> list[str]:
    lines = []
    for f in fields:
        if f.default_factory is not MISSING:
            env[f"_f_{f.name}"] = f.default_factory
            value = (f"_f_{f.name}() if {f.name} is _HAS_FACTORY else {f.name}" if f.init
                     else f"_f_{f.name}()")
        elif f.init:
            value = f.name
        else:
            continue  # read from the class attribute, as dataclasses leaves it
        lines.append(f" _set(self, {f.name!r}, {value})")
    if hasattr(cls, "__post_init__"):
        lines.append(" self.__post_init__()")
    return lines or [" pass"]


def _getter(names: list[str]):
    """``obj -> (obj.a, obj.b, ...)``, always a tuple (attrgetter of one name is not)."""
    if not names:
        return lambda obj: ()
    if len(names) == 1:
        one = operator.attrgetter(names[0])
        return lambda obj: (one(obj),)
    return operator.attrgetter(*names)


def _methods(cls, fields) -> dict:
    """``__repr__``, ``__eq__``, ``__hash__``, ``__setattr__``, ``__delattr__`` as closures over
    the field names: nothing to compile."""
    shown = [f.name for f in fields if f.repr]
    shown_values = _getter(shown)
    compared = _getter([f.name for f in fields if f.compare])
    hashed = _getter([f.name for f in fields if (f.compare if f.hash is None else f.hash)])
    frozen = frozenset(f.name for f in fields)

    def __repr__(self):
        values = shown_values(self)
        inner = ", ".join(f"{n}={v!r}" for n, v in zip(shown, values))
        return f"{self.__class__.__qualname__}({inner})"

    def __eq__(self, other):
        if other.__class__ is self.__class__:
            return compared(self) == compared(other)
        return NotImplemented

    def __hash__(self):
        return hash(hashed(self))

    def __setattr__(self, name, value):
        if type(self) is cls or name in frozen:
            raise FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    def __delattr__(self, name):
        if type(self) is cls or name in frozen:
            raise FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    return {"__repr__": reprlib.recursive_repr()(__repr__), "__eq__": __eq__,
            "__hash__": __hash__, "__setattr__": __setattr__, "__delattr__": __delattr__}


def _init(cls, fields):
    """The one compiled method: ``__init__``, whose signature carries the defaults. The fields'
    annotations are set on it afterwards, not compiled (a fifth of the compile's time): the
    signature reads ``__annotations__`` either way."""
    env = {"_set": object.__setattr__, "_HAS_FACTORY": _HAS_FACTORY}
    source = "\n".join([f"def __init__({_params(fields, env)}):",
                        *_init_lines(cls, fields, env)]) + "\n"
    exec(compile(source, f"<record {cls.__qualname__}>", "exec", dont_inherit=True), env)  # noqa: S102
    fn = env["__init__"]
    fn.__annotations__ = {**{f.name: f.type for f in fields if f.init and not f.kw_only},
                          **{f.name: f.type for f in fields if f.init and f.kw_only},
                          "return": None}
    return fn
