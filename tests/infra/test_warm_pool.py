"""The GPU group's warm pool (issue 44): the template's pool, hook and launch function; what the synthesized user data
does on an instance warming into the pool and on one going into service, run in a simulation with stubbed curl, docker,
python3 and systemctl (each check able to fail: planted twins); the launch function against botocore's model of the
Auto Scaling API; the instance's ECR login signed as botocore signs it; who may call what; the config's errors."""

from __future__ import annotations

import base64
import datetime
import importlib.util
import json
import subprocess
from pathlib import Path
from typing import cast

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr as ecr
from aws_cdk.assertions import Annotations, Match, Template
from moto.events.models import EventPattern
from moto.events.utils import EventMessageType

from gpu_inference_constructs.capacity import warm_pool_ecr_login, warm_pool_handler
from gpu_inference_constructs.capacity.gpu_capacity import GpuCapacity, GpuCapacityProps
from gpu_inference_constructs.capacity.warm_pool import (
    ECR_LOGIN_PATH,
    HANDLER_SOURCE,
    HOOK_NAME,
    INTO_SERVICE,
    WARM_POOLS_CHECK,
    WarmPoolProps,
    warm_pool_script,
)
from gpu_inference_constructs.core.errors import ConfigError
from gpu_inference_constructs.core.settings import from_dict
from stacks.config import load_environment
from tests.infra.aws_policies import TemplateWorld
from tests.infra.conftest import ENVIRONMENTS
from tests.scenarios import scenario_environment

OTHER_ACCOUNT = "999999999999"
EC2_USER_DATA_LIMIT = 16384  # bytes before base64 (EC2 user guide, "Run commands when you launch an EC2 instance")


@pytest.fixture(scope="module")
def prod(synthesized) -> tuple[GpuCapacityProps, dict]:
    config = synthesized.stages["prod"].config
    return config.capacity, synthesized.inference_template("prod")


@pytest.fixture(scope="module")
def world(synthesized) -> TemplateWorld:
    config = synthesized.stages["prod"].config
    return TemplateWorld(synthesized.inference_template("prod"), config.account, config.region)


def of_type(template: dict, kind: str, prefix: str = "GpuCapacity") -> dict:
    return {k: r for k, r in template["Resources"].items() if r["Type"] == kind and k.startswith(prefix)}


def only(template: dict, kind: str, prefix: str = "GpuCapacity") -> tuple[str, dict]:
    ((logical_id, resource),) = of_type(template, kind, prefix).items()
    return logical_id, resource


# --- The template ----------------------------------------------------------------------------------------------


def test_prod_has_a_pool_of_stopped_instances_and_no_reuse_on_scale_in(prod):
    props, template = prod
    assert props.warm_pool == WarmPoolProps(min_size=2)
    group, _ = only(template, "AWS::AutoScaling::AutoScalingGroup")
    hook, _ = only(template, "AWS::AutoScaling::LifecycleHook")
    _, pool = only(template, "AWS::AutoScaling::WarmPool")
    assert pool["Properties"] == {
        "AutoScalingGroupName": {"Ref": group},
        "PoolState": "Stopped",
        "MinSize": 2,
        "MaxGroupPreparedCapacity": 2,
    }  # an absolute size: no InstanceReusePolicy at all
    assert hook in pool["DependsOn"]  # no instance warms before the hook holds it while it pulls


@pytest.mark.parametrize("environment", [e for e in ENVIRONMENTS if e != "prod"])
def test_the_pool_is_off_elsewhere(synthesized, environment):
    template = synthesized.inference_template(environment)
    assert not of_type(template, "AWS::AutoScaling::WarmPool", "") and not of_type(
        template, "AWS::AutoScaling::LifecycleHook", ""
    )
    assert WARM_POOLS_CHECK not in json.dumps(template)
    assert synthesized.stages[environment].config.capacity.warm_pool is None


