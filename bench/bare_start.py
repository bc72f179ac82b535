"""The start-up peer: a bare script that imports torch and transformers, loads the model and runs one inference,
then exits. `python -m bench.bare_start --model DIR` prints one JSON object of its phases (seconds)."""

from __future__ import annotations

import argparse
import time

STARTED = time.monotonic()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", required=True)
    parser.add_argument("--max-length", type=int, default=128)
    args = parser.parse_args(argv)
    import torch  # noqa: F401
    import transformers  # noqa: F401

    imported = time.monotonic()
    from .models import Embedder

    model = Embedder(args.model, max_length=args.max_length)
    loaded = time.monotonic()
    embedding = model.embed(["hello world"])
    inferred = time.monotonic()
    import orjson

    print(
        orjson.dumps(
            {
                "imports_s": imported - STARTED,
                "load_s": loaded - imported,
                "inference_s": inferred - loaded,
                "dimensions": int(embedding.shape[1]),
            }
        ).decode()
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
