#!/usr/bin/env python3
"""One Stage per environment in cdk.json; `-c env=<name>` synthesizes just one."""

import sys
from pathlib import Path

import aws_cdk as cdk

from stacks.config import load_environments
from stacks.reference_guard import ACCEPT_CONTEXT_KEY, LOCK_CONTEXT_KEY, LOCK_FILE, ReplacementRefused, guard
from stacks.stage import InferenceStage

app = cdk.App()
context = {"environments": app.node.try_get_context("environments")}
for environment in load_environments(context, only=app.node.try_get_context("env")):
    InferenceStage(app, environment)
assembly = app.synth()
try:
    guard(
        {stack.stack_name: stack.template for stack in assembly.stacks_recursively},
        Path(app.node.try_get_context(LOCK_CONTEXT_KEY) or Path(__file__).resolve().parent / LOCK_FILE),
        accept=str(app.node.try_get_context(ACCEPT_CONTEXT_KEY)).lower() == "true",
    )
except ReplacementRefused as refused:
    sys.exit(f"cdk synth refused:\n{refused}")
