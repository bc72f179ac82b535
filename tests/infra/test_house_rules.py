"""The house's size rules (issue 42), checked over both packages so the next change cannot quietly undo them: no
library module of 500 lines or more, no function of 100 lines or more, ``ModelService`` with at most 10 keyword
arguments, and every public props field's default written where the field is declared (aws-cdk-lib's ``@default``
style: the docstring after the field says ``Default: ...``). What ``ruff format`` took past the size limits is listed in
``STILL_LONG``, which may only shrink."""

from __future__ import annotations

import ast
import dataclasses
import inspect
from collections.abc import Iterator
from pathlib import Path

import gpu_inference_constructs
import inference_server
from gpu_inference_constructs import ModelService

LIBRARY = Path(gpu_inference_constructs.__file__).parent
SERVER = Path(inference_server.__file__).parent
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 100
MAX_MODEL_SERVICE_KEYWORDS = 10

# What ``ruff format`` (02560ec, issue 56) left long: one argument a line took 10 modules and 10 functions past the
# limits; each was split by concept since, so nothing is. Were the rules ever eased by a list here, an entry that is no
# longer long would fail test_every_still_long_entry_still_is_long until it left the list.
STILL_LONG: frozenset[tuple[str, str]] = frozenset()


def sources(root: Path) -> list[Path]:
    # server_image is the library's link to the server's build context: the server is checked as itself.
    return sorted(p for p in root.rglob("*.py") if "server_image" not in p.relative_to(root).parts)


def long_modules(root: Path, limit: int = MAX_MODULE_LINES) -> dict[tuple[str, str], str]:
    """Each module of ``limit`` lines or more, keyed ``(path, "module")``, with what to say of it."""
    found = {}
    for path in sources(root):
        name = str(path.relative_to(root.parent))
        if (lines := len(path.read_text().splitlines())) >= limit:
            found[(name, "module")] = f"{name}: {lines} lines"
    return found


def functions(tree: ast.AST, outer: str = "") -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Every function under ``tree`` with its qualified name (``Class.method``, ``outer.inner``)."""
    for node in ast.iter_child_nodes(tree):
        name = f"{outer}{getattr(node, 'name', '')}"
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield name, node
            yield from functions(node, f"{name}.")
        elif isinstance(node, ast.ClassDef):
            yield from functions(node, f"{name}.")
        else:
            yield from functions(node, outer)


def long_functions(root: Path, limit: int = MAX_FUNCTION_LINES) -> dict[tuple[str, str], str]:
    """Each function of ``limit`` lines or more, keyed ``(path, qualified name)``, with what to say of it."""
    found = {}
    for path in sources(root):
        name = str(path.relative_to(root.parent))
        for qualified, node in functions(ast.parse(path.read_text())):
            if (length := (node.end_lineno or node.lineno) - node.lineno + 1) >= limit:
                found[(name, qualified)] = f"{name}:{node.lineno} {qualified}: {length} lines"
    return found


def beyond(found: dict[tuple[str, str], str], allowed: frozenset[tuple[str, str]]) -> list[str]:
    """What is long and not allowed to be."""
    return [said for key, said in found.items() if key not in allowed]


def no_longer_long(found: dict[tuple[str, str], str], allowed: frozenset[tuple[str, str]]) -> list[tuple[str, str]]:
    """The allowed entries that are not long any more: fixed, so they leave the allowance."""
    return sorted(allowed - found.keys())


def undocumented_defaults(cls: type) -> list[str]:
    """The fields of a dataclass that have a default but no docstring after them saying ``Default``."""
    tree = ast.parse(inspect.getsource(cls))
    body = next(n for n in tree.body if isinstance(n, ast.ClassDef)).body
    with_default = {
        f.name
        for f in dataclasses.fields(cls)
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
    }
    missing = []
    for index, statement in enumerate(body):
        if not (isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)):
            continue
        if statement.target.id not in with_default:
            continue
        after = body[index + 1] if index + 1 < len(body) else None
        doc = (
            after.value.value
            if (
                isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            )
            else ""
        )
        if "default" not in doc.lower():
            missing.append(f"{cls.__name__}.{statement.target.id}")
    return missing


def public_props() -> list[type]:
    exported = (getattr(gpu_inference_constructs, name) for name in gpu_inference_constructs.__all__)
    return [obj for obj in exported if inspect.isclass(obj) and dataclasses.is_dataclass(obj)]


def test_no_library_or_server_module_reaches_500_lines_but_the_still_long():
    assert beyond(long_modules(LIBRARY) | long_modules(SERVER), STILL_LONG) == []


def test_no_function_reaches_100_lines_but_the_still_long():
    assert beyond(long_functions(LIBRARY) | long_functions(SERVER), STILL_LONG) == []


def test_every_still_long_entry_still_is_long():
    found = long_modules(LIBRARY) | long_modules(SERVER) | long_functions(LIBRARY) | long_functions(SERVER)
    assert no_longer_long(found, STILL_LONG) == []  # fixed: remove it from STILL_LONG


def test_model_service_takes_at_most_10_keyword_arguments():
    keywords = [p for p in inspect.signature(ModelService.__init__).parameters.values() if p.kind is p.KEYWORD_ONLY]
    assert len(keywords) <= MAX_MODEL_SERVICE_KEYWORDS, [p.name for p in keywords]


def test_every_public_props_field_documents_its_default():
    classes = public_props()
    assert len(classes) >= 20  # the walk found the props (a broken export list would pass an empty walk)
    assert [field for cls in classes for field in undocumented_defaults(cls)] == []


def test_the_size_checks_find_planted_long_code(tmp_path):
    package = tmp_path / "planted"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "long.py").write_text("class C:\n    def f(self):\n" + "        x = 1\n" * 120)
    (package / "short.py").write_text("def g():\n    return 1\n")
    modules = long_modules(package, limit=100)
    functions = long_functions(package)
    assert list(modules.values()) == ["planted/long.py: 122 lines"]
    assert list(functions.values()) == ["planted/long.py:2 C.f: 121 lines"]
    allowed = frozenset({("planted/long.py", "module"), ("planted/short.py", "g")})
    assert beyond(modules | functions, allowed) == ["planted/long.py:2 C.f: 121 lines"]
    assert no_longer_long(modules | functions, allowed) == [("planted/short.py", "g")]


@dataclasses.dataclass(frozen=True)
class _PlantedProps:
    documented: int = 1
    """How many. Default: 1."""
    undocumented: int = 2
    said_nothing_of_its_default: int = 3
    """How many."""
    required: int = dataclasses.field(default_factory=int)
    """Default: 0."""


def test_the_defaults_check_finds_a_planted_undocumented_default():
    assert undocumented_defaults(_PlantedProps) == [
        "_PlantedProps.undocumented",
        "_PlantedProps.said_nothing_of_its_default",
    ]