def test_the_launch_hook_holds_a_warming_instance_for_prepare_seconds_then_continues(prod):
    props, template = prod
    assert props.warm_pool is not None
    group, _ = only(template, "AWS::AutoScaling::AutoScalingGroup")
    _, hook = only(template, "AWS::AutoScaling::LifecycleHook")
    assert hook["Properties"] == {
        "AutoScalingGroupName": {"Ref": group},
        "LifecycleHookName": HOOK_NAME,
        "LifecycleTransition": "autoscaling:EC2_INSTANCE_LAUNCHING",
        "HeartbeatTimeout": props.warm_pool.prepare_seconds,
        "DefaultResult": "CONTINUE",
    }
    function, _ = only(template, "AWS::Lambda::Function")
    rule, _ = only(template, "AWS::Events::Rule", "GpuCapacityWarmPoolLaunches")
    assert {function, rule} <= set(hook["DependsOn"])  # a launch into service never waits for a function not yet made


def user_data_parts(template: dict) -> list:
    _, launch_template = only(template, "AWS::EC2::LaunchTemplate")
    return launch_template["Properties"]["LaunchTemplateData"]["UserData"]["Fn::Base64"]["Fn::Join"][1]


def rendered(template: dict, cluster: str = "prod-cluster") -> str:
    """The user data as EC2 hands it to cloud-init: the cluster's name for its Ref, each image asset's URI with the
    partition's URL suffix."""
    text = []
    for part in user_data_parts(template):
        if isinstance(part, str):
            text.append(part)
        elif list(part) == ["Ref"] and part["Ref"].startswith("GpuCapacityCluster"):
            text.append(cluster)
        elif list(part) == ["Fn::Sub"]:
            text.append(part["Fn::Sub"].replace("${AWS::URLSuffix}", "amazonaws.com"))
        elif part == {"Ref": "AWS::URLSuffix"}:  # a mirror's URI in its repository (an ECR image of the account)
            text.append("amazonaws.com")
        else:
            raise AssertionError(f"user data part the simulation cannot render: {part}")
    return "".join(text)


def image_uri(image) -> str:
    """A container's Image as the instance sees it: an asset's Fn::Sub, a mirror's Fn::Join, or a public name."""
    if isinstance(image, str):
        return image
    if "Fn::Sub" in image:
        return image["Fn::Sub"].replace("${AWS::URLSuffix}", "amazonaws.com")
    return "".join("amazonaws.com" if part == {"Ref": "AWS::URLSuffix"} else part for part in image["Fn::Join"][1])


def images_of(template: dict) -> list[str]:
    """The URIs of the model stacks' image assets, as their task definitions name them."""
    found = {
        json.dumps(c["Image"])
        for r in template["Resources"].values()
        if r["Type"] == "AWS::ECS::TaskDefinition"
        for c in r["Properties"]["ContainerDefinitions"]
    }
    return sorted(
        json.loads(i)["Fn::Sub"].replace("${AWS::URLSuffix}", "amazonaws.com") for i in found if "Fn::Sub" in i
    )


def every_image_of(template: dict) -> dict[str, set[str]]:
    """Each container's image URI -> the containers that run it, over every task definition."""
    found: dict[str, set[str]] = {}
    for resource in template["Resources"].values():
        if resource["Type"] == "AWS::ECS::TaskDefinition":
            for container in resource["Properties"]["ContainerDefinitions"]:
                found.setdefault(image_uri(container["Image"]), set()).add(container["Name"])
    return found


def test_the_user_data_sets_the_warm_pools_check_and_names_each_models_image_once(prod):
    _, template = prod
    script = rendered(template)
    assert f"\n{WARM_POOLS_CHECK}\n" in script.split("EOF")[1]  # inside the agent's settings heredoc
    images = images_of(template)
    task_definitions = [r for r in template["Resources"].values() if r["Type"] == "AWS::ECS::TaskDefinition"]
    assert len(images) == 1 and len(task_definitions) > 1  # every prod model runs the one bundled image asset
    assert script.count(images[0]) == 1  # two models of one image: pulled once
    assert len(script.encode()) < EC2_USER_DATA_LIMIT


