"""Issue 53's silent mistakes, each written as the team wrote it (a plain ``cdk.App()``, from the docs alone): each
now fails with a ConfigError naming the key and the fix, or warns naming the fix.

(a) public images in subnets with no route out; (b) ``ScalingProps(capacity_prewarm=...)`` given to ServiceScaling;
(c) a FireLens archive to a bucket imported by name; (d) an imported cluster's capacity provider; (e) an ECR URI as
``EcrImage.repository``."""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Match, Template

from gpu_inference_constructs import (
    CapacityPrewarm,
    ClusterCapacity,
    ConfigError,
    EcrImage,
    FireLensProps,
    GpuCapacity,
    GpuCapacityProps,
    InferenceLoadBalancer,
    InferenceNetwork,
    LoadBalancerProps,
    LogArchive,
    ModelBucket,
    ModelProps,
    ModelService,
    NetworkProps,
    NeuronCapacity,
    NeuronServer,
    ScalingProps,
    ServiceLogs,
    ServiceScaling,
    TelemetryProps,
)

ACCOUNT = "123456789012"
REGION = "eu-west-1"
MIRROR = TelemetryProps(collector_image=EcrImage(repository="mirror/aws-otel-collector", tag="v0.49.0"))
SERVER = ecs.ContainerImage.from_registry(f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/search/server:1.4")


def team_stack(name: str) -> cdk.Stack:
    app = cdk.App()
    return cdk.Stack(app, name, env=cdk.Environment(account=ACCOUNT, region=REGION))


def imported_vpc(
    stack: cdk.Stack, private_subnet_ids: list[str] | None = None, isolated_subnet_ids: list[str] | None = None
) -> ec2.IVpc:
    return ec2.Vpc.from_vpc_attributes(
        stack,
        "Vpc",
        vpc_id="vpc-0a1b2c3d4e5f67890",
        vpc_cidr_block="10.20.0.0/16",
        availability_zones=["eu-west-1a", "eu-west-1b"],
        private_subnet_ids=private_subnet_ids,
        isolated_subnet_ids=isolated_subnet_ids,
    )


def model_service(
    stack: cdk.Stack,
    vpc: ec2.IVpc,
    capacity=None,
    telemetry: TelemetryProps | None = None,
    archive_bucket: s3.IBucket | None = None,
    server=None,
    model: ModelProps | None = None,
) -> ModelService:
    """One model as the team wrote it: their bucket, an internal load balancer, our server from their ECR."""
    from gpu_inference_constructs import BundledServer

    bucket = s3.Bucket.from_bucket_name(stack, "Models", f"search-models-{ACCOUNT}")
    capacity = capacity or GpuCapacity(stack, "Gpus", vpc=vpc, props=GpuCapacityProps(instance_types=("g5.xlarge",)))
    alb = InferenceLoadBalancer(
        stack,
        "Alb",
        vpc=vpc,
        access_logs_bucket=bucket,
        props=LoadBalancerProps(internet_facing=False, allow_http=True, ingress_cidrs=("10.0.0.0/8",)),
    )
    key = kms.Key.from_key_arn(
        stack, "LogsKey", f"arn:aws:kms:{REGION}:{ACCOUNT}:key/11111111-2222-4333-8444-555555555555"
    )
    return ModelService(
        stack,
        "Embedder",
        model=model or ModelProps(name="embedder", version="v3"),
        server=server or BundledServer(image=SERVER),
        capacity=capacity,
        model_source=ModelBucket(bucket),
        route=alb,
        logs=ServiceLogs(key, telemetry=telemetry or TelemetryProps(), archive_bucket=archive_bucket),
        environment="search",
    )


def warnings_of(stack: cdk.Stack, warning_id: str) -> list[str]:
    return [
        str(entry.data)
        for c in stack.node.find_all()
        for entry in c.node.metadata
        if entry.type == "aws:cdk:warning" and warning_id in str(entry.data)
    ]


# (a) ---------------------------------------------------------------------------------------------------------------


def test_the_public_collector_in_the_librarys_network_without_nat_is_refused_naming_its_mirror_key():
    stack = team_stack("NoNat")
    network = InferenceNetwork(stack, "Net", props=NetworkProps(availability_zone_ids=("euw1-az1", "euw1-az2")))
    with pytest.raises(ConfigError) as raised:
        model_service(stack, network.vpc)
    assert raised.value.key == "TelemetryProps.collector_image"
    assert "public.ecr.aws/aws-observability/aws-otel-collector" in str(
        raised.value
    ) and "no route to the internet" in str(raised.value)
    assert "nat_gateways" in str(raised.value)


def test_firelens_and_the_collector_from_ecr_public_in_an_imported_vpcs_isolated_subnets_are_both_named():
    stack = team_stack("Isolated")
    vpc = imported_vpc(stack, isolated_subnet_ids=["subnet-0ccccccccccccccc1", "subnet-0ccccccccccccccc2"])
    with pytest.raises(ConfigError) as raised:
        model_service(stack, vpc, telemetry=TelemetryProps(firelens=FireLensProps()))
    assert set(raised.value.key.split(", ")) == {"TelemetryProps.collector_image", "FireLensProps.image"}
    assert "subnet-0ccccccccccccccc1" in str(raised.value) and "aws-for-fluent-bit" in str(raised.value)


def test_the_neuron_dlc_from_ecr_public_names_neuron_server_props_image():
    stack = team_stack("Neuron")
    network = InferenceNetwork(stack, "Net", props=NetworkProps(availability_zone_ids=("euw1-az1", "euw1-az2")))
    inferentia = NeuronCapacity(stack, "Inferentia", vpc=network.vpc)
    with pytest.raises(ConfigError) as raised:
        model_service(
            stack,
            network.vpc,
            capacity=inferentia,
            telemetry=MIRROR,
            server=NeuronServer(),
            model=ModelProps(name="encoder", version="v1", cpu=2048, memory_mib=8192),
        )
    assert "the server's image" in raised.value.key and "NeuronServerProps(image=" in str(raised.value)
    assert "fetcher_image" in raised.value.key


def test_the_neuron_dlc_from_ecr_public_behind_a_nat_gateway_pulls_without_a_warning():
    """Issue 56: NeuronServer warned of its public images (gpu-inference:neuron-public-image) whatever the network,
    NAT or not; the one egress check, which reads the instances' routes, covers its images as every other."""
    stack = team_stack("NeuronNat")
    network = InferenceNetwork(
        stack, "Net", props=NetworkProps(availability_zone_ids=("euw1-az1", "euw1-az2"), nat_gateways=1)
    )
    inferentia = NeuronCapacity(stack, "Inferentia", vpc=network.vpc)
    service = model_service(
        stack,
        network.vpc,
        capacity=inferentia,
        server=NeuronServer(),
        model=ModelProps(name="encoder", version="v1", cpu=2048, memory_mib=8192),
    )
    assert service.contract.image is not None
    assert warnings_of(stack, "public-image") == []


def test_mirrors_or_a_nat_gateway_let_the_task_pull():
    mirrored = team_stack("Mirrored")
    network = InferenceNetwork(mirrored, "Net", props=NetworkProps(availability_zone_ids=("euw1-az1", "euw1-az2")))
    model_service(mirrored, network.vpc, telemetry=MIRROR)
    nat = team_stack("Nat")
    network = InferenceNetwork(
        nat, "Net", props=NetworkProps(availability_zone_ids=("euw1-az1", "euw1-az2"), nat_gateways=1)
    )
    model_service(nat, network.vpc)
    assert not warnings_of(mirrored, "public-image") and not warnings_of(nat, "public-image")


def test_imported_private_subnets_whose_routes_synth_cannot_see_warn_naming_the_mirror_key():
    stack = team_stack("Imported")
    model_service(
        stack, imported_vpc(stack, private_subnet_ids=["subnet-0bbbbbbbbbbbbbbb1", "subnet-0bbbbbbbbbbbbbbb2"])
    )
    (warning,) = warnings_of(stack, "gpu-inference:public-image-egress-unknown")
    assert "TelemetryProps.collector_image" in warning and "NAT gateway" in warning


def test_public_images_on_a_capacity_provider_of_the_teams_own_warn_that_its_subnets_are_unseen():
    stack = team_stack("OwnProvider")
    vpc = imported_vpc(stack, private_subnet_ids=["subnet-0bbbbbbbbbbbbbbb1", "subnet-0bbbbbbbbbbbbbbb2"])
    cluster = ecs.Cluster.from_cluster_attributes(stack, "Cluster", cluster_name="ml-platform", vpc=vpc)
    model_service(stack, vpc, capacity=ClusterCapacity(cluster, "ml-platform-gpu", "g5.xlarge"))
    (warning,) = warnings_of(stack, "gpu-inference:public-image-egress-unknown")
    assert "your own capacity provider" in warning and "TelemetryProps.collector_image" in warning


# (b) ---------------------------------------------------------------------------------------------------------------

MORNING = CapacityPrewarm(name="morning", cron="0 7 * * MON-FRI", min_capacity=2)


def test_capacity_prewarm_given_to_service_scaling_raises_the_groups_minimum_once():
    stack = team_stack("Prewarm")
    vpc = imported_vpc(stack, private_subnet_ids=["subnet-0bbbbbbbbbbbbbbb1", "subnet-0bbbbbbbbbbbbbbb2"])
    service = model_service(stack, vpc, telemetry=MIRROR)
    ServiceScaling(stack, "Scaling", service=service, scaling=ScalingProps(capacity_prewarm=(MORNING,)))
    assert service.capacity_group is not None
    service.capacity_group.add_prewarm(MORNING)  # the team's own call as well: still one action
    actions = Template.from_stack(stack).find_resources("AWS::AutoScaling::ScheduledAction")
    assert [a["Properties"]["MinSize"] for a in actions.values()] == [2]
    (action,) = actions.values()
    assert action["Properties"]["Recurrence"] == "0 7 * * MON-FRI" and "DesiredCapacity" not in action["Properties"]


def test_capacity_prewarm_for_a_model_on_a_capacity_provider_of_the_teams_own_is_refused():
    stack = team_stack("PrewarmCluster")
    vpc = imported_vpc(stack, private_subnet_ids=["subnet-0bbbbbbbbbbbbbbb1", "subnet-0bbbbbbbbbbbbbbb2"])
    cluster = ecs.Cluster.from_cluster_attributes(stack, "Cluster", cluster_name="ml-platform", vpc=vpc)
    service = model_service(
        stack, vpc, capacity=ClusterCapacity(cluster, "ml-platform-gpu", "g5.xlarge"), telemetry=MIRROR
    )
    with pytest.raises(ConfigError, match=r"^scaling\.capacity_prewarm: .*ClusterCapacity.*scale_on_schedule"):
        ServiceScaling(stack, "Scaling", service=service, scaling=ScalingProps(capacity_prewarm=(MORNING,)))


# (c) ---------------------------------------------------------------------------------------------------------------

ARCHIVE = TelemetryProps(
    collector_image=MIRROR.collector_image,
    firelens=FireLensProps(image=EcrImage(repository="mirror/aws-for-fluent-bit", tag="2.34.0"), archive=LogArchive()),
)


def test_an_archive_bucket_imported_by_name_warns_naming_from_bucket_attributes_with_its_key():
    stack = team_stack("ArchiveByName")
    vpc = imported_vpc(stack, private_subnet_ids=["subnet-0bbbbbbbbbbbbbbb1", "subnet-0bbbbbbbbbbbbbbb2"])
    bucket = s3.Bucket.from_bucket_name(stack, "Archive", "search-log-archive")
    model_service(stack, vpc, telemetry=ARCHIVE, archive_bucket=bucket)
    (warning,) = warnings_of(stack, "gpu-inference:archive-bucket-encryption")
    assert "ServiceLogs.archive_bucket" in warning and "from_bucket_attributes(..., encryption_key=" in warning
    assert "kms:GenerateDataKey" in warning


def test_an_archive_bucket_imported_with_its_key_grants_generate_data_key_through_s3_only():
    stack = team_stack("ArchiveWithKey")
    vpc = imported_vpc(stack, private_subnet_ids=["subnet-0bbbbbbbbbbbbbbb1", "subnet-0bbbbbbbbbbbbbbb2"])
    key_arn = f"arn:aws:kms:{REGION}:{ACCOUNT}:key/22222222-3333-4444-8555-666666666666"
    bucket = s3.Bucket.from_bucket_attributes(
        stack,
        "Archive",
        bucket_name="search-log-archive",
        encryption_key=kms.Key.from_key_arn(stack, "ArchiveKey", key_arn),
    )
    service = model_service(stack, vpc, telemetry=ARCHIVE, archive_bucket=bucket)
    assert not warnings_of(stack, "archive-bucket-encryption")
    Template.from_stack(stack).has_resource_properties(
        "AWS::IAM::Policy",
        {
            "Roles": [{"Ref": stack.get_logical_id(service.task_role.node.default_child)}],  # pyright: ignore[reportArgumentType]
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        {
                            "Action": "kms:GenerateDataKey",
                            "Effect": "Allow",
                            "Resource": key_arn,
                            "Condition": {"StringEquals": {"kms:ViaService": f"s3.{REGION}.amazonaws.com"}},
                        }
                    ]
                )
            },
        },
    )


