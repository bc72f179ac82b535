"""Least exposure, route by route: each model's listener rule forwards exactly the routes its server declares
public (inference and metadata, behind the key), never probes, metrics or docs that are off; the server the task
definition configures refuses each forwarded route without a key; the rules fit the ALB's limits; no environment
carries keys over plain HTTP from the internet. The running-server half is in
tests/e2e/test_task_definition_runs_the_server.py."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any, cast

import httpx
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk.assertions import Annotations, Match, Template

from gpu_inference_constructs import (
    BundledServer,
    ConfigError,
    EcrImage,
    InferenceLoadBalancer,
    LoadBalancerProps,
    ModelProps,
    ModelService,
    ServiceAccess,
    TritonProps,
    TritonServer,
    api_keys_secret,
)
from gpu_inference_constructs.core.server_contract import MAX_RULE_CONDITION_VALUES, MAX_RULE_CONDITION_WILDCARDS
from gpu_inference_constructs.servers.bundled import BUNDLED_DOCS_PATHS, BUNDLED_PUBLIC_PATHS, BundledServerProps
from gpu_inference_constructs.shared.cdk_interfaces import as_secret
from stacks.model_entry import split_model_entry
from tests.e2e.contract import load_contracts
from tests.e2e.exposure import Route, exposure_problems, forwarded, pool_route_table, route_table
from tests.infra.test_server_contract import IMAGE, at_priority, complete, on_cluster, stack_with_placement

ENVIRONMENTS = ["dev", "staging", "prod"]
KEY = "exposure-test-key"
# vLLM's routes that --api-key leaves open (vLLM docs, "Security": the key guards /v1, /v2, /inference and /cohere
# only) and its probes, metrics and docs: none may be forwarded.
VLLM_UNGUARDED = (
    "/invocations",
    "/pooling",
    "/classify",
    "/score",
    "/rerank",
    "/tokenize",
    "/detokenize",
    "/pause",
    "/resume",
    "/abort_requests",
    "/update_weights",
    "/metrics",
    "/health",
    "/ping",
    "/version",
    "/docs",
    "/redoc",
    "/openapi.json",
    "/load",
    "/v2/models",
)
VLLM_KEYED = ("/v1/completions", "/v1/chat/completions", "/v1/models", "/v1/embeddings")


def bundled_contracts(synthesized):
    """The single-model bundled servers' contracts: a pool runs the pool server (POOL_NAME set), another app, whose
    routes below /<pool>/ its own tests walk."""
    return [
        c
        for env in ENVIRONMENTS
        for c in load_contracts(synthesized.inference_template(env), env)
        if c.runs_bundled_image and "POOL_NAME" not in c.environment
    ]


def server_app(contract, tmp_path):
    """The bundled server's app as the task definition configures it (settings from its environment, the secret as
    the shared stack generates it: a JSON object of names to keys)."""
    from inference_server.front.app import create_app
    from inference_server.settings import load_settings
    from inference_server.testing import local_service

    environ = {name: value for name, value in contract.environment.items() if isinstance(value, str)}
    environ.update(
        MODEL_URI=str(tmp_path),
        MODEL_CACHE_DIR=str(tmp_path / "cache"),
        **{name: json.dumps({"default": KEY}) for name in contract.secret_names},
    )
    service = local_service(load_settings([], environ))
    return service, create_app(service)


def walk(contract, tmp_path) -> tuple[list[Route], dict]:
    service, app = server_app(contract, tmp_path)
    doc = app.openapi()
    docs_on = contract.environment.get("DOCS") == "true"
    return route_table(doc, contract.model_name, contract.path_patterns, docs_on), doc


def test_each_rule_forwards_exactly_the_keyed_inference_and_metadata_routes(synthesized, tmp_path):
    contracts = bundled_contracts(synthesized)
    assert {c.model_name for c in contracts} == {"minilm", "sentiment", "vision"}
    for contract in contracts:
        assert contract.path_patterns == [f"/{contract.model_name}{p}" for p in BUNDLED_PUBLIC_PATHS]
        table, doc = walk(contract, tmp_path)
        assert exposure_problems(table, contract.model_name) == [], (contract.environment_name, contract.model_name)
        assert contract.environment["DOCS"] == "false"
        # Each forwarded route the document describes says it needs the key.
        for route in table:
            if route.forwarded and route.purpose != "docs":
                bare = route.path.removeprefix(f"/{contract.model_name}")
                operations = [
                    op
                    for path, ops in doc["paths"].items()
                    for method, op in ops.items()
                    if method.upper() == route.method and re.fullmatch(re.sub(r"\{[^}]+\}", "[^/]+", path), bare)
                ]
                assert operations and all("401" in op["responses"] and op.get("security") for op in operations), route


def test_the_configured_server_refuses_every_forwarded_route_without_a_key(synthesized, tmp_path):
    """In-process, the app the task definition configures: 401 for every forwarded route without a key (or with a
    wrong one), and never 401 with the key; the probes answer without one (the target group needs them)."""
    contract = next(c for c in bundled_contracts(synthesized) if c.environment_name == "prod")
    table, _ = walk(contract, tmp_path)
    _, app = server_app(contract, tmp_path)

    async def statuses():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:

            async def send(route, headers):
                body = {} if route.method == "POST" else None
                return (await client.request(route.method, route.path, json=body, headers=headers)).status_code

            forwarded_routes = [r for r in table if r.forwarded]
            assert forwarded_routes
            return (
                [await send(r, {}) for r in forwarded_routes],
                [await send(r, {"x-api-key": "wrong"}) for r in forwarded_routes],
                [await send(r, {"authorization": f"Bearer {KEY}"}) for r in forwarded_routes],
                [await send(Route("GET", path, "probe", False), {}) for path in ("/health", "/metrics")],
            )

    without, wrong, keyed, probes = asyncio.run(statuses())
    assert set(without) == {401} and set(wrong) == {401}
    assert 401 not in keyed
    assert probes == [200, 200]


def test_a_rule_that_forwards_too_much_or_too_little_is_found(synthesized, tmp_path):
    """The walk can fail: the old rule (the whole prefix) forwards metrics, docs and probes; one forwarding only
    /predict* leaves the metadata and the protocols out."""
    contract = next(c for c in bundled_contracts(synthesized) if c.model_name == "minilm")
    _, app = server_app(contract, tmp_path)
    doc = app.openapi()
    whole = exposure_problems(route_table(doc, "minilm", ["/minilm", "/minilm/*"], False), "minilm")
    for path in ("/minilm/metrics", "/minilm/docs", "/minilm/openapi.json", "/minilm/health", "/minilm/ready"):
        assert any(problem.startswith(f"GET {path} ") for problem in whole), whole
    narrow = exposure_problems(route_table(doc, "minilm", ["/minilm/predict*"], False), "minilm")
    assert any("GET /minilm/v1/models (metadata) is not forwarded" in p for p in narrow)
    assert any("POST /minilm/v1/embeddings (inference) is not forwarded" in p for p in narrow)


def test_a_route_the_server_adds_under_a_forwarded_wildcard_is_found_until_it_is_listed(synthesized, tmp_path):
    """Every route the rule forwards is one the walk was told is public: a new /v2/admin would pass the deployed
    rule's /<m>/v2* (behind the key, but never meant for clients), and the walk fails on it."""
    contract = next(c for c in bundled_contracts(synthesized) if c.model_name == "minilm")
    _, app = server_app(contract, tmp_path)
    doc = app.openapi()
    doc = {**doc, "paths": {**doc["paths"], "/v2/admin": {"post": {}}}}
    problems = exposure_problems(route_table(doc, "minilm", contract.path_patterns, False), "minilm")
    assert problems == ["POST /minilm/v2/admin (unlisted) is forwarded to the internet"]


