"""A warm pool on a GPU group: stopped instances that booted once, joined no cluster and pulled the task images, so a
scale-out starts one instead of launching, booting and pulling a new one (docs/scaling-and-alarms.md, "A warm pool").

What AWS does, and how this module meets it (sources in docs/aws-facts.md, "Warm pools (issue 44)"):

- Auto Scaling stops an instance as soon as it has launched into the pool and does not wait for user data; cloud-init
  runs user data on the first boot only. So the group gets an ``EC2_INSTANCE_LAUNCHING`` hook: an instance warming into
  the pool waits at ``Warmed:Pending:Wait`` for the hook's heartbeat (``prepare_seconds``) while its user data pulls
  the images, then Auto Scaling stops it. The hook also pauses every launch into service (``Pending:Wait``), so a
  function completes those at once (:class:`WarmPoolLaunches`, warm_pool_handler.py).
- The ECS agent must not register while the instance warms: ``ECS_WARM_POOLS_CHECK=true`` makes it wait until the
  instance's target lifecycle state is ``InService`` (ECS developer guide, using-warm-pool; agent 1.59.0 or later);
  the user data itself never starts the agent while warming.
- ECS refuses ``ReuseOnScaleIn`` on a capacity provider's group; a scaled-in instance is terminated.
- A stopped instance costs its EBS volumes; Auto Scaling cannot stop a Spot instance it launched (one-time requests),
  so the pool's instances are On-Demand.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import aws_cdk as cdk
import jsii
from aws_cdk import aws_autoscaling as autoscaling
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from ..core.warm_pool_props import POOL_STATES as POOL_STATES
from ..core.warm_pool_props import WarmPoolProps as WarmPoolProps
from ..shared.acknowledgements import acknowledge, default_policy, nag_rendering
from ..shared.cdk_interfaces import as_function, lambda_target
from ..shared.environment import DEFAULT_LOG_RETENTION_DAYS
from ..shared.inline_function import inline_function

# The agent setting that keeps a warming instance out of the cluster (ECS developer guide, using-warm-pool).
WARM_POOLS_CHECK = "ECS_WARM_POOLS_CHECK=true"
# The launch hook's name: fixed (hook names are unique per group) so that the EventBridge rule can match it without a
# reference to the hook, which is created after the rule and its function.
HOOK_NAME = "gpu-inference-warm-pool-prepare"
LIFECYCLE_ACTION = "EC2 Instance-launch Lifecycle Action"
ECR_LOGIN_PATH = "/usr/local/libexec/gpu-inference/ecr_login.py"
# Read, not imported: the function's code (boto3 from Lambda's runtime, which the library does not depend on) and the
# instance's ECR login (standard library), both deployed as text.
HANDLER_SOURCE = Path(__file__).with_name("warm_pool_handler.py").read_text()
ECR_LOGIN_SOURCE = Path(__file__).with_name("warm_pool_ecr_login.py").read_text()
INTO_SERVICE = "AutoScalingGroup"  # warm_pool_handler.INTO_SERVICE: the Destination of a launch into service


def warm_pool_script(images: Sequence[str]) -> str:
    """The user data that follows the agent's settings on a group with a warm pool: on a launch into the pool (IMDS
    ``autoscaling/target-lifecycle-state`` is ``Warmed:*``) log in to each image's ECR registry with the instance role
    and pull every image once, never starting the ECS agent; on a launch into service start nothing but the agent.

    User data runs on the first boot only, so an instance started from the pool runs none of it: its agent (enabled by
    the AMI, configured above) registers at boot, and its tasks start from the cached images
    (ECS_IMAGE_PULL_BEHAVIOR=prefer-cached)."""
    words = " ".join(f"'{image}'" for image in images)
    return "\n".join(
        [
            (
                "# Warm pool (GpuCapacity): a launch into the pool pulls the task images, then Auto Scaling stops it; "
                "the agent"
            ),
            "# (ECS_WARM_POOLS_CHECK) registers only once the target lifecycle state is InService.",
            "imds=http://169.254.169.254/latest",
            'imds_token=$(curl -sf -X PUT "$imds/api/token" -H "X-aws-ec2-metadata-token-ttl-seconds: 900")',
            'target=""',
            "for attempt in $(seq 1 30); do",
            (
                '  target=$(curl -sf -H "X-aws-ec2-metadata-token: $imds_token" '
                '"$imds/meta-data/autoscaling/target-lifecycle-state")'
            ),
            '  [ -n "$target" ] && break',
            "  sleep 2",
            "done",
            'echo "warm pool: target lifecycle state ${target:-unknown}"',
            'case "$target" in',
            "  Warmed:*)",
            "    systemctl start docker.service",
            f"    mkdir -p {ECR_LOGIN_PATH.rsplit('/', 1)[0]}",
            f"    cat > {ECR_LOGIN_PATH} <<'GPU_INFERENCE_PY'",
            ECR_LOGIN_SOURCE.rstrip("\n"),
            "GPU_INFERENCE_PY",
            '    logged_in=" "',
            f"    for image in {words}; do",
            "      registry=${image%%/*}",
            '      case "$registry" in',
            "        *.dkr.ecr.*)",
            '          if [ "${logged_in#* $registry }" = "$logged_in" ]; then',
            '            region=$(echo "$registry" | cut -d. -f4)',
            (
                f'            python3 {ECR_LOGIN_PATH} "$region" '
                '| docker login --username AWS --password-stdin "$registry" \\'
            ),
            '              && logged_in="$logged_in$registry "',
            "          fi ;;",
            "      esac",
            '      docker pull "$image" || echo "warm pool: could not pull $image; its task will" >&2',
            "    done",
            "    ;;",
            "  *)",
            (
                "    # Queued behind cloud-final (ecs.service is After=cloud-final.service: "
                "a blocking start here would wait for"
            ),
            (
                "    # itself); the ECS-optimized AMI enables the agent anyway, an AMI of your own "
                "(machine_image_ids) may not."
            ),
            "    systemctl start --no-block ecs.service",
            "    ;;",
            "esac",
        ]
    )


class WarmPoolLaunches(Construct):
    """The group's launch hook and what completes it for launches into service: an EventBridge rule for the hook's
    "EC2 Instance-launch Lifecycle Action" events whose ``Destination`` is ``AutoScalingGroup`` and a small function
    (warm_pool_handler.py, boto3 of the Lambda runtime, no VPC) that calls CompleteLifecycleAction(CONTINUE) on the
    group only. A launch into the pool is left to the heartbeat (``prepare_seconds``), default result CONTINUE: a
    warming instance that is still pulling is stopped with the layers it has, and its first task pulls the rest.

    ``logs_key`` encrypts the function's log group. Attributes: ``hook``, ``rule``, ``function``, ``log_group``."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        group: autoscaling.AutoScalingGroup,
        props: WarmPoolProps,
        logs_key: kms.IKey | None = None,
        log_retention_days: int = DEFAULT_LOG_RETENTION_DAYS,
    ) -> None:
        super().__init__(scope, construct_id)
        made = inline_function(
            self,
            source=HANDLER_SOURCE,
            timeout_seconds=15,
            logs_key=logs_key,
            log_retention_days=log_retention_days,
            description="Completes the GPU group's launch hook for instances going into service (warm pool)",
            role_description="Completes the GPU group's launch hook for instances going into service",
            statements=[
                iam.PolicyStatement(
                    actions=["autoscaling:CompleteLifecycleAction"], resources=[group.auto_scaling_group_arn]
                )
            ],
            no_dead_letter_queue="A dead-letter queue would keep a lost launch event whose lifecycle action the hook's "
            "heartbeat completes anyway (default result CONTINUE)",
            not_in_vpc="Not in the VPC: the function calls the Auto Scaling API only, which the VPC has no endpoint "
            "for (no NAT); it reaches nothing else",
        )
        self.function, self.log_group, role = made.function, made.log_group, made.role
        acknowledge(
            default_policy(role),
            f"AwsSolutions-IAM5[Resource::{nag_rendering(self, group.auto_scaling_group_arn)}]",
            "The group's ARN has a '*' where its generated ID goes (Auto Scaling's ARN format, as aws-cdk-lib writes "
            "it); the group's name in the ARN limits the grant to this group.",
        )
        self.rule = events.Rule(
            self,
            "Rule",
            description="Launches of the GPU group going into service: complete the warm pool's launch hook at once",
            event_pattern=into_service_pattern(group),
            targets=[
                lambda_target(
                    as_function(self.function),
                    retry_attempts=2,
                    max_event_age=cdk.Duration.seconds(props.prepare_seconds),
                )
            ],
        )
        self.hook = group.add_lifecycle_hook(
            "WarmPoolPrepare",
            lifecycle_transition=autoscaling.LifecycleTransition.INSTANCE_LAUNCHING,
            lifecycle_hook_name=HOOK_NAME,
            heartbeat_timeout=cdk.Duration.seconds(props.prepare_seconds),
            default_result=autoscaling.DefaultResult.CONTINUE,
        )
        # The rule and its function first: a launch into service before them would wait the whole heartbeat.
        self.hook.node.add_dependency(self.rule)
        self.hook.node.add_dependency(self.function)


