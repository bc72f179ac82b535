"""Zones by ID (issue 40): a zone name such as us-east-1a is a different physical zone in each account (in the oldest
regions), a zone ID such as use1-az1 is the same one everywhere. The subnets carry the IDs; a name still works, with
a warning; an ID of another region, or one that is not an ID, is refused naming the key and the fix."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Mapping
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk.assertions import Annotations, Match, Template

from gpu_inference_constructs import (
    ConfigError,
    GpuCapacity,
    GpuCapacityProps,
    InferenceLoadBalancer,
    InferenceNetwork,
    LoadBalancerProps,
    ModelStore,
    ModelStoreProps,
    NetworkProps,
    NotificationTopic,
)
from gpu_inference_constructs.core.instance_catalog import REGIONS_BY_FAMILY
from gpu_inference_constructs.networking.network import NAMES_WARNING_ID, UNCHECKED_IDS_WARNING_ID, ZONE_ID_PREFIXES
from gpu_inference_constructs.shared.cdk_interfaces import as_topic
from stacks.config import load_environment
from tests.conftest import ROOT, merge_templates
from tests.infra.conftest import ENVIRONMENTS
from tests.scenarios import scenario_environment

ACCOUNT = "123456789012"
CERTIFICATE = f"arn:aws:acm:eu-west-1:{ACCOUNT}:certificate/11111111-2222-4333-8444-555555555555"


def subnets(template: Mapping[str, Any]) -> dict[str, dict]:
    return {k: r["Properties"] for k, r in template["Resources"].items() if r["Type"] == "AWS::EC2::Subnet"}


def zone_warnings(stack: cdk.Stack, pattern: str = ".*") -> list[str]:
    found = Annotations.from_stack(stack).find_warning("*", Match.string_like_regexp(pattern))
    return [str(w.entry.data) for w in found]


# --- the app's environments, as the session synthesizes them ---------------------------------------------------


@pytest.mark.parametrize("environment", ENVIRONMENTS)
def test_each_subnet_carries_its_zone_id_and_no_zone_name(synthesized, environment):
    network = synthesized.stages[environment].config.network
    ids = list(network.availability_zone_ids[: network.max_azs])
    found = subnets(synthesized.template(environment, "Network"))
    assert ids and len(found) == 2 * len(ids), "a public and a private subnet in each zone"
    assert sorted(p["AvailabilityZoneId"] for p in found.values()) == sorted(ids * 2)
    assert [p for p in found.values() if "AvailabilityZone" in p] == []
    for tier in ("public", "private"):
        assert sorted(p["AvailabilityZoneId"] for k, p in found.items() if tier in k) == sorted(ids), tier


@pytest.mark.parametrize("environment", ENVIRONMENTS)
def test_no_template_of_the_environment_names_a_zone(synthesized, environment):
    """Nothing reads a zone name the stack cannot know: no Fn::GetAZs, no AvailabilityZone property, no zone name."""
    for stack in synthesized.stack_ids(environment):
        text = json.dumps(synthesized.template(environment, stack))
        assert "Fn::GetAZs" not in text, stack
        assert '"AvailabilityZone"' not in text and '"AvailabilityZones"' not in text, stack
        assert not re.search(r"\b[a-z]{2}-[a-z]+-\d[a-f]\b", text), f"{stack} holds a zone name"


@pytest.mark.parametrize("environment", ENVIRONMENTS)
def test_the_stage_makes_no_availability_zone_lookup(synthesized, environment):
    """ec2.Vpc reads the stack's zones even when given its own: the Stage answers for it (none, with IDs)."""
    stage = synthesized.stages[environment]
    manifest = json.loads((synthesized.outdir / f"assembly-{stage.stage_name}" / "manifest.json").read_text())
    assert manifest.get("missing", []) == []


@pytest.mark.parametrize("environment", ENVIRONMENTS)
def test_endpoints_the_fleet_and_the_load_balancer_use_one_subnet_per_zone(synthesized, environment):
    """Per-zone logic still tells the zones apart: each interface endpoint and the GPU group take the private subnet
    of every zone, the load balancer the public one of every zone."""
    network = synthesized.stages[environment].config.network
    templates = {
        synthesized.stack_names[(environment, s)]: synthesized.template(environment, s)
        for s in synthesized.stack_ids(environment)
    }
    merged = merge_templates(templates)
    by_id = {k: p["AvailabilityZoneId"] for k, p in subnets(merged).items()}

    def zones_of(refs: list, tier: str) -> list[str]:
        assert all(tier in ref["Ref"] for ref in refs), refs
        return sorted(by_id[ref["Ref"]] for ref in refs)

    ids = sorted(network.availability_zone_ids[: network.max_azs])
    endpoints = [
        r["Properties"]
        for r in merged["Resources"].values()
        if r["Type"] == "AWS::EC2::VPCEndpoint" and r["Properties"].get("VpcEndpointType") == "Interface"
    ]
    assert endpoints and all(zones_of(e["SubnetIds"], "private") == ids for e in endpoints)
    groups = [
        r["Properties"] for r in merged["Resources"].values() if r["Type"] == "AWS::AutoScaling::AutoScalingGroup"
    ]
    assert groups and all(zones_of(g["VPCZoneIdentifier"], "private") == ids for g in groups)
    (balancer,) = [
        r["Properties"]
        for r in merged["Resources"].values()
        if r["Type"] == "AWS::ElasticLoadBalancingV2::LoadBalancer"
    ]
    assert zones_of(balancer["Subnets"], "public") == ids


