"""Issue 52.11: the docs promised the deployment circuit breaker where a model deploys by canary (staging, prod),
which has none (DeploymentProps.uses_circuit_breaker: rolling and blue/green only). Every sentence of the docs that
has a circuit breaker roll something back says for which strategy or environment, or that it is not the breaker."""

from __future__ import annotations

import re
from pathlib import Path

from gpu_inference_constructs.rollout.deployment import DeploymentProps

DOCS = Path(__file__).resolve().parents[2] / "docs"
QUALIFIED = (
    "rolling",
    "blue/green",
    "blue_green",
    "in dev",
    "no circuit breaker",
    "not the circuit breaker",
    "whatever the strategy",
)


def unqualified_promises(text: str) -> list[str]:
    """Sentences in which the circuit breaker rolls something back (in one clause), naming neither a strategy nor
    that it is absent."""
    sentences = re.split(r"(?<=[.!?])\s+", re.sub(r"\s+", " ", text))
    return [
        s
        for s in sentences
        if re.search(r"circuit breaker[^.;,:]*\broll", s, re.I) and not any(word in s.lower() for word in QUALIFIED)
    ]


def test_no_doc_promises_the_circuit_breaker_without_saying_for_which_strategy():
    found = {path.name: unqualified_promises(path.read_text()) for path in sorted(DOCS.glob("*.md"))}
    assert not {name: sentences for name, sentences in found.items() if sentences}


def test_the_check_finds_the_promise_the_docs_made():
    """The twin: deploying.md's prerequisite and configuration.md's streaming note as they were."""
    assert unqualified_promises(
        "a task refuses to start without its files and manifest, and the circuit breaker then rolls the stack back."
    )
    assert unqualified_promises(
        "fails vLLM's load (the task stops and the deployment's circuit breaker rolls back), but"
    )


def test_the_strategies_staging_and_prod_use_have_no_circuit_breaker():
    assert not DeploymentProps("canary").uses_circuit_breaker and not DeploymentProps("linear").uses_circuit_breaker
    assert DeploymentProps("rolling").uses_circuit_breaker and DeploymentProps("blue_green").uses_circuit_breaker
