"""What running each tree node's prompt once saves in the update of a tree-sampled step.

A tree-sampled step (`at_grpo`, K branches per policy turn) trains K replies to every prompt. The
update's forward and backward passes can run each distinct prompt once and let its K replies
attend to the cached keys and values (`train_backend.local.ppo.pack_shared`), instead of running
prompt + reply for every row (`pack`). Both give the same log-probabilities and gradients (tests
check it); this bench times them side by side, alternating, in one process and one torch thread:
the same real tree-sampled Kuhn batch (the format-pre-trained tiny model, `--games` games, K =
`--branches` all-actions branches), the same random minibatches of `--minibatch` rows split into
the same micro-batches as the trainer's, forward and backward of the token log-probs.

Figure: shared-prompt time over plain time (median of `--repeats` pairs; target <= 0.7).

Run: .venv/bin/python bench/shared_prompt_update.py [--games 32] [--branches 4] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import DryRun, add_dry_run, report, run_dry, tree_rollout

TARGET = 0.7


def dry_run(dry: DryRun, args: argparse.Namespace) -> None:
    """The tree-sampled Kuhn rollout's settings (the trainer's checks), and the update's batch
    sizes."""
    from core.errors import MarsError

    if min(args.minibatch, args.repeats) < 1:
        raise MarsError("--minibatch and --repeats must be at least 1")
    tree_rollout(dry, "kuhn_poker", args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--games", type=int, default=32)
    parser.add_argument("--branches", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--minibatch", type=int, default=64, help="rows per optimizer update")
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
    from train_backend.local.ppo import batch_log_probs_and_entropy, pack, pack_rows
    from train_backend.local.rollout import make_responder
    from train_backend.local.tree import play_tree_step
    from train_backend.local.update import _micro_batches
    from train_backend.pretrain.build import (
        SELFPLAY_START,
        SELFPLAY_START_NAME,
        ensure_pretrained_tiny_model,
    )

    torch.set_num_threads(1)
    model_dir = args.model or ensure_pretrained_tiny_model(SELFPLAY_START, name=SELFPLAY_START_NAME)
    policy = load_policy(model_dir)
    responder = make_responder(
        policy, Sampling(temperature=1.0), generator=torch.Generator().manual_seed(0),
        max_new_tokens=96, max_context_tokens=2048, keep_tokens=True,
    )  # fmt: skip
    rollout = asyncio.run(
        play_tree_step(
            responder, [get_game("kuhn_poker")], step=1, run_seed=0, games_per_step=args.games,
            tree=TreeSettings(branches=args.branches, all_actions=True),
            options=EpisodeOptions(prompt_style="compact"),
        )
    )  # fmt: skip
    samples = [s for s in rollout.samples if s.completion_ids]
    order = torch.randperm(len(samples), generator=torch.Generator().manual_seed(0)).tolist()
    minibatches = [order[i : i + args.minibatch] for i in range(0, len(order), args.minibatch)]
    chunks = [chunk for batch in minibatches for chunk in _micro_batches(batch, samples)]
    rows = sum(len(chunk) for chunk in chunks)
    prompts_run = sum(len({tuple(samples[i].prompt_ids) for i in chunk}) for chunk in chunks)

    def forward_backward(shared: bool) -> float:
        started = time.perf_counter()
        for chunk in chunks:
            packer = pack_rows if shared else pack
            batch = packer(
                [samples[i].prompt_ids for i in chunk],
                [samples[i].completion_ids for i in chunk],
                policy.pad_id,
            )
            log_probs, _ = batch_log_probs_and_entropy(policy.model, batch, 1.0, with_entropy=False)
            (log_probs * batch.mask).sum().backward()
        policy.model.zero_grad(set_to_none=True)
        return time.perf_counter() - started

    forward_backward(True)  # warm-up
    ratios, plain_times, shared_times = [], [], []
    for repeat in range(args.repeats):
        plain_times.append(forward_backward(False))
        shared_times.append(forward_backward(True))
        ratios.append(shared_times[-1] / plain_times[-1])
        print(f"pair {repeat + 1}: plain {plain_times[-1]:.2f} s, shared {shared_times[-1]:.2f} s")
    report(
        "shared_over_plain_update_s",
        statistics.median(ratios),
        TARGET,
        plain_s=round(statistics.median(plain_times), 2),
        shared_s=round(statistics.median(shared_times), 2),
        rows=rows,
        prompts_run=prompts_run,
        branches=args.branches,
        games=args.games,
    )


if __name__ == "__main__":
    main()
