"""Find a deployed endpoint's breaking point: `locust -f bench/locustfile.py --headless --host https://HOST/MODEL`.

Users ramp up in steps (STEP_USERS more every STEP_SECONDS, up to MAX_USERS); each user posts one text at a time
to /predict with no think time. After every step the step's own req/s, p50/p95/p99 and failure ratio are
printed; the test stops by itself after the last step, or as soon as a step breaks the SLO (p95 over SLO_P95_MS
or failures over MAX_FAILURE_RATIO), and names the last step that held. Set API_KEY to send x-api-key.
Locust is not a dependency of this repo: `pip install locust` where you run it.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
from pathlib import Path

# Locust is not a dependency (see above), so pyright cannot resolve it here.
from locust import FastHttpUser, LoadTestShape, constant, events, task  # pyright: ignore[reportMissingImports]

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.texts import make_texts  # noqa: E402

API_KEY = os.environ.get("API_KEY", "")
PREDICT_PATH = os.environ.get("PREDICT_PATH", "/predict")
START_USERS = int(os.environ.get("START_USERS", "8"))
STEP_USERS = int(os.environ.get("STEP_USERS", "8"))
STEP_SECONDS = float(os.environ.get("STEP_SECONDS", "30"))
MAX_USERS = int(os.environ.get("MAX_USERS", "256"))
SLO_P95_MS = float(os.environ.get("SLO_P95_MS", "500"))
MAX_FAILURE_RATIO = float(os.environ.get("MAX_FAILURE_RATIO", "0.01"))
BODIES = [json.dumps({"text": text}) for text in make_texts()]


class PredictUser(FastHttpUser):
    wait_time = constant(0)
    _offsets = itertools.count(0, 37)

    def on_start(self) -> None:
        self.next_body = next(self._offsets)
        self.headers = {"content-type": "application/json", **({"x-api-key": API_KEY} if API_KEY else {})}

    @task
    def predict(self) -> None:
        body = BODIES[self.next_body % len(BODIES)]
        self.next_body += 1
        self.client.post(PREDICT_PATH, data=body, headers=self.headers, name="predict")


def step_summary(stats, users: int) -> dict:
    total = stats.total
    elapsed = max(total.last_request_timestamp - total.start_time, 1e-9) if total.num_requests else 0
    return {
        "users": users,
        "requests": total.num_requests,
        "rps": total.num_requests / elapsed if elapsed else 0.0,
        "p50_ms": total.get_response_time_percentile(0.50) or 0.0,
        "p95_ms": total.get_response_time_percentile(0.95) or 0.0,
        "p99_ms": total.get_response_time_percentile(0.99) or 0.0,
        "failure_ratio": total.fail_ratio,
    }


def holds(step: dict) -> bool:
    return step["requests"] > 0 and step["p95_ms"] <= SLO_P95_MS and step["failure_ratio"] <= MAX_FAILURE_RATIO


class StepRamp(LoadTestShape):
    """Step the user count up; measure each step on its own (stats reset at each step); stop at the first step
    that breaks the SLO or after MAX_USERS."""

    def __init__(self) -> None:
        super().__init__()
        self.steps: list[dict] = []
        self.users = 0

    def tick(self):
        step = int(self.get_run_time() // STEP_SECONDS)
        users = START_USERS + step * STEP_USERS
        if users != self.users:
            if self.users:
                summary = step_summary(self.runner.stats, self.users)
                self.steps.append(summary)
                print(
                    f"step {self.users:>5} users: {summary['rps']:8.1f} req/s  p50 {summary['p50_ms']:.0f}  "
                    f"p95 {summary['p95_ms']:.0f}  p99 {summary['p99_ms']:.0f} ms  "
                    f"failures {summary['failure_ratio']:.1%}",
                    flush=True,
                )
                if not holds(summary) or users > MAX_USERS:
                    return None
                self.runner.stats.reset_all()
            self.users = users
        return users, max(1, STEP_USERS)


@events.quitting.add_listener
def report_breaking_point(environment, **kwargs) -> None:
    shape = environment.shape_class
    steps = getattr(shape, "steps", [])
    held = [s for s in steps if holds(s)]
    if not steps:
        return
    if held:
        best = max(held, key=lambda s: s["rps"])
        print(
            f"held the SLO (p95 <= {SLO_P95_MS:g} ms, failures <= {MAX_FAILURE_RATIO:.1%}) up to "
            f"{held[-1]['users']} users; best {best['rps']:.1f} req/s at {best['users']} users "
            f"(p50 {best['p50_ms']:.0f}, p95 {best['p95_ms']:.0f}, p99 {best['p99_ms']:.0f} ms)"
        )
    broke = [s for s in steps if not holds(s)]
    if broke:
        print(
            f"breaking point: {broke[0]['users']} users (p95 {broke[0]['p95_ms']:.0f} ms, "
            f"failures {broke[0]['failure_ratio']:.1%})"
        )
