"""The client API-key secret a model's server reads: a JSON object of key names to keys."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_kms as kms
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from ..core.server_contract import DEFAULT_API_KEY_NAME
from ..shared.acknowledgements import acknowledge, default_child
from ..shared.cdk_interfaces import as_secret


def api_keys_secret(
    scope: Construct,
    construct_id: str,
    *,
    encryption_key: kms.IKey | None = None,
    key_name: str = DEFAULT_API_KEY_NAME,
    removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN,
) -> secretsmanager.ISecret:
    """A secret holding ``{"<key_name>": <a generated 40-character key>}`` (``key_name`` default ``"default"``), for
    ``ModelService(api_keys_secret=...)``. Clients send a key in ``x-api-key`` or ``Authorization: Bearer``; add a
    named key per client beside it, so one can be revoked alone. ``encryption_key`` (default: the account's
    ``aws/secretsmanager`` key) encrypts it; ``removal_policy`` defaults to RETAIN (the clients hold its keys).
    """
    secret = secretsmanager.Secret(
        scope,
        construct_id,
        description="API keys clients send in x-api-key or Authorization: Bearer, a JSON object of key names to "
        "keys; injected into every model task",
        generate_secret_string=secretsmanager.SecretStringGenerator(
            secret_string_template="{}",
            generate_string_key=key_name,
            exclude_punctuation=True,
            password_length=40,
        ),
        encryption_key=encryption_key,
        removal_policy=removal_policy,
    )
    acknowledge(
        default_child(secret),
        "AwsSolutions-SMG4",
        "Client API keys are rotated by adding a new named key alongside the old one (the value is a JSON object "
        "of names to keys), moving the client, then removing the old name; a single-user rotation Lambda would "
        "cut clients off mid-rotation.",
    )
    return as_secret(secret)
