"""Issue 46: Inferentia2 capacity (NeuronCapacity) and Neuron task placement. The fleet launches the ECS-optimized
AL2023 Neuron AMI without GPU settings, as another capacity provider; a task on it maps every /dev/neuron* device of
its instance, asks for no GPU, and reserves more than half the instance so ECS never places two on one (ECS on EC2
does not schedule Neuron devices). cdk-nag, cfn-lint and checkov find nothing on a synthesized Neuron app; a team's
own app on its imported cluster gets the same task."""

from __future__ import annotations

import copy
import json
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from cdk_nag import AwsSolutionsChecks

from gpu_inference_constructs import (
    BundledServer,
    ClusterCapacity,
    ConfigError,
    GpuCapacity,
    GpuCapacityProps,
    InferenceLoadBalancer,
    InferenceMonitoring,
    ListenerRoute,
    LoadBalancerProps,
    ModelBucket,
    ModelProps,
    ModelService,
    MonitoringProps,
    NeuronCapacity,
    NeuronCapacityProps,
    ServiceAccess,
    ServiceLogs,
    VllmProps,
    VllmServer,
)
from gpu_inference_constructs.core import metric_names
from gpu_inference_constructs.core.gpu_share import GpuShare
from gpu_inference_constructs.core.instance_catalog import NON_CUDA_CATALOG
from stacks.config import load_environment, with_capacity_groups
from tests.app.test_checks import CFN_LINT, CHECKOV, PLANTED_FILE, PLANTED_FINDING, acknowledgements_on
from tests.conftest import scenario_context
from tests.infra.team_parts import imported_team_parts
from tests.infra.test_server_contract import IMAGE, complete
from tests.scenarios import scenario_environment

NEURON_AMI = "/aws/service/ecs/optimized-ami/amazon-linux-2023/neuron/recommended/image_id"
GPU_AMI = "/aws/service/ecs/optimized-ami/amazon-linux-2023/gpu/recommended/image_id"
REGION = "eu-west-1"
KEY_ARN = f"arn:aws:kms:{REGION}:123456789012:key/11111111-2222-4333-8444-555555555555"


def flags() -> dict:
    """cdk.json's feature flags, as `cdk synth` sees them (its environments left out)."""
    return {key: value for key, value in scenario_context().items() if key != "environments"}


def neuron_app(model: ModelProps, instance_types: tuple[str, ...] = ("inf2.xlarge",)) -> tuple[cdk.App, ModelService]:
    """A team's Inferentia2 app: an imported VPC, its bucket, topic and key, a NeuronCapacity of its own cluster, an
    internal load balancer, one model on its own Neuron container (a ServerContract), and the dashboard."""
    app = cdk.App(context=flags())
    stack = cdk.Stack(app, "Neuron", env=cdk.Environment(account="123456789012", region=REGION))
    vpc = ec2.Vpc.from_vpc_attributes(
        stack,
        "Vpc",
        vpc_id="vpc-0a1b2c3d4e5f67890",
        vpc_cidr_block="10.20.0.0/16",
        availability_zones=[f"{REGION}a", f"{REGION}b"],
        private_subnet_ids=["subnet-0bbbbbbbbbbbbbbb1", "subnet-0bbbbbbbbbbbbbbb2"],
    )
    bucket = s3.Bucket.from_bucket_name(stack, "Models", "neuron-models-123456789012")
    topic = sns.Topic.from_topic_arn(stack, "Pager", f"arn:aws:sns:{REGION}:123456789012:neuron-pager")
    logs_key = kms.Key.from_key_arn(stack, "LogsKey", KEY_ARN)
    capacity = NeuronCapacity(
        stack,
        "Inferentia",
        vpc=vpc,
        topic=topic,
        props=NeuronCapacityProps(instance_types=instance_types, on_demand_base_capacity=1),
    )
    alb = InferenceLoadBalancer(
        stack,
        "Alb",
        vpc=vpc,
        access_logs_bucket=bucket,
        props=LoadBalancerProps(internet_facing=False, allow_http=True, ingress_cidrs=("10.0.0.0/8",)),
    )
    service = ModelService(
        stack,
        "Encoder",
        model=model,
        server=complete(accelerator="neuron"),
        capacity=capacity,
        model_source=ModelBucket(bucket),
        route=alb,
        environment="neuron",
        logs=ServiceLogs(logs_key),
        access=ServiceAccess(allow_unauthenticated=True),
    )
    gpus = GpuCapacity(
        stack,
        "Gpus",
        vpc=vpc,
        cluster=capacity.cluster,
        topic=topic,
        props=GpuCapacityProps(instance_types=("g5.xlarge",), max_capacity=2),
    )
    monitoring = InferenceMonitoring(
        stack,
        "Monitoring",
        environment_name="neuron",
        model_names=[model.name],
        load_balancer=alb.load_balancer,
        capacity=gpus,
        more_capacity=[capacity],
        topic=topic,
        props=MonitoringProps(),
        logs_key=logs_key,
    )
    monitoring.add_model(service)
    return app, service


