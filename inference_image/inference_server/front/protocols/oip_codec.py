"""The Open Inference Protocol's inference request and response bodies: JSON tensors, and the binary tensor data
extension (a JSON header of Inference-Header-Content-Length bytes, then the raw tensor bytes in input order).

Every bound is checked before anything is allocated from a declared size: a shape is refused when it declares more
elements than the body has bytes, binary sizes must match the shape exactly and add up to the body, and BYTES
lengths must lie inside their tensor. Any violation raises TensorError (a 400), never a 500 or a huge allocation.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from ...tensor_spec import DATATYPES

MAX_RANK = 8
MAX_TENSORS = 64
_LENGTH = struct.Struct("<I")


class TensorError(ValueError):
    """A malformed inference request: the client's error."""


@dataclass
class Tensor:
    name: str
    datatype: str
    shape: tuple[int, ...]
    data: np.ndarray  # shaped; BYTES as an object array of bytes


@dataclass
class RequestedOutput:
    name: str
    binary: bool | None  # None: the request-level default


@dataclass
class InferRequest:
    id: str | None
    inputs: list[Tensor]
    outputs: list[RequestedOutput] | None  # None: every output
    binary_output: bool = False  # the request-level default (parameters.binary_data_output)
    parameters: dict[str, Any] = field(default_factory=dict)


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise TensorError(message)


def _object(doc: Any, where: str, allowed: set[str], required: frozenset[str] | set[str] = frozenset()) -> dict:
    _require(isinstance(doc, dict), f"{where} must be a JSON object")
    unknown = sorted(doc.keys() - allowed)
    _require(not unknown, f"{where}: unknown field(s) {', '.join(unknown)}")
    missing = sorted(required - doc.keys())
    _require(not missing, f"{where}: missing field(s) {', '.join(missing)}")
    return doc


def _parameters(doc: Any, where: str) -> dict[str, Any]:
    if doc is None:
        return {}
    _require(isinstance(doc, dict), f"{where}.parameters must be a JSON object")
    return doc


def _shape(value: Any, where: str, budget: int) -> tuple[tuple[int, ...], int]:
    _require(
        isinstance(value, list) and len(value) <= MAX_RANK and all(type(d) is int and d >= 0 for d in value),
        f"{where}.shape must be a list of at most {MAX_RANK} non-negative integers",
    )
    count = math.prod(value)  # Python ints: no overflow
    _require(
        count <= budget, f"{where}.shape {value} declares {count} elements, more than the request can carry ({budget})"
    )
    return tuple(value), count


def _flatten_strings(data: Any, count: int, where: str) -> list[bytes]:
    flat: list[bytes] = []
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(reversed(item))
        elif isinstance(item, str):
            flat.append(item.encode("utf-8", "surrogatepass"))
            _require(len(flat) <= count, f"{where}: more data elements than the shape declares ({count})")
        else:
            raise TensorError(f"{where}: BYTES data must be strings")
    return flat


def _json_data(data: Any, datatype: str, shape: tuple[int, ...], count: int, where: str) -> np.ndarray:
    _require(isinstance(data, list), f"{where}.data must be a list")
    if datatype == "BYTES":
        flat = _flatten_strings(data, count, where)
        _require(len(flat) == count, f"{where}: {len(flat)} data elements for shape {list(shape)} ({count})")
        array = np.empty(count, dtype=object)
        array[:] = flat
        return array.reshape(shape)
    try:
        array = np.array(data)
    except (ValueError, TypeError, OverflowError):
        raise TensorError(f"{where}.data is ragged or not numbers") from None
    _require(array.size == count, f"{where}: {array.size} data elements for shape {list(shape)} ({count})")
    dtype = DATATYPES[datatype]
    kind = array.dtype.kind
    if datatype == "BOOL":
        _require(kind == "b" or array.size == 0, f"{where}: BOOL data must be true or false")
    elif dtype.kind in "iu":
        _require(kind in "iu" or array.size == 0, f"{where}: {datatype} data must be integers")
        if array.size:
            info = np.iinfo(dtype)
            _require(
                int(array.min()) >= info.min and int(array.max()) <= info.max,
                f"{where}: a value is out of range for {datatype}",
            )
    else:
        _require(kind in "iuf" or array.size == 0, f"{where}: {datatype} data must be numbers")
    return array.astype(dtype).reshape(shape)


def _binary_bytes(raw: memoryview, count: int, where: str) -> np.ndarray:
    """BYTES in the binary extension: each element a 4-byte little-endian length, then that many bytes."""
    items: list[bytes] = []
    offset, end = 0, len(raw)
    while offset < end:
        _require(len(items) < count, f"{where}: more BYTES elements than the shape declares ({count})")
        _require(offset + 4 <= end, f"{where}: truncated BYTES length prefix")
        (length,) = _LENGTH.unpack_from(raw, offset)
        offset += 4
        _require(offset + length <= end, f"{where}: a BYTES element of {length} bytes runs past its tensor data")
        items.append(bytes(raw[offset : offset + length]))
        offset += length
    _require(len(items) == count, f"{where}: {len(items)} BYTES elements for {count} declared")
    array = np.empty(count, dtype=object)
    array[:] = items
    return array


