"""The one error type that every props validation raises."""


class ConfigError(ValueError):
    """A configuration value is wrong; the message names the key, the value and what is allowed.

    ``key`` is the dotted path inside the props (``capacity.instance_types[1]``);
    loaders prefix it with where the props came from (an environment name).
    """

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        self.detail = message
        super().__init__(f"{key}: {message}")

    def within(self, prefix: str) -> "ConfigError":
        """The same error, its key nested under ``prefix``."""
        key = f"{prefix}.{self.key}" if self.key and not self.key.startswith("[") else f"{prefix}{self.key}"
        return ConfigError(key, self.detail)


def require(condition: bool, key: str, message: str) -> None:
    if not condition:
        raise ConfigError(key, message)


def require_range(value: float, low: float, high: float, key: str, hint: str = "") -> None:
    """``low <= value <= high``, or a ConfigError naming ``key`` and the allowed range."""
    require(low <= value <= high, key, f"{value} is out of range; allowed {low} to {high}{hint}")


def require_cdk(value: object, members: tuple[str, ...], key: str, what: str) -> None:
    """``value`` is an aws-cdk-lib object with ``members`` (how a jsii interface such as ``ecs.ICluster`` is told at
    run time), or a ConfigError naming ``key`` and ``what`` to pass."""
    require(all(hasattr(value, member) for member in members), key, f"got {type(value).__name__}: pass {what}")
