"""The torch-export task: any PyTorch model saved with torch.export (model.pt2) and declared in model.json.

Each input is one row: a dict of input name -> array without the batch dimension. Rows are stacked on the batch
dimension, so requests batch together whatever their origin. Preprocessing (checking rows against model.json)
needs no torch; only load and forward do.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..inputs import Encoded, InputError
from ..tensor_spec import Signature
from .base import Handler, LoadContext
from .batch import Batch
from .compiled import CompiledForward, compile_per_shape
from .declaration import Declaration, read_declaration


class TorchExportHandler(Handler):
    input_kind = "tensors"
    max_length = 1  # rows have no sequence length: one length bucket
    image = False  # whether model.json must have an "image" section

    def load_preprocessing(self, ctx: LoadContext) -> None:
        self.declaration: Declaration = read_declaration(ctx.model_dir, image=self.image)
        self._inputs = self.declaration.inputs
        self._outputs = self.declaration.outputs

    def load(self, ctx: LoadContext) -> None:
        import torch

        from .export_program import check_program, load_program

        if not hasattr(self, "declaration"):
            self.load_preprocessing(ctx)
        program = load_program(ctx.model_dir / self.declaration.program)
        check_program(program, self.declaration, ctx.max_batch_size)
        if ctx.device.type != "cpu":
            import torch.export.passes  # a submodule that `import torch` does not load

            program = torch.export.passes.move_to_device_pass(program, ctx.device)
        self.device = ctx.device
        self.module = program.module()
        # Autocast keeps numerically sensitive ops (softmax, norms, reductions) in FP32; only a model declared
        # safe runs under it.
        self.autocast = self.declaration.fp16_safe and ctx.device.type == "cuda" and ctx.dtype == torch.float16
        self._run = self.module
        if ctx.compile and ctx.device.type == "cuda":
            module = self.module
            self._run = self.compiled_forward = CompiledForward(
                module, lambda: compile_per_shape(module, "reduce-overhead"), cuda_graphs=True
            )

    def signature(self) -> Signature:
        return self.declaration.signature

    def preprocess(self, inputs: list[Any]) -> list[Encoded]:
        return [
            Encoded(1, self._row(row)) for row in inputs
        ]  # rows checked against the declaration, as /predict sends them

    def _row(self, row: Any) -> dict[str, np.ndarray]:
        if not isinstance(row, dict) or set(row) != {spec.name for spec in self._inputs}:
            raise InputError(f"expected the tensors {[spec.name for spec in self._inputs]}")
        arrays = {}
        for spec in self._inputs:
            array = np.asarray(row[spec.name])
            if array.dtype != spec.dtype or array.shape != spec.row_shape:
                raise InputError(
                    f"{spec.name}: expected {spec.datatype} of shape {list(spec.row_shape)} per row, "
                    f"got {array.dtype} of shape {list(array.shape)}"
                )
            arrays[spec.name] = array
        return arrays

    def warmup_input(self, seq_len: int) -> Encoded:
        return Encoded(1, self.probe_input())

    def probe_input(self) -> Any:
        return {spec.name: np.zeros(spec.row_shape, dtype=spec.dtype) for spec in self._inputs}

    def forward(self, batch: Batch) -> dict[str, np.ndarray]:
        import torch
        import torch.utils._pytree  # loaded by `import torch`; named for the type checker

        from .export_program import torch_dtype

        tensors = [
            torch.from_numpy(batch.arrays[spec.name]).to(self.device, non_blocking=True) for spec in self._inputs
        ]
        with torch.inference_mode(), torch.autocast("cuda", dtype=torch.float16, enabled=self.autocast):
            result = self._run(*tensors)
        leaves = torch.utils._pytree.tree_leaves(result)
        if len(leaves) != len(self._outputs):
            raise RuntimeError(f"the program returned {len(leaves)} tensors, model.json declares {len(self._outputs)}")
        # .cpu() copies results out of CUDA graph memory; autocast outputs go back to the declared dtype.
        return {
            spec.name: leaf.to(torch_dtype(spec.datatype)).cpu().numpy()
            for leaf, spec in zip(leaves, self._outputs, strict=False)
        }
