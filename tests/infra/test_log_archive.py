"""Issue 45's second FireLens output: the Fluent Bit configuration file (checked against the s3 and kinesis_firehose
plugins' documented keys, with planted-defect twins), shipped as a file asset the execution role may read, and the
task role's writes (the bucket prefix, the bucket's key on both sides, the one stream); a team's own bucket."""

from __future__ import annotations

import json
import re

import aws_cdk as cdk
import pytest
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Template

from gpu_inference_constructs import (
    ClusterCapacity,
    ListenerRoute,
    ModelBucket,
    ModelProps,
    ModelService,
    ServiceAccess,
    ServiceLogs,
)
from gpu_inference_constructs.core.errors import ConfigError
from gpu_inference_constructs.core.log_archive_props import (
    ARCHIVE_BUCKET_VARIABLE,
    ARCHIVE_REGION_VARIABLE,
    FIREHOSE_STREAM_VARIABLE,
    LogArchive,
    archive_config,
    check_archive_flushes,
)
from gpu_inference_constructs.core.service_timing import SPOT_DETECTION_SECONDS, SPOT_NOTICE_SECONDS, SPOT_STOP_SECONDS
from gpu_inference_constructs.task_telemetry.telemetry import FireLensProps, TelemetryProps
from tests.conftest import validated_app
from tests.infra.team_parts import imported_team_parts
from tests.infra.test_service import containers, logical

STREAM = "arn:aws:firehose:us-east-1:222222222222:deliverystream/staging-server-logs"

# The plugins' keys in Fluent Bit 1.9 (AWS for Fluent Bit 2.x): docs.fluentbit.io/manual/v/1.9-pre/pipeline/outputs/s3
# and .../outputs/firehose, plus the keys every output takes (Name, Match, Retry_Limit, workers, alias). Debian packages
# no fluent-bit and PyPI has no validator of plugin keys (only a tree-sitter grammar), so the file is checked here.
COMMON_KEYS = frozenset({"Name", "Match", "Match_Regex", "Retry_Limit", "workers", "alias"})
PLUGIN_KEYS = {
    "s3": COMMON_KEYS
    | {
        "region",
        "bucket",
        "json_date_key",
        "json_date_format",
        "total_file_size",
        "upload_chunk_size",
        "upload_timeout",
        "store_dir",
        "store_dir_limit_size",
        "s3_key_format",
        "s3_key_format_tag_delimiters",
        "static_file_path",
        "use_put_object",
        "role_arn",
        "endpoint",
        "sts_endpoint",
        "canned_acl",
        "compression",
        "content_type",
        "send_content_md5",
        "auto_retry_requests",
        "log_key",
        "preserve_data_ordering",
        "storage_class",
        "external_id",
    },
    "kinesis_firehose": COMMON_KEYS
    | {
        "region",
        "delivery_stream",
        "time_key",
        "time_key_format",
        "log_key",
        "compression",
        "role_arn",
        "endpoint",
        "sts_endpoint",
        "auto_retry_requests",
        "external_id",
    },
}
REQUIRED_KEYS = {"s3": ("bucket", "region"), "kinesis_firehose": ("delivery_stream", "region")}


def parse_outputs(text: str) -> list[dict[str, str]]:
    """The [OUTPUT] sections of a classic Fluent Bit configuration file, each as its key -> value."""
    outputs: list[dict[str, str]] = []
    for line in text.splitlines():
        if line.strip() == "[OUTPUT]":
            outputs.append({})
        elif line.strip() and outputs:
            key, _, value = line.strip().partition(" ")
            outputs[-1][key] = value.strip()
    return outputs


