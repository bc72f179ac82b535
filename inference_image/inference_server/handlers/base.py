"""The handler interface: how a model plugs into the server without forking it.

Two methods are required: ``load(ctx)`` (load the weights onto ``ctx.device``) and ``forward(batch)`` (run the model
on a Batch the engine has stacked and padded, handlers/batch.py). Everything else has a default: a ``"tensors"``
handler's rows pass through ``preprocess`` as they are, ``forward``'s rows come back as the predictions and go out as
the ``signature()``'s output tensors, and the probe and warm-up inputs are zeros of the signature's inputs.

The server runs in two kinds of process, and a handler is created (with no arguments) in both:

- every HTTP worker calls ``load_preprocessing(ctx)`` once, then ``preprocess`` for each request's inputs and
  ``postprocess`` for its outputs. Workers never touch the GPU.
- the model process (one per GPU) calls ``load_preprocessing(ctx)`` and ``load(ctx)`` once, then
  ``warmup_input`` and ``forward`` on its single inference thread, so a handler needs no locking.

A handler whose ``shares_preprocessing(ctx)`` is true has the model process run ``load_preprocessing`` first and hand
what its ``shared_preprocessing()`` returns to every worker's ``load_preprocessing`` as ``ctx.shared``, so the
workers need not load what it has loaded or checked (the built-in text handlers: the tokenizer, without which a
worker imports neither transformers nor torch). Otherwise the workers load theirs while the model process loads.

The boundary between the two is plain arrays, never pickled objects:

- worker -> model: each input is an ``Encoded(length, data)`` where ``data`` maps names to numpy arrays
  (``{"input_ids": int32[n]}`` for text; any dtype and shape, e.g. ``{"pixels": uint8[3, 224, 224]}``).
  ``length`` (tokens, or 1 for inputs without a sequence) picks the input's length bucket. The arrays are
  copied into a shared-memory ring; the model process gets them back as numpy arrays of the same dtype/shape.
- the engine stacks a batch's arrays into one ``Batch`` of the shape the model runs (``batch.size`` rows, padding rows
  zeros or ``pad_values``; the inputs named in ``sequence_inputs`` padded to ``batch.seq_len``, the others to the
  largest row's shape; ``batch.lengths`` each row's length).
- model -> worker: ``forward`` returns a numpy array (or a CPU tensor) with one row per batch row, or a dict of
  such arrays. Each request's rows come back to its worker through shared memory, where ``postprocess`` turns
  them into JSON-able predictions.

What ``preprocess`` receives is typed by ``input_kind``:

- ``"text"``: each input is a str (from /predict, /v1/embeddings, or a BYTES tensor over the Open Inference
  Protocol, decoded as UTF-8);
- ``"bytes"``: each input is the bytes of one element of the handler's single BYTES input tensor (an image file);
- ``"tensors"``: each input is one row, a dict of input name -> numpy array without the batch dimension, already
  checked against ``signature()`` (datatype and shape).

``signature()`` describes the model to the Open Inference Protocol (/v2): its input and output tensors, -1 marking
the batch dimension; ``to_tensors`` turns a request's predictions back into those output tensors. Both run in the
HTTP workers, after ``load_preprocessing``.

A handler that compiles (``ctx.compile``) wraps its forward in ``CompiledForward(eager, torch.compile(eager))`` and
sets it as ``compiled_forward``: the server is then ready once the eager forward is warm, and compiles each shape
while idle (handlers/compiled.py). One that compiles without it has every warm-up shape run three times (compile,
CUDA graph recording, replay) before the shape counts as warm, holding readiness for batch 1 as before.

Install the class in the image and start the server with ``MODEL_HANDLER=mypkg.module:MyHandler`` (or
``--model-handler``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel

from ..inputs import Encoded
from ..manifest import Manifest
from ..tensor_spec import Signature
from .batch import Batch
from .compiled import CompiledForward


@dataclass(frozen=True)
class LoadContext:
    model_dir: Path
    device: Any  # torch.device in the model process; "cpu" in HTTP workers
    dtype: Any  # torch.dtype in the model process; None in HTTP workers
    max_sequence_length: int
    compile: bool
    allow_artifact_code: bool
    task: str | None
    manifest: Manifest | None
    max_batch_size: int = 32
    runtime: str = "eager"  # one of runtimes.RUNTIMES; the built-in Hugging Face handlers honour it
    # In an HTTP worker: what the model process's handler returned from shared_preprocessing(), else None.
    shared: dict[str, Any] | None = None


INPUT_KINDS = ("text", "bytes", "tensors")


class Handler:
    input_kind: ClassVar[str] = "text"  # one of INPUT_KINDS (see the module docstring)
    # True when each prediction is {"embedding": [...]}: the model is served at /v1/embeddings too.
    provides_embeddings: ClassVar[bool] = False
    # The JSON schema of one prediction, for the OpenAPI document; None documents it as any JSON value.
    prediction_model: ClassVar[type[BaseModel] | None] = None
    # Set by load_preprocessing() when inputs have a length limit (in tokens): the length buckets stop there.
    max_length: int | None = None
    # True when preprocess can take milliseconds per input (decoding an image): the worker runs it on its small
    # thread pool instead of its event loop, so other requests are not held up meanwhile.
    slow_preprocess: ClassVar[bool] = False
    # The inputs the engine pads along their first axis to the batch's sequence length (token ids), and what it pads
    # an input with where not zero (a tokenizer's pad id).
    sequence_inputs: ClassVar[tuple[str, ...]] = ()
    pad_values: Mapping[str, float] = MappingProxyType({})
    # Set by load() when forward runs a torch.compile'd model (handlers/compiled.py): the model is ready on the eager
    # forward and each shape compiles in the background.
    compiled_forward: CompiledForward | None = None

    # -- required ----------------------------------------------------------------------------------------------

    def load(self, ctx: LoadContext) -> None:
        """Model process only: load weights from ctx.model_dir onto ctx.device. Load safetensors, never pickles."""
        raise NotImplementedError(f"{type(self).__name__}.load: a handler loads its model (see Handler)")

    def forward(self, batch: Batch) -> Any:
        """Model process: run the model on batch (batch.size rows, batch.count of them real). Return CPU arrays
        (copied off any CUDA graph's memory) with batch.size or batch.count rows: a numpy array, a CPU tensor, or a
        dict of them."""
        raise NotImplementedError(f"{type(self).__name__}.forward: a handler runs its model (see Handler)")

    # -- optional, with defaults ---------------------------------------------------------------------------------

    def load_preprocessing(self, ctx: LoadContext) -> None:
        """What preprocess, postprocess and signature need (a tokenizer, labels, a declaration). Runs in every
        process. No GPU."""

    def shares_preprocessing(self, ctx: LoadContext) -> bool:
        """True: the HTTP workers wait for this process's load_preprocessing and get shared_preprocessing()."""
        return False

    def shared_preprocessing(self) -> dict[str, Any] | None:
        """Model process, after load_preprocessing, where shares_preprocessing(): JSON the HTTP workers'
        load_preprocessing gets as ctx.shared; None: each worker loads its own."""
        return None

    def preprocess(self, inputs: list[Any]) -> list[Encoded]:
        """HTTP worker: one Encoded per input (of input_kind), in order. Raise InputError for an input the model
        cannot take. By default a "tensors" row (already checked against signature()) as it is."""
        if self.input_kind != "tensors":
            raise NotImplementedError(
                f"{type(self).__name__}.preprocess: a {self.input_kind!r} handler turns its "
                "inputs into arrays (a tokenizer, an image decoder); only tensors pass as they are"
            )
        return [Encoded(1, {name: np.asarray(value) for name, value in row.items()}) for row in inputs]

    def postprocess(self, outputs: Any, count: int) -> list[Any]:
        """HTTP worker: the predictions of `count` rows of outputs (numpy: an array or a dict of arrays, as
        forward returned them, holding this request's rows only); values orjson can serialise (numpy allowed).
        By default each row: an array's row, or a dict of each array's row."""
        if isinstance(outputs, dict):
            return [{name: values[row].copy() for name, values in outputs.items()} for row in range(count)]
        return [row.copy() if isinstance(row, np.ndarray) else row for row in np.asarray(outputs)[:count]]

    def to_tensors(self, predictions: list[Any]) -> dict[str, np.ndarray]:
        """HTTP worker: the output tensors (name -> array, batch dimension first) of a request's predictions. By
        default the signature's outputs stacked from postprocess's rows (a dict per row, or the one output's row)."""
        signature = self.signature()
        if signature is None:
            raise NotImplementedError(
                f"{type(self).__name__}.to_tensors: a handler without a signature() has no output tensors"
            )
        if predictions and isinstance(predictions[0], dict):
            return {
                spec.name: np.stack([p[spec.name] for p in predictions]).astype(spec.dtype, copy=False)
                for spec in signature.outputs
            }
        (spec,) = signature.outputs
        return {spec.name: np.stack([np.asarray(p) for p in predictions]).astype(spec.dtype, copy=False)}

    def weights_bytes(self) -> int:
        """Model process, after load: the bytes of the weights on the device, for planning batches within a GPU
        share (gpu_share.py). By default the parameters and buffers of every torch module among the handler's
        attributes, each counted once."""
        sizes = {}
        for value in vars(self).values():
            if callable(getattr(value, "parameters", None)) and callable(getattr(value, "buffers", None)):
                for tensor in (*value.parameters(), *value.buffers()):
                    sizes[id(tensor)] = tensor.numel() * tensor.element_size()
        return sum(sizes.values())

    def activation_bytes(self, batch_size: int, seq_len: int) -> int | None:
        """Model process, after load: an upper estimate of the device memory one forward of this shape needs beyond
        the weights (activations, inputs, outputs); None where the handler cannot tell from its architecture (on a
        GPU the server then measures a forward; on a CPU it checks the weights alone)."""
        return None

    def unload(self) -> None:
        """Model pools (pool/resident.py): give back the model's device and host memory when the pool evicts it. By
        default every attribute is dropped (modules, tensors, tokenizer), so the memory is freed once no batch holds
        them; the pool then collects garbage and empties the CUDA cache. A handler holding memory elsewhere (a native
        session, a file it mapped) overrides this and calls super().unload()."""
        vars(self).clear()

    def move_to(self, device: Any) -> bool:
        """Model pools: move the loaded weights to ``device`` (the host on eviction from the GPU, the GPU again on
        reuse), so a reload is a copy, not a load from disk. By default every torch module among the attributes, and
        the ``device`` attribute where the handler keeps one; False where there is no module to move (the pool then
        unloads the model and loads it from disk when asked again)."""
        modules = [
            value
            for value in vars(self).values()
            if callable(getattr(value, "to", None)) and callable(getattr(value, "parameters", None))
        ]
        if not modules:
            return False
        for module in modules:
            module.to(device)
        if "device" in vars(self):
            self.device = device
        return True

    def warmup_input(self, seq_len: int) -> Encoded:
        """An input of length seq_len, used to run every batch shape before the server is ready. By default the probe
        input, preprocessed."""
        encoded = self.preprocess([self.probe_input()])[0]
        return Encoded(seq_len, encoded.data)

    def probe_input(self) -> Any:
        """One input (of input_kind) for the periodic readiness test inference. By default a text, or for "tensors"
        zeros of the signature's inputs (one row)."""
        signature = self.signature() if self.input_kind == "tensors" else None
        if signature is None:
            return "readiness probe"
        return {spec.name: np.zeros(spec.row_shape, dtype=spec.dtype) for spec in signature.inputs}

    def signature(self) -> Signature | None:
        """HTTP worker: the model's tensors for the Open Inference Protocol; None: not served over /v2."""
        return None