def test_the_pool_pulls_every_image_a_task_runs_sidecars_included(prod):
    """Issue 52.7: a task started on an instance from the pool pulls nothing: the server's image and each sidecar's
    (prod: the CloudWatch agent collector from its ECR mirror) are in the warming instance's pulls, each once."""
    _, template = prod
    script = rendered(template)
    images = every_image_of(template)
    assert {"server", "metrics-collector"} <= set().union(*images.values()) and len(images) >= 2
    for image, containers in images.items():
        assert script.count(f"'{image}'") == 1, (image, containers)
    assert len(script.encode()) < EC2_USER_DATA_LIMIT


def test_the_instances_may_pull_the_collectors_mirror(world):
    role = world.only("AWS::IAM::Role", "GpuCapacityInstanceRole")
    mirror = f"arn:aws:ecr:{world.region}:{world.account}:repository/mirror/aws-otel-collector"
    assert world.role_may(role, "ecr:BatchGetImage", mirror, {}) and world.role_may(
        role, "ecr:GetDownloadUrlForLayer", mirror, {}
    )


def test_the_instances_may_pull_the_asset_repository_and_no_other(world):
    role = world.only("AWS::IAM::Role", "GpuCapacityInstanceRole")
    repository = (
        f"arn:aws:ecr:{world.region}:{world.account}:repository/"
        f"cdk-hnb659fds-container-assets-{world.account}-{world.region}"
    )
    for action in ("ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer", "ecr:BatchCheckLayerAvailability"):
        assert world.role_may(role, action, repository, {}), action
    assert not world.role_may(role, "ecr:BatchGetImage", repository.replace("container-assets", "other"), {})
    assert world.role_may(role, "ecr:GetAuthorizationToken", "*", {})


def test_the_launch_function_completes_this_groups_hook_only_and_writes_its_encrypted_log_group(world):
    function = world.only("AWS::Lambda::Function", "GpuCapacityWarmPoolLaunches")
    properties = world.resources[function]["Properties"]
    role = properties["Role"]["Fn::GetAtt"][0]
    group = world.ref(world.only("AWS::AutoScaling::AutoScalingGroup"))
    ours = (
        f"arn:aws:autoscaling:{world.region}:{world.account}:autoScalingGroup:0d3e2b1a-1111-2222-3333-444455556666:"
        f"autoScalingGroupName/{group}"
    )
    assert world.role_may(role, "autoscaling:CompleteLifecycleAction", ours, {})
    assert not world.role_may(role, "autoscaling:CompleteLifecycleAction", ours.replace(group, "another-group"), {})
    assert not world.role_may(role, "autoscaling:SetDesiredCapacity", ours, {})  # ECS owns the desired capacity
    log_group = properties["LoggingConfig"]["LogGroup"]["Ref"]
    assert world.role_may(role, "logs:PutLogEvents", world.arn(log_group).removesuffix("*") + "log-stream:x", {})
    key = world.resources[log_group]["Properties"]["KmsKeyId"]["Fn::GetAtt"][0]
    assert key.startswith("LogsKey")
    context = {"kms:EncryptionContext:aws:logs:arn": world.log_group_arn(log_group)}
    assert world.service_may(f"logs.{world.region}.amazonaws.com", "kms:GenerateDataKey", key, world.arn(key), context)


# --- What EventBridge and the function do with Auto Scaling's events ------------------------------------------


# EC2 Auto Scaling user guide, "Warm pool example events and patterns": a launch lifecycle action.
DOCUMENTED = {
    "version": "0",
    "id": "12345678-1234-1234-1234-123456789012",
    "detail-type": "EC2 Instance-launch Lifecycle Action",
    "source": "aws.autoscaling",
    "account": "123456789012",
    "time": "2021-01-13T00:12:37.214Z",
    "region": "us-west-2",
    "resources": ["auto-scaling-group-arn"],
    "detail": {
        "LifecycleActionToken": "71514b9d-6a40-4b26-8523-05e7eEXAMPLE",
        "AutoScalingGroupName": "my-asg",
        "LifecycleHookName": "my-launch-lifecycle-hook",
        "EC2InstanceId": "i-1234567890abcdef0",
        "LifecycleTransition": "autoscaling:EC2_INSTANCE_LAUNCHING",
        "NotificationMetadata": "additional-info",
        "Origin": "EC2",
        "Destination": "WarmPool",
    },
}


