"""The library examples of README.md ("Using the library in your own stacks") and of constructs/README.md ("More
examples"), run as another team would run them; and README.md's `cdk.json` environment, loaded as synth loads it.

Each ``# Example:`` block is executed exactly as written: a plain ``cdk.App()`` with no context
at all, cdk-nag's AwsSolutions checks registered, ``app.synth()`` (which fails on any unacknowledged
finding), CDK's own CloudFormation validation on as `cdk synth` runs it (the suite otherwise turns it off:
tests/conftest.py). Then again with cdk.json's feature flags as the app's context. The tests assert what the
pages promise about each container definition and that both flag sets give the same containers.
"""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

import aws_cdk as cdk
import pytest
from cdk_nag import AwsSolutionsChecks

from tests.conftest import ROOT, cloudformation_validation_findings, scenario_context, validated_app
from tests.consumer.team_model import write_page_package
from tests.readable_templates import ReadableSnapshot, render_stacks

EXAMPLE = re.compile(r"```python\n(# Example: (.+?)\n.*?)```", re.S)
PAGES = ("README.md", "constructs/README.md")
NAMES = {
    "front-door": "one embedding model on a GPU fleet of its own",
    "existing-vpc": "our server in an existing VPC",
    "vllm": "vLLM on a 4-GPU instance",
    "own-image": "a team's own image, on the team's own cluster, listener, bucket and key",
    "team-handler": "a team's own handler in the bundled server's image",
    "canary": "a canary rollout that also rolls back on your own alarm",
}


def located_examples() -> dict[str, tuple[str, str]]:
    """key -> (the page it is on, its source)."""
    found = {title: (page, source) for page in PAGES for source, title in EXAMPLE.findall((ROOT / page).read_text())}
    return {key: found[title] for key, title in NAMES.items() if title in found}


def readme_examples() -> dict[str, str]:
    return {key: source for key, (_, source) in located_examples().items()}


def run_example(source: str, context: dict | None, page: str = "README.md") -> dict:
    """Execute one page's block, its ``cdk.App()`` made by validated_app (CDK's CloudFormation validation on, as
    `cdk synth` runs it) and given ``context`` (the only change)."""
    assert source.count("cdk.App()") == 1
    source = source.replace("cdk.App()", "__app__(context=__context__)")
    namespace = {"__name__": "readme_example", "__context__": context, "__app__": validated_app}
    exec(compile(source, page, "exec"), namespace)
    app, stack = namespace["app"], namespace["stack"]
    namespace["template"] = app.synth().get_stack_by_name(stack.stack_name).template
    namespace["validation_findings"] = cloudformation_validation_findings(Path(app.outdir))
    return namespace


_RUNS: dict[str, tuple] = {}


def ran(name: str) -> tuple[str, dict, dict]:
    """(name, the plain run, the run under cdk.json's flags) of one example, each synthesized once."""
    if name not in _RUNS:
        page, source = located_examples()[name]
        with pytest.MonkeyPatch.context() as patch, tempfile.TemporaryDirectory() as workdir:
            if name == "team-handler":  # its app runs beside the page's handler package, as the team's would
                write_page_package(Path(workdir))
                patch.chdir(workdir)
            else:
                patch.chdir(ROOT)  # some examples build inference_image/ as an asset, as from a checkout
            _RUNS[name] = (name, run_example(source, None, page), run_example(source, scenario_context(), page))
    return _RUNS[name]


@pytest.fixture(params=list(NAMES))
def example(request):
    return ran(request.param)


def test_each_example_passes_cdks_cloudformation_validation(example):
    """What `cdk synth` would print from CDK's built-in validation for a team that copies the example: nothing, with
    or without cdk.json's flags."""
    _, plain, flagged = example
    assert (plain["validation_findings"], flagged["validation_findings"]) == ([], [])


