"""What AWS decides when one part of a synthesized environment calls another: a small adapter around a real
IAM policy evaluator (principalmapper's local policy simulation, which evaluates identity policies, resource
policies and KMS key policies together, with conditions and explicit denies).

The adapter only gives the template's resources concrete names (each physical name is derived from its logical
ID) and hands the evaluator the policies that AWS would consult for a request:

- a service principal (``cloudwatch.amazonaws.com``) is allowed by the resource's policy or not at all;
- a role is evaluated with its identity policies and, where the resource has one, the resource policy
  (for KMS the key policy must allow it, as AWS requires);
- another account's principal (ELB log delivery) needs the resource policy; its own account is assumed to let it.
"""

from __future__ import annotations

import collections
import collections.abc
import copy
import hashlib
from dataclasses import dataclass
from typing import Any

# principalmapper 1.1.5 (the last release) still imports these from `collections`, which Python 3.10 removed.
for _name in ("Mapping", "MutableMapping"):
    if not hasattr(collections, _name):
        setattr(collections, _name, getattr(collections.abc, _name))

from principalmapper.common import Node, Policy  # noqa: E402
from principalmapper.querying.local_policy_simulation import ResourcePolicyEvalResult, resource_policy_authorization  # noqa: E402
from principalmapper.querying.query_interface import local_check_authorization_full  # noqa: E402

PARTITION = "aws"


@dataclass(frozen=True)
class Decision:
    allowed: bool
    why: str

    def __bool__(self) -> bool:
        return self.allowed