def launch_event(world: TemplateWorld | None = None, **detail) -> dict:
    event = json.loads(json.dumps(DOCUMENTED))
    if world is not None:
        event.update(account=world.account, region=world.region)
        event["detail"].update(
            AutoScalingGroupName=world.ref(world.only("AWS::AutoScaling::AutoScalingGroup")),
            LifecycleHookName=HOOK_NAME,
        )
    event["detail"].update(detail)
    return event


@pytest.mark.parametrize(
    "origin, destination, matches",
    [
        ("WarmPool", "AutoScalingGroup", True),  # a warm start
        ("EC2", "AutoScalingGroup", True),  # the pool is empty: a launch straight into the group
        ("EC2", "WarmPool", False),  # warming: the heartbeat ends it
    ],
)
def test_the_rule_sends_launches_into_service_of_this_groups_hook_only(world, origin, destination, matches):
    rule = world.only("AWS::Events::Rule", "GpuCapacityWarmPoolLaunches")
    pattern = EventPattern.load(json.dumps(world.resolve(world.resources[rule]["Properties"]["EventPattern"])))
    event = launch_event(world, Origin=origin, Destination=destination)
    assert pattern.matches_event(cast(EventMessageType, event)) is matches
    for other in (
        {"AutoScalingGroupName": "another-group"},
        {"LifecycleHookName": "ecs-managed-draining-termination-hook"},
    ):
        assert not pattern.matches_event(
            cast(EventMessageType, launch_event(world, Origin=origin, Destination=destination, **other))
        )
    function = world.only("AWS::Lambda::Function", "GpuCapacityWarmPoolLaunches")
    assert world.service_may(
        "events.amazonaws.com",
        "lambda:InvokeFunction",
        function,
        world.arn(function),
        {"aws:SourceArn": world.arn(rule), "aws:SourceAccount": world.account},
    )


def autoscaling_client():
    import boto3

    return boto3.client(
        "autoscaling", region_name="us-west-2", aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="secret"
    )


def test_the_function_continues_a_launch_into_service_with_parameters_the_api_accepts(capsys):
    """botocore's Stubber checks the call against the Auto Scaling API's own model (names, types, required)."""
    from botocore.stub import Stubber

    client = autoscaling_client()
    event = launch_event(Origin="WarmPool", Destination=INTO_SERVICE)
    detail = event["detail"]
    with Stubber(client) as stub:
        stub.add_response(
            "complete_lifecycle_action",
            {},
            {
                "LifecycleHookName": detail["LifecycleHookName"],
                "AutoScalingGroupName": detail["AutoScalingGroupName"],
                "LifecycleActionToken": detail["LifecycleActionToken"],
                "InstanceId": detail["EC2InstanceId"],
                "LifecycleActionResult": "CONTINUE",
            },
        )
        assert warm_pool_handler.handler(event, None, client) == {"completed": True}
        stub.assert_no_pending_responses()
    assert json.loads(capsys.readouterr().out)["completed"] is True


def test_the_function_leaves_a_warming_instance_to_the_heartbeat_and_survives_a_spent_token():
    from botocore.stub import Stubber

    client = autoscaling_client()
    with Stubber(client) as stub:  # no response queued: any call fails the test
        assert warm_pool_handler.handler(launch_event(Destination="WarmPool"), None, client) == {"completed": False}
        stub.add_client_error("complete_lifecycle_action", "ValidationError", "No active Lifecycle Action found")
        assert warm_pool_handler.handler(launch_event(Destination=INTO_SERVICE), None, client) == {"completed": False}
        stub.assert_no_pending_responses()


