"""Adapter versions on the task's shared volume (ADAPTER_DIR, mounted read-only into the server): each at
<ADAPTER_DIR>/<adapter>/<version>/, downloaded into a temporary directory beside it, verified against its manifest, then
renamed into place (one rename on one filesystem), so the server never sees a half-written or unverified adapter."""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from pathlib import Path

from ..engine.artifacts import ArtifactError, download_verified, read_s3_manifest
from ..manifest import MANIFEST_FILE, Manifest, ManifestError, verify_directory
from .registry import adapter_prefix

log = logging.getLogger(__name__)

PARTIAL = ".partial"  # the temporary directories, on the same volume as their targets


class AdapterFiles:
    def __init__(self, client, bucket: str, base: str, root: Path) -> None:
        self.client, self.bucket, self.base, self.root = client, bucket, base, root

    def path(self, name: str, version: str) -> Path:
        return self.root / name / version

    def manifest(self, name: str, version: str) -> Manifest:
        prefix = adapter_prefix(self.base, name, version)
        manifest = read_s3_manifest(self.client, self.bucket, prefix)
        if manifest is None:
            raise ArtifactError(
                f"s3://{self.bucket}/{prefix}{MANIFEST_FILE} does not exist: the version is not published"
            )
        return manifest

    def fetch(self, name: str, version: str, manifest: Manifest) -> Path:
        """The version's verified directory: kept if already there and intact, else downloaded and renamed in."""
        target = self.path(name, version)
        if target.is_dir():
            try:
                verify_directory(target, manifest)
                return target
            except ManifestError as exc:
                log.warning("adapter files altered; fetched again", extra={"adapter": name, "error": str(exc)})
                shutil.rmtree(target)
        partial = self.root / PARTIAL / f"{name}-{version}-{uuid.uuid4().hex[:8]}"
        try:
            download_verified(self.client, self.bucket, adapter_prefix(self.base, name, version), partial, manifest)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.rename(partial, target)
        finally:
            shutil.rmtree(partial, ignore_errors=True)
        return target

    def delete(self, name: str, version: str) -> None:
        shutil.rmtree(self.path(name, version), ignore_errors=True)
        try:
            (self.root / name).rmdir()  # the adapter's folder, once its last version is gone
        except OSError:
            pass

    def clear_partial(self) -> None:
        """Temporary directories a previous run left (a sidecar killed mid-download)."""
        shutil.rmtree(self.root / PARTIAL, ignore_errors=True)
