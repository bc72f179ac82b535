"""The Open Inference Protocol (v2 REST): tritonclient against a real server for a torch.export model (JSON and
binary tensors) and the image classifier (BYTES), equal to the models run in-process; every kind of bad input gets
a 400 in the protocol's error body; the gate, shedding and metrics are those of /predict."""

from __future__ import annotations

import io
import json
import struct
import zlib

import httpx
import numpy as np
import pytest
import torch
import tritonclient.http as tritonclient_http
from tritonclient.utils import InferenceServerException

from inference_server.front.app import create_app
from inference_server.handlers.declaration import read_declaration
from inference_server.handlers.image import decode_image
from inference_server.testing import reference_module

from ..conftest import make_settings, started
from ..live import live_server

FEATURES = np.array([[0.5, -1.0, 2.0, 0.0], [1.5, 0.25, -0.5, 3.0], [0.0, 0.0, 0.0, 1.0]], dtype=np.float32)
COUNTS = np.array([[1, 2], [0, 5], [3, 3]], dtype=np.int64)


def image_bytes(fmt: str, seed: int, size=(40, 30)) -> bytes:
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format=fmt)
    return buffer.getvalue()


def png_bomb(width: int = 50_000, height: int = 50_000) -> bytes:
    """A 1x1 PNG whose header claims width x height pixels: tiny on the wire, gigabytes if decoded."""
    data = bytearray(image_bytes("PNG", 0, (1, 1)))
    ihdr = data.index(b"IHDR")
    data[ihdr + 4 : ihdr + 12] = struct.pack(">II", width, height)
    data[ihdr + 17 : ihdr + 21] = struct.pack(">I", zlib.crc32(bytes(data[ihdr : ihdr + 17])))
    return bytes(data)


def client(app) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")


@pytest.fixture(scope="module")
def export_server(export_service):
    with live_server(export_service) as address:
        yield address


@pytest.fixture(scope="module")
def image_server(image_service):
    with live_server(image_service) as address:
        yield address


def expected_tabular(model_dir) -> tuple[np.ndarray, np.ndarray]:
    with torch.inference_mode():
        probabilities, total = reference_module(model_dir)(torch.from_numpy(FEATURES), torch.from_numpy(COUNTS))
    return probabilities.numpy(), total.numpy()


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
@pytest.mark.parametrize("prefix", ["", "/tabular"], ids=["root", "model-path"])
def test_tritonclient_infers_a_torch_export_model_like_the_model_in_process(
    export_server, tiny_export_dir, binary, prefix
):
    http = tritonclient_http
    with http.InferenceServerClient(export_server + prefix) as triton:
        inputs = [
            http.InferInput("features", list(FEATURES.shape), "FP32"),
            http.InferInput("counts", list(COUNTS.shape), "INT64"),
        ]
        inputs[0].set_data_from_numpy(FEATURES, binary_data=binary)
        inputs[1].set_data_from_numpy(COUNTS, binary_data=binary)
        outputs = [
            http.InferRequestedOutput("probabilities", binary_data=binary),
            http.InferRequestedOutput("total", binary_data=binary),
        ]
        result = triton.infer("tabular", inputs, outputs=outputs, request_id="r-1")
    probabilities, total = expected_tabular(tiny_export_dir)
    got_probabilities, got_total = result.as_numpy("probabilities"), result.as_numpy("total")
    assert got_probabilities is not None and got_total is not None  # both outputs were requested
    np.testing.assert_allclose(got_probabilities, probabilities, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got_total, total, rtol=1e-6, atol=1e-6)
    response = result.get_response()
    assert (response["model_name"], response["model_version"], response["id"]) == ("tabular", "1", "r-1")


def test_tritonclient_sees_health_readiness_and_metadata(export_server):
    with tritonclient_http.InferenceServerClient(export_server) as triton:
        assert triton.is_server_live() and triton.is_server_ready()
        assert triton.is_model_ready("tabular") and triton.is_model_ready("tabular", "1")
        assert not triton.is_model_ready("other")
        metadata = triton.get_model_metadata("tabular")
        assert "binary_tensor_data" in triton.get_server_metadata()["extensions"]
    assert metadata["versions"] == ["1"]
    assert metadata["inputs"] == [
        {"name": "features", "datatype": "FP32", "shape": [-1, 4]},
        {"name": "counts", "datatype": "INT64", "shape": [-1, 2]},
    ]
    assert metadata["outputs"] == [
        {"name": "probabilities", "datatype": "FP32", "shape": [-1, 3]},
        {"name": "total", "datatype": "FP32", "shape": [-1]},
    ]