def into_service_pattern(group: autoscaling.IAutoScalingGroup) -> events.EventPattern:
    """The group's launch-hook events of instances going into service (EC2 Auto Scaling user guide, warm pool example
    events: ``Origin`` EC2 or WarmPool, ``Destination`` AutoScalingGroup or WarmPool)."""
    return events.EventPattern(
        source=["aws.autoscaling"],
        detail_type=[LIFECYCLE_ACTION],
        detail={
            "AutoScalingGroupName": [group.auto_scaling_group_name],
            "LifecycleHookName": [HOOK_NAME],
            "Destination": [INTO_SERVICE],
        },
    )


def add_warm_pool(
    scope: Construct,
    group: autoscaling.AutoScalingGroup,
    pool: WarmPoolProps,
    *,
    all_spot: bool,
    user_data: ec2.UserData,
    images: Callable[[], Sequence[str]],
    logs_key: kms.IKey | None,
    log_retention_days: int = DEFAULT_LOG_RETENTION_DAYS,
) -> tuple[autoscaling.WarmPool, WarmPoolLaunches]:
    """``group``'s pool, its launch hook and the function that completes launches into service
    (``WarmPoolLaunches``), and the user data that pulls ``images()`` (read at synth, once every model has added its
    own) while an instance warms. Warns on a group whose instances are all Spot (``all_spot``)."""
    if all_spot:
        cdk.Annotations.of(scope).add_warning_v2(
            "gpu-inference:warm-pool-all-spot",
            "warm_pool on a group whose instances are all Spot: Auto Scaling cannot stop a Spot instance it "
            "launched (one-time Spot requests), and whether it fills the pool with On-Demand instances on such a "
            "group is not documented in the sources found (docs/aws-facts.md, Issue 44); give the group an "
            "On-Demand share (on_demand_base_capacity) or check describe-warm-pool after the first deploy",
        )
    launches = WarmPoolLaunches(
        scope, "WarmPoolLaunches", group=group, props=pool, logs_key=logs_key, log_retention_days=log_retention_days
    )
    warm_pool = group.add_warm_pool(
        min_size=pool.min_size,
        max_group_prepared_capacity=pool.prepared_capacity,
        pool_state=autoscaling.PoolState.STOPPED if pool.pool_state == "Stopped" else autoscaling.PoolState.RUNNING,
    )
    # Instances launch into the pool only once the hook holds them while they pull.
    warm_pool.node.add_dependency(launches.hook)
    user_data.add_commands(cdk.Lazy.string(_WarmPoolScript(images)))
    return warm_pool, launches


@jsii.implements(cdk.IStableStringProducer)
class _WarmPoolScript:
    """The warm pool's user data, rendered at synth from the images known then (GpuCapacity.prepull)."""

    def __init__(self, images: Callable[[], Sequence[str]]) -> None:
        self._images = images

    def produce(self) -> str:
        return warm_pool_script(self._images())
