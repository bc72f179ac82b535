"""The library composed in one stack of another team's, as the README shows: what holds without our stacks."""

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_kms as kms
from aws_cdk.assertions import Template

from gpu_inference_constructs import (
    GpuCapacity, GpuCapacityProps, InferenceLoadBalancer, InferenceNetwork, LoadBalancerProps,
    ModelProps, ModelService, ModelStore, ModelStoreProps, NetworkProps, ServiceTimingProps,
)


@pytest.fixture(scope="module")
def template() -> Template:
    # A `cdk init` app's flag; without it CDK gives the access-log bucket an ACL that object ownership forbids.
    app = cdk.App(context={"@aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy": True})
    stack = cdk.Stack(app, "TheirStack", env=cdk.Environment(account="123456789012", region="eu-west-1"))
    network = InferenceNetwork(stack, "Net", props=NetworkProps(availability_zones=("eu-west-1a", "eu-west-1b")))
    gpus = GpuCapacity(stack, "Gpus", vpc=network.vpc, props=GpuCapacityProps(max_capacity=8))
    store = ModelStore(stack, "Models", props=ModelStoreProps())
    alb = InferenceLoadBalancer(stack, "Alb", vpc=network.vpc, access_logs_bucket=store.access_logs_bucket,
                                props=LoadBalancerProps(allow_http=True))
    for name in ("embedder", "classifier"):
        ModelService(stack, name.capitalize(), model=ModelProps(name=name, version="v3"), timing=ServiceTimingProps(),
                     cluster=gpus.cluster, capacity_provider_name=gpus.capacity_provider.capacity_provider_name, instance_type="g5.xlarge",
                     subnets=network.private_subnets, image=ecs.ContainerImage.from_registry("example.com/their-server:1"),
                     model_store=store, load_balancer=alb, logs_key=kms.Key(stack, f"{name}Logs"), log_retention_days=30,
                     environment_name="prod")
    return Template.from_stack(stack)


def test_each_service_waits_for_the_capacity_provider_association(template):
    """Created after the cluster's capacity-provider association, deleted before it (aws/aws-cdk#15366)."""
    (association,) = template.find_resources("AWS::ECS::ClusterCapacityProviderAssociations")
    services = template.find_resources("AWS::ECS::Service")
    assert len(services) == 2
    for service in services.values():
        assert association in service["DependsOn"]
