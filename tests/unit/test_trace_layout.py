"""gpuplan.trace's package __init__ only re-exports, and nothing inside trace/ imports it: the
package has no import cycle through its __init__ (checked on the source, without torch)."""

from __future__ import annotations

import ast
from pathlib import Path

import gpuplan.trace

TRACE = Path(gpuplan.trace.__file__).parent


def _imports_of_package(path: Path) -> list[str]:
    """Imports in ``path`` that reach gpuplan.trace's __init__ rather than one of its modules."""
    bad = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level == 1 and node.module is None:  # from . import X: X must be a module
            bad += [f"from . import {a.name}" for a in node.names
                    if not (TRACE / f"{a.name}.py").is_file()]
        elif (node.level, node.module) in ((0, "gpuplan.trace"), (2, "trace")):
            bad.append(f"from {'.' * node.level}{node.module} import ...")
    return bad


def test_no_module_in_trace_imports_the_package_init():
    found = {p.name: _imports_of_package(p) for p in sorted(TRACE.glob("*.py"))
             if p.name != "__init__.py"}
    assert {k: v for k, v in found.items() if v} == {}


def test_package_init_only_reexports_its_public_names():
    tree = ast.parse((TRACE / "__init__.py").read_text())
    kinds = {type(node).__name__ for node in tree.body[1:]}  # after the docstring
    assert kinds <= {"ImportFrom", "Assign"}
    for name in gpuplan.trace.__all__:
        assert getattr(gpuplan.trace, name) is not None
    assert gpuplan.trace.REAL_MAX_PARAMS == 400_000_000
    assert gpuplan.trace.trace_step.__module__ == "gpuplan.trace._api"
