"""Issue 53: ``ModelProps.gpu_share`` was only in the changelog, not on the library page. The page's ``ModelProps``
paragraph names every ModelProps field, and GpuShare's fields with the share's rules."""

from __future__ import annotations

import dataclasses
import re

from gpu_inference_constructs import GpuShare, ModelProps
from gpu_inference_constructs.core.gpu_share import MIN_SHARE_MIB
from tests.conftest import ROOT

PAGE = ROOT / "constructs" / "README.md"


def model_props_paragraphs(page: str) -> str:
    """The page's bullets that start with ``ModelProps``."""
    return "\n".join(re.findall(r"^- `ModelProps[^\n]*(?:\n  [^\n]*)*", page, re.M))


def unnamed(fields: list[str], text: str) -> list[str]:
    return [name for name in fields if f"`{name}`" not in text and f"{name}=" not in text]


def test_the_page_names_every_model_props_field_where_model_props_is():
    text = model_props_paragraphs(PAGE.read_text())
    assert unnamed([field.name for field in dataclasses.fields(ModelProps)], text) == []
    assert unnamed([field.name for field in dataclasses.fields(GpuShare)], text) == []
    assert "GpuShare(" in text and str(MIN_SHARE_MIB) in text and "single_cuda_process" in text


def test_the_check_finds_a_field_the_paragraph_leaves_out():
    assert unnamed(["gpus", "gpu_share"], "- `ModelProps` is server-neutral: `gpus`, the one place") == ["gpu_share"]
