"""The library API of the game commands and of the report (`mars.api.arena`, `.exploitability`,
`.report`): a typed result whose figures are the summary's and whose records are the run's, and
the command line's one-line errors for bad arguments."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import typer
from conftest import DATA_DIR
from typer.testing import CliRunner

from core.errors import MarsError
from core.model_options import SamplingOptions
from games.prompts import legal_actions_in
from harness.benchmarks import get_suite
from harness.testing.scripted_server import Reply, ScriptedServer
from mars.api.arena import ArenaPlan, arena
from mars.api.exploitability import exploitability
from mars.api.report import report
from mars.api.results import Figure, open_run
from mars.api.selfplay import selfplay


@pytest.fixture(autouse=True)
def _policy_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MARS_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def cli() -> typer.Typer:
    from mars.main import app, register_commands

    register_commands()
    return app


def _json(path: Path) -> Any:
    return json.loads(path.read_text())


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_an_arena_of_bots_returns_the_summary_figures_and_the_episodes(tmp_path: Path) -> None:
    result = arena(
        game="tic_tac_toe",
        player="random",
        opponent="random",
        episodes=3,
        seed=5,
        run_dir=tmp_path / "run",
        quiet=True,
    )
    assert result.kind == "arena" and result.run_dir == tmp_path / "run" and not result.unscored
    summary = _json(tmp_path / "run" / "summary.json")
    assert result.summary == summary
    assert set(result.figures) == {"seat first", "seat second"}
    for seat, stats in summary["seats"].items():
        figure = result.figures[f"seat {seat}"]
        assert figure.value == stats["mean_return"] and figure.n == stats["n"] == 3
        assert figure.ci95 == tuple(stats["mean_return_ci"])
    assert result.records() == _lines(tmp_path / "run" / "records.jsonl")
    assert len(result.records()) == 6
    assert {(r["seat"], r["seed"]) for r in result.records()} == {
        (seat, seed) for seat in ("first", "second") for seed in (5, 6, 7)
    }
    info = _json(tmp_path / "run" / "run.json")
    assert info["config"]["first_seed"] == 5 and info["status"] == "completed"
    reopened = open_run(tmp_path / "run")
    assert reopened.figures == result.figures and reopened.summary == summary

    plan = ArenaPlan(
        game="tic_tac_toe",
        player="random",
        opponent="random",
        episodes=3,
        sampling=SamplingOptions(seed=5),
        run_dir=tmp_path / "run",
        quiet=True,
    )
    again = arena(plan)  # the same run as a plan: resumed, nothing left to play
    assert again.figures == result.figures and len(again.records()) == 6


def test_a_selfplay_run_keeps_the_commands_sampling_defaults(tmp_path: Path) -> None:
    def legal_first(request: dict[str, Any]) -> Reply:
        legal = legal_actions_in(request["messages"][-1]["content"])
        return Reply(text=f"<answer>{legal[0]}</answer>" if legal else "?")

    with ScriptedServer(legal_first) as server:
        result = selfplay(
            games="tic_tac_toe",
            episodes=2,
            base_url=server.base_url,
            model="scripted",
            max_tokens=64,
            run_dir=tmp_path / "run",
            quiet=True,
        )
        temperatures = {seen.body["temperature"] for seen in server.seen}
    assert temperatures == {0.6}  # `mars selfplay`'s default, kept beside the given max_tokens
    generation = _json(tmp_path / "run" / "run.json")["config"]["generation"]
    assert generation["top_p"] == 0.99 and generation["max_tokens"] == 64
    games = result.summary["games"]["tic_tac_toe"]
    assert result.figures["tic_tac_toe seat first"] == Figure(games["mean_return"][0], None, 2)
    assert len(result.records()) == 2 and not result.unscored


def test_the_exploitability_of_a_bot(tmp_path: Path) -> None:
    result = exploitability(
        game="kuhn_poker", player="random", bootstrap=0, run_dir=tmp_path / "run"
    )
    summary = _json(tmp_path / "run" / "summary.json")
    assert result.kind == "exploitability" and result.summary == summary
    figure = result.figures["exploitability"]
    assert figure.value == summary["exploitability"] == pytest.approx(0.4583, abs=1e-4)
    assert result.figures["nash_conv"].value == pytest.approx(2 * figure.value)
    assert len(result.records()) == 12 and not result.unscored
    assert summary["temperature"] is None  # a bot has no sampling


def _eval_run(run_dir: Path, right: bool) -> Path:
    """An eval run of 4 GSM8K questions through a scripted server: all right, or all wrong."""
    from mars.api.evaluate import evaluate

    samples = get_suite("gsm8k").load(data_dir=DATA_DIR, limit=4).samples

    def answer(request: dict[str, Any]) -> Reply:
        prompt = request["messages"][-1]["content"]
        gold = next(s.gold for s in samples if s.question[:80] in prompt)
        return Reply(text=f"\\boxed{{{gold if right else '-12345'}}}")

    with ScriptedServer(answer) as server:
        evaluate(
            suites="gsm8k",
            limit=4,
            data_dir=DATA_DIR,
            base_url=server.base_url,
            model="scripted",
            run_dir=run_dir,
            quiet=True,
        )
    return run_dir


@pytest.mark.skipif(not DATA_DIR.is_dir(), reason="shared benchmark data not found")
def test_a_report_over_two_eval_runs(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    base = _eval_run(tmp_path / "base", right=False)
    trained = _eval_run(tmp_path / "trained", right=True)
    capsys.readouterr()
    result = report([base, trained], save=tmp_path / "out")
    printed = capsys.readouterr().out
    assert result.metric == "accuracy"
    assert result.figures["base"]["gsm8k"].value == 0
    assert result.figures["trained"]["gsm8k"] == Figure(
        1.0, result.figures["trained"]["gsm8k"].ci95, 4
    )
    assert result.paired["gsm8k"].value == pytest.approx(1.0) and result.paired["gsm8k"].n == 4
    assert result.saved == (tmp_path / "out" / "report.md", tmp_path / "out" / "report.csv")
    assert result.markdown == result.saved[0].read_text()
    assert result.csv == result.saved[1].read_bytes().decode()  # CSV lines end in \r\n
    assert [(row["run"], row["suite"], row["n"]) for row in result.rows()] == [
        ("base", "gsm8k", "4"),
        ("trained", "gsm8k", "4"),
    ]
    assert "paired difference" in result.text and result.text.endswith("report.csv\n")
    assert printed.split() == result.text.split()  # what was printed is what it says

    quiet = report([base, trained], metric="pass@k", save=tmp_path / "quiet", quiet=True)
    assert quiet.metric == "pass@k" and capsys.readouterr().out == ""


def test_an_experiment_folder_is_reported_through_the_registered_reader(
    tmp_path: Path, cli: typer.Typer
) -> None:
    from mars.orchestration.experiments.spec import Experiment

    experiment = Experiment.model_validate(
        {"name": "tiny", "parts": [{"name": "a", "run": "arena", "args": {"game": "tic_tac_toe"}}]}
    )
    folder = tmp_path / "exp"
    folder.mkdir()
    state = {"experiment": experiment.model_dump(mode="json"), "parts": {}}
    (folder / "experiment.json").write_text(json.dumps(state))
    result = report(folder, quiet=True)
    assert result.text.startswith("# Experiment `tiny`") and result.figures == {}
    shown = CliRunner().invoke(cli, ["report", str(folder)])
    assert shown.exit_code == 0 and shown.output == result.text


@pytest.mark.parametrize(
    ("command", "call"),
    [
        (
            ["arena", "--game", "nope", "--opponent", "random"],
            lambda out: arena(game="nope", opponent="random", out=out),
        ),
        (
            ["arena", "--game", "tic_tac_toe", "--player", "random", "--opponent", "mcts:x"],
            lambda out: arena(game="tic_tac_toe", player="random", opponent="mcts:x", out=out),
        ),
        (
            ["selfplay", "--games", "tic_tac_toe,tic_tac_toe"],
            lambda out: selfplay(games=["tic_tac_toe", "tic_tac_toe"], out=out),
        ),
        (
            ["exploitability", "--game", "kuhn_poker", "--player", "random", "--model", "m"],
            lambda out: exploitability(game="kuhn_poker", player="random", model="m", out=out),
        ),
        (
            ["exploitability", "--game", "mini_hanabi"],
            lambda out: exploitability(game="mini_hanabi", out=out),
        ),
    ],
)
def test_bad_arguments_are_the_command_lines_one_line_error(
    tmp_path: Path, cli: typer.Typer, command: list[str], call: Any
) -> None:
    shown = CliRunner().invoke(cli, [*command, "--out", str(tmp_path / "cli")])
    assert isinstance(shown.exception, MarsError), shown.output
    with pytest.raises(MarsError) as raised:
        call(tmp_path / "api")
    assert str(raised.value) == str(shown.exception) and "\n" not in str(raised.value)
    assert not (tmp_path / "api").exists() and not (tmp_path / "cli").exists()


def test_a_report_refuses_a_run_given_twice_as_the_command_does(
    tmp_path: Path, cli: typer.Typer
) -> None:
    shown = CliRunner().invoke(cli, ["report", str(tmp_path), str(tmp_path)])
    with pytest.raises(MarsError) as raised:
        report([tmp_path, tmp_path])
    assert (
        str(raised.value)
        == str(shown.exception)
        == f"{tmp_path} is given twice; give each run once"
    )


def test_an_argument_the_plan_lacks_is_named_with_the_closest(tmp_path: Path) -> None:
    with pytest.raises(MarsError, match=r"ArenaPlan: .*'gmae'.*game"):
        arena(gmae="tic_tac_toe", opponent="random", out=tmp_path)
    with pytest.raises(MarsError, match="give a ArenaPlan or keyword arguments, not both"):
        arena(ArenaPlan(game="tic_tac_toe", opponent="random"), episodes=2)
