"""Obfuscated game variants (games/variants): the same game underneath, a new surface on top."""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pyspiel
import pytest

from core.endpoint import Completion, Usage
from core.errors import MarsError
from core.runstore import RunDir, _slugify
from games.actions import vocabulary
from games.arena import ArenaConfig, run_arena
from games.engine import EpisodeOptions, play_episode
from games.exploitability import bot_policy, sample_policy, summarize
from games.parsing import parse_move
from games.players import PlayerContext, make_player
from games.players.llm import FunctionPlayer
from games.positions import replay_positions
from games.prompts import legal_actions_in
from games.records import RecordWriter
from games.spec import GameSpec, get_game, list_games
from games.variants import VARIANTS_PER_GAME, list_variants, variant_name

ORIGINALS = [spec.name for spec in list_games()]
VARIANTS = [variant_name(base, n) for base in ORIGINALS for n in range(1, VARIANTS_PER_GAME + 1)]
ROOT = Path(__file__).resolve().parents[1]

# Words of the original's surface beyond its action labels (titles, card and piece symbols,
# jargon) that no variant prompt may contain, as whole words, case ignored.
SYMBOL_WORDS = {
    "tic_tac_toe": ["tic", "tac", "toe", "x", "o"],
    "connect_four": ["connect", "x", "o"],
    "kuhn_poker": ["kuhn", "poker", "j", "q", "k", "jack", "queen", "king"],
    "leduc_poker": ["leduc", "poker", "hold'em", "js", "jh", "qs", "qh", "ks", "kh"],
    "mini_hanabi": ["hanabi", "r1", "y1", "red", "yellow"],
    "simple_hanabi": ["hanabi", "r1", "y1", "g1", "red", "yellow", "green"],
}
POKER_JARGON = ["chip", "chips", "pot", "ante", "bet", "check", "fold", "call", "raise", "showdown"]
HANABI_JARGON = [
    "firework", "fireworks", "card", "cards", "color", "colors", "rank", "ranks", "deck",
    "discarded", "discards", "hint", "hints", "information", "life",
]  # fmt: skip
for _name in ("kuhn_poker", "leduc_poker"):
    SYMBOL_WORDS[_name] += [*POKER_JARGON, "card", "cards", "public", "private"]
for _name in ("mini_hanabi", "simple_hanabi"):
    SYMBOL_WORDS[_name] += HANABI_JARGON


def run(coro):
    return asyncio.run(coro)


def label_words(spec: GameSpec) -> set[str]:
    """The words of every original action label. Numbers are left out: they are the cell,
    column, card position and rank numbers any description of these games must use."""
    words = set()
    for labels in vocabulary(spec).labels:
        for label in labels:
            words |= {w.lower() for w in re.findall(r"[^\W_]+", label) if not w.isdigit()}
    return words


def rule_sentences(spec: GameSpec) -> list[str]:
    """The original rules' sentences (full and compact) of three words or more, lower case."""
    pieces = re.split(r"(?<=[.:;!?])\s+|\n", f"{spec.rules}\n{spec.compact_rules}")
    return [p.strip().lower() for p in pieces if len(p.split()) >= 3]


def random_script(legal: list[str], seat: int, call: int) -> str:
    # The same index in both specs picks the same action: legal lists are in action order.
    pick = random.Random(f"{seat}/{call}/{len(legal)}").randrange(len(legal))
    return f"My move.\n<answer>{legal[pick]}</answer>"


def scripted(script, seen: list[str] | None = None, name: str = "llm") -> FunctionPlayer:
    """A model seat replying `script(legal labels, seat, call)`; `seen` collects its messages."""
    calls: dict[tuple[int, int], int] = {}

    async def respond(messages: list[dict[str, str]], seat: int, seed: int) -> Completion:
        if seen is not None:
            seen.extend(m["content"] for m in messages)
        call = calls[(seed, seat)] = calls.get((seed, seat), -1) + 1
        text = script(legal_actions_in(messages[-1]["content"]), seat, call)
        return Completion(text=text, usage=Usage(prompt_tokens=1, completion_tokens=1))

    return FunctionPlayer(respond, name=name)


def actions_of(spec: GameSpec, turns: list[dict]) -> list[int | None]:
    vocab = vocabulary(spec)
    return [
        vocab.action(t["seat"], t["action"]) if t["action"] is not None else None for t in turns
    ]


