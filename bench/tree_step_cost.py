"""What tree sampling (`at_grpo`) costs per generated token, against an unbranched rollout.

Side by side, in one process and one torch thread, alternating, from the same model (the demo's
format-pre-trained tiny model) and the same step seeds:

- unbranched: `play_step`, one reply per policy turn (what `grpo` and `marshal` sample);
- tree: `play_tree_step` with K branches per policy turn (`--branches`, all-actions branches),
  the K replies of a turn sampled as K rows of the same batched `generate`, every branch's return
  by a replayed continuation whose samples batch with the other branches'.

A tree step generates about K x (1 + remaining turns) times the tokens of an unbranched step, so
its wall time is larger by design; what must not grow is the cost of each token. The figure is
unbranched tokens/s over tree tokens/s (median of `--repeats` pairs; target <= 1.5).

Run: .venv/bin/python bench/tree_step_cost.py [--games 32] [--branches 4] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import DryRun, add_dry_run, report, run_dry, tree_rollout

TARGET = 1.5


def dry_run(dry: DryRun, args: argparse.Namespace) -> None:
    """The unbranched and the tree-sampled rollout's settings (the trainer's checks)."""
    from core.errors import MarsError

    if args.repeats < 1:
        raise MarsError("--repeats must be at least 1")
    tree_rollout(dry, args.game, args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--games", type=int, default=32)
    parser.add_argument("--branches", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--game", default="kuhn_poker")
    parser.add_argument("--model", help="model folder (default: the demo's starting model)")
    add_dry_run(parser)
    args = parser.parse_args()
    if args.dry_run:
        run_dry(lambda dry: dry_run(dry, args))
        return

    import torch

    from core.batcher import Sampling
    from core.causal_lm import load_policy
    from games.engine import EpisodeOptions
    from games.spec import get_game
    from train_backend.config import TreeSettings
    from train_backend.local.rollout import make_responder, play_step
    from train_backend.local.tree import play_tree_step
    from train_backend.pretrain.build import (
        SELFPLAY_START,
        SELFPLAY_START_NAME,
        ensure_pretrained_tiny_model,
    )

    torch.set_num_threads(1)
    model = args.model or ensure_pretrained_tiny_model(SELFPLAY_START, name=SELFPLAY_START_NAME)
    policy = load_policy(model)
    specs = [get_game(args.game)]
    options = EpisodeOptions(prompt_style="compact")
    tree = TreeSettings(branches=args.branches, all_actions=True)

    def rollout(step: int, branched: bool) -> tuple[int, float]:
        responder = make_responder(
            policy,
            Sampling(temperature=1.0),
            generator=torch.Generator().manual_seed(step),
            max_new_tokens=96,
            max_context_tokens=2048,
            keep_tokens=True,
        )
        common = {"step": step, "run_seed": 0, "games_per_step": args.games, "options": options}
        if branched:
            done = asyncio.run(play_tree_step(responder, specs, tree=tree, **common))
        else:
            done = asyncio.run(play_step(responder, specs, **common))
        return done.generated_tokens, done.seconds

    rollout(0, False)  # warm-up: first-call allocations out of the timing
    ratios, flat_rates, tree_rates, token_ratios = [], [], [], []
    for step in range(1, args.repeats + 1):
        flat_tokens, flat_s = rollout(step, False)
        tree_tokens, tree_s = rollout(step, True)
        flat_rates.append(flat_tokens / flat_s)
        tree_rates.append(tree_tokens / tree_s)
        ratios.append(flat_rates[-1] / tree_rates[-1])
        token_ratios.append(tree_tokens / flat_tokens)
        print(
            f"step {step}: unbranched {flat_tokens} tokens {flat_s:.2f} s "
            f"({flat_rates[-1]:.0f} tok/s); tree {tree_tokens} tokens {tree_s:.2f} s "
            f"({tree_rates[-1]:.0f} tok/s)"
        )
    report(
        "unbranched_over_tree_tokens_per_s",
        statistics.median(ratios),
        TARGET,
        unbranched_tokens_per_s=round(statistics.median(flat_rates), 1),
        tree_tokens_per_s=round(statistics.median(tree_rates), 1),
        tree_over_unbranched_tokens=round(statistics.median(token_ratios), 2),
        branches=args.branches,
        games=args.games,
        game=args.game,
    )


if __name__ == "__main__":
    main()
