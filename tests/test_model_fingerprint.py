"""A checkpoint's identity is its whole content (`core.fingerprints.model_fingerprint`): any byte
of a weight file changes it, and each file's hash is remembered by (path, size, mtime_ns,
ctime_ns, inode, device) in this process and in the MARS cache (`core.file_hashes`), so a second
fingerprint of an unchanged folder reads no weight bytes, counted with /proc/self/io. The adapter's
base check and `mars export --merge` refuse a base changed in the middle of its weights.

Real files on disk; the weight file is bytes named model.safetensors (the fingerprint reads bytes,
not tensors). The tests run as root, so nothing is made unreadable: bytes read are counted.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import REPO, mars_env, run_mars_in_process

from core import file_hashes
from core.adapter_serving import adapter_set
from core.checkpoints import ADAPTER_CONFIG_FILE, CHECKPOINT_FILE, checked_adapter
from core.errors import MarsError
from core.fingerprints import edge_fingerprint, model_fingerprint

MIB = 1 << 20


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A MARS cache of the test's own and an empty in-process memo, before and after."""
    folder = tmp_path / "mars-cache"
    monkeypatch.setenv("MARS_CACHE_DIR", str(folder))
    file_hashes.forget_in_process()
    yield folder
    file_hashes.forget_in_process()


@pytest.fixture
def settled(monkeypatch: pytest.MonkeyPatch) -> None:
    """Files written by the test count as settled at once (no 2 s racy window), so their hashes
    are remembered; each test that edits a file then stamps a later mtime, as a real write
    would, or waits past the clock's tick."""
    monkeypatch.setattr(file_hashes, "RACY_WINDOW_NS", 0)


def make_model(folder: Path, weight_bytes: int) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen3", "hidden_size": 8}))
    (folder / "tokenizer.json").write_text(json.dumps({"model": {"vocab": {"a": 0}}}))
    pattern = bytes(range(256)) * 4096  # 1 MiB
    with (folder / "model.safetensors").open("wb") as handle:
        for start in range(0, weight_bytes, MIB):
            handle.write(pattern[: min(MIB, weight_bytes - start)])
    return folder


def flip_byte(path: Path, offset: int) -> None:
    """One byte changed in place (same size, same inode)."""
    with path.open("r+b") as handle:
        handle.seek(offset)
        value = handle.read(1)[0]
        handle.seek(offset)
        handle.write(bytes([value ^ 0xFF]))


