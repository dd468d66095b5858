"""Batched in-process generation and lockstep self-play on the embedded tiny model."""

from __future__ import annotations

import asyncio
import math

import pytest
import torch

from core.batcher import (
    GREEDY,
    Generated,
    MicroBatcher,
    Request,
    Sampling,
    _filter_logits,
    generate_batch,
)
from core.causal_lm import Policy, load_policy, resolve_model_path
from core.reasoning import split_reasoning
from games.engine import EpisodeOptions
from games.spec import get_game
from train_backend.local.ppo import pack, token_log_probs
from train_backend.local.rollout import StepRollout, make_responder, play_step


@pytest.fixture(scope="module")
def policy() -> Policy:
    torch.set_num_threads(1)
    return load_policy(resolve_model_path(None))


def _prompts(policy: Policy) -> list[list[int]]:
    chats = [
        "Tic-tac-toe: get 3 in a row.\nYou are X.\nLegal: <X(0,0)> <X(1,1)>\nReply.",
        "Kuhn poker.\nLegal: <PASS> <BET>",
        "Hanabi with a partner. Cards: R1 B2 ??. Information tokens: 3. Lives: 3. Legal: "
        "<Play card 1> <Discard card 2> <Reveal color R> <Reveal rank 1>. Reply with one.",
    ]
    return [policy.encode_chat([{"role": "user", "content": text}]) for text in chats]


async def test_concurrent_requests_make_one_batched_call() -> None:
    batches: list[list[Request]] = []

    def fake_generate(requests: list[Request]) -> list[Generated]:
        batches.append(requests)
        # Each result names its own prompt, so misrouting would show.
        return [Generated([*reversed(r.prompt_ids), r.max_new_tokens], True) for r in requests]

    batcher = MicroBatcher(fake_generate, max_batch=64)

    async def ask(index: int) -> Generated:
        await asyncio.sleep(0)  # start at different loop passes, as games do
        return await batcher.submit([index, index + 100], max_new_tokens=index)

    results = await asyncio.gather(*(ask(i) for i in range(7)))
    assert len(batches) == 1 and len(batches[0]) == 7
    assert [r.completion_ids for r in results] == [[i + 100, i, i] for i in range(7)]
    assert batcher.calls == 1 and batcher.rows == 7


async def test_batches_are_split_at_max_batch_and_errors_reach_every_caller() -> None:
    sizes: list[int] = []

    def fake_generate(requests: list[Request]) -> list[Generated]:
        sizes.append(len(requests))
        if any(r.prompt_ids == [-1] for r in requests):
            raise RuntimeError("boom")
        return [Generated(r.prompt_ids, True) for r in requests]

    batcher = MicroBatcher(fake_generate, max_batch=3)
    results = await asyncio.gather(*(batcher.submit([i], 4) for i in range(7)))
    assert sizes == [3, 3, 1]
    assert [r.completion_ids for r in results] == [[i] for i in range(7)]

    outcome = await asyncio.gather(
        batcher.submit([-1], 4), batcher.submit([5], 4), return_exceptions=True
    )
    assert all(isinstance(o, RuntimeError) for o in outcome)


def test_left_padded_batch_matches_one_prompt_at_a_time(policy: Policy) -> None:
    prompts = _prompts(policy)
    assert len({len(p) for p in prompts}) == 3  # different lengths, so padding happens
    alone = [generate_batch(policy, [Request(p, 12)], GREEDY)[0] for p in prompts]
    together = generate_batch(policy, [Request(p, 12) for p in prompts], GREEDY)
    assert [g.completion_ids for g in together] == [g.completion_ids for g in alone]
    assert all(len(g.completion_ids) <= 12 for g in together)
    # Per-row limits: a zero limit yields nothing, the others are unchanged.
    limited = generate_batch(
        policy, [Request(prompts[0], 0), Request(prompts[1], 12), Request(prompts[2], 3)], GREEDY
    )
    assert limited[0].completion_ids == [] and not limited[0].stopped
    assert limited[1].completion_ids == alone[1].completion_ids
    assert limited[2].completion_ids == alone[2].completion_ids[:3]


def test_stop_token_ends_a_row_and_is_kept(policy: Policy) -> None:
    prompts = _prompts(policy)
    results = generate_batch(
        policy,
        [Request(p, 40) for p in prompts * 4],
        Sampling(1.0),
        torch.Generator().manual_seed(3),
    )
    for result in results:
        stops = [t for t in result.completion_ids if t in policy.stop_ids]
        if result.stopped:
            assert stops == [result.completion_ids[-1]]
        else:
            assert not stops and len(result.completion_ids) == 40
    assert any(r.stopped for r in results)