def test_tritonclient_classifies_images_sent_as_bytes(image_server, tiny_image_dir):
    images = [image_bytes("JPEG", 1), image_bytes("PNG", 2, (64, 20)), image_bytes("JPEG", 3, (16, 16))]
    http = tritonclient_http
    with http.InferenceServerClient(image_server) as triton:
        data = http.InferInput("image", [len(images)], "BYTES")
        data.set_data_from_numpy(np.array(images, dtype=object))
        result = triton.infer("vision", [data])
    labels, scores = result.as_numpy("labels"), result.as_numpy("scores")
    assert labels is not None and scores is not None  # the model's outputs, returned by default
    assert labels.shape == (3, 2) and scores.shape == (3, 2)
    prep = read_declaration(tiny_image_dir, image=True).image
    assert prep is not None  # read with image=True
    pixels = torch.from_numpy(np.stack([decode_image(image, prep) for image in images]))
    with torch.inference_mode():
        probabilities = torch.softmax(reference_module(tiny_image_dir)(pixels), dim=-1).numpy()
    for row in range(3):
        best = np.argsort(-probabilities[row], kind="stable")[:2]
        assert [label.decode() for label in labels[row]] == [prep.labels[i] for i in best]
        np.testing.assert_allclose(scores[row], probabilities[row][best], rtol=1e-5, atol=1e-6)


def test_tritonclient_gets_the_error_of_a_malformed_image(image_server):
    http = tritonclient_http
    with http.InferenceServerClient(image_server) as triton:
        data = http.InferInput("image", [1], "BYTES")
        data.set_data_from_numpy(np.array([b"not an image"], dtype=object))
        with pytest.raises(InferenceServerException) as raised:
            triton.infer("vision", [data])
    assert raised.value.status() == "400"
    assert "image" in raised.value.message()


def infer_body(inputs: list[dict], **extra) -> dict:
    return {"inputs": inputs, **extra}


GOOD_FEATURES = {"name": "features", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}
GOOD_COUNTS = {"name": "counts", "shape": [1, 2], "datatype": "INT64", "data": [1, 2]}


def binary_request(header: dict, *chunks: bytes, claimed: int | None = None) -> tuple[bytes, dict[str, str]]:
    head = json.dumps(header).encode()
    return head + b"".join(chunks), {
        "inference-header-content-length": str(claimed or len(head)),
        "content-type": "application/octet-stream",
    }


def bin_input(name: str, datatype: str, shape: list[int], size: int) -> dict:
    return {"name": name, "datatype": datatype, "shape": shape, "parameters": {"binary_data_size": size}}


BAD_JSON_REQUESTS = {
    "wrong datatype": infer_body([{**GOOD_FEATURES, "datatype": "FP64"}, GOOD_COUNTS]),
    "unknown datatype": infer_body([{**GOOD_FEATURES, "datatype": "COMPLEX"}, GOOD_COUNTS]),
    "wrong shape": infer_body([{**GOOD_FEATURES, "shape": [2, 2]}, GOOD_COUNTS]),
    "wrong rank": infer_body([{**GOOD_FEATURES, "shape": [4]}, GOOD_COUNTS]),
    "shape-data mismatch": infer_body([{**GOOD_FEATURES, "data": [1, 2, 3]}, GOOD_COUNTS]),
    "huge declared shape": infer_body([{**GOOD_FEATURES, "shape": [10**9, 10**9, 4]}, GOOD_COUNTS]),
    "negative dimension": infer_body([{**GOOD_FEATURES, "shape": [-1, 4]}, GOOD_COUNTS]),
    "batch sizes differ": infer_body([{**GOOD_FEATURES, "shape": [2, 4], "data": [0] * 8}, GOOD_COUNTS]),
    "batch over MAX_CLIENT_BATCH": infer_body(
        [{**GOOD_FEATURES, "shape": [17, 4], "data": [0] * 68}, {**GOOD_COUNTS, "shape": [17, 2], "data": [0] * 34}]
    ),
    "empty batch": infer_body(
        [{**GOOD_FEATURES, "shape": [0, 4], "data": []}, {**GOOD_COUNTS, "shape": [0, 2], "data": []}]
    ),
    "strings for numbers": infer_body([{**GOOD_FEATURES, "data": ["1", "2", "3", "4"]}, GOOD_COUNTS]),
    "floats for integers": infer_body([GOOD_FEATURES, {**GOOD_COUNTS, "data": [1.5, 2]}]),
    "integer out of range": infer_body([GOOD_FEATURES, {**GOOD_COUNTS, "data": [2**70, 2]}]),
    "ragged data": infer_body([{**GOOD_FEATURES, "data": [[1, 2], [3]]}, GOOD_COUNTS]),
    "missing input": infer_body([GOOD_FEATURES]),
    "unknown input": infer_body([GOOD_FEATURES, GOOD_COUNTS, {**GOOD_COUNTS, "name": "extra"}]),
    "duplicate input": infer_body([GOOD_FEATURES, GOOD_FEATURES, GOOD_COUNTS]),
    "unknown output": infer_body([GOOD_FEATURES, GOOD_COUNTS], outputs=[{"name": "nope"}]),
    "unknown field": infer_body([GOOD_FEATURES, GOOD_COUNTS], extra=1),
    "no data": infer_body([{k: v for k, v in GOOD_FEATURES.items() if k != "data"}, GOOD_COUNTS]),
    "binary size without the header": infer_body([bin_input("features", "FP32", [1, 4], 16), GOOD_COUNTS]),
    "no inputs": {"inputs": []},
    "not an object": [1, 2],
}


