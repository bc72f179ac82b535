"""torch.export artifacts: model.json is checked strictly, archives with pickled entries are refused, the program
must match its declaration (dynamic batch dimension included); images decode within bounds; the publishing command
checks an artifact before uploading it, and the service serves one from S3 with its manifest's task."""

from __future__ import annotations

import asyncio
import copy
import io
import json
import time
import zipfile
from typing import Any

import numpy as np
import orjson
import pytest
import torch

from inference_server.handlers.declaration import Declaration, DeclarationError, parse_declaration
from inference_server.handlers.export_program import ProgramError, check_archive, check_program, load_program
from inference_server.handlers.image import decode_image
from inference_server.inputs import InputError
from inference_server.manifest import Manifest
from inference_server.publish import PublishError, publish
from inference_server.testing import EXPORT_MODEL_JSON, image_model_json

from ..conftest import make_settings, started


def declaration_with(**changes) -> bytes:
    doc = copy.deepcopy(EXPORT_MODEL_JSON)
    for path, value in changes.items():
        *parents, last = path.split("__")
        node: Any = doc
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return orjson.dumps(doc)


BAD_DECLARATIONS = {
    "unknown key": (declaration_with(colour="blue"), "unknown key(s) colour"),
    "format": (declaration_with(format=2), "format: must be 1"),
    "static batch": (declaration_with(inputs__0__shape=[2, 4]), "inputs[0].shape: the first dimension must be -1"),
    "zero dimension": (declaration_with(inputs__0__shape=[-1, 0]), "inputs[0].shape[1]: must be an integer"),
    "strings": (declaration_with(inputs__0__datatype="BYTES"), "inputs[0].datatype: must be one of"),
    "duplicate names": (declaration_with(outputs__1__name="probabilities"), "outputs: tensor names must be unique"),
    "program path": (declaration_with(program="../model.pt2"), "program: must be the file name of a .pt2"),
    "fp16 flag": (declaration_with(fp16_safe="yes"), "fp16_safe: must be true or false"),
    "not json": (b"{", "not valid JSON"),
}


@pytest.mark.parametrize("data, message", BAD_DECLARATIONS.values(), ids=BAD_DECLARATIONS.keys())
def test_bad_declarations_are_refused_naming_the_key(data, message):
    with pytest.raises(DeclarationError) as raised:
        parse_declaration(data, image=False)
    assert message in str(raised.value)


@pytest.mark.parametrize(
    "image, message",
    [
        ({"crop": 8}, "inputs: an image classifier takes one FP32 tensor of shape [-1, 3, 8, 8]"),
        ({"labels": ["a", "b"]}, "outputs: an image classifier returns one float tensor of shape [-1, 2]"),
        ({"top_k": 9}, "image.top_k: must be an integer from 1 to 4"),
        ({"std": [1, 0, 1]}, "image.std: must be three positive numbers"),
        ({"resize": 4}, "image.resize: must be an integer from 16"),
    ],
)
def test_bad_image_preprocessing_is_refused(image, message):
    doc = image_model_json()
    doc["image"].update(image)
    with pytest.raises(DeclarationError) as raised:
        parse_declaration(orjson.dumps(doc), image=True)
    assert message in str(raised.value)


def test_an_image_section_is_required_for_images_and_refused_otherwise():
    with pytest.raises(DeclarationError, match="missing image"):
        parse_declaration(orjson.dumps(EXPORT_MODEL_JSON), image=True)
    with pytest.raises(DeclarationError, match="unknown key"):
        parse_declaration(orjson.dumps(image_model_json()), image=False)


def rewritten_archive(source, dest, edit) -> None:
    with zipfile.ZipFile(source) as original, zipfile.ZipFile(dest, "w") as copy_:
        for info in original.infolist():
            copy_.writestr(info, edit(info.filename, original.read(info.filename)))


def test_an_archive_with_a_pickled_entry_is_refused_before_loading(tiny_export_dir, tmp_path):
    def pickled(name: str, data: bytes) -> bytes:
        if name.endswith("_weights_config.json"):
            doc = json.loads(data)
            next(iter(doc["config"].values()))["use_pickle"] = True
            return json.dumps(doc).encode()
        return data

    rewritten_archive(tiny_export_dir / "model.pt2", tmp_path / "model.pt2", pickled)
    with pytest.raises(ProgramError, match="pickle"):
        check_archive(tmp_path / "model.pt2")


