"""The never-healthy lifecycle hook, deployed inline (RevisionHealthHook reads this file). ECS invokes it at a
deployment's POST_SCALE_UP stage, before any traffic moves: SUCCEEDED once a task of the service's newest task
definition is healthy in one of its target groups; IN_PROGRESS (asked again after callBackDelay, with hookDetails
back) while none is and the start window lasts; FAILED after it, which rolls the deployment back (ECS developer guide,
lambda-lifecycle-hooks). boto3 and botocore come with Lambda's Python runtime."""

import json
import time

RETRY_SECONDS = 30


def decide(healthy_tasks, started_at, now, window_seconds):
    """The hook's answer; while it waits, when to ask again and the hookDetails ECS passes back."""
    if healthy_tasks > 0:
        return {"hookStatus": "SUCCEEDED"}
    left = started_at + window_seconds - now
    if left <= 0:
        return {"hookStatus": "FAILED"}
    return {"hookStatus": "IN_PROGRESS", "callBackDelay": int(max(1, min(RETRY_SECONDS, left))),
            "hookDetails": {"startWindowSeconds": window_seconds, "startedAt": started_at}}


def _pages(call, key, **kwargs):
    while True:
        page = call(**kwargs)
        yield from page[key]
        if not page.get("nextToken"):
            return
        kwargs["nextToken"] = page["nextToken"]


def healthy_new_tasks(service_arn, ecs, elbv2):
    """Tasks of the service's newest task definition that a target group of the service reports healthy."""
    cluster, name = service_arn.split(":service/", 1)[1].split("/", 1)
    (service,) = ecs.describe_services(cluster=cluster, services=[name])["services"]
    primary = [d["taskDefinition"] for d in service.get("deployments", []) if d.get("status") == "PRIMARY"]
    newest = primary[0] if primary else service["taskDefinition"]
    groups = set()
    for balancer in service.get("loadBalancers", []):
        groups.add(balancer["targetGroupArn"])
        groups.add((balancer.get("advancedConfiguration") or {}).get("alternateTargetGroupArn"))
    healthy = {d["Target"]["Id"] for group in groups - {None}
               for d in elbv2.describe_target_health(TargetGroupArn=group)["TargetHealthDescriptions"]
               if d["TargetHealth"]["State"] == "healthy"}
    arns = list(_pages(ecs.list_tasks, "taskArns", cluster=cluster, serviceName=name, desiredStatus="RUNNING"))
    count = 0
    for start in range(0, len(arns), 100):
        for task in ecs.describe_tasks(cluster=cluster, tasks=arns[start:start + 100])["tasks"]:
            addresses = {d["value"] for a in task.get("attachments", []) for d in a.get("details", [])
                         if d["name"] == "privateIPv4Address"}
            count += task["taskDefinitionArn"] == newest and bool(addresses & healthy)
    return count


def handler(event, context=None, ecs=None, elbv2=None, now=None):
    details = event.get("hookDetails") or {}
    details = json.loads(details) if isinstance(details, str) else details
    now = time.time() if now is None else now
    window = int(details["startWindowSeconds"])
    started_at = float(details.get("startedAt", now))
    from botocore.exceptions import BotoCoreError, ClientError

    if ecs is None or elbv2 is None:
        import boto3

        ecs, elbv2 = boto3.client("ecs"), boto3.client("elbv2")
    try:
        healthy = healthy_new_tasks(event["serviceArn"], ecs, elbv2)
    except (BotoCoreError, ClientError) as error:  # a refused or throttled call is no verdict: ask again
        print(json.dumps({"error": str(error)}))
        healthy = 0
    answer = decide(healthy, started_at, now, window)
    print(json.dumps({"serviceArn": event.get("serviceArn"), "healthyNewTasks": healthy, **answer}))
    return answer
