"""Many models per GPU (issue 41): dev's models run on NVIDIA MPS shares, written as the CloudFormation reference
documents them; every fit rule is refused at synth naming the key and the fix; the stale checkers' findings are
acknowledged on exactly the shared task definitions, and cfn-lint still checks what the acknowledgement covers."""

from __future__ import annotations

import copy
import json
import subprocess

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecs as ecs

from gpu_inference_constructs import ClusterCapacity, ListenerRoute, ModelBucket, ServiceAccess, ServiceLogs
from gpu_inference_constructs.capacity.gpu_packing import SharedTask, instances_for
from gpu_inference_constructs.core.errors import ConfigError
from gpu_inference_constructs.core.gpu_share import (
    MPS_CAPABILITY,
    MPS_MIN_AGENT_VERSION,
    GpuShare,
    registered_memory_mib,
    shareable_memory_mib,
)
from gpu_inference_constructs.core.instance_catalog import lookup
from gpu_inference_constructs.service.task_gpu_share import STALE_FINDINGS
from gpu_inference_constructs.shared.acknowledgements import default_child
from stacks.config import load_environment
from tests.app.test_checks import CFN_LINT
from tests.conftest import cloudformation_validation_findings, validated_app
from tests.infra.team_parts import imported_team_parts
from tests.scenarios import scenario_environment


def shared_task_definitions(template: dict) -> dict[str, dict]:
    return {
        k: r
        for k, r in template["Resources"].items()
        if r["Type"] == "AWS::ECS::TaskDefinition"
        and any(
            "SharingStrategy" in req
            for c in r["Properties"]["ContainerDefinitions"]
            for req in c.get("ResourceRequirements", [])
        )
    }


def test_dev_runs_three_models_on_mps_shares_as_the_reference_writes_them(synthesized):
    config = synthesized.stages["dev"].config
    template = synthesized.inference_template("dev")
    shared = shared_task_definitions(template)
    assert len(shared) >= 3 and all(m.gpu_share is not None for m in config.models)
    smallest = config.capacity.smallest_instance_type()
    for task in shared.values():
        (server,) = [c for c in task["Properties"]["ContainerDefinitions"] if c.get("ResourceRequirements")]
        (requirement,) = server["ResourceRequirements"]
        assert set(requirement) == {"Type", "SharingStrategy"} and requirement["Type"] == "GPU"  # no Value
        allocation = requirement["SharingStrategy"]["NvidiaMps"]
        assert set(allocation) <= {"Memory", "MaxComputePercent"}
        assert allocation["Memory"] <= shareable_memory_mib(smallest.gpu_model, smallest.gpu_memory_gib)
        others = [c for c in task["Properties"]["ContainerDefinitions"] if c is not server]
        assert all(not c.get("ResourceRequirements") for c in others), "only the server takes the GPU share"


def test_no_shared_model_scales_on_its_gpus_utilisation(synthesized):
    template = synthesized.inference_template("dev")
    scaling_alarms = [
        r["Properties"]
        for r in template["Resources"].values()
        if r["Type"] == "AWS::CloudWatch::Alarm"
        and any("ScalingPolicy" in json.dumps(a) or "Ref" in a for a in r["Properties"].get("AlarmActions", []))
        and "GpuUtilization" in json.dumps(r["Properties"])
    ]
    assert scaling_alarms == []


def dev_with(**changes) -> dict:
    data = copy.deepcopy(scenario_environment("dev"))
    for index, change in changes.get("models", {}).items():
        data["models"][index].update(change)
    for key, value in changes.get("capacity", {}).items():
        data["capacity"][key] = value
    if "deployment" in changes:
        data["deployment"] = changes["deployment"]
    return data


