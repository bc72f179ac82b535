"""The SNS topic that alarms and fleet events notify: KMS-encrypted, TLS only.

A topic policy (CDK writes one for ``enforce_ssl``) replaces SNS's default policy, which is what lets the
account's own services publish; so each publishing service is allowed here by name. CloudWatch alarms
publish as ``cloudwatch.amazonaws.com``, EventBridge rules as ``events.amazonaws.com`` (CDK adds that
statement with each rule target). Both must also be able to use the key: SNS calls KMS with the publisher's
permissions. EC2 Auto Scaling's own notifications would publish through its service-linked role, which
no key policy can name before the role exists, so group events come through EventBridge
(GpuCapacity does that).
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

from .errors import require

PUBLISHING_SERVICES = ("cloudwatch.amazonaws.com", "events.amazonaws.com")


class NotificationTopic(Construct):
    """Attributes: ``topic``, ``key``. ``emails`` subscribe on creation (each must confirm)."""

    def __init__(self, scope: Construct, construct_id: str, *, emails: tuple[str, ...] = ()) -> None:
        super().__init__(scope, construct_id)
        for index, email in enumerate(emails):
            require("@" in email and " " not in email, f"alarm_emails[{index}]", f"{email!r} is not an email address")
        stack = cdk.Stack.of(self)
        self.key = kms.Key(self, "Key", description="Encrypts the alarm and fleet-event topic", enable_key_rotation=True)
        # No source conditions on the key: SNS, not the publisher, calls KMS, and does not pass them on.
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="PublishingServicesUseTheKey",
                principals=[iam.ServicePrincipal(service) for service in PUBLISHING_SERVICES],
                actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                resources=["*"],
            )
        )
        self.topic = sns.Topic(self, "Topic", master_key=self.key, enforce_ssl=True)
        self.topic.add_to_resource_policy(
            iam.PolicyStatement(
                sid="AlarmsOfThisAccountPublish",
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                actions=["sns:Publish"],
                resources=[self.topic.topic_arn],
                conditions={
                    "StringEquals": {"aws:SourceAccount": stack.account},
                    "ArnLike": {"aws:SourceArn": f"arn:{stack.partition}:cloudwatch:{stack.region}:{stack.account}:alarm:*"},
                },
            )
        )
        for email in emails:
            self.topic.add_subscription(subscriptions.EmailSubscription(email))
