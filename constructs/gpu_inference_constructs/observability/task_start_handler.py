"""The task-start function's code, deployed inline (TaskStarts reads this file): one ECS Task State Change event of a
service's task that reached RUNNING (or stopped on its own) in, one CloudWatch embedded-metric-format document out (stdout is the
function's log group, which CloudWatch turns into metrics). Standard library only; no AWS call."""

import json
from datetime import datetime

NAMESPACE = "GpuInference"
# (metric, from, to): the event's ISO timestamps (ECS developer guide, "Amazon ECS task state change events").
PHASES = (
    ("TaskWaitSeconds", "createdAt", "pullStartedAt"),  # placement, and any wait for an instance to register
    # every container's image, all pulled when the task starts (ECS_PULL_DEPENDENT_CONTAINERS_UPFRONT, GpuCapacity)
    ("TaskPullSeconds", "pullStartedAt", "pullStoppedAt"),
    ("TaskStartSeconds", "pullStoppedAt", "startedAt"),  # init containers (model-fetch) and the containers' start
    ("TaskCreatedToRunningSeconds", "createdAt", "startedAt"),
)


def _time(value):
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def phases(detail):
    """Seconds of each phase whose two timestamps the event carries."""
    found = {}
    for name, start, end in PHASES:
        if detail.get(start) and detail.get(end):
            found[name] = round((_time(detail[end]) - _time(detail[start])).total_seconds(), 3)
    return found


# A task that stopped on its own (ECS API reference, Task stopCode): its essential container exited (a crash, a fatal
# GPU error, which on a shared GPU restarts every client of that GPU), or it never started. Scale-in, deployments, Spot
# interruptions and failed health checks stop tasks with other codes.
FAILURE_STOP_CODES = ("EssentialContainerExited", "TaskFailedToStart")


def failure(detail):
    """The TaskFailures document for a service task that stopped with a FAILURE_STOP_CODES code, or None."""
    group = detail.get("group") or ""
    if detail.get("lastStatus") != "STOPPED" or detail.get("stopCode") not in FAILURE_STOP_CODES or not group.startswith("service:"):
        return None
    stamp = detail.get("stoppedAt") or detail.get("executionStoppedAt") or detail.get("updatedAt")
    return {
        "_aws": {
            "Timestamp": int(_time(stamp).timestamp() * 1000) if stamp else 0,
            "CloudWatchMetrics": [{"Namespace": NAMESPACE, "Dimensions": [["ClusterName", "ServiceName"]],
                                   "Metrics": [{"Name": "TaskFailures", "Unit": "Count"}]}],
        },
        "ClusterName": detail.get("clusterArn", "").rsplit("/", 1)[-1],
        "ServiceName": group[len("service:"):],
        "TaskArn": detail.get("taskArn"),
        "StopCode": detail.get("stopCode"),
        "StoppedReason": detail.get("stoppedReason"),
        "TaskFailures": 1,
    }


def handler(event, context=None):
    detail = event.get("detail") or {}
    failed = failure(detail)
    if failed is not None:
        print(json.dumps(failed))
        return failed
    group = detail.get("group") or ""
    running = detail.get("lastStatus") == detail.get("desiredStatus") == "RUNNING"
    if not running or not group.startswith("service:") or not detail.get("startedAt"):
        return None
    values = phases(detail)
    document = {
        "_aws": {
            "Timestamp": int(_time(detail["startedAt"]).timestamp() * 1000),
            "CloudWatchMetrics": [{
                "Namespace": NAMESPACE,
                "Dimensions": [["ClusterName", "ServiceName"]],
                "Metrics": [{"Name": name, "Unit": "Seconds"} for name in values],
            }],
        },
        "ClusterName": detail.get("clusterArn", "").rsplit("/", 1)[-1],
        "ServiceName": group[len("service:"):],
        "TaskArn": detail.get("taskArn"),
        **values,
    }
    print(json.dumps(document))
    return document