def playout_states(spec: GameSpec, count: int, seed: int) -> list[pyspiel.State]:
    """Decision states met in `count` random playouts (chance sampled), a few per playout."""
    rng = random.Random(seed)
    states = []
    for _ in range(count):
        state = spec.game.new_initial_state()
        while not state.is_terminal():
            if state.is_chance_node():
                outcomes, probs = zip(*state.chance_outcomes(), strict=True)
                state.apply_action(rng.choices(outcomes, probs)[0])
                continue
            states.append(state.clone())
            state.apply_action(rng.choice(state.legal_actions()))
    return states


# Names and lookup


def test_variant_names_resolve_to_singleton_specs_of_the_same_game() -> None:
    assert len(VARIANTS) == 18 and len(list_variants()) == 18
    assert [s.name for s in list_games()] == ORIGINALS  # variants are not registered
    for name in VARIANTS:
        spec = get_game(name)
        original = get_game(spec.variant_of or "")
        assert spec is get_game(name.upper()) and spec.name == name
        assert _slugify(name) == name  # a run directory's slug keeps the name as it is
        assert spec.base_name == original.name and original.base_name == original.name
        assert (spec.openspiel_name, dict(spec.params)) == (
            original.openspiel_name,
            dict(original.params),
        )
        assert str(spec.game) == str(original.game)
        assert (spec.split, spec.rewards, spec.cooperative) == (
            original.split,
            original.rewards,
            original.cooperative,
        )
        assert (spec.deal_radices, spec.own_bet, spec.min_return, spec.max_return) == (
            original.deal_radices,
            original.own_bet,
            original.min_return,
            original.max_return,
        )
        assert spec.describe()["variant_of"] == original.name
        assert "variant_of" not in original.describe()


@pytest.mark.parametrize(
    ("asked", "guess"),
    [
        ("kuhn_poker.v9", "kuhn_poker.v1"),
        ("kuhn_poker_v2", "kuhn_poker.v2"),
        ("tic_tac_to.v1", "tic_tac_toe.v1"),
        ("chess.v1", ""),
    ],
)
def test_an_unknown_variant_gets_one_line_with_guesses(asked: str, guess: str) -> None:
    with pytest.raises(MarsError) as caught:
        get_game(asked)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"unknown game {asked!r}")
    assert "kuhn_poker.v3" in message  # the variants are among the known names
    guesses = re.search(r"did you mean (.*?)\?", message)
    assert (guesses is not None) == bool(guess)
    if guesses is not None:
        assert repr(guess) in guesses.group(1)


def test_variants_differ_from_each_other() -> None:
    for base in ORIGINALS:
        specs = list_variants(get_game(base))
        assert len({s.title for s in specs}) == len(specs)
        assert len({tuple(vocabulary(s).labels[0]) for s in specs}) == len(specs)
        assert len({s.rules for s in specs}) == len(specs)


# Same game tree, same rewards


COMPACT = EpisodeOptions("compact")


def _seats(bot, with_model: bool, seed: int) -> list:
    if not with_model:
        return [bot, bot]
    model = scripted(random_script)  # a fresh one: its call counts start at 0
    return [model, bot] if seed % 2 else [bot, model]


@pytest.mark.parametrize("name", VARIANTS)
def test_random_episodes_play_out_alike(name: str) -> None:
    """20 seeds per variant, through the engine: bots on the fast path, and a scripted model in
    one seat (prompts rendered, replies parsed): the same actions, returns and rewards."""
    variant = get_game(name)
    original = get_game(variant.variant_of or "")
    bot = make_player("random", PlayerContext(spec=original))
    for seed in range(20):
        for with_model in (False, True):
            ours, theirs = (
                run(play_episode(spec, _seats(bot, with_model, seed), seed, COMPACT))
                for spec in (variant, original)
            )
            assert ours.game == name and ours.variant_of == original.name
            assert actions_of(variant, ours.turns) == actions_of(original, theirs.turns)
            assert ours.returns == theirs.returns and ours.rewards == theirs.rewards
            assert (ours.outcomes, ours.num_actions, ours.invalid_seat) == (
                theirs.outcomes,
                theirs.num_actions,
                theirs.invalid_seat,
            )


