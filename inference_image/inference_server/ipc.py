"""The link between an HTTP worker and the model process: small control frames over a Unix socket, array
payloads in shared memory; and the status page the model process writes for every worker to read.

Each direction of a link has its own ring: an anonymous shared-memory file (memfd: no name under /dev/shm, so
nothing is left behind when a process dies; the kernel frees it with the last mapping) with one producer and one
consumer. The producer copies a frame's arrays into the ring and sends a frame header naming where they are; the
consumer copies them out when the frame arrives and moves the ring's tail, so messages are consumed in order and
the ring never fragments. A frame whose arrays do not fit (the ring is full) carries them inline instead. Headers
are JSON (orjson); nothing is pickled. The messages themselves, each a type, and their headers: link_messages.py.

Frame: u32 length of the rest | u32 header length | header JSON | inline payload (may be empty).
"""

from __future__ import annotations

import mmap
import os
import socket
import struct
import threading
from collections.abc import Sequence
from enum import IntEnum
from typing import Any

import numpy as np
import orjson


class Slot(IntEnum):
    """The status page's counters."""

    STATE = 0  # a ModelState
    QUEUED = 1
    DRAINING = 2
    MODEL_PID = 3
    GPU_MEMORY_USED = 4  # bytes the model process holds on its GPU, as of its last metrics interval
    MODEL_BUSY = 5  # hundredths of a percent: its inference thread's time in forwards over that interval


class ModelState(IntEnum):
    LOADING = 0
    READY = 1
    FAILED = 2
    STOPPED = 3


_FRAME = struct.Struct("<II")
_ALIGN = 64
RING_HEADER = 64  # the consumer's tail counter lives here, on its own cache line
DEFAULT_RING_BYTES = 16 * 1024 * 1024


