"""The error hierarchy. Every user-facing failure is one of these.

Messages are one line: the bad value, what is accepted, and the way out. The CLI prints
``gpuplan: error: <message>`` and exits with status 2 for any :class:`InputError`.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "GpuplanError",
    "InputError",
    "UnknownNameError",
    "ModelFileError",
    "MissingDependencyError",
    "install_command",
    "UnsupportedError",
    "closest",
]


class GpuplanError(Exception):
    """Base class of every error gpuplan raises on purpose."""


class InputError(GpuplanError, ValueError):
    """A value given by the user is not acceptable (CLI exit code 2)."""


class UnknownNameError(InputError, KeyError):
    """A name (GPU, model, precision, optimizer ...) is not in its catalog.

    ``suggestions`` holds the closest known names, best first.
    """

    def __init__(self, kind: str, name: str, known: Iterable[str], *, hint: str = "") -> None:
        self.kind = kind
        self.name = name
        self.suggestions = closest(name, known)
        msg = f"unknown {kind} {name!r}"
        if self.suggestions:
            msg += "; did you mean " + ", ".join(repr(s) for s in self.suggestions) + "?"
        if hint:
            msg += f" ({hint})"
        super().__init__(msg)

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class ModelFileError(InputError):
    """A config.json / safetensors file is missing, malformed, too large or hostile."""

    def __init__(self, path: object, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


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
