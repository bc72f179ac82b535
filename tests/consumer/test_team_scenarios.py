"""Three teams' own apps, written from the library's page: a bare ``cdk.App()`` (no context, no feature flags) in
eu-west-1, an imported VPC without isolated subnets, cdk-nag's AwsSolutions checks, no workaround.

(a) Triton on g6.xlarge falling back to g5.xlarge, with the team's own bucket and topic;
(b) vLLM serving Llama-3.1-8B on one g6e.xlarge behind the team's existing ALB listener, with the library's dashboard;
(c) the bundled server for an embedding model on the team's existing ECS cluster.
"""

from __future__ import annotations

from typing import cast

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_elasticloadbalancingv2 as elbv2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from cdk_nag import AwsSolutionsChecks

from gpu_inference_constructs import (
    BundledServer,
    ConfigError,
    EcrImage,
    GpuCapacity,
    GpuCapacityProps,
    InferenceLoadBalancer,
    InferenceMonitoring,
    ListenerRoute,
    LoadBalancerProps,
    ModelAlarms,
    ModelBucket,
    ModelProps,
    ModelService,
    MonitoringProps,
    ServiceLogs,
    ServiceScaling,
    TritonProps,
    TritonServer,
    VllmProps,
    VllmServer,
)

ACCOUNT = "123456789012"
ALB_ARN = f"arn:aws:elasticloadbalancing:eu-west-1:{ACCOUNT}:loadbalancer/app/platform/0123456789abcdef"
LISTENER_ARN = (
    f"arn:aws:elasticloadbalancing:eu-west-1:{ACCOUNT}:listener/app/platform/0123456789abcdef/0123456789abcdef"
)


def team_stack(name: str) -> tuple[cdk.App, cdk.Stack, ec2.IVpc]:
    app = cdk.App()
    stack = cdk.Stack(app, name, env=cdk.Environment(account=ACCOUNT, region="eu-west-1"))
    vpc = ec2.Vpc.from_vpc_attributes(
        stack,
        "Vpc",
        vpc_id="vpc-0a1b2c3d4e5f67890",
        vpc_cidr_block="10.20.0.0/16",
        availability_zones=["eu-west-1a", "eu-west-1b"],
        private_subnet_ids=["subnet-0bbbbbbbbbbbbbbb1", "subnet-0bbbbbbbbbbbbbbb2"],
    )
    return app, stack, vpc


def logs_key(stack: cdk.Stack) -> kms.IKey:
    return kms.Key.from_key_arn(
        stack, "LogsKey", f"arn:aws:kms:eu-west-1:{ACCOUNT}:key/11111111-2222-4333-8444-555555555555"
    )


def synth_clean(app: cdk.App, stack: cdk.Stack) -> dict:
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return app.synth().get_stack_by_name(stack.stack_name).template


def resources(template: dict, kind: str) -> dict:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == kind}


def triton_app():
    app, stack, vpc = team_stack("Triton")
    bucket = s3.Bucket.from_bucket_name(stack, "Artifacts", f"vision-artifacts-{ACCOUNT}")
    topic = sns.Topic.from_topic_arn(stack, "Pager", f"arn:aws:sns:eu-west-1:{ACCOUNT}:vision-pager")
    gpus = GpuCapacity(
        stack,
        "Gpus",
        vpc=vpc,
        topic=topic,
        props=GpuCapacityProps(instance_types=("g6.xlarge", "g5.xlarge"), max_capacity=8),
    )
    alb = InferenceLoadBalancer(
        stack,
        "Alb",
        vpc=vpc,
        access_logs_bucket=bucket,
        props=LoadBalancerProps(internet_facing=False, allow_http=True, ingress_cidrs=("10.0.0.0/8",)),
        subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
    )
    detector = ModelService(
        stack,
        "Detector",
        model=ModelProps(name="detector", version="2026-12-01", cpu=3072, memory_mib=12288),
        server=TritonServer(TritonProps(image=EcrImage(repository="vision/tritonserver", tag="25.10-py3"))),
        capacity=gpus,
        model_source=ModelBucket(bucket),
        route=alb,
        environment="prod",
        logs=ServiceLogs(logs_key(stack), name_prefix="vision-team"),
    )
    ServiceScaling(stack, "DetectorScaling", service=detector)
    ModelAlarms(
        stack, "DetectorAlarms", environment_name="prod", service=detector, topic=topic, props=MonitoringProps()
    )
    return app, stack