@pytest.mark.anyio
@pytest.mark.parametrize("body", BAD_JSON_REQUESTS.values(), ids=BAD_JSON_REQUESTS.keys())
async def test_bad_json_tensors_get_a_400_in_the_protocols_error_body(export_service, body):
    async with client(create_app(export_service)) as c:
        r = await c.post("/v2/models/tabular/infer", json=body)
    assert r.status_code == 400, r.text
    assert set(r.json()) == {"error"} and isinstance(r.json()["error"], str) and r.json()["error"]


FEATURE_BYTES = FEATURES[:1].tobytes()
COUNT_BYTES = COUNTS[:1].tobytes()
BINARY_HEADER = {"inputs": [bin_input("features", "FP32", [1, 4], 16), bin_input("counts", "INT64", [1, 2], 16)]}


def bytes_tensor(*items: bytes) -> bytes:
    return b"".join(struct.pack("<I", len(item)) + item for item in items)


BAD_BINARY_REQUESTS = {
    "truncated binary data": binary_request(BINARY_HEADER, FEATURE_BYTES, COUNT_BYTES[:9]),
    "binary data left over": binary_request(BINARY_HEADER, FEATURE_BYTES, COUNT_BYTES, b"\0" * 8),
    "size does not match the shape": binary_request(
        {"inputs": [bin_input("features", "FP32", [1, 4], 12), bin_input("counts", "INT64", [1, 2], 20)]},
        FEATURE_BYTES,
        COUNT_BYTES,
    ),
    "header length past the body": binary_request(BINARY_HEADER, FEATURE_BYTES, COUNT_BYTES, claimed=10**6),
    "header length cuts the JSON": binary_request(BINARY_HEADER, FEATURE_BYTES, COUNT_BYTES, claimed=20),
    "huge declared binary shape": binary_request(
        {"inputs": [bin_input("features", "FP32", [2**40, 4], 2**46), bin_input("counts", "INT64", [1, 2], 16)]},
        FEATURE_BYTES,
        COUNT_BYTES,
    ),
}


@pytest.mark.anyio
@pytest.mark.parametrize("request_", BAD_BINARY_REQUESTS.values(), ids=BAD_BINARY_REQUESTS.keys())
async def test_bad_binary_tensors_get_a_400(export_service, request_):
    body, headers = request_
    async with client(create_app(export_service)) as c:
        r = await c.post("/v2/models/tabular/infer", content=body, headers=headers)
    assert r.status_code == 400, r.text
    assert isinstance(r.json()["error"], str)


@pytest.mark.anyio
@pytest.mark.parametrize(
    "headers, status",
    [
        ({"inference-header-content-length": "abc"}, 400),
        ({"content-encoding": "gzip"}, 415),
        ({"content-type": "text/plain"}, 415),
    ],
    ids=["bad header length", "compressed", "text"],
)
async def test_bad_headers_get_a_clear_4xx(export_service, headers, status):
    async with client(create_app(export_service)) as c:
        r = await c.post(
            "/v2/models/tabular/infer", content=json.dumps(infer_body([GOOD_FEATURES, GOOD_COUNTS])), headers=headers
        )
    assert r.status_code == status, r.text
    assert isinstance(r.json()["error"], str)


BAD_IMAGES = {
    "malformed image": b"\x89PNG\r\n\x1a\n but then nothing sensible",
    "decompression bomb": png_bomb(),
    "truncated JPEG": image_bytes("JPEG", 4)[:200],
    "GIF (not JPEG or PNG)": image_bytes("GIF", 5),
    "empty": b"",
}


@pytest.mark.anyio
@pytest.mark.parametrize("image", BAD_IMAGES.values(), ids=BAD_IMAGES.keys())
async def test_bad_images_get_a_400_even_among_good_ones(image_service, image):
    header = {"inputs": [bin_input("image", "BYTES", [2], 0)]}
    data = bytes_tensor(image_bytes("PNG", 6), image)
    header["inputs"][0]["parameters"]["binary_data_size"] = len(data)
    body, headers = binary_request(header, data)
    async with client(create_app(image_service)) as c:
        r = await c.post("/v2/models/vision/infer", content=body, headers=headers)
    assert r.status_code == 400, r.text
    assert isinstance(r.json()["error"], str)