@pytest.mark.parametrize(
    ("changes", "key", "fix"),
    [
        (
            {"models": {0: {"gpu_share": {"memory_mib": 16000}}}},
            r"models\[0\]\.gpu_share\.memory_mib",
            "at most 14592",
        ),  # g4dn's T4
        ({"models": {0: {"gpu_share": {"memory_mib": 100}}}}, r"gpu_share\.memory_mib", "at least 256"),
        (
            {"models": {0: {"gpu_share": {"memory_mib": 2048, "max_compute_percent": 0}}}},
            r"gpu_share\.max_compute_percent",
            "out of range",
        ),
        ({"models": {0: {"gpus": 2}}}, r"models\[0\]\.gpus", "remove gpu_share"),
        ({"models": {1: {"gpu_share": None}}}, r"gpu_share", "capacity group of their own"),
        (
            {"capacity": {"max_capacity": 2}},
            r"capacity\.max_capacity",
            "raise max_capacity to at least 4",
        ),  # with dev's pool (tenants)
        ({"models": {0: {"cpu": 4096}}}, r"models\[0\]\.cpu", "does not fit"),
        (
            {
                "models": {i: {"max_tasks": 8} for i in range(3)},
                "capacity": {"max_capacity": 8},
                "deployment": {"strategy": "canary"},
            },
            r"capacity\.max_capacity",
            "deploying",
        ),
    ],
)
def test_every_fit_rule_is_refused_at_synth_naming_the_key_and_the_fix(changes, key, fix):
    with pytest.raises(ConfigError, match=key) as raised:
        load_environment("dev", dev_with(**changes))
    assert fix in str(raised.value)


def test_the_packing_by_hand():
    """T4s offer their shares 14,592 MiB (15,360 less 512 reserved and 256 for the MPS server): three 4096 MiB shares
    fit one GPU, a fourth needs the next; CPU binds before GPU memory at 1024 units a task on 4 vCPU (3584 usable: three
    tasks)."""
    g4dn = lookup("g4dn.xlarge", "instance_type")
    small = [SharedTask(f"m{i}", GpuShare(4096), 512, 1024) for i in range(4)]
    assert instances_for(small[:3], g4dn) == 1 and instances_for(small, g4dn) == 2
    cpu_bound = [SharedTask(f"c{i}", GpuShare(1024), 1024, 1024) for i in range(7)]
    assert instances_for(cpu_bound, g4dn) == 3
    four_gpus = lookup("g5.12xlarge", "instance_type")
    assert instances_for([SharedTask(f"g{i}", GpuShare(11000), 512, 1024) for i in range(8)], four_gpus) == 1


def team_stack(share: GpuShare, server=None):
    """A team's own app: an imported cluster and capacity provider, its own listener, a share."""
    from aws_cdk import aws_kms as kms
    from aws_cdk import aws_s3 as s3

    from gpu_inference_constructs import ModelProps, ModelService

    app = validated_app()
    stack = cdk.Stack(app, "Team", env=cdk.Environment(account="123456789012", region="eu-west-1"))
    team = imported_team_parts(stack)
    cluster, listener = team.cluster, team.listener
    service = ModelService(
        stack,
        "Ranker",
        model=ModelProps(name="ranker", version="1", cpu=1024, memory_mib=3072, gpu_share=share),
        logs=ServiceLogs(
            kms.Key.from_key_arn(
                stack, "Key", "arn:aws:kms:eu-west-1:123456789012:key/11111111-2222-3333-4444-555555555555"
            )
        ),
        environment="team",
        capacity=ClusterCapacity(cluster, "team-gpu-spot", "g5.xlarge"),
        model_source=ModelBucket(s3.Bucket.from_bucket_name(stack, "Models", "team-models")),
        route=ListenerRoute(listener, 7),
        access=ServiceAccess(allow_unauthenticated=True),
        **{"server": server} if server else {},
    )
    return app, stack, service


def test_a_team_app_runs_its_model_on_a_share_of_its_own_cluster(tmp_path):
    app, stack, _ = team_stack(GpuShare(4096, 25))
    template = app.synth().get_stack_by_name("Team").template
    (task,) = shared_task_definitions(template).values()
    (server,) = [c for c in task["Properties"]["ContainerDefinitions"] if c.get("ResourceRequirements")]
    assert server["ResourceRequirements"] == [
        {"Type": "GPU", "SharingStrategy": {"NvidiaMps": {"Memory": 4096, "MaxComputePercent": 25}}}
    ]
    assert cloudformation_validation_findings(__import__("pathlib").Path(app.outdir)) == []


def test_vllm_on_a_share_sizes_its_kv_cache_from_the_share():
    from gpu_inference_constructs import VllmProps, VllmServer

    _, _, service = team_stack(
        GpuShare(11514), VllmServer(VllmProps(), image=ecs.ContainerImage.from_registry("vllm/vllm-openai:v0.32.0"))
    )
    command = list(service.contract.command)
    utilization = float(command[command.index("--gpu-memory-utilization") + 1])
    assert utilization == pytest.approx(0.90 * 11514 / 23028, abs=0.001)  # half an A10G, not 0.9 of it


