"""A second copy of a server's logs beside CloudWatch Logs, through the FireLens router: an S3 archive and/or a Kinesis
Data Firehose stream (:class:`LogArchive`), and the Fluent Bit configuration file that adds those outputs. Free of
aws_cdk, so cdk.json builds it.

One ``awsfirelens`` option set names one output (CloudWatch Logs, unchanged); more outputs need a Fluent Bit
configuration file, which FireLens includes in the configuration it generates. The file names no resource: the bucket,
the stream and the region reach it as the router's environment variables (Fluent Bit resolves ``${NAME}`` in any
value), so the file is the same text whatever the account, and its hash changes only with these settings."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import require, require_range
from .service_timing import SPOT_DETECTION_SECONDS, SPOT_NOTICE_SECONDS, SPOT_STOP_SECONDS

# The router's environment variables the configuration file reads.
ARCHIVE_BUCKET_VARIABLE = "LOG_ARCHIVE_BUCKET"
ARCHIVE_REGION_VARIABLE = "LOG_ARCHIVE_REGION"
FIREHOSE_STREAM_VARIABLE = "LOG_ARCHIVE_FIREHOSE_STREAM"
FIREHOSE_STREAM_ARN = re.compile(r"^arn:aws[a-z-]*:firehose:[a-z0-9-]+:\d{12}:deliverystream/([A-Za-z0-9_.-]{1,64})$")
PREFIX = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")


@dataclass(frozen=True)
class LogArchive:
    """Where the router sends the server's logs besides the model's log group: S3 (gzip'd JSON lines, one object per
    ``upload_timeout_seconds`` or ``total_file_size_mib``, under ``<prefix>/<environment>/<model>/``) and/or a
    Firehose delivery stream. The bucket is the ModelService's ``logs.archive_bucket``; the stream is named here.

    The S3 archive's guarantee: a record is in S3 within ``upload_timeout_seconds`` of reaching the router (while S3
    answers). On a Spot interruption, every record the server wrote before its SIGTERM is uploaded before EC2 reclaims
    the instance: ModelService refuses an ``upload_timeout_seconds`` longer than the notice leaves after the agent's
    detection and the model's deregistration delay (:func:`check_archive_flushes`). What the server writes while it
    drains relies on Fluent Bit's upload at shutdown, which users report does not always happen (fluent/fluent-bit
    issues #4093, #6648): at most those last seconds may be missing from the archive (CloudWatch Logs has them)."""

    s3: bool = True
    """Archive to the S3 bucket ``ServiceLogs.archive_bucket``. Default: True."""
    prefix: str = "firelens"
    """The first part of the archive's object keys (letters, digits, ``_.-``). Default: ``"firelens"``."""
    upload_timeout_seconds: int = 30
    """Fluent Bit uploads an object at least this often (10 to SPOT_STOP_SECONDS, 110). Default: 30 (the plugin's own
    10 minutes could lose that much of a task's logs on a Spot interruption; 30 s fits the longest deregistration delay
    the LLM presets take by default, 80 s)."""
    total_file_size_mib: int = 64
    """Or sooner, once the object reaches this size (1-1024: PutObject's limit in the plugin). Default: 64."""
    firehose_stream_arn: str | None = None
    """A Kinesis Data Firehose delivery stream's ARN, your own, in the task's region. Default: None (no Firehose)."""

    def __post_init__(self) -> None:
        require(isinstance(self.s3, bool), "s3", f"{self.s3!r}: true to archive to S3, false for Firehose only")
        require(
            isinstance(self.prefix, str) and bool(PREFIX.match(self.prefix)),
            "prefix",
            f"{self.prefix!r}: 1-63 letters, digits or '_.-', starting with a letter or digit",
        )
        require_range(self.upload_timeout_seconds, 10, SPOT_STOP_SECONDS, "upload_timeout_seconds")
        require_range(self.total_file_size_mib, 1, 1024, "total_file_size_mib")
        stream = self.firehose_stream_arn
        require(
            stream is None or (isinstance(stream, str) and bool(FIREHOSE_STREAM_ARN.match(stream))),
            "firehose_stream_arn",
            f"{stream!r}: give a delivery stream's ARN, arn:aws:firehose:<region>:<account>:deliverystream/<name>",
        )
        require(
            self.s3 or stream is not None,
            "s3",
            "false and no firehose_stream_arn archives nothing: set either, or leave archive out",
        )

    @property
    def firehose_stream_name(self) -> str | None:
        match = FIREHOSE_STREAM_ARN.match(self.firehose_stream_arn or "")
        return match.group(1) if match else None


