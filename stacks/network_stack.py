"""The network of one environment."""

from __future__ import annotations

import aws_cdk as cdk
from constructs import Construct

from gpu_inference_constructs import InferenceNetwork, NetworkProps


class NetworkStack(cdk.Stack):
    def __init__(self, scope: Construct, construct_id: str, *, props: NetworkProps, **kwargs) -> None:
        super().__init__(scope, construct_id, description="GPU inference: VPC, endpoints and flow logs", **kwargs)
        self.network = InferenceNetwork(self, "Network", props=props)
