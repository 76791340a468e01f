"""Optional dependencies: which extra provides which package, importing one when a feature needs
it, and what is installed (without importing anything heavy).

Every command that needs an optional package goes through :func:`require`, so a missing one is
always the same single line -- the feature, the package, and the exact pip command for a CPU-only
machine (:func:`gpuplan.errors.install_command`) -- and never a traceback.
"""

from __future__ import annotations

import importlib.util
from types import ModuleType

from .errors import MissingDependencyError

__all__ = ["EXTRAS", "PACKAGE_EXTRA", "require", "installed_version", "extras_status"]

#: Each extra of pyproject.toml and the distributions it installs (kept equal to pyproject.toml's
#: [project.optional-dependencies] by a test).
EXTRAS: dict[str, tuple[str, ...]] = {
    "safetensors": ("safetensors", "numpy"),
    "plot": ("matplotlib",),
    "torch": ("torch", "transformers", "safetensors"),
    "hub": ("huggingface_hub",),
    "gguf": ("gguf",),
}

#: Importable module -> the extra that installs it (torch's extra for transformers too).
PACKAGE_EXTRA: dict[str, str] = {
    "torch": "torch", "transformers": "torch", "safetensors": "safetensors", "numpy": "safetensors",
    "matplotlib": "plot", "huggingface_hub": "hub", "gguf": "gguf",
}


def require(*modules: str, feature: str) -> ModuleType:
    """Import ``modules`` in order and return the first; a missing one raises
    :class:`MissingDependencyError` naming ``feature`` and the install command."""
    first: ModuleType | None = None
    for name in modules:
        try:
            mod = importlib.import_module(name)
        except ImportError as e:
            # A broken install (the package's own dependency missing) names the deeper module.
            missing = e.name if e.name and e.name.split(".")[0] in PACKAGE_EXTRA else name
            top = missing.split(".")[0]
            extra = PACKAGE_EXTRA.get(top) or PACKAGE_EXTRA[name.split(".")[0]]
            raise MissingDependencyError(top, extra, feature) from None
        first = first or mod
    assert first is not None, "require() needs at least one module"
    return first


def installed_version(distribution: str) -> str | None:
    """The installed version of ``distribution``, read from its metadata (nothing is imported);
    None when it is not installed."""
    # importlib.metadata costs ~50 ms to import: only `doctor` and the extras check need it, so
    # it is imported here rather than on every `gpuplan fit` (start-up, issue 10).
    import importlib.metadata

    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def extras_status() -> dict[str, dict[str, str | None]]:
    """For each extra, each of its distributions and its installed version (None: missing)."""
    return {extra: {d: installed_version(d) for d in dists} for extra, dists in EXTRAS.items()}


def is_importable(module: str) -> bool:
    """True when ``module`` can be found on the path (found, not imported)."""
    return importlib.util.find_spec(module) is not None
