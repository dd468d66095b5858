"""Arena throughput: random vs random Tic-Tac-Toe through the arena, against raw OpenSpiel.

Both sides run in this process, interleaved, several times; each side's best (least) CPU time is
kept, since other load on the machine can only slow a run down. The arena side plays 20,000
games (10,000 per seat) with every record written to a temporary run directory; the raw side is a
plain OpenSpiel loop that picks uniformly among legal actions. Target: arena >= 30% of raw
(issue 24). Then the cost of a game layer by layer (bare loop, seeding the episode's player
stream, whole bot episodes, the arena without and with records), in microseconds.

    python bench/arena_throughput.py [--games 20000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pyspiel

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import DryRun, add_dry_run, game_specs, run_dry
from core.errors import MarsError
from core.runstore import RunDir
from games.arena import ArenaConfig, run_arena
from games.engine import _player_stream, play_bot_episode
from games.players import PlayerContext, make_player
from games.records import RecordWriter
from games.spec import get_game

TARGET_RATIO = 0.30


def raw_loop(game: pyspiel.Game, games: int, seed: int) -> float:
    """CPU seconds for `games` random-vs-random games in a bare OpenSpiel loop."""
    rng = random.Random(seed)
    started = time.process_time()
    for _ in range(games):
        state = game.new_initial_state()
        while not state.is_terminal():
            state.apply_action(rng.choice(state.legal_actions()))
    return time.process_time() - started


def arena_run(games: int, root: Path) -> tuple[float, dict]:
    """CPU seconds for `games` games through the arena, records written to a run directory."""
    spec = get_game("tic_tac_toe")
    player = make_player("random", PlayerContext(spec=spec))
    run_dir = RunDir.resolve(out=root, run_dir=None, kind="arena", slug="bench")
    run_dir.start(command=["bench"], config={"games": games})
    config = ArenaConfig(episodes=games // 2, seats="both")
    started = time.process_time()
    writer = RecordWriter(run_dir)
    summary = asyncio.run(run_arena(spec, player, player, config, sink=writer))
    elapsed = time.process_time() - started
    written = sum(1 for _ in run_dir.records_path.open())
    if written != games:
        raise SystemExit(f"expected {games} records, found {written}")
    return elapsed, summary


def breakdown(games: int, repeats: int) -> dict[str, float]:
    """Microseconds a game for the layers of the arena, each the best of `repeats`: the bare
    loop, seeding an episode's player stream alone, whole bot episodes (no arena), and the
    arena without and with its records."""
    spec = get_game("tic_tac_toe")
    player = make_player("random", PlayerContext(spec=spec))
    seats = (player, player)

    def best(run: Callable[[], object]) -> float:
        times = []
        for _ in range(repeats):
            started = time.process_time()
            run()
            times.append(time.process_time() - started)
        return round(min(times) / games * 1e6, 2)

    def no_records() -> None:
        asyncio.run(run_arena(spec, player, player, ArenaConfig(episodes=games // 2)))

    def seeding() -> None:
        for seed in range(games):  # nothing kept: each stream is freed at once, as in a game
            _player_stream(seed)

    def episodes() -> None:
        for seed in range(games):
            play_bot_episode(spec, seats, seed)

    with tempfile.TemporaryDirectory() as tmp:
        return {
            "raw_loop": best(lambda: raw_loop(spec.game, games, seed=0)),
            "stream_seeding": best(seeding),
            "bot_episodes": best(episodes),
            "arena_without_records": best(no_records),
            "arena_with_records": best(lambda: arena_run(games, Path(tmp))),
        }


def dry_run(dry: DryRun, args: argparse.Namespace) -> None:
    """The game (OpenSpiel's and the registry's), the random player, the arena's config."""
    if args.games < 2 or args.games % 2 or args.repeats < 1:
        raise MarsError("--games must be even and at least 2 (both seats); --repeats at least 1")
    pyspiel.load_game("tic_tac_toe")
    (spec,) = game_specs(dry, ["tic_tac_toe"])
    dry.config(lambda: make_player("random", PlayerContext(spec=spec)), "player")
    dry.config(lambda: ArenaConfig(episodes=args.games // 2, seats="both"), "arena config")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=5)
    add_dry_run(parser)
    args = parser.parse_args()
    if args.dry_run:
        run_dry(lambda dry: dry_run(dry, args))
        return
    game = pyspiel.load_game("tic_tac_toe")
    raw_times, arena_times = [], []
    summary: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            raw_times.append(raw_loop(game, args.games, seed=repeat))
            elapsed, summary = arena_run(args.games, Path(tmp))
            arena_times.append(elapsed)
    raw_rate = args.games / min(raw_times)
    arena_rate = args.games / min(arena_times)
    ratio = arena_rate / raw_rate
    first = summary["seats"]["first"]
    print(f"raw OpenSpiel loop: {raw_rate:,.0f} games/s (best of {args.repeats})")
    print(f"arena with records: {arena_rate:,.0f} games/s (best of {args.repeats})")
    print(
        f"X as first mover: win {first['win']:.3f} draw {first['draw']:.3f} "
        f"loss {first['loss']:.3f}"
    )
    per_game_us = breakdown(args.games, args.repeats)
    print("microseconds a game:", ", ".join(f"{k} {v}" for k, v in per_game_us.items()))
    result = {
        "metric": "arena_vs_raw_throughput_ratio",
        "value": round(ratio, 3),
        "target": TARGET_RATIO,
        "met": ratio >= TARGET_RATIO,
        "arena_games_per_s": round(arena_rate),
        "raw_games_per_s": round(raw_rate),
        "per_game_us": per_game_us,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