def test_a_server_that_does_not_say_it_is_one_cuda_process_is_refused_on_a_share():
    from gpu_inference_constructs import TritonServer

    with pytest.raises(ConfigError, match=r"models\[ranker\]\.gpu_share.*single_cuda_process"):
        team_stack(
            GpuShare(4096),
            TritonServer(image=ecs.ContainerImage.from_registry("nvcr.io/nvidia/tritonserver:25.10-py3")),
        )


def test_the_stale_findings_are_acknowledged_on_the_shared_task_definition_only(tmp_path):
    """The twins. CDK's validation still reports: the acknowledged rule on another resource (a second task definition
    whose GPU requirement lacks Value), and any other rule on the shared one (a planted Cpu of the wrong type). What the
    acknowledgement does hide on the shared one (a planted unknown key inside SharingStrategy) cfn-lint reports."""
    from pathlib import Path

    app, stack, service = team_stack(GpuShare(4096))
    plain = ecs.Ec2TaskDefinition(stack, "Plain")
    plain.add_container(
        "c", image=ecs.ContainerImage.from_registry("public.ecr.aws/docker/library/busybox:1.37"), memory_limit_mib=64
    )
    default_child(plain).add_property_override("ContainerDefinitions.0.ResourceRequirements", [{"Type": "GPU"}])
    shared = default_child(service.task_definition)
    shared.add_property_override(
        "ContainerDefinitions.0.ResourceRequirements",
        [{"Type": "GPU", "SharingStrategy": {"NvidiaMps": {"Memory": 4096, "MemoryMiB": 1}}}],
    )
    shared.add_property_override("ContainerDefinitions.0.Cpu", "lots")
    try:
        app.synth()
    except RuntimeError as error:  # the findings fail the synth; the report lists them
        assert "Validation" in str(error)
    findings = cloudformation_validation_findings(Path(app.outdir))
    assert any(f.startswith("F3003 Team/Plain/") for f in findings), findings
    on_shared = [f.split()[0] for f in findings if f.split()[1].startswith("Team/Ranker/")]
    assert on_shared and set(on_shared).isdisjoint({"F3002", "F3003"}), findings  # the planted Cpu, not the share
    template = json.loads((Path(app.outdir) / "Team.template.json").read_text())
    path = tmp_path / "team.template.json"
    path.write_text(json.dumps(template))
    linted = subprocess.run([str(CFN_LINT), "--format", "parseable", "--", str(path)], capture_output=True, text=True)
    assert any(":E3002:" in line and "MemoryMiB" in line for line in linted.stdout.splitlines()), linted.stdout
    assert {finding.split("::")[1] for finding in STALE_FINDINGS} == {"F3003", "F3002"}


def test_cfn_lint_knows_sharing_strategy_and_finds_nothing_in_devs_shared_templates(synthesized, tmp_path):
    paths = []
    for stack in synthesized.stack_ids("dev"):
        template = synthesized.template("dev", stack)
        if shared_task_definitions(template):
            path = tmp_path / f"{stack}.template.json"
            path.write_text(json.dumps(template))
            paths.append(str(path))
    assert len(paths) >= 3
    linted = subprocess.run([str(CFN_LINT), "--format", "parseable", "--", *paths], capture_output=True, text=True)
    assert not [line for line in linted.stdout.splitlines() if ":E" in line and "ResourceRequirements" in line], (
        linted.stdout
    )


def test_a_library_capacity_refuses_whole_and_shared_models_on_one_group():
    """The construct's own check, as the app's config makes it (gpu_packing.check_one_kind): either order."""
    from gpu_inference_constructs import GpuCapacity, GpuCapacityProps, ModelProps

    for first, second in ((None, GpuShare(2048)), (GpuShare(2048), None)):
        stack = cdk.Stack(cdk.App(), "Team", env=cdk.Environment(account="123456789012", region="us-east-1"))
        vpc = ec2.Vpc.from_vpc_attributes(
            stack, "Vpc", vpc_id="vpc-1", availability_zones=["us-east-1a"], private_subnet_ids=["subnet-1"]
        )
        gpus = GpuCapacity(stack, "Gpus", vpc=vpc, props=GpuCapacityProps())
        gpus.add_model(ModelProps(name="first", version="1", cpu=1024, memory_mib=3072, gpu_share=first))
        with pytest.raises(ConfigError, match=r"^models\[second\]\.gpu_share: .*capacity group of their own"):
            gpus.add_model(ModelProps(name="second", version="1", cpu=1024, memory_mib=3072, gpu_share=second))


