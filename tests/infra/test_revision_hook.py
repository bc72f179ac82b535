"""Issue 52.3: a canary, linear or blue/green version that never becomes healthy is failed by what AWS documents for
it, a Lambda lifecycle hook at POST_SCALE_UP (FAILED, an error, or no answer by the hook's timeout rolls the deployment
back; ECS developer guide, lambda-lifecycle-hooks; ECS API DeploymentLifecycleHookTimeoutConfiguration). The hook's
code runs here against stand-ins for the ECS and Elastic Load Balancing clients, as ECS calls it (again after each
callBackDelay, with the hookDetails it returned); the template test checks what ECS is told and may do."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest
from botocore.exceptions import ClientError

from gpu_inference_constructs.rollout import revision_hook_handler
from gpu_inference_constructs.rollout.revision_hook import HOOK_STAGE, hook_timeout_minutes
from gpu_inference_constructs.shared.acknowledgements import default_child
from tests.infra.conftest import ENVIRONMENTS

SERVICE = "arn:aws:ecs:us-west-2:333333333333:service/inference/minilm-service"
OLD, NEW = (
    "arn:aws:ecs:us-west-2:333333333333:task-definition/minilm:7",
    "arn:aws:ecs:us-west-2:333333333333:task-definition/minilm:8",
)
BLUE, GREEN = (
    "arn:aws:elasticloadbalancing:us-west-2:333333333333:targetgroup/blue/1",
    "arn:aws:elasticloadbalancing:us-west-2:333333333333:targetgroup/green/2",
)


@dataclass
class Deployment:
    """What the two clients answer: the old set healthy in BLUE, the new set's tasks (IP -> target state) in GREEN."""

    new_tasks: dict[str, str] = field(default_factory=dict)
    old_tasks: dict[str, str] = field(default_factory=lambda: {"10.0.0.1": "healthy"})
    throttled: bool = False
    calls: list[str] = field(default_factory=list)

    def describe_services(self, cluster, services):
        assert (cluster, services) == ("inference", ["minilm-service"])
        self.calls.append("ecs:DescribeServices")
        if self.throttled:
            raise ClientError(
                {"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}, "DescribeServices"
            )
        return {
            "services": [
                {
                    "taskDefinition": NEW,
                    "deployments": [
                        {"status": "PRIMARY", "taskDefinition": NEW},
                        {"status": "ACTIVE", "taskDefinition": OLD},
                    ],
                    "loadBalancers": [
                        {"targetGroupArn": BLUE, "advancedConfiguration": {"alternateTargetGroupArn": GREEN}}
                    ],
                }
            ]
        }

    def describe_target_health(self, TargetGroupArn):  # noqa: N803 - boto3's keyword
        self.calls.append("elasticloadbalancing:DescribeTargetHealth")
        targets = self.old_tasks if TargetGroupArn == BLUE else self.new_tasks
        return {
            "TargetHealthDescriptions": [
                {"Target": {"Id": ip, "Port": 8080}, "TargetHealth": {"State": state}} for ip, state in targets.items()
            ]
        }

    def list_tasks(self, cluster, serviceName, desiredStatus, nextToken=None):  # noqa: N803 - boto3's keywords
        self.calls.append("ecs:ListTasks")
        arns = [f"task/{ip}" for ip in [*self.old_tasks, *self.new_tasks]]
        if nextToken is None:  # two pages, as ListTasks pages its answer
            return {"taskArns": arns[:1], "nextToken": "page-2"}
        return {"taskArns": arns[1:]}

    def describe_tasks(self, cluster, tasks):
        self.calls.append("ecs:DescribeTasks")
        return {
            "tasks": [
                {
                    "taskArn": arn,
                    "taskDefinitionArn": NEW if arn[5:] in self.new_tasks else OLD,
                    "attachments": [
                        {
                            "type": "ElasticNetworkInterface",
                            "details": [
                                {"name": "subnetId", "value": "subnet-1"},
                                {"name": "privateIPv4Address", "value": arn[5:]},
                            ],
                        }
                    ],
                }
                for arn in tasks
            ]
        }


def invoke(deployment: Deployment, now: float, details: dict) -> dict:
    event = {"serviceArn": SERVICE, "targetServiceRevisionArn": f"{SERVICE}/8", "hookDetails": details}
    return revision_hook_handler.handler(event, None, ecs=deployment, elbv2=deployment, now=now)


def run_as_ecs(deployment: Deployment, window: int, becomes_healthy_at: float | None) -> tuple[str, float]:
    """ECS's loop: invoke, and while IN_PROGRESS invoke again callBackDelay later with the hookDetails returned (the
    service's own on the first call). The new task's target turns healthy at ``becomes_healthy_at``."""
    now, details = 0.0, {"startWindowSeconds": window}
    while True:
        if becomes_healthy_at is not None and now >= becomes_healthy_at:
            deployment.new_tasks = {"10.0.0.2": "healthy"}
        answer = invoke(deployment, now, details)
        if answer["hookStatus"] != "IN_PROGRESS":
            return answer["hookStatus"], now
        assert 1 <= answer["callBackDelay"] <= revision_hook_handler.RETRY_SECONDS
        now, details = now + answer["callBackDelay"], {**details, **answer["hookDetails"]}


def test_a_healthy_new_task_lets_the_deployment_go_on():
    assert (
        invoke(Deployment(new_tasks={"10.0.0.2": "healthy"}), 0, {"startWindowSeconds": 600})["hookStatus"]
        == "SUCCEEDED"
    )


def test_a_new_task_still_starting_is_asked_about_again():
    answer = invoke(Deployment(new_tasks={"10.0.0.2": "initial"}), 100, {"startWindowSeconds": 600})
    assert answer["hookStatus"] == "IN_PROGRESS" and answer["callBackDelay"] == 30
    assert answer["hookDetails"] == {"startWindowSeconds": 600, "startedAt": 100}


@pytest.mark.parametrize("new_tasks", [{}, {"10.0.0.2": "unhealthy"}, {"10.0.0.2": "initial"}])
def test_a_version_never_healthy_fails_when_its_window_ends(new_tasks):
    """No new task at all (its files are missing: the server exits at start), one failing readiness, one still
    loading."""
    status, at = run_as_ecs(Deployment(new_tasks=new_tasks), window=600, becomes_healthy_at=None)
    assert status == "FAILED" and 600 <= at <= 600 + revision_hook_handler.RETRY_SECONDS


def test_a_version_healthy_a_second_before_the_window_ends_goes_on():
    status, at = run_as_ecs(Deployment(), window=600, becomes_healthy_at=599)
    assert status == "SUCCEEDED" and at <= 600  # seen at the next call: a healthy task outranks the deadline


def test_the_old_sets_healthy_targets_are_not_the_new_versions():
    assert (
        invoke(
            Deployment(old_tasks={"10.0.0.1": "healthy", "10.0.0.3": "healthy"}),
            700,
            {"startWindowSeconds": 600, "startedAt": 0},
        )["hookStatus"]
        == "FAILED"
    )


def test_one_healthy_task_is_enough_whatever_the_desired_count():
    """Scaling may raise the desired count mid-deployment: the hook asks whether the version can serve, not how many
    of its tasks have capacity yet."""
    deployment = Deployment(new_tasks={"10.0.0.2": "healthy", "10.0.0.4": "initial", "10.0.0.5": "initial"})
    assert invoke(deployment, 0, {"startWindowSeconds": 600})["hookStatus"] == "SUCCEEDED"


def test_a_throttled_call_is_no_verdict_until_the_window_ends():
    assert invoke(Deployment(throttled=True), 10, {"startWindowSeconds": 600})["hookStatus"] == "IN_PROGRESS"
    assert (
        invoke(Deployment(throttled=True), 610, {"startWindowSeconds": 600, "startedAt": 0})["hookStatus"] == "FAILED"
    )


def test_hook_details_as_a_json_string_are_read():
    """CloudFormation's HookDetails may be 'a JSON object as a string' (AWS::ECS::Service DeploymentLifecycleHook)."""
    answer = invoke(Deployment(), 0, json.dumps({"startWindowSeconds": 600}))  # type: ignore[arg-type]
    assert answer["hookStatus"] == "IN_PROGRESS"


@pytest.fixture(scope="module")
def hooked(synthesized):
    """(environment, model, its service's properties, its template's resources, its never-healthy window)."""
    found = []
    for environment in ENVIRONMENTS:
        stage = synthesized.stages[environment]
        resources = synthesized.inference_template(environment)["Resources"]
        for model in stage.config.models:
            stack = stage.model_stacks[model.name]
            service = stack.service
            properties = resources[stack.get_logical_id(default_child(service.service))]["Properties"]
            if not model.deployment.shifts_traffic:
                assert (
                    "LifecycleHooks" not in properties["DeploymentConfiguration"]
                    and service.revision_health_hook is None
                )
                continue
            found.append((environment, model, properties, resources, service.never_healthy_alarm.start_window_seconds))
    assert {environment for environment, *_ in found} >= {"staging", "prod"}
    return found


def test_every_traffic_shifting_model_fails_a_never_healthy_version_at_post_scale_up(hooked):
    for environment, model, properties, resources, window in hooked:
        (hook,) = properties["DeploymentConfiguration"]["LifecycleHooks"]
        assert hook["LifecycleStages"] == [HOOK_STAGE] == ["POST_SCALE_UP"], (environment, model.name)
        assert hook["HookDetails"] == {"startWindowSeconds": window}
        # ECS's own bound: past it the deployment rolls back whatever the function does; the function answers first.
        assert hook["TimeoutConfiguration"] == {"Action": "ROLLBACK", "TimeoutInMinutes": hook_timeout_minutes(window)}
        assert window + revision_hook_handler.RETRY_SECONDS <= hook["TimeoutConfiguration"]["TimeoutInMinutes"] * 60
        function = resources[hook["HookTargetArn"]["Fn::GetAtt"][0]]
        assert function["Type"] == "AWS::Lambda::Function"
        assert function["Properties"]["Code"]["ZipFile"] == revision_hook_handler_source()


def revision_hook_handler_source() -> str:
    from gpu_inference_constructs.rollout.revision_hook import HANDLER_SOURCE

    return HANDLER_SOURCE


def statements_of(resources: dict, role_id: str) -> list[dict]:
    return [
        statement
        for resource in resources.values()
        if resource["Type"] == "AWS::IAM::Policy" and {"Ref": role_id} in resource["Properties"]["Roles"]
        for statement in resource["Properties"]["PolicyDocument"]["Statement"]
    ]


def test_ecs_may_invoke_the_hook_and_the_hook_may_only_read(hooked):
    for environment, model, properties, resources, _ in hooked:
        (hook,) = properties["DeploymentConfiguration"]["LifecycleHooks"]
        invoke_role_id = hook["RoleArn"]["Fn::GetAtt"][0]
        trust = resources[invoke_role_id]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
        assert [s["Principal"] for s in trust] == [{"Service": "ecs.amazonaws.com"}], (environment, model.name)
        (invoke_grant,) = statements_of(resources, invoke_role_id)
        assert invoke_grant["Action"] == "lambda:InvokeFunction"
        assert invoke_grant["Resource"] == {"Fn::GetAtt": [hook["HookTargetArn"]["Fn::GetAtt"][0], "Arn"]}
        function = resources[hook["HookTargetArn"]["Fn::GetAtt"][0]]["Properties"]
        actions = set()
        for statement in statements_of(resources, function["Role"]["Fn::GetAtt"][0]):
            actions |= {statement["Action"]} if isinstance(statement["Action"], str) else set(statement["Action"])
        assert actions == {
            "logs:CreateLogStream",
            "logs:PutLogEvents",
            "ecs:DescribeServices",
            "ecs:ListTasks",
            "ecs:DescribeTasks",
            "elasticloadbalancing:DescribeTargetHealth",
        }, (environment, model.name)
        assert all(action.split(":")[1].startswith(("Describe", "List", "Create", "Put")) for action in actions)
        # Every call the hook makes is granted.
        deployment = Deployment(new_tasks={"10.0.0.2": "healthy"})
        invoke(deployment, 0, {"startWindowSeconds": 600})
        assert set(deployment.calls) <= actions


def test_the_service_waits_for_ecss_grant_before_any_deployment_calls_the_hook(synthesized):
    stage = synthesized.stages["staging"]
    model = next(m for m in stage.config.models if m.deployment.shifts_traffic)
    stack = stage.model_stacks[model.name]
    service = stack.service
    template = synthesized.inference_template("staging")
    properties = template["Resources"][stack.get_logical_id(default_child(service.service))]
    invoke_policy = stack.get_logical_id(
        default_child(service.revision_health_hook.invoke_role.node.find_child("DefaultPolicy"))
    )
    assert invoke_policy in properties.get("DependsOn", [])
