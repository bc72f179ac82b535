"""An image in an ECR repository of the deploying account and region (:class:`EcrImage`): a mirror of a public
image, named by its repository and a pinned tag, and how an image reference names its registry."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import require

# A private ECR registry's host: <account>.dkr.ecr[-fips].<region>.amazonaws.com (.com.cn in China).
ECR_REGISTRY = re.compile(
    r"^(?P<account>[0-9]{12})\.dkr\.ecr(?:-fips)?\.(?P<region>[a-z]{2}(?:-[a-z]+)+-[0-9])"
    r"\.amazonaws\.com(?:\.cn)?$"
)
ECR_REPOSITORY_NAME = re.compile(r"^[a-z0-9]+(?:[._/-][a-z0-9]+)*$")


def registry_host(reference: str) -> str | None:
    """The registry an image reference's first component names, Docker's rule: one with a dot or a colon, or
    ``localhost`` (``public.ecr.aws/x``, ``ghcr.io/x``); None for a bare name (``vllm/vllm-openai``: Docker Hub)."""
    first, slash, _ = reference.partition("/")
    return first if slash and ("." in first or ":" in first or first == "localhost") else None


@dataclass(frozen=True)
class EcrImage:
    """An image in an ECR repository of the deploying account and region (a mirror of a public image)."""

    repository: str
    """The ECR repository's name (``mirror/vllm-openai``), or its full URI
    (``<account>.dkr.ecr.<region>.amazonaws.com/mirror/vllm-openai``, e.g. copied from the console). Required."""
    tag: str
    """A pinned tag (not latest). Required."""

    def __post_init__(self) -> None:
        host = registry_host(self.repository)
        registry = ECR_REGISTRY.match(host) if host is not None else None
        require(
            host is None or registry is not None,
            "repository",
            f"{self.repository!r} is in {host}, not in an ECR private registry: copy the image into your account's "
            "ECR (a mirror, or a pull-through cache rule) and give that repository's name (mirror/x) or its full "
            "URI (<account>.dkr.ecr.<region>.amazonaws.com/mirror/x)",
        )
        require(
            bool(ECR_REPOSITORY_NAME.match(self.name)),
            "repository",
            f"{self.repository!r} is not an ECR repository name",
        )
        require(
            bool(re.match(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$", self.tag)) and self.tag != "latest",
            "tag",
            f"{self.tag!r}: pin an exact tag (not 'latest')",
        )

    @property
    def name(self) -> str:
        """The repository's name, without a registry the URI gave."""
        return self.repository.split("/", 1)[1] if registry_host(self.repository) is not None else self.repository

    @property
    def registry(self) -> tuple[str, str] | None:
        """(account, region) of a full URI; None for a name (the deploying account and region)."""
        host = registry_host(self.repository)
        match = ECR_REGISTRY.match(host) if host is not None else None
        return (match["account"], match["region"]) if match is not None else None
