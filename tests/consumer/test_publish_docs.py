"""inference_image/README.md's "What publish accepts": its table lists exactly the --task choices publish's argparse
takes (and its --runtime line exactly the --runtime choices), and what it says of TorchScript holds: --task
torch-export refuses a TorchScript file in either form, torch deprecates TorchScript, and the page's conversion runs as
written into a model.pt2 that, with the page's model.json, publish takes with --task torch-export and that scores as
the TorchScript model did."""

from __future__ import annotations

import json
import re
import shutil
import warnings

import numpy as np
import pytest

from tests.conftest import ROOT
from tests.consumer.team_model import FEATURES, MemoryS3, scripted_ranker

README = ROOT / "inference_image" / "README.md"


def section() -> str:
    text = README.read_text()
    start = text.index("### What publish accepts\n")
    return text[start : text.index("\n### ", start + 1)]


def publish_choices(capsys) -> dict[str, set[str]]:
    """--task's and --runtime's choices, as publish's own argparse prints them."""
    from inference_server import publish

    with pytest.raises(SystemExit):
        publish.main(["--help"])
    usage = capsys.readouterr().out
    return {
        flag: set(re.search(rf"{flag} \{{([^}}]*)\}}", usage).group(1).split(","))  # pyright: ignore[reportOptionalMemberAccess]
        for flag in ("--task", "--runtime")
    }


def test_the_table_lists_exactly_the_tasks_publish_accepts(capsys):
    rows = re.findall(r"^\| (`[^|]*`|none \(no `--task`\)) \|", section(), re.M)
    documented = [row.strip("`") for row in rows if row.startswith("`") and row != "`--task`"]
    assert len(documented) == len(set(documented))
    assert (
        set(documented)
        == publish_choices(capsys)["--task"]
        == {"text-embedding", "text-classification", "torch-export", "image-classification"}
    )
    assert "none (no `--task`)" in rows, "and publishing without a task"


def test_the_runtime_line_lists_exactly_the_runtimes_publish_accepts(capsys):
    (line,) = re.findall(r"^`--runtime` \(with a `--task`\) takes (.*?);", section(), re.M)
    assert set(re.findall(r"`([^`]+)`", line)) == publish_choices(capsys)["--runtime"]


def test_the_twin_a_task_publish_does_not_take_is_seen(capsys):
    """The comparison above is not vacuous: one more documented task would differ from publish's choices."""
    assert {"text-embedding", "torchscript"} != publish_choices(capsys)["--task"]


@pytest.fixture
def torchscript(tmp_path):
    """ranker.ts (torch.jit.save of the ranker) in an otherwise empty directory, and the ranker."""
    import torch

    ranker = scripted_ranker()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.save(ranker, str(tmp_path / "ranker.ts"))
    return tmp_path, ranker


def ranker_declaration() -> dict:
    (block,) = [b for b in re.findall(r"```json\n(.*?)```", section(), re.S) if '"score"' in b]
    return json.loads(block)


@pytest.mark.parametrize(
    ("program", "error", "page_says"),
    [
        ("model.ts", r"model\.json: program: .*\.pt2 archive", "`model.json`'s `program` must name a `.pt2`"),
        ("model.pt2", r"cannot load model\.pt2", "not a torch.export archive: `cannot load model.pt2`"),
    ],
)
def test_torch_export_refuses_a_torchscript_file(torchscript, program, error, page_says):
    from inference_server.publish import PublishError, publish

    directory, _ = torchscript
    version = directory / "ranker"
    version.mkdir()
    shutil.copy(directory / "ranker.ts", version / program)
    (version / "model.json").write_text(json.dumps({**ranker_declaration(), "program": program}))
    with pytest.raises(PublishError, match=error):
        publish(version, "s3://bucket/models/ranker/1/", task="torch-export", client=MemoryS3())
    assert page_says in section().replace("\n", " ")


def test_torch_deprecates_torchscript_as_the_page_says(torchscript):
    import torch

    directory, _ = torchscript
    assert '`torch.jit.save` and `torch.jit.load` warn "Please switch to `torch.export`"' in section().replace(
        "\n", " "
    )
    with pytest.warns(DeprecationWarning, match=r"torch\.jit\.load.*deprecated.*torch\.export"):
        torch.jit.load(str(directory / "ranker.ts"))


def test_the_pages_conversion_runs_as_written_and_publish_takes_its_program(torchscript, monkeypatch):
    import torch

    from inference_server.handlers.export_program import load_program
    from inference_server.publish import publish

    directory, ranker = torchscript
    (source,) = [
        b for b in re.findall(r"```python\n(.*?)```", section(), re.S) if b.startswith("# TorchScript to torch.export")
    ]
    (directory / "ranker").mkdir()
    monkeypatch.chdir(directory)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        exec(compile(source, "inference_image/README.md", "exec"), {"__name__": "readme_conversion"})
    (directory / "ranker" / "model.json").write_text(json.dumps(ranker_declaration()))
    s3 = MemoryS3()
    manifest = publish(directory / "ranker", "s3://bucket/models/ranker/1/", task="torch-export", client=s3)
    assert manifest.task == "torch-export" and set(manifest.files) == {"model.pt2", "model.json"}
    module = load_program(directory / "ranker" / "model.pt2").module()
    for rows in (1, 5, 64):
        features = torch.from_numpy(np.random.default_rng(rows).standard_normal((rows, FEATURES)).astype(np.float32))
        np.testing.assert_allclose(
            module(features).detach().numpy(), ranker(features).detach().numpy(), rtol=1e-5, atol=1e-6
        )
