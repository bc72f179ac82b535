"""Issue 53: CapacityPrewarm took only a 5-field cron and ServiceSchedule only a 6-field one; a team that wrote one
form for both was refused by the other. Both take either form and keep the one their service reads (EC2 Auto
Scaling: crontab's 5 fields; Application Auto Scaling: AWS's 6), firing at the same minutes as written; what one
form cannot say in the other is refused naming the fix."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk.assertions import Template

from gpu_inference_constructs import CapacityPrewarm, ConfigError, GpuCapacity, ServiceSchedule
from tests.infra.test_schedule_simulation import cron_matches

TWO_WEEKS = [
    datetime(2026, 12, 21, tzinfo=UTC) + timedelta(minutes=15 * step) for step in range(14 * 24 * 4)
]  # over a 1st
WRITTEN = [
    "0 19 * * MON-FRI",
    "30 6 * * 1-5",
    "0 7 * * 0",
    "0 8 * * SAT,SUN",
    "15 7 1 * *",
    "0 19 ? * MON-FRI *",
    "30 6 ? * 2-6 *",
    "0 7 ? * 1 *",
    "15 7 1 * ? *",
    "*/30 9 * * *",
]


def minutes(expression: str) -> list[datetime]:
    return [moment for moment in TWO_WEEKS if cron_matches(expression, moment)]


@pytest.mark.parametrize("written", WRITTEN)
def test_either_form_fires_as_written_in_both_schedules(written):
    service, capacity = ServiceSchedule("s", cron=written).cron, CapacityPrewarm("p", cron=written, min_capacity=1).cron
    assert len(service.split()) == 6 and len(capacity.split()) == 5
    assert minutes(service) == minutes(capacity) == minutes(written) != []


def test_a_prewarm_in_the_aws_form_is_the_groups_crontab_recurrence():
    app = cdk.App()
    stack = cdk.Stack(app, "Team", env=cdk.Environment(account="123456789012", region="eu-west-1"))
    vpc = ec2.Vpc.from_vpc_attributes(
        stack,
        "Vpc",
        vpc_id="vpc-0a1b2c3d4e5f67890",
        availability_zones=["eu-west-1a"],
        private_subnet_ids=["subnet-0bbbbbbbbbbbbbbb1"],
    )
    GpuCapacity(stack, "Gpus", vpc=vpc).add_prewarm(
        CapacityPrewarm("morning", cron="30 6 ? * MON-FRI *", min_capacity=2)
    )
    Template.from_stack(stack).has_resource_properties(
        "AWS::AutoScaling::ScheduledAction", {"Recurrence": "30 6 * * MON-FRI", "MinSize": 2}
    )


@pytest.mark.parametrize(
    "make, fix",
    [
        (lambda: ServiceSchedule("s", cron="0 7 1 * MON"), "names both a day of the month and a day of the week"),
        (lambda: ServiceSchedule("s", cron="0 7 * * 5-7"), r"wraps past Sunday: write the days as names"),
        (
            lambda: ServiceSchedule("s", cron="0 7 * * MON *"),
            r"exactly one of day-of-month and day-of-week must be '\?'",
        ),
        (lambda: CapacityPrewarm("p", cron="0 7 ? * MON 2027", min_capacity=1), "names a year"),
        (lambda: CapacityPrewarm("p", cron="0 7 L * ? *", min_capacity=1), "L, W or #"),
        (lambda: CapacityPrewarm("p", cron="0 7 * *", min_capacity=1), "5 fields as crontab .* or AWS's 6"),
    ],
)
def test_what_one_form_cannot_say_in_the_other_is_refused(make, fix):
    with pytest.raises(ConfigError, match=rf"^cron: .*{fix}"):
        make()
