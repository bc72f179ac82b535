"""What each model service, the load balancer, the model store and the image promise."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from aws_cdk.assertions import Template

from gpu_inference_constructs.core.adapter_sync import ADAPTER_READY_PATH, ADAPTER_READY_PORT
from gpu_inference_constructs.core.service_timing import SPOT_STOP_SECONDS
from gpu_inference_constructs.servers.bundled import BUNDLED_PORT as CONTAINER_PORT
from gpu_inference_constructs.servers.vllm import vllm_liveness, vllm_stop
from tests.conftest import ROOT
from tests.infra.conftest import ENVIRONMENTS
from tests.infra.test_server_contract import on_cluster


def containers(template, name="server"):
    """Model name -> its server container (or the ``name`` sidecar), found by the container's log stream prefix
    (``<model>/<version>``)."""
    found = {}
    for td in template.find_resources("AWS::ECS::TaskDefinition").values():
        for c in td["Properties"]["ContainerDefinitions"]:
            if c["Name"] == name:
                options = c["LogConfiguration"]["Options"]  # awslogs, or FireLens's cloudwatch_logs output
                found[(options.get("awslogs-stream-prefix") or options["log_stream_prefix"]).split("/")[0]] = c
    return found


# With LoRA adapters a vLLM model's rule forwards vLLM's inference routes only, never /v1/load_lora_adapter or
# /v1/unload_lora_adapter (any holder of the key could swap the adapters out): docs/lora-adapters.md.
VLLM_LORA_ROUTES = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models", "/v1/responses*")


def lora(config, model) -> bool:
    """Whether the model serves LoRA adapters (``vllm.lora``): its task runs the adapter-sync sidecar."""
    vllm = config.server_config(model).vllm
    return vllm is not None and vllm.lora is not None


def pooled(config, model) -> bool:
    """Whether the model is a pool (a ``pool`` block): its tasks forward requests to each other (model affinity)."""
    return config.server_config(model).pool is not None


def promised(config, model):
    """What the model's server contract promises: the bundled server's, or the vLLM preset's. ``health_check`` is the
    target groups' (port, path): the server's readiness, or with LoRA adapters the adapter-sync sidecar's ``/ready``
    (ready once every registered adapter is served); ``routes`` are what the listener rule forwards below the model."""
    if config.server_config(model).vllm is None:
        path = (
            f"v2/models/{model.name}/infer"
            if config.server_config(model).bundled.task in ("torch-export", "image-classification")
            else "predict"
        )
        if config.server_config(model).pool is not None:  # a pool's URL names its route, and a placeholder model
            path = (
                "v1/embeddings"
                if config.server_config(model).bundled.task == "text-embedding"
                else "v2/models/MODEL/infer"
            )
        return {
            "port": CONTAINER_PORT,
            "user": "10001:10001",
            "readiness": "/ready",
            "health_check": (CONTAINER_PORT, "/ready"),
            "routes": ("/predict*", "/v1/*", "/v2*") + (("/models/*",) if pooled(config, model) else ()),
            "secret": "API_KEYS",
            "gpus": 1,
            "path": path,
            "liveness": ["CMD", "python", "-m", "inference_server.healthcheck"],
        }
    port = config.server_config(model).vllm.port
    return {
        "port": port,
        "user": "1000:1000",
        "readiness": "/health",
        "health_check": (ADAPTER_READY_PORT, ADAPTER_READY_PATH) if lora(config, model) else (port, "/health"),
        "routes": VLLM_LORA_ROUTES if lora(config, model) else ("/v1/*",),
        "secret": "VLLM_API_KEY",
        "gpus": model.gpus,
        "path": "v1/completions",
        "liveness": list(vllm_liveness(config.server_config(model).vllm.port).command),
    }  # passes while loading: tests/infra/test_liveness.py


def bundled(config):
    return [m for m in config.models if config.server_config(m).vllm is None]


def environment_of(container):
    return {e["Name"]: e["Value"] for e in container["Environment"]}


def test_one_service_and_task_definition_per_model(env):
    config, template = env
    template.resource_count_is("AWS::ECS::Service", len(config.models))
    assert sorted(containers(template)) == sorted(m.name for m in config.models)


def test_each_task_reserves_its_gpus_and_the_configured_cpu_and_memory(env):
    config, template = env
    for model in config.models:
        container = containers(template)[model.name]
        if model.gpu_share is not None:  # a share of one GPU (tests/infra/test_gpu_sharing.py)
            assert container["ResourceRequirements"] == [
                {
                    "Type": "GPU",
                    "SharingStrategy": {
                        "NvidiaMps": model.gpu_share.resource_requirement()["SharingStrategy"]["NvidiaMps"]
                    },
                }
            ]
        else:
            assert container["ResourceRequirements"] == [{"Type": "GPU", "Value": str(promised(config, model)["gpus"])}]
        assert (container["Cpu"], container["MemoryReservation"]) == (model.cpu, model.memory_mib)
        assert container["PortMappings"] == [
            {"ContainerPort": promised(config, model)["port"], "Name": "http", "Protocol": "tcp"}
        ]


def logical(model_name):
    return model_name.replace("-", "")


def test_tasks_run_on_their_capacity_groups_provider_in_awsvpc_mode(env):
    config, template = env
    placement = config.model_placement()
    services = template.find_resources("AWS::ECS::Service")
    assert len(services) == len(config.models)
    for model in config.models:
        (service,) = [s for k, s in services.items() if k.startswith(f"Model{logical(model.name)}Service")]
        (strategy,) = service["Properties"]["CapacityProviderStrategy"]
        group = logical(placement.get(model.name, ""))
        assert (
            strategy["CapacityProvider"]["Ref"].startswith(f"GpuCapacity{group}CapacityProvider")
            and strategy["Weight"] == 1
        )
        assert service["Properties"]["NetworkConfiguration"]["AwsvpcConfiguration"]["AssignPublicIp"] == "DISABLED"
    for td in template.find_resources("AWS::ECS::TaskDefinition").values():
        assert td["Properties"]["NetworkMode"] == "awsvpc"
        assert td["Properties"]["RequiresCompatibilities"] == ["EC2"]


def test_secrets_are_injected_not_in_environment(env):
    config, template = env
    for model in config.models:
        container = containers(template)[model.name]
        assert [s["Name"] for s in container["Secrets"]] == [promised(config, model)["secret"]]
        value_from = container["Secrets"][0]["ValueFrom"]
        # The whole secret (a JSON object of names to keys), or for vLLM the one key of its name in it.
        assert "Ref" in value_from or (
            "Ref" in value_from["Fn::Join"][1][0] and config.server_config(model).vllm is not None
        )
        assert not any(
            word in name for name in environment_of(container) for word in ("KEY", "SECRET", "TOKEN", "PASSWORD")
        )


def test_server_environment_names_the_model_and_its_s3_uri(env):
    config, template = env
    for model in bundled(config):
        environment = environment_of(containers(template)[model.name])
        props = config.server_config(model).bundled
        assert environment["MODEL_VERSION"] == model.version
        assert environment["MODEL_TASK"] == props.task
        pool = config.server_config(model).pool is not None  # a pool's URI is its store prefix (test_model_pool.py)
        assert environment["MODEL_URI"]["Fn::Join"][1][-1] == (
            f"/pools/{model.name}/" if pool else f"/models/{model.name}/{model.version}/"
        )
        assert environment["MAX_BATCH_SIZE"] == str(props.max_batch_size)
        assert environment["DEPLOYMENT_ENV"] == config.name
        assert environment["DRAIN_TIMEOUT_S"] == str(props.drain_seconds)


def test_the_bundled_server_runs_workers_for_its_cpu_reservation_not_for_the_hosts_cpus(env):
    """On ECS on EC2 a container's `cpu` is a CPU share: the container sees all the host's vCPUs and has no cgroup
    CPU quota, so the server's own default (one worker per CPU it sees, less one) would start 47 workers for a
    3-vCPU task on a g5.12xlarge. The task sets WORKERS: one per whole reserved vCPU, less one for the model process."""
    from gpu_inference_constructs.servers.bundled import bundled_workers

    config, template = env
    for model in bundled(config):
        container = containers(template)[model.name]
        assert container["Cpu"] == model.cpu
        assert environment_of(container)["WORKERS"] == str(bundled_workers(model.cpu)), model.name
    three_vcpus = [containers(template)[m.name] for m in bundled(config) if m.cpu == 3072]
    assert three_vcpus or all(m.gpu_share is not None for m in bundled(config))  # dev's shared models reserve 1 vCPU
    assert all(environment_of(c)["WORKERS"] == "2" for c in three_vcpus)


@pytest.mark.parametrize(
    "cpu, workers", [(256, 1), (1024, 1), (2048, 1), (3072, 2), (3584, 2), (4096, 3), (16384, 15), (45056, 43)]
)
def test_worker_count_formula(cpu, workers):
    from gpu_inference_constructs.servers.bundled import bundled_workers

    assert bundled_workers(cpu) == workers


def test_a_models_environment_workers_overrides_the_derived_count():
    from gpu_inference_constructs import BundledServer, ModelProps, ModelService
    from tests.infra.test_server_contract import IMAGE, stack_with_placement

    stack, parts = stack_with_placement()
    ModelService(
        stack,
        "M",
        model=ModelProps(name="m1", version="1", cpu=3072, environment={"WORKERS": "4"}),
        server=BundledServer(image=IMAGE),
        capacity=on_cluster(stack, "g5.xlarge"),
        **parts,
    )
    (container,) = containers(Template.from_stack(stack)).values()
    assert environment_of(container)["WORKERS"] == "4"


@pytest.mark.parametrize("workers", ["0", "-1", "four", "2.5", " 4", "257", ""])
def test_a_models_environment_workers_that_is_not_a_worker_count_is_refused(workers):
    from gpu_inference_constructs import BundledServer, ModelProps
    from gpu_inference_constructs.core.errors import ConfigError

    with pytest.raises(
        ConfigError,
        match=rf"^environment\.WORKERS: '{re.escape(workers)}' .*1 to 256.*leave WORKERS out.*\(2 for cpu 3072\)",
    ):
        BundledServer().check(ModelProps(name="m1", version="1", cpu=3072, environment={"WORKERS": workers}))


def test_a_task_on_a_large_host_starts_the_workers_its_reservation_pays_for(tmp_path):
    """The server, given the task's environment on a host with more CPUs than the task reserves, starts WORKERS
    workers (the supervisor's own count: settings first, CPUs it can see only without them)."""
    from gpu_inference_constructs.servers.bundled import bundled_workers
    from inference_server.settings import load_settings
    from inference_server.supervisor import processes as supervisor

    environment = {
        "MODEL_NAME": "m",
        "MODEL_VERSION": "1",
        "MODEL_URI": str(tmp_path),
        "MODEL_TASK": "text-embedding",
        "WORKERS": str(bundled_workers(3072)),
    }
    settings = load_settings([], environment)
    assert supervisor.worker_count(settings) == 2
    unset = load_settings([], {k: v for k, v in environment.items() if k != "WORKERS"})
    assert supervisor.worker_count(unset) == max(1, supervisor.task_cpus() - 1), (
        "without WORKERS the server counts the CPUs it sees"
    )


def test_containers_are_non_root_read_only_and_unprivileged(env):
    config, template = env
    for model in config.models:
        container = containers(template)[model.name]
        assert container["User"] == promised(config, model)["user"]
        assert container["ReadonlyRootFilesystem"] is True
        assert container["Privileged"] is False
        assert container["LinuxParameters"]["InitProcessEnabled"] is True
        # With LoRA adapters the server reads the adapters the sidecar downloads, and cannot write them.
        adapters = (
            [{"ContainerPath": "/adapters", "ReadOnly": True, "SourceVolume": "adapters"}]
            if lora(config, model)
            else []
        )
        assert container["MountPoints"] == [
            {"ContainerPath": "/scratch", "ReadOnly": False, "SourceVolume": "scratch"},
            *adapters,
        ]


def test_scratch_volume_is_task_scoped(env):
    """Every task's scratch, and a LoRA model's adapters, live in docker volumes that go with the task."""
    config, template = env
    definitions = template.find_resources("AWS::ECS::TaskDefinition")
    assert len(definitions) == len(config.models)
    for model in config.models:
        (td,) = [d for k, d in definitions.items() if k.startswith(f"Model{logical(model.name)}")]
        names = ["scratch", *(["adapters"] if lora(config, model) else [])]
        assert td["Properties"]["Volumes"] == [
            {"Name": name, "DockerVolumeConfiguration": {"Driver": "local", "Scope": "task"}} for name in names
        ]


def test_stop_timeout_and_deregistration_fit_the_spot_notice(env):
    """Each model's own target groups' delay plus its own stopTimeout fit the notice: the environment's timing for
    our server, the preset's for vLLM (its longest generation as the delay, its drain and exit as the stop timeout)."""

    config, template = env
    groups = template.find_resources("AWS::ElasticLoadBalancingV2::TargetGroup")
    assert groups
    for model in config.models:
        container = containers(template)[model.name]
        stop = container["StopTimeout"]
        prefix = f"Model{model.name.replace('-', '')}"
        delays = {
            int(
                {a["Key"]: a["Value"] for a in g["Properties"]["TargetGroupAttributes"]}[
                    "deregistration_delay.timeout_seconds"
                ]
            )
            for k, g in groups.items()
            if k.startswith(f"{prefix}TargetGroup") or k.startswith(f"{prefix}AlternateTargetGroup")
        }
        if config.server_config(model).vllm is None:
            assert (delays, stop) == ({config.timing.deregistration_delay_seconds}, config.timing.stop_timeout_seconds)
            assert int(environment_of(container)["DRAIN_TIMEOUT_S"]) < stop
        else:
            timing = vllm_stop(config.server_config(model).vllm.longest_request_seconds)
            assert (delays, stop) == (
                {config.server_config(model).vllm.longest_request_seconds},
                timing.seconds_after_sigterm,
            )
        (delay,) = delays
        assert delay + stop <= SPOT_STOP_SECONDS


def test_logs_go_to_encrypted_groups_with_the_environment_retention(env):
    config, template = env
    for container in containers(template).values():
        if config.telemetry.firelens is not None:  # FireLens's router writes to the same group (test_telemetry.py)
            assert container["LogConfiguration"]["LogDriver"] == "awsfirelens"
            continue
        assert container["LogConfiguration"]["LogDriver"] == "awslogs"
        assert container["LogConfiguration"]["Options"]["mode"] == "non-blocking"
    groups = [g for k, g in template.find_resources("AWS::Logs::LogGroup").items() if k.startswith("Model")]
    servers = [g for g in groups if "LogGroupName" in g["Properties"]]  # a hook's function logs to an unnamed group
    assert len(servers) == len(
        config.models
    )  # besides, each canary model's never-healthy hook logs (test_revision_hook)
    for group in groups:
        assert group["Properties"]["RetentionInDays"] == config.log_retention_days
        assert "KmsKeyId" in group["Properties"]


def test_every_containers_log_stream_carries_the_model_version(env):
    """During a canary two versions of a model log to one group side by side; every container of every server
    (vLLM's included, whose own lines carry no version) writes to ``<model>/<version>/<container>/<task id>``, so
    Logs Insights keeps them apart with ``filter @logStream like "<model>/<version>/"``."""
    config, template = env
    by_prefix = {}
    for td in template.find_resources("AWS::ECS::TaskDefinition").values():
        for c in td["Properties"]["ContainerDefinitions"]:
            options = c["LogConfiguration"]["Options"]
            # FireLens's router names the server's streams <model>/<version>/server/<...>, as awslogs would.
            prefix = options.get("awslogs-stream-prefix") or options["log_stream_prefix"].removesuffix("/server/")
            by_prefix.setdefault(prefix, set()).add(c["Name"])
    router = {"log-router"} if config.telemetry.firelens is not None else set()
    expected = {
        f"{m.name}/{m.version}": {"server", "metrics-collector"}
        | router
        | ({"scratch-owner", "model-fetch"} if config.server_config(m).vllm else set())
        | ({"adapter-sync"} if lora(config, m) else set())
        for m in config.models
    }
    assert by_prefix == expected


def test_deployments_roll_back_and_grace_period_follows_model_load_time(env):
    config, template = env
    services = template.find_resources("AWS::ECS::Service")
    for model in config.models:
        (service,) = [s for k, s in services.items() if k.startswith(f"Model{logical(model.name)}Service")]
        properties = service["Properties"]
        deployment = properties["DeploymentConfiguration"]
        assert deployment["Alarms"]["Rollback"] and len(deployment["Alarms"]["AlarmNames"]) >= 1
        if model.deployment.uses_circuit_breaker:
            assert deployment["DeploymentCircuitBreaker"] == {"Enable": True, "Rollback": True}
        assert properties["HealthCheckGracePeriodSeconds"] == model.health_check_grace_seconds
        assert properties["HealthCheckGracePeriodSeconds"] > model.expected_load_seconds
        assert properties["PlacementStrategies"][0] == {"Field": "attribute:ecs.availability-zone", "Type": "spread"}
        assert "DesiredCount" not in properties, "auto scaling owns the count"


def test_container_health_check_is_cheap_liveness_within_ecs_limits(env):
    config, template = env
    for model in config.models:
        check = containers(template)[model.name]["HealthCheck"]
        assert check["Command"] == promised(config, model)["liveness"]
        assert check["StartPeriod"] <= 300


def test_target_groups_check_readiness_without_flapping(env):
    config, template = env
    groups = [g["Properties"] for g in template.find_resources("AWS::ElasticLoadBalancingV2::TargetGroup").values()]
    # Traffic goes to the server's port; the check asks the server's readiness, or with LoRA adapters the sidecar's.
    assert {(g["Port"], int(g["HealthCheckPort"]), g["HealthCheckPath"]) for g in groups} == {
        (promised(config, m)["port"], *promised(config, m)["health_check"]) for m in config.models
    }
    for properties in groups:
        assert properties["TargetType"] == "ip"
        assert properties["Matcher"] == {"HttpCode": "200"}
        # A new task takes traffic 10 s after it is ready (tests/sizing: the timeline); a failing one (a Spot instance
        # reclaimed before its tasks drained) loses it after three misses, 15 s, not one slow answer.
        assert (properties["HealthCheckIntervalSeconds"], properties["HealthyThresholdCount"]) == (5, 2)
        assert properties["HealthCheckTimeoutSeconds"] < properties["HealthCheckIntervalSeconds"]
        assert properties["UnhealthyThresholdCount"] >= 3
        assert properties["HealthCheckIntervalSeconds"] * properties["UnhealthyThresholdCount"] <= 15


def test_each_model_has_a_path_rule(env):
    config, template = env
    rules = template.find_resources("AWS::ElasticLoadBalancingV2::ListenerRule")
    patterns = sorted(
        tuple(sorted(r["Properties"]["Conditions"][0]["PathPatternConfig"]["Values"])) for r in rules.values()
    )
    # A vLLM model's rule forwards its OpenAI API only: vLLM's key guards /v1 and nothing else; with LoRA adapters
    # its inference routes only (not /v1/load_lora_adapter). The bundled server's: its keyed inference and metadata
    # routes only (tests/infra/test_exposure.py). A pool's adds its native route with the model in the path,
    # /<pool>/models/<model>/predict.
    assert patterns == sorted(
        tuple(sorted(f"/{m.name}{route}" for route in promised(config, m)["routes"])) for m in config.models
    )
    priorities = [r["Properties"]["Priority"] for r in rules.values()]
    assert len(set(priorities)) == len(priorities) and all(1 <= p <= 50_000 for p in priorities)


def routed_path(template, path: str) -> str | None:
    """What the ALB does with a request path: the pattern of the rule that forwards it, or None (the listener's 404).
    ALB path patterns are case-sensitive globs where * matches any characters, / included, and ? one."""
    import fnmatch

    for rule in template.find_resources("AWS::ElasticLoadBalancingV2::ListenerRule").values():
        for pattern in rule["Properties"]["Conditions"][0]["PathPatternConfig"]["Values"]:
            if fnmatch.fnmatchcase(path, pattern):
                return pattern
    return None


def test_a_vllm_models_unauthenticated_routes_are_not_reachable_through_the_load_balancer(env):
    """vLLM answers /invocations (the same inference as /v1), /pooling, /score, /rerank, /tokenize and its control
    routes without checking its API key; through our listener only /<model>/v1/... reaches it."""
    config, template = env
    for model in (m for m in config.models if config.server_config(m).vllm):
        for unguarded in (
            "invocations",
            "pooling",
            "classify",
            "score",
            "rerank",
            "tokenize",
            "detokenize",
            "version",
            "metrics",
            "health",
            "ping",
            "reset_prefix_cache",
            "sleep",
            "wake_up",
            "collective_rpc",
            "",
        ):
            assert routed_path(template, f"/{model.name}/{unguarded}") is None, unguarded
        assert routed_path(template, f"/{model.name}") is None
        for guarded in ("v1/completions", "v1/chat/completions", "v1/models"):
            pattern = f"/{model.name}/{guarded}" if lora(config, model) else f"/{model.name}/v1/*"
            assert routed_path(template, f"/{model.name}/{guarded}") == pattern
        if lora(config, model):  # the adapter API stays the sidecar's: no client swaps the served adapters out
            assert routed_path(template, f"/{model.name}/v1/responses/resp_1") == f"/{model.name}/v1/responses*"
            for control in ("v1/load_lora_adapter", "v1/unload_lora_adapter", "v1/", "v1/completion"):
                assert routed_path(template, f"/{model.name}/{control}") is None, control
    for model in (m for m in config.models if not config.server_config(m).vllm):
        assert routed_path(template, f"/{model.name}/predict") == f"/{model.name}/predict*"


def test_unknown_paths_get_a_json_404(env):
    _, template = env
    listeners = template.find_resources("AWS::ElasticLoadBalancingV2::Listener")
    routing = [
        listener
        for listener in listeners.values()
        if listener["Properties"]["DefaultActions"][0]["Type"] == "fixed-response"
    ]
    assert len(routing) == 1
    response = routing[0]["Properties"]["DefaultActions"][0]["FixedResponseConfig"]
    assert response["StatusCode"] == "404" and response["ContentType"] == "application/json"
    assert json.loads(response["MessageBody"])["error"]["code"] == "not_found"


def test_https_uses_a_modern_policy_and_http_redirects_when_a_certificate_is_set(env):
    config, template = env
    listeners = {
        listener["Properties"]["Port"]: listener["Properties"]
        for listener in template.find_resources("AWS::ElasticLoadBalancingV2::Listener").values()
    }
    if config.load_balancer.certificate_arn:
        assert listeners[443]["Protocol"] == "HTTPS"
        assert listeners[443]["SslPolicy"] == "ELBSecurityPolicy-TLS13-1-2-2021-06"
        assert listeners[80]["DefaultActions"] == [
            {"RedirectConfig": {"Port": "443", "Protocol": "HTTPS", "StatusCode": "HTTP_301"}, "Type": "redirect"}
        ]
    else:
        assert config.load_balancer.allow_http and set(listeners) == {80}


def test_no_environment_serves_plain_http(synthesized):
    """dev too: plain HTTP from the internet would carry the keys in cleartext (tests/infra/test_exposure.py)."""
    assert [
        name for name, stage in synthesized.stages.items() if stage.config.load_balancer.certificate_arn is None
    ] == []


def test_load_balancer_drops_bad_headers_logs_access_and_is_protected_in_prod(env):
    config, template = env
    (balancer,) = template.find_resources("AWS::ElasticLoadBalancingV2::LoadBalancer").values()
    attributes = {a["Key"]: a["Value"] for a in balancer["Properties"]["LoadBalancerAttributes"]}
    assert attributes["routing.http.drop_invalid_header_fields.enabled"] == "true"
    assert attributes["access_logs.s3.enabled"] == "true"
    assert attributes["deletion_protection.enabled"] == ("true" if config.name == "prod" else "false")


def test_the_idle_timeout_carries_the_longest_request_and_every_server_keeps_connections_longer(env):
    """A non-streamed response sends nothing until it is done: past the ALB idle timeout the client gets an ELB 504
    (staging's llama-13b generates for up to 80 s; the timeout was 60). And a server that closes an idle connection
    before the ALB does causes 502s: the bundled server's KEEP_ALIVE_S and vLLM's VLLM_HTTP_TIMEOUT_KEEP_ALIVE."""
    config, template = env
    (balancer,) = template.find_resources("AWS::ElasticLoadBalancingV2::LoadBalancer").values()
    idle_timeout = int(
        {a["Key"]: a["Value"] for a in balancer["Properties"]["LoadBalancerAttributes"]}["idle_timeout.timeout_seconds"]
    )
    longest = {m.name: config.server_of(m).longest_request_seconds for m in config.models}
    assert longest == {
        m.name: config.server_config(m).vllm.longest_request_seconds
        if config.server_config(m).vllm
        else config.server_config(m).bundled.request_timeout_seconds
        for m in config.models
    }
    assert idle_timeout >= max(longest.values()) + 10 and idle_timeout <= 4000
    for model in config.models:
        variables = environment_of(containers(template)[model.name])
        keep_alive = variables["VLLM_HTTP_TIMEOUT_KEEP_ALIVE" if config.server_config(model).vllm else "KEEP_ALIVE_S"]
        assert float(keep_alive) > idle_timeout, model.name
        if config.server_config(model).vllm is None:
            assert float(variables["REQUEST_TIMEOUT_S"]) + 10 <= idle_timeout


def web_acl_rules(config, template):
    acls = template.find_resources("AWS::WAFv2::WebACL")
    if not config.load_balancer.waf:
        assert acls == {}
        return None
    (acl,) = acls.values()
    template.resource_count_is("AWS::WAFv2::WebACLAssociation", 1)
    return {r["Name"]: r for r in acl["Properties"]["Rules"]}


def test_waf_body_rules_do_not_block_prediction_texts(env):
    """Prediction texts may hold HTML, paths or URLs: the common rule set's body rules (cross-site scripting, local and
    remote file inclusion, metadata SSRF, the 8 KB size limit) count, and a later rule blocks on their labels only off
    the prediction paths."""
    config, template = env
    rules = web_acl_rules(config, template)
    if rules is None:
        return
    common = rules["AWSManagedRulesCommonRuleSet"]["Statement"]["ManagedRuleGroupStatement"]
    counted = {o["Name"] for o in common["RuleActionOverrides"] if o["ActionToUse"] == {"Count": {}}}
    assert counted == {
        "SizeRestrictions_BODY",
        "CrossSiteScripting_BODY",
        "GenericLFI_BODY",
        "GenericRFI_BODY",
        "EC2MetaDataSSRF_BODY",
        "NoUserAgent_HEADER",
    }
    bad_inputs = rules["AWSManagedRulesKnownBadInputsRuleSet"]["Statement"]["ManagedRuleGroupStatement"]
    assert {o["Name"] for o in bad_inputs["RuleActionOverrides"] if o["ActionToUse"] == {"Count": {}}} == {
        "Log4JRCE_BODY",
        "JavaDeserializationRCE_BODY",
    }
    scoped = rules["BodyRulesOffPredictions"]
    assert scoped["Priority"] > max(
        rules[g]["Priority"] for g in ("AWSManagedRulesCommonRuleSet", "AWSManagedRulesKnownBadInputsRuleSet")
    )
    assert scoped["Action"] == {"Block": {}}
    found, off_predictions = scoped["Statement"]["AndStatement"]["Statements"]
    labels = {s["LabelMatchStatement"]["Key"] for s in found["OrStatement"]["Statements"]}
    assert labels == {
        f"awswaf:managed:aws:core-rule-set:{n}_Body"
        for n in ("CrossSiteScripting", "GenericLFI", "GenericRFI", "EC2MetaDataSSRF")
    } | {f"awswaf:managed:aws:known-bad-inputs:{n}_Body" for n in ("Log4JRCE", "JavaDeserializationRCE")}
    exempt = off_predictions["NotStatement"]["Statement"]
    for model in config.models:
        for path in body_routes(config, model):
            assert waf_matches(exempt, f"/{model.name}{path}"), f"{model.name}: the body rules would block {path}"
        for path in (
            "/ready",
            "/health",
            "/metrics",
            "/docs",
            "/openapi.json",
            f"/v2/models/{model.name}",
            "/predict/",
            "/x/predict",
        ):
            assert not waf_matches(exempt, f"/{model.name}{path}"), f"{model.name}: {path} takes no prediction body"
        assert not waf_matches(exempt, "/predict"), "the exemption is below a model's prefix only"


def bundled_server_routes(model_name: str, version: str) -> dict:
    """The OpenAPI paths of the bundled server itself (inference_image/), built for ``model_name``: {path: operations}.
    Every route is served at /<route> and at /<model>/<route> (inference_server/app.py); the document lists the
    first."""
    from types import SimpleNamespace
    from typing import cast

    from inference_server.front.app import create_app
    from inference_server.front.client import ModelClient
    from inference_server.front.service import WorkerService
    from inference_server.settings import Settings

    settings = Settings(
        model_name=model_name, model_version=version, model_uri="/nonexistent", model_task="text-embedding"
    )
    client = cast(
        ModelClient, SimpleNamespace(status=None)
    )  # a stand-in: building the OpenAPI document never calls the model
    return create_app(WorkerService(settings, client=client)).openapi()["paths"]


# vLLM's OpenAI routes that take a prompt (its API key guards /v1; public_paths forwards /v1/* only).
VLLM_BODY_ROUTES = ("/v1/completions", "/v1/chat/completions", "/v1/embeddings")


def body_routes(config, model) -> list[str]:
    """The paths below the model's prefix whose requests carry a body (prompt, texts, tensors), with each path
    parameter set to the value the server accepts: derived from the bundled server's own routes, so a route added
    to the server that the WAF would inspect as a body fails the test until BUNDLED_PREDICTION_ROUTES (the bundled
    server's declaration) has it."""
    if config.server_config(model).vllm is not None:
        return list(VLLM_BODY_ROUTES)
    paths = []
    for path, operations in bundled_server_routes(model.name, model.version).items():
        for operation in operations.values():
            if "requestBody" in operation:
                for parameter in operation.get("parameters", []):
                    if parameter["in"] == "path":
                        (value,) = parameter["schema"]["enum"]
                        path = path.replace("{" + parameter["name"] + "}", value)
                paths.append(path)
    assert {"/predict", "/predict/batch", "/v1/embeddings", f"/v2/models/{model.name}/infer"} <= set(paths), paths
    return paths


def waf_matches(statement: dict, uri_path: str) -> bool:
    """What AWS WAF decides for a statement on the request's URI path (the statement kinds the web ACL uses there)."""
    import re

    if "OrStatement" in statement:
        return any(waf_matches(s, uri_path) for s in statement["OrStatement"]["Statements"])
    if "NotStatement" in statement:
        return not waf_matches(statement["NotStatement"]["Statement"], uri_path)
    ((kind, match),) = statement.items()
    assert match["FieldToMatch"] == {"UriPath": {}} and match["TextTransformations"] == [
        {"Priority": 0, "Type": "NONE"}
    ]
    if kind == "RegexMatchStatement":
        return re.search(match["RegexString"], uri_path) is not None
    assert kind == "ByteMatchStatement", kind
    search, where = match["SearchString"], match["PositionalConstraint"]
    return {
        "EXACTLY": uri_path == search,
        "STARTS_WITH": uri_path.startswith(search),
        "ENDS_WITH": uri_path.endswith(search),
        "CONTAINS": search in uri_path,
    }[where]


def test_waf_rate_limit_lets_one_client_drive_any_model_to_its_configured_peak(env):
    """A single client IP (a backend behind a NAT) may drive a model to its peak (requests_per_target_per_minute at
    max_tasks): prod's 20,000 per 5 minutes answered 403 at 4,000 a minute against minilm's configured 14,400. By
    default the limit is the busiest model's peak."""
    config, template = env
    rules = web_acl_rules(config, template)
    if rules is None:
        return
    limit = rules["RateLimitPerClientIp"]["Statement"]["RateBasedStatement"]["Limit"]
    for model in config.models:
        assert limit >= 5 * model.max_tasks * model.scaling.requests_per_target_per_minute, model.name
    if config.load_balancer.waf_rate_limit_per_5_minutes is None:
        assert limit == 5 * max(m.max_tasks * m.scaling.requests_per_target_per_minute for m in config.models)


def cached_models(config) -> list[str]:
    return [m.name for m in config.models if config.uses_cache(m)]


def test_the_load_balancer_needs_one_egress_rule_per_container_port_however_many_models(env):
    """A security group holds 60 rules by default: one egress rule per model's group would stop at 60 models.
    Models on the same port (every bundled-server model) share one rule; a vLLM model on 8000 adds one, and a LoRA
    model's health check on the adapter-sync sidecar's port one more."""
    config, template = env
    egress = [
        e["Properties"]
        for e in template.find_resources("AWS::EC2::SecurityGroup").values()
        if e["Properties"]["GroupDescription"].startswith("Inference load balancer")
    ]
    (balancer,) = egress
    ports = sorted(
        {promised(config, m)["port"] for m in config.models}
        | {promised(config, m)["health_check"][0] for m in config.models}
    )
    assert sorted((r["IpProtocol"], r["FromPort"], r["ToPort"]) for r in balancer["SecurityGroupEgress"]) == [
        ("tcp", p, p) for p in ports
    ]
    # The standalone egress rules: the result cache's client group (every cached model's tasks carry it) to the
    # cache, one however many models use it (tests/infra/test_result_cache.py); and each pool's tasks to their own
    # group on the server's port (model affinity forwards a request to the task that owns its model).
    standalone = [e["Properties"] for e in template.find_resources("AWS::EC2::SecurityGroupEgress").values()]
    to_cache = [e for e in standalone if e["GroupId"]["Fn::GetAtt"][0].startswith("ResultCacheClientSecurityGroup")]
    assert len(to_cache) == (1 if config.cache is not None else 0)
    peers = [e for e in standalone if e not in to_cache]
    assert sorted(
        (e["GroupId"]["Fn::GetAtt"][0], e["DestinationSecurityGroupId"]["Fn::GetAtt"][0], e["FromPort"], e["ToPort"])
        for e in peers
    ) == sorted(
        (group, group, promised(config, m)["port"], promised(config, m)["port"])
        for m in config.models
        if pooled(config, m)
        for group in [task_security_group(template, m)]
    )
    assert all(e["IpProtocol"] == "tcp" for e in peers)


def task_security_group(template, model) -> str:
    """The logical ID of the model's tasks' security group."""
    (group,) = [
        k
        for k, g in template.find_resources("AWS::EC2::SecurityGroup").items()
        if k.startswith(f"Model{logical(model.name)}SecurityGroup")
    ]
    return group


def test_tasks_accept_only_the_load_balancer_on_the_container_port(env):
    """A task admits the load balancer on its server's port and on its health check's (the adapter-sync sidecar's
    with LoRA adapters), and a pool's task its own pool's peers on the server's port; nothing else."""
    config, template = env
    ingress = template.find_resources("AWS::EC2::SecurityGroupIngress")
    to_tasks = [
        i["Properties"] for i in ingress.values() if i["Properties"]["GroupId"]["Fn::GetAtt"][0].startswith("Model")
    ]
    balancer = "LoadBalancerSecurityGroup"
    expected = []
    for m in config.models:
        group, port, health = (
            task_security_group(template, m),
            promised(config, m)["port"],
            promised(config, m)["health_check"][0],
        )
        expected += [(group, balancer, p, p, "tcp") for p in sorted({port, health})]
        expected += [(group, group, port, port, "tcp")] if pooled(config, m) else []

    def source(rule) -> str:
        group = rule["SourceSecurityGroupId"]["Fn::GetAtt"][0]
        return balancer if group.startswith(balancer) else group

    assert sorted(
        (r["GroupId"]["Fn::GetAtt"][0], source(r), r["FromPort"], r["ToPort"], r["IpProtocol"]) for r in to_tasks
    ) == sorted(expected), "every source is the load balancer or the task's own pool"


def test_task_role_reads_only_its_model_prefix(env):
    config, template = env
    policies = {k: p for k, p in template.find_resources("AWS::IAM::Policy").items() if "TaskRoleDefaultPolicy" in k}
    assert len(policies) == len(config.models)
    for model in config.models:
        (policy,) = [p for k, p in policies.items() if k.startswith(f"Model{logical(model.name)}")]
        statements = policy["Properties"]["PolicyDocument"]["Statement"]
        actions = sorted(str(s["Action"]) for s in statements)
        # Every task's collector writes traces to X-Ray; the vLLM preset's also writes its EMF, and a FireLens router
        # the server's logs, to the model's own log group, nothing else.
        writes_logs = config.server_config(model).vllm or config.telemetry.firelens is not None
        collector = ["['logs:CreateLogStream', 'logs:DescribeLogStreams', 'logs:PutLogEvents']"] if writes_logs else []
        collector.append("['xray:PutTelemetryRecords', 'xray:PutTraceSegments']")
        cache = ["elasticache:Connect"] if model.name in cached_models(config) else []  # on the result cache only
        archive = config.telemetry.firelens.archive if config.telemetry.firelens is not None else None
        archived = (
            [
                *(["s3:PutObject", "kms:GenerateDataKey"] if archive.s3 else []),
                *(["firehose:PutRecordBatch"] if archive.firehose_stream_arn else []),
            ]
            if archive is not None
            else []
        )  # the log archive's writes: tests/infra/test_log_archive.py
        # a pool's: its registry; with LoRA adapters, the adapter-sync sidecar's adapters/<model>/ besides
        prefixes = [f"{'pools' if pooled(config, model) else 'models'}/{model.name}/"]
        prefixes += [f"adapters/{model.name}/"] if lora(config, model) else []
        listings = ["s3:ListBucket"] * len(prefixes)
        assert actions == sorted(["s3:GetObject", *listings, *collector, *cache, *archived])
        for statement in statements:
            if str(statement["Action"]).startswith("['logs"):
                assert statement["Resource"]["Fn::GetAtt"][0].startswith(f"Model{model.name.replace('-', '')}Logs")
        get = next(s for s in statements if s["Action"] == "s3:GetObject")
        objects = get["Resource"] if isinstance(get["Resource"], list) else [get["Resource"]]
        assert sorted(r["Fn::Join"][1][-1] for r in objects) == sorted(f"/{prefix}*" for prefix in prefixes)
        listed = [s["Condition"] for s in statements if s["Action"] == "s3:ListBucket"]
        assert sorted(listed, key=json.dumps) == sorted(
            ({"StringLike": {"s3:prefix": [prefix, f"{prefix}*"]}} for prefix in prefixes), key=json.dumps
        )


def test_model_bucket_is_versioned_encrypted_private_logged_and_ages_out_old_versions(env):
    config, template = env
    buckets = template.find_resources(
        "AWS::S3::Bucket", {"Properties": {"LoggingConfiguration": {"LogFilePrefix": "s3/models/"}}}
    )
    (bucket,) = buckets.values()
    assert bucket["Properties"]["VersioningConfiguration"] == {"Status": "Enabled"}
    properties = bucket["Properties"]
    assert properties["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"] == {
        "SSEAlgorithm": "AES256"
    }
    assert properties["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }
    assert properties["LoggingConfiguration"]["LogFilePrefix"] == "s3/models/"
    rule = next(r for r in properties["LifecycleConfiguration"]["Rules"] if r["Id"] == "age-out-noncurrent-versions")
    assert rule["NoncurrentVersionTransitions"] == [
        {
            "StorageClass": "STANDARD_IA",
            "TransitionInDays": config.model_store.noncurrent_versions_to_infrequent_access_days,
        }
    ]
    assert rule["NoncurrentVersionExpiration"] == {"NoncurrentDays": config.model_store.noncurrent_versions_expire_days}


def test_buckets_deny_plain_http(env):
    _, template = env
    for policy in template.find_resources("AWS::S3::BucketPolicy").values():
        statements = policy["Properties"]["PolicyDocument"]["Statement"]
        assert any(
            s["Effect"] == "Deny" and s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}} for s in statements
        )


