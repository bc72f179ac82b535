"""Every relative link in the project's markdown resolves: to an existing file, and for a `#anchor` into a markdown
file, to one of its headings (GitHub's anchors). A planted broken link is reported, so the check cannot pass by
finding nothing. README.md stays a front door: at most 400 lines, the reference lives in docs/."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import unquote

from tests.conftest import ROOT, documentation_files

FRONT_DOOR_MAX_LINES = 400

INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
FENCE = re.compile(r"^\s{0,3}(```|~~~)")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def prose_lines(text: str) -> Iterable[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, with inline code spans blanked out."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, re.sub(r"(`+).*?\1", "", line)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text lowercased, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
    text = re.sub(r"<[^>]+>", "", text).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in path.read_text().splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else HEADING.match(line)
        if match:
            base = slug(match.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(path: Path) -> Iterable[tuple[int, str]]:
    for number, line in prose_lines(path.read_text()):
        for match in INLINE.finditer(line):
            yield number, match.group(1)
        reference = REFERENCE.match(line)
        if reference:
            yield number, reference.group(1)


def broken_links(paths: Iterable[Path], root: Path = ROOT) -> list[str]:
    """`file:line: target (why)` for every relative link that does not resolve."""
    broken = []
    for path in paths:
        for number, target in links(path):
            if SCHEME.match(target) or target.startswith("//"):
                continue  # absolute URLs are not checked here
            where = f"{path.relative_to(root)}:{number}: {target}"
            file_part, _, anchor = target.partition("#")
            destination = (path.parent / unquote(file_part)).resolve() if file_part else path
            if not destination.exists():
                broken.append(f"{where} (no such file)")
            elif anchor and destination.suffix == ".md" and unquote(anchor).lower() not in anchors(destination):
                broken.append(f"{where} (no such heading in {destination.relative_to(root.resolve())})")
    return broken


def test_every_relative_link_in_the_docs_resolves():
    files = documentation_files()
    assert all(path.exists() for path in files)
    assert broken_links(files) == []


def test_the_checker_reports_a_planted_broken_link(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.md").write_text(
        "# Guide\n\n## Rolling out a new version\n\n## Rolling out a new version\n"
    )
    (tmp_path / "pic.png").write_bytes(b"")
    (tmp_path / "README.md").write_text(
        "# Front door\n\n"
        "[ok](docs/guide.md) [ok anchor](docs/guide.md#rolling-out-a-new-version) "
        "[second](docs/guide.md#rolling-out-a-new-version-1)\n"
        "![ok image](pic.png) [here](#front-door) [web](https://example.com/missing.md)\n"
        "[gone](docs/missing.md)\n"
        "[bad anchor](docs/guide.md#rolling-back)\n"
        "`[in code](docs/nowhere.md)`\n"
        "```\n[in a block](docs/nowhere.md)\n```\n"
        "[ref]: docs/also-missing.md\n"
    )
    assert broken_links([tmp_path / "README.md"], root=tmp_path) == [
        "README.md:5: docs/missing.md (no such file)",
        "README.md:6: docs/guide.md#rolling-back (no such heading in docs/guide.md)",
        "README.md:11: docs/also-missing.md (no such file)",
    ]


def test_github_anchors_of_the_headings_we_use():
    assert slug("Configuration (`cdk.json`)") == "configuration-cdkjson"
    assert slug("LLMs on 4-GPU instances (vLLM)") == "llms-on-4-gpu-instances-vllm"
    assert slug("Optimised runtimes (`--runtime`, `MODEL_RUNTIME`)") == "optimised-runtimes---runtime-model_runtime"


def test_the_readme_is_a_front_door():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= FRONT_DOOR_MAX_LINES, f"README.md has {len(lines)} lines: move reference into docs/"
