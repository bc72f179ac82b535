"""Dynamic-batching model server: a supervisor, HTTP worker processes (a raw ASGI front door on uvicorn, FastAPI
for the rest of the API) and one model process that owns the device, linked by ipc (control frames over Unix
sockets, arrays in shared memory)."""

__version__ = "0.1.0"
