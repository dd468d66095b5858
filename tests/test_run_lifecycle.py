"""Every command that writes a run directory goes through one lifecycle (core.lifecycle): a rerun
with other settings is refused the same way, a command that fails before recording anything
leaves no directory, and the exit codes are the documented ones.

Run as a user runs them: `python -m mars ...` in its own process, the model a scripted server on
127.0.0.1.
"""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import DATA_DIR, REPO, run_mars

from core.errors import ExitCode
from harness.testing.scripted_server import Reply, ScriptedServer


def _reply(_request: dict) -> Reply:
    # A game reads the answer tag, a suite the boxed answer.
    return Reply(text="<answer>PASS</answer> The answer is \\boxed{18}.")


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer(_reply) as running:
        yield running


def _closed_port_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"  # nothing listens there any more


def _first_run_and_a_changed_setting(name: str, url: str, tmp: Path) -> tuple[list, list, str]:
    """A command's first run, the same with one setting changed, and that setting's key."""
    model = ["--base-url", url, "--model", "scripted"]
    if name == "arena":
        args = ["arena", "--game", "kuhn_poker", "--player", "random", "--opponent", "random"]
        return [*args, "--episodes", "2"], ["--prompt-style", "compact"], "prompt_style"
    if name == "exploitability":
        args = ["exploitability", "--game", "kuhn_poker", "--player", "random", "--samples", "2"]
        return [*args, "--bootstrap", "0"], ["--seed", "1"], "seed"
    if name == "selfplay":
        args = ["selfplay", "--games", "kuhn_poker", "--episodes", "2", "--prompt-style", "compact"]
        return [*args, *model], ["--temperature", "0.3"], "generation.temperature"
    if name == "eval":
        args = ["eval", "--suite", "gsm8k", "--limit", "1", "--data-dir", str(DATA_DIR)]
        return [*args, *model], ["--temperature", "0.3"], "generation.temperature"
    if name == "loop":
        watch = tmp / "checkpoints"
        watch.mkdir(exist_ok=True)
        args = ["loop", "--watch", str(watch), "--once", "--eval", "eval:gsm8k:single:1"]
        return args, ["--temperature", "0.3"], "spec.temperature"
    assert name == "train"
    args = ["train", "--games", "kuhn_poker", "--steps", "1", "--games-per-step", "2"]
    args += ["--max-tokens", "8", "--eval-every", "0", "--save-every", "1"]
    return args, ["--lr", "0.01"], "learning_rate"


COMMANDS = ["arena", "exploitability", "selfplay", "eval", "loop", "train"]


