"""The published layout of a Neuron-compiled encoder: TorchServe's unarchived model (pytorch/serve v0.11.0,
``MAR-INF/MANIFEST.json`` naming the handler and ``model-config.yaml``), the handler, the traced model, the tokenizer,
``neuron.json`` (what was compiled, and how), TorchServe's properties and its log configuration. NeuronServer starts
TorchServe on exactly these files (``--ts-config``, ``--log-config``, ``--models <name>=model``), and publish's
manifest and digests cover them all, so the init containers check them before TorchServe starts."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HANDLER_FILE = "handler.py"
MODEL_FILE = "model.neuron.pt"
NEURON_FILE = "neuron.json"
MODEL_CONFIG_FILE = "model-config.yaml"
PROPERTIES_FILE = "torchserve.properties"
LOG_CONFIG_FILE = "log4j2.xml"
MANIFEST_PATH = "MAR-INF/MANIFEST.json"
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
    "merges.txt",
    "vocab.json",
    "sentencepiece.bpe.model",
    "spiece.model",
    "config.json",
)
TORCHSERVE_VERSION = "0.11.0"  # the DLCs' (aws-neuron/deep-learning-containers README, "Other Packages")

# TorchServe reads TS_* variables only with this set (docs/configuration.md, v0.11.0); the preset sets the rest.
# The JVM's heap stays small beside the workers: the DLC's own vmargs (common/config.properties).
PROPERTIES = """enable_envvars_config=true
vmargs=-XX:+UseContainerSupport -XX:InitialRAMPercentage=8.0 -XX:MaxRAMPercentage=10.0 -XX:-UseLargePages \
-XX:+UseG1GC -XX:+ExitOnOutOfMemoryError
"""
# Everything to the container's output (CloudWatch through the task's log driver), nothing to files on disk; the
# access log and TorchServe's metric log lines are dropped (one line per request would cost more than the encoder).
LOG_CONFIG = """<?xml version="1.0" encoding="UTF-8"?>
<Configuration>
  <Appenders>
    <Console name="STDOUT" target="SYSTEM_OUT">
      <PatternLayout pattern="%d{ISO8601} [%-5p] %t %c - %m%n"/>
    </Console>
  </Appenders>
  <Loggers>
    <Logger name="ACCESS_LOG" level="off" additivity="false"/>
    <Logger name="MODEL_METRICS" level="off" additivity="false"/>
    <Logger name="TS_METRICS" level="off" additivity="false"/>
    <Logger name="MODEL_LOG" level="info" additivity="false"><AppenderRef ref="STDOUT"/></Logger>
    <Root level="info"><AppenderRef ref="STDOUT"/></Root>
  </Loggers>
</Configuration>
"""


@dataclass(frozen=True)
class CompiledEncoder:
    """What was compiled: neuron.json's content."""

    task: str
    batch_size: int
    sequence_length: int
    max_batch_delay_ms: int
    compiler: str
    compiler_args: tuple[str, ...]
    probe_text: str
    labels: tuple[str, ...]
    versions: dict[str, str]

    def to_json(self) -> dict[str, Any]:
        return {
            "format": 1,
            "task": self.task,
            "batch_size": self.batch_size,
            "sequence_length": self.sequence_length,
            "model_file": MODEL_FILE,
            "compiler": self.compiler,
            "compiler_args": list(self.compiler_args),
            "probe_text": self.probe_text,
            "labels": list(self.labels),
            "versions": self.versions,
        }


def torchserve_manifest(model_name: str) -> dict[str, Any]:
    return {
        "createdOn": "",
        "runtime": "python",
        "archiverVersion": TORCHSERVE_VERSION,
        "model": {
            "modelName": model_name,
            "modelVersion": "1.0",
            "handler": HANDLER_FILE,
            "configFile": MODEL_CONFIG_FILE,
        },
    }


def model_config(compiled: CompiledEncoder) -> str:
    """TorchServe's per-model settings: batches of the compiled size, gathered for at most ``max_batch_delay_ms``."""
    return (
        f"batchSize: {compiled.batch_size}\n"
        f"maxBatchDelay: {compiled.max_batch_delay_ms}\n"
        "deviceType: cpu\n"
    )  # the NeuronCore is the handler's; TorchServe must not look for CUDA devices


def write_layout(out_dir: Path, checkpoint: Path, model_name: str, compiled: CompiledEncoder) -> list[str]:
    """Write every file but the traced model (the compile step saves it) into ``out_dir``; returns the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "MAR-INF").mkdir(exist_ok=True)
    files = {
        MANIFEST_PATH: json.dumps(torchserve_manifest(model_name), indent=2) + "\n",
        NEURON_FILE: json.dumps(compiled.to_json(), indent=2) + "\n",
        MODEL_CONFIG_FILE: model_config(compiled),
        PROPERTIES_FILE: PROPERTIES,
        LOG_CONFIG_FILE: LOG_CONFIG,
    }
    for relpath, text in files.items():
        (out_dir / relpath).write_text(text)
    shutil.copyfile(Path(__file__).with_name("neuron_handler.py"), out_dir / HANDLER_FILE)
    copied = [name for name in TOKENIZER_FILES if (checkpoint / name).is_file()]
    for name in copied:
        shutil.copyfile(checkpoint / name, out_dir / name)
    return sorted([*files, HANDLER_FILE, *copied])