def output_problems(output: dict[str, str]) -> list[str]:
    """What one output gets wrong by its plugin's documented keys and rules."""
    name = output.get("Name", "")
    if name not in PLUGIN_KEYS:
        return [f"unknown plugin {name!r}"]
    problems = [f"unknown key {key}" for key in sorted(set(output) - PLUGIN_KEYS[name])]
    problems += [f"{key} is missing" for key in REQUIRED_KEYS[name] if key not in output]
    if name == "s3":
        size = re.fullmatch(r"(\d+)M", output.get("total_file_size", "100M"))
        put_object = output.get("use_put_object", "Off") == "On"
        if size is None or not 1 <= int(size.group(1)) <= (1024 if put_object else 50 * 1024):
            problems.append("total_file_size is not 1M to 1G (PutObject)")
        timeout = re.fullmatch(r"(\d+)([smh])", output.get("upload_timeout", "10m"))
        if timeout is None:
            problems.append("upload_timeout is not a time such as 10m")
        elif int(timeout.group(1)) * {"s": 1, "m": 60, "h": 3600}[timeout.group(2)] > SPOT_STOP_SECONDS:
            problems.append(
                "upload_timeout outlasts what a Spot notice leaves: a task's last logs are lost with its instance"
            )
        key = output.get("s3_key_format", "/")
        if not key.startswith("/"):
            problems.append("s3_key_format does not start with / (the plugin requests /<bucket><key>)")
        if put_object and "." in key.rsplit("/", 1)[-1] and "$UUID" not in key:
            problems.append("a key suffix with use_put_object needs $UUID in s3_key_format")
        if output.get("compression") not in (None, "gzip"):
            problems.append("compression is not gzip")
        if output.get("compression") == "gzip" and not put_object:
            problems.append("gzip needs use_put_object On before Fluent Bit 1.9.x's multipart gzip")
    return problems


def test_the_configuration_file_follows_the_plugins_documented_keys():
    text = archive_config(LogArchive(firehose_stream_arn=STREAM), "server", "staging", "ranker")
    outputs = parse_outputs(text)
    assert [o["Name"] for o in outputs] == ["s3", "kinesis_firehose"]
    assert all(output_problems(o) == [] for o in outputs), [output_problems(o) for o in outputs]
    assert {o["Match"] for o in outputs} == {"server-firelens*"}  # the server's records only, as FireLens tags them
    s3_output, firehose = outputs
    assert (
        s3_output["bucket"] == f"${{{ARCHIVE_BUCKET_VARIABLE}}}"
        and firehose["delivery_stream"] == f"${{{FIREHOSE_STREAM_VARIABLE}}}"
    )
    assert s3_output["s3_key_format"].startswith("/firelens/staging/ranker/")
    # The server's cloudwatch_logs output sends only the line (log_key log); the archive keeps whole records: the
    # line under "log" beside its ECS metadata (task, container, stdout/stderr), which only the archive holds.
    assert all("log_key" not in o for o in outputs)


@pytest.mark.parametrize(
    ("defect", "problem"),
    [
        ({"buckets": "b"}, "unknown key buckets"),
        ({"s3_key_format": "firelens/%Y/$UUID.gz"}, "does not start with /"),
        ({"s3_key_format": "/firelens/%Y.gz"}, "needs $UUID"),
        ({"total_file_size": "2048M"}, "total_file_size"),
        ({"upload_timeout": "ten"}, "upload_timeout"),
        ({"upload_timeout": "10m"}, "outlasts what a Spot notice leaves"),  # the plugin's default, the archive's before
        ({"compression": "zip"}, "compression is not gzip"),
        ({"Name": "s4"}, "unknown plugin"),
    ],
)
def test_the_key_check_finds_a_planted_defect(defect, problem):
    (good,) = parse_outputs(archive_config(LogArchive(), "server", "staging", "ranker"))
    assert output_problems(good) == []
    assert any(problem in found for found in output_problems({**good, **defect}))
    assert "bucket is missing" in output_problems({k: v for k, v in good.items() if k != "bucket"})


@pytest.fixture(scope="module")
def staging(synthesized):
    config = synthesized.stages["staging"].config
    return config, Template.from_json(synthesized.inference_template("staging"))


