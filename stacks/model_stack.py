"""One model of an environment: its service, route, scaling and alarms, on the shared stack's capacity.

A stack per model keeps every stack far below CloudFormation's 500 resources however many models an
environment serves, and a change to one model (its version, say) updates that model's stack only.
The construct IDs are the ones the single-stack layout had, so each resource keeps its logical ID.
"""

from __future__ import annotations

from dataclasses import replace

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from gpu_inference_constructs import (
    NO_TRACES_WARNING,
    InferenceLoadBalancer,
    InferenceNetwork,
    LoadBalancerRoute,
    ModelAlarms,
    ModelPool,
    ModelProps,
    ModelService,
    ServiceAccess,
    ServiceLogs,
    ServiceScaling,
)

from .config import EnvironmentConfig, ModelServerConfig
from .inference_stack import InferenceStack


def model_stack_id(model_name: str) -> str:
    return f"Model-{model_name}"


class ModelStack(cdk.Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: EnvironmentConfig,
        model: ModelProps,
        shared: InferenceStack,
        network: InferenceNetwork,
        load_balancer: InferenceLoadBalancer | None = None,
        **kwargs,
    ) -> None:
        """``load_balancer``: the one this model is routed on (default: the shared stack's). Whatever stack holds it,
        this stack reads its listener ARN and ``LoadBalancerFullName`` as plain outputs, never a parsed ARN."""
        super().__init__(scope, construct_id, description=f"GPU inference: the {model.name} model service", **kwargs)
        load_balancer = load_balancer or shared.load_balancer_for(model.name)
        served = config.server_config(model)
        capacity = shared.capacity_for(model.name)
        route = LoadBalancerRoute(load_balancer, priority=served.listener_priority)
        logs = ServiceLogs(telemetry=config.telemetry, archive_bucket=self._log_archive(shared))
        access = ServiceAccess(api_keys_secret=self._api_keys(shared), subnets=network.private_subnets)
        rollback = config.rollback_thresholds_for(model)
        # One image asset for every bundled model and pool (the same directory): `cdk deploy` builds and pushes it once.
        self.service: ModelService
        if served.pool_server is not None:
            self.service = ModelPool(
                self,
                f"Model-{model.name}",
                model=model,
                environment=shared.inference_environment,
                capacity=capacity,
                model_store=shared.model_store,
                route=route,
                logs=logs,
                server=served.pool_server,
                access=access,
                timing=config.timing,
                rollback_thresholds=rollback,
            )
        else:
            self.service = ModelService(
                self,
                f"Model-{model.name}",
                model=model,
                environment=shared.inference_environment,
                capacity=capacity,
                model_source=shared.model_store,
                route=route,
                logs=logs,
                server=served.server,
                access=access,
                timing=config.timing,
                rollback_thresholds=rollback,
            )
        if self.service.contract.accelerator == "neuron" and self.service.contract.no_traces_reason is not None:
            cdk.Annotations.of(self.service).acknowledge_warning(
                NO_TRACES_WARNING, "the environment's Neuron models (TorchServe) are traced at the load balancer only"
            )
        if config.telemetry.firelens is not None and config.telemetry.firelens.archive is not None:
            cdk.Annotations.of(self.service).acknowledge_warning(
                "gpu-inference:firehose-endpoint",
                "config.py requires the network's kinesis-firehose endpoint for a Firehose archive",
            )
        self.scaling = ServiceScaling(
            self,
            f"Scaling-{model.name}",
            service=self.service,
            props=model.scaling,
            # The shared stack pre-warms `capacity` only (docs/configuration.md), not the group a model may run on.
            scaling=replace(config.scaling, capacity_prewarm=()),
        )
        self.alarms = ModelAlarms(self, "Monitoring", service=self.service, props=config.monitoring)
        shared.monitoring.add_model(self.service)  # its server's own metrics on the environment's dashboard
        self._grant_api_keys_decrypt(shared)
        if shared.result_cache is not None and config.uses_cache(model):
            self.service.use_cache(shared.result_cache)
        route, what = inference_route(model, config.server_config(model))
        cdk.CfnOutput(
            self,
            f"Url-{model.name}",
            value=f"{load_balancer.base_url}/{model.name}/{route}",
            description=f"{model.name} {what}",
        )

    def _log_archive(self, shared: InferenceStack) -> s3.IBucket | None:
        """The shared archive bucket as this stack sees it (its name and ARN as plain outputs, never a parsed ARN),
        with its key, so the task role's grants change only this stack."""
        if shared.log_archive is None:
            return None
        key = kms.Key.from_key_arn(self, "LogArchiveKey", shared.logs_key.key_arn)
        return s3.Bucket.from_bucket_attributes(
            self,
            "LogArchive",
            bucket_arn=shared.log_archive.bucket_arn,
            bucket_name=shared.log_archive.bucket_name,
            encryption_key=key,
        )

    def _api_keys(self, shared: InferenceStack) -> secretsmanager.ISecret:
        """The shared API-key secret and its key as this stack sees them: granting to an imported key changes only
        the execution role's policy (the key trusts the account), never the shared stack's key policy, which would
        make the shared stack depend on every model stack."""
        key = kms.Key.from_key_arn(self, "ApiKeysKey", shared.api_keys_key.key_arn)
        return secretsmanager.Secret.from_secret_attributes(
            self, "ApiKeys", secret_complete_arn=shared.api_keys.secret_arn, encryption_key=key
        )

    def _grant_api_keys_decrypt(self, shared: InferenceStack) -> None:
        """ECS reads the secret with the execution role, and Secrets Manager decrypts it with that role's permission.
        CDK grants that to the key's policy only (to a ViaServicePrincipal), which an imported key does not have."""
        self.service.task_definition.obtain_execution_role().add_to_principal_policy(
            iam.PolicyStatement(
                actions=["kms:Decrypt"],
                resources=[shared.api_keys_key.key_arn],
                conditions={"StringEquals": {"kms:ViaService": f"secretsmanager.{self.region}.amazonaws.com"}},
            )
        )


def inference_route(model: ModelProps, served: ModelServerConfig) -> tuple[str, str]:
    """The path below the model's prefix that answers its inference, and what it is: vLLM's completions, the Open
    Inference Protocol for tensor and image models (their inputs are not texts), /predict for text models; a pool's
    OpenAI embeddings or Open Inference Protocol route, naming one of its models."""
    if served.pool is not None:
        if served.bundled is not None and served.bundled.task == "text-embedding":
            return "v1/embeddings", "embeddings of the pool's models (OpenAI API: the model field names one)"
        return "v2/models/MODEL/infer", "inference of the pool's models (Open Inference Protocol v2: MODEL names one)"
    if served.bundled is None:
        return "v1/completions", "completions (OpenAI API)"
    if served.bundled.task in ("torch-export", "image-classification"):
        return f"v2/models/{model.name}/infer", "inference (Open Inference Protocol v2)"
    return "predict", "predictions"