MODEL = ModelProps(name="encoder", version="1")


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory) -> dict[str, Any]:
    app, service = neuron_app(MODEL)
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    assembly = app.synth()
    stack = assembly.get_stack_by_name("Neuron")
    return {
        "app": app,
        "service": service,
        "template": stack.template,
        "path": Path(assembly.directory) / stack.template_file,
    }


def resources(template: Mapping[str, Any], kind: str) -> dict[str, dict]:
    return {logical_id: r for logical_id, r in template["Resources"].items() if r["Type"] == kind}


def server_of(template: Mapping[str, Any]) -> dict:
    (task,) = resources(template, "AWS::ECS::TaskDefinition").values()
    return task["Properties"]["ContainerDefinitions"][0]


def test_the_launch_template_boots_the_neuron_ami_without_gpu_settings(synthesized):
    template = synthesized["template"]
    parameters = {p["Default"] for p in template["Parameters"].values() if "Default" in p}
    assert NEURON_AMI in parameters
    templates = resources(template, "AWS::EC2::LaunchTemplate")
    neuron = next(t for logical_id, t in templates.items() if logical_id.startswith("Inferentia"))
    data = neuron["Properties"]["LaunchTemplateData"]
    (parameter,) = [name for name, p in template["Parameters"].items() if p.get("Default") == NEURON_AMI]
    assert data["ImageId"] == {"Ref": parameter}
    user_data = json.dumps(data["UserData"])
    assert "ECS_ENABLE_GPU_SUPPORT" not in user_data
    assert "ECS_ENABLE_SPOT_INSTANCE_DRAINING=true" in user_data
    assert data["MetadataOptions"]["HttpTokens"] == "required"
    assert data["BlockDeviceMappings"][0]["Ebs"]["Encrypted"] is True


def test_the_gpu_group_beside_it_keeps_the_gpu_ami(synthesized):
    """The twin: the same app's CUDA group still boots the GPU AMI with GPU support on."""
    template = synthesized["template"]
    gpu = next(
        t for logical_id, t in resources(template, "AWS::EC2::LaunchTemplate").items() if logical_id.startswith("Gpus")
    )
    (parameter,) = [name for name, p in template["Parameters"].items() if p.get("Default") == GPU_AMI]
    assert gpu["Properties"]["LaunchTemplateData"]["ImageId"] == {"Ref": parameter}
    assert "ECS_ENABLE_GPU_SUPPORT=true" in json.dumps(gpu["Properties"]["LaunchTemplateData"]["UserData"])


def test_the_group_is_spot_above_its_on_demand_base_and_a_provider_of_the_cluster(synthesized):
    template = synthesized["template"]
    group = next(
        g
        for logical_id, g in resources(template, "AWS::AutoScaling::AutoScalingGroup").items()
        if logical_id.startswith("Inferentia")
    )
    policy = group["Properties"]["MixedInstancesPolicy"]
    assert [o["InstanceType"] for o in policy["LaunchTemplate"]["Overrides"]] == ["inf2.xlarge"]
    assert policy["InstancesDistribution"]["OnDemandBaseCapacity"] == 1
    assert policy["InstancesDistribution"]["SpotAllocationStrategy"] == "capacity-optimized-prioritized"
    (association,) = resources(template, "AWS::ECS::ClusterCapacityProviderAssociations").values()
    assert len(association["Properties"]["CapacityProviders"]) == 2  # the Neuron and the GPU providers of one cluster
    rules = [
        r
        for r in resources(template, "AWS::Events::Rule").values()
        if "Inferentia2 Auto Scaling group" in r["Properties"].get("Description", "")
    ]
    assert len(rules) == 1


