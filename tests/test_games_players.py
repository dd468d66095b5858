"""Classic players: strength against random, equilibrium quality, caching, player strings."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pyspiel
import pytest

from core.errors import MarsError
from games.arena import ArenaConfig, run_arena
from games.engine import play_episode
from games.players import PlayerContext, make_player, solvers
from games.spec import get_game


def arena(game: str, player: str, opponent: str, episodes: int, cache: Path | None = None) -> dict:
    spec = get_game(game)
    context = PlayerContext(spec=spec, cache_dir=cache)
    summary = asyncio.run(
        run_arena(
            spec,
            make_player(player, context),
            make_player(opponent, context),
            ArenaConfig(episodes=episodes),
        )
    )
    return summary["seats"]


def test_mcts_200_beats_random_at_tic_tac_toe() -> None:
    # 300 seeded games per seat (~2 s): expected about 99% / 90% wins and ~3% losses as second.
    seats = arena("tic_tac_toe", "mcts:200", "random", episodes=300)
    assert seats["first"]["n"] == seats["second"]["n"] == 300
    assert seats["first"]["win"] >= 0.95
    assert seats["second"]["win"] >= 0.85
    assert seats["first"]["loss"] <= 0.05 and seats["second"]["loss"] <= 0.05


def test_random_vs_random_tic_tac_toe_matches_known_rates() -> None:
    spec = get_game("tic_tac_toe")
    player = make_player("random", PlayerContext(spec=spec))

    async def outcomes() -> list[str]:
        return [
            (await play_episode(spec, [player, player], seed)).outcomes[0] for seed in range(20_000)
        ]

    results = asyncio.run(outcomes())
    rates = {name: results.count(name) / len(results) for name in ("win", "loss", "draw")}
    assert rates["win"] == pytest.approx(0.585, abs=0.02)  # X wins
    assert rates["loss"] == pytest.approx(0.288, abs=0.02)  # O wins
    assert rates["draw"] == pytest.approx(0.127, abs=0.02)


def test_cfr_on_kuhn_is_near_equilibrium_and_beats_random(tmp_path: Path) -> None:
    spec = get_game("kuhn_poker")
    player = make_player("cfr:1000", PlayerContext(spec=spec, cache_dir=tmp_path))
    exploitability = pyspiel.exploitability(spec.game, player.policy.to_pyspiel())
    assert exploitability < 0.01
    assert player.policy.exploitability == pytest.approx(exploitability)
    seats = arena("kuhn_poker", "cfr:1000", "random", episodes=1200, cache=tmp_path)
    for seat in ("first", "second"):
        assert seats[seat]["mean_return"] > 0
        assert seats[seat]["mean_return_ci"][0] > 0  # the whole 95% interval


def test_nash_on_kuhn_is_an_equilibrium(tmp_path: Path) -> None:
    spec = get_game("kuhn_poker")
    player = make_player("nash", PlayerContext(spec=spec, cache_dir=tmp_path))
    assert pyspiel.exploitability(spec.game, player.policy.to_pyspiel()) < 0.001


def test_policies_are_cached_on_disk_and_reread(tmp_path: Path) -> None:
    spec = get_game("kuhn_poker")
    context = PlayerContext(spec=spec, cache_dir=tmp_path)
    first = make_player("cfr:50", context)
    path = tmp_path / "policies" / "kuhn_poker-cfr-50.json"
    stored = json.loads(path.read_text())
    assert stored["iterations"] == 50 and len(stored["policy"]) == 12  # Kuhn's info states
    # Tamper with the file: a fresh process (no in-memory cache) must use what is on disk.
    stored["policy"]["0"] = [[0, 1], [1.0, 0.0]]
    path.write_text(json.dumps(stored))
    solvers.cached_policy.cache_clear()
    reread = make_player("cfr:50", context)
    assert reread.policy.table["0"] == ((0, 1), (1.0, 0.0))
    assert first.policy.table["0"] != reread.policy.table["0"]
    # A damaged file is solved again and rewritten.
    path.write_text("{not json")
    solvers.cached_policy.cache_clear()
    again = make_player("cfr:50", context)
    assert again.policy.table["0"] == first.policy.table["0"]
    assert json.loads(path.read_text())["iterations"] == 50


def test_leduc_policies_use_the_cpp_solver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(solvers.NASH_ITERATIONS, "leduc_poker", 30)
    spec = get_game("leduc_poker")
    nash = make_player("nash", PlayerContext(spec=spec, cache_dir=tmp_path))
    assert (tmp_path / "policies" / "leduc_poker-cfrplus-30.json").is_file()
    assert len(nash.policy.table) == 936  # Leduc's information states
    assert nash.policy.exploitability < 0.1
    seats = arena("leduc_poker", "nash", "random", episodes=300, cache=tmp_path)
    assert seats["first"]["mean_return"] > 0 and seats["second"]["mean_return"] > 0


def test_mars_cache_dir_is_the_default_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MARS_CACHE_DIR", str(tmp_path))
    assert solvers.cache_dir() == tmp_path
    assert solvers.cache_dir(Path("/elsewhere")) == Path("/elsewhere")


@pytest.mark.parametrize(
    ("text", "game", "message"),
    [
        ("mcts:abc", "tic_tac_toe", "not a whole number"),
        ("mcts:0", "tic_tac_toe", "must be positive"),
        ("mcts", "tic_tac_toe", "needs a number"),
        ("mcts:10", "kuhn_poker", "perfect-information"),
        ("alphazero", "tic_tac_toe", "unknown player"),
        ("cfr", "tic_tac_toe", "only for kuhn_poker, leduc_poker"),
        ("nash", "connect_four", "only for"),
        ("random:3", "tic_tac_toe", "takes no argument"),
        ("llm", "tic_tac_toe", "needs a model"),
        ("self", "mini_hanabi", "needs a model"),
    ],
)
def test_bad_player_strings_are_clear_errors(text: str, game: str, message: str) -> None:
    with pytest.raises(MarsError, match=message):
        make_player(text, PlayerContext(spec=get_game(game)))


def test_player_strings_build_named_players() -> None:
    context = PlayerContext(spec=get_game("tic_tac_toe"))
    assert make_player(" MCTS:25 ", context).name == "mcts:25"
    assert make_player("random", context).name == "random"
    assert not make_player("random", context).is_model


def test_unknown_game_is_a_clear_error() -> None:
    with pytest.raises(MarsError, match="unknown game 'chess'"):
        get_game("chess")
    assert get_game("Tic-Tac-Toe").name == "tic_tac_toe"


def test_an_empty_mars_cache_dir_means_the_default_for_every_cache(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from core.files import mars_cache_dir
    from core.tiny_model import default_tiny_model_dir

    monkeypatch.setenv("MARS_CACHE_DIR", "")
    default = Path.home() / ".cache" / "mars"
    assert mars_cache_dir() == default
    assert default_tiny_model_dir().parent == default
    monkeypatch.setenv("MARS_CACHE_DIR", "~/elsewhere")
    assert mars_cache_dir() == Path.home() / "elsewhere"
