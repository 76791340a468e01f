"""The shape of the package (issue 10, docs/architecture.md): one folder per concern, every arrow
pointing down, no import cycles, no imports by string, lazy imports only at the heavy boundaries,
short functions, and an architecture page that names what is really there.

Everything here reads the source with ``ast``; nothing is imported, so a test fails on the code as
written, including imports inside function bodies.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "gpuplan"

#: Layers, top to bottom. A module may import from its own layer's *other* concerns only where
#: listed in SIDEWAYS, and from any layer below. Names are top-level parts of the package.
LAYERS = [
    {"cli", "web", "__main__"},
    {"report"},
    {"fit", "solver", "trace", "measure", "crosscheck"},
    {"memory", "compute"},
    {"job", "formats", "models", "hardware", "units", "errors", "_io", "_extras"},
]
#: Allowed arrows inside one layer (from -> to), each with its reason.
SIDEWAYS = {
    ("fit", "solver"): "a plan offers the solver's suggestions",
    ("crosscheck", "fit"): "compares a plan with its trace",
    ("crosscheck", "trace"): "compares a plan with its trace",
    ("measure", "trace"): "none today; listed so a new arrow is a decision",
    ("web", "cli"): "the page's copy-as-CLI command reuses the CLI's argument spelling",
    ("job", "formats"): "the Job validates recipe and format names against the tables",
    ("job", "models"): "a Job names a model",
    ("formats", "models"): "quantized formats skip tensors by architecture",
    ("models", "units"): "parses sizes in config files",
    ("models", "_io"): "bounded file reads",
    ("models", "errors"): "errors",
    ("hardware", "units"): "parses sizes",
    ("hardware", "errors"): "errors",
    ("units", "errors"): "errors",
    ("_io", "errors"): "errors",
    ("job", "errors"): "errors",
    ("job", "units"): "parses sizes",
    ("formats", "errors"): "errors",
    ("_extras", "errors"): "errors",
    ("models", "_extras"): "optional readers",
    ("hardware", "_extras"): "optional probes",
}
FORBIDDEN = {("compute", "measure"), ("compute", "memory"), ("memory", "compute")}

#: Third-party packages that may only be imported inside a function (the heavy boundary).
HEAVY = {"torch", "transformers", "matplotlib", "safetensors", "numpy", "huggingface_hub", "gguf",
         "peft", "uvicorn", "fastapi", "starlette", "playwright"}
#: gpuplan-internal imports allowed inside a function body, each with its reason.
INTERNAL_LAZY_OK = {
    ("cli", "cli"): "each subcommand's module is imported only when that command runs "
                    "(start-up of `gpuplan fit`)",
    ("__init__", "*"): "PEP 562: the speed model, the solver and the profiler load on first use",
}


def _modules() -> dict[str, Path]:
    out = {}
    for p in sorted(SRC.rglob("*.py")):
        parts = list(p.relative_to(SRC.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


@cache
def _imports() -> dict[str, list[tuple[str, bool, int]]]:
    """module -> [(imported gpuplan module, inside a function?, line)]."""
    mods = _modules()
    out: dict[str, list[tuple[str, bool, int]]] = {}
    for name, path in mods.items():
        tree = ast.parse(path.read_text())
        is_pkg = path.name == "__init__.py"
        base = name.split(".") if is_pkg else name.split(".")[:-1]
        found: list[tuple[str, bool, int]] = []

        def visit(node: ast.AST, in_func: bool) -> None:
            for child in ast.iter_child_nodes(node):
                inner = in_func or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
                if isinstance(child, ast.ImportFrom):
                    if child.level:
                        stem = base[: len(base) - (child.level - 1)]
                        target = ".".join(stem + ([child.module] if child.module else []))
                    else:
                        target = child.module or ""
                    if target.split(".")[0] == "gpuplan":
                        subs = [f"{target}.{a.name}" for a in child.names]
                        for t in [s for s in subs if s in mods] or [target]:
                            found.append((t, in_func, child.lineno))
                elif isinstance(child, ast.Import):
                    for a in child.names:
                        if a.name.split(".")[0] == "gpuplan":
                            found.append((a.name, in_func, child.lineno))
                visit(child, inner)

        visit(tree, False)
        out[name] = found
    return out


def _concern(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _layer(concern: str) -> int | None:
    for i, layer in enumerate(LAYERS):
        if concern in layer:
            return i
    return None


def test_no_import_cycles():
    graph = {m: {t for t, _, _ in imps if t in _imports()} for m, imps in _imports().items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles: list[list[str]] = []

    def strong(v: str) -> None:  # Tarjan; the package is small, recursion depth is its height
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph[v]:
                cycles.append(sorted(comp))

    for v in graph:
        if v not in index:
            strong(v)
    assert cycles == []


def test_arrows_point_down():
    bad = []
    for module, imps in _imports().items():
        src = _concern(module)
        if src == "__init__":
            continue
        for target, _, line in imps:
            dst = _concern(target)
            if dst in (src, "__init__") and not (dst == "__init__" and src != "__init__"):
                continue
            if (src, dst) in FORBIDDEN:
                bad.append(f"{module}:{line} -> {target} (forbidden)")
                continue
            ls, ld = _layer(src), _layer(dst)
            assert ls is not None, f"{src} is in no layer: add it to LAYERS and the architecture page"
            assert ld is not None, f"{dst} is in no layer: add it to LAYERS and the architecture page"
            if dst == "__init__":
                bad.append(f"{module}:{line} imports the package root")
            elif ld < ls or (ld == ls and (src, dst) not in SIDEWAYS):
                bad.append(f"{module}:{line} -> {target}")
    assert bad == []


def test_no_imports_by_string():
    hits = []
    for name, path in _modules().items():
        text = path.read_text()
        for m in re.finditer(r"import_module\(|__import__\(|importlib\.util\.spec_from", text):
            line = text.count("\n", 0, m.start()) + 1
            hits.append(f"{name}:{line}")
    # the one reader of a user's own Python file (trace my_model.py:make), run knowingly
    allowed = {n for n in hits if n.startswith("gpuplan.trace.") and "spec_from" in
               _modules()[n.split(":")[0]].read_text()}
    assert sorted(set(hits) - allowed) == []


def test_lazy_imports_only_at_the_heavy_boundary():
    """An import inside a function body is either of a heavy optional package or one of the
    listed internal ones (with its reason)."""
    bad = []
    for module, path in _modules().items():
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.Import):
                    roots = [a.name.split(".")[0] for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    roots = ["gpuplan" if node.level else (node.module or "").split(".")[0]]
                else:
                    continue
                for root in roots:
                    if root != "gpuplan":  # the standard library or a heavy optional package
                        continue
                    src = _concern(module)
                    if (src, src) in INTERNAL_LAZY_OK or (src, "*") in INTERNAL_LAZY_OK:
                        continue
                    bad.append(f"{module}:{node.lineno} imports gpuplan inside {fn.name}()")
    assert bad == [], "\n".join(bad)


def _function_lengths() -> list[tuple[int, str]]:
    rows = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                rows.append((node.end_lineno - node.lineno + 1, f"{name}.{node.name}"))
    return sorted(rows, reverse=True)


def test_functions_are_short():
    rows = _function_lengths()
    assert [r for r in rows if r[0] > 100] == []
    assert len([r for r in rows if r[0] > 60]) <= 15, [r for r in rows if r[0] > 60]


def test_one_package_per_concern():
    assert not list(SRC.glob("_compute_*.py"))
    for pkg in ("memory", "compute", "measure", "measure/profile", "measure/bench",
                "memory/activations", "trace", "models", "hardware", "report", "cli"):
        assert (SRC / pkg / "__init__.py").is_file(), pkg


def test_architecture_page_matches_the_tree():
    page = (ROOT / "docs" / "architecture.md").read_text()
    named = set(re.findall(r"`((?:[a-z_]+/)+)`", page))  # `memory/activations/` etc.
    for folder in named:
        assert (SRC / folder).is_dir(), f"docs/architecture.md names {folder}, which is not there"
    packages = {p.parent.relative_to(SRC).as_posix() + "/" for p in SRC.rglob("__init__.py")}
    packages.discard("./")
    missing = sorted(p for p in packages if p not in named)
    assert missing == [], f"packages not on docs/architecture.md: {missing}"


@pytest.mark.parametrize("concern", sorted({c for layer in LAYERS for c in layer} - {"__main__"}))
def test_every_layer_name_exists(concern):
    assert (SRC / concern).is_dir() or (SRC / f"{concern}.py").is_file() or concern in (
        "web", "_extras"), concern