def _aligned(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def memfd(name: str, size: int) -> int:
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    os.ftruncate(fd, size)
    return fd


class ShmRing:
    """A single-producer, single-consumer byte ring in shared memory. Positions are absolute byte counts; the
    producer keeps its head locally, the consumer publishes its tail in the ring's header."""

    def __init__(self, fd: int) -> None:
        stat = os.fstat(fd)
        self.inode, total = stat.st_ino, stat.st_size
        self._map = mmap.mmap(fd, total)  # holds its own duplicate of fd: the caller may close fd
        self.size = total - RING_HEADER
        self._mem = memoryview(self._map)
        self._tail = self._mem[:8].cast("Q")
        self._data = self._mem[RING_HEADER : RING_HEADER + self.size]
        self._head = 0

    # producer

    def alloc(self, nbytes: int) -> int | None:
        """The absolute start of nbytes of contiguous space, or None when the ring has no room now."""
        n = _aligned(max(nbytes, 1))
        if n > self.size:
            return None
        pos = self._head % self.size
        start = self._head + (self.size - pos if pos + n > self.size else 0)
        if start + n - self._tail[0] > self.size:
            return None
        self._head = start + n
        return start

    @property
    def head(self) -> int:
        return self._head

    def view(self, start: int, nbytes: int) -> memoryview:
        pos = start % self.size
        return self._data[pos : pos + nbytes]

    # consumer

    def release(self, end: int) -> None:
        self._tail[0] = end

    @property
    def closed(self) -> bool:
        return self._map.closed

    def close(self) -> None:
        """Unmap the ring (the memory is freed with the last mapping or memfd of it in any process)."""
        for view in (self._tail, self._data, self._mem):
            view.release()
        self._map.close()


def _layout(arrays: Sequence[np.ndarray]) -> tuple[list[list[Any]], int]:
    specs, offset = [], 0
    for array in arrays:
        specs.append([array.dtype.str, list(array.shape), offset])
        offset += (array.nbytes + 7) // 8 * 8
    return specs, offset


def _write(dest: memoryview, specs: list[list[Any]], arrays: Sequence[np.ndarray]) -> None:
    for (_, _, offset), array in zip(specs, arrays, strict=False):
        if array.nbytes:
            np.frombuffer(dest, dtype=np.uint8, count=array.nbytes, offset=offset)[:] = (
                np.ascontiguousarray(array).reshape(-1).view(np.uint8)
            )


def _read(src: memoryview | bytes, specs: list[list[Any]]) -> list[np.ndarray]:
    arrays = []
    for dtype, shape, offset in specs:
        dt = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        arrays.append(np.frombuffer(src, dtype=dt, count=count, offset=offset).reshape(shape).copy())
    return arrays


class Channel:
    """One end of a link: encodes frames with arrays into `out_ring` (or inline) and decodes frames whose arrays
    are in `in_ring`. Sending is thread-safe; decoding belongs to the one thread that reads the socket. The channel
    owns its socket and its mappings of the two rings: closing it releases all three."""

    def __init__(self, sock: socket.socket, out_ring: ShmRing, in_ring: ShmRing) -> None:
        self.sock, self.out_ring, self.in_ring = sock, out_ring, in_ring
        self._send_lock = threading.Lock()
        self._decode_lock = threading.Lock()
        self._buffer = bytearray()
        self.closed = False

    def send(self, header: dict[str, Any], arrays: Sequence[np.ndarray] = ()) -> None:
        with self._send_lock:
            if self.closed:
                raise BrokenPipeError("the link is closed")
            payload = b""
            if arrays:
                specs, nbytes = _layout(arrays)
                start = self.out_ring.alloc(nbytes)
                if start is not None:
                    _write(self.out_ring.view(start, nbytes), specs, arrays)
                    header["ring"] = [start, self.out_ring.head]
                else:
                    inline = bytearray(nbytes)
                    _write(memoryview(inline), specs, arrays)
                    payload = bytes(inline)
                header["arrays"] = specs
            head = orjson.dumps(header)
            self.sock.sendall(_FRAME.pack(4 + len(head) + len(payload), len(head)) + head + payload)

    def decode(self, frame: memoryview) -> tuple[dict[str, Any], list[np.ndarray]]:
        (head_len,) = struct.unpack_from("<I", frame, 0)
        header = orjson.loads(frame[4 : 4 + head_len])
        specs = header.get("arrays")
        if not specs:
            return header, []
        ring = header.get("ring")
        if ring is None:
            return header, _read(frame[4 + head_len :], specs)
        start, end = ring
        with self._decode_lock:
            if self.closed:
                raise ConnectionAbortedError("the link is closed")
            arrays = _read(self.in_ring.view(start, end - start), specs)
            self.in_ring.release(end)
        return header, arrays

    def receive_available(self) -> list[tuple[dict[str, Any], list[np.ndarray]]] | None:
        """One recv (call when the socket is readable): the frames completed by it; None when the other end
        closed."""
        try:
            chunk = self.sock.recv(1 << 20)
        except BlockingIOError:
            return []
        except OSError:
            chunk = b""
        if not chunk:
            return None
        self._buffer += chunk
        return self._frames()

    def receive(self) -> list[tuple[dict[str, Any], list[np.ndarray]]]:
        """Block until at least one frame arrived; [] when the other end closed."""
        while True:
            frames = self._frames()
            if frames:
                return frames
            try:
                chunk = self.sock.recv(1 << 20)
            except OSError:
                chunk = b""
            if not chunk:
                return []
            self._buffer += chunk

    def _frames(self) -> list[tuple[dict[str, Any], list[np.ndarray]]]:
        frames, offset, buffer = [], 0, self._buffer
        view = memoryview(buffer)
        try:
            while len(buffer) - offset >= 4:
                (length,) = struct.unpack_from("<I", buffer, offset)
                if len(buffer) - offset - 4 < length:
                    break
                frames.append(self.decode(view[offset + 4 : offset + 4 + length]))
                offset += 4 + length
        except ConnectionAbortedError:  # closed meanwhile: the rest is never read
            offset = len(buffer)
        finally:
            view.release()
        if offset:
            del buffer[:offset]
        return frames

    def close(self) -> None:
        try:  # first, so that a send blocked on a full socket fails and lets go of its lock
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        with self._send_lock, self._decode_lock:  # no array is being copied into or out of a ring
            if self.closed:
                return
            self.closed = True
            self.sock.close()
            self.out_ring.close()
            self.in_ring.close()


class StatusPage:
    """A few counters every process of the server can read without a message (shared memory)."""

    TABLE = 16  # from here on: the model's measured batch times (admission.BatchTimes)
    _SIZE = 4096

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._map = mmap.mmap(fd, self._SIZE)
        self._values = memoryview(self._map).cast("q")

    @classmethod
    def create(cls) -> StatusPage:
        return cls(memfd("inference-status", cls._SIZE))

    def get(self, index: int) -> int:
        return self._values[index]

    @property
    def table(self) -> memoryview:
        """The slots after the counters, as int64: the batch-time table both sides share."""
        return self._values[self.TABLE :]

    def set(self, index: int, value: int) -> None:
        self._values[index] = value

    @property
    def state(self) -> int:
        return self._values[Slot.STATE]

    @property
    def queued(self) -> int:
        return self._values[Slot.QUEUED]

    @property
    def draining(self) -> bool:
        return bool(self._values[Slot.DRAINING])

    @property
    def gpu_memory_used_mib(self) -> float:
        return self._values[Slot.GPU_MEMORY_USED] / (1 << 20)

    @property
    def model_busy_percent(self) -> float:
        return self._values[Slot.MODEL_BUSY] / 100

    def publish_model_figures(self, gpu_memory_used_bytes: int, busy_percent: float) -> None:
        self._values[Slot.GPU_MEMORY_USED] = gpu_memory_used_bytes
        self._values[Slot.MODEL_BUSY] = round(busy_percent * 100)


class LinkEnds:
    """A new link before it is handed to its two processes: a socket pair and the two rings' memfds (not mapped
    here: each Channel maps its own)."""

    def __init__(self, ring_bytes: int = DEFAULT_RING_BYTES) -> None:
        self.worker_sock, self.model_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.requests_fd = memfd("inference-requests", RING_HEADER + ring_bytes)  # worker -> model
        self.responses_fd = memfd("inference-responses", RING_HEADER + ring_bytes)  # model -> worker

    def worker_channel(self) -> Channel:
        return Channel(self.worker_sock, ShmRing(self.requests_fd), ShmRing(self.responses_fd))

    def model_channel(self) -> Channel:
        return Channel(self.model_sock, ShmRing(self.responses_fd), ShmRing(self.requests_fd))

    def close_ring_fds(self) -> None:
        """Once every end is mapped or handed over (a mapping keeps the memory; the last one frees it)."""
        os.close(self.requests_fd)
        os.close(self.responses_fd)
