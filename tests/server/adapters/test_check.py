"""An adapter against its base model, from local directories: what publish --adapter records, and each refusal naming
what is wrong and the fix."""

from __future__ import annotations

import json

import pytest

from inference_server.adapters.base_model import read_base_model
from inference_server.adapters.check import check_adapter
from inference_server.adapters.peft_config import AdapterError
from tests.server.adapters.peft_files import write_llama_base, write_lora_adapter

BASE = "tiny-llama"


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return read_base_model(str(write_llama_base(tmp_path_factory.mktemp("base") / BASE)), BASE)


def test_the_base_has_the_llama_projections_read_from_its_weights(base):
    assert base.modules >= {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    assert "model.layers.1.mlp.down_proj" in base.module_paths and BASE in base.ids


def test_a_matching_adapter_gives_the_facts_its_manifest_records(tmp_path, base):
    facts = check_adapter(write_lora_adapter(tmp_path / "a", rank=8, targets=("q_proj", "v_proj")), base, BASE, 16)
    assert (facts.base_model, facts.rank, facts.target_modules) == (BASE, 8, ("q_proj", "v_proj"))
    assert facts.to_json()["kind"] == "lora-adapter"


def test_base_ids_compare_by_their_last_path_segment(tmp_path, base):
    adapter = write_lora_adapter(tmp_path / "a", base="/home/me/models/Tiny-Llama/")
    assert check_adapter(adapter, base, BASE).base_model == BASE


def test_a_rank_above_the_limit_is_refused(tmp_path, base):
    with pytest.raises(AdapterError, match=r"rank 32 is above --max-rank 16.*retrain"):
        check_adapter(write_lora_adapter(tmp_path / "a", rank=32), base, BASE, 16)


def test_a_rank_pattern_above_the_limit_is_refused(tmp_path, base):
    adapter = write_lora_adapter(tmp_path / "a", rank=8, config={"rank_pattern": {"q_proj": 64}})
    with pytest.raises(AdapterError, match="rank 64"):
        check_adapter(adapter, base, BASE, 16)


def test_a_target_module_the_base_lacks_is_refused(tmp_path, base):
    adapter = write_lora_adapter(tmp_path / "a", config={"target_modules": ["q_proj", "query_key_value"]})
    with pytest.raises(AdapterError, match=r"\['query_key_value'\] are not modules.*q_proj"):
        check_adapter(adapter, base, BASE)


def test_weights_for_modules_the_base_lacks_are_refused(tmp_path, base):
    adapter = write_lora_adapter(tmp_path / "a", layers=3)  # the base has two layers
    with pytest.raises(AdapterError, match="model.layers.2.*another architecture"):
        check_adapter(adapter, base, BASE)


def test_an_adapter_for_another_base_is_refused(tmp_path, base):
    with pytest.raises(AdapterError, match=r"'meta-llama/Llama-3.1-8B' is not base model 'tiny-llama'.*--base"):
        check_adapter(write_lora_adapter(tmp_path / "a", base="meta-llama/Llama-3.1-8B"), base, BASE)


def test_a_regex_of_target_modules_is_resolved_against_the_base(tmp_path, base):
    adapter = write_lora_adapter(tmp_path / "a", config={"target_modules": r".*\.(q_proj|v_proj)"})
    assert check_adapter(adapter, base, BASE).target_modules == ("q_proj", "v_proj")


@pytest.mark.parametrize(
    "change, message",
    [
        ({"r": 0}, "'r'"),
        ({"peft_type": "IA3"}, "not LORA"),
        ({"target_modules": []}, "target_modules"),
    ],
)
def test_a_malformed_adapter_config_is_refused(tmp_path, base, change, message):
    adapter = write_lora_adapter(tmp_path / "a")
    doc = json.loads((adapter / "adapter_config.json").read_text())
    (adapter / "adapter_config.json").write_text(json.dumps({**doc, **change}))
    with pytest.raises(AdapterError, match=message):
        check_adapter(adapter, base, BASE)


def test_pickled_weights_are_refused_with_the_fix(tmp_path, base):
    adapter = write_lora_adapter(tmp_path / "a")
    (adapter / "adapter_model.safetensors").rename(adapter / "adapter_model.bin")
    with pytest.raises(AdapterError, match="safe_serialization=True"):
        check_adapter(adapter, base, BASE)


def test_a_base_without_weights_falls_back_to_its_family(tmp_path):
    directory = tmp_path / "b"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps({"model_type": "mistral"}))
    assert "gate_proj" in read_base_model(str(directory), "b").modules
    (directory / "config.json").write_text(json.dumps({"model_type": "gpt_neox"}))
    with pytest.raises(AdapterError, match="not a known family"):
        read_base_model(str(directory), "b")
