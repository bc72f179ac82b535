"""Server settings: every setting is an environment variable with a CLI flag that overrides it."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import facts
from .facts import RUNTIMES, TASKS

MODEL_NAME_PATTERN = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?")


class SettingsError(ValueError):
    def __init__(self, variable: str, message: str):
        super().__init__(f"{variable}: {message}")
        self.variable = variable


def _str(raw: str) -> str:
    if not raw.strip():
        raise ValueError("must not be empty")
    return raw.strip()


def _opt_str(raw: str) -> str | None:
    return raw.strip() or None


def _bool(raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"must be true or false, got {raw!r}")


def _int(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        try:
            value = int(raw.strip())
        except ValueError:
            raise ValueError(f"must be an integer, got {raw!r}") from None
        if value < minimum or (maximum is not None and value > maximum):
            bounds = f">= {minimum}" if maximum is None else f"between {minimum} and {maximum}"
            raise ValueError(f"must be {bounds}, got {value}")
        return value

    return parse


def _opt_bool(raw: str) -> bool | None:
    return _bool(raw) if raw.strip() else None


def _float(minimum: float, *, exclusive: bool = False) -> Callable[[str], float]:
    def parse(raw: str) -> float:
        try:
            value = float(raw.strip())
        except ValueError:
            raise ValueError(f"must be a number, got {raw!r}") from None
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"must be a finite number, got {raw!r}")
        if value < minimum or (exclusive and value == minimum):
            raise ValueError(f"must be {'>' if exclusive else '>='} {minimum:g}, got {value:g}")
        return value

    return parse


def _fraction(raw: str) -> float:
    value = _float(0)(raw)
    if value > 1:
        raise ValueError(f"must be between 0 and 1, got {value:g}")
    return value


def _choice(*choices: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        value = raw.strip().lower()
        if value not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}, got {raw!r}")
        return value

    return parse


def _opt_choice(*choices: str) -> Callable[[str], str | None]:
    parse = _choice(*choices)
    return lambda raw: parse(raw) if raw.strip() else None


def _opt_url(raw: str) -> str | None:
    value = raw.strip()
    if value and not re.fullmatch(r"https?://[^/\s]+(/\S*)?", value):
        raise ValueError(f"must be an http:// or https:// URL, got {raw!r}")
    return value or None


def _model_name(raw: str) -> str:
    if not MODEL_NAME_PATTERN.fullmatch(raw):
        raise ValueError(f"must be URL-safe ([a-z0-9-]+, at most 64 characters), got {raw!r}")
    return raw


def _log_level(raw: str) -> str:
    return _choice("debug", "info", "warning", "error")(raw).upper()


API_KEY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def _unique_names(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    names = [name for name, _ in pairs]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(f"names {repeated} appear twice; each key needs its own name")
    return dict(pairs)


def _api_keys(raw: str) -> tuple[tuple[str, str], ...]:
    """(name, key) pairs from a JSON object of names to keys (what the Secrets Manager secret holds:
    {"team-a": "...", "team-b": "..."}), or from comma-separated keys, named key-1, key-2, ... in order.
    Messages name keys, never show them."""
    text = raw.strip()
    if text.startswith("{"):
        try:
            named = json.loads(text, object_pairs_hook=_unique_names)
        except json.JSONDecodeError as exc:
            raise ValueError(f"is not a JSON object of key names to keys ({exc.msg} at character {exc.pos})") from None
        pairs = []
        for name, key in named.items():
            if not API_KEY_NAME.fullmatch(name):
                raise ValueError(
                    f"key name {name!r} must be 1-64 letters, digits, '.', '_' or '-', starting with a "
                    "letter or digit (it appears in logs and metrics)"
                )
            if not isinstance(key, str) or not key.strip() or key != key.strip():
                raise ValueError(f"the key named {name!r} must be a non-empty string without surrounding spaces")
            pairs.append((name, key))
    else:
        pairs = [
            (f"key-{index}", key)
            for index, key in enumerate((key.strip() for key in text.split(",") if key.strip()), 1)
        ]
    keys = [key for _, key in pairs]
    if len(set(keys)) != len(keys):
        shared = sorted({name for name, key in pairs if keys.count(key) > 1})
        raise ValueError(f"keys {shared} are the same key: give each client its own, so one can be revoked alone")
    return tuple(pairs)


def _dimensions(raw: str) -> tuple[int, ...]:
    parse = _int(1, 65536)
    return tuple(sorted({parse(part) for part in raw.split(",") if part.strip()}))


def _setting(
    parse: Callable[[str], Any],
    default: Any,
    help: str,
    *,
    required: bool = False,
    secret: bool = False,
    flags: Sequence[str] = (),
) -> Any:
    meta = {"parse": parse, "help": help, "required": required, "secret": secret, "flags": tuple(flags)}
    if isinstance(default, (list, dict, tuple)):
        return field(default_factory=lambda: default, metadata=meta, repr=not secret)
    return field(default=default, metadata=meta, repr=not secret)


@dataclass(frozen=True)
class Settings:
    model_name: str = _setting(_model_name, None, "URL-safe model name; also the route prefix /<name>/", required=True)
    model_version: str = _setting(_str, None, "model version, reported in responses and logs", required=True)
    model_uri: str = _setting(
        _str, None, "s3://bucket/models/<name>/<version>/ or a local directory", required=True, flags=("--model",)
    )
    model_task: str | None = _setting(_opt_choice(*TASKS), None, "default: the manifest's task")
    model_handler: str | None = _setting(_opt_str, None, "handler class import path, module:Class")
    allow_artifact_code: bool = _setting(_bool, False, "allow trust_remote_code and a handler.py in the model")
    model_cache_dir: Path = _setting(
        lambda raw: Path(_str(raw)),
        Path("/tmp/model-cache"),
        "writable scratch directory for models and library caches",
    )
    require_manifest: bool | None = _setting(_bool, None, "refuse a model without manifest.json (default: true for s3)")
    host: str = _setting(_str, "0.0.0.0", "listen address")
    port: int = _setting(_int(1, 65535), facts.PORT, "listen port")
    device: str = _setting(_choice("auto", "cpu", "cuda"), "auto", "auto picks cuda when present")
    precision: str = _setting(_choice("auto", "fp32", "fp16", "bf16"), "auto", "auto: fp16 on GPU, fp32 on CPU")
    model_runtime: str = _setting(
        _choice(*RUNTIMES),
        "eager",
        "eager, compile (torch.compile, CPU too), onnx (ONNX Runtime; CUDA/TensorRT EP on "
        "GPU) or int8 (ONNX Runtime, INT8 weights); all but eager must have been published "
        "with --runtime",
    )
    compile_cache_uri: str | None = _setting(
        _opt_str,
        None,
        "s3://bucket/prefix/ or a directory: where torch.compile's cache is kept "
        "between tasks, one archive per torch version, device kind and compile settings",
    )
    warmup: str = _setting(
        _choice("first", "all"),
        "first",
        "shapes warmed before /ready: first (batch 1 at every length bucket and each larger "
        "batch whose forward is short, the rest left to traffic; a compiled model is ready on its "
        "eager forward and compiles every shape while idle) or all (compiled too, with "
        "torch.compile)",
    )
    max_batch_size: int = _setting(_int(1, 4096), 32, "largest batch sent to the model")
    max_batch_wait_ms: float = _setting(_float(0), 2.0, "longest a queued request waits for a fuller batch")
    max_queue_size: int = _setting(_int(1), 256, "queued inputs beyond which requests get 503")
    max_sequence_length: int = _setting(_int(8, 65536), 256, "tokens per input; longer inputs are truncated")
    max_client_batch: int = _setting(_int(1, 100000), 64, "most texts in one /predict/batch request")
    max_text_chars: int = _setting(_int(1), 10000, "longest text in characters")
    max_body_bytes: int = _setting(_int(64), 1048576, "largest request body")
    request_timeout_s: float = _setting(_float(0, exclusive=True), 10.0, "per-request deadline (504 after it)")
    drain_timeout_s: float = _setting(
        _float(0), float(facts.DRAIN_TIMEOUT_S), "on SIGTERM, how long to finish accepted work"
    )
    keep_alive_s: float = _setting(_float(0, exclusive=True), 75.0, "HTTP keep-alive; keep above the ALB idle timeout")
    embedding_dimensions: tuple[int, ...] = _setting(
        _dimensions,
        (),
        "comma-separated sizes /v1/embeddings may truncate to (`dimensions`), for models trained "
        "for it (Matryoshka); empty: only the full size",
    )
    result_cache_size: int = _setting(_int(0), 0, "entries in the result LRU cache; 0 turns it off")
    api_keys: tuple[tuple[str, str], ...] = _setting(
        _api_keys,
        (),
        "keys clients send in x-api-key or Authorization: Bearer: a JSON object of names to keys "
        '({"team-a": "..."}; the name appears in logs and metrics), or comma-separated keys '
        "(named key-1, key-2, ...); every route but /health, /ready and /metrics requires one",
        secret=True,
    )
    docs: bool | None = _setting(
        _opt_bool,
        None,
        "serve /docs and /openapi.json (behind the key when API_KEYS is "
        "set); default: on only where DEPLOYMENT_ENV is local",
    )
    shared_cache_endpoint: str | None = _setting(
        _opt_str, None, "host:port of the shared result cache (Valkey/ElastiCache); empty turns it off"
    )
    shared_cache_tls: bool = _setting(_bool, True, "TLS to the shared cache (ElastiCache Serverless requires it)")
    shared_cache_cluster: bool = _setting(_bool, False, "the shared cache is cluster mode enabled (Serverless is)")
    shared_cache_auth_token: str | None = _setting(_opt_str, None, "password of the shared cache's user", secret=True)
    shared_cache_iam_user: str | None = _setting(_opt_str, None, "ElastiCache user id for IAM authentication")
    shared_cache_name: str | None = _setting(_opt_str, None, "the cache's name, signed into IAM tokens")
    shared_cache_ttl_s: int = _setting(_int(1, 30 * 86400), 3600, "how long the shared cache keeps a prediction")
    shared_cache_max_value_bytes: int = _setting(
        _int(64, 16 * 1048576), 65536, "larger predictions are not stored in the shared cache"
    )
    shared_cache_timeout_ms: float = _setting(
        _float(0, exclusive=True), 50.0, "longest a shared cache call may take before it counts as failed"
    )
    deployment_env: str = _setting(_str, "local", "Environment dimension of the metrics")
    log_level: str = _setting(_log_level, "INFO", "DEBUG, INFO, WARNING or ERROR")
    metrics_interval_s: float = _setting(
        _float(0, exclusive=True), 10.0, "period of each process's EMF metrics document (keep below the alarms' 60 s)"
    )
    signal_interval_s: float = _setting(
        _float(0, exclusive=True),
        5.0,
        "period of the model process's scale-out "
        "signal document (QueueDepth, high resolution: "
        "keep below the scaling alarms' 10 s)",
    )
    workers: int = _setting(
        _int(0, facts.MAX_WORKERS),
        0,
        "HTTP worker processes; 0: one per CPU of the task, less one for the model process (at least 1)",
    )
    access_log_sample: float = _setting(
        _fraction,
        0.001,
        "share of successful requests that get an access log line (errors and slow requests: up to a rate each)",
    )
    slow_request_ms: float = _setting(
        _float(0),
        1000.0,
        "requests slower than this get an access log line, at most 2 a second per worker (the rest counted)",
    )
    ready_probe_interval_s: float = _setting(_float(0, exclusive=True), 15.0, "period of the readiness test inference")
    otel_exporter_otlp_endpoint: str | None = _setting(
        _opt_url,
        None,
        "OTLP/HTTP base URL of the trace collector (http://localhost:4318: /v1/traces is added); "
        "with neither this nor OTEL_EXPORTER_OTLP_TRACES_ENDPOINT set, no request is traced",
    )
    otel_exporter_otlp_traces_endpoint: str | None = _setting(
        _opt_url, None, "OTLP/HTTP URL the spans are posted to, as is (instead of the base URL's /v1/traces)"
    )
    trace_sample_ratio: float = _setting(
        _fraction,
        facts.TRACE_SAMPLE_RATIO,
        "share of requests traced when the caller's trace context does not decide "
        "(parent-based: a sampled traceparent or X-Amzn-Trace-Id Sampled=1 is "
        "traced); OTEL_TRACES_SAMPLER, when set, chooses instead",
    )

    def __post_init__(self) -> None:
        # Programmatic callers may pass bare keys: named key-1, key-2, ... as from a comma-separated variable.
        if any(isinstance(entry, str) for entry in self.api_keys):
            object.__setattr__(
                self,
                "api_keys",
                _api_keys(",".join(entry if isinstance(entry, str) else entry[1] for entry in self.api_keys)),
            )

    @property
    def docs_enabled(self) -> bool:
        return self.deployment_env == "local" if self.docs is None else self.docs

    @property
    def traces_endpoint(self) -> str | None:
        return traces_endpoint(self.otel_exporter_otlp_endpoint, self.otel_exporter_otlp_traces_endpoint)

    @property
    def trace_service(self) -> tuple[str, str]:
        """The spans' service name and version (OTEL_SERVICE_NAME, when set, names the service instead)."""
        return self.model_name, self.model_version

    @property
    def trace_attributes(self) -> dict[str, str]:
        """What every span of this server says about what it serves."""
        return {"model.name": self.model_name, "model.version": self.model_version}

    @property
    def model_is_s3(self) -> bool:
        return self.model_uri.startswith("s3://")

    @property
    def manifest_required(self) -> bool:
        return self.model_is_s3 if self.require_manifest is None else self.require_manifest

    def replace(self, **changes: Any) -> Settings:
        return dataclasses.replace(self, **changes)


