"""One environment: its stacks (network, shared, one per model), its tags and the cdk-nag checks that guard it."""

from __future__ import annotations

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks
from constructs import Construct

from .config import EnvironmentConfig
from .inference_stack import InferenceStack
from .model_stack import ModelStack, model_stack_id
from .network_stack import NetworkStack

# Resources whose update has side effects a tag change should never cause (see below).
UNTAGGED = ("AWS::ElasticLoadBalancingV2::ListenerRule", "AWS::ApplicationAutoScaling::ScalableTarget")


class InferenceStage(cdk.Stage):
    def __init__(self, scope: Construct, config: EnvironmentConfig) -> None:
        env = cdk.Environment(account=config.account, region=config.region)
        super().__init__(scope, config.stage_name, env=env)
        self.config = config
        # What the availability-zones lookup would return, so synth never calls AWS (ec2.Vpc reads it even when given
        # its zones): the zone names, or none where the zones are IDs. A name is per account and unknown at synth; the
        # network takes its zones from the IDs, and nothing else may place anything by the stack's zones.
        self.node.set_context(
            f"availability-zones:account={config.account}:region={config.region}",
            list(config.network.availability_zones),
        )
        cdk.Validations.of(self).add_plugins(AwsSolutionsChecks(self))
        # Not on listener rules: a tag change would update the rule, and CloudFormation rewrites its forward weights
        # with it, which may undo a canary's shift in progress (aws/aws-cdk#36649). Not on scalable targets: an update
        # registers the template's MinCapacity again, dropping a scheduled floor until the next scheduled action.
        for key, value in {"project": "gpu-inference", **config.tags}.items():
            cdk.Tags.of(self).add(key, value, exclude_resource_types=list(UNTAGGED))

        self.network_stack = NetworkStack(self, "Network", props=config.network, env=env)
        self.shared = InferenceStack(self, "Inference", config=config, network=self.network_stack.network, env=env)
        self.model_stacks = {
            model.name: ModelStack(
                self,
                model_stack_id(model.name),
                config=config,
                model=model,
                shared=self.shared,
                network=self.network_stack.network,
                env=env,
            )
            for model in config.models
        }