def test_the_deployed_function_is_the_tested_module(world, tmp_path):
    properties = world.resources[world.only("AWS::Lambda::Function", "GpuCapacityWarmPoolLaunches")]["Properties"]
    assert properties["Code"]["ZipFile"] == HANDLER_SOURCE == Path(warm_pool_handler.__file__).read_text()
    assert properties["Handler"] == "index.handler" and properties["Runtime"].startswith("python3")
    (tmp_path / "index.py").write_text(properties["Code"]["ZipFile"])
    spec = importlib.util.spec_from_file_location("index", tmp_path / "index.py")
    assert spec is not None and spec.loader is not None
    index = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(index)
    assert index.INTO_SERVICE == INTO_SERVICE
    assert index.handler(launch_event(Destination="WarmPool"), None, object()) == {"completed": False}


# --- What the user data does on the instance, simulated --------------------------------------------------------


STUBS = {
    # IMDSv2: a token, then the target lifecycle state, one line of $STATES per call ("404": not there yet, curl -f
    # fails)
    "curl": """last="${@: -1}"
echo "curl $last" >> "$LOG"
case "$last" in
  */api/token) echo -n token ;;
  */autoscaling/target-lifecycle-state)
    state=$(head -n 1 "$STATES"); tail -n +2 "$STATES" > "$STATES.next"; mv "$STATES.next" "$STATES"
    [ -z "$state" ] || [ "$state" = 404 ] && exit 22
    echo -n "$state" ;;
  *) exit 22 ;;
esac""",
    "docker": """if [ "$1" = login ]; then echo "docker $* password=$(cat)" >> "$LOG"; """
    """else echo "docker $*" >> "$LOG"; fi""",
    "python3": """echo "python3 $*" >> "$LOG"; echo ecr-password""",
    "systemctl": """echo "systemctl $*" >> "$LOG\"""",
    "sleep": """echo "sleep $*" >> "$LOG\"""",
}


def simulate(script: str, states: list[str], tmp_path: Path) -> tuple[list[str], str]:
    """Run the user data as cloud-init would, its absolute paths moved under a temporary root and curl (IMDS), docker,
    python3 (the ECR login), systemctl and sleep stubbed: the calls made, in order, and the agent's config file."""
    root, bin_dir = tmp_path / "root", tmp_path / "bin"
    (root / "etc/ecs").mkdir(parents=True)
    bin_dir.mkdir()
    for name, body in STUBS.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    (tmp_path / "states").write_text("".join(f"{s}\n" for s in states))
    moved = script.replace("/etc/ecs/", f"{root}/etc/ecs/").replace("/usr/local/libexec/", f"{root}/usr/local/libexec/")
    (tmp_path / "user-data").write_text(moved)
    subprocess.run(
        ["bash", str(tmp_path / "user-data")],
        check=True,
        timeout=60,
        capture_output=True,
        env={"PATH": f"{bin_dir}:/usr/bin:/bin", "LOG": str(tmp_path / "calls"), "STATES": str(tmp_path / "states")},
    )
    calls = (tmp_path / "calls").read_text().splitlines() if (tmp_path / "calls").exists() else []
    config = root / "etc/ecs/ecs.config"
    return calls, config.read_text() if config.exists() else ""


