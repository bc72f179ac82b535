"""The SNS topic that alarms and fleet events notify: KMS-encrypted, TLS only, and only this account's alarms
and EventBridge rules may publish to it.

A topic policy (CDK writes one for ``enforce_ssl``) replaces SNS's default policy, which is what lets the
account's own services publish; so each publishing service is allowed here by name, and only on behalf of
this account: CloudWatch alarms publish as ``cloudwatch.amazonaws.com`` (``aws:SourceAccount`` this account,
``aws:SourceArn`` an alarm of this account in this region), EventBridge rules as ``events.amazonaws.com``
(``aws:SourceAccount`` this account, ``aws:SourceArn`` a rule of this account in this region). Rules send to
the topic through :func:`topic_target`, not aws-cdk-lib's ``SnsTopic`` target, which grants
``events.amazonaws.com`` publishing and key use with no condition at all (so any account's rule could publish).

Both services must also be able to use the key: SNS calls KMS on the publisher's behalf, with the topic's
ARN as encryption context (``kms:EncryptionContext:aws:sns:topicArn``). The key policy allows each service
only for this account's topics in this region; CloudWatch additionally only for this account's alarms.
EventBridge gets no ``aws:SourceAccount`` / ``aws:SourceArn`` condition on the key: SNS's developer guide
("Key management", compatibility with AWS services) says adding them to a KMS policy is not supported for
EventBridge-to-encrypted-topic delivery; the topic policy carries them instead. The topic's exact ARN cannot be
named in the key policy (the topic names the key, so the key cannot name the topic), hence the pattern.

EC2 Auto Scaling's own notifications would publish through its service-linked role, which no key policy can
name before the role exists, so group events come through EventBridge (GpuCapacity does that).
"""

from __future__ import annotations

from typing import cast

import aws_cdk as cdk
import jsii
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk.interfaces import aws_events as events_interfaces
from constructs import Construct, IConstruct

from ..core.errors import require
from .cdk_interfaces import as_key, as_topic, email_subscription, service_principal

TOPIC_ARN_CONTEXT = "kms:EncryptionContext:aws:sns:topicArn"
KEY_ACTIONS = ["kms:Decrypt", "kms:GenerateDataKey*"]
RULES_MAY_PUBLISH = "RulesOfThisAccountMayPublish"


def _this_accounts_topics(scope: IConstruct) -> str:
    stack = cdk.Stack.of(scope)
    return f"arn:{stack.partition}:sns:{stack.region}:{stack.account}:*"


def _from_this_account(scope: IConstruct, service: str, source_arn_tail: str) -> dict:
    """Conditions: the request comes from ``service`` acting for this account, for a source whose ARN (in this
    region) ends in ``source_arn_tail``."""
    stack = cdk.Stack.of(scope)
    return {
        "StringEquals": {"aws:SourceAccount": stack.account},
        "ArnLike": {
            "aws:SourceArn": f"arn:{stack.partition}:{service}:{stack.region}:{stack.account}:{source_arn_tail}"
        },
    }


def _publish_statement(sid: str, principal: str, topic: sns.ITopic, conditions: dict) -> iam.PolicyStatement:
    return iam.PolicyStatement(
        sid=sid,
        principals=[service_principal(principal)],
        actions=["sns:Publish"],
        resources=[topic.topic_arn],
        conditions=conditions,
    )


def alarms_publish_statement(scope: IConstruct, topic: sns.ITopic) -> iam.PolicyStatement:
    """Topic policy: this account's CloudWatch alarms (in this region) may publish to ``topic``."""
    return _publish_statement(
        "AlarmsOfThisAccountPublish",
        "cloudwatch.amazonaws.com",
        topic,
        _from_this_account(scope, "cloudwatch", "alarm:*"),
    )


def rules_publish_statement(scope: IConstruct, topic: sns.ITopic) -> iam.PolicyStatement:
    """Topic policy: this account's EventBridge rules (in this region, any event bus) may publish to ``topic``."""
    return _publish_statement(
        "RulesOfThisAccountPublish", "events.amazonaws.com", topic, _from_this_account(scope, "events", "rule/*")
    )


