"""An environment of 200 models synthesizes within every CloudFormation and load balancer limit, spread over four
load balancers, and adding, removing or changing one model touches only that model's stack (and, for a new load
balancer, the shared stack)."""

from __future__ import annotations

import json
import re

import aws_cdk as cdk
import pytest

from stacks.config import load_environment
from stacks.reference_guard import LOCK_FILE
from stacks.stage import InferenceStage
from tests.conftest import scenario_context
from tests.infra.many_models import MODELS_PER_LOAD_BALANCER, ROOT, many_model_environment, measure

# About 40 s of a core, asserting no time: make test runs this module in its background run.
pytestmark = pytest.mark.background

MODELS = 200
# CloudFormation quotas: resources, outputs and parameters per stack; template body uploaded through S3.
MAX_RESOURCES, MAX_OUTPUTS, MAX_PARAMETERS, MAX_TEMPLATE_BYTES = 500, 200, 200, 1_000_000


def synthesize(environments: dict, outdir) -> dict:
    """{stack id: template} of one stage per environment, in a plain cdk.App with cdk.json's flags."""
    context = {k: v for k, v in scenario_context().items() if k != "environments"}
    app = cdk.App(context=context, outdir=str(outdir))
    stages = [InferenceStage(app, load_environment(name, data)) for name, data in environments.items()]
    app.synth()
    return {
        (stage.config.name, stack.hierarchical_id.split("/")[-1]): stack.template
        for stage in stages
        for stack in stage.synth().stacks
    }


@pytest.fixture(scope="module")
def many(tmp_path_factory) -> dict:
    return synthesize({"many": many_model_environment(MODELS)}, tmp_path_factory.mktemp("many"))


def test_two_hundred_models_synthesize_into_a_stack_each(many):
    assert sorted(stack for _, stack in many) == sorted(
        ["Network", "Inference", *(f"Model-model-{i:03d}" for i in range(MODELS))]
    )


@pytest.fixture(scope="module")
def three(tmp_path_factory) -> dict:
    return synthesize({"many": many_model_environment(3)}, tmp_path_factory.mktemp("three"))


LIMITS = {
    "resources": (lambda t: len(t["Resources"]), MAX_RESOURCES),
    "outputs": (lambda t: len(t.get("Outputs", {})), MAX_OUTPUTS),
    "parameters": (lambda t: len(t.get("Parameters", {})), MAX_PARAMETERS),
    "bytes": (lambda t: len(json.dumps(t)), MAX_TEMPLATE_BYTES),
}


@pytest.mark.parametrize("limit", LIMITS)
def test_every_stack_stays_within_cloudformation_limits(many, limit):
    measure, allowed = LIMITS[limit]
    worst = max(many.items(), key=lambda item: measure(item[1]))
    assert measure(worst[1]) <= allowed, f"{worst[0]}: {measure(worst[1])} {limit}, CloudFormation allows {allowed}"


LOAD_BALANCERS = MODELS // MODELS_PER_LOAD_BALANCER


def with_a_model_on_load_balancer_2() -> dict:
    data = many_model_environment(3)
    data["models"].append({**data["models"][0], "name": "model-new", "load_balancer": 2})
    return data


@pytest.fixture(scope="module")
def four(tmp_path_factory) -> dict:
    """three's models plus one on a second load balancer."""
    return synthesize({"many": with_a_model_on_load_balancer_2()}, tmp_path_factory.mktemp("four"))


@pytest.mark.parametrize("limit", LIMITS)
def test_the_shared_stack_grows_only_by_a_load_balancer_per_fifty_models(many, three, four, limit):
    """Otherwise the limit has only moved: 200 models leave the shared stack's resources, outputs and parameters as
    they are with 3, plus what one more load balancer adds (its listeners, security group, web ACL, 5xx alarm and
    outputs), once per 50 canary models. Its dashboard names each model, so its size grows a little (about 0.4 KB a
    model: 1 MB at some 2,000 models)."""
    measure, allowed = LIMITS[limit]
    shared, small = many[("many", "Inference")], three[("many", "Inference")]
    if limit == "bytes":
        assert measure(shared) <= allowed / 5
        return
    per_load_balancer = measure(four[("many", "Inference")]) - measure(small)
    assert per_load_balancer <= 20 and (limit == "parameters" or per_load_balancer >= 1)
    assert measure(shared) == measure(small) + (LOAD_BALANCERS - 1) * per_load_balancer


