"""Where the library's alarms trip, and how long a breach lasts before they do: each number defined here once.

Two kinds of alarms read them. The paging alarms (``ModelAlarms``, ``InferenceMonitoring``, the presets'
``ServerAlarm``\\ s, the result cache's) notify the environment's topic; an environment tunes their thresholds in
``MonitoringProps`` and a model its latency in ``LatencyAlarmProps``, whose defaults are these. The rollback alarms
(``RollbackThresholds``) roll a deployment in progress back. A model's latency thresholds are multiples of its own
goal (``scaling.latency_p95_ms``): at twice its goal after scaling had its say, a model is slow, not busy, so it pages
and a new version of it rolls back at the same p95. The props, the constructs, the docs' alarm table and the tests
read these; tests/infra/test_alarm_thresholds.py fails on an alarm that states its own periods or a default that
restates one of them."""

from __future__ import annotations

from .scaling_props import ModelScalingProps

# Errors
ERROR_RATE_PERCENT = 1.0
"""The share of requests answered 5xx, in percent (a target group's, or the load balancer's own), that pages and that
rolls a deployment back: ``MonitoringProps.target_5xx_percent`` and ``elb_5xx_percent``,
``RollbackThresholds.target_5xx_percent``."""

# Latency, as multiples of the model's goal
ROLLBACK_LATENCY_FACTOR = 2
"""A version still this many times slower than the model's latency goal after scaling had its say is slow, not busy:
its p95 rolls the deployment back (``RollbackProps``)."""
PAGING_P95_FACTOR = ROLLBACK_LATENCY_FACTOR
"""The p95 that pages, as a multiple of the goal: the rollback alarm's (``LatencyAlarmProps``)."""
PAGING_P99_FACTOR = 3
"""The p99 that pages, as a multiple of the paging p95: 250 ms goal -> 500 ms p95 -> 1500 ms p99."""
ROLLBACK_LATENCY_P95_MS = ROLLBACK_LATENCY_FACTOR * ModelScalingProps.latency_p95_ms
"""``RollbackThresholds.latency_p95_ms``'s default: the factor times the default goal (250 ms), 500 ms."""

# How long a breach lasts, in one-minute periods
PAGING_MINUTES = 3
"""Latency, 5xx rates, a server's queue depth and GPU memory, and the result cache's failed calls: past their threshold
this long, they page."""
ROLLBACK_MINUTES = 3
"""A rollback alarm's breach: this long, and the deployment rolls back; a bake shorter than this ends before it can."""
NOT_KEEPING_UP_MINUTES = 15
"""A scale-out signal, or a model pool's metric, past its threshold this long pages: scaling is not keeping up."""
SHED_MINUTES = 2
"""A server shedding requests with 503 (the bundled server's ``RejectedRequests``) past its threshold this long
pages."""
