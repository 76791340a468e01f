"""The memory package's shape: its public names, and imports that only point down (no cycle, not
even through an import inside a function)."""

from __future__ import annotations

import ast
from pathlib import Path

import gpuplan.memory

PACKAGE = Path(gpuplan.memory.__file__).parent


def _module_name(path: Path) -> str:
    parts = ["gpuplan", "memory", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Modules of gpuplan.memory that ``path`` imports, anywhere in its body."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")
            if node.level:
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            candidates = [target] + [f"{target}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            candidates = [a.name for a in node.names]
        else:
            continue
        found |= {c for c in candidates if c.startswith("gpuplan.memory") and c != name}
    return found


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {m: {t for t in _imports(p) if t in modules} for m, p in modules.items()}


def test_public_names_are_the_documented_ones():
    assert set(gpuplan.memory.__all__) == {
        "Line", "TrainMemory", "InferMemory", "train_memory", "infer_memory", "lora_tensors",
        "DEFAULT_LORA_TARGETS", "shard", "check_layout", "KVBudget", "kv_budget"}
    for name in gpuplan.memory.__all__:
        assert getattr(gpuplan.memory, name) is not None


def test_graph_sees_relative_imports():
    # the check below is only worth something if the parser finds the real arrows
    g = _graph()
    assert "gpuplan.memory.activations.symbolic" in g["gpuplan.memory.activations.blocks"]
    assert "gpuplan.memory.lora" in g["gpuplan.memory.activations.profile"]
    assert "gpuplan.memory.train" in g["gpuplan.memory"]


def test_no_import_cycle_in_memory():
    graph = _graph()
    # packages import their own modules to re-export them; a module importing its package back
    # is what would close a loop, so both directions stay in the graph
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for t in sorted(graph[m]):
            if state.get(t) == 1:
                raise AssertionError("import cycle: " + " -> ".join(path + [m, t]))
            if t not in state:
                visit(t, path + [m])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])
