"""What a server preset's arguments must be: its props first (:func:`require_props`), and each image given once,
on the preset or in its props (:func:`require_one_image`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from .errors import ConfigError, require


def require_props(props: object, expected: type, preset: str) -> None:
    """A preset's first argument is its props: an image given there (the 0.1 form ``BundledServer(image)``) is named."""
    require(
        isinstance(props, expected),
        "server.props",
        f"{type(props).__name__} is not {expected.__name__}: {preset}'s first argument is its props; "
        "pass an image as image=",
    )


def require_one_image(preset: str, props: object, images: Mapping[str, object]) -> None:
    """Each image of ``images`` (field name -> the ``preset``'s own value, a ContainerImage or None) given once: on
    the preset (any ContainerImage) or in its ``props`` (an ECR mirror, cdk.json's form), not both. The preset's
    would win; both given is refused rather than one ignored."""
    fields = {item.name: item for item in dataclasses.fields(props)}  # type: ignore[arg-type]  # props are dataclasses
    props_type = type(props).__name__
    for name, own in images.items():
        factory = fields[name].default_factory
        default = fields[name].default if factory is dataclasses.MISSING else factory()
        if own is None or getattr(props, name) == default:
            continue
        raise ConfigError(
            f"server.{name}",
            f"is given twice, {preset}({name}=...) and {props_type}({name}=...): give it "
            f"once: {props_type}({name}=) for your ECR mirror (cdk.json's form), or "
            f"{preset}({name}=) for any other ContainerImage (your own build)",
        )
