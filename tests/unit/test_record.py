"""``gpuplan._record.record`` against the standard library's frozen dataclass: the same class
built both ways behaves the same (signature, repr, equality, hash, frozenness, defaults,
factories, ``init=False`` fields, ``__post_init__``, the dataclasses helpers), and every record in
the package is a dataclass whose ``__init__`` takes exactly its init fields."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pickle
import pkgutil
from dataclasses import FrozenInstanceError, field
from dataclasses import InitVar  # noqa: F401 -- the string annotations below resolve to it
from typing import ClassVar  # noqa: F401 -- as InitVar

import pytest

import gpuplan
from gpuplan._record import compiled_init, record


def _pair(body: dict, kw_only: bool = True, bases: tuple = (), doc: str | None = "A record."):
    """The same class body built by ``record`` and by ``dataclasses.dataclass``."""
    made = []
    for build in (lambda c: record(c, kw_only=kw_only),
                  lambda c: dataclasses.dataclass(c, frozen=True, kw_only=kw_only)):
        ns = {k: (v.__class__(v) if isinstance(v, (list, dict)) else v) for k, v in body.items()}
        ns = dict(ns, __doc__=doc, __qualname__="Rec", __module__=__name__)
        cls = type("Rec", bases, ns)
        made.append(build(cls))
    return made


def _fields(**annotated):
    body = {"__annotations__": {}}
    for name, spec in annotated.items():
        ann, *default = (spec,) if isinstance(spec, str) else spec
        body["__annotations__"][name] = ann
        if default:
            body[name] = default[0]
    return body


BODIES = {
    "plain": _fields(a="int", b="str"),
    "defaults": _fields(a="int", b=("float", 1.5), c=("tuple", (1, 2))),
    "factory": _fields(a="int", xs=("list", field(default_factory=list))),
    "not-in-init": _fields(a="int", b=("int", field(default=7, init=False))),
    "factory-not-in-init": _fields(a="int", d=("dict", field(default_factory=dict, init=False))),
    "compare-repr-hash": _fields(a="int", b=("int", field(default=0, compare=False)),
                                 c=("int", field(default=0, repr=False)),
                                 d=("int", field(default=0, hash=False))),
    "classvar": dict(_fields(a="int"), __annotations__={"a": "int", "K": "ClassVar[int]"}, K=3),
    "empty": _fields(),
}


def _sample(cls):
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.init and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            kwargs[f.name] = {"int": 4, "str": "s", "float": 2.0}.get(f.type, 1)
    return kwargs


@pytest.mark.parametrize("kw_only", [True, False])
@pytest.mark.parametrize("name", sorted(BODIES))
def test_record_behaves_as_the_frozen_dataclass(name, kw_only):
    fast, std = _pair(BODIES[name], kw_only=kw_only)
    assert str(inspect.signature(fast)) == str(inspect.signature(std))
    assert [f.name for f in dataclasses.fields(fast)] == [f.name for f in dataclasses.fields(std)]
    assert fast.__match_args__ == std.__match_args__
    kw = _sample(std)
    a, b = fast(**kw), std(**kw)
    assert repr(a) == repr(b)
    assert dataclasses.asdict(a) == dataclasses.asdict(b)
    assert a == fast(**kw)
    try:
        expected = hash(b) == hash(std(**kw))
    except TypeError:  # a list field: unhashable either way
        with pytest.raises(TypeError):
            hash(a)
    else:
        assert expected and hash(a) == hash(fast(**kw))
    assert (a == b) is False  # another class: NotImplemented both ways, as dataclasses
    first = next((f.name for f in dataclasses.fields(fast)), None)
    if first is not None:
        with pytest.raises(FrozenInstanceError, match="cannot assign"):
            setattr(a, first, 1)
        with pytest.raises(FrozenInstanceError, match="cannot delete"):
            delattr(a, first)
        changed = dataclasses.replace(a, **{first: kw.get(first, 5)})
        assert changed == a
    assert dataclasses.is_dataclass(fast) and fast.__dataclass_params__.frozen
    # the compiled __init__ (in place once a first instance is built) has the stand-in's signature
    assert fast.__init__ is compiled_init(fast) and not hasattr(fast.__init__, "__signature__")
    assert str(inspect.signature(fast)) == str(inspect.signature(std))


def test_init_is_compiled_on_the_first_instance_and_checks_its_arguments():
    fast, std = _pair(_fields(a="int", b=("int", 2)))
    stand_in = fast.__init__
    with pytest.raises(TypeError, match=r"Rec.__init__\(\) missing 1 required keyword-only "
                                        r"argument: 'a'"):
        fast()
    assert fast.__init__ is not stand_in  # compiled by that first call, and in its place
    with pytest.raises(TypeError, match="unexpected keyword argument 'c'"):
        fast(a=1, c=3)
    assert fast(a=1) == fast(a=1, b=2) and fast(a=1).b == std(a=1).b == 2
    sub = type("Sub", (_pair(_fields(a="int"))[0],), {})  # a plain subclass: the base compiles
    assert sub(a=4).a == 4


def test_compare_and_hash_flags_are_honoured():
    fast, std = _pair(BODIES["compare-repr-hash"])
    for cls in (fast, std):
        x, y = cls(a=1, b=1, c=1, d=1), cls(a=1, b=2, c=1, d=1)
        assert x == y and hash(x) == hash(y)            # b not compared
        z = cls(a=1, b=1, c=1, d=2)
        assert x != z and hash(x) == hash(z)            # d compared, not hashed
        assert "c=" not in repr(x) and "b=1" in repr(x)
        assert x != cls(a=1, b=1, c=2, d=1)             # c compared


def test_factories_give_fresh_objects():
    fast, _ = _pair(BODIES["factory"])
    assert fast(a=1).xs is not fast(a=1).xs
    fast, _ = _pair(BODIES["factory-not-in-init"])
    assert fast(a=1).d == {} and "d" not in inspect.signature(fast).parameters


def test_post_init_runs_and_can_reject():
    def check(self):
        if self.a < 0:
            raise ValueError("a < 0")
        object.__setattr__(self, "b", self.a * 2)

    body = dict(_fields(a="int", b=("int", field(default=0, init=False))), __post_init__=check)
    fast, std = _pair(body)
    assert fast(a=3).b == std(a=3).b == 6
    with pytest.raises(ValueError):
        fast(a=-1)


def test_own_methods_stay_and_undocumented_classes_get_the_signature_as_doc():
    body = dict(_fields(a="int"), __repr__=lambda self: "mine")
    fast, std = _pair(body, doc=None)
    assert repr(fast(a=1)) == repr(std(a=1)) == "mine"
    assert fast.__doc__ == std.__doc__ == "Rec(*, a: 'int')"
    with pytest.raises(TypeError, match="Cannot overwrite attribute __setattr__"):
        record(type("Bad", (), {"__annotations__": {"a": "int"},
                                "__setattr__": lambda s, n, v: None}))


def test_initvar_reaches_post_init():
    """An InitVar is the standard library's whole: not a field, passed to __post_init__."""
    def post(self, scale):
        object.__setattr__(self, "b", self.a * scale)

    body = {"__annotations__": {"a": "int", "scale": "InitVar[int]", "b": "int"},
            "b": field(default=0, init=False), "__post_init__": post}
    fast, std = _pair(body)
    assert fast(a=2, scale=3).b == std(a=2, scale=3).b == 6
    assert [f.name for f in dataclasses.fields(fast)] == ["a", "b"]
    assert str(inspect.signature(fast)) == str(inspect.signature(std))


