"""Dynamic-batching model server."""
