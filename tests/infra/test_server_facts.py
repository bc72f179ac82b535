"""The bundled server's facts live once, in inference_server/facts.py: the library reads that file from the build
context it ships (gpu_inference_constructs.core.server_facts) and keeps no copy of its own."""

from __future__ import annotations

import ast
from pathlib import Path

import inference_server.facts
from gpu_inference_constructs.core import metric_names, server_contract, server_facts
from gpu_inference_constructs.servers import bundled as bundled_server

# The library's modules that hold the server's facts, and the name each reads them through.
READERS = {metric_names: "_server", bundled_server: "server_facts", server_contract: "server_facts"}


def copied_facts(source: str, reader: str, facts: set[str]) -> list[str]:
    """Module-level names in ``source`` that a fact's name is bound to other than by reading ``reader.<fact>``."""
    found = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign):
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if not isinstance(target, ast.Name):
            continue
        read = isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name) and value.value.id == reader
        if target.id in facts and not read:
            found.append(target.id)
    return found


def test_the_library_reads_the_servers_own_facts_file():
    assert server_facts.FACTS_FILE.resolve() == Path(inference_server.facts.__file__).resolve()
    loaded = server_facts.server
    assert {k: getattr(loaded, k) for k in dir(inference_server.facts) if k.isupper()} == {
        k: v for k, v in vars(inference_server.facts).items() if k.isupper()
    }


def test_the_librarys_names_are_read_from_the_facts_not_copied():
    facts = {k for k in vars(inference_server.facts) if k.isupper()}
    for module, reader in READERS.items():
        assert copied_facts(Path(str(module.__file__)).read_text(), reader, facts) == [], module.__name__
    assert {k: v for k, v in vars(metric_names).items() if k.isupper()} == {
        k: getattr(server_facts.server, k) for k in vars(metric_names) if k.isupper()
    }
    assert (bundled_server.MODEL_RUNTIMES, bundled_server.TASKS, bundled_server.MAX_BUNDLED_WORKERS) == (
        server_facts.server.RUNTIMES,
        server_facts.server.TASKS,
        server_facts.server.MAX_WORKERS,
    )
    assert (server_contract.BUNDLED_DEFAULT_DRAIN_SECONDS, server_contract.BUNDLED_EXIT_SECONDS) == (
        server_facts.server.DRAIN_TIMEOUT_S,
        server_facts.server.EXIT_GRACE_S,
    )


def test_the_copy_check_finds_a_planted_copy():
    source = (
        'from .server_facts import server as _server\nNAMESPACE: str = _server.NAMESPACE\nBATCH_SIZE = "BatchSize"\n'
    )
    assert copied_facts(source, "_server", {"NAMESPACE", "BATCH_SIZE"}) == ["BATCH_SIZE"]


def test_the_installed_library_ships_the_facts_file():
    """constructs/pyproject.toml's package data takes every module of the server, facts.py among them."""
    import tomllib

    data = tomllib.loads((Path(__file__).parents[2] / "constructs" / "pyproject.toml").read_text())
    patterns = data["tool"]["setuptools"]["package-data"]["gpu_inference_constructs"]
    package = server_facts.FACTS_FILE.parents[2]  # the package root, whatever subpackage holds server_facts
    shipped = {p for pattern in patterns for p in package.glob(pattern)}
    assert server_facts.FACTS_FILE in shipped
    server_modules = {
        p for p in (package / "server_image" / "inference_server").rglob("*.py") if "__pycache__" not in p.parts
    }
    assert server_modules <= shipped