def test_every_staging_models_archive_uploads_what_it_wrote_before_sigterm_within_the_spot_notice(staging):
    """The notice, the agent's detection, the model's deregistration delay, then SIGTERM: a record written before it
    is in S3 within upload_timeout, before EC2 reclaims the instance (llama-13b: 10 + 80 + 30 = 120)."""
    config, template = staging
    archive = config.telemetry.firelens.archive
    resources = template.to_json()["Resources"]
    delays = {
        int(a["Value"])
        for r in resources.values()
        if r["Type"] == "AWS::ElasticLoadBalancingV2::TargetGroup"
        for a in r["Properties"]["TargetGroupAttributes"]
        if a["Key"] == "deregistration_delay.timeout_seconds"
    }
    assert max(delays) == 80 and archive.s3
    for delay in delays:
        assert SPOT_DETECTION_SECONDS + delay + archive.upload_timeout_seconds <= SPOT_NOTICE_SECONDS, delay


def test_an_archive_slower_than_the_notice_allows_is_refused_naming_the_key():
    check_archive_flushes(LogArchive(upload_timeout_seconds=30), 80, "llama-13b")
    check_archive_flushes(LogArchive(s3=False, firehose_stream_arn=STREAM, upload_timeout_seconds=110), 80, "llama-13b")
    with pytest.raises(ConfigError, match=r"^telemetry.firelens.archive.upload_timeout_seconds: .*at most 30"):
        check_archive_flushes(LogArchive(upload_timeout_seconds=60), 80, "llama-13b")


def _statements(template: Template, role_fragment: str, model: str) -> list[dict]:
    prefix = f"Model{logical(model)}"
    return [
        s
        for k, r in template.to_json()["Resources"].items()
        if r["Type"] == "AWS::IAM::Policy" and k.startswith(prefix) and role_fragment in k
        for s in r["Properties"]["PolicyDocument"]["Statement"]
    ]


def test_staging_archives_the_servers_logs_to_s3_and_firehose_beside_cloudwatch(staging):
    config, template = staging
    assert config.telemetry.firelens.archive == LogArchive(firehose_stream_arn=STREAM)
    for model, router in containers(template, "log-router").items():
        options = router["FirelensConfiguration"]["Options"]
        assert options["config-file-type"] == "s3"
        assert "cdk-hnb659fds-assets" in json.dumps(options["config-file-value"])  # the bootstrap bucket's object
        environment = {e["Name"]: e["Value"] for e in router["Environment"]}
        assert set(environment) == {ARCHIVE_BUCKET_VARIABLE, ARCHIVE_REGION_VARIABLE, FIREHOSE_STREAM_VARIABLE}
        assert environment[FIREHOSE_STREAM_VARIABLE] == "staging-server-logs"
        assert environment[ARCHIVE_REGION_VARIABLE] == "us-east-1"
        server = containers(template, "server")[model]
        assert server["LogConfiguration"]["Options"]["Name"] == "cloudwatch_logs"  # the log group stays


def test_the_execution_role_may_read_the_configuration_file_and_locate_its_bucket(staging):
    config, template = staging
    for model in config.models:
        statements = _statements(template, "ExecutionRoleDefaultPolicy", model.name)
        get = [s for s in statements if s["Action"] == "s3:GetObject"]
        location = [s for s in statements if s["Action"] == "s3:GetBucketLocation"]
        assert len(get) == 1 and "assets" in json.dumps(get[0]["Resource"])
        on_bucket = [
            s
            for s in location
            if not json.dumps(s["Resource"]).rstrip('"]}').endswith(".conf")
            and "/" not in json.dumps(s["Resource"]).split("assets-", 1)[-1]
        ]
        assert on_bucket, (
            f"{model.name}: no s3:GetBucketLocation on the bucket itself (ECS reads the file's bucket region)"
        )