def test_stateful_resources_are_retained_in_prod_only(synthesized):
    for name in ENVIRONMENTS:
        template = synthesized.template(name, "Inference")
        stateful = {
            k: r
            for k, r in template["Resources"].items()
            if r["Type"] in ("AWS::S3::Bucket", "AWS::SecretsManager::Secret")
        }
        archive = synthesized.stages[name].config.telemetry.firelens
        archives = (
            {"LogArchive62E50B8E"}
            if archive is not None and archive.archive is not None and archive.archive.s3
            else set()
        )
        assert set(stateful) == {
            "ModelStoreAccessLogsE6BA2A6E",
            "ModelStoreModelsB220DB3A",
            "ApiKeys3BB3983D",
            *archives,
        }, "logical IDs stay stable"
        expected = "Retain" if name == "prod" else "Delete"
        assert {r["DeletionPolicy"] for r in stateful.values()} == {expected}, name


def test_outputs_give_the_load_balancer_and_each_model_url(env):
    config, template = env
    outputs = template.to_json()["Outputs"]
    assert "LoadBalancerDns" in outputs
    for model in config.models:
        url = next(o for k, o in outputs.items() if k.startswith(f"Url{logical(model.name)}"))
        assert url["Value"]["Fn::Join"][1][-1] == f"/{model.name}/{promised(config, model)['path']}"


