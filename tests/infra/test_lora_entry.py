"""Issue 55: LoRA settings in cdk.json's form (a model entry's ``vllm.lora``): read with key-path errors, refused
with the key and the fix where the entry's server cannot serve adapters (the server says: ``takes_lora_adapters``),
and the adapter memory model's figures by hand."""

from __future__ import annotations

import pytest

from gpu_inference_constructs import (
    BundledServer,
    ConfigError,
    EcrImage,
    LoraBaseModel,
    LoraSettings,
    NeuronServer,
    SglangServer,
    TgiProps,
    TgiServer,
    TritonProps,
    TritonServer,
    VllmProps,
    VllmServer,
)
from gpu_inference_constructs.core.lora_settings import lora_fit
from stacks.model_entry import refuse_entry_lora, split_model_entry

GIB = 2**30
MODEL = {"name": "llama", "version": "1", "gpus": 1, "cpu": 3072, "memory_mib": 24576}
LLAMA_13B = {"params": 13015864320, "layers": 40, "hidden_size": 5120, "intermediate_size": 13824, "heads": 40}


def test_a_vllm_blocks_lora_is_read_into_its_props():
    _, props = split_model_entry(
        {**MODEL, "vllm": {"lora": {"max_gpu_adapters": 8, "max_rank": 32, "base": LLAMA_13B}}}, "models[2]"
    )
    assert isinstance(props, VllmProps) and props.lora is not None
    assert (props.lora.max_gpu_adapters, props.lora.max_rank, props.lora.base) == (8, 32, LoraBaseModel(**LLAMA_13B))


@pytest.mark.parametrize(
    "lora, key, fix",
    [
        ({"max_rank": 1024}, "models[2].vllm.lora.max_rank", "at most 512"),
        ({"max_rank": 24}, "models[2].vllm.lora.max_rank", "one of 1, 8, 16"),
        ({"max_gpu_adapters": 8, "max_cpu_adapters": 4}, "models[2].vllm.lora.max_cpu_adapters", "at least max_gpu"),
        ({"max_gpu_adapters": "8"}, "models[2].vllm.lora.max_gpu_adapters", "whole number"),
        ({"poll_seconds": 1}, "models[2].vllm.lora.poll_seconds", "allowed 5 to 3600"),
        ({"base": {**LLAMA_13B, "heads": 7}}, "models[2].vllm.lora.base.heads", "do not divide"),
        ({"base": {"layers": 40}}, "models[2].vllm.lora.base.params", "required"),
        ({"max_loras": 8}, "models[2].vllm.lora.max_loras", "unknown key"),
    ],
)
def test_bad_lora_settings_name_their_key_path_and_the_fix(lora, key, fix):
    with pytest.raises(ConfigError) as error:
        split_model_entry({**MODEL, "vllm": {"lora": lora}}, "models[2]")
    assert error.value.key == key and fix in error.value.detail


@pytest.mark.parametrize(
    "entry, fix",
    [
        ({"task": "text-embedding"}, "the bundled server cannot serve LoRA adapters"),
        ({"neuron": {}}, "the neuron server cannot serve LoRA adapters"),
        ({"pool": {}}, "the bundled server cannot serve LoRA adapters"),
        ({"vllm": {}}, "goes inside the vllm block (vllm.lora)"),
    ],
)
def test_a_lora_key_beside_the_entrys_server_is_refused_by_what_the_server_takes(entry, fix):
    with pytest.raises(ConfigError) as error:
        split_model_entry({**MODEL, **entry, "lora": {"max_rank": 16}}, "models[1]")
    assert error.value.key == "models[1].lora" and fix in error.value.detail


@pytest.mark.parametrize(
    "server",
    [
        BundledServer(),
        TgiServer(TgiProps(image=EcrImage("mirror/tgi", "3.3.6"))),
        TritonServer(TritonProps(image=EcrImage("mirror/triton", "25.10-py3"))),
        NeuronServer(),
    ],
    ids=lambda server: server.name,
)
def test_servers_that_cannot_take_adapters_say_so_and_the_llm_presets_take_them(server):
    assert not server.takes_lora_adapters
    with pytest.raises(ConfigError) as error:
        refuse_entry_lora(server, None, "models[0].lora")
    assert f"the {server.name} server cannot serve LoRA adapters" in error.value.detail
    assert "vllm.lora" in error.value.detail
    assert VllmServer().takes_lora_adapters and SglangServer().takes_lora_adapters


def test_the_memory_model_by_hand_on_staging_llama_13b():
    """Llama-2-13B, float16, four A10Gs (24 GiB, 0.9 for vLLM), 4096-token context, 8 slots at rank 16. Tensor
    parallel: column-parallel q, k, v, gate, up keep A whole and split B; row-parallel o, down split A, keep B."""
    base = LoraBaseModel(**LLAMA_13B)
    lora = LoraSettings(max_gpu_adapters=8, max_rank=16, base=base)
    fit = lora_fit(lora, base, gpu_bytes=24 * GIB, fraction=0.9, gpus=4, context_tokens=4096, element_bytes=2)
    h, i = 5120, 13824
    per_rank_per_layer = 3 * (h + h / 4) + 2 * (h + i / 4) + (h / 4 + h) + (i / 4 + h)
    assert fit.adapters_bytes == pytest.approx(8 * 16 * per_rank_per_layer * 40 * 2)
    weights, kv = 13015864320 * 2, 2 * 40 * h * 2 * 4096
    assert fit.leftover_bytes == pytest.approx(24 * GIB * 0.9 - (weights + kv) / 4)
    assert fit.fits and fit.adapters_bytes / GIB == pytest.approx(0.49, abs=0.01)