def alarms_use_key_statement(scope: IConstruct) -> iam.PolicyStatement:
    """Key policy: CloudWatch may use the key for this account's alarms publishing to this account's topics."""
    return iam.PolicyStatement(
        sid="AlarmsOfThisAccountUseTheKey",
        principals=[service_principal("cloudwatch.amazonaws.com")],
        actions=KEY_ACTIONS,
        resources=["*"],
        conditions={
            **_from_this_account(scope, "cloudwatch", "alarm:*"),
            "StringLike": {TOPIC_ARN_CONTEXT: _this_accounts_topics(scope)},
        },
    )


def rules_use_key_statement(scope: IConstruct) -> iam.PolicyStatement:
    """Key policy: EventBridge may use the key for messages to this account's topics (SNS passes no source
    account or ARN to KMS for EventBridge; the topic policy checks those)."""
    return iam.PolicyStatement(
        sid="RulesPublishingToThisAccountsTopicsUseTheKey",
        principals=[service_principal("events.amazonaws.com")],
        actions=KEY_ACTIONS,
        resources=["*"],
        conditions={"StringLike": {TOPIC_ARN_CONTEXT: _this_accounts_topics(scope)}},
    )


@jsii.implements(events.IRuleTarget)
class _TopicTarget:
    def __init__(self, topic: sns.ITopic) -> None:
        self._topic = topic

    def bind(self, rule: events_interfaces.IRuleRef, id: str | None = None) -> events.RuleTargetConfig:  # noqa: A002 (jsii's name)
        allow_rules_to_publish(self._topic)
        return events.RuleTargetConfig(arn=self._topic.topic_arn, target_resource=self._topic)


def topic_target(topic: sns.ITopic) -> events.IRuleTarget:
    """An EventBridge rule target that publishes to ``topic``, allowed for this account's rules only.

    Use it instead of ``aws_events_targets.SnsTopic``, whose grant has no condition. On a topic defined in this
    app it adds :func:`rules_publish_statement` to the topic policy and, if the topic is encrypted,
    :func:`rules_use_key_statement` to its key's policy (both once, however many rules); an imported topic's
    policies are its owner's to write, as with aws-cdk-lib's target."""
    return _TopicTarget(topic)


def allow_rules_to_publish(topic: sns.ITopic) -> None:
    """Once per topic, however many rules target it (a child construct of the topic records that it is done)."""
    if topic.node.try_find_child(RULES_MAY_PUBLISH) is not None:
        return
    Construct(cast(Construct, topic), RULES_MAY_PUBLISH)  # an ITopic is a construct; its stub says IConstruct only
    topic.add_to_resource_policy(rules_publish_statement(topic, topic))
    if topic.master_key is not None:
        topic.master_key.add_to_resource_policy(rules_use_key_statement(topic))


class NotificationTopic(Construct):
    """Attributes: ``topic``, ``key``. ``emails`` (default none) subscribe on creation (each must confirm).
    This account's CloudWatch alarms and EventBridge rules, in this region, may publish; nothing else. The rules'
    statements come with the first rule that targets the topic through :func:`topic_target`."""

    def __init__(self, scope: Construct, construct_id: str, *, emails: tuple[str, ...] = ()) -> None:
        super().__init__(scope, construct_id)
        for index, email in enumerate(emails):
            require("@" in email and " " not in email, f"alarm_emails[{index}]", f"{email!r} is not an email address")
        self.key = kms.Key(
            self, "Key", description="Encrypts the alarm and fleet-event topic", enable_key_rotation=True
        )
        self.key.add_to_resource_policy(alarms_use_key_statement(self))
        self.topic = sns.Topic(self, "Topic", master_key=as_key(self.key), enforce_ssl=True)
        self.topic.add_to_resource_policy(alarms_publish_statement(self, as_topic(self.topic)))
        for email in emails:
            self.topic.add_subscription(email_subscription(email))