def pool_contracts(synthesized):
    return [
        c
        for env in ENVIRONMENTS
        for c in load_contracts(synthesized.inference_template(env), env)
        if "POOL_NAME" in c.environment
    ]


def pool_app(contract, tmp_path):
    """The pool server's app as the task definition configures it (its key from the secret as the shared stack
    generates it); no model is loaded: every answer below comes before one would be."""
    from inference_server.pool.pool_settings import load_pool_settings
    from inference_server.pool.server import PoolServer

    environ = {name: value for name, value in contract.environment.items() if isinstance(value, str)}
    environ.update(
        MODEL_STORE_URI=str(tmp_path / "pools" / contract.model_name),
        MODEL_CACHE_DIR=str(tmp_path / "cache"),
        **{name: json.dumps({"default": KEY}) for name in contract.secret_names},
    )
    return PoolServer(load_pool_settings(environ), loader=cast(Any, object())).app


def pool_routes(app) -> list[tuple[str, str]]:
    """(method, path template) of every route the pool's app declares."""
    return [(method, route.path) for route in app.app.routes for method in sorted(route.methods - {"HEAD"})]


def answered_without_a_key(app, table: list[Route]) -> list[str]:
    """Each forwarded route that answers a request without a key, or with a wrong one, with anything but 401; and
    each that a request with the key gets a 401 from."""

    async def walk() -> list[str]:
        found = []
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            for route in (r for r in table if r.forwarded):
                body = {} if route.method == "POST" else None
                for headers in ({}, {"x-api-key": "wrong"}):
                    status = (await client.request(route.method, route.path, json=body, headers=headers)).status_code
                    if status != 401:
                        found.append(f"{route.method} {route.path} answers {status} without a valid key")
                keyed = await client.request(route.method, route.path, json=body, headers={"x-api-key": KEY})
                if keyed.status_code == 401:
                    found.append(f"{route.method} {route.path} refuses the key")
        return found

    return asyncio.run(walk())