def test_the_task_maps_every_neuron_device_and_asks_for_no_gpu(synthesized):
    server = server_of(synthesized["template"])
    assert "ResourceRequirements" not in server
    assert server["LinuxParameters"]["Devices"] == [
        {"HostPath": "/dev/neuron0", "ContainerPath": "/dev/neuron0", "Permissions": ["read", "write"]}
    ]
    environment = {e["Name"]: e["Value"] for e in server["Environment"]}
    assert environment["NEURON_RT_VISIBLE_CORES"] == "0-1"  # two NeuronCore-v2 on one Inferentia2
    assert server.get("Privileged") is False


def test_the_cost_per_request_counts_the_neuron_price_and_no_alarm_watches_a_gpu_metric(synthesized):
    template = synthesized["template"]
    (dashboard,) = resources(template, "AWS::CloudWatch::Dashboard").values()
    assert "inf2.xlarge at $0.7582/h" in json.dumps(dashboard)
    alarms = json.dumps(resources(template, "AWS::CloudWatch::Alarm"))
    assert resources(template, "AWS::CloudWatch::Alarm")
    for name in (metric_names.GPU_UTILIZATION, metric_names.GPU_MEMORY_UTILIZATION, metric_names.GPU_MEMORY_USED_MIB):
        assert name not in alarms


def test_a_gpu_task_still_asks_for_its_gpu_and_maps_no_device():
    """The twin, on a g5 cluster of the team's own."""
    stack = cdk.Stack(cdk.App(), "G", env=cdk.Environment(account="123456789012", region=REGION))
    service = team_service(stack, "g5.xlarge", MODEL)
    server = server_of(cdk.assertions.Template.from_stack(stack).to_json())
    assert server["ResourceRequirements"] == [{"Type": "GPU", "Value": "1"}]
    assert "Devices" not in server["LinuxParameters"]
    assert service.instance_type.name == "g5.xlarge"


def test_every_device_of_a_larger_type_is_mapped_with_its_cores():
    stack = cdk.Stack(cdk.App(), "Big", env=cdk.Environment(account="123456789012", region=REGION))
    team_service(stack, "inf2.24xlarge", ModelProps(name="llm", version="1", gpus=6, cpu=49152, memory_mib=196608))
    server = server_of(cdk.assertions.Template.from_stack(stack).to_json())
    assert [d["HostPath"] for d in server["LinuxParameters"]["Devices"]] == [f"/dev/neuron{i}" for i in range(6)]
    assert {e["Name"]: e["Value"] for e in server["Environment"]}["NEURON_RT_VISIBLE_CORES"] == "0-11"


def test_a_server_that_chooses_its_cores_keeps_its_choice():
    stack = cdk.Stack(cdk.App(), "Own", env=cdk.Environment(account="123456789012", region=REGION))
    team_service(
        stack, "inf2.xlarge", MODEL, server=complete(accelerator="neuron", environment={"NEURON_RT_NUM_CORES": "1"})
    )
    environment = {e["Name"] for e in server_of(cdk.assertions.Template.from_stack(stack).to_json())["Environment"]}
    assert "NEURON_RT_NUM_CORES" in environment and "NEURON_RT_VISIBLE_CORES" not in environment


def team_service(stack: cdk.Stack, instance_type: str, model: ModelProps, server=None) -> ModelService:
    """A team's own app: its imported VPC, cluster and listener, a capacity provider of its own (ClusterCapacity)."""
    team = imported_team_parts(stack)
    return ModelService(
        stack,
        "Model",
        model=model,
        server=server or complete(accelerator="neuron" if instance_type.startswith("inf2") else "cuda"),
        capacity=ClusterCapacity(team.cluster, "team-neuron", instance_type),
        model_source=ModelBucket(s3.Bucket.from_bucket_name(stack, "Bucket", "team-models")),
        route=ListenerRoute(team.listener, 7),
        environment="team",
        logs=ServiceLogs(kms.Key.from_key_arn(stack, "Key", KEY_ARN)),
        access=ServiceAccess(allow_unauthenticated=True),
    )