def test_subclass_of_a_record_is_a_frozen_dataclass():
    base, _ = _pair(_fields(a="int"))
    sub = record(type("Sub", (base,), {"__annotations__": {"b": "int"}, "b": 0}))
    s = sub(a=1, b=2)
    assert s.a == 1 and s.b == 2 and repr(s).endswith("Sub(a=1, b=2)")
    with pytest.raises(FrozenInstanceError):
        s.b = 3


def test_records_pickle():
    assert pickle.loads(pickle.dumps(gpuplan.Job(model="gpt2"))) == gpuplan.Job(model="gpt2")


def test_every_record_in_the_package_takes_its_init_fields():
    """Each dataclass of gpuplan's core (no torch) has an ``__init__`` whose parameters are its
    init fields, in order: the generated method and the collected fields agree."""
    seen = 0
    for info in pkgutil.walk_packages(gpuplan.__path__, "gpuplan."):
        if any(part in info.name for part in (".trace", ".measure", ".web", ".cli", "._record",
                                                   "__main__")):
            continue
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if (isinstance(obj, type) and obj.__module__ == module.__name__
                    and dataclasses.is_dataclass(obj) and obj.__dataclass_params__.frozen):
                before = inspect.signature(obj)  # the stand-in's, unless already built
                params = list(before.parameters)
                assert params == [f.name for f in dataclasses.fields(obj) if f.init], obj
                compiled_init(obj)
                assert str(inspect.signature(obj)) == str(before), obj
                seen += 1
    assert seen >= 60
