"""One writer per run folder (core.runstore.WriterLock, taken by core.lifecycle.run_lifecycle):
a second writer is refused in one line naming the first, a lock left by a killed writer is
taken over and said so, twenty races of two writers each end with one refused and the records
exact, and a reader counts each key of an older build's doubled records once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import DATA_DIR, REPO, run_mars

from core.errors import MarsError
from core.lifecycle import run_lifecycle
from core.run_lock import WRITER_LOCK
from core.runstore import RunDir
from harness.testing.scripted_server import Reply, ScriptedServer

# A writer in its own process: waits for the start file, takes the run, appends KEYS records
# (one per key, after a short pause each), and says "wrote" or the one-line refusal.
WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from core.errors import MarsError
    from core.lifecycle import run_lifecycle
    folder, start, keys = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    while not start.exists():
        time.sleep(0.005)
    try:
        with run_lifecycle(out=None, run_dir=folder, kind="eval", slug="t", identity={}) as life:
            done = life.resume(lambda r: r["key"])
            life.start(config={})
            for key in range(keys):
                if key not in done:
                    time.sleep(0.01)
                    life.run.append({"key": key})
            life.finish("completed")
        print("wrote")
    except MarsError as error:
        print("refused:", error)
    """
)
KEYS = 30  # x 10 ms: the two writers overlap however late the second wakes


def start_writer(folder: Path, start: Path, keys: int = KEYS) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(folder), str(start), str(keys)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def test_a_second_writer_is_refused_in_one_line_naming_the_first(tmp_path: Path):
    folder = tmp_path / "run"
    with run_lifecycle(out=None, run_dir=folder, kind="eval", slug="t", identity={}) as life:
        life.start(config={})
        holder = (folder / WRITER_LOCK).read_text()
        assert holder.startswith(f"pid {os.getpid()} on ")
        second = run_lifecycle(out=None, run_dir=folder, kind="eval", slug="t", identity={})
        with pytest.raises(MarsError) as refused, second:
            pytest.fail("a second writer got in")
        message = str(refused.value)
        assert "\n" not in message and f"pid {os.getpid()}" in message
        assert "is being written by" in message
        life.finish("completed")
    assert not (folder / WRITER_LOCK).exists()  # released with the command
    with run_lifecycle(out=None, run_dir=folder, kind="eval", slug="t", identity={}):
        pass  # the next command gets it


def test_a_refused_writer_leaves_no_folder_behind(tmp_path: Path):
    folder = tmp_path / "run"
    with run_lifecycle(out=None, run_dir=folder, kind="eval", slug="t", identity={}):
        second = run_lifecycle(out=None, run_dir=folder, kind="eval", slug="t", identity={})
        with pytest.raises(MarsError), second:
            pass
        assert folder.is_dir()  # the first writer's folder is untouched


def test_a_lock_left_by_a_killed_writer_is_taken_over_and_said(tmp_path: Path, capsys):
    folder, start = tmp_path / "run", tmp_path / "go"
    writer = start_writer(folder, start, keys=10_000)
    start.touch()
    deadline = time.monotonic() + 60
    while not (folder / "records.jsonl").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert (folder / WRITER_LOCK).read_text().startswith(f"pid {writer.pid} ")
    writer.send_signal(signal.SIGKILL)
    writer.wait(30)
    with run_lifecycle(out=None, run_dir=folder, kind="eval", slug="t", identity={}) as life:
        kept = life.resume(lambda r: r["key"])
    note = capsys.readouterr().out
    assert f"left locked by pid {writer.pid} " in note and "no longer running" in note
    assert kept  # what the killed writer recorded is kept


def test_twenty_races_of_two_writers_end_with_one_refused_and_exact_records(tmp_path: Path):
    for race in range(20):
        folder, start = tmp_path / f"run{race}", tmp_path / f"go{race}"
        writers = [start_writer(folder, start) for _ in range(2)]
        time.sleep(0.3)  # both imported and waiting
        start.touch()
        outcomes = [writer.communicate(timeout=120)[0].strip() for writer in writers]
        assert sorted(o.split(":")[0] for o in outcomes) == ["refused", "wrote"], outcomes
        keys = [json.loads(line)["key"] for line in (folder / "records.jsonl").open()]
        assert sorted(keys) == list(range(KEYS)), (race, keys)
        assert not (folder / WRITER_LOCK).exists()


def test_a_reader_counts_each_key_of_doubled_records_once(tmp_path: Path, capsys):
    run = RunDir.resolve(out=None, run_dir=tmp_path / "old", kind="eval", slug="t")
    rows = [
        {"suite": "s", "sample_id": str(i), "epoch": 0, "correct": i % 2 == 0} for i in range(5)
    ]
    doubled = rows + rows[:3] + [{**rows[4], "error": "x"}]
    run.records_path.write_text("".join(json.dumps(r) + "\n" for r in doubled))
    from harness.evaluation import record_key

    unique = run.unique_records(record_key)
    assert unique == rows and run.duplicate_records == 4
    assert "4 duplicate record(s)" in capsys.readouterr().err


@pytest.mark.skipif(not DATA_DIR.is_dir(), reason="shared benchmark data not found")
def test_two_mars_evals_into_one_folder_one_is_refused(tmp_path: Path):
    def slow(request: dict) -> Reply:
        return Reply(text="The answer is \\boxed{3}.", delay_s=0.3)

    run_dir = tmp_path / "run"
    with ScriptedServer(slow) as server:
        args = [
            "eval", "--suite", "gsm8k", "--limit", "4", "--base-url", server.base_url,
            "--model", "scripted", "--data-dir", str(DATA_DIR), "--run-dir", str(run_dir),
            "--quiet", "--concurrency", "1",
        ]  # fmt: skip
        first = subprocess.Popen(
            [sys.executable, "-m", "mars", *args], cwd=REPO, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while not (run_dir / WRITER_LOCK).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        second = run_mars(*args)
        _, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    assert second.returncode != 0
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1 and "is being written by pid" in lines[0], second.stderr
    records = [json.loads(line) for line in (run_dir / "records.jsonl").open()]
    assert len(records) == 4
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["suites"]["gsm8k"]["n"] == 4
