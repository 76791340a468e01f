"""The error hierarchy. Every user-facing failure is one of these.

Messages are one line: the bad value, what is accepted, and the way out. The CLI prints
``gpuplan: error: <message>`` and exits with status 2 for any :class:`InputError`.

Errors are data (issue 27): an :class:`InputError` carries the ``field`` it is about, the
``value``, what is ``accepted`` and the ``fix`` as ``{field: value}``, and its message names
fields through :func:`opt` markers, never in one front end's spelling. ``str(error)`` is the
library's spelling (the field names); :meth:`InputError.render` takes a front end's: the CLI
names its options (``--grad-accum``), the web its JSON keys (``grad_accum``).
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "GpuplanError",
    "GpuplanWarning",
    "InputError",
    "UnknownNameError",
    "ModelFileError",
    "MissingDependencyError",
    "install_command",
    "UnsupportedError",
    "closest",
    "shown",
    "printable",
    "opt",
    "field_of",
    "library_spelling",
    "spell_text",
]

#: Around a field name inside a message (:func:`opt`): the unit separator, which no user value
#: reaches a message with (:func:`shown` escapes control characters).
_MARK = "\x1f"


def opt(name: str) -> str:
    """A field named inside an error message, rendered in each front end's spelling: the
    library's is the name itself, the CLI's its option, the web's its JSON key."""
    return f"{_MARK}{name}{_MARK}"


def field_of(label: object) -> str | None:
    """The field a label names when it is one :func:`opt` marker (``opt("plot")`` -> ``plot``),
    else None: a helper handed ``what=opt(name)`` can carry the field as data too."""
    if isinstance(label, str) and label.count(_MARK) == 2 and label[0] == label[-1] == _MARK:
        return label[1:-1]
    return None


def library_spelling(name: str) -> str:
    return name


def spell_text(text: str, spell=library_spelling) -> str:
    """A message kept with its :func:`opt` markers (an error stored as a report's note), with
    every field named by ``spell``: each front end renders it in its own spelling."""
    return _render(text, spell)


def _render(text: str, spell) -> str:
    if _MARK not in text:
        return text
    parts = text.split(_MARK)
    # odd positions are field names between two markers
    return "".join(spell(p) if i % 2 else p for i, p in enumerate(parts))


class GpuplanError(Exception):
    """Base class of every error gpuplan raises on purpose."""


class GpuplanWarning(UserWarning):
    """Base class of gpuplan's warnings (the CLI prints each as one ``gpuplan: warning:`` line)."""


class InputError(GpuplanError, ValueError):
    """A value given by the user is not acceptable (CLI exit code 2).

    ``field``: the field (a Job field or an option) the error is about; ``value``: the value
    given; ``accepted``: what is accepted, in words; ``fix``: the change that works, as
    ``{field: value}`` (a front end may offer it as a button or a flag)."""

    # class defaults: a subclass that builds its message itself still reads as data
    field: str | None = None
    value: object = None
    accepted: str | None = None
    fix: dict = {}

    def __init__(self, message: object = "", *, field: str | None = None,
                 value: object = None, accepted: str | None = None,
                 fix: dict | None = None) -> None:
        super().__init__(message)
        self.field = field
        self.value = value
        self.accepted = accepted
        if fix:
            self.fix = dict(fix)

    def render(self, spell=library_spelling) -> str:
        """The message with every field named by ``spell`` (name -> its spelling)."""
        return _render(str(self.args[0]) if self.args else "", spell)

    def __str__(self) -> str:
        return self.render()

    def to_dict(self, spell=library_spelling) -> dict:
        """The error as data: message, field, value, accepted, fix (keys in ``spell``)."""
        plain = isinstance(self.value, (float, bool, type(None))) or (
            isinstance(self.value, int) and self.value.bit_length() <= 128) or (
            isinstance(self.value, str) and len(self.value) <= 1000)
        value = self.value if plain else shown(self.value)
        return {"error": self.render(spell), "field": None if self.field is None
                else spell(self.field), "value": value, "accepted": self.accepted,
                "fix": {spell(k): v for k, v in self.fix.items()}}