def test_the_task_role_writes_its_own_prefix_the_stream_and_uses_the_key_through_s3_only(staging):
    config, template = staging
    for model in config.models:
        statements = _statements(template, "TaskRoleDefaultPolicy", model.name)
        (put,) = [s for s in statements if s["Action"] == "s3:PutObject"]
        assert json.dumps(put["Resource"]).endswith(f'/firelens/staging/{model.name}/*"]]}}'), put["Resource"]
        (generate,) = [s for s in statements if s["Action"] == "kms:GenerateDataKey"]
        assert generate["Condition"] == {"StringEquals": {"kms:ViaService": "s3.us-east-1.amazonaws.com"}}
        (firehose,) = [s for s in statements if "firehose:" in json.dumps(s["Action"])]
        assert firehose == {"Action": "firehose:PutRecordBatch", "Effect": "Allow", "Resource": STREAM}


def test_the_archive_key_lets_the_accounts_iam_policies_grant_it(synthesized):
    """The key policy side: the bucket's key (the logs key) delegates to IAM (the account root may use it), so the
    task role's identity statement takes effect; the bucket uses that key, TLS only, kept as long as the logs."""
    config = synthesized.stages["staging"].config
    shared = synthesized.template("staging", "Inference")
    buckets = {
        k: r for k, r in shared["Resources"].items() if r["Type"] == "AWS::S3::Bucket" and k.startswith("LogArchive")
    }
    (bucket,) = buckets.values()
    encryption = bucket["Properties"]["BucketEncryption"]["ServerSideEncryptionConfiguration"][0][
        "ServerSideEncryptionByDefault"
    ]
    (key_id,) = [k for k, r in shared["Resources"].items() if r["Type"] == "AWS::KMS::Key" and k.startswith("LogsKey")]
    assert encryption["KMSMasterKeyID"] == {"Fn::GetAtt": [key_id, "Arn"]}
    (rule,) = bucket["Properties"]["LifecycleConfiguration"]["Rules"]
    assert rule["ExpirationInDays"] == config.log_retention_days
    statements = shared["Resources"][key_id]["Properties"]["KeyPolicy"]["Statement"]
    assert any(s["Action"] == "kms:*" and ":root" in json.dumps(s["Principal"]) for s in statements)


def team_app(bucket_key: bool):
    app = validated_app()
    stack = cdk.Stack(app, "Team", env=cdk.Environment(account="123456789012", region="eu-west-1"))
    team = imported_team_parts(stack)
    key = kms.Key.from_key_arn(
        stack, "ArchiveKey", "arn:aws:kms:eu-west-1:123456789012:key/99999999-2222-3333-4444-555555555555"
    )
    bucket = s3.Bucket.from_bucket_attributes(
        stack, "Archive", bucket_name="team-log-archive", encryption_key=key if bucket_key else None
    )
    telemetry = TelemetryProps(firelens=FireLensProps(archive=LogArchive(prefix="team")))
    ModelService(
        stack,
        "Ranker",
        model=ModelProps(name="ranker", version="1", cpu=1024, memory_mib=3072),
        logs=ServiceLogs(
            kms.Key.from_key_arn(
                stack, "Key", "arn:aws:kms:eu-west-1:123456789012:key/11111111-2222-3333-4444-555555555555"
            ),
            telemetry=telemetry,
            archive_bucket=bucket,
        ),
        environment="team",
        capacity=ClusterCapacity(team.cluster, "team-gpu", "g5.xlarge"),
        model_source=ModelBucket(s3.Bucket.from_bucket_name(stack, "Models", "team-models")),
        route=ListenerRoute(team.listener, 7),
        access=ServiceAccess(allow_unauthenticated=True),
    )
    return app.synth().get_stack_by_name("Team").template