@pytest.mark.parametrize("name", VARIANTS)
def test_random_action_sequences_in_openspiel(name: str) -> None:
    """The two specs' games stepped side by side: legal actions, turn, terminal and returns."""
    variant = get_game(name)
    original = get_game(variant.variant_of or "")
    rng = random.Random(name)
    for _ in range(20):
        ours, theirs = variant.game.new_initial_state(), original.game.new_initial_state()
        while not theirs.is_terminal():
            assert ours.current_player() == theirs.current_player()
            assert ours.legal_actions() == theirs.legal_actions()
            if theirs.is_chance_node():
                assert ours.chance_outcomes() == theirs.chance_outcomes()
            action = rng.choice(theirs.legal_actions())
            ours.apply_action(action)
            theirs.apply_action(action)
        assert ours.is_terminal() and ours.returns() == theirs.returns()
        assert str(ours) == str(theirs)


def _walk(variant: pyspiel.State, original: pyspiel.State, counts: list[int]) -> None:
    assert variant.is_terminal() == original.is_terminal()
    if original.is_terminal():
        assert variant.returns() == original.returns()
        counts[0] += 1
        return
    assert variant.legal_actions() == original.legal_actions()
    for action in original.legal_actions():
        _walk(variant.child(action), original.child(action), counts)


@pytest.mark.parametrize("number", range(1, VARIANTS_PER_GAME + 1))
def test_kuhn_variant_full_tree(number: int) -> None:
    variant = get_game(f"kuhn_poker.v{number}")
    original = get_game("kuhn_poker")
    counts = [0]
    _walk(variant.game.new_initial_state(), original.game.new_initial_state(), counts)
    assert counts[0] == 30  # 6 deals x 5 betting sequences
    ours, theirs = vocabulary(variant), vocabulary(original)
    for seat in range(2):
        assert len(set(ours.labels[seat])) == len(theirs.labels[seat]) == 2
        assert set(ours.labels[seat]).isdisjoint(theirs.labels[seat])


# Prompts


def _prompts(spec: GameSpec, style: str, episodes: int = 12) -> list[str]:
    """Every message a model seat was sent over random episodes (both seats models)."""
    seen: list[str] = []
    model = scripted(random_script, seen)
    for seed in range(episodes):
        result = run(play_episode(spec, [model, model], seed, EpisodeOptions(style)))  # type: ignore[arg-type]
        assert result.error is None and not result.invalid
    return seen


def forbidden_words(original: GameSpec) -> re.Pattern[str]:
    words = label_words(original) | set(SYMBOL_WORDS[original.name])
    return re.compile(
        r"(?<![\w'])(?:" + "|".join(map(re.escape, sorted(words))) + r")(?![\w'])", re.I
    )


@pytest.mark.parametrize("name", VARIANTS)
def test_views_at_many_states_show_only_new_symbols(name: str) -> None:
    variant = get_game(name)
    original = get_game(variant.variant_of or "")
    forbidden = forbidden_words(original)
    states = playout_states(original, 60, seed=7)
    for state in states:
        for seat in range(2):
            view = variant.view(state, seat)
            for text in (view.state, view.compact):
                assert not forbidden.findall(text), (forbidden.findall(text), text)
    assert len(states) > 100


@pytest.mark.parametrize("name", VARIANTS)
def test_no_original_label_symbol_or_rule_sentence_in_the_prompts(name: str) -> None:
    variant = get_game(name)
    original = get_game(variant.variant_of or "")
    forbidden = forbidden_words(original)
    labels = {label.lower() for row in vocabulary(original).labels for label in row}
    sentences = rule_sentences(original)
    assert len(sentences) >= 2
    texts = _prompts(variant, "full") + _prompts(variant, "compact")
    assert len(texts) > 50
    assert max(len(t) for t in _prompts(variant, "compact", episodes=4)) < 700  # tiny-model size
    for text in set(texts):
        lowered = text.lower()
        assert not forbidden.findall(text), (forbidden.findall(text), text)
        assert not [label for label in labels if label in lowered]
        assert not [s for s in sentences if s in lowered]
    # The originals' own prompts do contain them: the check has teeth.
    original_texts = " ".join(_prompts(original, "full", episodes=2))
    assert forbidden.search(original_texts) and sentences[0] in original_texts.lower()