def containers(template: dict) -> dict:
    (task,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::ECS::TaskDefinition"]
    return {c["Name"]: c for c in task["Properties"]["ContainerDefinitions"]}


def target_group(template: dict) -> dict:
    """The production target group (a canary's alternate one health-checks the same path)."""
    (group,) = [
        r["Properties"]
        for k, r in template["Resources"].items()
        if r["Type"] == "AWS::ElasticLoadBalancingV2::TargetGroup" and "AlternateTargetGroup" not in k
    ]
    return group


def test_the_pages_have_the_examples():
    assert sorted(readme_examples()) == sorted(NAMES)
    assert located_examples()["front-door"][0] == "README.md"


def test_the_readmes_cdk_json_environment_loads_as_synth_loads_it():
    """README.md's `cdk.json` block is valid config: the loader synth uses accepts it (it refuses unknown keys)."""
    from stacks.config import load_environments

    (block,) = re.findall(r"```json\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    (environment,) = load_environments(json.loads(block)["context"])
    assert environment.name == "perf" and [model.name for model in environment.models] == ["minilm"]


def test_the_plain_app_has_no_context_and_no_feature_flags(example):
    _, plain, _ = example
    app = plain["app"]
    assert not cdk.FeatureFlags.of(app).is_enabled("@aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy")
    assert app.node.try_get_context("environments") is None


def test_cdk_nag_finds_nothing_unacknowledged_under_either_flag_set(example):
    """Synth already raised on an unacknowledged finding; each acknowledgement also sits on its own resource."""
    _, plain, flagged = example
    for namespace in (plain, flagged):
        app = namespace["app"]
        for violation in AwsSolutionsChecks().validate_scope(app).violations:
            for resource in violation.violating_resources:
                construct = app
                assert resource.construct_path is not None  # cdk-nag names each construct it flags
                for part in resource.construct_path.split("/"):
                    construct = construct.node.find_child(part)
                reasons = {
                    rule: reason
                    for entry in construct.node.metadata
                    if entry.type == cdk.Validations.ACKNOWLEDGED_RULES_METADATA_KEY
                    for rule, reason in entry.data.items()
                }
                assert len(reasons.get(f"AwsSolutions::{violation.rule_name}", "")) >= 60, resource.construct_path


def test_the_same_containers_under_cdk_json_flags(example):
    _, plain, flagged = example
    for name, container in containers(plain["template"]).items():
        other = containers(flagged["template"])[name]
        for key in (
            "Command",
            "EntryPoint",
            "PortMappings",
            "HealthCheck",
            "ResourceRequirements",
            "LinuxParameters",
            "User",
            "ReadonlyRootFilesystem",
            "Cpu",
            "MemoryReservation",
            "MountPoints",
            "DependsOn",
            "Essential",
        ):
            assert container.get(key) == other.get(key), f"{name}.{key}"
    assert target_group(plain["template"])["HealthCheckPath"] == target_group(flagged["template"])["HealthCheckPath"]


@pytest.mark.parametrize("name", ["front-door", "existing-vpc"])
def test_our_server_examples_run_our_server_as_promised(name):
    _, plain, _ = ran(name)
    by_name = containers(plain["template"])
    assert set(by_name) == {"server", "metrics-collector"}, "the server and the collector its traces go to"
    server = by_name["server"]
    assert server["Command"] == ["python", "-m", "inference_server"]
    assert server["PortMappings"] == [{"ContainerPort": 8080, "Name": "http", "Protocol": "tcp"}]
    assert target_group(plain["template"])["HealthCheckPath"] == "/ready"
    assert server["ResourceRequirements"] == [{"Type": "GPU", "Value": "1"}]
    assert "SharedMemorySize" not in server["LinuxParameters"]
    assert (server["User"], server["ReadonlyRootFilesystem"]) == ("10001:10001", True)
    (subnets,) = [
        r["Properties"]["VPCZoneIdentifier"]
        for r in plain["template"]["Resources"].values()
        if r["Type"] == "AWS::AutoScaling::AutoScalingGroup"
    ]
    private = {
        "front-door": [{"Ref": "NetVpcprivateSubnet1Subnet5462C604"}, {"Ref": "NetVpcprivateSubnet2SubnetD63D8069"}],
        "existing-vpc": ["subnet-0bbbbbbbbbbbbbbb1", "subnet-0bbbbbbbbbbbbbbb2"],
    }[name]
    assert subnets == private, "the GPU instances go in the VPC's private subnets"


def test_vllm_example_reserves_four_gpus_and_serves_with_tensor_parallelism():
    _, plain, _ = ran("vllm")
    by_name = containers(plain["template"])
    server, fetcher, collector = by_name["server"], by_name["model-fetch"], by_name["metrics-collector"]
    command = [*server["EntryPoint"], *server["Command"]]
    assert command[:3] == ["vllm", "serve", "/scratch/model"]
    assert command[command.index("--tensor-parallel-size") + 1] == "4"
    assert command[command.index("--served-model-name") + 1] == "llama-2-13b-chat"
    assert command[command.index("--max-model-len") + 1] == "4096"
    assert command[command.index("--port") + 1] == "8000"
    assert server["PortMappings"] == [{"ContainerPort": 8000, "Name": "http", "Protocol": "tcp"}]
    group = target_group(plain["template"])
    assert (group["HealthCheckPath"], group["Port"]) == ("/health", 8000)
    assert server["ResourceRequirements"] == [{"Type": "GPU", "Value": "4"}]
    assert server["LinuxParameters"]["SharedMemorySize"] == 16384
    assert (server["User"], server["ReadonlyRootFilesystem"], server["Privileged"]) == ("1000:1000", True, False)
    assert server["DependsOn"] == [{"Condition": "SUCCESS", "ContainerName": "model-fetch"}]
    environment = {e["Name"]: e["Value"] for e in server["Environment"]}
    assert environment["HF_HUB_OFFLINE"] == "1"
    # Only the key named "default" of the example's api_keys_secret: vLLM takes one literal key.
    (secret,) = server["Secrets"]
    assert secret["Name"] == "VLLM_API_KEY" and secret["ValueFrom"]["Fn::Join"][1][-1] == ":default::"
    # The weights come from the versioned model bucket, into the scratch volume, before vLLM starts.
    fetch_environment = {e["Name"]: e["Value"] for e in fetcher["Environment"]}
    assert fetch_environment["MODEL_URI"]["Fn::Join"][1][-1] == "/models/llama-13b/2026-11-01/"
    assert fetch_environment["MODEL_DIR"] == "/scratch/model" and "aws s3 sync" in fetcher["Command"][0]
    # The fetch runs as the server's user with no capabilities; only scratch-owner (mkdir, chown) is root, with CHOWN.
    assert fetcher["Essential"] is False and fetcher["LinuxParameters"]["Capabilities"] == {"Drop": ["ALL"]}
    assert fetcher["User"] == server["User"] and fetcher["DependsOn"] == [
        {"Condition": "SUCCESS", "ContainerName": "scratch-owner"}
    ]
    assert by_name["scratch-owner"]["LinuxParameters"]["Capabilities"] == {"Add": ["CHOWN"], "Drop": ["ALL"]}
    assert collector["Essential"] is False and collector["RestartPolicy"] == {"Enabled": True}


def test_vllm_example_scales_on_llm_signals_not_requests_per_target():
    _, plain, _ = ran("vllm")
    policies = [
        r["Properties"]
        for r in plain["template"]["Resources"].values()
        if r["Type"] == "AWS::ApplicationAutoScaling::ScalingPolicy"
    ]
    tracking = [
        p["TargetTrackingScalingPolicyConfiguration"] for p in policies if p["PolicyType"] == "TargetTrackingScaling"
    ]
    assert [t["CustomizedMetricSpecification"]["MetricName"] for t in tracking] == ["vllm_num_requests_running"]
    assert tracking[0]["TargetValue"] == 48
    alarms = [r["Properties"] for r in plain["template"]["Resources"].values() if r["Type"] == "AWS::CloudWatch::Alarm"]
    step_metrics = {name for a in alarms for name in re.findall(r'"MetricName": "([^"]+)"', json.dumps(a))}
    assert {"vllm_num_requests_waiting", "vllm_kv_cache_usage_perc", "TargetResponseTime"} <= step_metrics
    assert "RequestCountPerTarget" not in str(policies)


def test_own_image_example_uses_the_teams_listener_bucket_and_key():
    _, plain, _ = ran("own-image")
    template = plain["template"]
    server = containers(template)["server"]
    assert server["Command"] == ["ranker-serve", "--port", "9000", "--model-dir", "/scratch/model"]
    assert server["PortMappings"] == [{"ContainerPort": 9000, "Name": "http", "Protocol": "tcp"}]
    assert target_group(template)["HealthCheckPath"] == "/healthz/ready"
    assert server["ResourceRequirements"] == [{"Type": "GPU", "Value": "1"}]
    assert server["LinuxParameters"]["SharedMemorySize"] == 2048
    assert server["User"] == "1000:1000"
    (rule,) = [
        r["Properties"]
        for r in template["Resources"].values()
        if r["Type"] == "AWS::ElasticLoadBalancingV2::ListenerRule"
    ]
    assert (
        rule["ListenerArn"].endswith(":listener/app/ml-platform/0123456789abcdef/0123456789abcdef")
        and rule["Priority"] == 120
    )
    (group,) = [r["Properties"] for r in template["Resources"].values() if r["Type"] == "AWS::Logs::LogGroup"]
    assert group["KmsKeyId"].endswith(":key/11111111-2222-4333-8444-555555555555")
    (policy,) = [
        r["Properties"] for k, r in template["Resources"].items() if r["Type"] == "AWS::IAM::Policy" and "TaskRole" in k
    ]
    get = next(s for s in policy["PolicyDocument"]["Statement"] if s["Action"] == "s3:GetObject")
    assert get["Resource"]["Fn::Join"][1][-1] == ":s3:::ml-platform-artifacts-123456789012/serving/models/ranker/*"
    for kind in ("AWS::ECS::Cluster", "AWS::S3::Bucket", "AWS::KMS::Key", "AWS::ElasticLoadBalancingV2::LoadBalancer"):
        assert not [r for r in template["Resources"].values() if r["Type"] == kind], (
            f"the example brings its own {kind}"
        )


def test_snapshot_of_the_vllm_example(snapshot):
    _, plain, _ = ran("vllm")
    assert render_stacks({"Example": plain["template"]}) == snapshot(extension_class=ReadableSnapshot)
