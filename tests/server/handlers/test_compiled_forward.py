"""torch.compile without holding readiness (inference_server.handlers.compiled): each shape runs eagerly until it has
compiled inside compiling(), and the accuracy gate checks the compiled forward, not the eager one. The batcher's side
(ready on the eager forward, every shape compiled while idle) is in test_batcher.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from inference_server.handlers.compiled import CompiledForward
from inference_server.tools import conversion


class Sides:
    def __init__(self, fail: bool = False) -> None:
        self.ran: list[tuple[str, tuple[int, ...]]] = []
        self.fail = fail

    def eager(self, x, mask=None):
        self.ran.append(("eager", x.shape))
        return x

    def compiled(self, x, mask=None):
        if self.fail:
            raise RuntimeError("inductor failed")
        self.ran.append(("compiled", x.shape))
        return x


def test_a_shape_runs_eagerly_until_it_has_compiled_inside_compiling():
    sides = Sides()
    forward = CompiledForward(sides.eager, lambda: sides.compiled)
    forward(np.zeros((1, 16)))
    with forward.compiling():
        forward(np.zeros((1, 16)))
        forward(np.zeros((1, 16)))
    forward(np.zeros((1, 16)))
    forward(np.zeros((2, 16)))
    assert sides.ran == [
        ("eager", (1, 16)),
        ("compiled", (1, 16)),
        ("compiled", (1, 16)),
        ("compiled", (1, 16)),
        ("eager", (2, 16)),
    ]
    assert forward.compiled_shapes == 1


def test_the_compiled_callable_is_built_at_the_first_compile_not_at_load():
    """Importing torch's compiler is about 2 s of a start that readiness need not wait for."""
    sides, built = Sides(), []
    forward = CompiledForward(sides.eager, lambda: built.append(True) or sides.compiled)
    forward(np.zeros((1, 16)))
    assert built == []
    with forward.compiling():
        forward(np.zeros((1, 16)))
    with forward.compiling():
        forward(np.zeros((2, 16)))
    assert built == [True] and forward.compiled_shapes == 2


def test_with_cuda_graphs_each_compiled_call_begins_a_step_and_an_eager_one_does_not(monkeypatch):
    sides, steps = Sides(), []
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: steps.append(len(sides.ran)))
    forward = CompiledForward(sides.eager, lambda: sides.compiled, cuda_graphs=True)
    forward(np.zeros((1, 16)))
    with forward.compiling():
        forward(np.zeros((1, 16)))
    forward(np.zeros((1, 16)))
    forward(np.zeros((2, 16)))
    assert [side for side, _ in sides.ran] == ["eager", "compiled", "compiled", "eager"]
    assert steps == [1, 2]  # before each compiled call (one ran before the first, two before the second)


def test_a_shape_whose_compile_raises_stays_eager():
    sides = Sides(fail=True)
    forward = CompiledForward(sides.eager, lambda: sides.compiled)
    with pytest.raises(RuntimeError, match="inductor failed"), forward.compiling():
        forward(np.zeros((1, 16)))
    sides.fail = False
    forward(np.zeros((1, 16)))
    assert sides.ran == [("eager", (1, 16))] and forward.compiled_shapes == 0


def test_every_argument_and_its_dtype_tell_shapes_apart():
    sides = Sides()
    forward = CompiledForward(sides.eager, lambda: sides.compiled)
    with forward.compiling():
        forward(np.zeros((1, 16), dtype=np.int64), np.zeros((1, 16), dtype=np.int64))
    forward(np.zeros((1, 16), dtype=np.int32), np.zeros((1, 16), dtype=np.int64))
    forward(np.zeros((1, 16), dtype=np.int64), None)
    forward(np.zeros((1, 16), dtype=np.int64), np.zeros((1, 16), dtype=np.int64))
    assert [side for side, _ in sides.ran] == ["compiled", "eager", "eager", "compiled"]


def test_with_torch_compile_dynamo_traces_only_inside_compiling():
    from torch._dynamo.utils import counters

    def add_one(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    torch._dynamo.reset()
    counters.clear()
    forward = CompiledForward(add_one, lambda: torch.compile(add_one, backend="eager", dynamic=False))
    x = torch.zeros(2, 3)
    assert torch.equal(forward(x), x + 1)
    assert counters["stats"]["unique_graphs"] == 0  # served eagerly: nothing traced
    with forward.compiling():
        forward(x)
    assert counters["stats"]["unique_graphs"] == 1
    assert torch.equal(forward(x), x + 1) and counters["stats"]["unique_graphs"] == 1  # the compiled graph, again


@pytest.mark.parametrize("compiled_side", ["faithful", "wrong"])
def test_the_compile_gate_checks_the_compiled_forward(compiled_side, tiny_embedder_dir, monkeypatch):
    """Served eagerly until compiled, a compiled forward that answers wrong would pass a gate that ran eager."""

    def fake_compile(fn, **options):
        return fn if compiled_side == "faithful" else (lambda *tensors: -fn(*tensors))

    monkeypatch.setattr(torch, "compile", fake_compile)
    result = conversion.gate(tiny_embedder_dir, "text-embedding", "compile")
    assert result.passed is (compiled_side == "faithful")
    if compiled_side == "wrong":
        assert result.value < 0  # the negated embeddings: cosine -1