def bytes_read() -> int:
    """What this process has read through read(2) and friends so far (page cache or disk)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


def read_while(call: object) -> tuple[object, int]:
    before = bytes_read()
    result = call()  # type: ignore[operator]
    return result, bytes_read() - before


def test_any_single_byte_of_a_weight_file_changes_the_fingerprint(
    tmp_path: Path, settled: None
) -> None:
    model = make_model(tmp_path / "model", 5 * MIB)
    weights = model / "model.safetensors"
    original = model_fingerprint(str(model))
    assert original.startswith("model@") and len(original.partition("@")[2]) == 16
    seen = {original}
    stamp = weights.stat().st_mtime_ns
    for offset in (0, 5 * MIB // 2, 5 * MIB - 1):  # first, middle (past the first MiB), last
        edge_before = edge_fingerprint(str(model))
        flip_byte(weights, offset)
        stamp += 1_000_000_000  # a later write's time, whatever the clock's tick
        os.utime(weights, ns=(stamp, stamp))
        changed = model_fingerprint(str(model))
        assert changed not in seen, offset
        seen.add(changed)
        if offset == 5 * MIB // 2:  # the old identity did not see it
            assert edge_fingerprint(str(model)) == edge_before
        flip_byte(weights, offset)
        stamp += 1_000_000_000
        os.utime(weights, ns=(stamp, stamp))
        assert model_fingerprint(str(model)) == original  # the content, not the times
    assert weights.stat().st_size == 5 * MIB


def test_an_edit_with_its_mtime_put_back_is_still_seen(tmp_path: Path, settled: None) -> None:
    """`os.utime` can put mtime back, not ctime: the kernel sets ctime on every change."""
    model = make_model(tmp_path / "model", 3 * MIB)
    weights = model / "model.safetensors"
    before = weights.stat()
    original = model_fingerprint(str(model))
    time.sleep(0.05)  # past the tick of a clock that stamps coarse times
    flip_byte(weights, 3 * MIB // 2)
    os.utime(weights, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = weights.stat()
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (
        before.st_size,
        before.st_mtime_ns,
        before.st_ino,
    )
    assert model_fingerprint(str(model)) != original


def test_the_memo_is_keyed_by_path_size_times_inode_and_device(
    tmp_path: Path, settled: None
) -> None:
    """What a remembered hash stands for: the real path and (size, mtime_ns, ctime_ns, inode,
    device). With all of them the same the memo is trusted without reading; any one different
    (here: another inode with the same size and mtime) and the file is read again."""
    model = make_model(tmp_path / "model", 3 * MIB)
    weights = model / "model.safetensors"
    st = weights.stat()
    key = file_hashes.file_key(weights)
    assert key == (
        os.path.realpath(weights),
        f"{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}:{st.st_ino}:{st.st_dev}",
    )
    real = file_hashes.content_hashes([weights])[weights]
    assert file_hashes._memo[key] == real
    file_hashes._memo[key] = "0" * 64  # what the key says is what is used
    assert file_hashes.content_hashes([weights])[weights] == "0" * 64

    # The same bytes but one, written to a new file and renamed over: a new inode.
    replacement = model / ".new"
    replacement.write_bytes(weights.read_bytes()[:-1] + b"\0")
    os.utime(replacement, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(replacement, weights)
    assert weights.stat().st_ino != st.st_ino
    assert file_hashes.content_hashes([weights])[weights] not in (real, "0" * 64)
    # A symlink to the file shares its entry (the real path).
    link = tmp_path / "link.safetensors"
    link.symlink_to(weights)
    assert file_hashes.file_key(link) == file_hashes.file_key(weights)


def test_a_file_changed_within_the_racy_window_is_hashed_but_not_remembered(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = make_model(tmp_path / "model", 3 * MIB)
    first = model_fingerprint(str(model))  # written just now: within 2 s
    assert file_hashes._memo == {}
    assert not (cache / file_hashes.STORE_FILE).exists() or _stored_rows(cache) == 0
    monkeypatch.setattr(file_hashes, "RACY_WINDOW_NS", 0)
    assert model_fingerprint(str(model)) == first
    assert len(file_hashes._memo) == 3 and _stored_rows(cache) == 3


def _stored_rows(cache: Path) -> int:
    with sqlite3.connect(cache / file_hashes.STORE_FILE) as db:
        return db.execute("SELECT COUNT(*) FROM file_hashes").fetchone()[0]


CHILD = textwrap.dedent(
    """
    import json, sys
    from core import file_hashes
    from core.fingerprints import model_fingerprint

    if sys.argv[2:] == ["settled"]:  # the test's files are new: remember them anyway
        file_hashes.RACY_WINDOW_NS = 0

    def rchar():
        for line in open("/proc/self/io"):
            if line.startswith("rchar:"):
                return int(line.split()[1])

    before = rchar()
    fingerprint = model_fingerprint(sys.argv[1])
    print(json.dumps({"fingerprint": fingerprint, "read": rchar() - before}))
    """
)


def fingerprint_in_a_fresh_process(model: Path, cache: Path) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", CHILD, str(model)],
        capture_output=True, text=True, timeout=60, cwd=REPO, check=True,
        env=mars_env(MARS_CACHE_DIR=str(cache)),
    )  # fmt: skip
    assert result.stderr == ""
    return json.loads(result.stdout)


def test_a_second_fingerprint_of_an_unchanged_folder_reads_no_weight_bytes(
    tmp_path: Path, cache: Path, settled: None
) -> None:
    model = make_model(tmp_path / "model", 64 * MIB)
    first, read_first = read_while(lambda: model_fingerprint(str(model)))
    assert read_first >= 64 * MIB
    # In this process: the memo, not a byte of the files.
    second, read_second = read_while(lambda: model_fingerprint(str(model)))
    assert second == first and read_second < MIB
    # In a fresh process on the same cache: the store (a few KB of sqlite pages).
    child = fingerprint_in_a_fresh_process(model, cache)
    assert child["fingerprint"] == first and child["read"] < MIB
    # The store without the memo, in this process too.
    file_hashes.forget_in_process()
    third, read_third = read_while(lambda: model_fingerprint(str(model)))
    assert third == first and read_third < MIB
    # A changed file is read again, by a fresh process too.
    weights = model / "model.safetensors"
    flip_byte(weights, 32 * MIB)
    later = weights.stat().st_mtime_ns + 1_000_000_000
    os.utime(weights, ns=(later, later))
    child = fingerprint_in_a_fresh_process(model, cache)
    assert child["fingerprint"] != first and child["read"] >= 64 * MIB


def test_two_processes_share_the_store(tmp_path: Path, cache: Path) -> None:
    """Two fresh processes fingerprint at once on one store: both finish with the same answer
    and the store holds each file once (sqlite serialises their writes; a busy store is waited
    for)."""
    model = make_model(tmp_path / "model", 16 * MIB)
    expected = model_fingerprint(str(model))
    command = [sys.executable, "-c", CHILD, str(model), "settled"]
    env = mars_env(MARS_CACHE_DIR=str(cache))
    children = [
        subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=env
        )
        for _ in range(2)
    ]
    for child in children:
        out, err = child.communicate(timeout=60)
        assert child.returncode == 0 and err == ""
        assert json.loads(out)["fingerprint"] == expected
    assert _stored_rows(cache) == 3


@pytest.mark.parametrize("kind", ["a file", "not sqlite"])
def test_an_unusable_cache_falls_back_to_the_memo(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    settled: None,
    kind: str,
) -> None:
    if kind == "a file":
        cache = tmp_path / "cache-is-a-file"
        cache.write_text("not a folder")
    else:
        cache = tmp_path / "cache"
        cache.mkdir()
        (cache / file_hashes.STORE_FILE).write_bytes(b"garbage, not a database" * 100)
    monkeypatch.setenv("MARS_CACHE_DIR", str(cache))
    model = make_model(tmp_path / "model", 3 * MIB)
    first = model_fingerprint(str(model))
    second, read = read_while(lambda: model_fingerprint(str(model)))
    assert second == first and read < MIB
    assert capsys.readouterr() == ("", "")


# --- the adapter's base check and `mars export --merge` -----------------------------------------


def make_adapter(folder: Path, base: Path, recorded: str) -> Path:
    """An adapter folder as a trainer saves it, as far as the base check reads it."""
    folder.mkdir(parents=True)
    (folder / ADAPTER_CONFIG_FILE).write_text(
        json.dumps({"base_model_name_or_path": str(base), "r": 8, "peft_type": "LORA"})
    )
    (folder / "adapter_model.safetensors").write_bytes(b"\0" * 64)
    adapter = {"kind": "lora", "name": folder.name, "base": str(base), "base_fingerprint": recorded}
    (folder / CHECKPOINT_FILE).write_text(json.dumps({"step": 1, "adapter": adapter}))
    return folder


def test_the_base_check_refuses_a_base_changed_in_the_middle(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    settled: None,
) -> None:
    base = make_model(tmp_path / "base", 5 * MIB)
    adapter = make_adapter(tmp_path / "coder", base, model_fingerprint(str(base)))
    assert checked_adapter(adapter).base == str(base)
    assert adapter_set(str(base), {"coder": str(adapter)}) is not None

    weights = base / "model.safetensors"
    flip_byte(weights, 5 * MIB // 2)
    later = weights.stat().st_mtime_ns + 1_000_000_000  # a later write's time
    os.utime(weights, ns=(later, later))
    with pytest.raises(MarsError, match="has changed since the adapter was trained"):
        checked_adapter(adapter)
    with pytest.raises(MarsError, match="has changed since the adapter was trained"):
        adapter_set(str(base), {"coder": str(adapter)})
    # `mars export --merge`: refused in one line, nothing written.
    out = tmp_path / "merged"
    capsys.readouterr()
    merge = ["export", str(adapter), "--merge", "-o", str(out)]
    assert run_mars_in_process(merge, monkeypatch) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "has changed since the adapter was trained" in lines[0], lines
    assert not out.exists()


def test_a_record_from_before_whole_content_fingerprints_is_matched_the_old_way(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An adapter saved by an older mars recorded the edge bytes only: it is still served on its
    unchanged base (with a note saying what could not be checked), and refused when the base
    changed where that record could see."""
    base = make_model(tmp_path / "base", 5 * MIB)
    adapter = make_adapter(tmp_path / "coder", base, edge_fingerprint(str(base)))
    assert edge_fingerprint(str(base)) != model_fingerprint(str(base))
    capsys.readouterr()
    assert checked_adapter(adapter).base == str(base)
    note = capsys.readouterr().err.strip().splitlines()
    assert len(note) == 1 and note[0].startswith("note: ") and "older mars" in note[0]
    flip_byte(base / "model.safetensors", 0)
    with pytest.raises(MarsError, match="has changed since the adapter was trained"):
        checked_adapter(adapter)