def test_the_pools_rule_forwards_exactly_its_keyed_routes_and_its_server_refuses_them_without_a_key(
    synthesized, tmp_path
):
    """The pool's routes walked as a model's are: the rule forwards its inference and metadata routes (every model
    through them) and never its probes; its server answers each forwarded route only with the key (the model list,
    a GET with no body, answered without one before)."""
    (contract,) = pool_contracts(synthesized)
    pool = contract.model_name
    assert contract.secret_names == ["API_KEYS"]
    app = pool_app(contract, tmp_path)
    table = pool_route_table(pool_routes(app), pool, contract.path_patterns)
    assert {(r.method, r.path) for r in table if r.forwarded} == {
        ("POST", f"/{pool}/v1/embeddings"),
        ("POST", f"/{pool}/v2/models/x/infer"),
        ("POST", f"/{pool}/models/x/predict"),
        ("GET", f"/{pool}/v1/models"),
    }
    assert exposure_problems(table, pool) == []
    assert answered_without_a_key(app, table) == []

    async def probes() -> list[int]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            return [(await client.get(path)).status_code for path in ("/health", f"/{pool}/health")]

    assert asyncio.run(probes()) == [200, 200]  # the target group's and the container's, without a key


def test_a_pool_route_without_the_key_check_or_a_rule_forwarding_its_probes_is_found(synthesized, tmp_path):
    """The walk can fail: a pool app that lets one route past its key check (as its model list was), and a rule
    forwarding the whole prefix (the probes with it)."""
    (contract,) = pool_contracts(synthesized)
    pool = contract.model_name
    app = pool_app(contract, tmp_path)
    app.gate.open_paths = app.gate.open_paths | {f"/{pool}/v1/models"}  # the planted route: no key asked
    table = pool_route_table(pool_routes(app), pool, contract.path_patterns)
    assert answered_without_a_key(app, table) == [
        f"GET /{pool}/v1/models answers 200 without a valid key",
        f"GET /{pool}/v1/models answers 200 without a valid key",
    ]
    whole = exposure_problems(pool_route_table(pool_routes(app), pool, [f"/{pool}/*"]), pool)
    assert f"GET /{pool}/health (probe) is forwarded to the internet" in whole
    assert f"GET /{pool}/ready (probe) is forwarded to the internet" in whole