# Parsing


@pytest.mark.parametrize("name", VARIANTS)
def test_replies_parse_in_the_variant_vocabulary_only(name: str) -> None:
    variant = get_game(name)
    original = get_game(variant.variant_of or "")
    ours, theirs = vocabulary(variant), vocabulary(original)
    for seat in range(variant.game.num_players()):
        assert all(ours.action(seat, label) is None for label in theirs.labels[seat])
    for state in playout_states(original, 10, seed=len(name))[:60]:
        seat = state.current_player()
        legal = ours.legal_labels(state, seat)
        for action, label in zip(state.legal_actions(seat), legal, strict=True):
            for reply in (
                f"<answer>{label}</answer>",
                f"ok <answer> {label[1:-1].lower()} </answer>",
            ):
                move = parse_move(reply, legal)
                assert move.label == label and ours.action(seat, move.label) == action
            assert parse_move(f"<answer>{label}</answer>", legal, "strict").label == label
        for old in theirs.legal_labels(state, seat):
            for mode in ("lenient", "strict"):
                assert not parse_move(f"<answer>{old}</answer>", legal, mode).ok  # type: ignore[arg-type]


# Determinism

_DIGEST = """
import hashlib, json, random
from games.actions import vocabulary
from games.variants import list_variants
out = {}
for spec in list_variants():
    state = spec.game.new_initial_state()
    rng = random.Random(0)
    views = []
    while not state.is_terminal() and len(views) < 4:
        if state.is_chance_node():
            state.apply_action(state.chance_outcomes()[0][0])
            continue
        view = spec.view(state, state.current_player())
        views.append([view.state, view.compact])
        state.apply_action(rng.choice(state.legal_actions()))
    labels = vocabulary(spec).labels
    surface = [spec.title, spec.rules, spec.compact_rules, spec.seat_names, labels, views]
    out[spec.name] = hashlib.sha256(json.dumps(surface).encode()).hexdigest()
print(json.dumps(out))
"""


