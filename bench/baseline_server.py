"""The baseline: a model server written the way most tutorials write one. FastAPI with a pydantic request model,
one model forward per request, no batching, the same uvicorn stack as ours (httptools + uvloop).
`python -m bench.baseline_server --port N --model DIR|null`."""

from __future__ import annotations

import uvicorn
from fastapi import FastAPI
from pydantic import BaseModel

from .models import load_model, server_parser


class PredictRequest(BaseModel):
    text: str


def create_app(model_spec: str, device: str, dtype: str, max_length: int) -> FastAPI:
    app = FastAPI()
    model = load_model(model_spec, device, dtype, max_length)

    @app.get("/ready")
    def ready() -> dict:
        return {"status": "ready"}

    # A plain `def`: FastAPI runs it in its thread pool, as its docs advise for blocking code.
    @app.post("/predict")
    def predict(request: PredictRequest) -> dict:
        return {"model": "bench", "version": "1", "prediction": model.predict([request.text])[0]}

    return app


def main() -> None:
    parser = server_parser(__doc__)
    args = parser.parse_args()
    app = create_app(args.model, args.device, args.dtype, args.max_length)
    uvicorn.run(
        app, host=args.host, port=args.port, loop="uvloop", http="httptools", access_log=False, log_level="warning"
    )


if __name__ == "__main__":
    main()
