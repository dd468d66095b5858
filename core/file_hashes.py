"""Content hashes of files, each file read once: the bytes behind a checkpoint's identity.

`content_hashes(paths)` is the SHA-256 of every byte of each file. A hash is remembered under the
file's key, (real path, size, mtime_ns, ctime_ns, inode, device), in this process (a dict) and
across processes (a small sqlite table, `$MARS_CACHE_DIR/file-hashes.sqlite`), so a second
identity of an unchanged multi-GB model reads no weight bytes: one stat per file. A file whose
size, times, inode or device differ from the remembered key is read and hashed again.

Why these fields. A write sets mtime and ctime; a rename of another file over the path, a copy
(even one that keeps mtime: `cp -p`, `rsync -t`) or a re-download gives another inode, and ctime
is set by the kernel to the current time on every change, `os.utime` included, so a file edited
and its mtime put back is still seen as changed. What stays out of reach: a write that leaves the
size and lands within the timestamps' granularity of the moment the hash was remembered. Linux
keeps times in nanoseconds (`st_mtime_ns`) but stamps them from a clock that ticks every few ms,
finer since 6.13 once a time has been read (multigrain timestamps on ext4, xfs, btrfs, tmpfs);
other filesystems stamp whole seconds (FAT two). So a file changed less than `RACY_WINDOW_NS`
(2 s) before its hash began is hashed but not remembered ("racy", as git calls it): any later write
stamps a later time. A file that changes while it is read is not remembered either. The gap left
is a clock set back, or two machines with skewed clocks writing one network folder.

The store is best effort: a cache folder that cannot be created, written or opened (or a file
there that is not sqlite) leaves only the in-process memo, with no message. sqlite makes each
write atomic and lets several processes share the file (a busy store is waited for a few seconds,
then left for the rest of the process). One row per path, replaced when the file changes, so
the table stays as small as the set of files ever fingerprinted.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from core.files import mars_cache_dir

ALGORITHM = "sha256"  # with SHA-NI: ~1.2 GB/s here, against ~0.7 GB/s for blake2b (1 GiB file)
CHUNK_BYTES = 8 << 20
STORE_FILE = "file-hashes.sqlite"
RACY_WINDOW_NS = 2_000_000_000
_BUSY_TIMEOUT_S = 5.0

# (size, mtime_ns, ctime_ns, inode, device) as text: an inode may not fit sqlite's signed 64 bits.
Key = tuple[str, str]  # (real path, stat fields)
_memo: dict[Key, str] = {}
_broken_stores: set[Path] = set()  # stores that failed once: not tried again in this process


def file_key(path: Path, stat: os.stat_result | None = None) -> Key:
    """What a remembered hash is valid for: the file's real path and its stat fields."""
    st = stat if stat is not None else os.stat(path)
    fields = f"{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}:{st.st_ino}:{st.st_dev}"
    return (os.path.realpath(path), fields)


def store_path() -> Path:
    return mars_cache_dir() / STORE_FILE


def forget_in_process() -> None:
    """Drop the in-process memo (the store is kept): a test's fresh start."""
    _memo.clear()
    _broken_stores.clear()


class _Store:
    """The persistent table. A failure (a store still busy after a few seconds, a disk full, a
    lock the filesystem refuses) is swallowed and turns the store off for this process: the
    caller then hashes, and no later call waits on it again."""

    def __init__(self, db: sqlite3.Connection | None, path: Path | None) -> None:
        self._db = db
        self._path = path

    def _failed(self) -> None:
        self._db = None
        if self._path is not None:
            _broken_stores.add(self._path)

    def get(self, key: Key) -> str | None:
        if self._db is None:
            return None
        try:
            row = self._db.execute(
                "SELECT digest FROM file_hashes WHERE path = ? AND stat = ? AND algorithm = ?",
                (*key, ALGORITHM),
            ).fetchone()
        except sqlite3.Error:
            self._failed()
            return None
        return str(row[0]) if row else None

    def put(self, key: Key, digest: str) -> None:
        if self._db is None:
            return
        try:
            self._db.execute(
                "INSERT OR REPLACE INTO file_hashes (path, stat, algorithm, digest) "
                "VALUES (?, ?, ?, ?)",
                (*key, ALGORITHM, digest),
            )
        except sqlite3.Error:
            self._failed()


@contextlib.contextmanager
def _open_store() -> Iterator[_Store]:
    try:
        path = store_path()
    except RuntimeError:  # no home folder to find ~/.cache in
        path = None
    db = None
    if path is not None and path not in _broken_stores:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(str(path), timeout=_BUSY_TIMEOUT_S, isolation_level=None)
            db.execute(
                "CREATE TABLE IF NOT EXISTS file_hashes (path TEXT PRIMARY KEY, stat TEXT NOT "
                "NULL, algorithm TEXT NOT NULL, digest TEXT NOT NULL)"
            )
        except (OSError, sqlite3.Error):
            if db is not None:
                db.close()
            db = None
            _broken_stores.add(path)
    try:
        yield _Store(db, path)
    finally:
        if db is not None:
            db.close()


def _hash_file(path: Path, started_ns: int) -> tuple[str, Key | None]:
    """The file's digest and the key to remember it under (None: racy or changed while read)."""
    buffer = bytearray(CHUNK_BYTES)
    view = memoryview(buffer)
    digest = hashlib.new(ALGORITHM)
    with open(path, "rb", buffering=0) as handle:
        before = os.fstat(handle.fileno())
        while read := handle.readinto(buffer):
            digest.update(view[:read])
        after = os.fstat(handle.fileno())
    key = file_key(path, before)
    settled = max(before.st_mtime_ns, before.st_ctime_ns) < started_ns - RACY_WINDOW_NS
    unchanged = file_key(path, after) == key == file_key(path)  # not written nor replaced
    return digest.hexdigest(), key if settled and unchanged else None


def content_hashes(paths: Iterable[Path]) -> dict[Path, str]:
    """Each file's content hash (hex), read only where no remembered hash fits its key."""
    started_ns = time.time_ns()
    hashes: dict[Path, str] = {}
    missing: list[Path] = []
    for path in paths:
        found = _memo.get(file_key(path))
        if found is None:
            missing.append(path)
        else:
            hashes[path] = found
    if not missing:
        return hashes
    with _open_store() as store:
        for path in missing:
            key = file_key(path)
            found = store.get(key)
            if found is not None:
                _memo[key] = hashes[path] = found
                continue
            digest, remember = _hash_file(path, started_ns)
            hashes[path] = digest
            if remember is not None:
                _memo[remember] = digest
                store.put(remember, digest)
    return hashes