def listener_of(rule: dict) -> int:
    """The number of the load balancer whose listener a rule sits on (read from the cross-stack reference)."""
    (found,) = set(
        re.findall(r"RefLoadBalancer(\d*)(?:LoadBalancer)?Http", json.dumps(rule["Properties"]["ListenerArn"]))
    )
    return int(found or 1)


def test_models_spread_over_load_balancers_each_within_its_quotas(many):
    """A canary model takes two target groups: 50 a load balancer (quota 100), four load balancers for 200 models, each
    model's rule on the listener of the load balancer its config names, priorities unique per listener."""
    config = load_environment("many", many_model_environment(MODELS))
    rules = {
        stack: r
        for (_, stack), t in many.items()
        for r in t["Resources"].values()
        if r["Type"] == "AWS::ElasticLoadBalancingV2::ListenerRule"
    }
    groups = [
        r
        for t in many.values()
        for r in t["Resources"].values()
        if r["Type"] == "AWS::ElasticLoadBalancingV2::TargetGroup"
    ]
    assert len(rules) == MODELS and len(groups) == 2 * MODELS
    balancers = [
        r
        for r in many[("many", "Inference")]["Resources"].values()
        if r["Type"] == "AWS::ElasticLoadBalancingV2::LoadBalancer"
    ]
    assert len(balancers) == LOAD_BALANCERS
    for model in config.models:
        assert listener_of(rules[f"Model-{model.name}"]) == config.server_config(model).load_balancer, model.name
    for number in range(1, LOAD_BALANCERS + 1):
        on = [r for r in rules.values() if listener_of(r) == number]
        assert len(on) == MODELS_PER_LOAD_BALANCER and 2 * len(on) <= 100
        assert len({r["Properties"]["Priority"] for r in on}) == len(on)
    for balancer_group in [
        r
        for r in many[("many", "Inference")]["Resources"].values()
        if r["Type"] == "AWS::EC2::SecurityGroup"
        and r["Properties"]["GroupDescription"].startswith("Inference load balancer")
    ]:
        assert len(balancer_group["Properties"]["SecurityGroupEgress"]) == 1, (
            "a security group holds 60 rules by default"
        )


def test_each_models_url_output_is_on_its_own_load_balancer(many):
    config = load_environment("many", many_model_environment(MODELS))
    for model in config.models:
        (output,) = many[("many", f"Model-{model.name}")]["Outputs"].values()
        (number,) = set(
            re.findall(r"FnGetAttLoadBalancer(\d*)(?:LoadBalancer)?[0-9A-F]{8}DNSName", json.dumps(output["Value"]))
        )
        assert int(number or 1) == config.server_config(model).load_balancer and output["Value"]["Fn::Join"][1][
            -1
        ].startswith(f"/{model.name}/")


def changed_stacks(before: dict, after: dict) -> list[str]:
    return sorted(key[1] for key in before.keys() | after.keys() if before.get(key) != after.get(key))


def test_adding_a_model_on_a_new_load_balancer_moves_no_other_model(three, four):
    """Assignment is explicit (models[].load_balancer): a fourth model on a second load balancer adds its stack and the
    load balancer to the shared stack; every other model's stack, its rule and URL, stays as it was."""
    assert changed_stacks(three, four) == ["Inference", "Model-model-new"]
    (output,) = four[("many", "Model-model-new")]["Outputs"].values()
    assert "LoadBalancer2" in json.dumps(output["Value"])


def test_removing_a_model_moves_no_other_model(three, tmp_path):
    shrunk = many_model_environment(3)
    del shrunk["models"][1]
    after = synthesize({"many": shrunk}, tmp_path)
    assert changed_stacks(three, after) == ["Inference", "Model-model-001"]


def test_a_new_version_of_one_model_changes_that_models_stack_only(three, tmp_path):
    changed = many_model_environment(3)
    changed["models"][1]["version"] = "2027-01-15"
    after = synthesize({"many": changed}, tmp_path)
    assert sorted(stack for key in three if three[key] != after[key] for stack in [key[1]]) == ["Model-model-001"]


@pytest.mark.slow
def test_measuring_a_generated_environment_leaves_the_repositorys_reference_lock_alone():
    """`python -m tests.infra.many_models` runs app.py through the CDK CLI; its guard wrote the generated "Many"
    environment into the repository's references.lock.json (32 entries, committed by mistake once)."""
    lock = ROOT / LOCK_FILE
    before = lock.read_bytes()
    measure(1)
    assert lock.read_bytes() == before