def test_image_asset_is_built_for_linux_amd64_from_a_lean_context(synthesized):
    manifest = json.loads(next(synthesized.outdir.glob("assembly-Dev/*Modelminilm*.assets.json")).read_text())
    (image,) = manifest["dockerImages"].values()
    assert image["source"]["platform"] == "linux/amd64"
    context = synthesized.outdir / "assembly-Dev" / image["source"]["directory"]
    names = {path.name for path in context.rglob("*")}
    assert {"Dockerfile", "requirements.lock", "pyproject.toml", "__main__.py", "healthcheck.py"} <= names
    leaked = sorted(
        n
        for n in names
        if n in {"__pycache__", "tests", ".pytest_cache"} or n.endswith((".pyc", ".egg-info")) or n.startswith("test_")
    )
    assert leaked == []


def hadolint(dockerfile: Path) -> tuple[int, list]:
    """hadolint's exit code and its JSON findings (a list, empty when clean: a crash prints no JSON)."""
    binary = shutil.which("hadolint") or str(ROOT / ".venv" / "bin" / "hadolint")
    result = subprocess.run(
        [binary, "--format", "json", "--failure-threshold", "style", str(dockerfile)], capture_output=True, text=True
    )
    return result.returncode, json.loads(result.stdout)


def test_dockerfile_passes_hadolint():
    assert hadolint(ROOT / "inference_image" / "Dockerfile") == (0, [])


