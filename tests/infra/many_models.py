"""An environment with many models, generated from prod's config, and a timer for `cdk synth` of it.

    .venv/bin/python -m tests.infra.many_models 1 50 200
    .venv/bin/python -m tests.infra.many_models --markdown 1 50 200

synthesizes one generated environment per count with the pinned CDK CLI (`cdk synth --quiet`, cdk-nag on, as
`make synth` runs it) and prints, per count, the wall time, the stacks, and each stack's template size (bytes of
the synthesized JSON) and resource count: the Network stack, the shared (Inference) stack, the largest model
stack, and the totals; `--markdown` prints the table docs/testing.md's "Synth time" section shows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from stacks.reference_guard import LOCK_CONTEXT_KEY, LOCK_FILE
from tests.conftest import scenario_context
from tests.scenarios import scenario_environment

ROOT = Path(__file__).resolve().parents[2]


# A canary model takes two of a load balancer's 100 target groups (its quota by default): 50 models a load balancer.
MODELS_PER_LOAD_BALANCER = 50


def many_model_environment(count: int, base: str = "prod") -> dict:
    """``base``'s settings (tests/scenarios.py) serving ``count`` models, each a copy of its first with ``base``'s
    canary deployment, the first 50 on load balancer 1, the next 50 on 2, and so on (``models[].load_balancer``,
    recorded as a platform team would: a new model goes on a load balancer with room, and no other model moves)."""
    data = scenario_environment(base)
    template = {**data["models"][0], "min_tasks": 1, "max_tasks": 4}
    data["models"] = [
        {**template, "name": f"model-{index:03d}", "load_balancer": 1 + index // MODELS_PER_LOAD_BALANCER}
        for index in range(count)
    ]
    data["scaling"]["schedules"] = []
    # Canary deployments run a second full set of tasks at peak.
    data["capacity"]["max_capacity"] = 8 * count + 4
    return data


def write_cdk_json(directory: Path, count: int) -> Path:
    """The generated environment's cdk.json in ``directory``: this repo's app and flags, and a reference lock of its
    own there (the repo's references.lock.json records only the real environments)."""
    context = {
        **scenario_context(),
        "environments": {"many": many_model_environment(count)},
        LOCK_CONTEXT_KEY: str(directory / LOCK_FILE),
    }
    path = directory / "cdk.json"
    path.write_text(json.dumps({"app": f"{ROOT / '.venv/bin/python'} {ROOT / 'app.py'}", "context": context}))
    return path


def measure(count: int) -> dict:
    with tempfile.TemporaryDirectory() as directory:
        write_cdk_json(Path(directory), count)
        environment = {
            **os.environ,
            "PATH": f"{ROOT / 'node_modules/.bin'}:{os.environ['PATH']}",
            "CDK_DISABLE_CLI_TELEMETRY": "true",
            "JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION": "1",
        }
        started = time.perf_counter()
        subprocess.run(
            ["cdk", "synth", "--quiet", "--output", "cdk.out"],
            cwd=directory,
            env=environment,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        seconds = time.perf_counter() - started
        templates = sorted(Path(directory, "cdk.out").glob("assembly-*/*.template.json"))
        sizes = {path.name: path.stat().st_size for path in templates}
        resources = {path.name: len(json.loads(path.read_text())["Resources"]) for path in templates}
        balancers = sum(
            1
            for path in templates
            for r in json.loads(path.read_text())["Resources"].values()
            if r["Type"] == "AWS::ElasticLoadBalancingV2::LoadBalancer"
        )
    shared = next(name for name in sizes if "Inference" in name)
    network = next(name for name in sizes if "Network" in name)
    models = [name for name in sizes if "Model" in name]
    return {
        "models": count,
        "seconds": round(seconds, 1),
        "stacks": len(templates),
        "load_balancers": balancers,
        "network_bytes": sizes[network],
        "network_resources": resources[network],
        "shared_bytes": sizes[shared],
        "shared_resources": resources[shared],
        "largest_model_bytes": max(sizes[m] for m in models),
        "model_resources": max(resources[m] for m in models),
        "models_bytes": sum(sizes[m] for m in models),
        "models_resources": sum(resources[m] for m in models),
        "all_bytes": sum(sizes.values()),
        "all_resources": sum(resources.values()),
    }


def markdown(rows: list[dict]) -> str:
    def kb(size: int) -> str:
        return f"{size / 1000:,.0f} KB" if size < 1_000_000 else f"{size / 1_000_000:,.1f} MB"

    lines = [
        "| models | synth | stacks | load balancers | Network stack | shared stack | largest model stack | all model "
        "stacks | all stacks |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['models']} | {r['seconds']} s | {r['stacks']} | {r['load_balancers']} | {kb(r['network_bytes'])}, "
            f"{r['network_resources']} resources | {kb(r['shared_bytes'])}, {r['shared_resources']} | "
            f"{kb(r['largest_model_bytes'])}, {r['model_resources']} | {kb(r['models_bytes'])}, "
            f"{r['models_resources']} | {kb(r['all_bytes'])}, {r['all_resources']} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    arguments = [a for a in sys.argv[1:] if a != "--markdown"]
    rows = []
    for argument in arguments or ["1", "50", "200"]:
        rows.append(measure(int(argument)))
        print(json.dumps(rows[-1]), flush=True)
    if "--markdown" in sys.argv[1:]:
        print(markdown(rows))