def test_api_docs_are_forwarded_behind_the_key_only_when_turned_on():
    stack, parts = stack_with_placement()
    secret = as_secret(secretsmanager.Secret(stack, "ApiKeys"))
    for name, docs in (("off", False), ("on", True)):
        ModelService(
            stack,
            f"M{name}",
            model=ModelProps(name=f"docs-{name}", version="1"),
            server=BundledServer(BundledServerProps(api_docs=docs), image=IMAGE),
            capacity=on_cluster(stack, "g5.xlarge"),
            access=ServiceAccess(api_keys_secret=secret),
            **at_priority(parts, 10 + docs),
        )
    rules = Template.from_stack(stack).find_resources("AWS::ElasticLoadBalancingV2::ListenerRule")
    patterns = {
        r["Properties"]["Conditions"][0]["PathPatternConfig"]["Values"][0].split("/")[1]: r["Properties"]["Conditions"][
            0
        ]["PathPatternConfig"]["Values"]
        for r in rules.values()
    }
    assert patterns["docs-off"] == [f"/docs-off{p}" for p in BUNDLED_PUBLIC_PATHS]
    assert patterns["docs-on"] == [f"/docs-on{p}" for p in BUNDLED_PUBLIC_PATHS + BUNDLED_DOCS_PATHS]
    with pytest.raises(ConfigError, match=r"models\[0\]\.api_docs: .*runs vLLM.*remove it"):
        split_model_entry({"name": "llm", "version": "1", "api_docs": True, "vllm": {}}, "models[0]")


def test_every_listener_rule_fits_the_alb_limits(synthesized):
    """At most 5 condition values and 5 wildcards per rule, each path pattern at most 128 characters (Elastic
    Load Balancing quotas, "Rules"; CloudFormation, ListenerRule PathPatternConfig)."""
    rules = [
        r
        for env in ENVIRONMENTS
        for r in synthesized.inference_template(env)["Resources"].values()
        if r["Type"] == "AWS::ElasticLoadBalancingV2::ListenerRule"
    ]
    assert len(rules) == 9  # dev 4 (a pool's one rule among them), staging 3, prod 2
    for rule in rules:
        values = [
            v
            for c in rule["Properties"]["Conditions"]
            for v in c.get("Values", []) + c.get("PathPatternConfig", {}).get("Values", [])
        ]
        assert [c["Field"] for c in rule["Properties"]["Conditions"]] == ["path-pattern"]
        assert len(values) <= MAX_RULE_CONDITION_VALUES
        assert sum(v.count("*") + v.count("?") for v in values) <= MAX_RULE_CONDITION_WILDCARDS
        assert all(len(v) <= 128 for v in values)


@pytest.mark.parametrize(
    "paths, message",
    [
        (("/a", "/b", "/c", "/d", "/e", "/f"), r"server\.public_paths: 6 patterns.*at most 5"),
        (("/a*?", "/b**", "/c??"), r"server\.public_paths: 6 wildcards.*at most 5"),
    ],
)
def test_a_server_declaring_more_than_a_rule_holds_fails_at_synth(paths, message):
    with pytest.raises(ConfigError, match=message):
        complete(public_paths=paths)


def test_a_path_pattern_longer_than_the_alb_takes_fails_at_synth():
    stack, parts = stack_with_placement()
    with pytest.raises(ConfigError, match=r"server.public_paths.*at most 128"):
        ModelService(
            stack,
            "M",
            model=ModelProps(name="aa", version="1"),
            server=complete(public_paths=("/" + "x" * 126,)),
            capacity=on_cluster(stack, "g5.xlarge"),
            **parts,
        )


def test_the_vllm_rule_forwards_only_the_prefix_its_key_guards(synthesized):
    (llm,) = [
        c for c in load_contracts(synthesized.inference_template("staging"), "staging") if not c.runs_bundled_image
    ]
    # Staging's vLLM serves LoRA adapters: its rule forwards the inference routes only, never the adapter loading that
    # runtime updating opens to any key holder (docs/lora-adapters.md).
    assert llm.path_patterns == [
        f"/{llm.model_name}/v1/{route}"
        for route in ("chat/completions", "completions", "embeddings", "models", "responses*")
    ]
    for path in (*VLLM_UNGUARDED, "/v1/load_lora_adapter", "/v1/unload_lora_adapter"):
        assert not forwarded(llm.path_patterns, f"/{llm.model_name}{path}"), path
    for path in VLLM_KEYED:
        assert forwarded(llm.path_patterns, f"/{llm.model_name}{path}"), path
    assert "--disable-fastapi-docs" in llm.command


@pytest.mark.parametrize(
    "props",
    [
        dict(allow_http=True),
        dict(allow_http=True, ingress_cidrs=("10.0.0.0/16", "0.0.0.0/0")),
        dict(allow_http=True, ingress_cidrs=("::/0",)),
        dict(allow_http=True, ingress_cidrs=("0.0.0.0/1", "128.0.0.0/1")),
    ],
)
def test_plain_http_from_the_internet_is_refused_naming_the_fixes(props):
    with pytest.raises(ConfigError) as error:
        LoadBalancerProps(**props)
    assert error.value.key == "allow_http"
    for fix in ("cleartext", "certificate_arn", "narrow ingress_cidrs", "internet_facing: false"):
        assert fix in error.value.detail


