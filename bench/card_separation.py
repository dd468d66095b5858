"""Can the model learn a card-dependent Kuhn policy when the signal is perfect?

Self-play on Kuhn drives the tiny model to one policy for every card ("always bet"). This bench
separates the two possible causes (the estimator's signal, or the model's ability to act on its
card) by replacing the signal with an oracle: the CPU trainer's own rollouts and update
(`LocalTrainer.rollout` / `update`, tree-sampled with all-actions branches, so every state has a
bet and a pass reply), but each reply's advantage set by its card alone:

- Jack: pass +0.5, bet -0.5; King: bet +0.5, pass -0.5; Queen: 0 (no gradient).

The signal is balanced (as many Jack as King states push each way), so a model that can tell its
cards apart moves its Jacks to pass and its Kings to bet; a card-blind one drifts all cards
together. After every step P(bet) is measured at all 12 information states (`--samples` replies
each, the training temperature). The figure is the end gap: mean P(bet | King states) - mean
P(bet | Jack states) (target >= 0.5; the start has about 0).

Run: .venv/bin/python bench/card_separation.py [--steps 10] [--lr 3e-4] [--ppo-epochs 1]
     [--model DIR]
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import DryRun, add_dry_run, report, run_dry, start_model

TARGET_GAP = 0.5
ORACLE = {"J": ("PASS", 0.5), "K": ("BET", 0.5), "Q": ("BET", 0.0)}  # card -> (good move, size)


def oracle_config(model: str, args: argparse.Namespace) -> Any:
    """The CPU trainer's config: Kuhn, at_grpo tree sampling with two all-actions branches."""
    from train_backend.config import TrainConfig

    config = TrainConfig.for_local().model_copy(
        update={
            "model": model,
            "games": ["kuhn_poker"],
            "estimator": "at_grpo",
            "learning_rate": args.lr,
            "warmup_steps": 0,
            "lr_schedule": "constant",
            "kl_coef": args.kl_coef,
            "ppo_epochs": args.ppo_epochs,
            "max_new_tokens": 96,
            "temperature": 1.0,
            "games_per_step": args.games_per_step,
            "eval_every": 0,
        }
    )
    config.tree.all_actions = True
    config.tree.branches = 2
    return config


def dry_run(dry: DryRun, args: argparse.Namespace) -> None:
    """The trainer's config, validated as a whole (it is built by copies, which pydantic does
    not check) and as the CPU trainer checks it."""
    from train_backend.config import TrainConfig
    from train_backend.local.trainer import check_config
    from train_backend.pretrain.build import SELFPLAY_START_NAME

    config = oracle_config(start_model(dry, SELFPLAY_START_NAME, args.model), args)
    checked = dry.config(lambda: TrainConfig.model_validate(config.model_dump()))
    dry.count("game", len(check_config(checked)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--kl-coef", type=float, default=0.0)
    parser.add_argument("--ppo-epochs", type=int, default=1)
    parser.add_argument("--games-per-step", type=int, default=32)
    parser.add_argument("--samples", type=int, default=24)
    parser.add_argument("--model", help="model folder (default: the demo's starting model)")
    add_dry_run(parser)
    args = parser.parse_args()
    if args.dry_run:
        run_dry(lambda dry: dry_run(dry, args))
        return

    import numpy as np
    import torch

    from core.batcher import Sampling
    from core.runstore import RunDir
    from games.spec import get_game
    from train_backend.local.exploitability import policy_exploitability
    from train_backend.local.trainer import LocalTrainer
    from train_backend.pretrain.build import (
        SELFPLAY_START,
        SELFPLAY_START_NAME,
        ensure_pretrained_tiny_model,
    )

    torch.set_num_threads(1)
    model = args.model or ensure_pretrained_tiny_model(SELFPLAY_START, name=SELFPLAY_START_NAME)
    config = oracle_config(str(model), args)
    trainer = LocalTrainer(config, RunDir(Path(tempfile.mkdtemp()), "train"), log=lambda _: None)
    trainer.load()
    kuhn = get_game("kuhn_poker")

    def bet_share() -> tuple[dict[str, float], float]:
        summary = policy_exploitability(
            trainer.policy,
            kuhn,
            samples=args.samples,
            sampling=Sampling(temperature=1.0),
            prompt_style="compact",
            max_new_tokens=96,
        )
        by_card: dict[str, list[float]] = {}
        for state, shares in summary["action_shares"].items():
            by_card.setdefault(state[0], []).append(shares["BET"])
        return {card: float(np.mean(v)) for card, v in by_card.items()}, summary["invalid_rate"]

    def oracle(rollout) -> np.ndarray:
        advantages = np.zeros(len(rollout.samples))
        for index, sample in enumerate(rollout.samples):
            card = re.search(r"card ([JQK])", trainer.policy.decode(sample.prompt_ids))[1]
            answer = trainer.policy.decode(sample.completion_ids).rpartition("<answer>")[2]
            move = "BET" if "BET" in answer else "PASS"
            good, size = ORACLE[card]
            advantages[index] = size if move == good else -size
        return advantages

    start, start_invalid = bet_share()
    print(f"start: P(bet) J {start['J']:.2f} Q {start['Q']:.2f} K {start['K']:.2f}")
    shares, invalid = start, start_invalid
    for step in range(1, args.steps + 1):
        rollout = trainer.rollout(step)
        trainer.update(rollout.samples, oracle(rollout), step)
        shares, invalid = bet_share()
        print(
            f"step {step}: P(bet) J {shares['J']:.2f} Q {shares['Q']:.2f} K {shares['K']:.2f}"
            f"  invalid {invalid:.2f}"
        )
    report(
        "king_minus_jack_bet_share",
        shares["K"] - shares["J"],
        TARGET_GAP,
        lower_is_better=False,
        start_gap=round(start["K"] - start["J"], 4),
        end_bet_share={card: round(v, 3) for card, v in sorted(shares.items())},
        end_invalid_rate=round(invalid, 4),
        steps=args.steps,
        learning_rate=args.lr,
        kl_coef=args.kl_coef,
        ppo_epochs=args.ppo_epochs,
        model=str(model),
    )


if __name__ == "__main__":
    main()
