"""The arena and self-play: records, summaries, concurrency, errors and resume."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pandas as pd
import pytest

from core.endpoint import Completion, EndpointError, Usage
from core.runstore import RunDir
from games.arena import ArenaConfig, record_key, run_arena, summarize
from games.engine import EpisodeOptions
from games.players import PlayerContext, make_player
from games.players.llm import FunctionPlayer
from games.prompts import legal_actions_in
from games.records import RecordWriter
from games.selfplay import SelfPlayConfig, run_selfplay, selfplay_key, turn_table
from games.spec import get_game
from games.testing import first_legal, scripted_player
from train_backend.advantage import compute_advantages


def run(coro):
    return asyncio.run(coro)


def test_summary_shape_and_numbers_for_bots() -> None:
    spec = get_game("tic_tac_toe")
    random_player = make_player("random", PlayerContext(spec=spec))
    records: list[dict] = []
    summary = run(
        run_arena(
            spec, random_player, random_player, ArenaConfig(episodes=400), on_record=records.append
        )
    )
    assert summary["game"] == "tic_tac_toe"
    assert summary["player"] == summary["opponent"] == "random"
    assert set(summary["seats"]) == {"first", "second"}
    assert len(records) == 800
    assert len({record_key(r) for r in records}) == 800
    for name, seat in (("first", 0), ("second", 1)):
        stats = summary["seats"][name]
        mine = [r for r in records if r["seat"] == name]
        wins = sum(r["outcomes"][seat] == "win" for r in mine)
        mean = sum(r["returns"][seat] for r in mine) / len(mine)
        assert stats["n"] == 400 and stats["win"] == pytest.approx(wins / 400)
        assert stats["win"] + stats["draw"] + stats["loss"] == pytest.approx(1.0)
        low, high = stats["win_ci"]
        assert low < stats["win"] < high and high - low < 0.1
        assert stats["mean_return"] == pytest.approx(mean)
        assert stats["normalized_return"] == pytest.approx(50 * (mean + 1))
        assert stats["invalid_rate"] == 0 and stats["mean_tokens_per_turn"] == 0
    # X wins more often than O: the player's first-seat win rate is its second-seat loss rate.
    assert summary["seats"]["first"]["win"] > summary["seats"]["second"]["win"]
    assert summary == summarize(spec, "random", "random", records)


def test_model_episodes_run_concurrently_up_to_the_limit() -> None:
    spec = get_game("tic_tac_toe")
    in_flight = 0
    peak = 0

    async def respond(messages: list[dict[str, str]], seat: int, seed: int) -> Completion:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.002)
        in_flight -= 1
        legal = legal_actions_in(messages[-1]["content"])
        return Completion(text=f"<answer>{legal[0]}</answer>", usage=Usage(completion_tokens=3))

    model = FunctionPlayer(respond, name="fake-llm")
    bot = make_player("random", PlayerContext(spec=spec))
    summary = run(run_arena(spec, model, bot, ArenaConfig(episodes=12, concurrency=5)))
    assert peak == 5
    assert summary["seats"]["first"]["n"] == 12 and summary["seats"]["second"]["n"] == 12
    assert summary["seats"]["first"]["mean_tokens_per_turn"] == 3


def _flaky_model(fail_seeds: set[int]) -> FunctionPlayer:
    async def respond(messages: list[dict[str, str]], seat: int, seed: int) -> Completion:
        if seed in fail_seeds:
            raise EndpointError("HTTP 503 (gave up after 4 retries)", retries=4, status=503)
        legal = legal_actions_in(messages[-1]["content"])
        return Completion(text=f"<answer>{legal[-1]}</answer>", usage=Usage(completion_tokens=2))

    return FunctionPlayer(respond, name="llm")


def test_arena_resumes_from_a_run_directory(tmp_path: Path) -> None:
    spec = get_game("kuhn_poker")
    bot = make_player("random", PlayerContext(spec=spec))
    config = ArenaConfig(episodes=6, options=EpisodeOptions(prompt_style="compact"))
    run_dir = RunDir.resolve(out=None, run_dir=tmp_path / "run", kind="arena", slug="x")
    run_dir.start(command=["test"], config={})

    # First attempt: the model's endpoint fails for good on seeds 2 and 4.
    run(run_arena(spec, _flaky_model({2, 4}), bot, config, sink=RecordWriter(run_dir)))
    records = run_dir.records()
    assert len(records) == 12
    errored = sorted(record_key(r) for r in records if r["error"])
    assert errored == [
        ("kuhn_poker", 2, "first"),
        ("kuhn_poker", 2, "second"),
        ("kuhn_poker", 4, "first"),
        ("kuhn_poker", 4, "second"),
    ]
    assert "HTTP 503" in records[[record_key(r) for r in records].index(errored[0])]["error"]
    first_summary = summarize(spec, "llm", "random", records)
    assert first_summary["seats"]["first"]["errors"] == 2
    assert first_summary["seats"]["first"]["n"] == 4

    # Resume: only the errored keys are played again.
    done = run_dir.prepare_resume(record_key)
    assert len(done) == 8
    replayed: list[dict] = []
    run(
        run_arena(
            spec,
            _flaky_model(set()),
            bot,
            config,
            sink=RecordWriter(run_dir),
            done=done,
            on_record=replayed.append,
        )
    )
    assert sorted(record_key(r) for r in replayed) == errored
    final = run_dir.records()
    assert len(final) == 12 and not any(r["error"] for r in final)
    summary = summarize(spec, "llm", "random", final)
    assert summary["seats"]["first"]["n"] == summary["seats"]["second"]["n"] == 6


def test_model_turns_are_recorded_in_full(tmp_path: Path) -> None:
    spec = get_game("tic_tac_toe")
    model = scripted_player(first_legal, name="llm")
    bot = make_player("random", PlayerContext(spec=spec))
    writer = RecordWriter(RunDir(tmp_path, "arena"))
    run(run_arena(spec, model, bot, ArenaConfig(episodes=2, seats="second"), sink=writer))
    lines = (tmp_path / "records.jsonl").read_text().splitlines()
    assert len(lines) == 2
    record = json.loads(lines[0])
    assert record["seat"] == "second" and record["player"] == "llm"
    assert record["players"] == ["random", "llm"]
    model_turns = [t for t in record["turns"] if t["seat"] == 1]
    bot_turns = [t for t in record["turns"] if t["seat"] == 0]
    assert model_turns and bot_turns
    for turn in model_turns:
        assert set(turn) >= {"prompt", "reply", "reasoning", "action", "legal", "reward", "usage"}
        assert turn["reply"].endswith(f"<answer>{turn['action']}</answer>")
    assert set(bot_turns[0]) == {"seat", "turn", "action", "legal", "reward"}
    assert record["model_turns"] == [0, len(model_turns)]


def test_record_writer_lines_equal_plain_json(tmp_path: Path) -> None:
    spec = get_game("leduc_poker")
    bot = make_player("random", PlayerContext(spec=spec))
    records: list[dict] = []
    writer = RecordWriter(RunDir(tmp_path, "arena"))
    run(run_arena(spec, bot, bot, ArenaConfig(episodes=50), sink=writer, on_record=records.append))
    written = [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()]
    assert written == [json.loads(json.dumps(r)) for r in records]


def test_hanabi_with_the_model_in_both_seats() -> None:
    spec = get_game("mini_hanabi")
    model = scripted_player(first_legal, name="llm")
    summary = run(run_arena(spec, model, model, ArenaConfig(episodes=5, seats="first")))
    stats = summary["seats"]["first"]
    assert stats["n"] == 5 and set(summary["seats"]) == {"first"}
    assert 0 <= stats["normalized_return"] <= 100
    assert stats["normalized_return"] == pytest.approx(100 * stats["mean_return"] / 4)


def test_selfplay_writes_the_turn_table_the_trainer_reads(tmp_path: Path) -> None:
    specs = [get_game("tic_tac_toe"), get_game("kuhn_poker"), get_game("mini_hanabi")]
    model = scripted_player(first_legal, name="llm")
    records: list[dict] = []
    config = SelfPlayConfig(episodes=4, options=EpisodeOptions(prompt_style="compact"))
    summary = run(run_selfplay(specs, model, config, on_record=records.append))
    assert len(records) == 12 and len({selfplay_key(r) for r in records}) == 12
    assert set(summary["games"]) == {"tic_tac_toe", "kuhn_poker", "mini_hanabi"}
    rows = turn_table(records, with_text=True)
    assert len(rows) == sum(len(r["turns"]) for r in records)
    table = pd.DataFrame(rows)
    for _, group in table.groupby(["game", "episode", "seat"]):
        assert list(group["turn"]) == list(range(len(group)))
    row = rows[-1]
    assert row["messages"][-1]["role"] == "user" and "<answer>" in row["reply"]
    advantages = compute_advantages(
        table[["episode", "game", "seat", "turn", "reward", "tokens"]], "marshal"
    )
    assert len(advantages) == len(rows)

    resumed: list[dict] = []
    done = {selfplay_key(r) for r in records if r["game"] != "kuhn_poker"}
    run(run_selfplay(specs, model, config, done=done, on_record=resumed.append))
    assert {r["game"] for r in resumed} == {"kuhn_poker"} and len(resumed) == 4


@pytest.mark.parametrize(
    "record",
    [
        {"seed": 1, "a": 0, "turns": []},
        {"seed": 1, "a": False, "turns": []},
        {"seed": 1, "a": 0.0, "turns": []},
        {"seed": 1, "a": -0.0, "turns": []},
        {"a": [1, 1.0, True], "seed": True, "turns": []},
        {"a": Path("/x"), "seed": 3},
        {"seed": "s", "b": {"c": None}, "turns": []},
        {"turns": [], "seed": 2, "z": 'ü\n"'},
        {"seed": 4},
        {"x": 1, "turns": []},
        {
            "seed": 5,
            "turns": [
                {"seat": 0, "turn": 0, "action": "<A>", "legal": True, "reward": 0.05},
                {"seat": False, "turn": 0, "action": "<A>", "legal": True, "reward": 0.05},
                {"seat": 0, "turn": 0, "action": "<A>", "legal": 1, "reward": 0.05},
                {"seat": 0, "turn": 0, "action": "<A>", "legal": True, "reward": -0.0},
                {"seat": 0, "turn": 0, "action": "<A>", "legal": True, "reward": 0.0},
                {"seat": 0, "turn": 0, "action": "<A>", "legal": True, "reward": 1},
            ],
        },
    ],
)
def test_record_writer_memos_never_mix_equal_values_of_other_types(record: dict) -> None:
    writer = RecordWriter(RunDir(Path("unused"), "arena"))
    # Warm the memos with values equal as dict keys (0 == False == 0.0 == -0.0) but not as JSON.
    for warm in ({"seed": 9, "a": 0, "turns": []}, {"seed": 9, "a": 0.0, "turns": []}):
        writer.encode(warm)
    for _ in range(2):  # the second time through the memo
        expected = {k: v for k, v in record.items() if k != "turns"}
        if "turns" in record:
            expected["turns"] = record["turns"]
        assert writer.encode(record) == json.dumps(expected, ensure_ascii=False, default=str)


def test_bot_episodes_equal_the_general_path(monkeypatch: pytest.MonkeyPatch) -> None:
    from games import engine
    from games.chance import stream

    for seed in (0, 1, 7, 12345, 2**33 + 5):
        assert engine._player_stream(seed).getstate() == stream(seed, 1).getstate()
    for game in ("tic_tac_toe", "leduc_poker", "mini_hanabi"):
        spec = get_game(game)
        bot = make_player("random", PlayerContext(spec=spec))
        fast = [engine.play_bot_episode(spec, (bot, bot), seed) for seed in range(30)]
        with monkeypatch.context() as patch:  # the general (async) loop, on the same bots
            patch.setattr(engine, "plays_synchronously", lambda players, options: False)
            slow = [run(engine.play_episode(spec, (bot, bot), seed)) for seed in range(30)]
        for a, b in zip(fast, slow, strict=True):
            assert json.dumps(a.to_record()) == json.dumps(b.to_record())


def test_a_bot_arena_plays_by_the_chosen_rules() -> None:
    """Bots only, under the MARSHAL rules (step rewards, the code's 24 Leduc deals): the arena's
    records are those the general engine makes under the same rules, not the default rules'."""
    from games.engine import play_episode
    from games.rules import REFERENCE_RULES

    spec = get_game("leduc_poker")
    bot = make_player("random", PlayerContext(spec=spec))
    options = EpisodeOptions(rules=REFERENCE_RULES)
    records: list[dict] = []
    config = ArenaConfig(episodes=24, seats="first", options=options)
    run(run_arena(spec, bot, bot, config, on_record=records.append))
    default_rules: list[dict] = []
    default_config = ArenaConfig(episodes=24, seats="first")
    run(run_arena(spec, bot, bot, default_config, on_record=default_rules.append))
    assert [r["turns"] for r in records] != [r["turns"] for r in default_rules]
    for record in records:
        expected = run(play_episode(spec, (bot, bot), record["seed"], options)).to_record()
        assert record["turns"] == expected["turns"]
        assert record["rewards"] == expected["rewards"]


def test_bot_moves_are_shared_and_cannot_change() -> None:
    import copy
    import pickle

    from games.engine import play_bot_episode

    spec = get_game("tic_tac_toe")
    bot = make_player("random", PlayerContext(spec=spec))
    first, again = (play_bot_episode(spec, (bot, bot), seed=3) for _ in range(2))
    assert first.turns == again.turns
    assert all(a is b for a, b in zip(first.turns, again.turns, strict=True))
    move = first.turns[0]
    with pytest.raises(TypeError, match="shared"):
        move["reward"] = 1.0  # type: ignore[index]
    with pytest.raises(TypeError, match="shared"):
        move.update(reward=1.0)
    mutable = copy.deepcopy(first.to_record())["turns"][0]
    mutable["reward"] = 1.0  # a copy is an ordinary dict
    assert move["reward"] != 1.0 and type(mutable) is dict
    assert pickle.loads(pickle.dumps(move)) == move
    # The last move of each seat carries the outcome; the others only the format bonus.
    bonus = spec.rewards.format_bonus
    for seat in (0, 1):
        seat_turns = [t for t in first.turns if t["seat"] == seat]
        assert all(t["reward"] == bonus for t in seat_turns[:-1])
        assert seat_turns[-1]["reward"] == pytest.approx(bonus + first.returns[seat])