def decode_request(body: bytes, header_length: int | None) -> InferRequest:
    """The inference request in body; header_length is the Inference-Header-Content-Length (None: all JSON)."""
    if header_length is None:
        header, binary = body, memoryview(b"")
    else:
        _require(
            0 < header_length <= len(body),
            f"Inference-Header-Content-Length {header_length} is outside the body of {len(body)} bytes",
        )
        header, binary = body[:header_length], memoryview(body)[header_length:]
    try:
        doc = orjson.loads(header)
    except orjson.JSONDecodeError as exc:
        raise TensorError(f"the request header is not valid JSON: {exc}") from None
    _object(doc, "the request", {"id", "inputs", "outputs", "parameters"}, {"inputs"})
    request_id = doc.get("id")
    _require(
        request_id is None or (isinstance(request_id, str) and len(request_id) <= 256),
        "id must be a string of at most 256 characters",
    )
    parameters = _parameters(doc.get("parameters"), "the request")
    binary_output = parameters.get("binary_data_output", False)
    _require(type(binary_output) is bool, "parameters.binary_data_output must be true or false")
    inputs_doc = doc["inputs"]
    _require(
        isinstance(inputs_doc, list) and 0 < len(inputs_doc) <= MAX_TENSORS,
        f"inputs must be a list of 1 to {MAX_TENSORS} tensors",
    )
    budget = len(body)  # no element takes less than one byte on the wire
    inputs, offset = [], 0
    for i, item in enumerate(inputs_doc):
        where = f"inputs[{i}]"
        _object(item, where, {"name", "shape", "datatype", "parameters", "data"}, {"name", "shape", "datatype"})
        name, datatype = item["name"], item["datatype"]
        _require(isinstance(name, str) and bool(name), f"{where}.name must be a non-empty string")
        where = f"input {name!r}"
        _require(
            datatype in DATATYPES, f"{where}: unsupported datatype {datatype!r}; use one of {', '.join(DATATYPES)}"
        )
        shape, count = _shape(item["shape"], where, budget)
        size = _parameters(item.get("parameters"), where).get("binary_data_size")
        if size is None:
            _require("data" in item, f"{where}: give data, or parameters.binary_data_size with binary data")
            data = _json_data(item["data"], datatype, shape, count, where)
        else:
            _require("data" not in item, f"{where}: give data or binary_data_size, not both")
            _require(
                header_length is not None, f"{where}: binary_data_size needs an Inference-Header-Content-Length header"
            )
            _require(type(size) is int and size >= 0, f"{where}: binary_data_size must be a non-negative integer")
            _require(
                offset + size <= len(binary),
                f"{where}: binary data truncated ({len(binary) - offset} of {size} bytes left)",
            )
            raw = binary[offset : offset + size]
            offset += size
            if datatype == "BYTES":
                data = _binary_bytes(raw, count, where).reshape(shape)
            else:
                dtype = DATATYPES[datatype]
                _require(
                    size == count * dtype.itemsize,
                    f"{where}: binary_data_size {size} != {count} elements x "
                    f"{dtype.itemsize} bytes for {datatype} {list(shape)}",
                )
                data = np.frombuffer(raw, dtype=dtype).reshape(shape)
        inputs.append(Tensor(name, datatype, shape, data))
    names = [t.name for t in inputs]
    _require(len(set(names)) == len(names), f"input names must be unique, got {names}")
    _require(offset == len(binary), f"{len(binary) - offset} bytes of binary data are not claimed by any input")
    return InferRequest(request_id, inputs, _requested_outputs(doc.get("outputs")), binary_output, parameters)


def _requested_outputs(doc: Any) -> list[RequestedOutput] | None:
    if doc is None:
        return None
    _require(isinstance(doc, list) and len(doc) <= MAX_TENSORS, f"outputs must be a list of at most {MAX_TENSORS}")
    outputs = []
    for i, item in enumerate(doc):
        _object(item, f"outputs[{i}]", {"name", "parameters"}, {"name"})
        _require(isinstance(item["name"], str), f"outputs[{i}].name must be a string")
        parameters = _parameters(item.get("parameters"), f"outputs[{i}]")
        binary = parameters.get("binary_data")
        _require(binary is None or type(binary) is bool, f"outputs[{i}].parameters.binary_data must be true or false")
        _require(
            not parameters.get("classification"),
            "the classification extension is not supported; request the labels output",
        )
        outputs.append(RequestedOutput(item["name"], binary))
    return outputs


def _json_elements(array: np.ndarray, datatype: str) -> list[Any]:
    flat = array.reshape(-1)
    if datatype == "BYTES":
        try:
            return [bytes(v).decode("utf-8") for v in flat]
        except UnicodeDecodeError:
            raise TensorError("a BYTES output is not UTF-8; request it as binary_data") from None
    return flat.tolist()


def _binary_elements(array: np.ndarray, datatype: str) -> bytes:
    if datatype == "BYTES":
        return b"".join(_LENGTH.pack(len(v)) + bytes(v) for v in array.reshape(-1))
    return np.ascontiguousarray(array, dtype=DATATYPES[datatype]).tobytes()


def encode_response(
    model_name: str, model_version: str, request_id: str | None, outputs: list[Tensor], binary: set[str]
) -> tuple[bytes, int | None]:
    """(body, header length): the header length is None when no output is binary (a plain JSON body)."""
    doc: dict[str, Any] = {"model_name": model_name, "model_version": model_version}
    if request_id is not None:
        doc["id"] = request_id
    tensors, chunks = [], []
    for tensor in outputs:
        entry: dict[str, Any] = {"name": tensor.name, "datatype": tensor.datatype, "shape": list(tensor.shape)}
        if tensor.name in binary:
            chunk = _binary_elements(tensor.data, tensor.datatype)
            entry["parameters"] = {"binary_data_size": len(chunk)}
            chunks.append(chunk)
        else:
            entry["data"] = _json_elements(tensor.data, tensor.datatype)
        tensors.append(entry)
    doc["outputs"] = tensors
    header = orjson.dumps(doc)
    if not chunks:
        return header, None
    return b"".join([header, *chunks]), len(header)
