"""Every JSON block of the docs is JSON, and each `cdk.json` fragment among them loads as synth loads it: merged into
an environment of the tests' own (tests/scenario_environments.json) and read by stacks.config, which refuses unknown
keys and bad values. A fragment is what a team pastes into its cdk.json, so a renamed key or a value the loader no
longer accepts must fail here, not in the team's `cdk synth`."""

from __future__ import annotations

import copy
import dataclasses
import json
import re
from pathlib import Path

import pytest

from gpu_inference_constructs.core.errors import ConfigError
from stacks.config import EnvironmentConfig, load_environment
from tests.conftest import documentation_files
from tests.scenarios import scenario_environment, scenario_environments

ROOT = Path(__file__).resolve().parents[2]
PAGES = documentation_files()
BLOCK = re.compile(r"^```json\n(.*?)^```", re.S | re.M)
# An elided part of a list (`[ ...,`): the entries the environment has already.
ELIDED = re.compile(r"\[\s*\.\.\.\s*,")
ENVIRONMENT_NAMES = tuple(scenario_environments())  # dev, staging, prod


def json_blocks() -> list[tuple[str, str]]:
    return [
        (f"{page.relative_to(ROOT)}:{page.read_text()[: match.start()].count(chr(10)) + 1}", match.group(1))
        for page in PAGES
        for match in BLOCK.finditer(page.read_text())
    ]


def parse(text: str) -> object:
    """A block as JSON: a bare `"key": value, ...` is an object's members."""
    text = ELIDED.sub("[", text.strip())
    return json.loads(f"{{{text}}}" if text.startswith('"') else text)


def merge_model(models: list[dict], fragment: dict) -> None:
    """A model of the fragment: merged into the environment's model of that name, or added."""
    existing = next((m for m in models if m["name"] == fragment["name"]), None)
    if existing is None:
        models.append(fragment)
    else:
        merge(existing, fragment)


def merge(into: dict, fragment: dict) -> None:
    for key, value in fragment.items():
        if key == "models" and isinstance(value, list) and value and isinstance(value[0], dict):
            for model in value:
                merge_model(into.setdefault("models", []), model)
        elif isinstance(value, dict) and isinstance(into.get(key), dict):
            merge(into[key], value)
        else:
            into[key] = value


# The JSON blocks that are not cdk.json, by page: what else the docs show as JSON.
NOT_CDK_JSON = {
    "docs/scaling-and-alarms.md": "an ECS deployment event, as EventBridge delivers it",
    "docs/security.md": "the API-key secret's value",
    "inference_image/README.md": "a model's declaration (model.json) and its image preprocessing",
}
ENVIRONMENT_KEYS = {field.name for field in dataclasses.fields(EnvironmentConfig)} - {"name"}


def as_environments(where: str, fragment: object) -> list[tuple[str, dict]]:
    """The environments the fragment may configure, each merged into the tests' copy of it: the one it names, or else
    each of them (a fragment is written for an environment like one of ours, not for all: a capacity group for
    staging's LLM, a model beside prod's schedules); none for a page's JSON that is not cdk.json (NOT_CDK_JSON) and
    for a whole cdk.json (test_readme_examples loads README.md's)."""
    if where.split(":")[0] in NOT_CDK_JSON or (isinstance(fragment, dict) and "context" in fragment):
        return []
    assert isinstance(fragment, dict), f"{where}: a JSON block that is neither cdk.json nor in NOT_CDK_JSON"
    if set(fragment) & set(ENVIRONMENT_NAMES):
        (name,) = fragment
        return [(name, _merged(name, fragment[name]))]
    # A model, or an environment's keys: a misspelt one is left in, for the loader to name.
    is_model = "name" in fragment
    assert is_model or set(fragment) & ENVIRONMENT_KEYS, (
        f"{where}: no key of an environment or a model: {list(fragment)}"
    )
    return [(name, _merged(name, {"models": [fragment]} if is_model else fragment)) for name in ENVIRONMENT_NAMES]


def _merged(name: str, fragment: dict) -> dict:
    environment = copy.deepcopy(scenario_environment(name))
    merge(environment, fragment)
    return environment


def loads_somewhere(candidates: list[tuple[str, dict]]) -> None:
    """Loads in at least one candidate environment; else fails with every candidate's error."""
    errors = []
    for name, environment in candidates:
        try:
            load_environment(name, environment)
            return
        except ConfigError as error:
            errors.append(f"{name}: {error}")
    raise AssertionError("\n".join(errors))


BLOCKS = json_blocks()


@pytest.mark.parametrize(("where", "text"), BLOCKS, ids=[where for where, _ in BLOCKS])
def test_each_json_block_of_the_docs_is_json(where, text):
    parse(text)


CONFIG_BLOCKS = [(where, text) for where, text in BLOCKS if as_environments(where, parse(text))]


def test_the_docs_config_fragments_are_found():
    """The pages' cdk.json fragments, counted: one lost (or no longer recognised as cdk.json) fails here."""
    pages = sorted({where.split(":")[0] for where, _ in CONFIG_BLOCKS})
    assert pages == ["docs/configuration.md", "docs/server.md", "docs/sizing.md"], pages
    assert len(CONFIG_BLOCKS) == 11, [
        where
        for where, _ in CONFIG_BLOCKS
        # 7th: the warm pool, 8th: telemetry, 9th: the log archive, 10th: a model pool, 11th: LoRA adapters
        # (configuration.md)
    ]


@pytest.mark.parametrize(("where", "text"), CONFIG_BLOCKS, ids=[where for where, _ in CONFIG_BLOCKS])
def test_each_cdk_json_fragment_of_the_docs_loads_as_synth_loads_it(where, text):
    loads_somewhere(as_environments(where, parse(text)))


@pytest.mark.parametrize(
    ("fragment", "error"),
    [
        ('"capacity": {"instance_type": ["g5.xlarge"]}', "instance_type: unknown key"),
        ('"capcity": {"instance_types": ["g5.xlarge"]}, "capacity": {"min_capacity": 0}', "capcity: unknown key"),
        ('{"name": "ranker", "version": "1", "max_batch_size": 0}', "max_batch_size"),
        ('"prod": {"models": [{"name": "minilm", "shared_cache": {"ttl_seconds": -1}}]}', "ttl_seconds"),
    ],
)
def test_a_fragment_the_loader_refuses_fails_naming_the_key(fragment, error):
    """The twins: a misspelt key, a misspelt environment key, a bad value in a new model, a bad value merged into an
    existing model."""
    with pytest.raises(AssertionError, match=error):
        loads_somewhere(as_environments("docs/planted.md:1", parse(fragment)))