@pytest.mark.parametrize(
    "props",
    [
        dict(allow_http=True, ingress_cidrs=("203.0.113.0/24",)),
        dict(allow_http=True, internet_facing=False),
        dict(certificate_arn="arn:aws:acm:us-east-1:111111111111:certificate/00000000-0000-4000-8000-000000000001"),
    ],
)
def test_https_a_narrowed_network_or_an_internal_balancer_is_accepted(props):
    LoadBalancerProps(**props)


def test_no_environment_takes_keys_over_plain_http(synthesized):
    """Every environment, dev included, listens with HTTPS; port 80 only redirects."""
    for env in ENVIRONMENTS:
        listeners = Template.from_json(synthesized.inference_template(env)).find_resources(
            "AWS::ElasticLoadBalancingV2::Listener"
        )
        by_port = {listener["Properties"]["Port"]: listener["Properties"] for listener in listeners.values()}
        assert by_port[443]["Protocol"] == "HTTPS", env
        assert [a["Type"] for a in by_port[80]["DefaultActions"]] == ["redirect"], env
        assert synthesized.stages[env].config.load_balancer.certificate_arn, env


def test_vllm_gets_one_named_key_and_the_bundled_server_the_whole_secret(synthesized):
    template = synthesized.inference_template("staging")
    secrets = {c.model_name: c.containers["server"]["Secrets"] for c in load_contracts(template, "staging")}
    (vllm,) = secrets["llama-13b"]
    assert vllm["Name"] == "VLLM_API_KEY"
    joined = vllm["ValueFrom"]["Fn::Join"][1]
    assert joined[-1] == ":default::"  # ECS's JSON-key reference: secret-arn:json-key:version-stage:version-id
    (bundled,) = secrets["minilm"]
    assert bundled["Name"] == "API_KEYS" and "Fn::Join" not in json.dumps(bundled["ValueFrom"])
    generated = [
        r["Properties"]["GenerateSecretString"]
        for r in template["Resources"].values()
        if r["Type"] == "AWS::SecretsManager::Secret"
    ]
    assert generated == [
        {"ExcludePunctuation": True, "GenerateStringKey": "default", "PasswordLength": 40, "SecretStringTemplate": "{}"}
    ]


def test_rotating_the_vllm_key_points_its_tasks_at_another_named_key():
    """vLLM takes one literal key: rotating means naming another key of the secret (docs/security.md, "API keys")."""
    from gpu_inference_constructs import VllmProps, VllmServer

    stack, parts = stack_with_placement()
    secret = as_secret(secretsmanager.Secret(stack, "ApiKeys"))
    model = ModelProps(name="llm", version="1", gpus=4, cpu=45056, memory_mib=163840)
    ModelService(
        stack,
        "M",
        model=model,
        server=VllmServer(VllmProps(api_key_name="llm-2026-12"), image=IMAGE),
        capacity=on_cluster(stack, "g5.12xlarge"),
        access=ServiceAccess(api_keys_secret=secret),
        **parts,
    )
    (task,) = Template.from_stack(stack).find_resources("AWS::ECS::TaskDefinition").values()
    (server,) = [c for c in task["Properties"]["ContainerDefinitions"] if c["Name"] == "server"]
    (reference,) = server["Secrets"]
    assert reference["ValueFrom"]["Fn::Join"][1][-1] == ":llm-2026-12::"
    with pytest.raises(ConfigError, match=r"api_key_name: 'a key' .*1-64 letters"):
        VllmProps(api_key_name="a key")


def behind_our_load_balancer(**props):
    """A stack with an InferenceLoadBalancer (LoadBalancerProps(**props)) for ModelService's load_balancer=."""
    stack, parts = stack_with_placement()
    vpc = ec2.Vpc.from_vpc_attributes(
        stack,
        "PublicVpc",
        vpc_id="vpc-2",
        vpc_cidr_block="10.0.0.0/16",
        availability_zones=["us-east-1a", "us-east-1b"],
        public_subnet_ids=["subnet-a1", "subnet-a2"],
        private_subnet_ids=["subnet-b1", "subnet-b2"],
    )
    alb = InferenceLoadBalancer(
        stack,
        "Alb",
        vpc=vpc,
        access_logs_bucket=s3.Bucket.from_bucket_name(stack, "Logs", "logs"),
        props=LoadBalancerProps(**props),
    )
    return stack, {**parts, "route": alb, "capacity": on_cluster(stack, "g5.xlarge")}


