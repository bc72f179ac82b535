"""What a server's log costs per successful request at one load level.

Two kinds of lines: those the requests cause (our access log: errors, slow requests, a sample of the rest) and
the per-interval metric documents (EMF), which every process writes once per METRICS_INTERVAL_S whatever the
load. A level's window (a second in the --short run) either misses every document or carries a whole interval's,
so a level is charged the documents' steady rate over its window instead: each process's largest document (an
upper bound: under load its distributions are fullest) once per interval. Over a window of many intervals the
two agree."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import orjson


def _is_interval_document(line: bytes) -> tuple[bool, int | None]:
    """(an EMF metrics document?, the pid that wrote it)."""
    if b'"_aws"' not in line:
        return False, None
    try:
        entry = orjson.loads(line)
    except orjson.JSONDecodeError:
        return False, None
    if not isinstance(entry, dict):
        return False, None
    return "_aws" in entry, entry.get("pid")


def _lines(log_path: Path, start: int = 0, end: int | None = None) -> list[bytes]:
    with log_path.open("rb") as log:
        log.seek(start)
        return log.read(None if end is None else end - start).splitlines(keepends=True)


def request_line_bytes(log_path: Path, start: int, end: int) -> int:
    """Bytes between two offsets of the log, less the interval documents."""
    return sum(len(line) for line in _lines(log_path, start, end) if not _is_interval_document(line)[0])


def longest_request_line(log_path: Path, start: int, end: int) -> int:
    """The longest line between two offsets that is not an interval document (0 if none)."""
    return max((len(line) for line in _lines(log_path, start, end) if not _is_interval_document(line)[0]), default=0)


def interval_bytes_per_s(log_path: Path, interval_s: float) -> float:
    """The steady rate of the interval documents: each process's largest, once per interval."""
    largest: dict[int | None, int] = {}
    for line in _lines(log_path):
        document, pid = _is_interval_document(line)
        if document:
            largest[pid] = max(largest.get(pid, 0), len(line))
    return sum(largest.values()) / interval_s


@dataclass(frozen=True)
class LevelLog:
    """Where one load level's log lines are: offsets into the server's log, and the level's seconds."""

    start: int
    end: int
    seconds: float
    requests: int

    def bytes_per_request(self, log_path: Path, interval_rate: float) -> float | None:
        if not self.requests:
            return None
        return (request_line_bytes(log_path, self.start, self.end) + interval_rate * self.seconds) / self.requests
