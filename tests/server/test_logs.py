"""Every line the server writes is one JSON object, uncaught exceptions included."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import threading
    from inference_server.logs import configure_logging

    configure_logging("INFO", {"model": "tiny", "model_version": "1"})

    def fail():
        raise ImportError("sys.meta_path is None, Python is likely shutting down")

    thread = threading.Thread(target=fail, name="preload")
    thread.start()
    thread.join()
    raise RuntimeError("the main thread gives up")
""")


def test_uncaught_exceptions_in_threads_and_the_main_thread_are_json_lines():
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    lines = [json.loads(line) for line in (result.stdout + result.stderr).splitlines()]  # plain text fails here
    thread_line, main_line = lines
    assert thread_line["message"] == "uncaught exception in a thread" and thread_line["thread_name"] == "preload"
    assert "sys.meta_path is None" in thread_line["exception"] and thread_line["model"] == "tiny"
    assert main_line["level"] == "CRITICAL" and "the main thread gives up" in main_line["exception"]