def test_hadolint_reports_a_planted_finding(tmp_path):
    """The twin: the same call fails on a Dockerfile with an unpinned base image and apt packages (DL3007, DL3008)."""
    planted = tmp_path / "Dockerfile"
    planted.write_text("FROM ubuntu:latest\nRUN apt-get update && apt-get install -y curl\n")
    returncode, findings = hadolint(planted)
    assert returncode == 1 and {"DL3007", "DL3008"} <= {f["code"] for f in findings}


def test_vllm_models_serve_with_tensor_parallelism_over_their_gpus_from_scratch(env):
    config, template = env
    for model in [m for m in config.models if config.server_config(m).vllm is not None]:
        server = containers(template)[model.name]
        command = [*server["EntryPoint"], *server["Command"]]
        assert command[:3] == ["vllm", "serve", "/scratch/model"]
        assert command[command.index("--tensor-parallel-size") + 1] == str(model.gpus) == "4"
        assert server["ResourceRequirements"] == [{"Type": "GPU", "Value": "4"}]
        assert server["LinuxParameters"]["SharedMemorySize"] == config.server_config(model).vllm.shared_memory_mib
        router = (
            [{"Condition": "START", "ContainerName": "log-router"}] if config.telemetry.firelens is not None else []
        )
        # With LoRA adapters the server starts once the adapter-sync sidecar has (so ECS stops the server first).
        sync = [{"Condition": "START", "ContainerName": "adapter-sync"}] if lora(config, model) else []
        assert server["DependsOn"] == [*router, {"Condition": "SUCCESS", "ContainerName": "model-fetch"}, *sync]
        assert "vllm/vllm-openai" not in str(server["Image"]) and str(server["Image"]).count(".dkr.ecr.") == 1, (
            "from the account's ECR mirror"
        )
        fetcher = containers(template, "model-fetch")[model.name]
        uri = {e["Name"]: e["Value"] for e in fetcher["Environment"]}["MODEL_URI"]
        assert json.dumps(uri).endswith(f'"/models/{model.name}/{model.version}/"]]}}'), (
            "weights from the model bucket's versioned prefix"
        )
        collector = containers(template, "metrics-collector")[model.name]
        agent = json.dumps(collector["Environment"])
        # The ADOT collector (vLLM's latency histograms, tests/infra/test_otel_collector.py) scrapes the gauges too.
        assert "vllm_num_requests_waiting" in agent and "AOT_CONFIG_CONTENT" in agent


def test_the_per_environment_model_kind_tests_have_a_subject(synthesized):
    """Tests here and in test_scaling, test_monitoring and test_liveness check
    `[m for m in config.models if config.server_config(m).vllm
    ...]` per environment: vacuous where an environment has no such model. This keeps each kind served somewhere,
    so those loops cannot all be empty."""
    served = [stage.config.server_config(m) for stage in synthesized.stages.values() for m in stage.config.models]
    assert any(s.vllm is not None for s in served) and any(s.vllm is None for s in served)
