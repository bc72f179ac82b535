"""The house's size rules (issue 42), checked over both packages so the next change cannot quietly undo them: no
library module of 500 lines or more, no function of 100 lines or more, ``ModelService`` with at most 10 keyword
arguments, and every public props field's default written where the field is declared (aws-cdk-lib's ``@default``
style: the docstring after the field says ``Default: ...``)."""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

import gpu_inference_constructs
import inference_server
from gpu_inference_constructs import ModelService

LIBRARY = Path(gpu_inference_constructs.__file__).parent
SERVER = Path(inference_server.__file__).parent
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 100
MAX_MODEL_SERVICE_KEYWORDS = 10


def sources(root: Path) -> list[Path]:
    # server_image is the library's link to the server's build context: the server is checked as itself.
    return sorted(p for p in root.rglob("*.py") if "server_image" not in p.relative_to(root).parts)


def long_modules(root: Path, limit: int = MAX_MODULE_LINES) -> list[str]:
    return [
        f"{p.relative_to(root.parent)}: {n} lines"
        for p in sources(root)
        if (n := len(p.read_text().splitlines())) >= limit
    ]


def long_functions(root: Path, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    found = []
    for path in sources(root):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length >= limit:
                    found.append(f"{path.relative_to(root.parent)}:{node.lineno} {node.name}: {length} lines")
    return found


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


def test_no_library_or_server_module_reaches_500_lines():
    assert long_modules(LIBRARY) + long_modules(SERVER) == []


def test_no_function_reaches_100_lines():
    assert long_functions(LIBRARY) + long_functions(SERVER) == []


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
    (package / "long.py").write_text("def f():\n" + "    x = 1\n" * 120)
    (package / "short.py").write_text("def g():\n    return 1\n")
    assert long_modules(package, limit=100) == ["planted/long.py: 121 lines"]
    assert long_functions(package) == ["planted/long.py:1 f: 121 lines"]


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