def traces_endpoint(base: str | None, traces: str | None) -> str | None:
    """Where the spans go: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (``traces``), else OTEL_EXPORTER_OTLP_ENDPOINT's
    (``base``) /v1/traces; None: nothing traced."""
    if traces:
        return traces
    return f"{base.rstrip('/')}/v1/traces" if base else None


def env_name(f: dataclasses.Field) -> str:
    return f.name.upper()


def _flags(f: dataclasses.Field) -> list[str]:
    return ["--" + f.name.replace("_", "-"), *f.metadata["flags"]]


def build_parser(prog: str = "python -m inference_server") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Dynamic-batching model server. Every flag is also read from the environment "
        "variable named in brackets; a flag overrides the variable.",
    )
    for f in dataclasses.fields(Settings):
        default = "" if f.metadata["secret"] or f.default is None else f" (default {_show(f)})"
        parser.add_argument(
            *_flags(f),
            dest=f.name,
            metavar="VALUE",
            default=None,
            help=f"[{env_name(f)}] {f.metadata['help']}{default}",
        )
    return parser


def _show(f: dataclasses.Field) -> str:
    default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
    return str(default).lower() if isinstance(default, bool) else str(default)


def load_settings(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> Settings:
    """Settings from flags, then environment variables, then defaults. Raises SettingsError naming the variable."""
    environ = os.environ if environ is None else environ
    args = vars(build_parser().parse_args(argv))
    values: dict[str, Any] = {}
    for f in dataclasses.fields(Settings):
        name = env_name(f)
        raw = args[f.name] if args[f.name] is not None else environ.get(name)
        if raw is None or (f.metadata["required"] and not raw.strip()):
            if f.metadata["required"]:
                raise SettingsError(name, f"is required (or the flag {_flags(f)[0]})")
            continue
        try:
            values[f.name] = f.metadata["parse"](raw)
        except ValueError as exc:
            raise SettingsError(name, str(exc)) from None
    return Settings(**values)
