"""Read a safetensors file's header without loading its tensors.

The format (huggingface/safetensors): 8 bytes little-endian unsigned N, then N bytes of UTF-8 JSON
mapping each tensor name to ``{"dtype", "shape", "data_offsets": [begin, end]}`` (offsets relative
to the byte after the header), plus an optional ``"__metadata__"`` object of strings. The tensor
bytes follow. Only the header is read here, so a 26 GB checkpoint costs one small read.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import ConfigError

# Bytes per element of each safetensors dtype.
DTYPE_BYTES: dict[str, float] = {
    "F64": 8,
    "I64": 8,
    "U64": 8,
    "F32": 4,
    "I32": 4,
    "U32": 4,
    "F16": 2,
    "BF16": 2,
    "I16": 2,
    "U16": 2,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
    "F4": 0.5,
}
MAX_HEADER_BYTES = 100 * 1024 * 1024  # the reference implementation's own limit


@dataclass(frozen=True)
class TensorInfo:
    dtype: str
    shape: tuple[int, ...]

    @property
    def elements(self) -> int:
        return math.prod(self.shape)


def read_header(path: str | Path) -> dict[str, TensorInfo]:
    """Tensor name -> dtype and shape; a ConfigError naming the file if it is not a safetensors file."""
    path = Path(path)
    key = str(path)
    size = path.stat().st_size
    with path.open("rb") as handle:
        prefix = handle.read(8)
        if len(prefix) < 8:
            raise ConfigError(key, f"not a safetensors file: {size} bytes, shorter than the 8-byte header length")
        (length,) = struct.unpack("<Q", prefix)
        if length > MAX_HEADER_BYTES or 8 + length > size:
            raise ConfigError(key, f"not a safetensors file: header length {length} does not fit in {size} bytes")
        raw = handle.read(length)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ConfigError(key, f"not a safetensors file: the header is not JSON ({error})") from None
    if not isinstance(header, dict):
        raise ConfigError(key, "not a safetensors file: the header is not a JSON object")
    data_bytes = size - 8 - length
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (begin, end) = entry["dtype"], tuple(int(d) for d in entry["shape"]), entry["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise ConfigError(key, f"tensor {name!r}: expected dtype, shape and data_offsets") from None
        if dtype not in DTYPE_BYTES:
            raise ConfigError(key, f"tensor {name!r}: unknown dtype {dtype!r}")
        info = TensorInfo(dtype, shape)
        if not (0 <= begin <= end <= data_bytes) or end - begin != math.ceil(info.elements * DTYPE_BYTES[dtype]):
            raise ConfigError(
                key,
                f"tensor {name!r}: data_offsets {begin}..{end} do not match its shape {list(shape)} "
                f"and dtype {dtype} in a data section of {data_bytes} bytes (truncated file?)",
            )
        tensors[name] = info
    return tensors


def write_header_only(path: str | Path, tensors: dict[str, tuple[str, tuple[int, ...]]]) -> Path:
    """Write a valid safetensors file whose data section is a sparse hole (tests, worked examples):
    correct header and size, no real weights, no disk used."""
    path = Path(path)
    header, offset = {}, 0
    for name, (dtype, shape) in tensors.items():
        length = math.ceil(math.prod(shape) * DTYPE_BYTES[dtype])
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + length]}
        offset += length
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with path.open("wb") as handle:
        handle.write(struct.pack("<Q", len(raw)) + raw)
        handle.truncate(8 + len(raw) + offset)
    return path
