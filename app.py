#!/usr/bin/env python3
"""One Stage per environment in cdk.json; `-c env=<name>` synthesizes just one."""

import aws_cdk as cdk

from stacks.config import load_environments
from stacks.stage import InferenceStage

app = cdk.App()
context = {"environments": app.node.try_get_context("environments")}
for environment in load_environments(context, only=app.node.try_get_context("env")):
    InferenceStage(app, environment)
app.synth()