class UnknownNameError(InputError, KeyError):
    """A name (GPU, model, precision, optimizer ...) is not in its catalog.

    ``suggestions`` holds the closest known names, best first.
    """

    def __init__(self, kind: str, name: str, known: Iterable[str], *, hint: str = "") -> None:
        self.kind = kind
        self.name = name
        self.suggestions = closest(name, known)
        msg = f"unknown {kind} {shown(name)}"
        if self.suggestions:
            msg += "; did you mean " + ", ".join(repr(s) for s in self.suggestions) + "?"
        if hint:
            msg += f" ({hint})"
        super().__init__(msg)

    def __str__(self) -> str:  # KeyError would quote the message
        return self.render()


class ModelFileError(InputError):
    """A config.json / safetensors file is missing, malformed, too large or hostile."""

    def __init__(self, path: object, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{printable(self.path)}: {problem}")  # a newline in it stays one line


#: PyTorch's CPU wheel index: a plain ``pip install torch`` on Linux resolves to the CUDA build
#: (several GB of CUDA libraries); this index serves the CPU-only wheels
#: (https://pytorch.org/get-started/locally/, "Compute Platform: CPU").
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def install_command(extra: str) -> str:
    """The pip command that installs gpuplan's optional ``extra`` on a CPU-only machine."""
    cmd = f"pip install 'gpuplan[{extra}]'"
    if extra == "torch":
        cmd += f" --extra-index-url {TORCH_CPU_INDEX}"
    return cmd


class MissingDependencyError(GpuplanError, ImportError):
    """An optional dependency is not installed; the message says what to install."""

    def __init__(self, package: str, extra: str, feature: str) -> None:
        self.package = package
        self.extra = extra
        msg = f"{feature} needs {package}, which is not installed; {install_command(extra)}"
        if extra == "torch":
            msg += " (CPU-only wheels; drop --extra-index-url for a CUDA build)"
        super().__init__(msg)


class UnsupportedError(InputError):
    """The request is well-formed but this hardware/model cannot do it (e.g. bf16 on a T4)."""


def closest(name: str, known: Iterable[str], n: int = 3) -> list[str]:
    """The known names closest to ``name`` (case-insensitive), best first."""
    import difflib  # only an error pays for it

    name = str(name)[:256]  # no name is longer; a hostile one costs nothing more
    known = list(known)
    by_lower = {k.lower(): k for k in known}
    hits = difflib.get_close_matches(name.lower(), list(by_lower), n=n, cutoff=0.5)
    # Substring hits ("h100" -> "h100-sxm-80gb") help when difflib's ratio is low.
    for k in sorted(by_lower):
        if len(hits) >= n:
            break
        if name.lower() in k and k not in hits:
            hits.append(k)
    return [by_lower[h] for h in hits]


#: Longest echo of a user's value inside a message (the rest is elided, its length stated).
_SHOWN_CHARS = 60

# C0/C1 control characters and DEL (an ANSI escape sequence starts with ESC, 0x1b).
_ESCAPES = {c: f"\\x{c:02x}" for c in (*range(0, 32), 127, *range(128, 160))}
_ESCAPES.update({ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"})


def printable(text: object, limit: int | None = None) -> str:
    """``text`` safe to print on a terminal: every control character (a newline, the ESC of an
    ANSI sequence ...) escaped as ``\\xNN``; cut to ``limit`` characters, the length stated."""
    s = text if isinstance(text, str) else str(text)
    if limit is not None and len(s) > limit:
        s = f"{s[:limit]}...({len(s)} chars)"
    return s.translate(_ESCAPES)


def shown(value: object) -> str:
    """A user's value as a message quotes it: its repr with control characters escaped, at most
    ~60 characters (a 4,301-digit number never reaches ``str(int)``'s digit limit)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return f"<a {value.bit_length()}-bit integer>"
    if isinstance(value, str) and len(value) > _SHOWN_CHARS:
        return printable(repr(value[:_SHOWN_CHARS])) + f"...({len(value)} chars)"
    if isinstance(value, (list, tuple, dict, set, frozenset)) and len(value) > 8:
        return f"<a {type(value).__name__} of {len(value)} items>"
    try:
        text = repr(value)
    except (ValueError, RecursionError):
        text = f"<{type(value).__name__}>"
    return printable(text, _SHOWN_CHARS)