def lifecycle_problems(calls: list[str], state: str, images: list[str]) -> list[str]:
    """What the run did against what the instance must do in ``state``: warming, log in to each image's registry and
    pull each image exactly once, and never start the ECS agent; going into service, start the agent and pull and log
    in to nothing."""
    problems = []
    agent = [
        c for c in calls if c.startswith("systemctl") and "ecs" in c and {"start", "restart", "enable"} & set(c.split())
    ]
    pulls = [c.split()[2] for c in calls if c.startswith("docker pull")]
    logins = [c for c in calls if c.startswith("docker login")]
    if state.startswith("Warmed:"):
        if agent:
            problems.append(f"starts the ECS agent while warming: {agent}")
        if sorted(pulls) != sorted(images):
            problems.append(f"pulls {pulls}, not each of {images} once")
        registries = sorted(
            {image.split("/")[0] for image in images if ".dkr.ecr." in image}
        )  # ECR's, not a public one
        if sorted(c.split()[-2] for c in logins) != registries or any("password=ecr-password" not in c for c in logins):
            problems.append(f"logs in {logins}, not once to each of {registries} with ECR's password")
    else:
        if agent != ["systemctl start --no-block ecs.service"]:
            problems.append(f"starts the agent with {agent or 'nothing'}, not one non-blocking start")
        if pulls or logins:
            problems.append(f"pulls or logs in while going into service: {pulls + logins}")
    return problems


@pytest.mark.parametrize("states", [["Warmed:Stopped"], ["Warmed:Running"], ["404", "404", "Warmed:Stopped"]])
def test_an_instance_warming_into_the_pool_pulls_each_image_once_and_never_starts_the_agent(prod, tmp_path, states):
    _, template = prod
    calls, config = simulate(rendered(template), states, tmp_path)
    assert lifecycle_problems(calls, states[-1], sorted(every_image_of(template))) == []
    assert "systemctl start docker.service" in calls  # the pull needs the daemon, which no unit orders after user data
    assert calls.count("sleep 2") == states.count("404")
    assert f"\n{WARM_POOLS_CHECK}\n" in config and "ECS_CLUSTER=prod-cluster" in config
    login = next(c for c in calls if c.startswith("python3"))
    assert login == f"python3 {tmp_path / 'root'}{ECR_LOGIN_PATH} us-west-2"  # the region of the image's registry
    written = (tmp_path / "root" / ECR_LOGIN_PATH.lstrip("/")).read_text()
    assert (
        written == Path(warm_pool_ecr_login.__file__).read_text()
    )  # the heredoc writes the tested module, byte for byte


@pytest.mark.parametrize("states", [["InService"], ["404"] * 30])  # never told: not warming, so serve
def test_an_instance_going_into_service_starts_the_agent_and_pulls_nothing(prod, tmp_path, states):
    _, template = prod
    calls, config = simulate(rendered(template), states, tmp_path)
    assert lifecycle_problems(calls, states[-1], sorted(every_image_of(template))) == []
    assert not (tmp_path / "root" / ECR_LOGIN_PATH.lstrip("/")).exists()
    assert f"\n{WARM_POOLS_CHECK}\n" in config  # set on every instance: the agent then waits only while warming


PLANTED = {
    "starts the agent while warming": (
        "    systemctl start docker.service",
        "    systemctl start docker.service\n    systemctl start ecs",
    ),
    "pulls going into service": ("  Warmed:*)", "  Warmed:*|InService)"),
    "starts the agent blocking": ("systemctl start --no-block ecs.service", "systemctl start ecs.service"),
}


@pytest.mark.parametrize("defect", sorted(PLANTED))
def test_the_simulation_catches_a_planted_defect(prod, tmp_path, defect):
    _, template = prod
    old, new = PLANTED[defect]
    script = rendered(template)
    assert script.count(old) == 1
    twin = script.replace(old, new)
    images = images_of(template)
    problems = []
    for state in ("Warmed:Stopped", "InService"):
        calls, _ = simulate(twin, [state], tmp_path / state.replace(":", "-"))
        problems += lifecycle_problems(calls, state, images)
    assert problems, f"a script that {defect} passed the checks"


def test_the_simulation_catches_an_image_pulled_twice(tmp_path):
    image = "333333333333.dkr.ecr.us-west-2.amazonaws.com/repo:tag"
    calls, _ = simulate(warm_pool_script([image, image]), ["Warmed:Stopped"], tmp_path)
    assert lifecycle_problems(calls, "Warmed:Stopped", [image]) == [
        f"pulls {[image, image]}, not each of {[image]} once"
    ]
    assert sum(c.startswith("docker login") for c in calls) == 1  # one login per registry, however many images


