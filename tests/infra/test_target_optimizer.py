"""ALB Target Optimizer per model (issue 46): off by default; opted in, the target group carries the control port under
a new logical ID (both target groups where a deployment shifts traffic), every task the target-control agent in
front of its server, the security group the control port, the dashboard the reject metric; what cannot work is
refused at synth naming the key and the fix."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Match, Template

from gpu_inference_constructs import (
    ClusterCapacity,
    DeploymentProps,
    ListenerRoute,
    ModelBucket,
    ModelProps,
    ModelService,
    ServerDefinition,
    ServiceAccess,
    ServiceLogs,
    SglangProps,
    SglangServer,
    TargetOptimizerProps,
    TritonServer,
    VllmServer,
)
from gpu_inference_constructs.core.errors import ConfigError
from gpu_inference_constructs.core.settings import from_dict
from gpu_inference_constructs.service.target_optimizer import (
    AGENT_CONTAINER_NAME,
    AGENT_USER,
    REJECT_METRIC,
    add_reject_widget,
)
from tests.app.test_checks import CFN_LINT
from tests.infra.team_parts import imported_team_parts

AGENT = "public.ecr.aws/aws-elb/target-optimizer/target-control-agent@sha256:" + "0" * 64
OPTIMIZER = TargetOptimizerProps(agent_image=AGENT, max_concurrency=2)
MIRROR = "123456789012.dkr.ecr.eu-west-1.amazonaws.com"
TRITON = TritonServer(image=ecs.ContainerImage.from_registry(f"{MIRROR}/tritonserver:24.08-py3"))


def team_stack(
    optimizer: TargetOptimizerProps | None = OPTIMIZER,
    server: ServerDefinition = TRITON,
    deployment: DeploymentProps | None = None,
):
    """A team's own app: an imported cluster, its own listener, one Triton model."""
    app = cdk.App()
    stack = cdk.Stack(app, "Team", env=cdk.Environment(account="123456789012", region="eu-west-1"))
    team = imported_team_parts(stack)
    cluster, listener = team.cluster, team.listener
    model = ModelProps(
        name="ranker",
        version="1",
        cpu=1024,
        memory_mib=3072,
        target_optimizer=optimizer,
        deployment=deployment or DeploymentProps(),
    )
    service = ModelService(
        stack,
        "Ranker",
        model=model,
        server=server,
        logs=ServiceLogs(
            kms.Key.from_key_arn(
                stack, "Key", "arn:aws:kms:eu-west-1:123456789012:key/11111111-2222-3333-4444-555555555555"
            )
        ),
        environment="team",
        capacity=ClusterCapacity(cluster, "team-gpu-spot", "g5.xlarge"),
        model_source=ModelBucket(s3.Bucket.from_bucket_name(stack, "Models", "team-models")),
        route=ListenerRoute(listener, 7),
        access=ServiceAccess(allow_unauthenticated=True),
    )
    return app, stack, service


def target_groups(template: Template) -> Mapping[str, Any]:
    return template.find_resources("AWS::ElasticLoadBalancingV2::TargetGroup")


def containers(template: Template) -> Mapping[str, Any]:
    (task,) = template.find_resources("AWS::ECS::TaskDefinition").values()
    return {c["Name"]: c for c in task["Properties"]["ContainerDefinitions"]}


def test_off_by_default_the_target_group_and_the_task_are_as_before():
    _, stack, service = team_stack(optimizer=None)
    template = Template.from_stack(stack)
    ((logical_id, group),) = target_groups(template).items()
    assert logical_id.startswith("RankerTargetGroup") and "Controlled" not in logical_id
    assert "TargetControlPort" not in group["Properties"] and group["Properties"]["Port"] == service.contract.port
    assert AGENT_CONTAINER_NAME not in containers(template)


