"""The library's and the model server's modules import one way: no circle, however the import is written (module
level, under TYPE_CHECKING, or inside a function to dodge the circle at run time); and the server's layers import
no arrow up (docs/server.md, "Where the code runs")."""

from __future__ import annotations

import ast
from pathlib import Path

import gpu_inference_constructs
import inference_server

PACKAGE = Path(gpu_inference_constructs.__file__).parent
NAME = "gpu_inference_constructs"
SERVER = Path(inference_server.__file__).parent


def module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, root: Path = PACKAGE) -> set[str]:
    """Every module of the package at ``root`` that ``path`` imports, resolved from relative imports; ``from . import
    x`` counts x."""
    name = root.name
    here = module_name(path, root)
    package = here if path.name == "__init__.py" else here.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.split(".")[0] == name}
        elif isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rsplit(".", 1)[0]
            target = (f"{base}.{node.module}" if node.module else base) if node.level else (node.module or "")
            if target.split(".")[0] != name:
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


def test_the_server_has_no_import_circle():
    assert cycles(import_graph(SERVER)) == []


# The server's layers, by the process their code runs in, and the layers each may import. Commands are what a team
# or the image runs (python -m inference_server, .publish, .healthcheck) or imports in its tests (.testing): nothing
# imports them. Shared modules (settings, facts, the link, ...) are leaves: they import no subpackage.
SERVER_LAYERS = {
    "shared": {"shared"},
    "handlers": {"shared", "handlers"},
    "front": {"shared", "handlers", "front"},
    "engine": {"shared", "handlers", "engine"},
    "supervisor": {"shared", "handlers", "front", "engine", "supervisor"},
    "tools": {"shared", "handlers", "front", "engine", "tools"},
    # A model pool's server: one process holding both sides (its own front, the engine's fetch and batch pieces).
    "pool": {"shared", "handlers", "front", "engine", "pool"},
    "commands": {"shared", "handlers", "front", "engine", "supervisor", "tools", "pool"},
}
SERVER_COMMANDS = {"__main__", "healthcheck", "publish", "testing"}


def layer_of(module: str) -> str:
    parts = module.split(".")[1:]
    if len(parts) > 1 and parts[0] in SERVER_LAYERS:
        return parts[0]
    return "commands" if parts and parts[0] in SERVER_COMMANDS else "shared"


def arrows_up(graph: dict[str, set[str]]) -> list[str]:
    return [f"{source} -> {target}" for source, targets in sorted(graph.items()) for target in sorted(targets)
            if layer_of(target) not in SERVER_LAYERS[layer_of(source)]]


def test_the_servers_layers_import_no_arrow_up():
    assert arrows_up(import_graph(SERVER)) == []


def test_the_servers_facts_import_nothing():
    """The library loads facts.py by its path, without the server installed (gpu_inference_constructs.server_facts)."""
    tree = ast.parse((SERVER / "facts.py").read_text())
    assert not [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]


def test_the_layer_rule_finds_a_planted_arrow_up(tmp_path):
    package = tmp_path / "inference_server"
    for folder in ("engine", "front", "tools"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "settings.py").write_text("def f():\n    from .tools import conversion\n")
    (package / "engine" / "batcher.py").write_text("from ..front.admission import Admission\n")
    (package / "front" / "admission.py").write_text("from .. import settings\n")
    (package / "tools" / "conversion.py").write_text("from ..engine import batcher\n")
    assert arrows_up(import_graph(package)) == ["inference_server.engine.batcher -> inference_server.front.admission",
                                                "inference_server.settings -> inference_server.tools.conversion"]
