"""torch.compile without holding readiness: a forward that runs eagerly for each input shape until that shape has
compiled.

A compile is seconds to minutes per (batch, length) shape (MiniLM's 12 shapes at MAX_BATCH_SIZE 4: 105 s on a 2-core
CPU, 25 s with the compile cache; ``python -m bench.startup --compile``). The batcher therefore makes the model ready
on the eager forward, then compiles each shape on the inference thread while the model is idle, inside
``compiling()``; a request of a shape not compiled yet runs eagerly meanwhile and never waits on a compile of its
own. A shape counts as compiled once its compile warm-up finished without error (with CUDA graphs, after the runs
that record the graph), so the first request that runs it compiled replays, and a shape whose compile fails keeps
serving eagerly. The compiled graph matches the eager
forward within the runtime's accuracy gate (runtimes.gate, run at publish).

A handler that compiles sets ``compiled_forward = CompiledForward(eager, lambda: torch.compile(eager))`` in ``load``
and calls it in ``forward``; the batcher does the rest. The compiled callable is built at the first compile, not at
load: importing torch's compiler (dynamo, Inductor) is about 2 s that readiness does not wait for either.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any


def shape_key(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """What decides which compiled graph a call runs: each tensor argument's shape and dtype (dynamic=False)."""
    return tuple((tuple(a.shape), a.dtype) if hasattr(a, "shape") else a for a in args)


class CompiledForward:
    def __init__(
        self, eager: Callable[..., Any], build: Callable[[], Callable[..., Any]], *, cuda_graphs: bool = False
    ) -> None:
        self._eager = eager
        self._build = build  # makes the compiled callable (torch.compile), at the first compiling()
        self._cuda_graphs = cuda_graphs  # mode="reduce-overhead": each compiled call begins a CUDA graph step
        self._compiled: Callable[..., Any] | None = None
        self._compiled_shapes: set[tuple[Any, ...]] = set()
        self._compiling: set[tuple[Any, ...]] | None = None  # shapes run inside compiling(), while it is open

    @property
    def compiled_shapes(self) -> int:
        return len(self._compiled_shapes)

    @contextlib.contextmanager
    def compiling(self) -> Iterator[None]:
        """Calls inside run (and so compile) the compiled forward; the shapes they ran count as compiled once the
        block ends without an exception."""
        if self._compiled is None:
            self._compiled = self._build()
        self._compiling = set()
        try:
            yield
            self._compiled_shapes |= self._compiling
        finally:
            self._compiling = None

    def __call__(self, *args: Any) -> Any:
        key = shape_key(args)
        compiled = self._compiled
        if compiled is None or (self._compiling is None and key not in self._compiled_shapes):
            return self._eager(*args)
        if self._cuda_graphs:
            import torch

            torch.compiler.cudagraph_mark_step_begin()
        result = compiled(*args)
        if self._compiling is not None:
            self._compiling.add(key)
        return result


def compile_per_shape(fn: Callable[..., Any], mode: str) -> Callable[..., Any]:
    """torch.compile with one graph per (batch bucket x length bucket) shape: dynamo's limit of 8 recompilations
    lifted. Call it on the thread that will compile: dynamo's settings are per thread since torch 2.12
    (pytorch/pytorch#186537), and torch.compile is not thread-safe (#118260), so one thread compiles and runs it."""
    import torch

    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 512)
    return torch.compile(fn, mode=mode, dynamic=False, fullgraph=False)


def compiling(handler: object) -> contextlib.AbstractContextManager[None]:
    """The handler's ``compiling()`` block, or nothing for a handler that does not compile."""
    compiled = getattr(handler, "compiled_forward", None)
    return compiled.compiling() if compiled is not None else contextlib.nullcontext()
