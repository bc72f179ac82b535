"""GPU capacity, the model services behind one load balancer, their scaling and monitoring."""

from __future__ import annotations

import aws_cdk as cdk
from constructs import Construct
from gpu_inference_constructs.gpu_capacity import GpuCapacity
from gpu_inference_constructs.network import InferenceNetwork
from gpu_inference_constructs.notifications import NotificationTopic

from .config import EnvironmentConfig


class InferenceStack(cdk.Stack):
    def __init__(self, scope: Construct, construct_id: str, *, config: EnvironmentConfig, network: InferenceNetwork, **kwargs) -> None:
        super().__init__(scope, construct_id, description="GPU inference: capacity, model services, scaling and monitoring", **kwargs)
        self.notifications = NotificationTopic(self, "Notifications", emails=config.alarm_emails)
        self.capacity = GpuCapacity(
            self,
            "GpuCapacity",
            vpc=network.vpc,
            subnets=network.private_subnets,
            props=config.capacity,
            notification_topic=self.notifications.topic,
        )
