"""The OpenAI embeddings API: the official openai client against a real server on all-MiniLM-L6-v2 gets the vectors
sentence-transformers computes (within 2e-4 per component, as test_models states for /predict; both run float32 on
the CPU and differ only by padding and summation order), in float and base64, truncated by `dimensions`, and the
client's documented error types for bad requests. OpenAI-shaped errors through the in-process app."""

from __future__ import annotations

import base64

import httpx
import numpy as np
import openai
import pytest

from inference_server.front.app import create_app

from ..conftest import MINILM_API_KEY
from ..live import live_server

SENTENCES = [
    "A man is eating food.",
    "A man is riding a horse.",
    "The new movie is awesome and everyone should see it twice. " * 4,
]
KEY = MINILM_API_KEY
TOLERANCE = 2e-4


@pytest.fixture(scope="module")
def minilm_server(minilm_service):
    with live_server(minilm_service) as address:
        yield address


@pytest.fixture(scope="module")
def reference(minilm_dir) -> np.ndarray:
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(minilm_dir), device="cpu").encode(SENTENCES, normalize_embeddings=True)


@pytest.fixture(scope="module")
def openai_client(minilm_server):
    with openai.OpenAI(base_url=f"http://{minilm_server}/minilm/v1", api_key=KEY, max_retries=0) as c:
        yield c


def vectors_of(response, encoding_format: str | None) -> np.ndarray:
    """The client decodes base64 itself only when it chose it (no encoding_format given)."""
    if encoding_format == "base64":
        return np.stack([np.frombuffer(base64.b64decode(item.embedding), dtype="<f4") for item in response.data])
    return np.array([item.embedding for item in response.data])


@pytest.mark.parametrize("encoding_format", ["float", "base64", None], ids=["float", "base64", "client-default"])
def test_openai_client_gets_sentence_transformers_vectors(openai_client, reference, encoding_format):
    extra = {"encoding_format": encoding_format} if encoding_format else {}
    response = openai_client.embeddings.create(model="minilm", input=SENTENCES, **extra)
    vectors = vectors_of(response, encoding_format)
    assert [item.index for item in response.data] == [0, 1, 2]
    assert vectors.shape == (3, 384)
    np.testing.assert_allclose(vectors, reference, atol=TOLERANCE)
    assert response.model == "minilm"


def test_usage_counts_the_tokens_of_every_input(openai_client, minilm_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(minilm_dir)
    expected = sum(len(ids) for ids in tokenizer(SENTENCES, truncation=True, max_length=128)["input_ids"])
    for _ in range(2):  # the second time too: usage is not lost to a result cache
        usage = openai_client.embeddings.create(model="minilm", input=SENTENCES).usage
        assert usage.prompt_tokens == usage.total_tokens == expected


def test_a_single_string_input(openai_client, reference):
    response = openai_client.embeddings.create(model="minilm", input=SENTENCES[1], encoding_format="float")
    np.testing.assert_allclose(response.data[0].embedding, reference[1], atol=TOLERANCE)


@pytest.mark.parametrize("encoding_format", ["float", "base64"])
def test_dimensions_truncates_and_normalises_again(openai_client, reference, encoding_format):
    response = openai_client.embeddings.create(
        model="minilm", input=SENTENCES, dimensions=128, encoding_format=encoding_format
    )
    vectors = vectors_of(response, encoding_format)
    assert vectors.shape == (3, 128)
    expected = reference[:, :128] / np.linalg.norm(reference[:, :128], axis=1, keepdims=True)
    np.testing.assert_allclose(vectors, expected, atol=TOLERANCE)


def test_a_size_the_model_was_not_declared_for_is_a_bad_request(openai_client):
    with pytest.raises(openai.BadRequestError) as raised:
        openai_client.embeddings.create(model="minilm", input="hello", dimensions=100)
    assert raised.value.param == "dimensions" and "128" in raised.value.message


@pytest.mark.parametrize(
    "kwargs",
    [
        {"input": ""},
        {"input": []},
        {"input": ["a"] * 17},
        {"input": [[1, 2, 3]]},
        {"input": "a", "encoding_format": "int8"},
    ],
    ids=["empty text", "no inputs", "too many inputs", "token arrays", "unknown encoding"],
)
def test_bad_requests_raise_the_clients_bad_request_error(openai_client, kwargs):
    with pytest.raises(openai.BadRequestError) as raised:
        openai_client.embeddings.create(model="minilm", **kwargs)
    assert raised.value.status_code == 400 and raised.value.type == "invalid_request_error"


def test_unknown_model_and_wrong_key(minilm_server, openai_client):
    with pytest.raises(openai.NotFoundError) as raised:
        openai_client.embeddings.create(model="text-embedding-3-small", input="hello")
    assert raised.value.code == "model_not_found"
    with openai.OpenAI(base_url=f"http://{minilm_server}/v1", api_key="wrong", max_retries=0) as other:
        with pytest.raises(openai.AuthenticationError):
            other.embeddings.create(model="minilm", input="hello")


def test_models_list_and_retrieve(openai_client):
    assert [m.id for m in openai_client.models.list()] == ["minilm"]
    assert openai_client.models.retrieve("minilm").owned_by
    with pytest.raises(openai.NotFoundError):
        openai_client.models.retrieve("gpt-4")


def client(app) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")


@pytest.mark.anyio
async def test_errors_have_the_openai_shape_and_schema_errors_are_400(classifier_service):
    async with client(create_app(classifier_service)) as c:
        schema = await c.post("/v1/embeddings", json={"model": "tiny", "input": "a", "extra": 1})
        no_embeddings = await c.post("/tiny/v1/embeddings", json={"model": "tiny", "input": "a"})
        bad_json = await c.post("/v1/embeddings", content=b"{", headers={"content-type": "application/json"})
        not_json = await c.post("/v1/embeddings", content=b"a", headers={"content-type": "text/plain"})
        missing_route = await c.get("/v1/nothing")
        predict = await c.post("/predict", json={"text": "a", "extra": 1})
    for r, status in ((schema, 400), (no_embeddings, 400), (bad_json, 400), (not_json, 415), (missing_route, 404)):
        assert r.status_code == status, r.text
        assert set(r.json()["error"]) == {"message", "type", "param", "code"}
        assert r.json()["error"]["type"] == "invalid_request_error"
    assert schema.json()["error"]["param"] == "extra"
    assert "/v2/models/tiny/infer" in no_embeddings.json()["error"]["message"]
    assert predict.status_code == 422 and predict.json()["error"]["code"] == "invalid_request"  # /predict unchanged


@pytest.mark.anyio
async def test_shedding_answers_503_in_the_openai_shape(echo_service):
    service = echo_service()
    service.begin_drain()
    async with client(create_app(service)) as c:
        r = await c.post("/v1/embeddings", json={"model": "tiny", "input": "a"})
    assert r.status_code == 503 and r.headers["retry-after"]
    assert r.json()["error"]["type"] == "server_error" and r.json()["error"]["code"] == "draining"
