"""The Neuron preset's props (free of aws_cdk, for the sizing advisor): an encoder compiled for AWS Inferentia2 at
publish time, served by TorchServe in the AWS Neuron Deep Learning Container ``pytorch-inference-neuronx``.

What the preset says of the container was read in its sources: the aws-neuron/deep-learning-containers README and
``pytorch/inference/2.9.0/Dockerfile.neuronx`` (TorchServe 0.11.0, ports 8080/8081, ``/ping``), and pytorch/serve at
tag v0.11.0 (its CLI, ``/ping`` and ``/predictions`` routes, ``TS_*`` variables, shutdown hook);
docs/aws-facts.md, "Neuron serving (issue 46)", lists each fact and where it is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from ..core.errors import require, require_range
from ..core.server_contract import EcrImage
from ..core.stop_timing import StopTiming

# The newest pytorch-inference-neuronx the aws-neuron/deep-learning-containers README lists for inf2 (Neuron SDK
# 2.31.1): the vLLM Neuron DLC of SDK 2.32 supports trn2/trn3 only, and NxD Inference stays at 2.31 on Inf2.
NEURON_DLC_REPOSITORY = "public.ecr.aws/neuron/pytorch-inference-neuronx"
NEURON_DLC_TAG = "2.9.0-neuronx-py312-sdk2.31.1-ubuntu24.04"
# A DLC tag: <torch>-neuronx-<python>-sdk<Neuron SDK>-<os> (the README's "ECR Public URL" column).
NEURON_DLC_TAG_PATTERN = re.compile(r"^(\d+\.\d+\.\d+)-neuronx-py(\d+)-sdk(\d+)\.(\d+)\.(\d+)-ubuntu\d+\.\d+$")
# Models compiled at publish time load only on a Neuron runtime of the SDK they were compiled with or later; the
# preset is written against TorchServe 0.11.0, which the DLCs ship from SDK 2.20 to 2.31.1.
NEURON_MIN_SDK = (2, 20, 0)

# TorchServe's inference API (the DLC's config.properties and EXPOSE): /ping and /predictions/<model>.
TORCHSERVE_PORT = 8080
# Management and metrics stay on the loopback: nobody outside the task may register or delete models.
TORCHSERVE_MANAGEMENT_PORT = 8081
TORCHSERVE_METRICS_PORT = 8082
# An Inferentia2 chip has two NeuronCore-v2 (AWS Neuron docs, Inferentia2 architecture); inf2.xlarge has one chip.
NEURON_CORES_PER_DEVICE = 2
# On SIGTERM the entry point runs ``torchserve --stop --foreground``: it sends SIGTERM to the Java frontend, whose
# shutdown hook closes the listeners and unregisters the model, and waits at most 60 s (ts/model_server.py, v0.11.0).
TORCHSERVE_EXIT_SECONDS = 65
# TorchServe's Netty pipeline has no idle-state handler (ServerInitializer.java, v0.11.0): it never closes an idle
# connection itself, so the load balancer's idle timeout always ends it first.
TORCHSERVE_KEEP_ALIVE_SECONDS = 86_400


def neuron_stop(request_timeout_seconds: int) -> StopTiming:
    """TorchServe in the Neuron DLC: it does not drain after SIGTERM (its shutdown hook closes the listeners at
    once), so a request must finish within the deregistration delay; it answers within ``request_timeout_seconds``
    (its response timeout) or the worker is restarted. Exit: ``TORCHSERVE_EXIT_SECONDS``."""
    return StopTiming(0, TORCHSERVE_EXIT_SECONDS, longest_request_seconds=request_timeout_seconds)


@dataclass(frozen=True)
class NeuronEcrImage:
    """The Neuron DLC's image: its public ECR repository (``public.ecr.aws/neuron/...``) or your ECR mirror of it."""

    repository: str = NEURON_DLC_REPOSITORY
    """The repository: the public one, or your mirror's name in the deploying account. Default: the public DLC."""
    tag: str = NEURON_DLC_TAG
    """A pinned DLC tag (not latest). Default: the SDK 2.31.1 tag."""

    def __post_init__(self) -> None:
        require(
            bool(re.match(r"^[a-z0-9]+(?:[._/-][a-z0-9]+)*$", self.repository)),
            "repository",
            f"{self.repository!r} is not an image repository",
        )
        match = NEURON_DLC_TAG_PATTERN.match(self.tag)
        require(
            match is not None,
            "tag",
            f"{self.tag!r}: pin an exact Neuron DLC tag such as {NEURON_DLC_TAG!r} (a floating tag such as 'latest' "
            "would change the Neuron runtime under a model compiled for another)",
        )
        assert match is not None  # required above
        sdk = (int(match[3]), int(match[4]), int(match[5]))
        require(
            sdk >= NEURON_MIN_SDK,
            "tag",
            f"{self.tag!r} is Neuron SDK {'.'.join(map(str, sdk))}: the preset needs TorchServe 0.11.0, in the DLCs "
            f"from SDK {'.'.join(map(str, NEURON_MIN_SDK))}; mirror {NEURON_DLC_TAG!r}",
        )

    @property
    def is_public(self) -> bool:
        return self.repository.startswith("public.ecr.aws/")

    @property
    def sdk_version(self) -> str:
        match = NEURON_DLC_TAG_PATTERN.match(self.tag)
        assert match is not None  # checked at construction
        return f"{match[3]}.{match[4]}.{match[5]}"


