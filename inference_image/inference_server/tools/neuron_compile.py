"""Compile an encoder for AWS Inferentia2 at publish time, into the layout NeuronServer serves (neuron_layout.py):

    python -m inference_server.tools.neuron_compile <checkpoint> <out> --task text-embedding --model-name <name> \\
        [--batch-size 16] [--sequence-length 128] [--max-batch-delay-ms 5] [--compiler-arg ...]

then publish ``<out>`` as any version (``python -m inference_server.publish <out> s3://.../<name>/<version>/``, no
``--task``: its digests are what the init containers check). torch-neuronx and neuronx-cc come only from the Neuron
package index, so this runs where they are: inside the Neuron DLC the preset serves with, on an inf2 or trn1 instance
(COMPILE_COMMAND), which also keeps the compiler and the serving runtime of one Neuron SDK. Elsewhere it stops at once,
saying so. The graph is traced once for a fixed batch and sequence length (``torch_neuronx.trace``): the handler pads
every batch to both.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..facts import TEXT_TASKS
from ..settings import MODEL_NAME_PATTERN
from .neuron_layout import MODEL_FILE, CompiledEncoder, write_layout

COMPILE_COMMAND = (
    'docker run --rm --device /dev/neuron0 -v "$PWD":/work -w /work '
    "public.ecr.aws/neuron/pytorch-inference-neuronx:2.9.0-neuronx-py312-sdk2.31.1-ubuntu24.04 "
    "env PYTHONPATH=inference_image python -m inference_server.tools.neuron_compile ./checkpoint ./compiled "
    "--task text-embedding --model-name encoder --batch-size 16 --sequence-length 128"
)
MISSING_NEURON = (
    "torch-neuronx is not installed here: it comes only from the Neuron package index "
    "(pip.repos.neuron.amazonaws.com) and compiles on an Inferentia2 or Trainium instance. Run the compile "
    f"inside the Neuron DLC on an inf2 instance, from the repository root: {COMPILE_COMMAND}"
)
VERSIONED = ("torch", "torch-neuronx", "neuronx-cc", "transformers")

Trace = Callable[[Any, tuple[Any, ...], Sequence[str]], Any]


class NeuronCompileError(Exception):
    pass


def require_neuron() -> None:
    """Refuse before anything is loaded when torch-neuronx is not importable, naming where the compile runs."""
    try:
        importlib.import_module("torch_neuronx")
    except ImportError:
        raise NeuronCompileError(MISSING_NEURON) from None


def neuron_trace(module: Any, example_inputs: tuple[Any, ...], compiler_args: Sequence[str]) -> Any:
    """``torch_neuronx.trace``: neuronx-cc compiles the module for the example inputs' shapes."""
    torch_neuronx = importlib.import_module("torch_neuronx")
    return torch_neuronx.trace(module, example_inputs, compiler_args=list(compiler_args))


def encoder_graph(model: Any, task: str) -> Any:
    """The graph that is traced: (input_ids, attention_mask) -> the mean-pooled, L2-normalised embedding (the
    bundled server's), or the classifier's logits."""
    import torch

    class EncoderGraph(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            output = self.model(input_ids=input_ids, attention_mask=attention_mask)
            if task == "text-classification":
                return output.logits
            mask = attention_mask.unsqueeze(-1).to(output.last_hidden_state.dtype)
            pooled = (output.last_hidden_state * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2, dim=1)

    return EncoderGraph().eval()


def _versions() -> dict[str, str]:
    found = {}
    for name in VERSIONED:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "absent"
    return found


def compile_encoder(
    checkpoint: Path,
    out_dir: Path,
    *,
    task: str,
    model_name: str,
    batch_size: int = 16,
    sequence_length: int = 128,
    max_batch_delay_ms: int = 5,
    compiler_args: Sequence[str] = (),
    trace: Trace = neuron_trace,
    compiler: str = "torch-neuronx",
) -> CompiledEncoder:
    """Trace the checkpoint's encoder for ``batch_size`` x ``sequence_length`` with ``trace`` and write the layout."""
    import torch
    from transformers import AutoModel, AutoModelForSequenceClassification, AutoTokenizer

    from ..engine.probe_check import PROBE_TEXT

    if task not in TEXT_TASKS:
        raise NeuronCompileError(f"--task {task!r}: one of {', '.join(TEXT_TASKS)}")
    if not MODEL_NAME_PATTERN.fullmatch(model_name):
        raise NeuronCompileError(f"--model-name {model_name!r} must be URL-safe ([a-z0-9-]+), the service's model name")
    if not (checkpoint / "config.json").is_file():
        raise NeuronCompileError(f"{checkpoint} has no config.json: give a Hugging Face checkpoint directory")
    tokenizer = AutoTokenizer.from_pretrained(str(checkpoint))
    loader = AutoModelForSequenceClassification if task == "text-classification" else AutoModel
    model = loader.from_pretrained(str(checkpoint))
    labels = (
        tuple(str(model.config.id2label[i]) for i in range(model.config.num_labels))
        if task == "text-classification"
        else ()
    )
    example = tokenizer(
        [PROBE_TEXT] * batch_size,
        padding="max_length",
        truncation=True,
        max_length=sequence_length,
        return_tensors="pt",
    )
    with torch.no_grad():
        traced = trace(encoder_graph(model, task), (example["input_ids"], example["attention_mask"]), compiler_args)
    compiled = CompiledEncoder(
        task,
        batch_size,
        sequence_length,
        max_batch_delay_ms,
        compiler,
        tuple(compiler_args),
        PROBE_TEXT,
        labels,
        _versions(),
    )
    write_layout(out_dir, checkpoint, model_name, compiled)
    torch.jit.save(traced, str(out_dir / MODEL_FILE))
    return compiled


def parser() -> argparse.ArgumentParser:
    parsed = argparse.ArgumentParser(
        prog="python -m inference_server.tools.neuron_compile",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parsed.add_argument("checkpoint", type=Path, help="a Hugging Face checkpoint directory")
    parsed.add_argument("out", type=Path, help="where the layout is written (then publish it)")
    parsed.add_argument("--task", required=True, choices=TEXT_TASKS)
    parsed.add_argument("--model-name", required=True, help="the model's name (TorchServe's, the service's)")
    parsed.add_argument("--batch-size", type=int, default=16, choices=range(1, 257), metavar="1-256")
    parsed.add_argument("--sequence-length", type=int, default=128, choices=range(8, 8193), metavar="8-8192")
    parsed.add_argument("--max-batch-delay-ms", type=int, default=5, choices=range(0, 1001), metavar="0-1000")
    parsed.add_argument(
        "--compiler-arg",
        action="append",
        default=[],
        dest="compiler_args",
        help="passed to neuronx-cc through torch_neuronx.trace (repeatable)",
    )
    return parsed


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        require_neuron()
        compiled = compile_encoder(
            args.checkpoint,
            args.out,
            task=args.task,
            model_name=args.model_name,
            batch_size=args.batch_size,
            sequence_length=args.sequence_length,
            max_batch_delay_ms=args.max_batch_delay_ms,
            compiler_args=args.compiler_args,
        )
    except NeuronCompileError as error:
        print(f"neuron_compile: {error}", file=sys.stderr)
        return 2
    print(
        f"neuron_compile: {args.out} holds {args.model_name} for {compiled.task}, batch {compiled.batch_size} x "
        f"{compiled.sequence_length} tokens; publish it: python -m inference_server.publish {args.out} "
        f"s3://<bucket>/models/{args.model_name}/<version>/"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
