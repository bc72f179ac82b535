"""The bundled server's image (``bundled_server_image()``), and the same with a team's own handler package installed
(``bundled_server_image(handler_package=..., handler=...)``): its Docker build context, assembled at synth, and the
image that tells ``BundledServer`` which handler to run (``MODEL_HANDLER``).

The build context is the bundled server's own (the files its ``.dockerignore`` admits), the team's package as
``handler_package/``, optionally the team's hashed lock as ``handler-requirements.lock``, and a Dockerfile that is the
bundled server's followed by :func:`handler_stage`: the image is the bundled one plus the team's layers, built by
``cdk deploy`` as any Docker image asset (synth needs no Docker). Nothing is written into the team's directory.
"""

from __future__ import annotations

import atexit
import fnmatch
import re
import shutil
import tempfile
from os import PathLike
from pathlib import Path

from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_ecs as ecs
from constructs import Construct

from ..core.errors import ConfigError, require
from ..core.server_facts import SERVER_IMAGE_DIRECTORY, SERVER_IMAGE_NAME
from ..shared.container_images import asset_image

# module.path:ClassName, as the server's MODEL_HANDLER takes it (inference_server.handlers.handler_class): a class
# the module defines at its top level, so no dotted class path.
IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
HANDLER_PATTERN = re.compile(rf"^{IDENTIFIER}(\.{IDENTIFIER})*:{IDENTIFIER}$")
PACKAGE_MARKERS = ("pyproject.toml", "setup.py")
# The server's own import package: a team module of that name would replace the server.
SERVER_PACKAGE = "inference_server"
# Where the team's files go in the build context.
PACKAGE_DIRECTORY = "handler_package"
REQUIREMENTS_FILE = "handler-requirements.lock"
# Never copied from the team's package directory (beside the server's .dockerignore exclusions): environments,
# build outputs and caches that pip does not need and that would change the asset's hash.
PACKAGE_EXCLUDES = (
    ".git",
    ".venv",
    "venv",
    ".tox",
    "build",
    "dist",
    "cdk.out",
    "node_modules",
    ".ruff_cache",
    ".DS_Store",
)
DISABLE_ASSET_STAGING_CONTEXT = "aws:cdk:disable-asset-staging"  # aws_cdk.cx_api.DISABLE_ASSET_STAGING_CONTEXT
SERVER_USER = "10001:10001"  # the bundled Dockerfile's USER (BundledServer runs the task as the same)
SERVER_WORKDIR = "/scratch"


def check_handler(handler: str) -> None:
    require(
        isinstance(handler, str) and HANDLER_PATTERN.fullmatch(handler) is not None,
        "handler",
        f"{handler!r} is not module:Class: name the handler class as the server's MODEL_HANDLER takes it, its "
        "module's import path, a colon and the class the module defines, e.g. "
        "'ranking_handler.handlers:RankingHandler'",
    )
    top = handler.split(".")[0].split(":")[0]
    require(
        top != SERVER_PACKAGE,
        "handler",
        f"{handler!r}: a module named {SERVER_PACKAGE} would replace the server itself; give your package its own "
        "top-level name",
    )


def check_package(package: Path, handler: str) -> None:
    """The directory pip can install, holding the handler's top-level module (flat or src layout)."""
    require(
        package.is_dir(),
        "handler_package",
        f"{str(package)!r} is not a directory (resolved from {Path.cwd()}, where the app runs): pass the directory "
        "that holds your handler package's pyproject.toml",
    )
    require(
        any((package / marker).is_file() for marker in PACKAGE_MARKERS),
        "handler_package",
        f"{str(package)!r} has neither pyproject.toml nor setup.py, so pip cannot install it into the image: add a "
        'pyproject.toml ([build-system] requires = ["setuptools>=68"], build-backend = "setuptools.build_meta"; '
        "[project] name and version) beside the package's folder",
    )
    top = handler.split(".")[0].split(":")[0]
    places = [package / top, package / f"{top}.py", package / "src" / top, package / "src" / f"{top}.py"]
    require(
        any(place.exists() for place in places),
        "handler_package",
        f"{str(package)!r} does not hold the handler's module {top!r}: looked for {top}/ and {top}.py, and under "
        f"src/; put the package's folder beside its pyproject.toml, or name the module it installs in handler=",
    )


