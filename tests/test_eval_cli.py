"""`mars eval` end to end against a scripted OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from conftest import DATA_DIR, REPO, mars_env, run_mars

from harness.benchmarks import Sample, get_suite
from harness.testing.scripted_server import Reply, ScriptedServer

pytestmark = pytest.mark.skipif(not DATA_DIR.is_dir(), reason="shared benchmark data not found")

LIMIT = 6


def _samples(suite: str) -> list[Sample]:
    return get_suite(suite).load(data_dir=DATA_DIR, limit=LIMIT).samples


class AnswerKey:
    """Replies correctly to samples at even positions and wrongly to the others."""

    def __init__(self, suites: list[str]) -> None:
        self.replies: dict[str, str] = {}
        self.expected_correct: dict[str, int] = {}
        for suite in suites:
            samples = _samples(suite)
            correct = 0
            for position, sample in enumerate(samples):
                if position % 2 == 0:
                    answer, correct = sample.gold, correct + 1
                elif sample.choices:
                    answer = "A" if sample.gold != "A" else "B"
                else:
                    answer = "-12345"
                self.replies[sample.question[:80]] = (
                    f"Working it out.\nThe answer is \\boxed{{{answer}}}."
                )
            self.expected_correct[suite] = correct

    def reply_for(self, request: dict[str, Any]) -> str:
        prompt = request["messages"][-1]["content"]
        for fragment, reply in self.replies.items():
            if fragment in prompt:
                return reply
        return "no idea"


def _faulty(key: AnswerKey, faults: list[Reply]) -> Any:
    attempts: Counter[str] = Counter()
    lock = threading.Lock()

    def script(request: dict[str, Any]) -> Reply:
        prompt = request["messages"][-1]["content"]
        with lock:
            n = attempts[prompt]
            attempts[prompt] += 1
        if n < len(faults):
            return faults[n]
        return Reply(text=key.reply_for(request))

    return script


def _eval_args(server: ScriptedServer, run_dir: Path, *extra: str) -> list[str]:
    return [
        "eval", "--suite", "gsm8k,aqua", "--limit", str(LIMIT), "--base-url", server.base_url,
        "--model", "scripted", "--data-dir", str(DATA_DIR), "--run-dir", str(run_dir),
        "--timeout", "1", "--quiet", *extra,
    ]  # fmt: skip


def _summary(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "summary.json").read_text())


def _records(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines()]


def test_eval_scores_exactly_what_the_server_answered(tmp_path: Path) -> None:
    key = AnswerKey(["gsm8k", "aqua"])
    with ScriptedServer(lambda req: Reply(text=key.reply_for(req))) as server:
        result = run_mars(*_eval_args(server, tmp_path / "run"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == f"run dir: {tmp_path / 'run'}"
    summary = _summary(tmp_path / "run")["suites"]
    for suite in ("gsm8k", "aqua"):
        assert summary[suite]["n"] == LIMIT
        assert summary[suite]["accuracy"] == pytest.approx(key.expected_correct[suite] / LIMIT)
        assert summary[suite]["errors"] == 0
        lo, hi = summary[suite]["ci95"]
        assert lo < summary[suite]["accuracy"] < hi
    records = _records(tmp_path / "run")
    assert len(records) == 2 * LIMIT
    first = next(r for r in records if r["suite"] == "gsm8k" and r["sample_id"] == "0")
    assert first["correct"] and first["extracted"] == first["gold"]
    assert first["transcript"]["messages"][0]["agent"] == "solver"
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    assert info["status"] == "completed" and info["config"]["mas"] == "single"


def test_injected_faults_do_not_change_the_scores(tmp_path: Path) -> None:
    key = AnswerKey(["gsm8k", "aqua"])
    faults = [Reply(status=429), Reply(status=500), Reply(fault="drop"), Reply(fault="hang")]
    with ScriptedServer(_faulty(key, faults)) as server:
        result = run_mars(*_eval_args(server, tmp_path / "run", "--max-retries", "5"))
        seen = len(server.seen)
    assert result.returncode == 0, result.stderr
    summary = _summary(tmp_path / "run")["suites"]
    for suite in ("gsm8k", "aqua"):
        assert summary[suite]["accuracy"] == pytest.approx(key.expected_correct[suite] / LIMIT)
        assert summary[suite]["errors"] == 0
    assert seen == 2 * LIMIT * (len(faults) + 1)
    retries = [
        m["retries"] for r in _records(tmp_path / "run") for m in r["transcript"]["messages"]
    ]
    assert retries == [len(faults)] * (2 * LIMIT)


def test_exhausted_retries_are_recorded_as_errors_and_redone_on_resume(tmp_path: Path) -> None:
    key = AnswerKey(["gsm8k", "aqua"])
    broken = {"on": True}

    def script(request: dict[str, Any]) -> Reply:
        if broken["on"] and "Janet" in request["messages"][-1]["content"]:
            return Reply(status=503)
        return Reply(text=key.reply_for(request))

    with ScriptedServer(script) as server:
        first = run_mars(*_eval_args(server, tmp_path / "run", "--max-retries", "1"))
        assert first.returncode == 0, first.stderr
        assert _summary(tmp_path / "run")["suites"]["gsm8k"]["errors"] == 1
        broken["on"] = False
        second = run_mars(*_eval_args(server, tmp_path / "run"))
    assert second.returncode == 0, second.stderr
    assert "1 to run" in second.stdout
    records = _records(tmp_path / "run")
    assert len(records) == 2 * LIMIT
    assert not any(r["error"] for r in records)
    summary = _summary(tmp_path / "run")["suites"]
    assert summary["gsm8k"]["accuracy"] == pytest.approx(key.expected_correct["gsm8k"] / LIMIT)


def test_sigkill_then_resume_gives_one_record_per_key_and_the_same_scores(tmp_path: Path) -> None:
    key = AnswerKey(["gsm8k", "aqua"])
    with ScriptedServer(lambda req: Reply(text=key.reply_for(req), delay_s=0.3)) as server:
        args = _eval_args(server, tmp_path / "killed", "--concurrency", "2")
        process = subprocess.Popen(
            [sys.executable, "-m", "mars", *args],
            cwd=REPO, env=mars_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        records_file = tmp_path / "killed" / "records.jsonl"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if records_file.exists() and len(records_file.read_text().splitlines()) >= 3:
                break
            time.sleep(0.05)
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        partial = len(records_file.read_text().splitlines())
        assert 3 <= partial < 2 * LIMIT
        resumed = run_mars(*args)
        reference = run_mars(*_eval_args(server, tmp_path / "reference", "--concurrency", "4"))
    assert resumed.returncode == 0, resumed.stderr
    assert reference.returncode == 0, reference.stderr
    records = _records(tmp_path / "killed")
    keys = Counter((r["suite"], r["sample_id"], r["epoch"]) for r in records)
    assert len(keys) == 2 * LIMIT and set(keys.values()) == {1}
    killed, uninterrupted = _summary(tmp_path / "killed"), _summary(tmp_path / "reference")
    for suite in ("gsm8k", "aqua"):
        assert killed["suites"][suite]["accuracy"] == uninterrupted["suites"][suite]["accuracy"]
        assert killed["suites"][suite]["n"] == LIMIT
    assert json.loads((tmp_path / "killed" / "run.json").read_text())["attempts"] == 2


def test_epochs_give_mean_and_pass_at_k(tmp_path: Path) -> None:
    key = AnswerKey(["gsm8k"])
    calls: Counter[str] = Counter()
    lock = threading.Lock()

    def script(request: dict[str, Any]) -> Reply:
        # Every prompt's first attempt is wrong and its second right, whatever the order.
        prompt = request["messages"][-1]["content"]
        with lock:
            calls[prompt] += 1
            attempt = calls[prompt]
        return Reply(text="\\boxed{-1}" if attempt == 1 else key.reply_for(request))

    with ScriptedServer(script) as server:
        args = _eval_args(server, tmp_path / "run", "--epochs", "2")
        args[args.index("gsm8k,aqua")] = "gsm8k"
        result = run_mars(*args)
    assert result.returncode == 0, result.stderr
    gsm8k = _summary(tmp_path / "run")["suites"]["gsm8k"]
    assert gsm8k["n"] == 2 * LIMIT and gsm8k["epochs"] == 2
    assert gsm8k["pass_at_k"] == pytest.approx(key.expected_correct["gsm8k"] / LIMIT)
    assert gsm8k["mean_at_k"] == pytest.approx(key.expected_correct["gsm8k"] / LIMIT / 2)


def test_report_compares_two_runs_with_a_paired_difference(tmp_path: Path) -> None:
    key = AnswerKey(["gsm8k", "aqua"])
    with ScriptedServer(lambda req: Reply(text=key.reply_for(req))) as server:
        assert run_mars(*_eval_args(server, tmp_path / "a")).returncode == 0
    with ScriptedServer(lambda req: Reply(text="\\boxed{-7}")) as server:
        assert run_mars(*_eval_args(server, tmp_path / "b")).returncode == 0
    result = run_mars("report", str(tmp_path / "a"), str(tmp_path / "b"), "--save", str(tmp_path))
    assert result.returncode == 0, result.stderr
    markdown = (tmp_path / "report.md").read_text()
    assert "Paired difference" in markdown
    expected = -100 * key.expected_correct["gsm8k"] / LIMIT
    assert f"| gsm8k | {LIMIT} | {expected:+.1f} |" in markdown
    csv_rows = (tmp_path / "report.csv").read_text().splitlines()
    assert len(csv_rows) == 1 + 4


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--suite", "nope"], "unknown suite"),
        (["--suite", "gsm8k", "--limit", "0"], "--limit"),
        (["--suite", "gsm8k", "--data-dir", "/nonexistent/bench"], "/nonexistent/bench"),
        (["--suite", "gsm8k", "--mas", "nope"], "unknown MAS"),
        # Without --model the name is asked of the server (core.model_access): unreachable.
        (["--suite", "gsm8k", "--base-url", "http://127.0.0.1:9/v1"], "cannot reach"),
        (["--suite", "gsm8k", "--role", "judge"], "ROLE=URL/NAME"),
    ],
)
def test_bad_input_gives_one_clear_line(args: list[str], message: str, tmp_path: Path) -> None:
    result = run_mars("eval", *args, "--out", str(tmp_path), timeout=60)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("mas", "option", "message"),
    [
        ("mad", "protocol=bogus", "'protocol' must be one of default, maslab"),
        ("debate", "rounds=many", "'rounds' must be an integer"),
        ("mad", "protocol=maslab", None),  # a good option runs
    ],
)
def test_a_mas_option_it_cannot_use_is_refused_once_before_any_sample(
    tmp_path: Path, mas: str, option: str, message: str | None
) -> None:
    with ScriptedServer(lambda req: Reply(text="\\boxed{1}")) as server:
        args = _eval_args(server, tmp_path / "run", "--mas", mas, "--mas-option", option)
        args[args.index(str(LIMIT))] = "2"
        result = run_mars(*args)
        requests = len(server.seen)
    if message is None:
        assert result.returncode == 0, result.stderr
        assert requests > 0
        return
    assert result.returncode == 2
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert requests == 0 and not (tmp_path / "run").exists()


def test_unreachable_base_url_is_one_clear_line(tmp_path: Path) -> None:
    result = run_mars(
        "eval", "--suite", "gsm8k", "--limit", "2", "--base-url", "http://127.0.0.1:9/v1",
        "--model", "m", "--run-dir", str(tmp_path / "run"), "--data-dir", str(DATA_DIR),
    )  # fmt: skip
    assert result.returncode == 2
    assert "cannot reach http://127.0.0.1:9/v1" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_server_dying_mid_run_is_recorded_per_sample_not_a_crash(tmp_path: Path) -> None:
    with ScriptedServer(lambda req: Reply(status=502)) as server:
        result = run_mars(*_eval_args(server, tmp_path / "run", "--max-retries", "1"))
    assert result.returncode == 4, result.stderr  # no suite has a graded sample: no score
    assert "Traceback" not in result.stderr
    records = _records(tmp_path / "run")
    assert len(records) == 2 * LIMIT
    assert all("HTTP 502" in r["error"] for r in records)
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    assert info["status"] == "failed"