def test_a_team_app_on_its_own_cluster_runs_its_container_on_inf2(tmp_path):
    """A plain cdk.App() (no cdk.json), an imported cluster and the team's own image, cdk-nag on."""
    app = cdk.App()
    stack = cdk.Stack(app, "Team", env=cdk.Environment(account="123456789012", region=REGION))
    service = team_service(stack, "inf2.8xlarge", ModelProps(name="ranker", version="1", cpu=20480, memory_mib=32768))
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    template = app.synth().get_stack_by_name("Team").template
    server = server_of(template)
    assert server["Image"] == stack.resolve(IMAGE.bind(stack, service.container).image_name)
    assert "ResourceRequirements" not in server and len(server["LinuxParameters"]["Devices"]) == 1
    (ecs_service,) = resources(template, "AWS::ECS::Service").values()
    assert ecs_service["Properties"]["CapacityProviderStrategy"] == [{"CapacityProvider": "team-neuron", "Weight": 1}]


# The placement checks: the key and the fix's keyword, refused below the boundary and passed at it. On an inf2.xlarge
# (4 vCPU = 4096 units, 16384 MiB) the collector sidecar takes 64 units and 128 MiB, so the server needs more than
# 2048 - 64 units (1985) or more than 8192 - 128 MiB (8065).
@pytest.mark.parametrize(
    "model, key, fix",
    [
        (
            ModelProps(name="encoder", version="1", cpu=1984, memory_mib=8064),
            r"cpu",
            r"cpu to at least 1985 or memory_mib to at least 8065",
        ),
        (ModelProps(name="encoder", version="1", cpu=24576, memory_mib=65536, gpus=2), r"gpus", r"set gpus to 1"),
        (ModelProps(name="encoder", version="1", gpu_share=GpuShare(2048)), r"gpu_share", r"remove gpu_share"),
    ],
)
def test_the_placement_checks_refuse_naming_the_key_and_the_fix(model, key, fix):
    stack = cdk.Stack(cdk.App(), "P", env=cdk.Environment(account="123456789012", region=REGION))
    with pytest.raises(ConfigError, match=rf"^models\[encoder\]\.{key}: .*{fix}"):
        team_service(stack, "inf2.xlarge", model)


@pytest.mark.parametrize("cpu, memory_mib", [(1985, 8064), (1984, 8065)])
def test_the_placement_check_passes_at_the_boundary(cpu, memory_mib):
    stack = cdk.Stack(cdk.App(), "P", env=cdk.Environment(account="123456789012", region=REGION))
    team_service(stack, "inf2.xlarge", ModelProps(name="encoder", version="1", cpu=cpu, memory_mib=memory_mib))


def test_two_tasks_at_the_boundary_never_fit_one_instance():
    """What ECS does with the reservations: two tasks at the smallest passing CPU exceed the instance's CPU."""
    inf2 = NON_CUDA_CATALOG["inf2.xlarge"]
    task_cpu = 1985 + 64
    assert 2 * task_cpu > inf2.vcpus * 1024 >= task_cpu


@pytest.mark.parametrize(
    "server",
    [
        lambda: BundledServer(image=IMAGE),
        lambda: VllmServer(VllmProps(), image=IMAGE),
    ],
)
def test_a_cuda_preset_is_refused_on_neuron_naming_the_fix(server):
    stack = cdk.Stack(cdk.App(), "B", env=cdk.Environment(account="123456789012", region=REGION))
    with pytest.raises(ConfigError, match=r"^models\[encoder\]\.server: .*NeuronServer"):
        team_service(stack, "inf2.xlarge", MODEL, server=server())


def test_the_group_refuses_a_deployment_at_peak_it_cannot_hold():
    """One task per instance: 4 tasks deploying at 200 % need 8 instances."""
    with pytest.raises(ConfigError, match=r"max_capacity: .*raise max_capacity to at least 8"):
        app = cdk.App()
        stack = cdk.Stack(app, "S", env=cdk.Environment(account="123456789012", region=REGION))
        team = imported_team_parts(stack)
        capacity = NeuronCapacity(stack, "Inf", vpc=team.vpc, props=NeuronCapacityProps(max_capacity=7))
        capacity.add_model(MODEL)


@pytest.mark.parametrize(
    "props, key, fix",
    [
        (lambda: NeuronCapacityProps(instance_types=("g5.xlarge",)), r"instance_types\[0\]", "GpuCapacity"),
        (
            lambda: NeuronCapacityProps(instance_types=("inf2.xlarge", "inf2.8xlarge")),
            r"instance_types\[1\]",
            "same size",
        ),
        (lambda: GpuCapacityProps(instance_types=("inf2.xlarge",)), r"instance_types\[0\]", "NeuronCapacity"),
    ],
)
def test_each_capacity_refuses_the_other_kind_of_type(props, key, fix):
    with pytest.raises(ConfigError, match=rf"^{key}: .*{fix}"):
        props().resolve_instance_types()


