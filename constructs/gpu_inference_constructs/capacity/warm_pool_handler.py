"""The warm pool's launch function, deployed inline (WarmPoolLaunches reads this file): one "EC2 Instance-launch
Lifecycle Action" event of the GPU group's launch hook in, CompleteLifecycleAction(CONTINUE) out, for an instance
going into service (``Destination`` ``AutoScalingGroup``: a warm instance leaving the pool, or a launch straight into
the group when the pool is empty). An instance warming into the pool (``Destination`` ``WarmPool``) is left to the
hook's heartbeat timeout, which is the time its user data has to pull the task images before Auto Scaling stops it.

Auto Scaling pauses a launch at ``Pending:Wait`` whenever the group has a launch hook, so without this function every
scale-out would wait the whole heartbeat (EC2 Auto Scaling user guide, "Use lifecycle hooks with a warm pool")."""

import json

INTO_SERVICE = "AutoScalingGroup"


def handler(event, context, client=None):
    detail = event.get("detail", {})
    seen = {key: detail.get(key) for key in ("EC2InstanceId", "Origin", "Destination", "LifecycleHookName")}
    if detail.get("Destination") != INTO_SERVICE:
        print(json.dumps({"completed": False, "reason": "warming into the pool: the heartbeat ends it", **seen}))
        return {"completed": False}
    from botocore.exceptions import ClientError  # boto3 and botocore come with Lambda's Python runtime

    if client is None:
        import boto3

        client = boto3.client("autoscaling")
    try:
        client.complete_lifecycle_action(
            LifecycleHookName=detail["LifecycleHookName"],
            AutoScalingGroupName=detail["AutoScalingGroupName"],
            LifecycleActionToken=detail["LifecycleActionToken"],
            InstanceId=detail["EC2InstanceId"],
            LifecycleActionResult="CONTINUE",
        )
    except ClientError as error:  # already completed, or past its heartbeat: nothing a retry would change
        print(json.dumps({"completed": False, "reason": str(error), **seen}))
        return {"completed": False}
    print(json.dumps({"completed": True, **seen}))
    return {"completed": True}
