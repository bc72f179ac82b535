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
    return {
        name: (imports_of(path, root) & set(modules)) - packages - {name}
        for name, path in modules.items()
        if name not in packages
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    found, state, stack = [], {}, []

    def visit(node: str) -> None:
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                loop = stack[stack.index(nxt) :]
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
    # The versioned registry documents in the store (a pool's, an LLM's adapters'), read and written with the engine's
    # S3 pieces.
    "registry": {"shared", "engine", "registry"},
    # A model pool's server: one process holding both sides (its own front, the engine's fetch and batch pieces).
    "pool": {"shared", "handlers", "front", "engine", "registry", "pool"},
    # LoRA adapters: publish's checks and the adapter-sync sidecar (its own process, its own image: no front, no
    # handlers).
    "adapters": {"shared", "engine", "registry", "adapters"},
    "commands": {"shared", "handlers", "front", "engine", "supervisor", "tools", "registry", "pool", "adapters"},
}
SERVER_COMMANDS = {"__main__", "healthcheck", "publish", "testing"}


def layer_of(module: str) -> str:
    parts = module.split(".")[1:]
    if len(parts) > 1 and parts[0] in SERVER_LAYERS:
        return parts[0]
    return "commands" if parts and parts[0] in SERVER_COMMANDS else "shared"


def arrows_up(graph: dict[str, set[str]]) -> list[str]:
    return [
        f"{source} -> {target}"
        for source, targets in sorted(graph.items())
        for target in sorted(targets)
        if layer_of(target) not in SERVER_LAYERS[layer_of(source)]
    ]


def test_the_servers_layers_import_no_arrow_up():
    assert arrows_up(import_graph(SERVER)) == []


def test_the_servers_facts_import_nothing():
    """The library loads facts.py by its path, without the server installed
    (gpu_inference_constructs.core.server_facts)."""
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
    assert arrows_up(import_graph(package)) == [
        "inference_server.engine.batcher -> inference_server.front.admission",
        "inference_server.settings -> inference_server.tools.conversion",
    ]


# Issue 56, the layers: core/ (and the sizing advisor, which runs on it) loads no aws_cdk, jsii or
# constructs; core/ imports only core/; the subpackages import one way; no aws_cdk import inside a function (the
# layering keeps the pure parts pure, not imports hidden in functions); the top level holds subpackages only.
CDK = ("aws_cdk", "jsii", "constructs")
PURE = ("core", "sizing")
ROOT_FILES = {"__init__.py", "py.typed", "server_image", "__pycache__"}  # server_image: the server's build context


def statements(tree: ast.Module, *, functions: bool) -> list[ast.stmt]:
    """The import statements that run when the module loads (no TYPE_CHECKING block, no function body), or, with
    ``functions``, the ones inside functions."""
    found: list[ast.stmt] = []

    def visit(body: list[ast.stmt], in_function: bool) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(node.body, True)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                if in_function == functions:
                    found.append(node)
            elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                visit(node.orelse, in_function)
            else:
                for field in ("body", "orelse", "finalbody", "handlers"):
                    inner = getattr(node, field, None)
                    if isinstance(inner, list):
                        visit(
                            [n for n in inner if isinstance(n, ast.stmt)]
                            + [s for h in inner if isinstance(h, ast.ExceptHandler) for s in h.body],
                            in_function,
                        )

    visit(tree.body, False)
    return found


def cdk_imports(path: Path, *, functions: bool = False) -> list[str]:
    found = []
    for node in statements(ast.parse(path.read_text()), functions=functions):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] in CDK]
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] in CDK:
            found.append(node.module or "")
    return sorted(set(found))


def loaded_modules(path: Path, root: Path, modules: set[str], *, functions: bool) -> set[str]:
    """The library modules (and packages) ``path`` imports as it loads (and, with ``functions``, inside its
    functions), TYPE_CHECKING left out."""
    here = module_name(path, root)
    package = here if path.name == "__init__.py" else here.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text())
    found = set()
    for node in statements(tree, functions=False) + (statements(tree, functions=True) if functions else []):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            base = ".".join(base[: len(base) - node.level + 1]) if node.level else ""
            target = ".".join(p for p in (base, node.module or "") if p)
            found |= {target} | {f"{target}.{a.name}" for a in node.names}
    with_parents = {".".join(m.split(".")[:i]) for m in found for i in range(1, m.count(".") + 2)}
    return (with_parents & modules) - {here}


def library_files(root: Path) -> dict[str, Path]:
    return {
        module_name(p, root): p for p in sorted(root.rglob("*.py")) if "server_image" not in p.relative_to(root).parts
    }


