"""Two models in one arena (`--opponent llm:NAME@URL`): each seat's calls go to its own server,
records name both models, and `mars ratings` reads them. Scripted servers on 127.0.0.1."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import run_mars

from core.errors import MarsError
from games.players.llm import ModelSpec, named_models, parse_model_spec
from games.prompts import legal_actions_in
from harness.testing.scripted_server import Reply, ScriptedServer


def test_model_specs_are_a_folder_or_a_name_at_a_url(tmp_path: Path) -> None:
    assert parse_model_spec("Qwen3-4B@http://gpu:8000/v1/") == ModelSpec(
        "Qwen3-4B", "http://gpu:8000/v1"
    )
    # the split is at the last @ before http(s)://, so a name may hold an @
    assert parse_model_spec("org/m@v2@https://h/v1") == ModelSpec("org/m@v2", "https://h/v1")
    folder = tmp_path / "step_3"
    folder.mkdir()
    relative = parse_model_spec(str(folder))
    assert relative == ModelSpec(str(folder)) and relative.base_url is None
    assert relative.label == str(folder.resolve())  # a folder is named by its absolute path
    assert parse_model_spec("Qwen/Qwen3-4B").label == "Qwen/Qwen3-4B"  # a hub id as it is
    assert named_models(["llm", "llm:a@http://x/v1", "random", "LLM: a@http://x/v1 "]) == {
        "a@http://x/v1": ModelSpec("a", "http://x/v1")
    }
    for bad, message in (("", "needs a model"), ("@http://x/v1", "write llm:NAME@http")):
        with pytest.raises(MarsError, match=message):
            parse_model_spec(bad)


def strong(request: dict[str, Any]) -> Reply:
    legal = legal_actions_in(request["messages"][-1]["content"])
    return Reply(text=f"<answer>{legal[0]}</answer>")


def weak(request: dict[str, Any]) -> Reply:
    return Reply(text="I pass.")  # never an answer: forfeits its first move


def test_two_models_play_each_other_from_both_seats(tmp_path: Path) -> None:
    with ScriptedServer(strong, model="a") as a, ScriptedServer(weak, model="b") as b:
        opponent = f"llm:b@{b.base_url}"
        args = [
            "arena", "--game", "tic_tac_toe", "--player", "llm", "--model", "a",
            "--base-url", a.base_url, "--opponent", opponent, "--episodes", "3",
            "--max-tokens", "32", "--run-dir", str(tmp_path / "arena"), "--quiet",
        ]  # fmt: skip
        result = run_mars(*args)
        seen_a, seen_b = list(a.seen), list(b.seen)
        first_summary = json.loads((tmp_path / "arena" / "summary.json").read_text())
        # A resumed attempt with one more episode per seat: usage adds up over both attempts.
        more = run_mars(*[("4" if arg == "3" else arg) for arg in args])
        again_a, again_b = len(a.seen) - len(seen_a), len(b.seen) - len(seen_b)
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in (tmp_path / "arena" / "records.jsonl").open()]
    records = [r for r in records if r["seed"] < 3]  # the first attempt's games
    assert len(records) == 6
    for r in records:
        assert r["player"] == "llm" and r["opponent"] == opponent
        assert (r["player_id"], r["opponent_id"]) == ("a", "b")
        mine = 0 if r["seat"] == "first" else 1
        assert r["invalid_seat"] == 1 - mine  # b forfeits at its first move, from either seat
        assert r["returns"][1 - mine] < r["returns"][mine]
    # Each server answered exactly its own seat's turns.
    model_turns = {"a": 0, "b": 0}
    for r in records:
        mine = 0 if r["seat"] == "first" else 1
        model_turns["a"] += r["model_turns"][mine]
        model_turns["b"] += r["model_turns"][1 - mine]
    assert len(seen_a) == model_turns["a"] > 0 and len(seen_b) == model_turns["b"] == 6
    assert {s.body["model"] for s in seen_a} == {"a"} and {s.body["model"] for s in seen_b} == {"b"}
    summary = first_summary
    assert (summary["player_id"], summary["opponent_id"]) == ("a", "b")
    assert summary["usage"]["totals"]["calls"] == model_turns["a"]
    assert summary["usage_by_model"]["b"]["totals"]["calls"] == 6

    assert more.returncode == 0, more.stderr
    assert again_b == 2 and again_a > 0  # the two new games only
    summary = json.loads((tmp_path / "arena" / "summary.json").read_text())
    assert summary["usage"]["totals"]["calls"] == model_turns["a"] + again_a
    assert summary["usage_by_model"]["b"]["totals"]["calls"] == 6 + again_b

    rated = run_mars("ratings", str(tmp_path / "arena"))
    assert rated.returncode == 0, rated.stderr
    fit = json.loads((tmp_path / "arena" / "ratings.json").read_text())["games"]["tic_tac_toe"]
    rows = {row["player"]: row for row in fit["players"]}
    assert rows["a"]["wins"] == 8 and rows["b"]["losses"] == 8  # the forfeits count as wins
    assert rows["a"]["rating"] > rows["b"]["rating"]


def test_a_bad_model_spec_is_one_line(tmp_path: Path) -> None:
    result = run_mars(
        "arena", "--game", "tic_tac_toe", "--opponent", "llm:@http://127.0.0.1:9/v1",
        "--player", "random", "--episodes", "1", "--run-dir", str(tmp_path / "r"),
    )  # fmt: skip
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "write llm:NAME@http" in lines[0], result.stderr