def vllm_app():
    app, stack, vpc = team_stack("Chat")
    bucket = s3.Bucket.from_bucket_name(stack, "Weights", f"chat-weights-{ACCOUNT}")
    topic = sns.Topic.from_topic_arn(stack, "Pager", f"arn:aws:sns:eu-west-1:{ACCOUNT}:chat-pager")
    alb_sg = ec2.SecurityGroup.from_security_group_id(stack, "AlbSecurityGroup", "sg-0123456789abcdef0")
    load_balancer = elbv2.ApplicationLoadBalancer.from_application_load_balancer_attributes(
        stack, "Platform", load_balancer_arn=ALB_ARN, security_group_id="sg-0123456789abcdef0", vpc=vpc
    )
    listener = elbv2.ApplicationListener.from_application_listener_attributes(
        stack, "Listener", listener_arn=LISTENER_ARN, security_group=alb_sg
    )
    gpus = GpuCapacity(
        stack, "Gpus", vpc=vpc, topic=topic, props=GpuCapacityProps(instance_types=("g6e.xlarge",), max_capacity=2)
    )  # one serving, one for a deployment
    llama = ModelService(
        stack,
        "Llama",
        model=ModelProps(
            name="llama-31-8b",
            version="2026-12-01",
            cpu=3072,
            memory_mib=24576,
            min_tasks=1,
            max_tasks=1,
            expected_load_seconds=600,
        ),
        server=VllmServer(
            VllmProps(
                image=EcrImage(repository="mirror/vllm-openai", tag="v0.32.0"),
                served_model_name="llama-3.1-8b-instruct",
                max_model_len=8192,
            )
        ),
        capacity=gpus,
        model_source=ModelBucket(bucket),
        route=ListenerRoute(listener, 310, load_balancer=load_balancer),
        logs=ServiceLogs(logs_key(stack)),
        environment="chat",
    )
    ServiceScaling(stack, "LlamaScaling", service=llama)
    monitoring = InferenceMonitoring(
        stack,
        "Monitoring",
        environment_name="chat",
        model_names=["llama-31-8b"],
        load_balancer=load_balancer,
        capacity=gpus,
        topic=topic,
        props=MonitoringProps(),
    )
    monitoring.add_model(llama)
    ModelAlarms(stack, "LlamaAlarms", environment_name="chat", service=llama, topic=topic, props=MonitoringProps())
    return app, stack, monitoring


def embedding_app():
    app, stack, vpc = team_stack("Search")
    cluster = ecs.Cluster.from_cluster_attributes(stack, "Cluster", cluster_name="search-platform", vpc=vpc)
    bucket = s3.Bucket.from_bucket_name(stack, "Models", f"search-models-{ACCOUNT}")
    topic = sns.Topic.from_topic_arn(stack, "Pager", f"arn:aws:sns:eu-west-1:{ACCOUNT}:search-pager")
    gpus = GpuCapacity(
        stack,
        "Gpus",
        vpc=vpc,
        cluster=cluster,
        topic=topic,
        props=GpuCapacityProps(instance_types=("g5.xlarge", "g6.xlarge")),
    )
    alb = InferenceLoadBalancer(
        stack,
        "Alb",
        vpc=vpc,
        access_logs_bucket=bucket,
        props=LoadBalancerProps(internet_facing=False, allow_http=True, ingress_cidrs=("10.0.0.0/8",)),
    )
    embedder = ModelService(
        stack,
        "Embedder",
        model=ModelProps(name="embedder", version="v3"),
        server=BundledServer(
            image=ecs.ContainerImage.from_registry(f"{ACCOUNT}.dkr.ecr.eu-west-1.amazonaws.com/search/server:1.4")
        ),
        capacity=gpus,
        model_source=ModelBucket(bucket),
        route=alb,
        logs=ServiceLogs(logs_key(stack)),
        environment="search",
    )
    ServiceScaling(stack, "EmbedderScaling", service=embedder)
    return app, stack


def test_triton_team_app_synthesizes_clean_on_g6_falling_back_to_g5():
    app, stack = triton_app()
    template = synth_clean(app, stack)
    (group,) = resources(template, "AWS::AutoScaling::AutoScalingGroup").values()
    overrides = group["Properties"]["MixedInstancesPolicy"]["LaunchTemplate"]["Overrides"]
    assert [o["InstanceType"] for o in overrides] == ["g6.xlarge", "g5.xlarge"]
    (balancer,) = resources(template, "AWS::ElasticLoadBalancingV2::LoadBalancer").values()
    assert balancer["Properties"]["Scheme"] == "internal"
    (task,) = resources(template, "AWS::ECS::TaskDefinition").values()
    server = next(c for c in task["Properties"]["ContainerDefinitions"] if c["Name"] == "server")
    assert server["PortMappings"][0]["ContainerPort"] == 8000
    alarm_names = [
        a["Properties"]["AlarmName"]
        for a in resources(template, "AWS::CloudWatch::Alarm").values()
        if "AlarmName" in a["Properties"]
    ]
    assert alarm_names and all(name.startswith("vision-team-prod-") for name in alarm_names)
    (log_group,) = resources(template, "AWS::Logs::LogGroup").values()
    assert log_group["Properties"]["LogGroupName"] == "/vision-team/prod/detector"