def check_requirements(requirements: Path) -> None:
    """A lock pip installs in hash-checking mode: every requirement pinned with its hashes."""
    require(
        requirements.is_file(),
        "requirements",
        f"{str(requirements)!r} is not a file (resolved from {Path.cwd()}): pass the lock of what your handler needs "
        "beyond the server's packages, or leave requirements out",
    )
    text = requirements.read_text()
    joined = re.sub(r"\\\n", " ", text)
    lines = [line.split("#", 1)[0].strip() for line in joined.splitlines()]
    unhashed = [line for line in lines if line and not line.startswith("-") and "--hash=" not in line]
    if unhashed:
        raise ConfigError(
            "requirements",
            f"{str(requirements)!r}: {unhashed[0]!r} has no --hash: the image installs the "
            "lock with pip --require-hashes (as the server's own); write it with `uv pip compile "
            "--generate-hashes requirements.txt` or `pip-compile --generate-hashes`",
        )


def handler_stage(handler: str, *, requirements: bool) -> str:
    """The Dockerfile lines added after the bundled server's: the team's package installed into the server's Python,
    its handler imported as the server will import it, and the server's user back."""
    lock = (
        (
            f"COPY {REQUIREMENTS_FILE} ./\n"
            f"RUN python -m pip install --only-binary :all: --require-hashes -r {REQUIREMENTS_FILE}\n"
        )
        if requirements
        else ""
    )
    return (
        "\n"
        "# The team's handler, added by gpu_inference_constructs.bundled_server_image("
        "handler_package=..., handler=...):\n"
        "# the bundled server above, unchanged, then the team's package installed into the same Python. "
        "--no-deps: what\n"
        "# the package needs beyond the server's packages comes from its hashed lock (requirements=), "
        "or pip check fails\n"
        "# the build. The handler is imported and checked (a Handler subclass) as the server will, "
        "so a wrong module or\n"
        "# class fails the build, not a deployment.\n"
        "USER 0:0\n"  # root, by number (hadolint DL3066): pip installs into the base's root-owned Python
        "WORKDIR /build\n"
        f"{lock}"
        f"COPY {PACKAGE_DIRECTORY} ./{PACKAGE_DIRECTORY}\n"
        f"RUN python -m pip install --no-deps ./{PACKAGE_DIRECTORY} \\\n"
        "    && python -m pip check \\\n"
        f"    && python -P -c \"from inference_server.handlers import handler_class; handler_class('{handler}')\" \\\n"
        "    && rm -rf /build\n"
        f"USER {SERVER_USER}\n"
        f"WORKDIR {SERVER_WORKDIR}\n"
        f"ENV MODEL_HANDLER={handler}\n"
    )


def server_context_rules(server_directory: Path) -> tuple[list[str], list[str]]:
    """(the paths the bundled server's .dockerignore admits, the patterns it excludes inside them). Its form is
    ``**``, then ``!path`` lines, then ``**/pattern`` lines; another form is refused, so a change to it is seen here
    rather than as a build context that misses a file."""
    admitted, excluded = [], []
    for raw in (server_directory / ".dockerignore").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or line == "**":
            continue
        if line.startswith("!"):
            admitted.append(line[1:].rstrip("/"))
        elif line.startswith("**/"):
            excluded.append(line[3:])
        else:
            raise ValueError(
                f"{server_directory / '.dockerignore'}: {line!r} is neither !<path> nor **/<pattern>; "
                "teach handler_image.server_context_rules to copy what it means"
            )
    return admitted, excluded


def _ignore(patterns: tuple[str, ...]):
    def ignore(_directory: str, names: list[str]) -> set[str]:
        return {name for name in names if any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)}

    return ignore


_CONTEXTS: list[tempfile.TemporaryDirectory] = []


def _release_contexts() -> None:
    for context in _CONTEXTS:
        context.cleanup()


atexit.register(_release_contexts)


def assemble_build_context(server_directory: Path, package: Path, handler: str, requirements: Path | None) -> Path:
    """A new directory holding the image's build context (see the module docstring). It lives until the process ends:
    CDK stages (copies) it into the cloud assembly when the image is bound to a container, at synth."""
    scratch = tempfile.TemporaryDirectory(prefix="gpu-inference-handler-image-")
    _CONTEXTS.append(scratch)
    context = Path(scratch.name)
    admitted, excluded = server_context_rules(server_directory)
    server_ignore = _ignore(tuple(excluded))
    for name in admitted:
        source = server_directory / name
        if source.is_dir():
            shutil.copytree(source, context / name, ignore=server_ignore)
        elif source.is_file():
            shutil.copy2(source, context / name)
    shutil.copytree(package, context / PACKAGE_DIRECTORY, ignore=_ignore((*excluded, *PACKAGE_EXCLUDES)))
    if requirements is not None:
        shutil.copy2(requirements, context / REQUIREMENTS_FILE)
    dockerfile = (server_directory / "Dockerfile").read_text()
    (context / "Dockerfile").write_text(
        dockerfile.rstrip("\n") + "\n" + handler_stage(handler, requirements=requirements is not None)
    )
    return context