def test_sampling_is_reproducible_from_the_generator(policy: Policy) -> None:
    requests = [Request(p, 10) for p in _prompts(policy)]

    def run(seed: int) -> list[list[int]]:
        generator = torch.Generator().manual_seed(seed)
        return [
            g.completion_ids for g in generate_batch(policy, requests, Sampling(1.0), generator)
        ]

    assert run(7) == run(7)
    assert run(7) != run(8)


def test_top_k_and_top_p_filters() -> None:
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    top2 = _filter_logits(logits, Sampling(1.0, top_k=2))
    assert torch.isfinite(top2).tolist() == [[True, True, False, False]]
    # top_p 0.7: 0.5 alone is short of it, 0.5 + 0.3 reaches it; the rest is cut.
    nucleus = _filter_logits(logits, Sampling(1.0, top_p=0.7))
    assert torch.isfinite(nucleus).tolist() == [[True, True, False, False]]
    nucleus = _filter_logits(logits, Sampling(1.0, top_p=0.4))
    assert torch.isfinite(nucleus).tolist() == [[True, False, False, False]]
    # Temperature divides the logits.
    hot = _filter_logits(logits, Sampling(2.0))
    assert hot[0, 0].item() == pytest.approx(math.log(0.5) / 2)


def test_training_log_probs_match_a_plain_forward(policy: Policy) -> None:
    prompts = _prompts(policy)
    completions = [
        g.completion_ids for g in generate_batch(policy, [Request(p, 8) for p in prompts], GREEDY)
    ]
    packed = pack(prompts, completions, policy.pad_id)
    with torch.no_grad():
        batched = token_log_probs(policy.model, packed)
        for row, (prompt, completion) in enumerate(zip(prompts, completions, strict=True)):
            logits = policy.model(torch.tensor([prompt + completion])).logits[0]
            plain = torch.log_softmax(logits, -1)
            expected = [plain[len(prompt) - 1 + j, t].item() for j, t in enumerate(completion)]
            got = batched[row, packed.keep - len(completion) :].tolist()
            assert got == pytest.approx(expected, abs=1e-4)


def test_lockstep_selfplay_step(policy: Policy) -> None:
    specs = [get_game("tic_tac_toe"), get_game("kuhn_poker")]

    def step() -> StepRollout:
        responder = make_responder(
            policy,
            Sampling(1.0),
            generator=torch.Generator().manual_seed(11),
            max_new_tokens=16,
            max_context_tokens=2048,
            keep_tokens=True,
        )
        return asyncio.run(
            play_step(
                responder,
                specs,
                step=3,
                run_seed=5,
                games_per_step=4,
                # Re-asks after invalid replies give every game several rounds of turns.
                options=EpisodeOptions(prompt_style="compact", invalid="retry:2"),
            )
        )

    rollout = step()
    # Two of each game; every game's first turn went into the same generate call.
    assert sorted((r["game"], r["seed"]) for r in rollout.records) == sorted(
        (game, 5 * 10_000_000 + 2 * 4 + j) for game in ("tic_tac_toe", "kuhn_poker") for j in (0, 1)
    )
    assert all(r["kind"] == "selfplay" and r["step"] == 3 for r in rollout.records)
    most_turns = max(sum(r["model_turns"]) for r in rollout.records)
    assert most_turns > 1
    assert rollout.generate_calls == most_turns  # lockstep: one call per round of turns
    assert (
        len(rollout.rows)
        == len(rollout.samples)
        == sum(sum(r["model_turns"]) for r in rollout.records)
    )
    replies = {
        (r["game"], r["seed"], t["seat"], t["turn"]): t for r in rollout.records for t in r["turns"]
    }
    for sample in rollout.samples:
        turn = replies[(sample.game, sample.episode, sample.seat, sample.turn)]
        assert turn["usage"]["completion_tokens"] == len(sample.completion_ids)
        assert turn["usage"]["prompt_tokens"] == len(sample.prompt_ids)
        text = split_reasoning(policy.decode(sample.completion_ids))
        assert text == (turn["reply"], turn["reasoning"])
    again = step()
    assert again.records == rollout.records  # seeded: the same games, token for token


def test_sampling_and_scoring_print_no_library_deprecation_warning(policy: Policy) -> None:
    """`make demo` once printed transformers' `past_key_values` deprecation on every rollout:
    the KV cache goes through the argument the installed version asks for."""
    import warnings

    prompts = _prompts(policy)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        generated = generate_batch(policy, [Request(p, 6) for p in prompts], Sampling(1.0))
        batch = pack(prompts, [g.completion_ids for g in generated], policy.pad_id)
        token_log_probs(policy.model, batch)
    noisy = [
        f"{w.category.__name__}: {w.message}"
        for w in caught
        if issubclass(w.category, DeprecationWarning | FutureWarning)
    ]
    assert noisy == []