def test_shares_pack_on_what_ecs_registers_less_the_mps_server():
    """The agent registers an L4 as 23,034 - 471 = 22,563 MiB (aws/amazon-ecs-agent PR #5061), and the MPS server's
    context (256 MiB, gpu_share.MPS_SERVER_MIB) comes out of it: 22,307 MiB for shares. An A10G has no sourced reserve:
    23,028 - 512 - 256 = 22,260. Three 7,676 MiB shares (23,028, nvidia-smi's whole A10G) need two g5s, not one."""
    assert registered_memory_mib("NVIDIA L4", 24) == 22563 and shareable_memory_mib("NVIDIA L4", 24) == 22307
    assert shareable_memory_mib("NVIDIA A10G", 24) == 22260
    g5 = lookup("g5.xlarge", "instance_type")
    thirds = [SharedTask(f"t{i}", GpuShare(7676), 512, 1024) for i in range(3)]
    assert instances_for(thirds, g5) == 2
    assert instances_for([SharedTask(f"t{i}", GpuShare(7420), 512, 1024) for i in range(3)], g5) == 1  # 22,260


def test_a_share_larger_than_what_ecs_registers_is_refused_naming_the_mps_server():
    """A T4 shows 15,360 MiB; its shares get 15,360 - 512 - 256 = 14,592: a 15,000 MiB share is refused."""
    with pytest.raises(ConfigError, match=r"models\[0\]\.gpu_share\.memory_mib") as raised:
        load_environment("dev", dev_with(models={0: {"gpu_share": {"memory_mib": 15000}}}))
    assert "at most 14592" in str(raised.value) and "MPS server" in str(raised.value)


def test_every_shared_service_is_placed_only_where_the_agent_advertises_mps(synthesized):
    template = synthesized.inference_template("dev")
    shared = set(shared_task_definitions(template))
    services = [r["Properties"] for r in template["Resources"].values() if r["Type"] == "AWS::ECS::Service"]
    on_shares = [s for s in services if s["TaskDefinition"]["Ref"] in shared]
    assert len(on_shares) == len(shared) >= 3
    for service in on_shares:
        assert service["PlacementConstraints"] == [
            {"Type": "memberOf", "Expression": f"attribute:{MPS_CAPABILITY} exists"}
        ]
    whole = synthesized.inference_template("prod")
    assert not [
        r
        for r in whole["Resources"].values()
        if r["Type"] == "AWS::ECS::Service" and "PlacementConstraints" in r["Properties"]
    ]


def _mps_warnings(stack) -> list[str]:
    from aws_cdk.assertions import Annotations, Match

    return [
        str(w.entry.data)
        for w in Annotations.from_stack(stack).find_warning("*", Match.string_like_regexp(MPS_CAPABILITY))
    ]


def test_a_share_on_capacity_the_library_does_not_build_warns_of_the_mps_prerequisites():
    _, stack, _ = team_stack(GpuShare(4096, 25))
    (warning,) = _mps_warnings(stack)
    assert "ClusterCapacity" in warning and "nvidia-mps.service" in warning and MPS_MIN_AGENT_VERSION in warning

    from gpu_inference_constructs import GpuCapacity, GpuCapacityProps, ModelProps

    for images, expected in ((None, 0), ({"us-east-1": "ami-0123456789abcdef0"}, 1)):
        stack = cdk.Stack(cdk.App(), "Own", env=cdk.Environment(account="123456789012", region="us-east-1"))
        vpc = ec2.Vpc.from_vpc_attributes(
            stack, "Vpc", vpc_id="vpc-1", availability_zones=["us-east-1a"], private_subnet_ids=["subnet-1"]
        )
        gpus = GpuCapacity(stack, "Gpus", vpc=vpc, props=GpuCapacityProps(machine_image_ids=images))
        gpus.add_model(ModelProps(name="ranker", version="1", cpu=1024, memory_mib=3072, gpu_share=GpuShare(2048)))
        assert len([w for w in _mps_warnings(stack) if "machine_image_ids" in w]) == expected
