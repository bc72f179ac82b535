"""The routes, below a model's prefix, whose bodies are prediction inputs (each server declares its own:
``ServerContract.prediction_routes``), and the ones a new load balancer's web ACL starts with."""

from __future__ import annotations

from collections.abc import Iterable

from .bundled_signals import BUNDLED_PREDICTION_ROUTES

# The OpenAI-compatible routes that take a prompt or texts (vLLM and SGLang serve them; their key guards /v1).
OPENAI_PREDICTION_ROUTES = ("/v1/completions", "/v1/chat/completions", "/v1/embeddings")


def ordered_routes(routes: Iterable[str]) -> tuple[str, ...]:
    """``routes`` once each, one API's together (ordered by their first path segment, otherwise as given): the order
    of the web ACL's path regexes."""
    unique = list(dict.fromkeys(routes))
    return tuple(sorted(unique, key=lambda route: route.split("/")[1]))


# Paths, below a model's prefix, whose bodies are prediction inputs: texts that may hold HTML, paths or URLs, which
# the common rule set's body rules block. Those rules count everywhere and block only off these paths (rule
# BodyRulesOffPredictions). Each server declares its own (ServerContract.prediction_routes) and a model's route adds
# them; a new web ACL starts with the bundled server's and the OpenAI-compatible servers' (vLLM, SGLang), so adding
# such a model leaves the shared stack's web ACL as it was.
SHIPPED_PREDICTION_ROUTES = ordered_routes(BUNDLED_PREDICTION_ROUTES + OPENAI_PREDICTION_ROUTES)