# (d) ---------------------------------------------------------------------------------------------------------------


def test_a_capacity_provider_of_the_teams_own_warns_what_it_must_run_and_how_to_check():
    stack = team_stack("ClusterProvider")
    vpc = imported_vpc(stack, private_subnet_ids=["subnet-0bbbbbbbbbbbbbbb1", "subnet-0bbbbbbbbbbbbbbb2"])
    cluster = ecs.Cluster.from_cluster_attributes(stack, "Cluster", cluster_name="ml-platform", vpc=vpc)
    model_service(stack, vpc, capacity=ClusterCapacity(cluster, "ml-platform-default", "g5.xlarge"), telemetry=MIRROR)
    (warning,) = warnings_of(stack, "gpu-inference:cluster-capacity-ami")
    assert (
        "'ml-platform-default'" in warning
        and "ECS-optimized GPU AMI" in warning
        and "ECS_ENABLE_GPU_SUPPORT" in warning
    )
    assert "describe-container-instances" in warning and "registeredResources[?name==`GPU`]" in warning
    # a rolling deployment's breaker does not count a task never placed: the warning names the strategy that rolls back
    assert "SERVICE_TASK_PLACEMENT_FAILURE" in warning and "strategy='canary'" in warning


# (e) ---------------------------------------------------------------------------------------------------------------


