"""Issue 53: one Stage deployed (as CDK Pipelines deploys it) to two accounts and regions, with environment_name
"prod" in both, was refused: "model.name: 'encoder' is already the name of the model at ProdEu/...", though the two
share no path, log group or alarm. A model's names are claimed where they collide: its log group and alarm names in
one account and region, its path on one listener."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from constructs import Construct

from gpu_inference_constructs import (
    ConfigError,
    GpuCapacity,
    InferenceLoadBalancer,
    LoadBalancerProps,
    ModelBucket,
    ModelProps,
    ModelService,
    ServiceLogs,
)
from gpu_inference_constructs.service.checks import check_model_name_free, claim_model_name


class ServingStack(cdk.Stack):
    """The team's one stack: an imported VPC, GPU capacity, an internal load balancer and the encoder (or
    ``models``)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        environment_name: str = "prod",
        models: tuple[str, ...] = ("encoder",),
        **kwargs,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        account, region = self.account, self.region
        vpc = ec2.Vpc.from_vpc_attributes(
            self,
            "Vpc",
            vpc_id="vpc-0a1b2c3d4e5f67890",
            vpc_cidr_block="10.20.0.0/16",
            availability_zones=[f"{region}a", f"{region}b"],
            private_subnet_ids=["subnet-0bbbbbbbbbbbbbbb1", "subnet-0bbbbbbbbbbbbbbb2"],
        )
        bucket = s3.Bucket.from_bucket_name(self, "Models", f"encoder-models-{account}-{region}")
        topic = sns.Topic.from_topic_arn(self, "Pager", f"arn:aws:sns:{region}:{account}:pager")
        key = kms.Key.from_key_arn(
            self, "LogsKey", f"arn:aws:kms:{region}:{account}:key/11111111-2222-4333-8444-555555555555"
        )
        gpus = GpuCapacity(self, "Gpus", vpc=vpc, topic=topic)
        self.alb = InferenceLoadBalancer(
            self,
            "Alb",
            vpc=vpc,
            access_logs_bucket=bucket,
            props=LoadBalancerProps(internet_facing=False, allow_http=True, ingress_cidrs=("10.0.0.0/8",)),
        )
        for name in models:
            ModelService(
                self,
                name.title(),
                model=ModelProps(name=name, version="1"),
                capacity=gpus,
                model_source=ModelBucket(bucket),
                route=self.alb,
                logs=ServiceLogs(key),
                environment=environment_name,
            )


class ServingStage(cdk.Stage):
    def __init__(self, scope: Construct, construct_id: str, **kwargs) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.stack = ServingStack(self, "Serving")


def log_groups(stack: cdk.Stack) -> list[str]:
    template = cdk.Stage.of(stack).synth().get_stack_by_name(stack.stack_name).template  # type: ignore[union-attr]
    return [
        r["Properties"]["LogGroupName"] for r in template["Resources"].values() if r["Type"] == "AWS::Logs::LogGroup"
    ]


def test_one_stage_in_two_accounts_and_regions_takes_each_name_once_in_each():
    app = cdk.App()
    europe = ServingStage(app, "ProdEu", env=cdk.Environment(account="111111111111", region="eu-west-1"))
    america = ServingStage(app, "ProdUs", env=cdk.Environment(account="222222222222", region="us-east-1"))
    assert log_groups(europe.stack) == log_groups(america.stack) == ["/gpu-inference/prod/encoder"]


def test_one_stage_in_one_account_and_two_regions_takes_each_name_once_in_each():
    app = cdk.App()
    ServingStage(app, "ProdEu", env=cdk.Environment(account="111111111111", region="eu-west-1"))
    ServingStage(app, "ProdUs", env=cdk.Environment(account="111111111111", region="us-east-1"))


def test_the_same_stage_twice_in_one_account_and_region_is_refused_naming_the_names_taken():
    app = cdk.App()
    ServingStage(app, "ProdEu", env=cdk.Environment(account="111111111111", region="eu-west-1"))
    with pytest.raises(
        ConfigError,
        match=r"^model\.name: 'encoder' is already the name of the model at ProdEu/.* in "
        r"account 111111111111, region eu-west-1: its log group /gpu-inference/prod/"
        r"encoder and its alarms \(gpu-inference-prod-encoder-\.\.\.\) are taken there",
    ):
        ServingStage(app, "ProdEuAgain", env=cdk.Environment(account="111111111111", region="eu-west-1"))


def test_an_environment_agnostic_stack_may_land_where_another_is():
    """The check alone (an InferenceLoadBalancer needs a region for its access logs)."""
    app = cdk.App()
    placed = Construct(
        cdk.Stack(app, "Placed", env=cdk.Environment(account="111111111111", region="eu-west-1")), "Encoder"
    )
    anywhere = Construct(cdk.Stack(app, "Anywhere"), "Encoder")
    claim_model_name(placed, "gpu-inference", "prod", "encoder", "listener-a")
    with pytest.raises(ConfigError, match=r"^model\.name: .* in the account and region it is deployed to"):
        check_model_name_free(anywhere, "gpu-inference", "prod", "encoder", "listener-b")


def test_one_name_twice_on_one_listener_is_refused_naming_the_path():
    """Two environments behind one load balancer: different log groups, one path."""
    app = cdk.App()
    stack = ServingStack(app, "Shared", env=cdk.Environment(account="111111111111", region="eu-west-1"))
    with pytest.raises(
        ConfigError,
        match=r"^model\.name: 'encoder' is already the name of the model at Shared/Encoder "
        r"on this listener: its path /encoder/ is taken there",
    ):
        ModelService(
            stack,
            "StagingEncoder",
            model=ModelProps(name="encoder", version="1"),
            capacity=GpuCapacity(stack, "MoreGpus", vpc=stack.alb.load_balancer.vpc),  # type: ignore[arg-type]
            model_source=ModelBucket(s3.Bucket.from_bucket_name(stack, "Other", "other-models")),
            route=stack.alb,
            logs=ServiceLogs(
                kms.Key.from_key_arn(
                    stack, "OtherKey", "arn:aws:kms:eu-west-1:111111111111:key/11111111-2222-4333-8444-555555555555"
                )
            ),
            environment="staging",
        )
