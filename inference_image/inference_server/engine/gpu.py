"""GPU utilisation from NVML, for the task's own metrics (the CloudWatch agent has no per-task GPU metrics)."""

from __future__ import annotations

import logging

from .. import facts as m

log = logging.getLogger(__name__)


class GpuSampler:
    """Samples one GPU; sample() returns {} when there is no GPU or NVML is missing."""

    def __init__(self, device_index: int | None) -> None:
        self._handle = None
        if device_index is None:
            return
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(device_index)
        except Exception as exc:  # no driver, no library: GPU metrics are simply omitted
            log.warning("GPU metrics unavailable", extra={"error": repr(exc)})

    def sample(self) -> dict[str, float]:
        if self._handle is None:
            return {}
        try:
            util = self._nvml.nvmlDeviceGetUtilizationRates(self._handle)
            memory = self._nvml.nvmlDeviceGetMemoryInfo(self._handle)
        except Exception as exc:
            log.warning("GPU sample failed", extra={"error": repr(exc)})
            return {}
        return {
            m.GPU_UTILIZATION: float(util.gpu),
            m.GPU_MEMORY_UTILIZATION: round(100.0 * float(memory.used) / float(memory.total), 2)
            if memory.total
            else 0.0,
        }
