"""The supervisor: the first process (python -m inference_server), which starts, watches, restarts and stops the
model process and the HTTP workers; and each child's entry (children.py)."""
