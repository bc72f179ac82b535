"""How long vLLM drains and exits after SIGTERM (:func:`vllm_stop`), its ``--shutdown-timeout``
(:func:`vllm_drain_seconds`)."""

from __future__ import annotations

from ..core.stop_timing import StopTiming, drain_after_delay

# vLLM 0.32 (vllm/engine/arg_utils.py, config/vllm.py): ``--shutdown-timeout N`` (default 0). On SIGTERM the API
# server stops the engine with that timeout: 0 aborts every running request; N > 0 rejects new requests and lets the
# running ones finish for up to N s, then aborts the rest and stops the engine processes.
VLLM_EXIT_SECONDS = 20
VLLM_LONGEST_REQUEST_SECONDS = 80


def vllm_drain_seconds(longest_request_seconds: int) -> int:
    """vLLM's ``--shutdown-timeout``: what the Spot notice leaves after a deregistration delay of
    ``longest_request_seconds`` and vLLM's exit."""
    return drain_after_delay(longest_request_seconds, VLLM_EXIT_SECONDS, "vLLM")


def vllm_stop(longest_request_seconds: int = VLLM_LONGEST_REQUEST_SECONDS) -> StopTiming:
    """vLLM's OpenAI server (``vllm serve``) with ``--shutdown-timeout`` :func:`vllm_drain_seconds`: a generation up to
    ``longest_request_seconds`` (default 80) long finishes when its task stops. The ALB keeps it running through
    the deregistration delay (``longest_request_seconds``: AWS documents in-flight requests completing then);
    on SIGTERM vLLM refuses new requests and drains running ones for the rest of the Spot notice, less the ECS agent's
    detection time (10 s by default;
    without the flag, vLLM 0.32's default 0 aborts them at once), then the API server, engine core and
    tensor-parallel workers stop (``VLLM_EXIT_SECONDS``, 20 s budget). A generation still running when the drain
    ends is cut, and vLLM 0.32 then waits on its open response until SIGKILL at ``stopTimeout`` (seen in
    ``make e2e-vllm`` with ``--shutdown-timeout 0``), which the budget already allows for."""
    return StopTiming.after_delay(longest_request_seconds, VLLM_EXIT_SECONDS, "vLLM")