# --- The instance's ECR login -----------------------------------------------------------------------------------


CREDENTIALS = {
    "AccessKeyId": "AKIDEXAMPLE",
    "SecretAccessKey": "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
    "Token": "session-token",
}
NOW = datetime.datetime(2026, 12, 7, 10, 30, 0, tzinfo=datetime.UTC)


def test_the_ecr_login_is_signed_exactly_as_botocore_signs_it(monkeypatch):
    from botocore import auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    host = "api.ecr.us-west-2.amazonaws.com"
    ours = warm_pool_ecr_login.signed_headers(
        host, "us-west-2", "ecr", warm_pool_ecr_login.TARGET, b"{}", CREDENTIALS, NOW
    )
    monkeypatch.setattr(auth, "get_current_datetime", lambda: NOW)
    request = AWSRequest(
        method="POST",
        url=f"https://{host}/",
        data=b"{}",
        headers={"Content-Type": "application/x-amz-json-1.1", "X-Amz-Target": warm_pool_ecr_login.TARGET},
    )
    auth.SigV4Auth(
        Credentials(CREDENTIALS["AccessKeyId"], CREDENTIALS["SecretAccessKey"], CREDENTIALS["Token"]),
        "ecr",
        "us-west-2",
    ).add_auth(request)
    assert ours["authorization"] == request.headers["Authorization"]
    assert ours["x-amz-security-token"] == request.headers["X-Amz-Security-Token"]
    planted = warm_pool_ecr_login.signed_headers(
        host, "us-east-1", "ecr", warm_pool_ecr_login.TARGET, b"{}", CREDENTIALS, NOW
    )
    assert planted["authorization"] != request.headers["Authorization"]  # the comparison can fail


def test_the_ecr_login_keeps_to_the_instances_python_3_9():
    """AL2023's python3 is 3.9: the grammar of 3.9, and none of the later standard library this file might reach for."""
    import ast

    tree = ast.parse(Path(warm_pool_ecr_login.__file__).read_text(), feature_version=(3, 9))
    later = {
        "UTC",
        "removeprefix",
        "removesuffix",
        "tomllib",
    }  # 3.11's datetime.UTC, 3.9's own are fine, 3.11's tomllib
    used = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)} | {
        a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
    }
    assert {"UTC", "tomllib"} & used == set(), used & later


def test_the_ecr_login_returns_the_password_of_ecrs_token():
    sent = {}

    def post(url, body, headers):
        sent.update(url=url, body=body, headers=headers)
        return {
            "authorizationData": [
                {
                    "authorizationToken": base64.b64encode(b"AWS:s3cret").decode(),
                    "proxyEndpoint": "https://333333333333.dkr.ecr.us-west-2.amazonaws.com",
                }
            ]
        }

    assert warm_pool_ecr_login.login_password("us-west-2", CREDENTIALS, NOW, post) == "s3cret"
    assert sent["url"] == "https://api.ecr.us-west-2.amazonaws.com/" and sent["body"] == b"{}"
    assert sent["headers"]["x-amz-target"] == "AmazonEC2ContainerRegistry_V20150921.GetAuthorizationToken"


# --- The library's API and the config's errors ------------------------------------------------------------------


def team_stack(props: GpuCapacityProps) -> tuple[cdk.Stack, GpuCapacity]:
    app = cdk.App()
    stack = cdk.Stack(app, "Team", env=cdk.Environment(account="123456789012", region="us-east-1"))
    return stack, GpuCapacity(stack, "Gpu", vpc=ec2.Vpc(stack, "Vpc", nat_gateways=0), props=props)


