"""The SNS topic that alarms and fleet events notify: KMS-encrypted, TLS only."""

from __future__ import annotations

from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

from .errors import require

PUBLISHING_SERVICES = ("cloudwatch.amazonaws.com", "events.amazonaws.com", "autoscaling.amazonaws.com")


class NotificationTopic(Construct):
    """Attributes: ``topic``, ``key``. ``emails`` subscribe on creation (each must confirm)."""

    def __init__(self, scope: Construct, construct_id: str, *, emails: tuple[str, ...] = ()) -> None:
        super().__init__(scope, construct_id)
        for index, email in enumerate(emails):
            require("@" in email and " " not in email, f"alarm_emails[{index}]", f"{email!r} is not an email address")
        self.key = kms.Key(self, "Key", description="Encrypts the alarm and fleet-event topic", enable_key_rotation=True)
        for service in PUBLISHING_SERVICES:
            self.key.grant(iam.ServicePrincipal(service), "kms:Decrypt", "kms:GenerateDataKey*")
        self.topic = sns.Topic(self, "Topic", master_key=self.key, enforce_ssl=True)
        for email in emails:
            self.topic.add_subscription(subscriptions.EmailSubscription(email))
