"""core.files: the one tolerant JSONL reader and the one atomic writer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from core.files import (
    jsonl_slots,
    read_jsonl,
    write_atomic,
    write_json_atomic,
    write_jsonl_atomic,
)


def test_every_object_line_is_a_row_and_every_other_line_is_counted(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    separator = {"text": "one\u2028two"}  # a raw U+2028 is not a line break in JSONL
    lines = [
        json.dumps({"a": 1}).encode(),
        b"",
        json.dumps(separator, ensure_ascii=False).encode(),
        b"[1, 2]",
        b'{"cut short',
        b'{"bytes": "\xff"}',
        b"   ",
        json.dumps({"a": 2}).encode(),
    ]
    path.write_bytes(b"\n".join(lines))
    read = read_jsonl(path)
    assert read.rows == [{"a": 1}, separator, {"bytes": "\ufffd"}, {"a": 2}]
    assert read.malformed == 2
    assert jsonl_slots(path) == [{"a": 1}, separator, None, None, {"bytes": "\ufffd"}, {"a": 2}]


def test_a_missing_file_is_empty_but_an_unreadable_one_is_an_error(tmp_path: Path) -> None:
    assert read_jsonl(tmp_path / "missing.jsonl").rows == []
    with pytest.raises(IsADirectoryError):
        read_jsonl(tmp_path)


def test_atomic_writes_replace_the_whole_file(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    path.write_text("old")
    write_json_atomic(path, {"value": 1, "path": tmp_path})
    assert json.loads(path.read_text()) == {"value": 1, "path": str(tmp_path)}
    write_jsonl_atomic(tmp_path / "rows.jsonl", [{"a": 1}, {"b": "é"}])
    assert read_jsonl(tmp_path / "rows.jsonl").rows == [{"a": 1}, {"b": "é"}]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rows.jsonl", "summary.json"]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "records.jsonl"
    path.write_text('{"kept": true}\n')

    def refuse(*_: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError, match="disk full"):
        write_atomic(path, "new")
    assert path.read_text() == '{"kept": true}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["records.jsonl"]


_LOCKED_BUILD = """
import sys, time
from pathlib import Path
from core.files import build_lock
target, log = Path(sys.argv[1]), Path(sys.argv[2])
with build_lock(target):
    built = target.is_dir()
    with log.open("a") as out:
        out.write(f"start {time.monotonic()}\\n")
    if not built:
        time.sleep(0.4)
        target.mkdir()
    with log.open("a") as out:
        out.write(f"end {time.monotonic()} built={built}\\n")
"""


def test_a_build_lock_lets_one_process_build_and_the_others_find_it_built(tmp_path: Path) -> None:
    target, log = tmp_path / "cache" / "model", tmp_path / "log.txt"
    processes = [
        subprocess.Popen([sys.executable, "-c", _LOCKED_BUILD, str(target), str(log)], cwd=REPO)
        for _ in range(3)
    ]
    assert [process.wait(timeout=60) for process in processes] == [0, 0, 0]
    lines = [line.split() for line in log.read_text().splitlines()]
    # start/end pairs never interleave: one process holds the lock at a time
    assert [line[0] for line in lines] == ["start", "end"] * 3
    # the first builds (it found nothing); the two that waited found the folder built
    assert [line[2] for line in lines if line[0] == "end"] == ["built=False"] + ["built=True"] * 2
    assert target.is_dir()