@pytest.mark.anyio
async def test_a_bytes_element_that_runs_past_its_tensor_gets_a_400(image_service):
    data = struct.pack("<I", 10**6) + b"short"
    body, headers = binary_request({"inputs": [bin_input("image", "BYTES", [1], len(data))]}, data)
    async with client(create_app(image_service)) as c:
        r = await c.post("/v2/models/vision/infer", content=body, headers=headers)
    assert r.status_code == 400 and "past" in r.json()["error"]


@pytest.mark.anyio
async def test_a_text_classifier_answers_over_the_protocol_as_over_predict(classifier_service):
    texts = ["the food was good", "terrible slow service"]
    async with client(create_app(classifier_service)) as c:
        r = await c.post(
            "/tiny/v2/models/tiny/infer",
            json={"inputs": [{"name": "text", "shape": [2], "datatype": "BYTES", "data": texts}]},
        )
        batch = (await c.post("/predict/batch", json={"texts": texts})).json()["predictions"]
        metadata = (await c.get("/v2/models/tiny")).json()
    assert r.status_code == 200, r.text
    outputs = {o["name"]: o for o in r.json()["outputs"]}
    assert outputs["label"]["data"] == [p["label"] for p in batch]
    assert outputs["scores"]["shape"] == [2, 2]
    np.testing.assert_allclose(outputs["score"]["data"], [p["score"] for p in batch], atol=1e-6)
    assert metadata["inputs"] == [{"name": "text", "datatype": "BYTES", "shape": [-1]}]


@pytest.mark.anyio
@pytest.mark.parametrize("path", ["/v2/models/other/infer", "/v2/models/tabular/versions/9/infer"])
async def test_an_unknown_model_or_version_is_a_404(export_service, path):
    async with client(create_app(export_service)) as c:
        r = await c.post(path, json=infer_body([GOOD_FEATURES, GOOD_COUNTS]))
        metadata = await c.get(path.removesuffix("/infer"))
    assert (r.status_code, metadata.status_code) == (404, 404)
    assert isinstance(r.json()["error"], str)


@pytest.mark.anyio
async def test_predict_on_a_tensor_model_points_to_the_protocol(export_service):
    async with client(create_app(export_service)) as c:
        r = await c.post("/predict", json={"text": "hello"})
    assert r.status_code == 422 and "/v2/models/tabular/infer" in r.json()["error"]["message"]


@pytest.mark.anyio
async def test_infer_is_behind_the_api_key_and_counted_in_the_metrics(tiny_export_dir):
    service = started(
        make_settings(tiny_export_dir, model_name="tabular", model_task="torch-export", api_keys=("sesame",))
    )
    try:
        async with client(create_app(service)) as c:
            body = infer_body([GOOD_FEATURES, GOOD_COUNTS])
            denied = await c.post("/v2/models/tabular/infer", json=body)
            keyed = await c.post("/v2/models/tabular/infer", json=body, headers={"x-api-key": "sesame"})
            bearer = await c.post("/v2/models/tabular/infer", json=body, headers={"authorization": "Bearer sesame"})
            metrics = (await c.get("/metrics")).text
            service.begin_drain()
            shed = await c.post("/v2/models/tabular/infer", json=body, headers={"x-api-key": "sesame"})
    finally:
        service.local_model.stop()
    assert denied.status_code == 401 and isinstance(denied.json()["error"], str)
    assert (keyed.status_code, bearer.status_code) == (200, 200)
    assert 'requests_total{endpoint="infer",status="200"} 2.0' in metrics
    assert shed.status_code == 503 and shed.headers["retry-after"] and isinstance(shed.json()["error"], str)


@pytest.mark.anyio
async def test_the_openapi_document_lists_the_statuses_the_protocols_answer(export_service):
    async with client(create_app(export_service)) as c:
        doc = (await c.get("/openapi.json")).json()
    infer = doc["paths"]["/v2/models/{model_name}/infer"]["post"]
    assert set(infer["responses"]) == {"200", "400", "404", "413", "415", "500", "503", "504"}
    assert set(doc["paths"]["/v1/embeddings"]["post"]["responses"]) == {
        "200",
        "400",
        "404",
        "413",
        "415",
        "500",
        "503",
        "504",
    }
    assert doc["paths"]["/v2/models/{model_name}"]["get"]["parameters"][0]["schema"]["enum"] == ["tabular"]