# --- the config loader -----------------------------------------------------------------------------------------


def dev_with_network(**network) -> dict:
    data = scenario_environment("dev")
    data["network"] = {
        **{k: v for k, v in data["network"].items() if k not in ("availability_zone_ids", "availability_zones")},
        **network,
    }
    return data


def test_the_app_environments_give_zone_ids():
    """Every environment of the tests' copy of cdk.json, which the app's own must match (tests/app), uses IDs."""
    for name in ENVIRONMENTS:
        network = scenario_environment(name)["network"]
        assert "availability_zones" not in network and network["availability_zone_ids"], name


def test_a_zone_id_of_another_region_is_refused_naming_its_region_and_the_fix():
    with pytest.raises(ConfigError) as raised:
        load_environment("dev", dev_with_network(availability_zone_ids=["use1-az1", "usw2-az2"]))
    message = str(raised.value)
    assert re.match(r"environment 'dev': network\.availability_zone_ids: \['usw2-az2'\] .*region 'us-east-1'", message)
    assert re.search(r"'usw2-az2' .*us-west-2", message)
    assert "'use1-az1'" in message and "aws ec2 describe-availability-zones --region us-east-1" in message


@pytest.mark.parametrize(
    ("zones", "hint"),
    [
        (["use1-az1", "use1az2"], None),
        (["use1-az1", "use1-az"], None),
        (["use1-az1", "USE1-AZ2"], None),
        (["us-east-1a", "us-east-1b"], "zone names such as 'us-east-1a' go in availability_zones"),
    ],
    ids=["no-dash", "no-number", "upper-case", "a-name"],
)
def test_a_malformed_zone_id_is_refused_naming_the_key_and_the_format(zones, hint):
    with pytest.raises(
        ConfigError, match=r"^environment 'dev': network\.availability_zone_ids: .*such as 'use1-az1'"
    ) as raised:
        load_environment("dev", dev_with_network(availability_zone_ids=zones))
    assert (hint in str(raised.value)) if hint else ("availability_zones" not in str(raised.value))


def test_a_zone_id_among_the_names_is_refused_pointing_at_availability_zone_ids():
    with pytest.raises(
        ConfigError, match=r"network\.availability_zones: \['use1-az2'\] .*list zone IDs in availability_zone_ids"
    ):
        load_environment("dev", dev_with_network(availability_zones=["us-east-1a", "use1-az2"]))


def test_names_and_ids_together_or_neither_are_refused():
    with pytest.raises(ConfigError, match=r"network\.availability_zone_ids: .*drop availability_zones"):
        load_environment(
            "dev",
            dev_with_network(
                availability_zone_ids=["use1-az1", "use1-az2"], availability_zones=["us-east-1a", "us-east-1b"]
            ),
        )
    with pytest.raises(ConfigError, match=r"network\.availability_zone_ids: .*list the zones by ID"):
        load_environment("dev", dev_with_network())


def test_max_azs_counts_the_zone_ids():
    with pytest.raises(ConfigError, match=r"network\.availability_zone_ids: .*list at least max_azs zones"):
        load_environment("dev", dev_with_network(availability_zone_ids=["use1-az1", "use1-az2"], max_azs=3))
    with pytest.raises(ConfigError, match=r"network\.availability_zone_ids: .*repeats a zone"):
        load_environment("dev", dev_with_network(availability_zone_ids=["use1-az1", "use1-az1"]))


def test_zone_names_still_load_and_are_still_checked_against_the_region():
    assert load_environment(
        "dev", dev_with_network(availability_zones=["us-east-1a", "us-east-1b"])
    ).network.availability_zones
    with pytest.raises(ConfigError, match=r"network\.availability_zones: \['us-west-2a'\] .*such as 'us-east-1a'"):
        load_environment("dev", dev_with_network(availability_zones=["us-east-1a", "us-west-2a"]))


