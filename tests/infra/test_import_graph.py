"""The library's modules import one way: no circle, however the import is written (module level, under
TYPE_CHECKING, or inside a function to dodge the circle at run time)."""

from __future__ import annotations

import ast
from pathlib import Path

import gpu_inference_constructs

PACKAGE = Path(gpu_inference_constructs.__file__).parent
NAME = "gpu_inference_constructs"


def module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, root: Path = PACKAGE) -> set[str]:
    """Every library module ``path`` imports, resolved from relative imports; ``from . import x`` counts x."""
    here = module_name(path, root)
    package = here if path.name == "__init__.py" else here.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith(NAME)}
        elif isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rsplit(".", 1)[0]
            target = (f"{base}.{node.module}" if node.module else base) if node.level else (node.module or "")
            if not target.startswith(NAME):
                continue
            found.add(target)
            for alias in node.names:
                candidate = f"{target}.{alias.name}"
                if (root.parent / Path(*candidate.split("."))).with_suffix(".py").exists():
                    found.add(candidate)
    return found


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    modules = {module_name(p, root): p for p in root.rglob("*.py")}
    # A package's __init__ re-exports its modules; importing a module through its package is not a cycle of the
    # modules themselves, so packages are left out as targets.
    packages = {module_name(p, root) for p in root.rglob("__init__.py")}
    return {name: (imports_of(path, root) & set(modules)) - packages - {name} for name, path in modules.items() if name not in packages}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    found, state, stack = [], {}, []

    def visit(node: str) -> None:
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                loop = stack[stack.index(nxt):]
                start = loop.index(min(loop))  # the same circle reads the same wherever the walk entered it
                found.append(loop[start:] + loop[:start] + [min(loop)])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return found


def test_the_library_has_no_import_circle():
    assert cycles(import_graph()) == []


def test_the_walk_finds_a_planted_circle(tmp_path):
    package = tmp_path / NAME
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from .b import B\n")
    (package / "b.py").write_text("def f():\n    from . import a\n")
    (package / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import A\n")
    graph = import_graph(package)
    assert cycles(graph) == [[f"{NAME}.a", f"{NAME}.b", f"{NAME}.a"]]
