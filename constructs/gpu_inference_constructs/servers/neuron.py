"""The Neuron preset: an encoder compiled for AWS Inferentia2 at publish time, served by TorchServe in the AWS Neuron
Deep Learning Container (``pytorch-inference-neuronx``); its props are in neuron_server_props.py.

The published version is TorchServe's unarchived model layout, written by ``inference_server.tools.neuron_compile``
(``MAR-INF/MANIFEST.json``, its handler, the traced model, the tokenizer, TorchServe's properties and log
configuration): the init containers copy it to ``/scratch/model`` and check it against publish's digests, and
TorchServe loads it from there (``--model-store /scratch --models <name>=model``). Nothing is compiled at start.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..core.errors import require
from ..core.model_props import ModelProps
from ..core.server_contract import (
    SCRATCH_PATH,
    EcrImage,
    ModelFromS3,
    ServerContext,
    ServerContract,
    ServerDefinition,
    named_user,
    port_liveness,
    require_one_image,
    require_props,
    sidecar_reservation,
)
from ..core.stop_timing import StopTiming
from ..core.task_size import SidecarReservation
from .neuron_props import (
    NEURON_CORES_PER_DEVICE,
    TORCHSERVE_KEEP_ALIVE_SECONDS,
    TORCHSERVE_MANAGEMENT_PORT,
    TORCHSERVE_METRICS_PORT,
    NeuronServerProps,
)

if TYPE_CHECKING:  # images come through the ServerContext, so cdk.json's parsing loads without aws_cdk
    from aws_cdk import aws_ecs as ecs

# Written by neuron_compile into the published version (inference_server/tools/neuron_layout.py).
TORCHSERVE_PROPERTIES = "torchserve.properties"
TORCHSERVE_LOG_CONFIG = "log4j2.xml"
NEURON_MODEL_DIR = f"{SCRATCH_PATH}/model"

# SIGTERM reaches this shell (ECS signals the container's first process); it asks TorchServe to stop (the Java
# frontend's shutdown hook) and waits for it, so the workers release their NeuronCores before the container exits.
# The DLC's own entry point (dockerd-entrypoint.py) would run TorchServe as a child and never pass the signal on.
# The trap is set before TorchServe starts: a SIGTERM that comes at once still stops it.
NEURON_ENTRY_POINT = (
    "/bin/sh",
    "-c",
    "trap 'torchserve --stop --foreground; wait \"$server\"; exit 0' TERM INT; "
    'torchserve --start --foreground "$@" & server=$!; '
    'wait "$server"',
    "torchserve",  # $0; the command's arguments are "$@"
)

# The published handler (inference_server/tools/neuron_handler.py) checks each request's key against this variable.
API_KEYS_VARIABLE = "API_KEYS"

NEURON_RESERVED_ENVIRONMENT = (
    "API_KEYS",
    "HOME",
    "TEMP",
    "LOG_LOCATION",
    "METRICS_LOCATION",
    "NEURON_RT_NUM_CORES",
    "NEURON_RT_VISIBLE_CORES",
    "TS_INFERENCE_ADDRESS",
    "TS_MANAGEMENT_ADDRESS",
    "TS_METRICS_ADDRESS",
    "TS_DEFAULT_WORKERS_PER_MODEL",
    "TS_DEFAULT_RESPONSE_TIMEOUT",
    "TS_JOB_QUEUE_SIZE",
    "TS_DISABLE_SYSTEM_METRICS",
    "TS_MODEL_STORE",
    "TS_LOAD_MODELS",
    "MODEL_TASK",
    "AWS_DEFAULT_REGION",
    "USER",
    "LOGNAME",
    "HF_HUB_OFFLINE",
)


def torchserve_command(model_name: str) -> tuple[str, ...]:
    """``torchserve``'s arguments (pytorch/serve v0.11.0, ts/arg_parser.py): the published layout's properties and
    log configuration, the scratch volume as the model store and the model in it, no config snapshots (they would
    be written under the working directory, on the read-only root)."""
    return (
        "--ts-config",
        f"{NEURON_MODEL_DIR}/{TORCHSERVE_PROPERTIES}",
        "--log-config",
        f"{NEURON_MODEL_DIR}/{TORCHSERVE_LOG_CONFIG}",
        "--model-store",
        SCRATCH_PATH,
        "--models",
        f"{model_name}=model",
        "--ncs",
    )


def neuron_environment(props: NeuronServerProps, model: ModelProps, region: str) -> dict[str, str]:
    """The server's variables: TorchServe's configuration (``TS_*``, read because the published properties set
    ``enable_envvars_config=true``) and the Neuron runtime's."""
    return {
        **model.environment,
        # Each worker process reserves one NeuronCore; the runtime's default (0, "all") would give the first worker
        # every core and fail the others (AWS Neuron docs, Neuron Runtime configuration).
        "NEURON_RT_NUM_CORES": "1",
        "TS_INFERENCE_ADDRESS": f"http://0.0.0.0:{props.port}",
        "TS_MANAGEMENT_ADDRESS": f"http://127.0.0.1:{TORCHSERVE_MANAGEMENT_PORT}",
        "TS_METRICS_ADDRESS": f"http://127.0.0.1:{TORCHSERVE_METRICS_PORT}",
        "TS_DEFAULT_WORKERS_PER_MODEL": str(props.neuron_cores),
        "TS_DEFAULT_RESPONSE_TIMEOUT": str(props.request_timeout_seconds),
        "TS_JOB_QUEUE_SIZE": str(props.queue_size),
        "TS_DISABLE_SYSTEM_METRICS": "true",
        "MODEL_TASK": props.task,
        # The frontend's temporary model links and the logs' fallback location, off the read-only root.
        "TEMP": "/tmp",
        "LOG_LOCATION": f"{SCRATCH_PATH}/logs",
        "METRICS_LOCATION": f"{SCRATCH_PATH}/logs",
        "HOME": f"{SCRATCH_PATH}/home",
        "HF_HUB_OFFLINE": "1",
        "AWS_DEFAULT_REGION": region,
        **named_user("model-server"),
    }


