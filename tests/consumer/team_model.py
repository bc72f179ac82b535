"""A team's own model as the docs show it: the handler package of constructs/README.md's "A team's own handler in the
bundled server's image" (written out exactly as the page has it: the blocks whose first line is
``# ranking_handler/<path>``, and the empty ``__init__.py`` its tree names), a TorchScript ranker of the shape its
handler serves, and publish's S3 calls kept in memory. tests/consumer/test_readme_examples.py runs the section's app
beside the package; test_team_handler.py and test_publish_docs.py use the rest."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

from tests.conftest import ROOT

PAGE = ROOT / "constructs" / "README.md"
PACKAGE = "ranking_handler"
HANDLER = "ranking_handler.handlers:RankingHandler"
FEATURES = 16
FILE_BLOCK = re.compile(r"```(?:toml|python)\n# (ranking_handler/\S+)\n(.*?)```", re.S)
EMPTY_INIT = re.compile(r"^\s*[│ ]*├── __init__\.py\s+empty$", re.M)


def page_package_files() -> dict[str, str]:
    """path under the app's directory -> the file's text, as the page shows it (its first line, the path, included)."""
    text = PAGE.read_text()
    files = {path: f"# {path}\n{body}" for path, body in FILE_BLOCK.findall(text)}
    assert EMPTY_INIT.search(text), (
        "the page's tree no longer names an empty ranking_handler/ranking_handler/__init__.py"
    )
    return {**files, f"{PACKAGE}/{PACKAGE}/__init__.py": ""}


def write_page_package(directory: Path) -> Path:
    """The package's files under ``directory`` (the app's directory); returns the package directory."""
    for path, text in page_package_files().items():
        target = directory / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return directory / PACKAGE


def scripted_ranker(seed: int = 0):
    """A ranker saved the way the page's handler loads it: torch.jit.script of FEATURES floats -> one score."""
    import torch

    class Ranker(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.hidden = torch.nn.Linear(FEATURES, 8)
            self.score = torch.nn.Linear(8, 1)

        def forward(self, features: torch.Tensor) -> torch.Tensor:
            return self.score(torch.relu(self.hidden(features))).squeeze(-1)

    torch.manual_seed(seed)
    return torch.jit.script(Ranker().eval())


class MemoryS3:
    """The S3 calls publish makes, on a dict of key -> bytes (one bucket)."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}

    def get_paginator(self, _operation: str):
        def paginate(Bucket: str, Prefix: str):  # noqa: N803 (boto3's names)
            return [{"Contents": [{"Key": key} for key in self.objects if key.startswith(Prefix)]}]

        return SimpleNamespace(paginate=paginate)

    def upload_file(self, filename: str, _bucket: str, key: str) -> None:
        self.objects[key] = Path(filename).read_bytes()

    def put_object(self, Bucket: str, Key: str, Body, ContentType: str) -> None:  # noqa: N803
        self.objects[Key] = Body if isinstance(Body, bytes) else Body.encode()

    def delete_object(self, Bucket: str, Key: str) -> None:  # noqa: N803
        self.objects.pop(Key, None)

    def download(self, prefix: str, directory: Path) -> Path:
        """Every object under ``prefix`` into ``directory``, as a task's copy of the version would hold it."""
        for key, data in self.objects.items():
            if key.startswith(prefix):
                target = directory / key[len(prefix) :]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
        return directory