def test_an_ecr_uri_as_the_repository_names_the_registry_once():
    stack = team_stack("EcrUri")
    vpc = imported_vpc(stack, private_subnet_ids=["subnet-0bbbbbbbbbbbbbbb1", "subnet-0bbbbbbbbbbbbbbb2"])
    uri = f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/mirror/cloudwatch-agent"
    model_service(stack, vpc, telemetry=TelemetryProps(collector_image=EcrImage(repository=uri, tag="1.300059.0b1207")))
    (task,) = Template.from_stack(stack).find_resources("AWS::ECS::TaskDefinition").values()
    (collector,) = [c for c in task["Properties"]["ContainerDefinitions"] if c["Name"] == "metrics-collector"]
    image = json.dumps(collector["Image"])
    assert image.count(f"{ACCOUNT}.dkr.ecr.{REGION}.") == 1 and "/mirror/cloudwatch-agent:1.300059.0b1207" in image
    assert not warnings_of(stack, "public-image")  # the region's ECR: no route out needed


@pytest.mark.parametrize(
    "repository",
    ["public.ecr.aws/cloudwatch-agent/cloudwatch-agent", "docker.io/vllm/vllm-openai", "ghcr.io/team/server"],
)
def test_a_registry_other_than_ecr_private_is_refused_naming_the_mirror(repository):
    with pytest.raises(ConfigError, match=r"^repository: .*not in an ECR private registry.*pull-through cache"):
        EcrImage(repository=repository, tag="v1")
