"""The library composed in one stack of another team's, as constructs/README.md shows: what holds without our stacks."""

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_kms as kms
from aws_cdk.assertions import Template

from gpu_inference_constructs import (
    BundledServer,
    ClusterCapacity,
    EcrImage,
    GpuCapacity,
    GpuCapacityProps,
    InferenceLoadBalancer,
    InferenceNetwork,
    LoadBalancerProps,
    ModelProps,
    ModelService,
    ModelStore,
    ModelStoreProps,
    NetworkProps,
    ServiceAccess,
    ServiceLogs,
    ServiceTimingProps,
    TelemetryProps,
)
from gpu_inference_constructs.shared.cdk_interfaces import as_key

BUCKET_POLICY_FLAG = "@aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy"


@pytest.fixture(scope="module")
def template() -> Template:
    # No context at all, so none of the flags a `cdk init` app sets: the library must not need them (ModelStore
    # grants S3 log delivery by bucket policy itself, whatever the flags say).
    app = cdk.App()
    assert not cdk.FeatureFlags.of(app).is_enabled(BUCKET_POLICY_FLAG)
    stack = cdk.Stack(app, "TheirStack", env=cdk.Environment(account="123456789012", region="eu-west-1"))
    network = InferenceNetwork(stack, "Net", props=NetworkProps(availability_zones=("eu-west-1a", "eu-west-1b")))
    gpus = GpuCapacity(stack, "Gpus", vpc=network.vpc, props=GpuCapacityProps(max_capacity=8))
    store = ModelStore(stack, "Models", props=ModelStoreProps())
    alb = InferenceLoadBalancer(
        stack,
        "Alb",
        vpc=network.vpc,
        access_logs_bucket=store.access_logs_bucket,
        props=LoadBalancerProps(allow_http=True, ingress_cidrs=("10.0.0.0/8",)),
    )
    for name in ("embedder", "classifier"):
        ModelService(
            stack,
            name.capitalize(),
            model=ModelProps(name=name, version="v3"),
            timing=ServiceTimingProps(),
            capacity=ClusterCapacity(gpus.cluster, gpus.capacity_provider.capacity_provider_name, "g5.xlarge"),
            access=ServiceAccess(subnets=network.private_subnets),
            # the network has no NAT: every image from their ECR
            server=BundledServer(
                image=ecs.ContainerImage.from_registry("123456789012.dkr.ecr.eu-west-1.amazonaws.com/their-server:1")
            ),
            model_source=store,
            route=alb,
            environment="prod",
            logs=ServiceLogs(
                as_key(kms.Key(stack, f"{name}Logs")),
                retention_days=30,
                telemetry=TelemetryProps(
                    collector_image=EcrImage(repository="mirror/cloudwatch-agent", tag="1.300059.0b1207")
                ),
            ),
        )
    return Template.from_stack(stack)


def test_each_service_waits_for_the_capacity_provider_association(template):
    """Created after the cluster's capacity-provider association, deleted before it (aws/aws-cdk#15366)."""
    (association,) = template.find_resources("AWS::ECS::ClusterCapacityProviderAssociations")
    services = template.find_resources("AWS::ECS::Service")
    assert len(services) == 2
    for service in services.values():
        assert association in service["DependsOn"]


def test_access_logging_works_without_the_bucket_policy_flag(template):
    """Without @aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy aws-cdk-lib would grant S3 log delivery by an ACL
    (LogDeliveryWrite), which a bucket with BucketOwnerEnforced ownership refuses at deploy. ModelStore writes the
    logging configuration and a bucket-policy grant itself: no bucket has an ACL, and log delivery is allowed for
    the model bucket's logs from this account only."""
    buckets = template.find_resources("AWS::S3::Bucket")
    assert len(buckets) == 2
    for bucket in buckets.values():
        assert "AccessControl" not in bucket["Properties"]
        assert bucket["Properties"]["OwnershipControls"] == {"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]}
    (models,) = [k for k, b in buckets.items() if "LoggingConfiguration" in b["Properties"]]
    logging = buckets[models]["Properties"]["LoggingConfiguration"]
    target = logging["DestinationBucketName"]["Ref"]
    (policy,) = [
        p
        for p in template.find_resources("AWS::S3::BucketPolicy").values()
        if p["Properties"]["Bucket"] == {"Ref": target}
    ]
    (grant,) = [
        s
        for s in policy["Properties"]["PolicyDocument"]["Statement"]
        if s.get("Principal") == {"Service": "logging.s3.amazonaws.com"}
    ]
    assert grant["Effect"] == "Allow" and grant["Action"] == "s3:PutObject"
    assert grant["Condition"]["ArnLike"]["aws:SourceArn"] == {"Fn::GetAtt": [models, "Arn"]}
    assert grant["Condition"]["StringEquals"]["aws:SourceAccount"] == "123456789012"
