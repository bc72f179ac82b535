"""The image-classification task: JPEG or PNG bytes in, the top-k labels out, on a torch.export classifier whose
preprocessing (resize, centre crop, mean/std) and labels are declared in model.json.

Images are decoded with Pillow, JPEG and PNG only. The pixel count is checked from the header before any pixel is
decoded, so a decompression bomb costs nothing; every decode error is the client's (InputError, a 4xx).
"""

from __future__ import annotations

import io
import warnings
from typing import Any

import numpy as np

from ..inputs import Encoded, InputError
from ..tensor_spec import Signature, TensorSpec
from .base import LoadContext
from .declaration import ImagePreprocessing
from .export import TorchExportHandler

FORMATS = ("JPEG", "PNG")


def decode_image(data: bytes, prep: ImagePreprocessing) -> np.ndarray:
    """data as a normalised float32 array of shape (3, crop, crop). Raises InputError for anything but a
    well-formed JPEG or PNG within prep.max_pixels."""
    from PIL import Image, UnidentifiedImageError

    if not isinstance(data, bytes) or not data:
        raise InputError("expected the bytes of a JPEG or PNG image")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data), formats=FORMATS) as image:
                width, height = image.size
                if width * height > prep.max_pixels:
                    raise InputError(f"the image is {width}x{height} pixels, over the limit of {prep.max_pixels}")
                scale = prep.resize / min(width, height)
                size = (max(prep.crop, round(width * scale)), max(prep.crop, round(height * scale)))
                if image.format == "JPEG":
                    image.draft("RGB", size)  # decode at a reduced scale where the target allows
                rgb = image.convert("RGB").resize(size, Image.Resampling.BILINEAR, reducing_gap=3.0)
    except InputError:
        raise
    except UnidentifiedImageError:
        raise InputError(f"not a {' or '.join(FORMATS)} image") from None
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise InputError(f"the image is over the limit of {prep.max_pixels} pixels") from None
    except (OSError, ValueError, SyntaxError, EOFError, MemoryError, IndexError, TypeError) as exc:
        raise InputError(f"cannot decode the image: {exc}") from None
    left, top = (size[0] - prep.crop) // 2, (size[1] - prep.crop) // 2
    cropped = np.asarray(rgb.crop((left, top, left + prep.crop, top + prep.crop)), dtype=np.float32)
    normalised = (cropped / 255.0 - np.asarray(prep.mean, np.float32)) / np.asarray(prep.std, np.float32)
    return np.ascontiguousarray(normalised.transpose(2, 0, 1))


def probe_image(size: int = 8) -> bytes:
    """A small PNG, for the readiness probe."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (size, size), (128, 64, 32)).save(buffer, format="PNG")
    return buffer.getvalue()


class ImageClassificationHandler(TorchExportHandler):
    input_kind = "bytes"
    image = True
    slow_preprocess = True  # a 16-megapixel PNG of 57 KiB takes 0.25 s to decode

    def load_preprocessing(self, ctx: LoadContext) -> None:
        super().load_preprocessing(ctx)
        self.prep: ImagePreprocessing = self.declaration.image  # type: ignore[assignment]
        self._pixels = self._inputs[0]
        self._probe = probe_image()

    def signature(self) -> Signature:
        k = self.prep.top_k
        return Signature(
            inputs=(TensorSpec("image", "BYTES", (-1,)),),
            outputs=(TensorSpec("labels", "BYTES", (-1, k)), TensorSpec("scores", "FP32", (-1, k))),
            platform="pytorch_torch_export",
        )

    def preprocess(self, inputs: list[Any]) -> list[Encoded]:
        name, dtype = self._pixels.name, self._pixels.dtype
        return [Encoded(1, {name: decode_image(data, self.prep).astype(dtype, copy=False)}) for data in inputs]

    def probe_input(self) -> Any:
        return self._probe

    def warmup_input(self, seq_len: int) -> Encoded:
        return Encoded(1, {self._pixels.name: np.zeros(self._pixels.row_shape, dtype=self._pixels.dtype)})

    def postprocess(self, outputs: dict[str, np.ndarray], count: int) -> list[dict[str, Any]]:
        scores = outputs[self._outputs[0].name][:count].astype(np.float32)
        if self.prep.softmax:
            scores = np.exp(scores - scores.max(axis=1, keepdims=True))
            scores /= scores.sum(axis=1, keepdims=True)
        top = np.argsort(-scores, axis=1, kind="stable")[:, : self.prep.top_k]
        labels = self.prep.labels
        return [{"labels": [labels[i] for i in row], "scores": scores[r, row].copy()} for r, row in enumerate(top)]

    def to_tensors(self, predictions: list[Any]) -> dict[str, np.ndarray]:
        labels = np.array([[label.encode() for label in p["labels"]] for p in predictions], dtype=object)
        return {"labels": labels, "scores": np.stack([p["scores"] for p in predictions]).astype(np.float32)}