class TemplateWorld:
    """One environment's merged template, its resources given names and ARNs, its policies evaluated."""

    def __init__(self, template: dict, account: str, region: str) -> None:
        self.template = template
        self.resources: dict = template["Resources"]
        self.account = account
        self.region = region

    # --- names -------------------------------------------------------------------------------------------
    def of_type(self, kind: str) -> dict:
        return {k: r for k, r in self.resources.items() if r["Type"] == kind}

    def only(self, kind: str, prefix: str = "") -> str:
        (logical_id,) = [k for k in self.of_type(kind) if k.startswith(prefix)]
        return logical_id

    def ref(self, logical_id: str) -> str:
        kind = self.resources[logical_id]["Type"]
        properties = self.resources[logical_id].get("Properties", {})
        a, r = self.account, self.region
        if kind == "AWS::SNS::Topic":
            return f"arn:{PARTITION}:sns:{r}:{a}:{logical_id}"
        if kind == "AWS::SecretsManager::Secret":
            return f"arn:{PARTITION}:secretsmanager:{r}:{a}:secret:{logical_id}-AbCdEf"
        if kind == "AWS::KMS::Key":
            digest = hashlib.md5(logical_id.encode()).hexdigest()
            return f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"
        if kind == "AWS::S3::Bucket":
            return logical_id.lower()
        if kind == "AWS::CloudWatch::Alarm":
            return properties.get("AlarmName", logical_id)
        if kind == "AWS::Logs::LogGroup":
            return properties.get("LogGroupName", logical_id)
        return logical_id

    def arn(self, logical_id: str) -> str:
        kind = self.resources[logical_id]["Type"]
        name, a, r = self.ref(logical_id), self.account, self.region
        return {
            "AWS::IAM::Role": f"arn:{PARTITION}:iam::{a}:role/{name}",
            "AWS::S3::Bucket": f"arn:{PARTITION}:s3:::{name}",
            "AWS::KMS::Key": f"arn:{PARTITION}:kms:{r}:{a}:key/{name}",
            "AWS::ECS::Cluster": f"arn:{PARTITION}:ecs:{r}:{a}:cluster/{name}",
            "AWS::Logs::LogGroup": f"arn:{PARTITION}:logs:{r}:{a}:log-group:{name}:*",
            "AWS::CloudWatch::Alarm": f"arn:{PARTITION}:cloudwatch:{r}:{a}:alarm:{name}",
            "AWS::Events::Rule": f"arn:{PARTITION}:events:{r}:{a}:rule/{name}",
            "AWS::Lambda::Function": f"arn:{PARTITION}:lambda:{r}:{a}:function:{name}",
            "AWS::SNS::Topic": name,
            "AWS::SecretsManager::Secret": name,
        }.get(kind, f"arn:{PARTITION}:unknown:{r}:{a}:{kind}/{name}")

    def log_group_arn(self, logical_id: str) -> str:
        """The ARN CloudWatch Logs puts in the KMS encryption context (no trailing ``:*``)."""
        return self.arn(logical_id).removesuffix(":*")

    def resolve(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self.resolve(v) for v in value]
        if not isinstance(value, dict):
            return value
        if list(value) == ["Ref"]:
            target = value["Ref"]
            pseudo = {
                "AWS::Partition": PARTITION,
                "AWS::AccountId": self.account,
                "AWS::Region": self.region,
                "AWS::URLSuffix": "amazonaws.com",
            }
            if target in pseudo:
                return pseudo[target]
            return self.ref(target) if target in self.resources else f"<parameter {target}>"
        if list(value) == ["Fn::GetAtt"]:
            target, attribute = value["Fn::GetAtt"]
            if attribute == "Arn":
                return self.arn(target)
            return f"{self.ref(target)}.{attribute}"
        if list(value) == ["Fn::Join"]:
            separator, parts = value["Fn::Join"]
            return separator.join(str(self.resolve(p)) for p in parts)
        if list(value) == ["Fn::GetStackOutput"]:
            output = value["Fn::GetStackOutput"]
            return f"<{output['StackName']}:{output['OutputName']}>"
        return {k: self.resolve(v) for k, v in value.items()}

    # --- policies ----------------------------------------------------------------------------------------
    def document(self, policy: dict) -> dict:
        """A policy document with names filled in; ``"AWS": "*"`` written as the equivalent ``"*"``."""
        document = self.resolve(copy.deepcopy(policy))
        for statement in document["Statement"]:
            for key in ("Principal", "NotPrincipal"):
                if statement.get(key) == {"AWS": "*"}:
                    statement[key] = "*"
        return document

    def identity_policies(self, role_id: str) -> list[Policy]:
        policies = []
        for logical_id, resource in self.of_type("AWS::IAM::Policy").items():
            if {"Ref": role_id} in resource["Properties"].get("Roles", []):
                policies.append(
                    Policy(f"inline:{logical_id}", logical_id, self.document(resource["Properties"]["PolicyDocument"]))
                )
        for index, inline in enumerate(self.resources[role_id]["Properties"].get("Policies", [])):
            policies.append(
                Policy(f"inline:{role_id}:{index}", inline["PolicyName"], self.document(inline["PolicyDocument"]))
            )
        return policies

    def resource_policy(self, logical_id: str) -> dict | None:
        """The policy AWS consults for requests to ``logical_id``: its key policy, topic policy or bucket policy."""
        resource = self.resources[logical_id]
        if resource["Type"] == "AWS::KMS::Key":
            return self.document(resource["Properties"]["KeyPolicy"])
        if resource["Type"] == "AWS::Lambda::Function":
            return self.function_policy(logical_id)
        attachments = {
            "AWS::SNS::Topic": ("AWS::SNS::TopicPolicy", lambda p: {"Ref": logical_id} in p["Topics"]),
            "AWS::S3::Bucket": ("AWS::S3::BucketPolicy", lambda p: p["Bucket"] == {"Ref": logical_id}),
            "AWS::SecretsManager::Secret": (
                "AWS::SecretsManager::ResourcePolicy",
                lambda p: p["SecretId"] == {"Ref": logical_id},
            ),
        }
        if resource["Type"] not in attachments:
            return None
        kind, attached = attachments[resource["Type"]]
        documents = [
            self.document(
                p["Properties"]["PolicyDocument"]
                if "PolicyDocument" in p["Properties"]
                else p["Properties"]["ResourcePolicy"]
            )
            for p in self.of_type(kind).values()
            if attached(p["Properties"])
        ]
        if not documents:
            return None
        return {"Version": "2012-10-17", "Statement": [s for d in documents for s in d["Statement"]]}

    def function_policy(self, logical_id: str) -> dict | None:
        """The function's resource policy as Lambda builds it from each AWS::Lambda::Permission (AddPermission:
        ``SourceArn`` becomes an ``ArnLike`` on ``AWS:SourceArn``, ``SourceAccount`` a ``StringEquals``)."""
        statements = []
        for permission in self.of_type("AWS::Lambda::Permission").values():
            properties = permission["Properties"]
            if self.resolve(properties["FunctionName"]) != self.arn(logical_id):
                continue
            conditions: dict = {}
            if "SourceArn" in properties:
                conditions["ArnLike"] = {"AWS:SourceArn": self.resolve(properties["SourceArn"])}
            if "SourceAccount" in properties:
                conditions["StringEquals"] = {"AWS:SourceAccount": self.resolve(properties["SourceAccount"])}
            principal = properties["Principal"]
            statements.append(
                {
                    "Effect": "Allow",
                    "Action": properties["Action"],
                    "Resource": self.arn(logical_id),
                    "Principal": {"Service": principal} if principal.endswith(".amazonaws.com") else {"AWS": principal},
                    **({"Condition": conditions} if conditions else {}),
                }
            )
        return {"Version": "2012-10-17", "Statement": statements} if statements else None

    # --- decisions ---------------------------------------------------------------------------------------
    def service_may(self, service: str, action: str, resource_id: str, resource_arn: str, context: dict) -> Decision:
        """A service principal acting on a resource of this account: only the resource's own policy can allow it."""
        policy = self.resource_policy(resource_id)
        if policy is None:
            return Decision(False, f"{resource_id} has no resource policy, and a service principal needs one")
        result = resource_policy_authorization(service, self.account, policy, action, resource_arn, dict(context))
        return Decision(
            result is ResourcePolicyEvalResult.SERVICE_MATCH, f"{service} {action} {resource_arn}: {result.name}"
        )

    def role_may(
        self, role_id: str, action: str, resource_arn: str, context: dict, resource_id: str | None = None
    ) -> Decision:
        """The role's identity policies, and the resource's policy if ``resource_id`` has one, evaluated together."""
        return self.node_may(
            principal(self.arn(role_id), self.identity_policies(role_id)), action, resource_arn, context, resource_id
        )

    def node_may(
        self, node: Node, action: str, resource_arn: str, context: dict, resource_id: str | None = None
    ) -> Decision:
        """A principal of this account (a role the template does not hold, such as a service-linked role)."""
        policy = self.resource_policy(resource_id) if resource_id else None
        allowed = local_check_authorization_full(
            node, action, resource_arn, dict(context), policy, self.account if policy else None
        )
        return Decision(allowed, f"{node.arn} {action} {resource_arn}")

    def other_account_may(
        self, account: str, action: str, resource_id: str, resource_arn: str, context: dict
    ) -> Decision:
        """A principal of another account (ELB log delivery); its own account is assumed to allow it everything."""
        allow_all = Policy(
            "allow-all",
            "allow-all",
            {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]},
        )
        node = principal(f"arn:{PARTITION}:iam::{account}:role/delivery", [allow_all])
        allowed = local_check_authorization_full(
            node, action, resource_arn, dict(context), self.resource_policy(resource_id), self.account
        )
        return Decision(allowed, f"{account} {action} {resource_arn}")


def principal(arn: str, policies: list[Policy]) -> Node:
    """An IAM principal for the evaluator (a role, or an account's root); who may assume a role does not matter here."""
    trust = {"Version": "2012-10-17", "Statement": []} if ":role/" in arn else None
    return Node(
        arn,
        f"AROA{hashlib.md5(arn.encode()).hexdigest()[:16].upper()}",
        policies,
        [],
        trust,
        None,
        0,
        False,
        False,
        None,
        False,
        {},
    )
