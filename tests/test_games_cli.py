"""`mars arena` and `mars selfplay` through typer's CliRunner (scripted server on loopback)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

import mars.commands.arena
from core.errors import MarsError
from games.prompts import legal_actions_in
from harness.testing.scripted_server import Reply, ScriptedServer
from mars.commands.app import app


@pytest.fixture(scope="module")
def mars() -> typer.Typer:
    wrapper = typer.Typer()
    wrapper.add_typer(app)
    return wrapper


@pytest.fixture(autouse=True)
def _policy_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MARS_CACHE_DIR", str(tmp_path / "cache"))


def invoke(mars: typer.Typer, *args: str) -> Any:
    return CliRunner().invoke(mars, [str(app.info.name), *args])


def run_dir_of(output: str) -> Path:
    last = output.strip().splitlines()[-1]
    assert last.startswith("run dir: ")
    return Path(last.removeprefix("run dir: "))


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in (path / "records.jsonl").read_text().splitlines()]


def test_bot_arena_writes_a_run_and_resumes(mars: typer.Typer, tmp_path: Path) -> None:
    args = ["arena", "--game", "tic_tac_toe", "--player", "mcts:25", "--opponent", "random"]
    args += ["--episodes", "10", "--run-dir", str(tmp_path / "run"), "--quiet"]
    result = invoke(mars, *args)
    assert result.exit_code == 0, result.output
    run = run_dir_of(result.output)
    assert run == tmp_path / "run"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["game"] == "tic_tac_toe" and summary["player"] == "mcts:25"
    assert summary["seats"]["first"]["n"] == summary["seats"]["second"]["n"] == 10
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "completed" and info["model"] is None
    assert info["config"]["episodes_per_seat"] == 10
    assert len(lines(run)) == 20

    again = invoke(mars, *args)
    assert again.exit_code == 0, again.output
    assert "20 records kept, 0 to run" in again.output
    assert len(lines(run)) == 20


def _legal_first(request: dict[str, Any]) -> Reply:
    legal = legal_actions_in(request["messages"][-1]["content"])
    return Reply(text=f"<answer>{legal[0]}</answer>" if legal else "?")


def test_llm_arena_against_cfr_over_http(mars: typer.Typer, tmp_path: Path) -> None:
    with ScriptedServer(_legal_first) as server:
        result = invoke(
            mars,
            "arena",
            "--game", "kuhn_poker",
            "--player", "llm",
            "--opponent", "cfr:50",
            "--episodes", "6",
            "--seats", "first",
            "--prompt-style", "compact",
            "--base-url", server.base_url,
            "--model", "scripted",
            "--out", str(tmp_path),
            "--quiet",
        )  # fmt: skip
        requests = len(server.seen)
    assert result.exit_code == 0, result.output
    run = run_dir_of(result.output)
    assert run.parent == tmp_path and run.name.startswith("arena-")
    records = lines(run)
    assert len(records) == 6 and {r["seat"] for r in records} == {"first"}
    model_turns = [t for r in records for t in r["turns"] if t["seat"] == 0]
    assert len(model_turns) == requests
    assert all(t["legal"] and t["prompt"][0]["role"] == "user" for t in model_turns)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["model"] == "scripted" and summary["usage"]["totals"]["calls"] == requests
    assert list(summary["seats"]) == ["first"]
    assert summary["seats"]["first"]["invalid_rate"] == 0


def test_selfplay_over_http(mars: typer.Typer, tmp_path: Path) -> None:
    with ScriptedServer(_legal_first) as server:
        result = invoke(
            mars,
            "selfplay",
            "--games", "tic_tac_toe,mini_hanabi",
            "--episodes", "3",
            "--base-url", server.base_url,
            "--model", "scripted",
            "--run-dir", str(tmp_path / "sp"),
            "--quiet",
        )  # fmt: skip
    assert result.exit_code == 0, result.output
    records = lines(run_dir_of(result.output))
    assert sorted((r["game"], r["seed"]) for r in records) == [
        ("mini_hanabi", 0), ("mini_hanabi", 1), ("mini_hanabi", 2),
        ("tic_tac_toe", 0), ("tic_tac_toe", 1), ("tic_tac_toe", 2),
    ]  # fmt: skip
    for record in records:
        assert record["model_turns"][0] > 0 and record["model_turns"][1] > 0
    summary = json.loads((tmp_path / "sp" / "summary.json").read_text())
    assert set(summary["games"]) == {"tic_tac_toe", "mini_hanabi"}


def test_a_selfplay_rerun_with_other_settings_is_refused_and_changes_nothing(
    mars: typer.Typer, tmp_path: Path
) -> None:
    with ScriptedServer(_legal_first) as server:
        args = ["selfplay", "--games", "tic_tac_toe", "--episodes", "2", "--quiet"]
        args += ["--base-url", server.base_url, "--model", "scripted"]
        args += ["--run-dir", str(tmp_path / "sp")]
        assert invoke(mars, *args).exit_code == 0
        before = {f.name: f.read_bytes() for f in (tmp_path / "sp").iterdir()}
        other = invoke(mars, *args, "--temperature", "1.0")
        requests = len(server.seen)
        played = sum(sum(r["model_turns"]) for r in lines(tmp_path / "sp"))
        after = {f.name: f.read_bytes() for f in (tmp_path / "sp").iterdir()}
        more = invoke(mars, *args[:4], "3", *args[5:])  # more episodes: resumes
    assert other.exit_code != 0 and isinstance(other.exception, MarsError)
    assert "temperature" in str(other.exception)
    assert requests == played  # the refused rerun asked the model nothing
    assert more.exit_code == 0, more.output
    assert "2 records kept, 1 to run" in more.output
    assert after == before


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--game", "chess", "--opponent", "random"], "unknown game"),
        (["--game", "tic_tac_toe", "--player", "cfr", "--opponent", "random"], "only for"),
        (["--game", "tic_tac_toe", "--opponent", "mcts:abc"], "not a whole number"),
        (["--game", "tic_tac_toe", "--opponent", "random", "--invalid", "retry"], "retry:K"),
        (["--game", "tic_tac_toe", "--opponent", "random", "--seats", "middle"], "--seats"),
        (["--game", "tic_tac_toe", "--opponent", "random", "--prompt-style", "x"], "prompt-style"),
        (
            [
                "--game",
                "tic_tac_toe",
                "--base-url",
                "http://127.0.0.1:9/v1",
                "--opponent",
                "random",
            ],
            "cannot reach http://127.0.0.1:9/v1",  # with --base-url alone, the server is asked
        ),
    ],
)
def test_bad_input_is_one_clear_error(
    mars: typer.Typer, tmp_path: Path, args: list[str], message: str
) -> None:
    result = invoke(mars, "arena", *args, "--out", str(tmp_path), "--quiet")
    assert isinstance(result.exception, MarsError), result.output
    assert message in str(result.exception)
    assert not list(tmp_path.glob("arena-*"))  # nothing started