def pure_layer_problems(root: Path = PACKAGE) -> list[str]:
    """What core/ and sizing/ load (their modules and every library module those import as they load,
    transitively) that imports aws_cdk, jsii or constructs; and every import from core/ (in a function too) of a
    module outside it."""
    files = library_files(root)
    graph = {name: loaded_modules(path, root, set(files), functions=False) for name, path in files.items()}
    problems = set()
    for name in files:
        layer = name.split(".")[1] if name.count(".") else ""
        if layer == "core":
            problems |= {
                f"{name} imports {t} (core imports only core)"
                for t in loaded_modules(files[name], root, set(files), functions=True)
                if t.split(".")[1:2] != ["core"] and t != root.name
            }
        if layer not in PURE:
            continue
        seen, todo = set(), [name]
        while todo:
            current = todo.pop()
            if current not in seen:
                seen.add(current)
                todo += graph[current]
        problems |= {
            f"{name} loads {m}, which imports {', '.join(cdk_imports(files[m]))}" for m in seen if cdk_imports(files[m])
        }
    return sorted(problems)


def function_level_cdk_imports(root: Path = PACKAGE) -> dict[str, list[str]]:
    return {name: found for name, path in library_files(root).items() if (found := cdk_imports(path, functions=True))}


def test_core_and_sizing_load_no_aws_cdk():
    assert pure_layer_problems() == []


def test_the_pure_layer_rule_finds_planted_defects(tmp_path):
    package = tmp_path / NAME
    for folder in ("core", "sizing", "service"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "core" / "props.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import aws_cdk\n"
    )
    (package / "core" / "checks.py").write_text("from ..service import task\n")
    (package / "core" / "late.py").write_text("def f():\n    from .. import service\n")
    (package / "service" / "task.py").write_text("import aws_cdk as cdk\n")
    (package / "sizing" / "advisor.py").write_text("from ..core.props import TYPE_CHECKING\n")
    (package / "sizing" / "plot.py").write_text("from constructs import Construct\n")
    assert pure_layer_problems(package) == [
        f"{NAME}.core.checks imports {NAME}.service (core imports only core)",
        f"{NAME}.core.checks imports {NAME}.service.task (core imports only core)",
        f"{NAME}.core.checks loads {NAME}.service.task, which imports aws_cdk",
        f"{NAME}.core.late imports {NAME}.service (core imports only core)",
        f"{NAME}.sizing.plot loads {NAME}.sizing.plot, which imports constructs",
    ]


def test_no_module_imports_aws_cdk_inside_a_function():
    """The presets load without aws_cdk because they ask their ServerContext for images and warnings (a
    ``CdkServerContext`` from service/), not because their aws_cdk imports hide in functions."""
    assert function_level_cdk_imports() == {}


def test_the_function_level_rule_finds_a_planted_import(tmp_path):
    package = tmp_path / NAME
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("import aws_cdk as cdk\n\n\ndef f():\n    return cdk\n")
    (package / "b.py").write_text(
        "class B:\n    def f(self):\n        if self:\n            from aws_cdk import aws_ecs\n"
    )
    assert function_level_cdk_imports(package) == {f"{NAME}.b": ["aws_cdk"]}


def package_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Subpackage -> the subpackages its modules import (however written, as import_graph reads them)."""
    found: dict[str, set[str]] = {}
    for source, targets in import_graph(root).items():
        for target in targets:
            if source.count(".") > 1 and target.count(".") > 1 and source.split(".")[1] != target.split(".")[1]:
                found.setdefault(source.split(".")[1], set()).add(target.split(".")[1])
    return found


def test_the_subpackages_import_one_way():
    assert cycles(package_graph()) == []


def test_the_package_walk_finds_a_planted_circle(tmp_path):
    package = tmp_path / NAME
    for folder in ("core", "routing", "service"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "core" / "errors.py").write_text("")
    (package / "routing" / "rules.py").write_text("from ..core import errors\n")
    (package / "service" / "task.py").write_text("from ..routing.rules import errors\n")
    (package / "routing" / "balancer.py").write_text("def f():\n    from ..service import task\n")
    assert cycles(package_graph(package)) == [["routing", "service", "routing"]]


def test_the_top_level_holds_subpackages_and_the_root_module_only():
    loose = sorted(
        p.name
        for p in PACKAGE.iterdir()
        if p.name not in ROOT_FILES and not (p.is_dir() and (p / "__init__.py").is_file())
    )
    assert loose == []
