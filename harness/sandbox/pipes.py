"""The parent's side of a run's pipes: stdin written in pieces as the pipe takes it, stdout and
stderr read with a cap (stdout kept, or handed to a sink: a batch's result frames)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator

from harness.sandbox.limits import SandboxLimits

DRAIN_CHUNK = 65536
STDIN_CHUNK_CHARS = 65536  # stdin is encoded and written this much at a time, never whole
WRITES_PER_WAKEUP = 16  # then the loop looks at the output again


def stdin_chunks(data: str | bytes) -> Iterator[bytes]:
    """`data` as UTF-8 in pieces: a 100 MB input never exists twice in memory."""
    if isinstance(data, str):
        for start in range(0, len(data), STDIN_CHUNK_CHARS):
            yield data[start : start + STDIN_CHUNK_CHARS].encode("utf-8", "replace")
    else:
        view = memoryview(data)
        for start in range(0, len(view), STDIN_CHUNK_CHARS):
            yield bytes(view[start : start + STDIN_CHUNK_CHARS])


class Feed:
    """What is left to write on the run's stdin, written as the pipe takes it."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self.chunks = iter(chunks)
        self.current = memoryview(b"")

    def write_some(self, fd: int) -> bool:
        """Write what the pipe takes now; False once everything is written or the reader is
        gone (the rest is dropped)."""
        for _ in range(WRITES_PER_WAKEUP):
            if not self.current:
                chunk = next(self.chunks, None)
                if chunk is None:
                    return False
                self.current = memoryview(chunk)
                continue
            try:
                written = os.write(fd, self.current)
            except BlockingIOError:
                return True
            except OSError:  # BrokenPipeError: the run closed its stdin or exited
                return False
            self.current = self.current[written:]
        return True


class Output:
    """stdout kept up to the limit, the tail of stderr, and whether the limit was passed."""

    def __init__(
        self,
        limits: SandboxLimits,
        limit: int | None = None,
        stdout_sink: Callable[[bytes], None] | None = None,
    ) -> None:
        self.limit = limits.output_bytes if limit is None else limit
        self.tail_bytes = limits.stderr_tail_bytes
        self.stdout_sink = stdout_sink  # takes stdout instead of keeping it (a batch's results)
        self.stdout = bytearray()
        self.stderr_tail = bytearray()
        self.total = 0
        self.stdout_truncated = False

    @property
    def over_limit(self) -> bool:
        return self.total > self.limit

    def add_stdout(self, data: bytes) -> None:
        if self.stdout_sink is not None:
            self.total += len(data)
            if not self.over_limit:
                self.stdout_sink(data)
            return
        room = max(0, self.limit - len(self.stdout))
        self.stdout += data[:room]
        self.stdout_truncated = self.stdout_truncated or len(data) > room
        self.total += len(data)

    def add_stderr(self, data: bytes) -> None:
        self.stderr_tail += data
        del self.stderr_tail[: max(0, len(self.stderr_tail) - self.tail_bytes)]
        self.total += len(data)


def read_nonblocking(fd: int) -> bytes | None:
    """Whatever is there now: b"" at end of file, None when nothing is ready yet."""
    try:
        return os.read(fd, DRAIN_CHUNK)
    except BlockingIOError:
        return None
