"""JSON-lines messages between the parent and its workers: one object per line each way.

Requests carry a "cmd" ("hello", "prepare", "time", "release", "quit"); replies carry "ok" and,
when false, "error". The parent reads with a deadline (select on the raw pipe), so a hung or
crashed worker becomes an error instead of a hung benchmark.
"""

from __future__ import annotations

import json
import os
import select
import time
from typing import IO


class ProtocolError(RuntimeError):
    """The peer closed the pipe, sent something that is not a JSON object, or timed out."""


def encode(message: dict) -> bytes:
    """One message as a line of compact JSON."""
    return (json.dumps(message, separators=(",", ":")) + "\n").encode()


def decode(line: bytes) -> dict:
    """One line back into a message."""
    try:
        message = json.loads(line)
    except json.JSONDecodeError as error:
        raise ProtocolError(f"not JSON: {line[:200]!r}") from error
    if not isinstance(message, dict):
        raise ProtocolError(f"not a JSON object: {line[:200]!r}")
    return message


def send(stream: IO[bytes], message: dict) -> None:
    """Writes and flushes one message (the peer waits for whole lines)."""
    stream.write(encode(message))
    stream.flush()


class LineReader:
    """Reads newline-terminated messages from a pipe's file descriptor with a deadline."""

    def __init__(self, fd: int):
        self._fd = fd
        self._buffer = b""

    def read(self, timeout_s: float) -> dict:
        """The next message.

        Raises:
          ProtocolError: end of file, a malformed line, or no full line within ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ProtocolError(f"no reply within {timeout_s:.0f} s")
            ready, _, _ = select.select([self._fd], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(self._fd, 1 << 16)
            if not chunk:
                raise ProtocolError("worker closed its pipe (exited)")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return decode(line)
