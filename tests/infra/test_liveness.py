"""A container's liveness check never kills a model while it loads; readiness is the target group's job."""

from __future__ import annotations

import http.server
import socket
import subprocess
import sys
import threading

import pytest

from gpu_inference_constructs import BundledServer, ConfigError, LivenessCheck, ModelProps, ModelService
from gpu_inference_constructs.servers.vllm import vllm_liveness
from gpu_inference_constructs.service.checks import MAX_HEALTH_CHECK_START_PERIOD
from tests.infra.test_server_contract import IMAGE, complete, on_cluster, stack_with_placement
from tests.infra.test_service import containers


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run_check(command: tuple[str, ...]) -> int:
    assert command[:2] == ("CMD", "python3")
    return subprocess.run([sys.executable, *command[2:]], capture_output=True, timeout=20).returncode


class Health(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_GET(self):  # noqa: N802
        self.send_response(self.status if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


def serving(port: int, status: int):
    handler = type("Handler", (Health,), {"status": status})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_vllm_liveness_passes_while_loading_and_fails_a_listening_server_that_is_not_healthy():
    """vLLM listens only once its weights are loaded: before, the check passes (it used to fail, so ECS replaced a
    600 s load after 300 s + 3 x 15 s); after, /health must answer 200."""
    port = free_port()
    check = vllm_liveness(port).command
    assert run_check(check) == 0  # nothing listens yet: loading
    for status, expected in ((200, 0), (500, 1)):
        server = serving(port, status)
        try:
            assert run_check(check) == expected, status
        finally:
            server.shutdown()
            server.server_close()


def test_every_vllm_task_runs_that_liveness_check(env):
    config, template = env
    for model in [m for m in config.models if config.server_config(m).vllm is not None]:
        health = containers(template)[model.name]["HealthCheck"]
        assert tuple(health["Command"]) == vllm_liveness(config.server_config(model).vllm.port).command
        assert (
            health["StartPeriod"] == MAX_HEALTH_CHECK_START_PERIOD < model.expected_load_seconds
        )  # the load outlasts it


def test_every_models_start_window_covers_its_expected_load(env):
    """The ECS grace period (target-group health checks ignored) covers the load, and each container check either
    passes while loading (vLLM) or its start window (start period + retries) covers the load."""
    config, template = env
    services = template.find_resources("AWS::ECS::Service")
    assert len(services) == len(config.models)
    for model in config.models:
        (service,) = [
            s
            for logical_id, s in services.items()
            if logical_id.startswith(f"Model{model.name.replace('-', '')}Service")
        ]
        assert service["Properties"]["HealthCheckGracePeriodSeconds"] >= model.expected_load_seconds
        health = containers(template)[model.name]["HealthCheck"]
        window = health["StartPeriod"] + health["Retries"] * health["Interval"]
        assert (
            window >= model.expected_load_seconds
            or tuple(health["Command"]) == vllm_liveness(config.server_config(model).vllm.port).command
        )


@pytest.mark.parametrize("passes_while_loading", [False, True])
def test_a_liveness_check_that_fails_while_loading_is_refused_for_a_long_load(passes_while_loading):
    stack, parts = stack_with_placement()
    model = ModelProps(name="slow", version="1", expected_load_seconds=600)
    server = complete(liveness=LivenessCheck(("CMD", "serve", "--alive"), passes_while_loading=passes_while_loading))
    if passes_while_loading:
        ModelService(stack, "M", model=model, server=server, capacity=on_cluster(stack, "g5.xlarge"), **parts)
        return
    with pytest.raises(ConfigError) as error:
        ModelService(stack, "M", model=model, server=server, capacity=on_cluster(stack, "g5.xlarge"), **parts)
    assert error.value.key == "models[slow].expected_load_seconds"
    assert (
        "300 s start period + 3 x 15 s = 345 s" in error.value.detail
        and "passes_while_loading=True" in error.value.detail
    )


def test_the_bundled_preset_passes_while_loading():
    """The bundled server's /health answers once it listens; /ready answers 503 while the model loads."""
    stack, parts = stack_with_placement()
    service = ModelService(
        stack,
        "M",
        model=ModelProps(name="fast", version="1"),
        server=BundledServer(image=IMAGE),
        capacity=on_cluster(stack, "g5.xlarge"),
        **parts,
    )
    assert service.contract.liveness.passes_while_loading