def test_a_team_prepulls_its_own_image_and_grants_its_repository():
    stack, capacity = team_stack(
        GpuCapacityProps(on_demand_base_capacity=1, warm_pool=WarmPoolProps(pool_state="Running"))
    )
    repository = ecr.Repository.from_repository_name(stack, "Mirror", "mirror/vllm-openai")
    capacity.prepull(repository.repository_uri_for_tag("v0.32.0"), repository)
    template = Template.from_stack(stack)
    template.has_resource_properties(
        "AWS::AutoScaling::WarmPool", {"PoolState": "Running", "MinSize": 1, "InstanceReusePolicy": Match.absent()}
    )
    assert "mirror/vllm-openai:v0.32.0" in json.dumps(
        template.to_json()["Resources"][next(iter(template.find_resources("AWS::EC2::LaunchTemplate")))]["Properties"][
            "LaunchTemplateData"
        ]["UserData"]
    )
    (policy,) = [p for k, p in template.find_resources("AWS::IAM::Policy").items() if k.startswith("GpuInstanceRole")]
    (pull,) = [
        s
        for s in policy["Properties"]["PolicyDocument"]["Statement"]
        if sorted(s["Action"]) == ["ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"]
    ]
    assert json.dumps(pull["Resource"]).endswith(':repository/mirror/vllm-openai"]]}')


def test_prepull_without_a_pool_is_refused_with_the_fix():
    _, capacity = team_stack(GpuCapacityProps())
    with pytest.raises(ConfigError, match=r"^warm_pool: .*give the capacity a warm_pool"):
        capacity.prepull("123456789012.dkr.ecr.us-east-1.amazonaws.com/x:1")
    assert capacity.warm_pool is None and capacity.warm_pool_launches is None


def test_a_pool_on_an_all_spot_group_warns_that_aws_does_not_say_what_it_holds():
    stack, _ = team_stack(GpuCapacityProps(warm_pool=WarmPoolProps()))
    Annotations.from_stack(stack).has_warning(
        "*", Match.string_like_regexp("warm_pool on a group whose instances are all Spot")
    )
    on_demand, _ = team_stack(GpuCapacityProps(on_demand_base_capacity=1, warm_pool=WarmPoolProps()))
    Annotations.from_stack(on_demand).has_no_warning("*", Match.string_like_regexp("all Spot"))


@pytest.mark.parametrize(
    "pool, key, fix",
    [
        ({"reuse_on_scale_in": True}, "capacity.warm_pool.reuse_on_scale_in", "a scaled-in instance is terminated"),
        ({"pool_state": "Hibernated"}, "capacity.warm_pool.pool_state", "hibernation options"),
        ({"pool_state": "stopped"}, "capacity.warm_pool.pool_state", "use 'Stopped'"),
        ({"prepare_seconds": 30}, "capacity.warm_pool.prepare_seconds", "allowed 60 to 7200"),
        ({"min_size": 0}, "capacity.warm_pool.min_size", "leave warm_pool out"),
        ({"min_size": 40}, "capacity.warm_pool.min_size", "greater than max_capacity 36"),
        (
            {"min_size": 2, "max_group_prepared_capacity": 1},
            "capacity.warm_pool.max_group_prepared_capacity",
            "below min_size 2",
        ),
        (
            {"size": 2},
            "capacity.warm_pool.size",
            "unknown key; allowed keys here: max_group_prepared_capacity, min_size",
        ),
    ],
)
def test_a_bad_warm_pool_is_refused_naming_the_environment_the_key_and_the_fix(pool, key, fix):
    data = scenario_environment("prod")
    data["capacity"]["warm_pool"] = pool
    with pytest.raises(ConfigError) as error:
        load_environment("prod", data)
    assert str(error.value).startswith(f"environment 'prod': {key}: ") and fix in str(error.value)


def test_the_defaults_are_a_pool_of_one_stopped_instance_held_ten_minutes():
    pool = from_dict(WarmPoolProps, {})
    assert (pool.min_size, pool.prepared_capacity, pool.pool_state, pool.prepare_seconds, pool.reuse_on_scale_in) == (
        1,
        1,
        "Stopped",
        600,
        False,
    )
    assert WarmPoolProps(min_size=2, max_group_prepared_capacity=5).prepared_capacity == 5
