"""An in-process LRU of predictions keyed by model version and a hash of the input."""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from typing import Any


class ResultCache:
    def __init__(self, max_entries: int, model_version: str) -> None:
        self.max_entries = max_entries
        self._prefix = model_version.encode() + b"\0"
        self._entries: OrderedDict[bytes, Any] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.max_entries > 0

    def __len__(self) -> int:
        return len(self._entries)

    def key(self, text: str | bytes) -> bytes:
        data = b"b" + text if isinstance(text, bytes) else b"s" + text.encode("utf-8", "surrogatepass")
        return hashlib.blake2b(self._prefix + data, digest_size=16).digest()

    def get(self, key: bytes) -> Any | None:
        with self._lock:
            value = self._entries.get(key)
            if value is not None:
                self._entries.move_to_end(key)
            return value

    def put(self, key: bytes, value: Any) -> None:
        if not self.enabled:
            return
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