CERTIFICATE = "arn:aws:acm:us-east-1:123456789012:certificate/00000000-0000-4000-8000-000000000001"
TRITON = TritonServer(TritonProps(image=EcrImage(repository="vision/tritonserver", tag="25.10-py3")))


@pytest.mark.parametrize(
    "server, fix",
    [
        (BundledServer(image=IMAGE), "access=ServiceAccess(api_keys_secret="),
        (TRITON, "the triton server takes no API key: put an authenticating proxy in front of it"),
    ],
)
def test_a_model_without_a_key_on_a_load_balancer_open_to_the_internet_is_refused(server, fix):
    """Before, a Triton or TGI model (their presets take no key), or any model whose caller forgot api_keys_secret,
    answered anyone on the internet."""
    stack, parts = behind_our_load_balancer(certificate_arn=CERTIFICATE)
    with pytest.raises(ConfigError) as error:
        ModelService(stack, "M", model=ModelProps(name="open", version="1"), server=server, **parts)
    assert error.value.key == "access.api_keys_secret" and "anyone could call models[open]" in error.value.detail
    for named in (fix, "allow_unauthenticated=True", "narrow ingress_cidrs", "internal"):
        assert named in error.value.detail


@pytest.mark.parametrize(
    "props, allow_unauthenticated",
    [
        (dict(certificate_arn=CERTIFICATE, ingress_cidrs=("203.0.113.0/24",)), False),
        (dict(allow_http=True, internet_facing=False), False),
        (dict(certificate_arn=CERTIFICATE), True),
    ],
)
def test_no_key_is_accepted_on_a_narrowed_or_internal_balancer_or_when_said_so(props, allow_unauthenticated):
    stack, parts = behind_our_load_balancer(**props)
    ModelService(
        stack,
        "M",
        model=ModelProps(name="closed", version="1"),
        server=TRITON,
        access=ServiceAccess(allow_unauthenticated=allow_unauthenticated),
        **parts,
    )
    assert not Annotations.from_stack(stack).find_warning("*", Match.string_like_regexp("without an API key"))


def test_no_key_behind_a_listener_whose_reach_is_unknown_is_a_warning_naming_the_fix():
    stack, parts = stack_with_placement()
    ModelService(
        stack,
        "M",
        model=ModelProps(name="unkeyed", version="1"),
        server=BundledServer(image=IMAGE),
        capacity=on_cluster(stack, "g5.xlarge"),
        **parts,
    )
    (warning,) = Annotations.from_stack(stack).find_warning("*", Match.string_like_regexp("without an API key"))
    message = warning.entry.data
    assert isinstance(message, str)  # a warning's data is its message
    assert "models[unkeyed]" in message and "access=ServiceAccess(api_keys_secret=" in message
    keyed, keyed_parts = stack_with_placement()
    ModelService(
        keyed,
        "M",
        model=ModelProps(name="keyed", version="1"),
        server=BundledServer(image=IMAGE),
        capacity=on_cluster(keyed, "g5.xlarge"),
        access=ServiceAccess(api_keys_secret=api_keys_secret(keyed, "ApiKeys")),
        **keyed_parts,
    )
    assert not Annotations.from_stack(keyed).find_warning("*", Match.string_like_regexp("without an API key"))


def test_the_library_api_key_secret_is_a_named_key_object_the_bundled_server_reads():
    stack, _ = stack_with_placement()
    api_keys_secret(stack, "ApiKeys", key_name="team-a")
    (secret,) = Template.from_stack(stack).find_resources("AWS::SecretsManager::Secret").values()
    generate = secret["Properties"]["GenerateSecretString"]
    assert (generate["SecretStringTemplate"], generate["GenerateStringKey"]) == ("{}", "team-a")
    assert generate["PasswordLength"] >= 32 and secret["DeletionPolicy"] == "Retain"
