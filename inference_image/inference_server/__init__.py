"""Dynamic-batching model server: FastAPI on uvicorn in front of one inference thread."""

__version__ = "0.1.0"