@pytest.mark.parametrize("name", COMMANDS)
def test_a_rerun_with_other_settings_is_refused_alike_and_changes_nothing(
    name: str, server: ScriptedServer, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    first, changed, key = _first_run_and_a_changed_setting(name, server.base_url, tmp_path)
    quiet = [] if name == "loop" else ["--quiet"]  # the loop prints one line per checkpoint
    done = run_mars(*first, "--run-dir", str(run), *quiet)
    assert done.returncode == ExitCode.DONE, done.stdout + done.stderr
    before = {path: path.read_bytes() for path in run.rglob("*") if path.is_file()}

    refused = run_mars(*first, *changed, "--run-dir", str(run), *quiet)

    assert refused.returncode == ExitCode.BAD_INPUT, refused.stdout + refused.stderr
    [line] = refused.stderr.strip().splitlines()
    assert re.fullmatch(
        rf"error: {re.escape(str(run))} was run with other settings \(.*\b{re.escape(key)} .* -> "
        r".*\); rerun with the same settings to resume it, or give a new --run-dir",
        line,
    ), line
    assert {path: path.read_bytes() for path in run.rglob("*") if path.is_file()} == before


@pytest.mark.parametrize("name", ["arena", "exploitability", "selfplay", "eval"])
def test_a_command_that_fails_before_recording_anything_leaves_no_directory(
    name: str, tmp_path: Path
) -> None:
    url = _closed_port_url()
    model = ["--base-url", url, "--model", "scripted"]
    args = {
        "arena": ["arena", "--game", "kuhn_poker", "--opponent", "random", *model],
        "exploitability": ["exploitability", "--game", "kuhn_poker", *model],
        "selfplay": ["selfplay", "--games", "kuhn_poker", *model],
        "eval": ["eval", "--suite", "gsm8k", "--limit", "1", "--data-dir", str(DATA_DIR), *model],
    }[name]
    out = tmp_path / "runs"
    out.mkdir()

    failed = run_mars(*args, "--out", str(out), "--quiet")

    assert failed.returncode == ExitCode.BAD_INPUT, failed.stdout + failed.stderr
    assert "error:" in failed.stderr and url.removesuffix("/v1") in failed.stderr
    assert list(out.iterdir()) == []  # the run directory it made is gone again
    named = tmp_path / "named"
    assert run_mars(*args, "--run-dir", str(named), "--quiet").returncode == ExitCode.BAD_INPUT
    assert not named.exists()


def test_the_exit_codes_are_the_documented_ones() -> None:
    text = (REPO / "docs" / "run-format.md").read_text(encoding="utf-8")
    section = text.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    documented = {int(code) for code in re.findall(r"^\| (\d+) \|", section, re.M)}
    assert documented == {int(code) for code in ExitCode}


@pytest.mark.parametrize("args", [["eval", "--nope"], ["arena", "--concurrency", "0"]])
def test_a_usage_error_is_the_parsers_message_on_one_line_with_the_bad_input_code(
    args: list[str],
) -> None:
    # typer >= 0.29 raises its own copy of click's exceptions: they once escaped as a traceback.
    refused = run_mars(*args)
    assert refused.returncode == ExitCode.BAD_INPUT
    assert "Traceback" not in refused.stderr
    [line] = refused.stderr.strip().splitlines()
    assert line.startswith("error: ") and f"mars {args[0]} --help" in line


def test_a_selfplay_or_a_failure_analysis_with_every_request_failed_has_no_score(
    server: ScriptedServer, tmp_path: Path
) -> None:
    with ScriptedServer(lambda _request: Reply(text="no", status=400)) as refusing:
        model = ["--base-url", refusing.base_url, "--model", "scripted", "--max-retries", "0"]
        selfplay = run_mars(
            "selfplay", "--games", "kuhn_poker", "--episodes", "2", *model,
            "--run-dir", str(tmp_path / "selfplay"), "--quiet",
        )  # fmt: skip
        assert selfplay.returncode == ExitCode.NO_SCORE, selfplay.stdout + selfplay.stderr
        assert "kuhn_poker has no score: all 2 episodes failed" in selfplay.stderr
        info = (tmp_path / "selfplay" / "run.json").read_text()
        assert '"status": "failed"' in info

        wrong = ["--base-url", server.base_url, "--model", "scripted"]  # answers 18: wrong
        evaluated = run_mars(
            "eval", "--suite", "gsm8k", "--limit", "2", "--data-dir", str(DATA_DIR), *wrong,
            "--run-dir", str(tmp_path / "eval"), "--quiet",
        )  # fmt: skip
        assert evaluated.returncode == ExitCode.DONE, evaluated.stderr
        judged = run_mars(
            "failures", str(tmp_path / "eval"), "--judge-model", "scripted",
            "--base-url", refusing.base_url, "--max-retries", "0", "--quiet",
        )  # fmt: skip
        assert judged.returncode == ExitCode.NO_SCORE, judged.stdout + judged.stderr
        # (one of the two answers is right: only the failed transcript is judged)
        assert "the failure analysis has no score: all 1 transcript failed" in judged.stderr


def test_an_empty_folder_the_user_made_is_kept_when_the_command_fails(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    model = ["--base-url", _closed_port_url(), "--model", "scripted"]
    failed = run_mars("selfplay", "--games", "kuhn_poker", *model, "--run-dir", str(mine))
    assert failed.returncode == ExitCode.BAD_INPUT
    assert mine.is_dir()  # not this command's to remove


def _status(run: Path) -> str:
    return json.loads((run / "run.json").read_text())["status"]


def test_an_error_marks_only_an_attempt_that_started_and_did_not_say_how_it_ended(
    tmp_path: Path,
) -> None:
    from core.lifecycle import run_lifecycle
    from core.runstore import RunStatus

    run, identity = tmp_path / "run", {"kind": "eval", "suites": ["gsm8k"]}
    common = {"out": None, "run_dir": run, "kind": "eval", "slug": "s", "identity": identity}
    with pytest.raises(RuntimeError), run_lifecycle(**common) as life:
        life.start(config={})
        raise RuntimeError("the work broke")
    assert _status(run) == "failed"

    # Work that records its own end (a trainer marking its run) keeps what it recorded.
    with pytest.raises(KeyboardInterrupt), run_lifecycle(**common) as life:
        life.start(config={})
        life.run.finish(RunStatus.COMPLETED)  # then Ctrl-C while printing the summary
        raise KeyboardInterrupt
    assert _status(run) == "completed"

    # An attempt that fails before it starts leaves the earlier attempt's status alone.
    with pytest.raises(RuntimeError), run_lifecycle(**common):
        raise RuntimeError("no server")
    assert _status(run) == "completed"
    assert json.loads((run / "run.json").read_text())["attempts"] == 2