class BundledServerImage(ecs.ContainerImage):
    """The bundled server's image with a team's handler package in it: a container image like any other (its asset
    is built by ``cdk deploy``), which also tells ``BundledServer`` the handler it runs, so the task definition sets
    ``MODEL_HANDLER``. Made by ``bundled_server_image(handler_package=..., handler=...)``."""

    def __init__(self, image: ecs.ContainerImage, *, handler: str, directory: Path) -> None:
        super().__init__()
        self._image = image
        self.handler = handler
        """The handler class, ``module:Class`` (the server's MODEL_HANDLER)."""
        self.directory = directory
        """The assembled build context (a temporary directory, staged into the cloud assembly at synth)."""

    def check_staging(self, scope: Construct) -> None:
        """Without asset staging (``cdk synth --no-staging`` sets this context) the asset would name the temporary
        build context itself, removed when the app exits, before ``cdk deploy`` builds it. BundledServer checks it
        before the task is made (a ConfigError); ``bind`` again for an image given to a container directly."""
        require(
            not scope.node.try_get_context(DISABLE_ASSET_STAGING_CONTEXT),
            "handler_package",
            "the image's build context is assembled in a temporary directory that only a staged asset outlives, and "
            "asset staging is off (--no-staging): synth with staging on, or build the image yourself and pass it "
            "with ModelProps.environment['MODEL_HANDLER']",
        )

    def bind(self, scope: Construct, container_definition: ecs.ContainerDefinition) -> ecs.ContainerImageConfig:
        self.check_staging(scope)
        return self._image.bind(scope, container_definition)


def handler_image(
    server_directory: Path,
    handler_package: str | PathLike[str],
    handler: str,
    requirements: str | PathLike[str] | None,
    **asset_options,
) -> BundledServerImage:
    """Check what the team passed, assemble the build context and make the image (see bundled_server_image)."""
    check_handler(handler)
    package = Path(handler_package)
    check_package(package, handler)
    lock = Path(requirements) if requirements is not None else None
    if lock is not None:
        check_requirements(lock)
    directory = assemble_build_context(server_directory, package, handler, lock)
    image = ecs.ContainerImage.from_asset(str(directory), **asset_options)
    return BundledServerImage(image, handler=handler, directory=directory)


def bundled_server_image(
    *,
    handler_package: str | PathLike[str] | None = None,
    handler: str | None = None,
    requirements: str | PathLike[str] | None = None,
) -> ecs.ContainerImage:
    """The bundled server's image, built for linux/amd64 by ``cdk deploy`` (a Docker image asset; synth needs no
    Docker) from the build context this package ships: ``pip install`` is all a team needs.

    With ``handler_package`` and ``handler``, the same image with a team's own handler in it (a
    ``BundledServerImage``; ``BundledServer(image=...)`` then sets ``MODEL_HANDLER`` in the task definition):

    - ``handler_package``: the directory of the team's Python package, with its ``pyproject.toml`` (or
      ``setup.py``) and the handler's module in it (flat or ``src/`` layout); relative to the directory the app runs
      in, as every CDK asset path. Installed with ``pip install --no-deps`` into the server's Python. Default: None
      (the bundled server's image alone).
    - ``handler``: the handler class, ``module:Class``, a subclass of ``inference_server.handlers.Handler`` (the
      server's ``MODEL_HANDLER``). Required with ``handler_package``. Default: None.
    - ``requirements``: a lock of what the package needs beyond the server's own packages, every line pinned with
      ``--hash`` (``uv pip compile --generate-hashes``), installed with ``pip --require-hashes``. Default: None.

    Synth refuses (``ConfigError``, naming the argument and the fix) a directory without ``pyproject.toml`` or
    ``setup.py`` or without the handler's module, a handler that is not ``module:Class``, and a lock line without a
    hash; the image build (``cdk deploy``) imports the handler and fails if it is not a ``Handler`` subclass."""
    if handler_package is None and handler is None and requirements is None:
        return asset_image(str(SERVER_IMAGE_DIRECTORY), SERVER_IMAGE_NAME)
    require(
        handler_package is not None,
        "handler_package",
        "is missing: the team's package directory (with its pyproject.toml) goes with handler= and requirements=. "
        "For a handler class the bundled image holds already, set ModelProps.environment['MODEL_HANDLER'] instead",
    )
    require(
        handler is not None,
        "handler",
        "is missing: name the class in handler_package that the server runs, module:Class (its MODEL_HANDLER), "
        "e.g. handler='ranking_handler.handlers:RankingHandler'",
    )
    assert handler_package is not None and handler is not None  # for the type checker: required above
    return handler_image(
        SERVER_IMAGE_DIRECTORY,
        handler_package,
        handler,
        requirements,
        platform=ecr_assets.Platform.LINUX_AMD64,
        display_name="gpu-inference-server-handler",
    )
