"""CloudWatch Logs accepts only certain retention periods; map a day count onto them."""

from aws_cdk import aws_logs as logs

from ..core.errors import ConfigError

_BY_DAYS = {
    1: logs.RetentionDays.ONE_DAY,
    3: logs.RetentionDays.THREE_DAYS,
    5: logs.RetentionDays.FIVE_DAYS,
    7: logs.RetentionDays.ONE_WEEK,
    14: logs.RetentionDays.TWO_WEEKS,
    30: logs.RetentionDays.ONE_MONTH,
    60: logs.RetentionDays.TWO_MONTHS,
    90: logs.RetentionDays.THREE_MONTHS,
    120: logs.RetentionDays.FOUR_MONTHS,
    150: logs.RetentionDays.FIVE_MONTHS,
    180: logs.RetentionDays.SIX_MONTHS,
    365: logs.RetentionDays.ONE_YEAR,
    400: logs.RetentionDays.THIRTEEN_MONTHS,
    545: logs.RetentionDays.EIGHTEEN_MONTHS,
    731: logs.RetentionDays.TWO_YEARS,
    1096: logs.RetentionDays.THREE_YEARS,
    1827: logs.RetentionDays.FIVE_YEARS,
    3653: logs.RetentionDays.TEN_YEARS,
}


def retention_days(days: int, key: str) -> logs.RetentionDays:
    """The RetentionDays member for ``days``, or a ConfigError naming ``key`` and the allowed values."""
    if days not in _BY_DAYS:
        raise ConfigError(
            key, f"{days} is not a CloudWatch Logs retention period; allowed days: {', '.join(map(str, _BY_DAYS))}"
        )
    return _BY_DAYS[days]