def test_the_target_group_carries_the_control_port_under_a_new_logical_id_and_routes_to_the_agent():
    _, stack, service = team_stack()
    template = Template.from_stack(stack)
    ((logical_id, group),) = target_groups(template).items()
    assert logical_id.startswith(
        "RankerTargetGroupControlled"
    )  # TargetControlPort is set only at creation: a new group
    properties = group["Properties"]
    assert properties["TargetControlPort"] == OPTIMIZER.control_port
    assert properties["Port"] == OPTIMIZER.data_port
    # Readiness straight from the server: a health check queued behind a long request in the agent would fail it.
    assert properties["HealthCheckPort"] == str(service.contract.port)
    assert properties["HealthCheckPath"] == service.contract.readiness_path
    template.has_resource_properties(
        "AWS::ECS::Service",
        {
            "LoadBalancers": [
                {
                    "ContainerName": AGENT_CONTAINER_NAME,
                    "ContainerPort": OPTIMIZER.data_port,
                    "TargetGroupArn": Match.any_value(),
                }
            ]
        },
    )


def test_the_agent_runs_beside_the_server_with_its_documented_settings_and_nothing_more():
    _, stack, service = team_stack()
    template = Template.from_stack(stack)
    found = containers(template)
    agent, server = found[AGENT_CONTAINER_NAME], found["server"]
    assert agent["Image"] == AGENT and agent["Essential"] is True
    environment = {e["Name"]: e["Value"] for e in agent["Environment"]}
    assert environment.pop("AWS_REGION") == "eu-west-1"  # aws-cdk-lib sets it in every container
    assert environment == {
        "TARGET_CONTROL_DATA_ADDRESS": f"0.0.0.0:{OPTIMIZER.data_port}",
        "TARGET_CONTROL_CONTROL_ADDRESS": f"0.0.0.0:{OPTIMIZER.control_port}",
        "TARGET_CONTROL_DESTINATION_ADDRESS": f"127.0.0.1:{service.contract.port}",
        "TARGET_CONTROL_MAX_CONCURRENCY": "2",
        "RUST_LOG": "info",
    }
    assert sorted(m["ContainerPort"] for m in agent["PortMappings"]) == sorted(
        [OPTIMIZER.data_port, OPTIMIZER.control_port]
    )
    assert agent["ReadonlyRootFilesystem"] is True and agent["User"] == AGENT_USER and agent["Privileged"] is False
    assert (
        agent["LinuxParameters"]["Capabilities"]["Drop"] == ["ALL"]
        and "Add" not in agent["LinuxParameters"]["Capabilities"]
    )
    assert "Secrets" not in agent
    # The server starts after the agent, so it stops before it (ECS stops in reverse dependency order).
    assert {"Condition": "START", "ContainerName": AGENT_CONTAINER_NAME} in server["DependsOn"]
    # No AWS permission for it: the task role's statements are the same with and without the agent.
    _, plain_stack, _ = team_stack(optimizer=None)
    policies = [
        json.dumps(p["Properties"]["PolicyDocument"], sort_keys=True)
        for p in Template.from_stack(stack).find_resources("AWS::IAM::Policy").values()
    ]
    plain = [
        json.dumps(p["Properties"]["PolicyDocument"], sort_keys=True)
        for p in Template.from_stack(plain_stack).find_resources("AWS::IAM::Policy").values()
    ]
    assert sorted(policies) == sorted(plain)


def test_the_load_balancer_reaches_the_data_and_control_ports_and_the_server_for_health_checks():
    _, stack, service = team_stack()
    template = Template.from_stack(stack)
    ingress = [r["Properties"] for r in template.find_resources("AWS::EC2::SecurityGroupIngress").values()]
    ports = sorted(r["FromPort"] for r in ingress if r.get("SourceSecurityGroupId") == "sg-0123456789abcdef0")
    assert ports == sorted([OPTIMIZER.data_port, OPTIMIZER.control_port, service.contract.port])


def test_a_deployment_that_shifts_traffic_gets_the_control_port_on_both_target_groups():
    _, stack, _ = team_stack(deployment=DeploymentProps(strategy="blue_green"))
    groups = target_groups(Template.from_stack(stack))
    assert len(groups) == 2
    assert all("Controlled" in logical_id for logical_id in groups)
    assert {g["Properties"]["TargetControlPort"] for g in groups.values()} == {OPTIMIZER.control_port}


def test_the_dashboard_graphs_the_reject_metric_per_load_balancer():
    _, stack, service = team_stack()
    dashboard = cdk.aws_cloudwatch.Dashboard(stack, "Dashboard")
    add_reject_widget(dashboard, service.model.name, service.load_balancer_full_name)
    body = json.dumps(stack.resolve(Template.from_stack(stack).find_resources("AWS::CloudWatch::Dashboard")))
    assert REJECT_METRIC in body and "TargetControlRequestCount" in body