def test_the_catalog_lists_inf2_with_devices_and_cores():
    shapes = {name: (t.vcpus, t.memory_gib, t.gpus, t.neuron_cores) for name, t in NON_CUDA_CATALOG.items()}
    assert shapes == {
        "inf2.xlarge": (4, 16, 1, 2),
        "inf2.8xlarge": (32, 128, 1, 2),
        "inf2.24xlarge": (96, 384, 6, 12),
        "inf2.48xlarge": (192, 768, 12, 24),
    }


# cdk.json: a capacity group of inf2 types is a NeuronCapacity; mixing is refused naming the key.
def staging_with_group(instance_types: list[str]) -> dict:
    data = copy.deepcopy(scenario_environment("staging"))
    name = data["models"][0]["name"]
    for group in data.get("capacity_groups", {}).values():
        group["models"] = [m for m in group["models"] if m != name]
    data["capacity_groups"] = {k: g for k, g in data.get("capacity_groups", {}).items() if g["models"]}
    data["capacity_groups"]["inf"] = {
        "capacity": {"instance_types": instance_types, "max_capacity": 8},
        "models": [name],
    }
    return data


def test_a_group_of_inf2_types_becomes_neuron_capacity_props():
    built = with_capacity_groups(staging_with_group(["inf2.xlarge"]))
    assert isinstance(built["capacity_groups"]["inf"]["capacity"], NeuronCapacityProps)
    assert isinstance(
        with_capacity_groups(scenario_environment("staging"))["capacity_groups"]["llm"]["capacity"], GpuCapacityProps
    )


def test_mixing_neuron_and_cuda_types_in_one_group_is_refused_naming_the_key():
    with pytest.raises(ConfigError, match=r"capacity_groups\.inf\.capacity\.instance_types\[1\]: .*group of their own"):
        load_environment("staging", staging_with_group(["inf2.xlarge", "g5.xlarge"]))


def test_a_bundled_model_in_a_neuron_group_is_refused_naming_the_fix():
    with pytest.raises(ConfigError, match=r"capacity_groups\.inf\.models: .*neuron block"):
        load_environment("staging", staging_with_group(["inf2.xlarge"]))


def unacknowledged(app: cdk.App) -> list[str]:
    """cdk-nag's findings without an acknowledgement on their resource (as tests/app/test_checks.py reads them)."""
    found = []
    for violation in AwsSolutionsChecks().validate_scope(app).violations:
        for resource in violation.violating_resources:
            construct = app
            for part in (resource.construct_path or "").split("/"):
                construct = construct.node.find_child(part)
            if len(acknowledgements_on(construct).get(f"AwsSolutions::{violation.rule_name}", "")) < 60:
                found.append(f"{violation.rule_name} at {resource.construct_path}")
    return found


def test_cdk_nag_finds_nothing_unacknowledged_on_the_neuron_app(synthesized):
    """The module's synth ran AwsSolutionsChecks (an unacknowledged finding fails it); the twin plants SSH open to
    the world on the Neuron instances' security group, which cdk-nag reports."""
    assert unacknowledged(synthesized["app"]) == []
    app, _ = neuron_app(MODEL)
    group = next(c for c in app.node.find_all() if c.node.path.endswith("Inferentia/InstanceSecurityGroup"))
    assert isinstance(group, ec2.SecurityGroup)
    group.add_ingress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(22), "planted")
    assert any(finding.startswith("AwsSolutions-EC23 at Neuron/Inferentia/") for finding in unacknowledged(app))


def neuron_entry(entry: dict) -> dict:
    """A scenario model's entry served by the Neuron preset (its ``neuron`` block) instead of the bundled server, with
    more than half of an inf2.xlarge's CPU so that one task holds the instance's device."""
    from stacks.model_entry import MODEL_KEYS

    kept = {
        key: value for key, value in entry.items() if key in MODEL_KEYS and key not in ("gpu_share", "shared_cache")
    }
    scaling = {
        key: entry["scaling"][key]
        for key in (
            "requests_per_target_per_minute",
            "scale_out_cooldown_seconds",
            "scale_in_cooldown_seconds",
            "latency_p95_ms",
        )
    }
    # The scenario's network has no NAT: the DLC and the fetcher from the team's ECR mirrors, as cdk.json's dev has
    # them.
    mirrors = {
        "image": {"repository": "mirror/pytorch-inference-neuronx", "tag": "2.9.0-neuronx-py312-sdk2.31.1-ubuntu24.04"},
        "fetcher_image": {"repository": "mirror/aws-cli", "tag": "2.32.9"},
    }
    return {**kept, "cpu": 2048, "scaling": scaling, "neuron": {"task": "text-embedding", "neuron_cores": 2, **mirrors}}