def warnings_of(stack: cdk.Stack) -> list[str]:
    return [entry.data for c in stack.node.find_all() for entry in c.node.metadata if entry.type == "aws:cdk:warning"]


def test_a_type_the_catalog_does_not_list_for_the_region_is_a_warning_naming_the_table():
    """eu-west-1 offers g6e, the catalog's table does not list it: a warning (cdk synth --strict fails), not an
    error."""
    app, stack, vpc = team_stack("Unlisted")
    GpuCapacity(stack, "Gpus", vpc=vpc, props=GpuCapacityProps(instance_types=("g6e.xlarge",)))
    GpuCapacity(stack, "Listed", vpc=vpc, props=GpuCapacityProps(instance_types=("g5.xlarge",)))
    app.synth()
    (warning,) = [w for w in warnings_of(stack) if "does not list" in w]
    assert "instance_types[0]: the catalog does not list 'g6e.xlarge' in region 'eu-west-1'" in warning
    assert "instance_catalog.REGIONS_BY_FAMILY" in warning and "describe-instance-type-offerings" in warning


def test_an_unknown_instance_type_name_is_a_config_error():
    app, stack, vpc = team_stack("Unknown")
    with pytest.raises(ConfigError, match=r"instance_types\[0\]: 'g9\.xlarge' .*GPU instance type"):
        GpuCapacity(stack, "Gpus", vpc=vpc, props=GpuCapacityProps(instance_types=("g9.xlarge",)))


def test_vllm_team_app_behind_their_listener_with_the_dashboard():
    app, stack, monitoring = vllm_app()
    template = synth_clean(app, stack)
    assert not resources(template, "AWS::ElasticLoadBalancingV2::LoadBalancer")
    (rule,) = resources(template, "AWS::ElasticLoadBalancingV2::ListenerRule").values()
    assert rule["Properties"]["ListenerArn"] == LISTENER_ARN
    dashboard = cast(
        cdk.CfnElement, monitoring.dashboard.node.default_child
    )  # its CfnDashboard, typed IConstruct | None
    body = str(template["Resources"][stack.get_logical_id(dashboard)]["Properties"]["DashboardBody"])
    for metric in ("vllm_num_requests_running", "vllm_num_requests_waiting", "vllm_kv_cache_usage_perc"):
        assert metric in body
    names = [a["Properties"].get("AlarmName", "") for a in resources(template, "AWS::CloudWatch::Alarm").values()]
    assert not any("Elb5xx" in str(name) for name in names), "an ALB-wide alarm would page every team on the shared ALB"


def test_embedding_team_app_attaches_gpu_capacity_to_their_cluster():
    app, stack = embedding_app()
    template = synth_clean(app, stack)
    assert not resources(template, "AWS::ECS::Cluster")
    (association,) = resources(template, "AWS::ECS::ClusterCapacityProviderAssociations").values()
    assert association["Properties"]["Cluster"] == "search-platform"
    (service,) = resources(template, "AWS::ECS::Service").values()
    assert service["Properties"]["Cluster"] == "search-platform"
    user_data = str(resources(template, "AWS::EC2::LaunchTemplate"))
    assert "ECS_CLUSTER=search-platform" in user_data


def instance_policy_actions(template: dict) -> set[str]:
    actions = set()
    for policy in resources(template, "AWS::IAM::Policy").values():
        if "InstanceRole" in str(policy["Properties"]["Roles"]):
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
                actions |= set([statement["Action"]] if isinstance(statement["Action"], str) else statement["Action"])
    return actions


def test_capacity_on_an_imported_cluster_grants_the_agent_what_an_own_cluster_does_and_warns_about_the_list():
    app, stack = embedding_app()
    own_app, own_stack, vpc = team_stack("Own")
    GpuCapacity(own_stack, "Gpus", vpc=vpc, props=GpuCapacityProps(instance_types=("g5.xlarge", "g6.xlarge")))
    imported, own = (
        a.synth().get_stack_by_name(s.stack_name).template for a, s in ((app, stack), (own_app, own_stack))
    )
    assert instance_policy_actions(imported) == instance_policy_actions(own)
    (warning,) = [w for w in warnings_of(stack) if "PutClusterCapacityProviders" in w]
    assert "keep_capacity_providers" in warning and "acknowledge_warning" in warning