@pytest.mark.parametrize(
    ("props", "key", "fix"),
    [
        (
            {"agent_image": "public.ecr.aws/aws-elb/target-optimizer/target-control-agent:latest"},
            "agent_image",
            "pin it",
        ),
        ({"agent_image": "public.ecr.aws/aws-elb/target-optimizer/target-control-agent"}, "agent_image", "pin it"),
        ({"agent_image": "nginx:1.27"}, "agent_image", "target-control-agent"),
        ({"max_concurrency": 0}, "max_concurrency", "out of range"),
        ({"max_concurrency": 1001}, "max_concurrency", "out of range"),
        ({"control_port": 8880}, "control_port", "choose another"),
        ({"log_level": "trace"}, "log_level", "one of"),
    ],
)
def test_props_refuse_what_cannot_work_naming_the_key_and_the_fix(props, key, fix):
    with pytest.raises(ConfigError, match=rf"{key}.*{fix}"):
        TargetOptimizerProps(**{"agent_image": AGENT, **props})


def test_a_cdk_json_block_names_the_model_and_the_key():
    with pytest.raises(ConfigError, match=r"models\[0\]\.target_optimizer\.agent_image.*pin it"):
        from_dict(
            ModelProps,
            {"name": "ranker", "version": "1", "target_optimizer": {"agent_image": f"{AGENT.split('@')[0]}:latest"}},
            "models[0]",
        )


def test_the_agent_counts_when_the_task_must_fit_the_instance():
    from gpu_inference_constructs.core.instance_catalog import lookup

    g5 = lookup("g5.xlarge", "instance_type")
    fits = ModelProps(
        name="ranker", version="1", cpu=g5.task_cpu_limit_units - 512 - 100, memory_mib=3072
    )  # 128 too few
    fits.check_fits(g5, (0, 0))
    with pytest.raises(ConfigError, match=r"cpu.*does not fit"):
        replace(fits, target_optimizer=OPTIMIZER).check_fits(g5, (0, 0))


def test_ports_the_server_uses_and_a_cap_above_its_own_limit_are_refused():
    with pytest.raises(ConfigError, match=r"target_optimizer\.data_port") as raised:
        team_stack(optimizer=replace(OPTIMIZER, data_port=8000))  # Triton's HTTP port
    assert "choose another port" in str(raised.value)
    with pytest.raises(ConfigError, match=r"target_optimizer\.max_concurrency") as raised:
        team_stack(
            optimizer=replace(OPTIMIZER, max_concurrency=9),
            server=SglangServer(
                props=SglangProps(max_running_requests=8),
                image=ecs.ContainerImage.from_registry(f"{MIRROR}/sglang:v0.4"),
            ),
        )
    assert "at most 8" in str(raised.value)


def test_a_server_that_sheds_load_itself_is_allowed_with_a_warning_naming_the_key():
    _, stack, _ = team_stack(server=VllmServer(image=ecs.ContainerImage.from_registry(f"{MIRROR}/vllm-openai:v0.6.3")))
    messages = [
        str(entry.data)
        for construct in stack.node.find_all()
        for entry in construct.node.metadata
        if entry.type == "aws:cdk:warning"
    ]
    assert any("target_optimizer" in m and "sheds load itself" in m for m in messages), messages


def test_cfn_lint_knows_the_control_port_and_a_planted_wrong_one_is_found(tmp_path):
    app, stack, service = team_stack()
    good = tmp_path / "good.template.json"
    good.write_text(json.dumps(Template.from_stack(stack).to_json()))
    group = next(iter(target_groups(Template.from_stack(stack))))
    planted = Template.from_stack(stack).to_json()
    planted["Resources"][group]["Properties"]["TargetControlPort"] = "control"
    bad = tmp_path / "bad.template.json"
    bad.write_text(json.dumps(planted))
    linted = subprocess.run(
        [str(CFN_LINT), "--format", "parseable", "--", str(good), str(bad)], capture_output=True, text=True
    )
    findings = [line for line in linted.stdout.splitlines() if ":E" in line]
    assert findings and all(
        "bad.template.json" in line and ":E3012:" in line and "'control'" in line for line in findings
    ), linted.stdout
