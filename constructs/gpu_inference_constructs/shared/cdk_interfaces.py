"""aws-cdk-lib objects typed as the jsii interfaces they implement, for pyright.

aws-cdk-lib's Python stubs declare its interfaces (IPrincipal, IRole, IKey, ITopic, IAlarmAction,
ITopicSubscription) as Protocols, and several of its classes name a method's parameter differently from their
interface: ``ServicePrincipal.add_to_principal_policy(_statement)`` against ``IPrincipal``'s ``statement``,
``Role.grant_assume_role(identity)`` against ``IRole``'s ``grantee``, ``Key.add_alias(alias_name)`` against
``IKey``'s ``alias``, ``SnsAction.bind(_scope, _alarm)``, ``Function``'s and ``LambdaFunction``'s, and
``Secret``'s against ``ISecret``. So pyright refuses a ServicePrincipal where an
IPrincipal is wanted, though jsii declares that it implements it. Each function here says so with
``typing.cast`` and builds exactly what aws-cdk-lib would: nothing changes at runtime.
"""

from __future__ import annotations

from typing import cast

from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions


def service_principal(service: str) -> iam.IPrincipal:
    """``iam.ServicePrincipal(service)``."""
    return cast(iam.IPrincipal, iam.ServicePrincipal(service))


def as_role(value: iam.Role) -> iam.IRole:
    return cast(iam.IRole, value)


def as_key(value: kms.Key) -> kms.IKey:
    return cast(kms.IKey, value)


def as_topic(value: sns.Topic) -> sns.ITopic:
    return cast(sns.ITopic, value)


def as_secret(value: secretsmanager.Secret) -> secretsmanager.ISecret:
    return cast(secretsmanager.ISecret, value)


def sns_action(to: sns.ITopic) -> cloudwatch.IAlarmAction:
    """``aws_cloudwatch_actions.SnsAction(to)``."""
    return cast(cloudwatch.IAlarmAction, cloudwatch_actions.SnsAction(to))


def email_subscription(address: str) -> sns.ITopicSubscription:
    """``aws_sns_subscriptions.EmailSubscription(address)``."""
    return cast(sns.ITopicSubscription, subscriptions.EmailSubscription(address))


def as_function(value: lambda_.Function) -> lambda_.IFunction:
    return cast(lambda_.IFunction, value)


def lambda_target(function: lambda_.IFunction, **options) -> events.IRuleTarget:
    """``aws_events_targets.LambdaFunction(function, **options)`` as the ``IRuleTarget`` it is."""
    return cast(events.IRuleTarget, targets.LambdaFunction(function, **options))