def test_a_file_that_is_not_an_archive_is_refused(tmp_path):
    (tmp_path / "model.pt2").write_bytes(b"not a zip")
    with pytest.raises(ProgramError, match=r"torch\.export archive"):
        load_program(tmp_path / "model.pt2")


def exported(tmp_path, dynamic: dict | None, batch=2):
    class Double(torch.nn.Module):
        def forward(self, x):
            return x * 2

    program = torch.export.export(Double(), (torch.randn(batch, 3),), dynamic_shapes=dynamic)
    torch.export.save(program, tmp_path / "model.pt2")
    return load_program(tmp_path / "model.pt2")


def double_declaration(datatype: str = "FP32") -> Declaration:
    return parse_declaration(
        orjson.dumps(
            {
                "format": 1,
                "inputs": [{"name": "x", "datatype": datatype, "shape": [-1, 3]}],
                "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 3]}],
            }
        ),
        image=False,
    )


def test_a_program_must_match_its_declaration(tmp_path):
    program = exported(tmp_path, {"x": {0: torch.export.Dim("batch", min=1, max=16)}})
    check_program(program, double_declaration(), max_batch_size=16)
    with pytest.raises(ProgramError, match=r"torch\.float32.*INT64"):
        check_program(program, double_declaration("INT64"), max_batch_size=16)
    with pytest.raises(ProgramError, match=r"batch dimension.*MAX_BATCH_SIZE"):
        check_program(program, double_declaration(), max_batch_size=32)


def test_a_program_exported_with_a_static_batch_is_refused(tmp_path):
    with pytest.raises(ProgramError, match=r"batch dimension.*static"):
        check_program(exported(tmp_path, None), double_declaration(), max_batch_size=4)


def png(width: int, height: int) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (10, 20, 30)).save(buffer, format="PNG")
    return buffer.getvalue()


def test_images_are_resized_cropped_and_normalised_as_declared(tiny_image_dir):
    from inference_server.handlers.declaration import read_declaration

    prep = read_declaration(tiny_image_dir, image=True).image
    assert prep is not None  # read with image=True
    pixels = decode_image(png(64, 32), prep)
    assert pixels.shape == (3, 16, 16) and pixels.dtype == np.float32
    expected = (np.array([10, 20, 30]) / 255 - np.array(prep.mean)) / np.array(prep.std)
    np.testing.assert_allclose(pixels[:, 8, 8], expected, atol=1e-5)


def test_an_image_over_the_pixel_limit_is_refused_from_its_header(tiny_image_dir):
    from inference_server.handlers.declaration import read_declaration

    prep = read_declaration(tiny_image_dir, image=True).image
    assert prep is not None  # read with image=True
    prep = type(prep)(**{**prep.__dict__, "max_pixels": 100})
    started_at = time.perf_counter()
    with pytest.raises(InputError, match="limit of 100"):
        decode_image(png(11, 10), prep)
    assert time.perf_counter() - started_at < 1


def test_publish_checks_an_export_artifact_before_uploading(s3, bucket, tiny_export_dir, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "model.pt2").write_bytes((tiny_export_dir / "model.pt2").read_bytes())
    (broken / "model.json").write_bytes(declaration_with(inputs__1__datatype="INT32"))
    uri = f"s3://{bucket}/models/tabular/1/"
    with pytest.raises(PublishError, match=r"input counts.*INT32"):
        publish(broken, uri, task="torch-export")
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket)
    manifest = publish(tiny_export_dir, uri, task="torch-export")
    assert set(manifest.files) == {"model.pt2", "model.json"}
    stored = Manifest.from_json(s3.get_object(Bucket=bucket, Key="models/tabular/1/manifest.json")["Body"].read())
    assert stored.task == "torch-export"


def test_the_service_serves_an_image_classifier_from_s3_with_its_manifests_task(s3, bucket, tiny_image_dir, tmp_path):
    from inference_server.__main__ import resolve_task

    publish(tiny_image_dir, f"s3://{bucket}/models/vision/3/", task="image-classification")
    settings = resolve_task(
        make_settings(
            f"s3://{bucket}/models/vision/3/",
            model_name="vision",
            model_version="3",
            model_task=None,
            model_cache_dir=tmp_path,
        )
    )
    assert settings.model_task == "image-classification"
    service = started(settings)
    try:
        assert service.probe()  # the readiness probe sends the handler's own probe input, an image
        (prediction,) = asyncio.run(service.predict([png(20, 20)], {}))
    finally:
        service.local_model.stop()
    assert len(prediction["labels"]) == 2 and prediction["scores"][0] >= prediction["scores"][1]