def test_a_teams_own_bucket_and_key_are_written_by_identity_statements_only():
    template = team_app(bucket_key=True)
    statements = [
        s
        for r in template["Resources"].values()
        if r["Type"] == "AWS::IAM::Policy"
        for s in r["Properties"]["PolicyDocument"]["Statement"]
    ]
    (put,) = [s for s in statements if s["Action"] == "s3:PutObject"]
    assert "team-log-archive/team/team/ranker/*" in json.dumps(put["Resource"])
    (generate,) = [s for s in statements if s["Action"] == "kms:GenerateDataKey"]
    assert generate["Resource"].endswith("key/99999999-2222-3333-4444-555555555555")
    assert not any(r["Type"] in ("AWS::S3::BucketPolicy", "AWS::KMS::Key") for r in template["Resources"].values())
    assert not any("firehose:" in json.dumps(s["Action"]) for s in statements)


def test_a_bucket_without_a_key_gets_no_kms_statement():
    template = team_app(bucket_key=False)
    statements = [
        s
        for r in template["Resources"].values()
        if r["Type"] == "AWS::IAM::Policy"
        for s in r["Properties"]["PolicyDocument"]["Statement"]
    ]
    assert not any(s["Action"] == "kms:GenerateDataKey" for s in statements)


@pytest.mark.parametrize(
    ("props", "match"),
    [
        (dict(prefix="/logs"), r"^prefix: .*letters"),
        (dict(upload_timeout_seconds=5), r"^upload_timeout_seconds: .*range"),
        (dict(upload_timeout_seconds=111), r"^upload_timeout_seconds: .*range"),
        (dict(total_file_size_mib=2048), r"^total_file_size_mib: .*range"),
        (dict(firehose_stream_arn="staging-server-logs"), r"^firehose_stream_arn: .*ARN"),
        (dict(s3=False), r"^s3: .*firehose_stream_arn"),
    ],
)
def test_a_bad_archive_is_refused_naming_the_key(props, match):
    with pytest.raises(ConfigError, match=match):
        LogArchive(**props)


def test_an_s3_archive_without_a_bucket_is_refused_naming_the_key():
    stack = cdk.Stack()
    key = kms.Key.from_key_arn(
        stack, "Key", "arn:aws:kms:eu-west-1:123456789012:key/11111111-2222-3333-4444-555555555555"
    )
    telemetry = TelemetryProps(firelens=FireLensProps(archive=LogArchive()))
    with pytest.raises(ConfigError, match=r"^archive_bucket: .*s3.IBucket"):
        ServiceLogs(key, telemetry=telemetry)
    ServiceLogs(
        key, telemetry=TelemetryProps(firelens=FireLensProps(archive=LogArchive(s3=False, firehose_stream_arn=STREAM)))
    )


def test_cdk_json_archive_is_checked_on_load():
    from stacks.config import load_environment
    from tests.scenarios import scenario_environment

    dev = scenario_environment("dev")
    with pytest.raises(ConfigError, match=r"telemetry.firelens.archive.firehose_stream_arn: .*ARN"):
        load_environment("dev", {**dev, "telemetry": {"firelens": {"archive": {"firehose_stream_arn": "x"}}}})


def test_a_firehose_archive_without_the_firehose_endpoint_is_refused():
    from stacks.config import load_environment
    from tests.scenarios import scenario_environment

    staging = scenario_environment("staging")
    network = {k: v for k, v in staging["network"].items() if k != "interface_endpoints"}
    with pytest.raises(ConfigError, match=r"telemetry.firelens.archive.firehose_stream_arn: .*kinesis-firehose"):
        load_environment("staging", {**staging, "network": network})


def test_the_config_file_is_named_by_its_content_and_reused():
    from gpu_inference_constructs.task_telemetry.log_archive import written_config

    text = archive_config(LogArchive(s3=True), "server", "staging", "minilm")
    first, again = written_config(text), written_config(text)
    assert first == again and first.read_text() == text
    other = written_config(archive_config(LogArchive(s3=True, prefix="other"), "server", "staging", "minilm"))
    assert other != first and other.parent.parent == first.parent.parent
    assert not list(first.parent.glob("*.conf.*")), "no partial file is left behind"
