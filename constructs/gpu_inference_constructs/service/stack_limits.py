"""CloudFormation's 500 resources a stack, checked when the app synthesizes: a stack of many models fails with the
count, what takes the most and the fix (a stack per model, :func:`stacks_per_model`), before aws-cdk-lib's own
TooManyResourcesInStack, which names only resource types. The limit: AWS CloudFormation User Guide, quotas
("Resources: maximum number of resources that you can declare in your AWS CloudFormation template", 500)."""

from __future__ import annotations

import weakref
from collections.abc import Sequence

import aws_cdk as cdk
import jsii
from constructs import Construct, IConstruct, IValidation

MAX_STACK_RESOURCES = 500
WARN_AT = 400  # 80 %, where aws-cdk-lib adds its own info: a few more models would not fit

_WATCHED: weakref.WeakSet[cdk.Stack] = weakref.WeakSet()


def watch_stack_resources(scope: Construct) -> None:
    """Check ``scope``'s stack's resource count when the app synthesizes (once per stack)."""
    stack = cdk.Stack.of(scope)
    if stack not in _WATCHED:
        _WATCHED.add(stack)
        stack.node.add_validation(_StackResources(stack))


def resources_of(stack: cdk.Stack, construct: IConstruct) -> int:
    """The CloudFormation resources ``construct`` and what it holds declare in ``stack`` (not in nested stacks)."""
    return sum(
        1 for item in construct.node.find_all() if isinstance(item, cdk.CfnResource) and cdk.Stack.of(item) is stack
    )


def stack_resource_detail(stack: cdk.Stack) -> tuple[int, str]:
    """(the stack's resource count, its largest parts: '<child id> <count>', the five largest)."""
    parts = sorted(
        ((resources_of(stack, child), child.node.id) for child in stack.node.children),
        key=lambda part: (-part[0], part[1]),
    )
    total = sum(count for count, _ in parts)
    return total, ", ".join(f"{name} {count}" for count, name in parts[:5] if count)


FIX = (
    "give each model a stack of its own (stacks_per_model(scope, model_names, ...): the shared capacity, load "
    "balancer and network in one stack, each model's service, scaling and alarms in its own; constructs/README.md, "
    '"Many models")'
)


@jsii.implements(IValidation)
class _StackResources:
    def __init__(self, stack: cdk.Stack) -> None:
        self._stack = stack

    def validate(self) -> list[str]:
        stack = self._stack
        total, largest = stack_resource_detail(stack)
        if total > MAX_STACK_RESOURCES:
            return [
                f"stack {stack.node.path} declares {total} resources, more than CloudFormation's "
                f"{MAX_STACK_RESOURCES} a stack (TooManyResourcesInStack); the most: {largest}; {FIX}"
            ]
        if total >= WARN_AT:
            cdk.Annotations.of(stack).add_warning_v2(
                "gpu-inference:stack-resources",
                f"stack {stack.node.path} declares {total} of CloudFormation's {MAX_STACK_RESOURCES} resources a stack "
                f"(the most: {largest}): a few more models will not fit; {FIX}",
            )
        return []


def stacks_per_model(
    scope: Construct,
    model_names: Sequence[str],
    *,
    id_prefix: str = "Model",
    env: cdk.Environment | None = None,
    **stack_props,
) -> dict[str, cdk.Stack]:
    """A stack for each of ``model_names`` in ``scope`` (an App or a Stage), with the construct id
    ``<id_prefix>-<model>`` and ``env`` (default None: the scope's) and ``stack_props`` (cdk.StackProps' keywords:
    ``termination_protection``, ``tags``, ...): model name -> stack. Build each model's ModelService, ServiceScaling
    and ModelAlarms in its stack, on the capacity, load balancer and bucket of a shared stack: CDK passes them by
    cross-stack reference, and each model stack then stays far below the 500 resources of a stack."""
    return {name: cdk.Stack(scope, f"{id_prefix}-{name}", env=env, **stack_props) for name in model_names}
