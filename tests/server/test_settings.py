"""Settings: environment variables with CLI overrides; a bad value names its variable and exits non-zero."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from inference_server import facts
from inference_server.__main__ import main
from inference_server.settings import Settings, SettingsError, load_settings
from inference_server.supervisor.library_caches import confine_library_caches

REQUIRED = {"MODEL_NAME": "minilm", "MODEL_VERSION": "3", "MODEL_URI": "s3://bucket/models/minilm/3/"}


def test_defaults_match_the_infrastructure_contract():
    s = load_settings([], REQUIRED)
    assert (s.model_name, s.model_version, s.model_uri) == ("minilm", "3", "s3://bucket/models/minilm/3/")
    expected = dict(
        host="0.0.0.0",
        port=8080,
        model_task=None,
        model_handler=None,
        allow_artifact_code=False,
        model_cache_dir=Path("/tmp/model-cache"),
        device="auto",
        precision="auto",
        model_runtime="eager",
        max_batch_size=32,
        max_batch_wait_ms=2.0,
        max_queue_size=256,
        max_sequence_length=256,
        max_client_batch=64,
        max_text_chars=10000,
        max_body_bytes=1048576,
        request_timeout_s=10.0,
        drain_timeout_s=70.0,
        keep_alive_s=75.0,
        result_cache_size=0,
        api_keys=(),
        deployment_env="local",
        log_level="INFO",
        metrics_interval_s=10.0,
        ready_probe_interval_s=15.0,
        otel_exporter_otlp_endpoint=None,
        otel_exporter_otlp_traces_endpoint=None,
        trace_sample_ratio=0.01,
    )
    assert {k: getattr(s, k) for k in expected} == expected
    assert s.manifest_required  # s3 models need a manifest by default
    assert s.drain_timeout_s < 90 and s.keep_alive_s > 60  # below stopTimeout, above the ALB idle timeout


def test_every_setting_has_an_environment_variable_and_a_flag():
    env = {f.name.upper(): f.name for f in dataclasses.fields(Settings)}
    assert set(env) == {
        "MODEL_NAME",
        "MODEL_VERSION",
        "MODEL_URI",
        "MODEL_TASK",
        "MODEL_HANDLER",
        "ALLOW_ARTIFACT_CODE",
        "MODEL_CACHE_DIR",
        "REQUIRE_MANIFEST",
        "HOST",
        "PORT",
        "DEVICE",
        "PRECISION",
        "MODEL_RUNTIME",
        "COMPILE_CACHE_URI",
        "WARMUP",
        "MAX_BATCH_SIZE",
        "MAX_BATCH_WAIT_MS",
        "MAX_QUEUE_SIZE",
        "MAX_SEQUENCE_LENGTH",
        "MAX_CLIENT_BATCH",
        "MAX_TEXT_CHARS",
        "MAX_BODY_BYTES",
        "REQUEST_TIMEOUT_S",
        "DRAIN_TIMEOUT_S",
        "KEEP_ALIVE_S",
        "RESULT_CACHE_SIZE",
        "API_KEYS",
        "EMBEDDING_DIMENSIONS",
        "DEPLOYMENT_ENV",
        "LOG_LEVEL",
        "METRICS_INTERVAL_S",
        "SIGNAL_INTERVAL_S",
        "READY_PROBE_INTERVAL_S",
        "WORKERS",
        "ACCESS_LOG_SAMPLE",
        "SLOW_REQUEST_MS",
        "DOCS",
        "SHARED_CACHE_ENDPOINT",
        "SHARED_CACHE_TLS",
        "SHARED_CACHE_CLUSTER",
        "SHARED_CACHE_AUTH_TOKEN",
        "SHARED_CACHE_IAM_USER",
        "SHARED_CACHE_NAME",
        "SHARED_CACHE_TTL_S",
        "SHARED_CACHE_MAX_VALUE_BYTES",
        "SHARED_CACHE_TIMEOUT_MS",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "TRACE_SAMPLE_RATIO",
    }


def test_environment_values_are_parsed_and_flags_override_them(tmp_path):
    environ = {
        **REQUIRED,
        "PORT": "9000",
        "MAX_BATCH_WAIT_MS": "0.5",
        "MODEL_RUNTIME": "compile",
        "API_KEYS": " a, b ,,",
        "REQUIRE_MANIFEST": "0",
        "LOG_LEVEL": "debug",
        "MODEL_TASK": "text-embedding",
    }
    s = load_settings(["--port", "9100", "--model", str(tmp_path), "--max-batch-size", "8"], environ)
    assert (s.port, s.max_batch_size, s.max_batch_wait_ms, s.model_runtime) == (9100, 8, 0.5, "compile")
    assert s.model_uri == str(tmp_path) and s.api_keys == (("key-1", "a"), ("key-2", "b")) and s.log_level == "DEBUG"
    assert not s.manifest_required and s.model_task == "text-embedding"


def test_named_api_keys_come_from_a_json_object_of_names_to_keys():
    s = load_settings([], {**REQUIRED, "API_KEYS": '{"team-a": "k-aaaaaaaa", "partner.b": "k-bbbbbbbb"}'})
    assert s.api_keys == (("team-a", "k-aaaaaaaa"), ("partner.b", "k-bbbbbbbb"))


@pytest.mark.parametrize(
    "value,message",
    [
        ('{"a": "same-secret", "b": "same-secret"}', r"keys \['a', 'b'\] .*its own"),
        ('{"a": "k1-secret", "a": "k2-secret"}', r"names \['a'\] appear twice"),
        ('{"-a": "k1-secret"}', "key name '-a' .*1-64 letters"),
        ('{"a b": "k1-secret"}', "key name 'a b' .*1-64 letters"),
        ('{"a": ""}', "'a' .*non-empty string"),
        ('{"a": 7}', "'a' .*non-empty string"),
        ('{"a": "k1-secret"', "is not a JSON object"),
        ("same-secret,same-secret", r"keys \['key-1', 'key-2'\] .*its own"),
    ],
)
def test_bad_api_keys_are_refused_naming_keys_never_showing_them(value, message):
    with pytest.raises(SettingsError, match=message) as error:
        load_settings([], {**REQUIRED, "API_KEYS": value})
    assert "k1-secret" not in str(error.value) and "same-secret" not in str(error.value)


def test_docs_are_on_locally_and_off_in_a_deployed_environment_unless_turned_on():
    assert load_settings([], REQUIRED).docs_enabled
    assert not load_settings([], {**REQUIRED, "DEPLOYMENT_ENV": "prod"}).docs_enabled
    assert load_settings([], {**REQUIRED, "DEPLOYMENT_ENV": "prod", "DOCS": "true"}).docs_enabled
    assert not load_settings([], {**REQUIRED, "DOCS": "false"}).docs_enabled


def test_api_keys_are_not_in_the_repr():
    s = load_settings([], {**REQUIRED, "API_KEYS": "super-secret"})
    assert "super-secret" not in repr(s)


@pytest.mark.parametrize(
    "variable,value,message",
    [
        ("MAX_BATCH_SIZE", "abc", "must be an integer"),
        ("MAX_BATCH_SIZE", "0", "between 1 and"),
        ("PORT", "70000", "between 1 and 65535"),
        ("MAX_BATCH_WAIT_MS", "-1", ">= 0"),
        ("REQUEST_TIMEOUT_S", "0", "> 0"),
        ("DRAIN_TIMEOUT_S", "nan", "finite"),
        ("ALLOW_ARTIFACT_CODE", "maybe", "true or false"),
        ("DEVICE", "tpu", "one of auto, cpu, cuda"),
        ("PRECISION", "int8", "one of .*bf16"),
        ("MODEL_TASK", "translation", "one of text-classification"),
        ("MODEL_NAME", "MiniLM_v2", "URL-safe"),
        ("MODEL_NAME", "", "is required"),
        ("MODEL_URI", " ", "is required"),
        ("LOG_LEVEL", "loud", "one of"),
    ],
)
def test_a_bad_value_names_its_variable(variable, value, message):
    with pytest.raises(SettingsError, match=message) as error:
        load_settings([], {**REQUIRED, variable: value})
    assert error.value.variable == variable and str(error.value).startswith(variable)


def test_a_missing_required_variable_is_named():
    with pytest.raises(SettingsError, match="MODEL_VERSION.*required"):
        load_settings([], {"MODEL_NAME": "m", "MODEL_URI": "/x"})


def test_main_exits_2_with_a_json_line_naming_the_variable(monkeypatch, capsys, restore_logging):
    monkeypatch.setenv("MODEL_NAME", "m")
    monkeypatch.setenv("MODEL_VERSION", "1")
    monkeypatch.setenv("MODEL_URI", "/nowhere")
    monkeypatch.setenv("MAX_QUEUE_SIZE", "lots")
    assert main([]) == 2
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["level"] == "ERROR" and line["setting"] == "MAX_QUEUE_SIZE" and "integer" in line["error"]


def test_library_caches_are_confined_to_the_cache_dir(tmp_path, monkeypatch):
    import os

    monkeypatch.setattr(os, "environ", {"TORCH_HOME": "/operator/choice"})
    confine_library_caches(tmp_path / "cache")
    for name in ("HF_HOME", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "CUDA_CACHE_PATH", "XDG_CACHE_HOME"):
        assert os.environ[name].startswith(str(tmp_path / "cache"))
    assert os.environ["TORCH_HOME"] == "/operator/choice"
    assert os.environ["HF_HUB_OFFLINE"] == "1"


def test_metric_names_are_the_contract():
    names = {k: v for k, v in vars(facts).items() if k.isupper() and isinstance(v, str) and k[0] != "_"}
    names = {
        k: v
        for k, v in names.items()
        if k in ("NAMESPACE", "DIMENSION_ENVIRONMENT", "DIMENSION_MODEL") or v in facts.METRIC_NAMES
    }
    assert names == {
        "NAMESPACE": "GpuInference",
        "DIMENSION_ENVIRONMENT": "Environment",
        "DIMENSION_MODEL": "ModelName",
        "REQUEST_LATENCY": "RequestLatency",
        "QUEUE_WAIT": "QueueWait",
        "INFERENCE_TIME": "InferenceTime",
        "BATCH_SIZE": "BatchSize",
        "QUEUE_DEPTH": "QueueDepth",
        "REJECTED_REQUESTS": "RejectedRequests",
        "TIMED_OUT_REQUESTS": "TimedOutRequests",
        "GPU_UTILIZATION": "GpuUtilization",
        "GPU_MEMORY_UTILIZATION": "GpuMemoryUtilization",
        "GPU_MEMORY_USED_MIB": "GpuMemoryUsedMiB",
        "MODEL_BUSY_PERCENT": "ModelBusyPercent",
        "CACHE_HITS": "CacheHits",
        "CACHE_MISSES": "CacheMisses",
        "SHARED_CACHE_HITS": "SharedCacheHits",
        "SHARED_CACHE_MISSES": "SharedCacheMisses",
        "SHARED_CACHE_ERRORS": "SharedCacheErrors",
        "SHARED_CACHE_SKIPPED": "SharedCacheSkipped",
        "SHARED_CACHE_OVERSIZED": "SharedCacheOversized",
        "SHARED_CACHE_STORED": "SharedCacheStored",
        "SHARED_CACHE_OPEN": "SharedCacheOpen",
        "SHARED_CACHE_LATENCY": "SharedCacheLatency",
        "STARTUP_SECONDS": "StartupSeconds",
        "STARTUP_FETCH_SECONDS": "StartupFetchSeconds",
        "STARTUP_LOAD_SECONDS": "StartupLoadSeconds",
        "STARTUP_WARMUP_SECONDS": "StartupWarmupSeconds",
        "STARTUP_COMPILE_SECONDS": "StartupCompileSeconds",
        "POOL_RESIDENT_MODELS": "PoolResidentModels",
        "POOL_HIT_RATE": "PoolHitRate",
        "POOL_LOADS": "PoolLoads",
        "POOL_LOAD_TIME": "PoolLoadTime",
        "POOL_EVICTIONS": "PoolEvictions",
        "POOL_FAILED_LOADS": "PoolFailedLoads",
    }


def test_embedding_dimensions_are_a_sorted_set_of_sizes(tmp_path):
    s = load_settings(["--model", str(tmp_path)], {**REQUIRED, "EMBEDDING_DIMENSIONS": "256, 64,128,64"})
    assert s.embedding_dimensions == (64, 128, 256)
    with pytest.raises(SettingsError, match="EMBEDDING_DIMENSIONS.*between 1 and 65536"):
        load_settings(["--model", str(tmp_path)], {**REQUIRED, "EMBEDDING_DIMENSIONS": "0"})


def test_the_workers_get_the_named_keys_the_supervisor_read():
    """The supervisor hands its settings to each worker as environment variables: names and keys survive."""
    from inference_server.supervisor.processes import settings_environment

    s = load_settings(
        [], {**REQUIRED, "API_KEYS": '{"team-a": "k-a", "team-b": "k-b"}', "EMBEDDING_DIMENSIONS": "64,128"}
    )
    again = load_settings([], settings_environment(s))
    assert again.api_keys == (("team-a", "k-a"), ("team-b", "k-b")) and again.embedding_dimensions == (64, 128)
    assert again == s