def test_the_prefix_table_covers_every_region_the_catalog_lists_and_its_ids_are_well_formed():
    catalog_regions = set().union(*REGIONS_BY_FAMILY.values())
    assert catalog_regions <= set(ZONE_ID_PREFIXES)
    assert len(set(ZONE_ID_PREFIXES.values())) == len(ZONE_ID_PREFIXES), "one prefix per region"
    # AWS's own examples (docs/aws-facts.md): use1-az1 (us-east-1), euw1-az1 (eu-west-1); the prefix is the region's
    # parts' initials, 'ap-northeast-1' -> apne1.
    assert ZONE_ID_PREFIXES["us-east-1"] == "use1" and ZONE_ID_PREFIXES["eu-west-1"] == "euw1"
    for region, prefix in ZONE_ID_PREFIXES.items():
        area, *direction, number = region.split("-")
        initials = "".join(
            word[0] if word not in ("northeast", "southeast") else word[0] + word[5] for word in direction
        )
        assert prefix == f"{area}{initials}{number}", region


# --- the library in a team's own plain cdk.App() --------------------------------------------------------------


def team_app(region: str = "eu-west-1", **network) -> tuple[cdk.Stack, InferenceNetwork]:
    """What a team writes without this repository's stacks: a network, GPUs and a load balancer on it, and an
    instance of its own in one of the private subnets."""
    stack = cdk.Stack(cdk.App(), "Search", env=cdk.Environment(account=ACCOUNT, region=region))
    net = InferenceNetwork(stack, "Net", props=NetworkProps(**network))
    alerts = NotificationTopic(stack, "Alerts", emails=("ml-oncall@example.com",))
    GpuCapacity(
        stack,
        "Gpus",
        vpc=net.vpc,
        subnets=net.private_subnets,
        topic=as_topic(alerts.topic),
        props=GpuCapacityProps(instance_types=("g5.xlarge", "g4dn.xlarge"), max_capacity=8),
    )
    store = ModelStore(stack, "Models", props=ModelStoreProps())
    InferenceLoadBalancer(
        stack,
        "Alb",
        vpc=net.vpc,
        access_logs_bucket=store.access_logs_bucket,
        props=LoadBalancerProps(certificate_arn=CERTIFICATE.replace("eu-west-1", region)),
    )
    ec2.Instance(
        stack,
        "Bastion",
        vpc=net.vpc,
        vpc_subnets=ec2.SubnetSelection(subnets=[net.vpc.isolated_subnets[1]]),
        instance_type=ec2.InstanceType("t3.micro"),
        require_imdsv2=True,
        machine_image=ec2.MachineImage.generic_linux({region: "ami-0123456789abcdef0"}),
    )
    return stack, net


@pytest.fixture(scope="module")
def team() -> tuple[cdk.Stack, Mapping[str, Any]]:
    stack, _ = team_app(availability_zone_ids=("euw1-az3", "euw1-az1"))
    return stack, Template.from_stack(stack).to_json()


def test_a_teams_plain_app_places_its_subnets_by_zone_id_without_a_warning(team):
    stack, template = team
    found = subnets(template)
    assert sorted((k.split("Subnet")[0].removeprefix("NetVpc"), p["AvailabilityZoneId"]) for k, p in found.items()) == [
        ("private", "euw1-az1"),
        ("private", "euw1-az3"),
        ("public", "euw1-az1"),
        ("public", "euw1-az3"),
    ]
    assert [k for k, p in found.items() if "AvailabilityZone" in p] == []
    assert zone_warnings(stack, ".*(availability_zone|zone ID|zone name).*") == []


def test_a_teams_instance_in_a_subnet_placed_by_id_gets_the_zones_name_at_deploy(team):
    """A subnet's availability_zone is the name CloudFormation reports for its zone: an instance, a volume or anything
    else that needs a name gets Fn::GetAtt of the zone's subnet, never the ID where a name belongs."""
    _, template = team
    (instance,) = [r["Properties"] for r in template["Resources"].values() if r["Type"] == "AWS::EC2::Instance"]
    subnet, attribute = instance["AvailabilityZone"]["Fn::GetAtt"]
    assert attribute == "AvailabilityZone"
    instance_subnet = instance["SubnetId"]["Ref"]
    assert (
        subnets(template)[subnet]["AvailabilityZoneId"]
        == subnets(template)[instance_subnet]["AvailabilityZoneId"]
        == "euw1-az1"
    )


