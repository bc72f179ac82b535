"""Where a GPU group's launches and terminations, failed ones too, go: the team's topic or one of the capacity's own,
through an EventBridge rule."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_autoscaling as autoscaling
from aws_cdk import aws_events as events
from aws_cdk import aws_sns as sns
from constructs import Construct

from ..shared.acknowledgements import acknowledge, default_child
from ..shared.cdk_interfaces import as_topic
from ..shared.notifications import NotificationTopic, topic_target

GROUP_EVENT_TYPES = (
    "EC2 Instance Launch Successful",
    "EC2 Instance Launch Unsuccessful",
    "EC2 Instance Terminate Successful",
    "EC2 Instance Terminate Unsuccessful",
)


def group_event_topic(scope: Construct, topic: sns.ITopic | None) -> tuple[NotificationTopic | None, sns.ITopic]:
    """``topic``, or (None given) a NotificationTopic of ``scope``'s own (``Notifications``) with a synth
    warning that names the key: launch failures must reach someone (cdk-nag AS3 refuses a group that tells no one).
    Returns the own topic (None when given one) and the topic in use."""
    if topic is not None:
        return None, topic
    own = NotificationTopic(scope, "Notifications")
    cdk.Annotations.of(scope).add_warning_v2(
        "gpu-inference:capacity-own-topic",
        f"{scope.node.path} has no topic: its launches and terminations, failed ones too, go to a "
        f"topic of its own ({type(scope).__name__}.own_notifications.topic) that nobody subscribes to yet. Pass "
        "topic= (your alarm topic), or subscribe to that one.",
    )
    return own, as_topic(own.topic)


def notify_group_events(
    scope: Construct, group: autoscaling.AutoScalingGroup, topic: sns.ITopic, kind: str = "GPU"
) -> events.Rule:
    """Launches and terminations of ``group``, failed ones too, to ``topic`` through EventBridge (``GroupEvents``).

    Not the group's own notification configuration: EC2 Auto Scaling publishes those with its service-linked
    role, which an encrypted topic's key policy would have to name, and cannot before the role exists.
    """
    acknowledge(
        default_child(group),
        "AwsSolutions-AS3",
        "Launch and termination events, failed ones included, reach the alarm topic through EventBridge (rule "
        "GroupEvents): the group's own notifications would publish with a service-linked role that the topic's key "
        "policy cannot name. Proven by tests/infra/test_runtime_interactions.py.",
    )
    return events.Rule(
        scope,
        "GroupEvents",
        description=f"Launches and terminations (successful or not) of the {kind} Auto Scaling group",
        event_pattern=events.EventPattern(
            source=["aws.autoscaling"],
            detail_type=list(GROUP_EVENT_TYPES),
            detail={"AutoScalingGroupName": [group.auto_scaling_group_name]},
        ),
        targets=[topic_target(topic)],
    )
