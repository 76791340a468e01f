"""The shape of the package (issue 10, docs/architecture.md): one folder per concern, every arrow
pointing down, no import cycles, no imports by string, lazy imports only where listed, short
functions, and an architecture page that names what is really there.

Everything here reads the source with ``ast``; nothing is imported, so a test fails on the code as
written, including imports inside function bodies.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "gpuplan"

#: Layers, top to bottom; names are the top-level parts of the package. A module imports from its
#: own concern and from layers below; inside one layer only the SIDEWAYS arrows exist.
LAYERS = [
    {"__main__"},
    {"cli", "web"},
    {"report", "export"},
    {"fit", "solver", "cluster", "trace", "measure", "crosscheck", "doctor", "capacity"},
    {"memory", "compute"},
    {"job"},
    {"parallel"},
    {"engines"},
    {"formats"},
    {"models", "hardware", "fp8"},
    {"units", "_io", "_extras"},
    {"bounds"},
    {"errors", "_version", "_record"},
]
SIDEWAYS = {
    ("cli", "web"): "`gpuplan serve` starts the web app",
    ("fit", "solver"): "a plan offers the solver's suggestions",
    ("cluster", "fit"): "the layout search judges each layout as a plan does",
    ("cluster", "solver"): "the layout search reuses the solver's candidates",
    ("crosscheck", "fit"): "compares a plan with its trace",
    ("crosscheck", "trace"): "compares a plan with its trace",
    ("doctor", "measure"): "the bench database and its last run",
    ("report", "export"): "the fit table names the export it wrote",
}
#: Never, whatever the layers say.
FORBIDDEN = {("compute", "measure"), ("compute", "memory"), ("memory", "compute")}

#: gpuplan imports inside a function body, each with its reason: (module, imported module).
#: Everything else is imported at the top of its module.
LAZY_OK = {
    ("gpuplan", "gpuplan.errors"): "PEP 562: `import gpuplan` is its version string (issue 27)",
    ("gpuplan", "gpuplan.fit"): "PEP 562: the planner loads on first use",
    ("gpuplan", "gpuplan.hardware"): "PEP 562: the GPU table loads on first use",
    ("gpuplan", "gpuplan.job"): "PEP 562: the job type loads on first use",
    ("gpuplan", "gpuplan.memory"): "PEP 562: the memory model loads on first use",
    ("gpuplan", "gpuplan.models"): "PEP 562: the model inputs load on first use",
    ("gpuplan", "gpuplan.compute"): "PEP 562: the speed model loads on first use",
    ("gpuplan", "gpuplan.solver"): "PEP 562: the solver loads on first use",
    ("gpuplan", "gpuplan.capacity"): "PEP 562: the serving simulation loads on first use",
    ("gpuplan", "gpuplan.measure.profile"): "PEP 562: gpuplan.profile needs torch when entered",
    ("gpuplan.fit", "gpuplan.solver"): "`import gpuplan` plans memory without the solver",
    ("gpuplan.fit", "gpuplan.compute"): "`import gpuplan` plans memory without the speed model",
    ("gpuplan.cli", "gpuplan.cli.*"): "a subcommand's module is imported only to build it",
    ("gpuplan.compute", "gpuplan.compute.*"): "PEP 562: each part of the speed model on first use",
    ("gpuplan.compute.speed", "gpuplan.compute.cpu"): "the CPU estimate only when a CPU is asked",
    ("gpuplan.cli.cluster", "gpuplan.export"): "the exporters load only when --export is given",
    ("gpuplan.models", "gpuplan.models._safetensors"): "PEP 562: a catalog name reads no file",
    ("gpuplan.models", "gpuplan.models._hub"): "PEP 562: a catalog name asks no hub",
    ("gpuplan.models._load", "gpuplan.models._hub"): "a path or hub id only, not a catalog name",
    ("gpuplan.models._load", "gpuplan.models._gguf"): "a .gguf file only",
    ("gpuplan.models._load", "gpuplan.models._safetensors"): "a checkpoint file or folder only",
}
#: Modules whose function-level gpuplan imports sit at the torch / matplotlib / rich boundary:
#: what they import pulls in the heavy package (or needs it installed first).
HEAVY_BOUNDARY = {
    "gpuplan.trace._api": "the trace's runner imports torch",
    "gpuplan.trace.distributed": "the FSDP2 runner imports torch",
    "gpuplan.crosscheck": "the trace imports torch",
    "gpuplan.measure": "bench and profile import torch (lazy package attributes)",
    "gpuplan.measure.bench.machine": "torch's view of the GPUs",
    "gpuplan.measure.bench.run": "CUDA devices through torch",
    "gpuplan.report.fit": "rich tables (the JSON path never imports rich)",
    "gpuplan.report.fit_plot": "matplotlib",
    "gpuplan.report.profile": "matplotlib",
    "gpuplan.report.speed": "rich",
    "gpuplan.cli.profile": "torch is checked for before the profiler is imported",
    "gpuplan.cli.bench": "torch is checked for before the bench is imported",
    "gpuplan.cli.serve": "starlette/uvicorn (the web extra)",
    "gpuplan.cli.fit": "--trace imports torch; --plot matplotlib; the table rich",
    "gpuplan.cli.speed": "--plot matplotlib; the table rich",
    "gpuplan.cli.capacity": "--plot matplotlib; the table rich; --export the exporter",
    "gpuplan.cli.flops": "the table rich",
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
def _imports() -> dict[str, list[tuple[str, bool, int, tuple[str, ...]]]]:
    """module -> [(imported gpuplan module, inside a function?, line, names imported)]."""
    mods = _modules()
    out: dict[str, list[tuple[str, bool, int, tuple[str, ...]]]] = {}
    for name, path in mods.items():
        is_pkg = path.name == "__init__.py"
        base = name.split(".") if is_pkg else name.split(".")[:-1]
        found: list[tuple[str, bool, int, tuple[str, ...]]] = []

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
                        names = tuple(a.name for a in child.names)
                        subs = [f"{target}.{n}" for n in names]
                        for t in [s for s in subs if s in mods] or [target]:
                            found.append((t, in_func, child.lineno, names))
                elif isinstance(child, ast.Import):
                    for a in child.names:
                        if a.name.split(".")[0] == "gpuplan":
                            found.append((a.name, in_func, child.lineno, ()))
                visit(child, inner)

        visit(ast.parse(path.read_text()), False)
        out[name] = found
    return out


def _concern(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _layer(concern: str) -> int:
    for i, layer in enumerate(LAYERS):
        if concern in layer:
            return i
    raise AssertionError(f"{concern} is in no layer: add it to LAYERS and docs/architecture.md")


def test_the_import_reader_sees_function_level_and_relative_imports():
    imps = _imports()["gpuplan"]
    assert ("gpuplan._version", False) in {(t, f) for t, f, _, _ in imps}  # from ._version
    assert ("gpuplan.solver", True) in {(t, f) for t, f, _, _ in imps}  # from . import solver
    assert ("gpuplan.fit", True) in {(t, f) for t, f, _, _ in imps}  # import gpuplan.fit


def test_no_import_cycles():
    graph = {m: {t for t, _, _, _ in imps if t in _imports()} for m, imps in _imports().items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles: list[list[str]] = []

    def strong(v: str) -> None:  # Tarjan; the recursion depth is the import graph's height
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


def _bad_arrow(module: str, target: str, names: tuple[str, ...]) -> str | None:
    src, dst = _concern(module), _concern(target)
    if src == "__init__" or src == dst:
        return None
    if dst == "__init__":  # the package root: only its version string
        return None if names == ("__version__",) else "imports the package root"
    if (src, dst) in FORBIDDEN:
        return "forbidden"
    ls, ld = _layer(src), _layer(dst)
    if ld < ls or (ld == ls and (src, dst) not in SIDEWAYS):
        return f"{src} (layer {ls}) -> {dst} (layer {ld})"
    return None


def test_arrows_point_down():
    bad = [f"{m}:{line} -> {t}: {why}" for m, imps in _imports().items()
           for t, _, line, names in imps if (why := _bad_arrow(m, t, names))]
    assert bad == []


def test_arrow_rule_catches_upward_and_forbidden_imports():
    assert _bad_arrow("gpuplan.memory.train", "gpuplan.fit", ()) is not None
    assert _bad_arrow("gpuplan.compute.measured", "gpuplan.measure.store", ()) == "forbidden"
    assert _bad_arrow("gpuplan.solver", "gpuplan.fit", ()) is not None  # only fit -> solver
    assert _bad_arrow("gpuplan.fit", "gpuplan.solver", ()) is None
    assert _bad_arrow("gpuplan.measure.bench.machine", "gpuplan", ("__version__",)) is None


def test_no_imports_of_gpuplan_by_string():
    """importlib/__import__ only for optional third-party packages named in one table
    (_extras) and the hub's transport errors; the user's own file for `trace file.py:make`."""
    allowed = {"gpuplan._extras", "gpuplan.models._hub", "gpuplan.trace._spec"}
    hits = [name for name, path in _modules().items()
            if re.search(r"import_module\(|__import__\(|spec_from_file_location\(",
                         path.read_text()) and name not in allowed]
    assert hits == []
    for name in allowed:
        text = _modules()[name].read_text()
        assert not re.search(r"import_module\([\"']gpuplan", text), name


def _lazy_ok(module: str, target: str) -> bool:
    if module in HEAVY_BOUNDARY:
        return True
    for (m, t) in LAZY_OK:
        if module == m and (target == t or (t.endswith(".*") and target.startswith(t[:-1]))):
            return True
    return False


def test_gpuplan_imports_inside_functions_are_listed():
    bad = [f"{m}:{line} imports {t}" for m, imps in _imports().items()
           for t, in_func, line, _ in imps if in_func and not _lazy_ok(m, t)]
    assert bad == []


def test_the_lazy_lists_name_modules_that_exist():
    mods = _modules()
    assert all(m in mods for m in HEAVY_BOUNDARY)
    assert all(m in mods for m, _ in LAZY_OK)


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
    assert not (SRC / "activations.py").exists() and not (SRC / "compute.py").exists()
    for pkg in ("memory", "memory/activations", "compute", "measure", "measure/bench",
                "measure/profile", "trace", "models", "hardware", "report", "cli", "web"):
        assert (SRC / pkg / "__init__.py").is_file(), pkg


def test_architecture_page_matches_the_tree():
    page = (ROOT / "docs" / "architecture.md").read_text()
    block = page.split("```")[1]  # the map
    top = set(re.findall(r"^  ([a-z_]+)/", block, re.M))
    packages = [p.parent.relative_to(SRC).parts for p in SRC.rglob("__init__.py") if p.parent != SRC]
    assert sorted(t for t in top if not (SRC / t / "__init__.py").is_file()) == [], \
        "named on the page but not in the tree"
    assert sorted({p[0] for p in packages} - top) == [], "top-level packages missing from the page"
    nested = sorted("/".join(p) for p in packages if len(p) > 1 and f"{p[-1]}/" not in block)
    assert nested == [], "sub-packages missing from the page"
    for layer in LAYERS:
        for concern in layer - {"__main__"}:
            assert concern in page, f"layer member {concern} is not on the architecture page"


def test_one_layout_class():
    """The parallel layout has one type (issue 27, part 4a): ``gpuplan.parallel.layout.Layout``,
    read by memory, compute and the cluster search; no other class of the package is named
    ``Layout``."""
    found = []
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.name == "Layout":
                found.append(str(path.relative_to(SRC)))
    assert found == ["parallel/layout.py"]
