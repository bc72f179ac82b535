"""Issue 53: "memory_mib: 29568 MiB does not fit on g6e.xlarge (... at most 29491 MiB)" when the team wrote 28,672 and
the sidecars made the rest: a task that does not fit says the value to write and what each sidecar takes. The team's
app: vLLM on one g6e.xlarge with a FireLens log router, in a plain cdk.App()."""

from __future__ import annotations

import pytest

from gpu_inference_constructs import (
    ConfigError,
    EcrImage,
    FireLensProps,
    GpuCapacity,
    GpuCapacityProps,
    ModelBucket,
    ModelProps,
    ModelService,
    ServiceLogs,
    TelemetryProps,
    VllmProps,
    VllmServer,
)
from gpu_inference_constructs.core.instance_catalog import CATALOG
from tests.consumer.test_team_scenarios import logs_key, team_stack

LIMIT = CATALOG["g6e.xlarge"].task_memory_limit_mib  # 29491
SIDECARS = 2 * 256 + 256 + 128  # scratch owner and fetcher, the ADOT collector, FireLens


def llm(memory_mib: int = 28672, cpu: int = 2048) -> None:
    from aws_cdk import aws_s3 as s3

    from gpu_inference_constructs import InferenceLoadBalancer, LoadBalancerProps

    _, stack, vpc = team_stack("Chat")
    bucket = s3.Bucket.from_bucket_name(stack, "Weights", "chat-weights")
    gpus = GpuCapacity(stack, "Gpus", vpc=vpc, props=GpuCapacityProps(instance_types=("g6e.xlarge",), max_capacity=2))
    alb = InferenceLoadBalancer(
        stack,
        "Alb",
        vpc=vpc,
        access_logs_bucket=bucket,
        longest_request_seconds=300,
        props=LoadBalancerProps(internet_facing=False, allow_http=True, ingress_cidrs=("10.0.0.0/8",)),
    )
    ModelService(
        stack,
        "Llama",
        model=ModelProps(name="llama", version="1", cpu=cpu, memory_mib=memory_mib, max_tasks=1),
        server=VllmServer(VllmProps(image=EcrImage(repository="mirror/vllm-openai", tag="v0.32.0"))),
        capacity=gpus,
        model_source=ModelBucket(bucket),
        route=alb,
        environment="chat",
        logs=ServiceLogs(logs_key(stack), telemetry=TelemetryProps(firelens=FireLensProps())),
    )


def test_a_task_too_large_says_the_memory_to_write_and_each_sidecars_share():
    assert (LIMIT, 28672 + SIDECARS) == (29491, 29568)  # the figures
    with pytest.raises(
        ConfigError,
        match=rf"^models\[llama\]\.memory_mib: 29568 MiB does not fit on g6e\.xlarge .*: write "
        rf"memory_mib: {LIMIT - SIDECARS} at most \(you wrote 28672; the sidecars take "
        rf"{SIDECARS} MiB: scratch owner and model fetcher 512, metrics collector 256, "
        r"FireLens log router 128\)",
    ):
        llm()


def test_the_value_it_names_fits():
    llm(memory_mib=LIMIT - SIDECARS)


def test_cpu_too_large_names_the_units_to_write():
    with pytest.raises(
        ConfigError,
        match=r"^models\[llama\]\.cpu: .*: write cpu: \d+ at most \(you wrote 4000; the "
        r"sidecars take \d+ CPU units: scratch owner and model fetcher 256, metrics "
        r"collector \d+, FireLens log router 64\)",
    ):
        llm(cpu=4000, memory_mib=20000)
