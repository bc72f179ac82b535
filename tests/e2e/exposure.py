"""What a client on the internet can reach of one model or pool: every route of the bundled server (its own OpenAPI
document, plus the routes outside it) or of the pool's server (its app's routes) as the client sends it, whether the
listener rule forwards it (the ALB's path-pattern matching), and what the route is for. Used against the synthesized
rule (tests/infra) and against the server the task definition starts (tests/e2e)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

# Routes the server answers that its OpenAPI document leaves out: the docs themselves.
DOCS_ROUTES = (("GET", "/docs"), ("GET", "/openapi.json"))
# Answered without a key, for the target group, the container health check and a local metrics scrape: never
# forwarded to the internet.
PROBE_ROUTES = (("GET", "/health"), ("GET", "/ready"), ("GET", "/metrics"))
# What the internet is meant to reach (behind the key), by the OpenAPI document's path templates. A route the server
# adds later is "unlisted" until someone lists it here: a rule that forwards an unlisted route fails the walk, even
# under a wildcard that forwards its neighbours (/<m>/v2*).
PUBLIC_ROUTES = {
    **{
        ("POST", path): "inference"
        for path in (
            "/predict",
            "/predict/batch",
            "/v1/embeddings",
            "/v2/models/{model_name}/infer",
            "/v2/models/{model_name}/versions/{model_version}/infer",
        )
    },
    **{
        ("GET", path): "metadata"
        for path in (
            "/v1/models",
            "/v1/models/{model_id}",
            "/v2",
            "/v2/health/live",
            "/v2/health/ready",
            "/v2/models/{model_name}",
            "/v2/models/{model_name}/ready",
            "/v2/models/{model_name}/versions/{model_version}",
            "/v2/models/{model_name}/versions/{model_version}/ready",
        )
    },
}


# A pool's routes below /<pool> (inference_server/pool/app.py): the model is in the path or the body; the probes are
# the bare PROBE_ROUTES' (a pool has no /metrics).
POOL_PUBLIC_ROUTES = {
    ("POST", "/v1/embeddings"): "inference",
    ("POST", "/v2/models/{name}/infer"): "inference",
    ("POST", "/models/{name}/predict"): "inference",
    ("GET", "/v1/models"): "metadata",
}


@dataclass(frozen=True)
class Route:
    method: str
    path: str  # as a client sends it, below the load balancer
    purpose: str  # "inference", "metadata", "docs", "probe" or "unlisted" (not in PUBLIC_ROUTES: private)
    forwarded: bool  # the model's listener rule matches it
    docs_on: bool = False  # the server serves its docs (api_docs)

    @property
    def intended_public(self) -> bool:
        return self.purpose in ("inference", "metadata") or (self.purpose == "docs" and self.docs_on)


def alb_matches(pattern: str, path: str) -> bool:
    """ALB path-pattern matching: case-sensitive, '*' any run of characters ('/' included), '?' exactly one, the
    whole path (Elastic Load Balancing, "Path conditions")."""
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, path) is not None


def forwarded(patterns: list[str], path: str) -> bool:
    return any(alb_matches(pattern, path) for pattern in patterns)


def _concrete(path: str, parameters: list[dict[str, Any]]) -> str:
    """The path with each parameter replaced by the value the document names (its enum), else a placeholder."""
    for parameter in parameters:
        if parameter.get("in") == "path":
            schema = parameter.get("schema", {})
            value = (schema.get("enum") or ["x"])[0]
            path = path.replace("{" + parameter["name"] + "}", str(value))
    return path


def _purpose(method: str, template: str) -> str:
    if (method, template) in PROBE_ROUTES:
        return "probe"
    if (method, template) in DOCS_ROUTES:
        return "docs"
    return PUBLIC_ROUTES.get((method, template), "unlisted")


def route_table(doc: dict[str, Any], model: str, patterns: list[str], docs_on: bool) -> list[Route]:
    """Every route of the server's document and outside it, at the model's prefix (what the rule sees) and bare
    (which no model's rule forwards)."""
    routes = [
        (method.upper(), path, _concrete(path, operation.get("parameters", [])))
        for path, operations in doc["paths"].items()
        for method, operation in operations.items()
    ]
    routes += [(method, path, path) for method, path in (*DOCS_ROUTES, *PROBE_ROUTES)]
    table = []
    for method, template, path in dict.fromkeys(routes):
        for sent in (f"/{model}{path}", path):
            table.append(Route(method, sent, _purpose(method, template), forwarded(patterns, sent), docs_on))
    return table


def exposure_problems(table: list[Route], model: str) -> list[str]:
    """What the rule gets wrong: a probe, metrics or (off) docs route it forwards, an inference or metadata route
    under the model's prefix it does not."""
    problems = []
    for route in table:
        under_prefix = route.path.startswith(f"/{model}/")
        if route.forwarded and not route.intended_public:
            problems.append(f"{route.method} {route.path} ({route.purpose}) is forwarded to the internet")
        if under_prefix and route.intended_public and not route.forwarded:
            problems.append(f"{route.method} {route.path} ({route.purpose}) is not forwarded: clients cannot reach it")
    return problems


def pool_route_table(routes: list[tuple[str, str]], pool: str, patterns: list[str]) -> list[Route]:
    """Every (method, path template) the pool's app routes, as a client sends it (a model named ``x``), and bare
    below the load balancer (which no rule forwards: the pool answers those with its 401 or 404)."""
    table = []
    for method, template in dict.fromkeys(routes):
        relative = template.removeprefix(f"/{pool}")
        purpose = (
            "probe" if (method, relative) in PROBE_ROUTES else POOL_PUBLIC_ROUTES.get((method, relative), "unlisted")
        )
        path = re.sub(r"\{[^}]+\}", "x", relative)
        for sent in dict.fromkeys((f"/{pool}{path}", path)):
            table.append(Route(method, sent, purpose, forwarded(patterns, sent)))
    return table