def archive_config(archive: LogArchive, server_container: str, environment_name: str, model_name: str) -> str:
    """The Fluent Bit configuration file (classic format) with the archive's outputs for the server's records
    (FireLens tags them ``<container>-firelens-<task id>``). PutObject uploads (``use_put_object``): gzip works with
    them in every Fluent Bit release AWS for Fluent Bit 2.x ships, and they need only ``s3:PutObject`` (and
    ``kms:GenerateDataKey``); a key must start with ``/`` (the plugin requests ``/<bucket><key>``)."""
    match = f"{server_container}-firelens*"
    sections = []
    if archive.s3:
        key = f"/{archive.prefix}/{environment_name}/{model_name}/%Y/%m/%d/%H/%M/%S-$UUID.gz"
        sections.append(
            _section(
                "OUTPUT",
                [
                    ("Name", "s3"),
                    ("Match", match),
                    ("bucket", f"${{{ARCHIVE_BUCKET_VARIABLE}}}"),
                    ("region", f"${{{ARCHIVE_REGION_VARIABLE}}}"),
                    ("total_file_size", f"{archive.total_file_size_mib}M"),
                    ("upload_timeout", f"{archive.upload_timeout_seconds}s"),
                    ("use_put_object", "On"),
                    ("compression", "gzip"),
                    ("s3_key_format", key),
                ],
            )
        )
    if archive.firehose_stream_arn is not None:
        sections.append(
            _section(
                "OUTPUT",
                [
                    ("Name", "kinesis_firehose"),
                    ("Match", match),
                    ("region", f"${{{ARCHIVE_REGION_VARIABLE}}}"),
                    ("delivery_stream", f"${{{FIREHOSE_STREAM_VARIABLE}}}"),
                    ("time_key", "time"),
                ],
            )
        )
    return "\n".join(sections)


def check_archive_flushes(archive: LogArchive, deregistration_delay_seconds: int, model_name: str) -> None:
    """Refuse an S3 archive that a Spot interruption could leave without the records written before the server's
    SIGTERM: those reach S3 within ``upload_timeout_seconds``, which must end before EC2 reclaims the instance, the
    agent's detection and the deregistration delay after the notice."""
    if not archive.s3:
        return
    room = SPOT_STOP_SECONDS - deregistration_delay_seconds
    require(
        archive.upload_timeout_seconds <= room,
        "telemetry.firelens.archive.upload_timeout_seconds",
        f"{archive.upload_timeout_seconds} s is longer than the {room} s the {SPOT_NOTICE_SECONDS} s Spot notice "
        f"leaves models[{model_name}] after the agent sees it ({SPOT_DETECTION_SECONDS} s) and its "
        f"{deregistration_delay_seconds} s deregistration delay: its last records before SIGTERM could be lost with "
        f"the instance; give at most {room}",
    )


def archive_key_prefix(archive: LogArchive, environment_name: str, model_name: str) -> str:
    """The keys a model's router writes: the task role's ``s3:PutObject`` is on this prefix only."""
    return f"{archive.prefix}/{environment_name}/{model_name}/"


def _section(name: str, entries: list[tuple[str, str]]) -> str:
    return f"[{name}]\n" + "".join(f"    {key} {value}\n" for key, value in entries)