@pytest.fixture(scope="module")
def environment(tmp_path_factory) -> dict[str, Any]:
    from stacks.stage import InferenceStage

    data = staging_with_group(["inf2.xlarge"])
    data["models"][0] = neuron_entry(data["models"][0])
    data["capacity_groups"]["inf"]["capacity"]["max_capacity"] = 2 * data["models"][0]["max_tasks"]
    config = load_environment("staging", data)
    app = cdk.App(context=flags())
    stage = InferenceStage(app, config)  # registers AwsSolutionsChecks: synth fails on an unacknowledged finding
    app.synth()
    templates = {stack.stack_name: stack.template for stack in stage.synth().stacks}
    return {"stage": stage, "templates": templates}


def test_the_environment_builds_a_neuron_group_and_serves_its_model_on_it(environment):
    stage = environment["stage"]
    assert isinstance(stage.shared.capacity_groups["inf"], NeuronCapacity)
    assert stage.shared.capacity_groups["inf"].node.id == "NeuronCapacity-inf"
    shared = environment["templates"][stage.shared.stack_name]
    assert NEURON_AMI in json.dumps(shared["Parameters"])
    model = environment["templates"][stage.model_stacks["minilm"].stack_name]
    server = server_of(model)
    assert "ResourceRequirements" not in server
    assert [d["HostPath"] for d in server["LinuxParameters"]["Devices"]] == ["/dev/neuron0"]
    other = server_of(environment["templates"][stage.model_stacks["sentiment"].stack_name])
    assert other["ResourceRequirements"] == [{"Type": "GPU", "Value": "1"}]  # the GPU models beside it keep theirs


def checked_templates(synthesized: dict, environment: dict, directory: Path) -> list[Path]:
    """The team app's template and every template of the environment, written to ``directory``."""
    paths = [directory / "neuron.template.json"]
    paths[0].write_text(json.dumps(synthesized["template"]))
    for name, template in environment["templates"].items():
        paths.append(directory / f"{name}.template.json")
        paths[-1].write_text(json.dumps(template))
    return paths


def test_cfn_lint_finds_nothing_and_its_twin_finds_a_planted_device_error(synthesized, environment, tmp_path):
    planted = copy.deepcopy(synthesized["template"])
    (task,) = resources(planted, "AWS::ECS::TaskDefinition").values()
    task["Properties"]["ContainerDefinitions"][0]["LinuxParameters"]["Devices"][0]["Permissions"] = ["readwrite"]
    (tmp_path / "clean").mkdir()
    paths = checked_templates(synthesized, environment, tmp_path / "clean")
    (tmp_path / "planted.template.json").write_text(json.dumps(planted))
    result = subprocess.run(
        [str(CFN_LINT), "--format", "parseable", "--", *map(str, paths), str(tmp_path / "planted.template.json")],
        capture_output=True,
        text=True,
    )
    errors = [line for line in result.stdout.splitlines() if ":E" in line]
    assert [line for line in errors if "/clean/" in line] == []
    assert any(line.startswith(str(tmp_path / "planted")) and "readwrite" in line for line in errors), result.stdout


def test_checkov_finds_nothing_unexplained_and_reports_the_planted_finding(synthesized, environment, tmp_path):
    assert CHECKOV.exists(), f"{CHECKOV} is missing: run `make setup-dev`"
    checked_templates(synthesized, environment, tmp_path)
    (tmp_path / PLANTED_FILE).write_text(json.dumps(PLANTED_FINDING))
    result = subprocess.run(
        [str(CHECKOV), "-d", str(tmp_path), "--framework", "cloudformation", "--output", "json", "--compact"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    report = json.loads(result.stdout)
    failed = report["results"]["failed_checks"]
    assert {f["check_id"] for f in failed if Path(f["file_path"]).name == PLANTED_FILE} >= {"CKV_AWS_24"}
    assert [f"{f['check_id']} {f['resource']}" for f in failed if Path(f["file_path"]).name != PLANTED_FILE] == []
