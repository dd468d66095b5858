"""One writer per run folder: an exclusive `flock` on `.writer.lock` inside it (run-format.md)."""

from __future__ import annotations

import datetime as dt
import fcntl
import os
import socket
import sys
from pathlib import Path
from typing import TextIO

from core.errors import MarsError

WRITER_LOCK = ".writer.lock"


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


class WriterLock:
    """The one writer of a run directory: an exclusive `flock` on `.writer.lock` inside it,
    held by the running command, with its pid, host and command line written in the file.

    A second writer is refused in one line naming the holder. The kernel drops a lock whose
    process died, so a lock left by a killed command is simply taken (and said so, since its
    file still names the dead holder). Released by `release`, which removes the file; a
    writer that locked a file removed meanwhile notices (the path no longer names the inode it
    locked) and tries again, so two writers never hold two files of one run.
    """

    ATTEMPTS = 20

    def __init__(self, folder: Path) -> None:
        self.path = Path(folder) / WRITER_LOCK
        self.handle: TextIO | None = None
        self.took_over: str | None = None  # the dead holder's line, when there was one

    def acquire(self) -> WriterLock:
        for _ in range(self.ATTEMPTS):
            handle = self.path.open("a+", encoding="utf-8")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.seek(0)
                holder = handle.read().strip() or "another process"
                handle.close()
                raise MarsError(
                    f"{self.path.parent} is being written by {holder}; wait for it to finish "
                    "or stop it, or give another --run-dir"
                ) from None
            if self._still_ours(handle):
                break
            handle.close()  # released and removed between our open and our lock: again
        else:
            raise MarsError(f"could not lock {self.path} (it keeps being replaced)")
        handle.seek(0)
        previous = handle.read().strip()
        self.took_over = previous or None
        handle.seek(0)
        handle.truncate()
        command = " ".join(["mars", *sys.argv[1:]])[:200]
        handle.write(f"pid {os.getpid()} on {socket.gethostname()} ({command}) since {_now()}\n")
        handle.flush()
        self.handle = handle
        return self

    @classmethod
    def holder(cls, folder: Path) -> str | None:
        """Who is writing `folder` now (the lock file's line), or None when no one is; takes
        nothing and creates nothing."""
        path = Path(folder) / WRITER_LOCK
        try:
            handle = path.open("r", encoding="utf-8")
        except OSError:
            return None
        with handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return handle.read().strip() or "another process"
            fcntl.flock(handle, fcntl.LOCK_UN)
            return None

    def _still_ours(self, handle: TextIO) -> bool:
        try:
            return os.stat(self.path).st_ino == os.fstat(handle.fileno()).st_ino
        except FileNotFoundError:
            return False

    def release(self) -> None:
        if self.handle is None:
            return
        if self._still_ours(self.handle):
            self.path.unlink(missing_ok=True)
        self.handle.close()
        self.handle = None
