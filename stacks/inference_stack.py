"""GPU capacity, the model services behind one load balancer, their scaling and monitoring."""

from __future__ import annotations

from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_kms as kms
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct
from gpu_inference_constructs.acknowledgements import acknowledge
from gpu_inference_constructs.gpu_capacity import GpuCapacity
from gpu_inference_constructs.load_balancer import InferenceLoadBalancer
from gpu_inference_constructs.model_service import ModelService
from gpu_inference_constructs.server_contract import server_for
from gpu_inference_constructs.model_store import ModelStore
from gpu_inference_constructs.monitoring import InferenceMonitoring
from gpu_inference_constructs.service_scaling import ServiceScaling
from gpu_inference_constructs.network import InferenceNetwork, grant_logs_service
from gpu_inference_constructs.notifications import NotificationTopic

from .config import EnvironmentConfig

IMAGE_DIRECTORY = Path(__file__).resolve().parents[1] / "inference_image"


def bundled_image(scope: Construct) -> ecs.ContainerImage:
    """The model server image, built from inference_image/ by `cdk deploy` (synth needs no Docker)."""
    return ecs.ContainerImage.from_asset(
        str(IMAGE_DIRECTORY),
        platform=ecr_assets.Platform.LINUX_AMD64,
        display_name="gpu-inference-server",
    )


class InferenceStack(cdk.Stack):
    def __init__(self, scope: Construct, construct_id: str, *, config: EnvironmentConfig, network: InferenceNetwork, **kwargs) -> None:
        super().__init__(scope, construct_id, description="GPU inference: capacity, model services, scaling and monitoring", **kwargs)
        retain = cdk.RemovalPolicy.RETAIN if config.model_store.retain_on_delete else cdk.RemovalPolicy.DESTROY
        self.notifications = NotificationTopic(self, "Notifications", emails=config.alarm_emails)
        self.capacity = GpuCapacity(
            self,
            "GpuCapacity",
            vpc=network.vpc,
            subnets=network.private_subnets,
            props=config.capacity,
            notification_topic=self.notifications.topic,
        )
        self.model_store = ModelStore(self, "ModelStore", props=config.model_store)
        self.logs_key = kms.Key(self, "LogsKey", description="Encrypts the model servers' log groups", enable_key_rotation=True)
        grant_logs_service(self.logs_key, self.region, self.account)

        self.api_keys = secretsmanager.Secret(
            self,
            "ApiKeys",
            description="Comma-separated API keys that clients send in x-api-key; injected into every model task",
            generate_secret_string=secretsmanager.SecretStringGenerator(exclude_punctuation=True, password_length=40),
            removal_policy=retain,
        )
        acknowledge(
            self.api_keys.node.default_child,
            "AwsSolutions-SMG4",
            "Client API keys are rotated by issuing a new key alongside the old (the value is a comma-separated list), "
            "then retiring the old one; a single-user rotation Lambda would cut clients off mid-rotation.",
        )

        self.load_balancer = InferenceLoadBalancer(
            self,
            "LoadBalancer",
            vpc=network.vpc,
            props=config.load_balancer,
            access_logs_bucket=self.model_store.access_logs_bucket,
        )
        image = bundled_image(self)
        self.services: dict[str, ModelService] = {}
        for model in config.models:
            service = ModelService(
                self,
                f"Model-{model.name}",
                model=model,
                timing=config.service,
                capacity=self.capacity,
                subnets=network.private_subnets,
                server=server_for(model, image),
                model_store=self.model_store,
                load_balancer=self.load_balancer,
                logs_key=self.logs_key,
                log_retention_days=config.log_retention_days,
                environment_name=config.name,
                api_keys_secret=self.api_keys,
            )
            self.services[model.name] = service
            ServiceScaling(
                self,
                f"Scaling-{model.name}",
                model_service=service,
                props=model.scaling,
                scaling=config.scaling,
                load_balancer=self.load_balancer.load_balancer,
            )
            cdk.CfnOutput(self, f"Url-{model.name}", value=f"{self.load_balancer.base_url}/{model.name}/predict", description=f"{model.name} predictions")

        for prewarm in config.scaling.capacity_prewarm:
            self.capacity.add_prewarm(prewarm)
        self.monitoring = InferenceMonitoring(
            self,
            "Monitoring",
            environment_name=config.name,
            services=list(self.services.values()),
            load_balancer=self.load_balancer.load_balancer,
            capacity=self.capacity,
            topic=self.notifications.topic,
            props=config.monitoring,
        )
        cdk.CfnOutput(self, "LoadBalancerDns", value=self.load_balancer.load_balancer.load_balancer_dns_name)
        cdk.CfnOutput(self, "ModelBucket", value=self.model_store.bucket.bucket_name, description="Publish models under models/<name>/<version>/")
