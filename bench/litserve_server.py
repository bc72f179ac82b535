"""The peer: LitServe (Lightning AI's open-source serving framework: FastAPI on uvicorn in front of inference
worker processes, dynamic batching with max_batch_size and batch_timeout), serving the same embedder as ours.
Installed in the bench's environment only (requirements-dev.txt), never in the image.
`python -m bench.litserve_server --port N --model DIR|null [--max-batch-size 32 --batch-timeout-ms 2]`.

BENCH_MODEL_CPUS (e.g. "0") pins the inference worker, where the model runs, to those CPUs; the API server keeps
the affinity it was started with."""

from __future__ import annotations

import os

import litserve as ls

from .models import load_model, server_parser


class EmbedAPI(ls.LitAPI):
    def __init__(
        self, model_spec: str, device: str, dtype: str, max_length: int, max_batch_size: int, batch_timeout_s: float
    ) -> None:
        super().__init__(max_batch_size=max_batch_size, batch_timeout=batch_timeout_s, api_path="/predict")
        self.model_spec, self.device_name, self.dtype, self.max_length = model_spec, device, dtype, max_length

    def setup(self, device) -> None:
        cpus = os.environ.get("BENCH_MODEL_CPUS")
        if cpus:
            os.sched_setaffinity(0, {int(c) for c in cpus.split(",")})
        self.model = load_model(self.model_spec, self.device_name, self.dtype, self.max_length)

    def decode_request(self, request: dict) -> str:
        return request["text"]

    def batch(self, inputs: list[str]) -> list[str]:
        return list(inputs)

    def predict(self, texts: list[str]) -> list:
        return self.model.predict(texts)

    def unbatch(self, outputs: list) -> list:
        return list(outputs)

    def encode_response(self, prediction) -> dict:
        return {"model": "bench", "version": "1", "prediction": prediction}


def main() -> None:
    parser = server_parser(__doc__)
    parser.add_argument("--max-batch-size", type=int, default=32)
    parser.add_argument("--batch-timeout-ms", type=float, default=2.0)
    args = parser.parse_args()
    api = EmbedAPI(
        args.model, args.device, args.dtype, args.max_length, args.max_batch_size, args.batch_timeout_ms / 1000
    )
    server = ls.LitServer(
        api,
        accelerator="cpu" if args.device == "cpu" else "cuda",
        devices=1,
        workers_per_device=1,
        timeout=30,
        healthcheck_path="/health",
    )
    server.run(host=args.host, port=args.port, num_api_servers=1, log_level="warning", generate_client_file=False)


if __name__ == "__main__":
    main()