@dataclass(frozen=True)
class NeuronServer(ServerDefinition):
    """The Neuron preset: ``props`` (default NeuronServerProps()) say how TorchServe serves the compiled encoder.
    The images are given once each: ``props.image``/``props.fetcher_image`` for your ECR mirrors (cdk.json's form), or
    ``image``/``fetcher_image`` here for any other ContainerImage (your own build); both is refused. ``user`` defaults
    to 1000:1000. Its contract says ``accelerator="neuron"``: ModelService refuses GPU capacity for it."""

    props: NeuronServerProps = field(default_factory=lambda: NeuronServerProps())
    """How TorchServe serves the model. Default: NeuronServerProps()."""
    image: ecs.ContainerImage | None = None
    """The server's image (any ContainerImage), in place of ``props.image``; with a ``props.image`` other than the
    default, refused. Default: None (``props.image``)."""
    user: str = "1000:1000"
    """The uid:gid TorchServe runs as. Default: 1000:1000."""
    fetcher_image: ecs.ContainerImage | None = None
    """The model fetcher's image (any ContainerImage), in place of ``props.fetcher_image``; with both, refused.
    Default: None (``props.fetcher_image``, else DEFAULT_FETCHER_IMAGE)."""

    name = "neuron"
    accelerator = "neuron"  # ModelService refuses capacity other than Inferentia2 for it
    support = "experimental"
    support_note = (
        "built from AWS's Neuron documentation and tested without a Neuron device (none is lent to this "
        "library's tests); its server, TorchServe, is in limited maintenance upstream"
    )

    def __post_init__(self) -> None:
        require_props(self.props, NeuronServerProps, type(self).__name__)
        require_one_image(type(self).__name__, self.props, {"image": self.image, "fetcher_image": self.fetcher_image})

    @property
    def stop(self) -> StopTiming:
        return self.props.stop

    @property
    def longest_request_seconds(self) -> int:
        return self.props.request_timeout_seconds

    @property
    def sidecar_reservation(self) -> SidecarReservation:
        return sidecar_reservation(ModelFromS3.copy_to_scratch(NEURON_MODEL_DIR), None)

    def check(self, model: ModelProps) -> None:
        """What this preset needs of the model, checked before any construct is made."""
        model.check_reserved_environment(NEURON_RESERVED_ENVIRONMENT, self.name)
        require(
            model.gpu_share is None,
            f"models[{model.name}].gpu_share",
            "a Neuron model takes whole Inferentia2 devices: remove gpu_share",
        )
        cores = NEURON_CORES_PER_DEVICE * model.gpus
        require(
            self.props.neuron_cores <= cores,
            "neuron.neuron_cores",
            f"{self.props.neuron_cores} workers need as many NeuronCores, but the task has {model.gpus} Inferentia2 "
            f"device(s) ({cores} cores): lower neuron_cores or raise the model's gpus",
        )

    def _image(self, context: ServerContext) -> ecs.ContainerImage:
        if self.image is not None:
            return self.image
        image = self.props.image
        if image.is_public:
            return context.registry_image(f"{image.repository}:{image.tag}")
        return context.ecr_image(EcrImage(image.repository, image.tag), "NeuronImage")

    def _fetcher_image(self, context: ServerContext) -> ecs.ContainerImage | None:
        if self.fetcher_image is not None:
            return self.fetcher_image
        return context.ecr_image(self.props.fetcher_image, "FetcherImage") if self.props.fetcher_image else None

    def contract(self, context: ServerContext) -> ServerContract:
        model, props = context.model, self.props
        self.check(model)
        return ServerContract(
            name=self.name,
            accelerator=self.accelerator,
            # TorchServe documents metrics (Prometheus, its metrics API) and no OpenTelemetry span export.
            no_traces_reason="TorchServe exports no OpenTelemetry spans; the load balancer's request metrics and the "
            "server's logs are this model's only per-request record (set trace_sampling_ratio to 0 "
            "to silence this)",
            image=self._image(context),
            entry_point=NEURON_ENTRY_POINT,
            command=torchserve_command(model.name),
            port=props.port,
            # The published handler answers a request without a body with its answer to the fixed probe text, run
            # through the compiled model: 200 only once a worker holds the model on a NeuronCore and it answers.
            readiness_path=f"/predictions/{model.name}",
            # /ping: 200 while every worker is healthy, 500 once one is not (ApiUtils.isModelHealthy, v0.11.0).
            liveness=port_liveness(props.port, "/ping"),
            user=self.user,
            model_source=ModelFromS3.copy_to_scratch(NEURON_MODEL_DIR, fetcher_image=self._fetcher_image(context)),
            tmpfs_mib={"/tmp": 1024},  # TorchServe's pid file, its workers' Unix sockets, the frontend's model links
            environment=neuron_environment(props, model, context.region),
            keep_alive_seconds=TORCHSERVE_KEEP_ALIVE_SECONDS,
            queue_capacity=props.queue_size,
            stop=self.stop,
            prediction_routes=("/predictions/{model}",),
            # TorchServe 0.11.0 checks no key (its token plugin is not in the DLC): the published handler does, against
            # the environment's API-key secret. Clients reach predictions and nothing else (not /ping, /models,
            # /metrics).
            public_paths=(f"/predictions/{model.name}",),
            api_keys_variable=API_KEYS_VARIABLE,
        )
