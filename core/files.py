"""The files mars keeps: one tolerant JSON Lines reader and one atomic writer for every command.

Reading: a JSONL file written by a process that can be killed may end with a line cut short, and
a user may have edited one by hand. Every reader therefore takes each non-blank line on its own:
a JSON object is a row, anything else (broken, cut short, another JSON value) is counted as
malformed, never fatal. Bytes that are not UTF-8 are replaced rather than refused. Lines are split
on `\\n` only: a record may hold a raw U+2028 (json.dumps with ensure_ascii=False writes one),
which `str.splitlines` would take for a line break.

Writing: `write_atomic` writes a temporary file beside the target and renames it over the target,
so a reader (or a crash) sees the old content or the new, never half of either. With `fsync` the
bytes reach the disk before the rename: used where the old file is the only copy of what it
replaces (a records file rewritten on resume).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def mars_cache_dir() -> Path:
    """Where mars keeps what it builds and downloads: `$MARS_CACHE_DIR` (an empty value counts as
    unset), else ~/.cache/mars."""
    root = os.environ.get("MARS_CACHE_DIR")
    return Path(root).expanduser() if root else Path.home() / ".cache" / "mars"


LOCKS_DIR = ".locks"


@contextlib.contextmanager
def build_lock(target: Path) -> Iterator[None]:
    """Hold an exclusive lock on building `target` (a cached model folder): a second process that
    wants the same folder waits here and then finds it built, instead of building it again beside
    the first (two test workers starting at once, two commands on one cache). The lock is a
    file in `.locks/` beside the target, kept (removing it would let a late process lock a new
    file while an early one still holds the old); the lock goes with a process that dies."""
    locks = target.parent / LOCKS_DIR
    locks.mkdir(parents=True, exist_ok=True)
    with open(locks / f"{target.name}.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def build_once(target: Path, is_current: Callable[[], bool], build: Callable[[], None]) -> Path:
    """`target`, built by `build()` unless `is_current()` already holds; the check is repeated
    under `build_lock`, so of several processes that find it missing only the first builds."""
    if not is_current():
        with build_lock(target):
            if not is_current():
                build()
    return target


@dataclass
class JsonlData:
    rows: list[dict[str, Any]] = field(default_factory=list)
    malformed: int = 0


def jsonl_slots(path: Path) -> list[dict[str, Any] | None]:
    """One slot per non-blank line of `path`, in order: the JSON object on it, or None."""
    slots: list[dict[str, Any] | None] = []
    loads = json.loads
    for line in Path(path).read_bytes().splitlines():
        if not line.strip():
            continue
        try:
            value = loads(line.decode("utf-8", "replace"))
        except ValueError:
            slots.append(None)
            continue
        slots.append(value if isinstance(value, dict) else None)
    return slots


def read_jsonl(path: Path) -> JsonlData:
    """Every JSON object line of `path` and how many other lines it has; a missing file is
    empty. Other errors (permissions, a directory) are raised: a caller that would rewrite the
    file must not take an unreadable one for an empty one."""
    try:
        slots = jsonl_slots(path)
    except FileNotFoundError:
        return JsonlData()
    rows = [slot for slot in slots if slot is not None]
    return JsonlData(rows=rows, malformed=len(slots) - len(rows))


def write_atomic(path: Path, text: str, *, fsync: bool = False) -> None:
    """Replace `path` with `text` in one step (a temporary file beside it, then a rename)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("w", encoding="utf-8") as handle:
            handle.write(text)
            if fsync:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_json_atomic(
    path: Path, payload: Any, *, sort_keys: bool = False, fsync: bool = False
) -> None:
    """`payload` as indented JSON (non-JSON values as their str), replacing `path` atomically."""
    text = json.dumps(payload, indent=2, ensure_ascii=False, default=str, sort_keys=sort_keys)
    write_atomic(path, text + "\n", fsync=fsync)


def jsonl_text(rows: Iterable[dict[str, Any]]) -> str:
    """Rows as JSON Lines, as every appender writes them."""
    return "".join(json.dumps(row, ensure_ascii=False, default=str) + "\n" for row in rows)


def write_jsonl_atomic(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    """Rewrite a JSONL file with `rows`, durably (it is the only copy of what it keeps)."""
    write_atomic(path, jsonl_text(rows), fsync=True)
