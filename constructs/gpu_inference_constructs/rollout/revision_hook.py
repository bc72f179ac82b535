"""The lifecycle hook that fails a canary, linear or blue/green deployment whose new tasks never become healthy, before
any traffic moves: what AWS documents for it. ECS invokes a Lambda hook at the stages it is configured for; FAILED,
an error, or no answer within the hook's timeout rolls the deployment back (ECS developer guide,
deployment-lifecycle-hooks and lambda-lifecycle-hooks; ECS API DeploymentLifecycleHookTimeoutConfiguration, whose
default action is ROLLBACK). POST_SCALE_UP is the stage at which "the green service revision has started" and the
blue one still has all production traffic (ECS API DeploymentLifecycleHook).

Written with one property override: aws-cdk-lib 2.275's L2 ``DeploymentLifecycleLambdaTarget`` takes neither
``HookDetails`` nor ``TimeoutConfiguration``; the L1 and cfn-lint 1.58 know both (CloudFormation template reference,
AWS::ECS::Service DeploymentLifecycleHook and HookTimeoutConfig)."""

from __future__ import annotations

import math
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from ..shared.acknowledgements import acknowledge, default_child, default_policy, nag_rendering
from ..shared.cdk_interfaces import service_principal
from ..shared.inline_function import inline_function
from . import revision_hook_handler

HANDLER_SOURCE = Path(revision_hook_handler.__file__).read_text()
HOOK_STAGE = "POST_SCALE_UP"


def hook_timeout_minutes(start_window_seconds: int) -> int:
    """ECS's own bound on the hook: the start window in whole minutes, and one more for the function's last call
    (ROLLBACK when it passes, whatever the function answered)."""
    return math.ceil(start_window_seconds / 60) + 1


class RevisionHealthHook(Construct):
    """A POST_SCALE_UP Lambda hook on ``service``: SUCCEEDED once a task of the new revision is healthy in one of the
    service's target groups, FAILED (a rollback) when none is ``start_window_seconds`` after the stage began
    (revision_hook_handler.py). ``logs_key`` encrypts the function's log group (default: CloudWatch Logs' own), kept
    ``log_retention_days`` (default 90).

    Least privilege: ECS assumes ``invoke_role``, which may invoke this function only; the function's role only reads:
    services and tasks of this account and region, the task list of this cluster, target health
    (elasticloadbalancing:DescribeTargetHealth takes no resource).

    Attributes: ``function``, ``role`` (the function's), ``invoke_role``, ``start_window_seconds``,
    ``timeout_minutes``."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        model_name: str,
        service: ecs.Ec2Service,
        cluster: ecs.ICluster,
        start_window_seconds: int,
        logs_key: kms.IKey | None = None,
        log_retention_days: int = 90,
    ) -> None:
        super().__init__(scope, construct_id)
        self.start_window_seconds = start_window_seconds
        self.timeout_minutes = hook_timeout_minutes(start_window_seconds)
        stack = cdk.Stack.of(self)
        # This account's and region's services and tasks: the service names the function, so the function's policy may
        # not name the service back (a circular dependency), and the cluster's name is another stack's output, which
        # cdk-nag cannot read at synth.
        services, tasks = (
            stack.format_arn(service="ecs", resource=kind, resource_name="*") for kind in ("service", "task")
        )
        # From the name the model stack already reads, not another output of the cluster's stack.
        cluster_arn = stack.format_arn(service="ecs", resource="cluster", resource_name=cluster.cluster_name)
        made = inline_function(
            self,
            source=HANDLER_SOURCE,
            timeout_seconds=60,
            logs_key=logs_key,
            log_retention_days=log_retention_days,
            description=f"{model_name}: rolls back a deployment whose new tasks never become healthy "
            f"(ECS hook, {HOOK_STAGE})",
            role_description=f"{model_name}'s deployment hook: "
            "reads ECS services and tasks and their target health, nothing else",
            no_dead_letter_queue="ECS invokes the hook synchronously and reads its answer; an invocation that fails "
            "rolls the deployment back, so there is no event to keep",
            not_in_vpc="Not in the VPC: it calls only the ECS and Elastic Load Balancing APIs, from Lambda's network",
            statements=[
                iam.PolicyStatement(actions=["ecs:DescribeServices"], resources=[services]),
                iam.PolicyStatement(
                    actions=["ecs:ListTasks"], resources=["*"], conditions={"ArnEquals": {"ecs:cluster": cluster_arn}}
                ),
                iam.PolicyStatement(actions=["ecs:DescribeTasks"], resources=[tasks]),
                iam.PolicyStatement(actions=["elasticloadbalancing:DescribeTargetHealth"], resources=["*"]),
            ],
        )
        self.function, self.role = made.function, made.role
        acknowledge(
            default_policy(self.role),
            "AwsSolutions-IAM5[Resource::*]",
            "elasticloadbalancing:DescribeTargetHealth supports no resource-level permissions; ecs:ListTasks "
            "is conditioned on this service's cluster (ecs:cluster).",
        )
        for arn in (services, tasks):
            acknowledge(
                default_policy(self.role),
                f"AwsSolutions-IAM5[Resource::{nag_rendering(self, arn)}]",
                "Read only (DescribeServices, DescribeTasks) in this account and region: the service names this "
                "function, so its policy cannot name the service back, and task IDs are not known in advance.",
            )
        self.invoke_role = iam.Role(
            self,
            "InvokeRole",
            assumed_by=service_principal("ecs.amazonaws.com"),
            description=f"ECS invokes {model_name}'s never-healthy deployment hook, and nothing else",
        )
        self.invoke_role.add_to_policy(
            iam.PolicyStatement(actions=["lambda:InvokeFunction"], resources=[self.function.function_arn])
        )
        default_child(service, ecs.CfnService).add_property_override(
            "DeploymentConfiguration.LifecycleHooks",
            [
                {
                    "HookTargetArn": self.function.function_arn,
                    "RoleArn": self.invoke_role.role_arn,
                    "LifecycleStages": [HOOK_STAGE],
                    "HookDetails": {"startWindowSeconds": start_window_seconds},
                    "TimeoutConfiguration": {"Action": "ROLLBACK", "TimeoutInMinutes": self.timeout_minutes},
                }
            ],
        )
        # Its policy in place before a deployment calls the hook (the service resource only, not its scaling).
        default_child(service, ecs.CfnService).node.add_dependency(self.invoke_role)