@dataclass(frozen=True)
class NeuronServerProps:
    """An encoder (text embedding or classification) compiled for Inferentia2 by ``inference_server.tools.
    neuron_compile`` at publish time, copied from the model's S3 prefix to ``/scratch/model`` and checked against
    publish's digests before TorchServe starts. TorchServe runs ``neuron_cores`` workers, each holding one NeuronCore
    (``NEURON_RT_NUM_CORES=1``); each worker runs the compiled batch size. Each field's default is stated under it."""

    image: NeuronEcrImage = NeuronEcrImage()
    """The DLC image.
    Default: ``public.ecr.aws/neuron/pytorch-inference-neuronx:2.9.0-neuronx-py312-sdk2.31.1-ubuntu24.04``."""
    task: Literal["text-embedding", "text-classification"] = "text-embedding"
    """What the compiled model answers (it must be the task it was compiled for). Default: "text-embedding"."""
    neuron_cores: int = NEURON_CORES_PER_DEVICE
    """TorchServe workers, one per NeuronCore (2 per Inferentia2 device × the model's ``gpus``). Default: 2
    (inf2.xlarge)."""
    request_timeout_seconds: int = 10
    """TorchServe's response timeout (``TS_DEFAULT_RESPONSE_TIMEOUT``): a batch that takes longer restarts its worker.
    Default: 10."""
    queue_size: int = 100
    """Requests TorchServe queues per model before it answers 503 (``TS_JOB_QUEUE_SIZE``). Default: 100
    (TorchServe's)."""
    port: int = TORCHSERVE_PORT
    """TorchServe's inference port. Default: 8080 (the DLC's)."""
    fetcher_image: EcrImage | None = None
    """Your ECR mirror of the model fetcher's image (the fleet's private subnets reach ECR, not public registries,
    without NAT). Default: None (DEFAULT_FETCHER_IMAGE, public: a synth warning names this key)."""

    def __post_init__(self) -> None:
        require(isinstance(self.image, NeuronEcrImage), "image", "give the DLC's repository and tag (NeuronEcrImage)")
        require(
            self.task in ("text-embedding", "text-classification"),
            "task",
            f"{self.task!r}: text-embedding or text-classification (the tasks neuron_compile compiles)",
        )
        require_range(
            self.neuron_cores, 1, 24, "neuron_cores", hint=" (2 per Inferentia2 device; inf2.48xlarge has 24)"
        )
        require_range(
            self.request_timeout_seconds,
            1,
            60,
            "request_timeout_seconds",
            hint=" (an encoder batch takes milliseconds; the deregistration delay must cover it)",
        )
        require_range(self.queue_size, 1, 100_000, "queue_size")
        require_range(self.port, 1024, 65535, "port")
        require(
            self.port not in (TORCHSERVE_MANAGEMENT_PORT, TORCHSERVE_METRICS_PORT),
            "port",
            f"{self.port} is TorchServe's management or metrics port (on the loopback): use another",
        )

    @property
    def stop(self) -> StopTiming:
        return neuron_stop(self.request_timeout_seconds)
