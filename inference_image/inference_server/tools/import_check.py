"""The image build's import check (`python -m inference_server.tools.import_check`): every module of the server (the
handlers and protocols included), the third-party modules its functions import only when called, and the image
codecs the image-classification task decodes. Exits non-zero naming what failed, so the build stops there and
not in a deployed task."""

from __future__ import annotations

import importlib
import pkgutil
import sys

# Imported inside functions (so a worker never loads torch, and the CPU path never loads NVML).
LAZY_IMPORTS = (
    "torch",
    "torch.export",
    "transformers",
    "tokenizers",
    "safetensors",
    "PIL.Image",
    "pynvml",
    "boto3",
    "botocore.config",
    "uvloop",
    "httptools",
)
IMAGE_CODECS = ("jpg", "zlib")  # JPEG, and PNG's deflate


def server_modules() -> list[str]:
    import inference_server

    return sorted(info.name for info in pkgutil.walk_packages(inference_server.__path__, "inference_server."))


def main() -> int:
    failures = []
    modules = server_modules()
    for name in [*modules, *LAZY_IMPORTS]:
        try:
            importlib.import_module(name)
        except Exception as exc:
            failures.append(f"{name}: {type(exc).__name__}: {exc}")
    from PIL import features

    failures += [f"Pillow has no {codec} support" for codec in IMAGE_CODECS if not features.check(codec)]
    import tarfile

    if not hasattr(tarfile, "data_filter"):  # Python 3.11.4+: the compile cache is unpacked with filter="data"
        failures.append(
            f"tarfile has no data filter (Python {sys.version.split()[0]}; 3.11.4 or later unpacks the "
            "compile cache safely)"
        )
    for failure in failures:
        print(f"import check: {failure}", file=sys.stderr)
    if not failures:
        print(f"import check: {len(modules)} server modules and {len(LAZY_IMPORTS)} libraries import")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
