"""Dynamic-batching model server. Its code is packaged by the process it runs in (docs/server.md, "Where the code
runs"): supervisor/ starts and owns the child processes; front/ is the HTTP worker processes (a raw ASGI front door
on uvicorn, FastAPI for the rest of the API); engine/ is the one model process that owns the device; handlers/ is
the handler contract and the built-in handlers, loaded in both; tools/ runs offline (publish's conversion, the
image build's import check). The modules at the top are shared leaves (settings, facts, the link between front and
engine in ipc, ...) and the commands (python -m inference_server, .publish, .healthcheck) and .testing."""

__version__ = "0.1.0"
