"""The ceiling: the raw model's batched throughput in-process (tokenise, forward, pool; no server), swept over
batch sizes. Run in its own process with the same thread settings as the servers:
`python -m bench.raw_model --model DIR --batch-sizes 1,8,32 --duration 3` prints one JSON object."""

from __future__ import annotations

import argparse
import sys
import time

import orjson

from .texts import make_texts


def sweep(model, texts: list[str], batch_sizes: list[int], duration_s: float) -> dict[int, float]:
    """Texts per second at each batch size, cycling through `texts`."""
    results = {}
    for size in batch_sizes:
        batches = [(texts * 2)[start : start + size] for start in range(0, len(texts), size)]
        model.embed(batches[0])  # first call at this shape allocates
        done, i, started = 0, 0, time.perf_counter()
        while (elapsed := time.perf_counter() - started) < duration_s or done == 0:
            model.embed(batches[i % len(batches)])
            done, i = done + size, i + 1
        results[size] = done / elapsed
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", required=True, help="a Hugging Face model directory")
    parser.add_argument("--batch-sizes", required=True)
    parser.add_argument("--duration", type=float, default=3.0)
    parser.add_argument("--texts", type=int, default=512)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="fp32", choices=("fp32", "fp16"))
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--compile", action="store_true", help="torch.compile the model (dynamic shapes)")
    parser.add_argument("--same-text", action="store_true", help="every input is the benchmark's one text")
    args = parser.parse_args(argv)
    import torch

    from .models import Embedder

    model = Embedder(args.model, args.device, args.dtype, args.max_length, args.compile)
    sizes = [int(s) for s in args.batch_sizes.split(",")]
    from .config import SAME_TEXT

    texts = [SAME_TEXT] * args.texts if args.same_text else make_texts(args.texts)
    rates = sweep(model, texts, sizes, args.duration)
    best = max(rates, key=rates.__getitem__)
    longest = max(len(ids) for ids in model.tokenizer(sorted(set(texts)))["input_ids"])
    sys.stdout.write(
        orjson.dumps(
            {
                "items_per_s": {str(k): v for k, v in rates.items()},
                "best_batch_size": best,
                "longest_text_tokens": longest,
                "best_items_per_s": rates[best],
                "torch_threads": torch.get_num_threads(),
                "torch_interop_threads": torch.get_num_interop_threads(),
            }
        ).decode()
        + "\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
