"""Rollout speed of the CPU trainer against what the model's size allows on this CPU.

Side by side, in one process and one torch thread, on the same prompts (Kuhn compact prompts of
the format-pre-trained tiny model):

- decode: `generate_batch` (the trainer's sampler: KV cache, batch of `--batch` rows) generating
  `--new-tokens` tokens per row, tokens per second;
- ceiling: one teacher-forced forward pass over the same rows with those tokens appended: the
  same tokens processed (prompts and replies), in one call instead of one call per new token, so
  it is what the model's arithmetic allows here; its rate is the new tokens over that time (a
  decoder cannot produce the replies faster than it can score the whole sequences once).

The result is decode / ceiling (target >= 0.6, issue 24: the rest is the per-token loop of a
~1M-parameter model, where each step is tiny). Also printed: the
parameter count and the implied FLOP rate of the ceiling (2 x parameters per processed token).

Run: .venv/bin/python bench/rollout_speed.py [--batch 64] [--new-tokens 32] [--repeats 3]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import DryRun, add_dry_run, game_specs, report, run_dry, start_model

TARGET = 0.6


def dry_run(dry: DryRun, args: argparse.Namespace) -> None:
    """The model folder, and Kuhn's compact prompts of every information state (not encoded:
    that needs the model's tokenizer)."""
    from core.errors import MarsError
    from games.infostates import information_states, render_prompt
    from train_backend.pretrain.build import SELFPLAY_START_NAME

    if min(args.batch, args.new_tokens, args.repeats) < 1:
        raise MarsError("--batch, --new-tokens and --repeats must be at least 1")
    start_model(dry, SELFPLAY_START_NAME, args.model)
    (spec,) = game_specs(dry, ["kuhn_poker"])
    states = information_states(spec)
    for info in states:
        render_prompt(spec, info.history, style="compact")
    dry.count("prompt", len(states))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--model", help="model folder (default: the demo's starting model)")
    add_dry_run(parser)
    args = parser.parse_args()
    if args.dry_run:
        run_dry(lambda dry: dry_run(dry, args))
        return

    import torch

    from core.batcher import Request, Sampling, generate_batch
    from core.causal_lm import load_policy
    from games.infostates import information_states, render_prompt
    from games.spec import get_game
    from train_backend.local.ppo import pack
    from train_backend.pretrain.build import (
        SELFPLAY_START,
        SELFPLAY_START_NAME,
        ensure_pretrained_tiny_model,
    )

    torch.set_num_threads(1)
    model = args.model or ensure_pretrained_tiny_model(SELFPLAY_START, name=SELFPLAY_START_NAME)
    policy = load_policy(model)
    spec = get_game("kuhn_poker")
    prompts = [
        policy.encode_chat(render_prompt(spec, info.history, style="compact"))
        for info in information_states(spec)
    ]
    rows = [prompts[i % len(prompts)] for i in range(args.batch)]
    parameters = sum(p.numel() for p in policy.model.parameters())

    decode_rates, ceiling_rates = [], []
    for repeat in range(args.repeats):
        generator = torch.Generator().manual_seed(repeat)
        requests = [Request(prompt, args.new_tokens) for prompt in rows]
        started = time.perf_counter()
        outs = generate_batch(policy, requests, Sampling(temperature=1.0), generator)
        seconds = time.perf_counter() - started
        generated = sum(len(out.completion_ids) for out in outs)
        decode_rates.append(generated / seconds)
        # The same rows, completions padded to the full length: one forward pass scores them all.
        completions = [
            (out.completion_ids + [policy.pad_id] * args.new_tokens)[: args.new_tokens]
            for out in outs
        ]
        batch = pack(rows, completions, policy.pad_id)
        with torch.no_grad():
            started = time.perf_counter()
            policy.model(
                input_ids=batch.input_ids,
                attention_mask=batch.attention_mask,
                position_ids=batch.position_ids,
                use_cache=False,
                logits_to_keep=batch.keep + 1,
            )
            seconds = time.perf_counter() - started
        ceiling_rates.append(args.batch * args.new_tokens / seconds)
        processed_per_s = int(batch.attention_mask.sum()) / seconds

    decode = sorted(decode_rates)[len(decode_rates) // 2]
    ceiling = sorted(ceiling_rates)[len(ceiling_rates) // 2]
    print(
        f"model {model}: {parameters:,} parameters; batch {args.batch}, "
        f"{args.new_tokens} new tokens per row, {len(prompts)} Kuhn prompts"
    )
    print(f"decode (generate_batch): {decode:,.0f} tokens/s   (runs: {decode_rates})")
    print(f"ceiling (one forward):   {ceiling:,.0f} tokens/s   (runs: {ceiling_rates})")
    rate = 2 * parameters * processed_per_s / 1e9
    print(f"implied arithmetic rate of the ceiling (last run): {rate:.2f} GFLOP/s")
    report(
        "decode_over_forward_ceiling",
        decode / ceiling,
        TARGET,
        lower_is_better=False,
        decode_tokens_per_s=round(decode),
        ceiling_tokens_per_s=round(ceiling),
        parameters=parameters,
        batch=args.batch,
    )


if __name__ == "__main__":
    main()