def test_variants_are_the_same_in_every_process() -> None:
    digests = []
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        done = subprocess.run(
            [sys.executable, "-c", _DIGEST], cwd=ROOT, env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        digests.append(json.loads(done.stdout))
    assert digests[0] == digests[1] and sorted(digests[0]) == sorted(VARIANTS)


# Arena and exploitability


def test_arena_against_a_bot_records_both_names(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("MARS_CACHE_DIR", str(tmp_path / "cache"))
    spec = get_game("kuhn_poker.v2")
    run_dir = RunDir.resolve(out=tmp_path, run_dir=None, kind="arena", slug=f"{spec.name}-x")
    run_dir.start(command=["test"], config={})
    assert spec.name in run_dir.path.name
    model = scripted(random_script)
    bot = make_player("cfr:50", PlayerContext(spec=spec))
    records: list[dict] = []
    config = ArenaConfig(episodes=6, options=EpisodeOptions("full"))
    summary = run(
        run_arena(spec, model, bot, config, sink=RecordWriter(run_dir), on_record=records.append)
    )
    assert summary["game"] == "kuhn_poker.v2" and summary["variant_of"] == "kuhn_poker"
    assert summary["seats"]["first"]["n"] == summary["seats"]["second"]["n"] == 6
    assert summary["seats"]["first"]["invalid_rate"] == 0
    stored = [
        json.loads(line) for line in (run_dir.path / "records.jsonl").read_text().splitlines()
    ]
    assert len(stored) == len(records) == 12
    for record in stored:
        assert record["game"] == "kuhn_poker.v2" and record["variant_of"] == "kuhn_poker"
        model_turns = [t for t in record["turns"] if "prompt" in t]
        assert model_turns and all(t["legal"] for t in model_turns)
        prompt = " ".join(m["content"] for t in model_turns for m in t["prompt"])
        assert spec.title in prompt and "Kuhn" not in prompt
        assert legal_actions_in(model_turns[-1]["prompt"][-1]["content"])
    # The dashboard's replays read a variant's records like any other.
    positions = replay_positions(stored[0])
    assert len(positions) == len(stored[0]["turns"]) + 1
    assert {p["variant_of"] for p in positions} == {"kuhn_poker"} and positions[-1]["terminal"]
    # The equilibrium bot's policy is solved once for the game underneath, not per variant.
    assert [p.name for p in (tmp_path / "cache" / "policies").iterdir()] == [
        "kuhn_poker-cfr-50.json"
    ]


def test_exploitability_of_a_variant_equals_the_original() -> None:
    spec, original = get_game("kuhn_poker.v1"), get_game("kuhn_poker")
    uniform = summarize(
        spec, bot_policy(spec, make_player("random", PlayerContext(spec)), samples=1)
    )
    assert uniform["variant_of"] == "kuhn_poker" and uniform["game"] == "kuhn_poker.v1"
    assert uniform["exploitability"] == pytest.approx(0.4583, abs=1e-4)
    nash = make_player("nash", PlayerContext(spec=spec))
    assert summarize(spec, bot_policy(spec, nash, samples=1))["exploitability"] < 0.001

    async def legal_first(messages: list[dict[str, str]], seat: int, k: int) -> Completion:
        return Completion(text=f"<answer>{legal_actions_in(messages[-1]['content'])[0]}</answer>")

    async def in_original_words(messages: list[dict[str, str]], seat: int, k: int) -> Completion:
        first = vocabulary(spec).action(seat, legal_actions_in(messages[-1]["content"])[0])
        label = vocabulary(original).label(seat, first or 0)
        return Completion(text=f"<answer>{label}</answer>")

    ours = run(sample_policy(spec, legal_first, samples=2, style="compact"))
    theirs = run(sample_policy(original, legal_first, samples=2, style="compact"))
    assert summarize(spec, ours, resamples=0)["nash_conv"] == pytest.approx(
        summarize(original, theirs, resamples=0)["nash_conv"]
    )
    assert sum(t.invalid for t in ours) == 0
    wrong = run(sample_policy(spec, in_original_words, samples=2, style="compact"))
    assert all(t.invalid == 2 for t in wrong)


def test_mars_arena_takes_a_variant_name(tmp_path: Path, monkeypatch) -> None:
    import typer
    from typer.testing import CliRunner

    import mars.commands.arena  # noqa: F401  (registers the command)
    from mars.commands.app import app

    monkeypatch.setenv("MARS_CACHE_DIR", str(tmp_path / "cache"))
    wrapper = typer.Typer()
    wrapper.add_typer(app)
    args = ["arena", "--game", "tic_tac_toe.v3", "--player", "tactics", "--opponent", "random"]
    args += ["--episodes", "5", "--out", str(tmp_path), "--quiet"]
    result = CliRunner().invoke(wrapper, [str(app.info.name), *args])
    assert result.exit_code == 0, result.output
    run_path = Path(result.output.strip().splitlines()[-1].removeprefix("run dir: "))
    assert "tic_tac_toe.v3-tactics-vs-random" in run_path.name
    summary = json.loads((run_path / "summary.json").read_text())
    assert summary["game"] == "tic_tac_toe.v3" and summary["variant_of"] == "tic_tac_toe"
    info = json.loads((run_path / "run.json").read_text())
    assert info["config"]["game"]["variant_of"] == "tic_tac_toe"
    records = [json.loads(x) for x in (run_path / "records.jsonl").read_text().splitlines()]
    assert len(records) == 10 and {r["variant_of"] for r in records} == {"tic_tac_toe"}
    wrong = ["arena", "--game", "tic_tac_toe.v7", "--opponent", "random", "--out", str(tmp_path)]
    unknown = CliRunner().invoke(wrapper, [str(app.info.name), *wrong])
    assert isinstance(unknown.exception, MarsError)
    assert "did you mean 'tic_tac_toe.v" in str(unknown.exception)


def test_training_settings_take_variant_names() -> None:
    from train_backend.config import TrainConfig

    config = TrainConfig.for_local(
        games=["kuhn_poker.v1", "mini_hanabi.v2"], eval_exploitability={"leduc_poker.v3": 2}
    )
    assert config.games == ["kuhn_poker.v1", "mini_hanabi.v2"]
    with pytest.raises(ValueError, match=r"mini_hanabi\.v1 is not"):
        TrainConfig.for_local(eval_exploitability={"mini_hanabi.v1": 2})  # not two-player zero-sum
