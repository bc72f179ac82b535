"""A target group's Application Load Balancer metrics, dimensioned by a load balancer name that is given, not parsed.

CDK's ``ApplicationTargetGroup.metrics`` derives the ``LoadBalancer`` dimension by ``Fn::Split``-ting the first
listener's ARN. When that listener is another stack's, the ARN is an ``Fn::GetStackOutput`` (weak cross-stack
references), and ``Fn::Split`` is not a position CloudFormation was confirmed to accept it in (cfn-lint E1022,
aws-cloudformation/cfn-lint#4495). The load balancer's full name (its ``LoadBalancerFullName`` attribute) is a plain
string the shared stack outputs as it is.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_elasticloadbalancingv2 as elbv2

NAMESPACE = "AWS/ApplicationELB"
MINUTE = cdk.Duration.minutes(1)


def load_balancer_name_from_listener_arn(listener_arn: str) -> str:
    """``app/<name>/<id>`` from ``arn:...:listener/app/<name>/<id>/<listener id>``: only for an ARN of this stack or
    a literal one; a cross-stack reference must be given its load balancer's full name instead."""
    parts = cdk.Fn.split("/", listener_arn)
    return cdk.Fn.join("/", [cdk.Fn.select(1, parts), cdk.Fn.select(2, parts), cdk.Fn.select(3, parts)])


def load_balancer_full_name(load_balancer: elbv2.IApplicationLoadBalancer) -> str:
    """``app/<name>/<id>`` of any IApplicationLoadBalancer: the dimension CDK's own metrics give it (the attribute for
    one of this app, parsed from the ARN for an imported one, which has no ``load_balancer_full_name``)."""
    dimensions = load_balancer.metrics.request_count().dimensions
    assert dimensions is not None  # CDK's load balancer metrics carry the LoadBalancer dimension
    return dimensions["LoadBalancer"]


class TargetGroupMetrics:
    """The metrics of ``target_group`` behind the load balancer ``load_balancer_full_name`` (``app/<name>/<id>``),
    with the method names and default statistics of CDK's ``IApplicationTargetGroupMetrics``."""

    def __init__(self, target_group: elbv2.ApplicationTargetGroup, load_balancer_full_name: str) -> None:
        self.target_group = target_group
        self.load_balancer_full_name = load_balancer_full_name
        # Read once: each read of a construct's attribute is a round trip to jsii's Node.js process.
        self._dimensions = {"LoadBalancer": load_balancer_full_name, "TargetGroup": target_group.target_group_full_name}

    def custom(
        self, metric_name: str, *, statistic: str = "Average", period: cdk.Duration = MINUTE, label: str | None = None
    ) -> cloudwatch.Metric:
        return cloudwatch.Metric(
            namespace=NAMESPACE,
            metric_name=metric_name,
            dimensions_map=self._dimensions,
            statistic=statistic,
            period=period,
            label=label,
        )

    def request_count(self, *, period: cdk.Duration = MINUTE, statistic: str = "Sum") -> cloudwatch.Metric:
        return self.custom("RequestCount", statistic=statistic, period=period)

    def target_response_time(self, *, statistic: str = "Average", period: cdk.Duration = MINUTE) -> cloudwatch.Metric:
        return self.custom("TargetResponseTime", statistic=statistic, period=period)

    def http_code_target(
        self, code: elbv2.HttpCodeTarget, *, period: cdk.Duration = MINUTE, statistic: str = "Sum"
    ) -> cloudwatch.Metric:
        # CloudWatch's name of the enum member: TARGET_5XX_COUNT -> HTTPCode_Target_5XX_Count.
        return self.custom(f"HTTPCode_Target_{code.name.split('_')[1]}_Count", statistic=statistic, period=period)

    def unhealthy_host_count(self, *, period: cdk.Duration = MINUTE, statistic: str = "Average") -> cloudwatch.Metric:
        return self.custom("UnHealthyHostCount", statistic=statistic, period=period)