def test_cfn_lint_accepts_the_zone_ids_and_refuses_a_subnet_with_both(team, tmp_path):
    """AvailabilityZoneId is a real AWS::EC2::Subnet property and AvailabilityZone one of its attributes; the planted
    copy, with a zone name beside the ID, proves cfn-lint reads the pair (E3020)."""
    _, template = team
    good, planted = tmp_path / "team.json", tmp_path / "planted.json"
    good.write_text(json.dumps(template))
    broken = json.loads(json.dumps(template))
    next(iter(subnets(broken).values()))["AvailabilityZone"] = "eu-west-1a"
    planted.write_text(json.dumps(broken))
    run = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "cfn-lint"), "--format", "parseable", "--", str(good), str(planted)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    findings = [line.split(":") for line in run.stdout.splitlines() if line.strip()]
    assert [f for f in findings if f[0] == str(good) and f[5].startswith("E")] == [], run.stdout
    assert "E3020" in {f[5] for f in findings if f[0] == str(planted)}, run.stdout + run.stderr


def test_zone_names_still_place_the_subnets_and_warn_naming_availability_zone_ids():
    stack, _ = team_app(availability_zones=("eu-west-1a", "eu-west-1b"))
    found = subnets(Template.from_stack(stack).to_json())
    assert sorted(p["AvailabilityZone"] for p in found.values()) == [
        "eu-west-1a",
        "eu-west-1a",
        "eu-west-1b",
        "eu-west-1b",
    ]
    assert [p for p in found.values() if "AvailabilityZoneId" in p] == []
    (warning,) = zone_warnings(stack, ".*zone names.*")
    assert warning.startswith("availability_zones: ['eu-west-1a', 'eu-west-1b'] are zone names")
    assert "another zone in each account, one without the GPU instance types or a VPC endpoint service" in warning
    assert "availability_zone_ids=('euw1-az1', 'euw1-az2', ...)" in warning
    assert "aws ec2 describe-availability-zones --region eu-west-1" in warning
    assert warning.endswith(f"[ack: {NAMES_WARNING_ID}]")


def test_zone_ids_of_a_region_the_table_lacks_go_unchecked_with_a_warning():
    stack = cdk.Stack(cdk.App(), "Far", env=cdk.Environment(account=ACCOUNT, region="me-central-1"))
    net = InferenceNetwork(stack, "Net", props=NetworkProps(availability_zone_ids=("mec1-az1", "mec1-az2")))
    assert sorted(p["AvailabilityZoneId"] for p in subnets(Template.from_stack(stack).to_json()).values()) == [
        "mec1-az1",
        "mec1-az1",
        "mec1-az2",
        "mec1-az2",
    ]
    (warning,) = zone_warnings(stack, ".*ZONE_ID_PREFIXES.*")
    assert "region 'me-central-1' is not in gpu_inference_constructs.networking.network.ZONE_ID_PREFIXES" in warning
    assert warning.endswith(f"[ack: {UNCHECKED_IDS_WARNING_ID}]")
    assert net.vpc.availability_zones  # the zones, as the names CloudFormation will report


def test_an_environment_agnostic_stack_takes_zone_ids():
    stack = cdk.Stack(cdk.App(), "Agnostic")
    InferenceNetwork(stack, "Net", props=NetworkProps(availability_zone_ids=("use1-az1", "use1-az2")))
    template = Template.from_stack(stack).to_json()
    assert sorted(p["AvailabilityZoneId"] for p in subnets(template).values()) == [
        "use1-az1",
        "use1-az1",
        "use1-az2",
        "use1-az2",
    ]
    assert "Fn::GetAZs" not in json.dumps(template)


def test_the_construct_refuses_a_zone_id_of_its_stacks_region():
    stack = cdk.Stack(cdk.App(), "Team", env=cdk.Environment(account=ACCOUNT, region="eu-west-1"))
    with pytest.raises(ConfigError, match=r"^availability_zone_ids: .*start with 'euw1-az'"):
        InferenceNetwork(stack, "Net", props=NetworkProps(availability_zone_ids=("use1-az1", "use1-az2")))


def test_a_selection_by_zone_takes_the_vpcs_zone_not_a_name():
    """What constructs/README.md promises: by `vpc.availability_zones[i]` (the i-th ID's zone) a selection finds that
    zone's subnet; by a name it finds none (CloudFormation knows the name only at deploy)."""
    stack, net = team_app(availability_zone_ids=("euw1-az3", "euw1-az1"))
    by_zone = net.vpc.select_subnets(subnet_group_name="private", availability_zones=[net.vpc.availability_zones[1]])
    (subnet,) = stack.resolve(by_zone.subnet_ids)
    assert subnets(Template.from_stack(stack).to_json())[subnet["Ref"]]["AvailabilityZoneId"] == "euw1-az1"
    assert net.vpc.select_subnets(availability_zones=["eu-west-1a"]).subnet_ids == []
