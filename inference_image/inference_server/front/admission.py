"""Admission by deadline. The model process measures how long its batches take (an EWMA per batch-size bucket and
sequence-length bucket, and one per batch-size bucket over whatever lengths ran) and publishes the table, and the
batch it is running, in shared memory (the status page). A worker admits a request only if the batch now running,
the inputs queued ahead of it and its own batch can finish before the request's deadline; otherwise it answers 503
at once, rather than after the request has waited in the queue past its deadline."""

from __future__ import annotations

from collections.abc import Callable

from ..batch_times import BatchTimes


class Admission:
    """A worker's decision: can a request with `budget_s` left finish in time? The queue ahead is the model's
    count, or this worker's own inputs at the model less the running batch when that is more: the model counts an
    input only once the link has carried it, and a burst admitted in one loop iteration must not all see the
    same empty queue. The margin covers what the table does not time (the link both ways, postprocessing, the
    response, the batching window); headroom, how far a batch may run over its average."""

    def __init__(self, times: BatchTimes, queued: Callable[[], int], margin_s: float, headroom: float = 1.0) -> None:
        self.times, self._queued, self.margin_s, self.headroom = times, queued, margin_s, headroom
        self.at_model = 0  # this worker's inputs submitted and not answered yet (kept by the service)

    def can_finish(self, budget_s: float, inputs: int = 1, length: int | None = None) -> bool:
        if budget_s <= 0:
            return False
        times = self.times
        ahead = max(self._queued(), self.at_model - times.running)
        return times.estimate_s(ahead, inputs, length) * self.headroom + self.margin_s <= budget_s
