"""A team's own VPC, imported without its CIDR: a clear message instead of a jsii crash."""

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2

from gpu_inference_constructs import ConfigError, InferenceLoadBalancer, LoadBalancerProps, ModelStore, ModelStoreProps


def test_an_imported_vpc_without_its_cidr_names_the_missing_attribute():
    stack = cdk.Stack(cdk.App(), "Team", env=cdk.Environment(account="123456789012", region="eu-west-1"))
    vpc = ec2.Vpc.from_vpc_attributes(
        stack,
        "Vpc",
        vpc_id="vpc-0a1b2c3d4e5f67890",
        availability_zones=["eu-west-1a", "eu-west-1b"],
        public_subnet_ids=["subnet-0aaaaaaaaaaaaaaa1", "subnet-0aaaaaaaaaaaaaaa2"],
    )
    store = ModelStore(stack, "Models", props=ModelStoreProps())
    balancer = InferenceLoadBalancer(
        stack,
        "Alb",
        vpc=vpc,
        props=LoadBalancerProps(allow_http=True, ingress_cidrs=("10.0.0.0/8",)),
        access_logs_bucket=store.access_logs_bucket,
    )
    with pytest.raises(ConfigError, match="vpc_cidr_block"):
        balancer.allow_to_targets_on(8080)
