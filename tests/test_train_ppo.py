"""The PPO-clip loss of the local trainer on hand-made tensors, with the numbers worked by hand."""

from __future__ import annotations

import math

import pytest
import torch

from train_backend.local.ppo import (
    SharedPromptBatch,
    batch_log_probs_and_entropy,
    k3_kl,
    pack,
    pack_rows,
    pack_shared,
    ppo_loss,
)
from train_backend.local.rollout import TurnSample


def _one_token(ratio: float, advantage: float, **kwargs: float | None) -> float:
    log_probs = torch.tensor([[math.log(ratio)]])
    terms = ppo_loss(
        log_probs,
        torch.zeros(1, 1),
        torch.tensor([advantage]),
        torch.ones(1, 1),
        **kwargs,  # type: ignore[arg-type]
    )
    return float(terms.loss)


@pytest.mark.parametrize(
    ("ratio", "advantage", "expected"),
    [
        (1.5, 1.0, -1.2),  # A > 0, ratio above 1 + eps: the gain is capped at (1 + eps) A
        (0.5, 1.0, -0.5),  # A > 0, ratio below 1 - eps: the pessimistic (unclipped) term
        (0.5, -1.0, 0.8),  # A < 0, ratio below 1 - eps: capped at (1 - eps) |A|
        (1.5, -1.0, 1.5),  # A < 0, ratio above 1 + eps: the unclipped, larger loss
        (1.1, 2.0, -2.2),  # inside the clip range: -A r
    ],
)
def test_clipped_objective_by_hand(ratio: float, advantage: float, expected: float) -> None:
    assert _one_token(ratio, advantage, clip_ratio=0.2) == pytest.approx(expected, abs=1e-6)


def test_dual_clip_bounds_negative_advantage_only() -> None:
    # A = -1, ratio 5: plain PPO gives max(5, 1.2) = 5; the dual clip c = 3 bounds it at 3.
    assert _one_token(5.0, -1.0, clip_ratio=0.2) == pytest.approx(5.0, abs=1e-5)
    assert _one_token(5.0, -1.0, clip_ratio=0.2, dual_clip=3.0) == pytest.approx(3.0, abs=1e-6)
    # Below the bound the dual clip changes nothing; positive advantages are never touched.
    assert _one_token(2.0, -1.0, clip_ratio=0.2, dual_clip=3.0) == pytest.approx(2.0, abs=1e-6)
    assert _one_token(5.0, 1.0, clip_ratio=0.2, dual_clip=3.0) == pytest.approx(-1.2, abs=1e-6)


def test_clip_fraction_counts_clipped_tokens() -> None:
    # One token per sequence: ratio 1.5 with A = +1 (clipped), 1.0 (not), 0.5 with A = -1
    # (clipped), 1.1 (inside the range).
    log_probs = torch.log(torch.tensor([[1.5], [1.0], [0.5], [1.1]]))
    terms = ppo_loss(
        log_probs,
        torch.zeros(4, 1),
        torch.tensor([1.0, 1.0, -1.0, 1.0]),
        torch.ones(4, 1),
        clip_ratio=0.2,
    )
    assert terms.clip_frac_tokens == 2.0
    assert terms.tokens == 4.0


def test_token_mean_per_sequence_then_mean_over_sequences() -> None:
    # Ratio 1 everywhere, so each token's loss is -A. Sequence 1: one token with A = -1 (loss 1).
    # Sequence 2: three tokens with A = 0 (loss 0) and one padded position that must not count.
    log_probs = torch.zeros(2, 4)
    mask = torch.tensor([[0.0, 0.0, 0.0, 1.0], [0.0, 1.0, 1.0, 1.0]])
    advantages = torch.tensor([-1.0, 0.0])
    terms = ppo_loss(log_probs, log_probs.clone(), advantages, mask)
    # Per sequence: 1 and 0, mean 0.5 (a plain token mean over the batch would give 0.25).
    assert float(terms.loss) == pytest.approx(0.5)
    assert terms.pg_loss == pytest.approx(0.5)

    # Split into micro-batches of one sequence each, dividing by the minibatch size: same total.
    parts = [
        ppo_loss(
            log_probs[i : i + 1],
            log_probs[i : i + 1],
            advantages[i : i + 1],
            mask[i : i + 1],
            num_sequences=2,
        )
        for i in range(2)
    ]
    assert sum(float(p.loss) for p in parts) == pytest.approx(0.5)


def test_per_token_advantages_and_gradient_direction() -> None:
    # d loss / d logp_t = -A_t r_t / (tokens in the sequence) / B for unclipped tokens.
    log_probs = torch.zeros(1, 2, requires_grad=True)
    terms = ppo_loss(log_probs, torch.zeros(1, 2), torch.tensor([[2.0, -1.0]]), torch.ones(1, 2))
    terms.loss.backward()
    assert log_probs.grad is not None
    assert log_probs.grad[0].tolist() == pytest.approx([-1.0, 0.5])


def test_k3_kl_by_hand() -> None:
    # pi = 0.5, ref = 0.25: log(ref/pi) = -ln 2; k3 = 0.5 - (-ln 2) - 1 = ln 2 - 0.5.
    expected = math.log(2.0) - 0.5
    value = k3_kl(torch.tensor([[math.log(0.5)]]), torch.tensor([[math.log(0.25)]]))
    assert float(value) == pytest.approx(expected, abs=1e-6)
    # Equal distributions: 0. The estimate is never negative.
    assert float(k3_kl(torch.tensor([[-1.0]]), torch.tensor([[-1.0]]))) == pytest.approx(0.0)

    # In the loss: A = 0, so the loss is kl_coef * k3 only; the reported KL is k3 itself.
    terms = ppo_loss(
        torch.tensor([[math.log(0.5)]]),
        torch.tensor([[math.log(0.5)]]),
        torch.tensor([0.0]),
        torch.ones(1, 1),
        ref_log_probs=torch.tensor([[math.log(0.25)]]),
        kl_coef=0.2,
    )
    assert float(terms.loss) == pytest.approx(0.2 * expected, abs=1e-6)
    assert terms.kl == pytest.approx(expected, abs=1e-6)


def test_k3_kl_is_reported_but_not_added_when_its_weight_is_zero() -> None:
    terms = ppo_loss(
        torch.tensor([[math.log(0.5)]]),
        torch.tensor([[math.log(0.5)]]),
        torch.tensor([1.0]),
        torch.ones(1, 1),
        ref_log_probs=torch.tensor([[math.log(0.25)]]),
        kl_coef=0.0,
    )
    assert float(terms.loss) == pytest.approx(-1.0)
    assert terms.kl == pytest.approx(math.log(2.0) - 0.5, abs=1e-6)


def test_pack_right_aligns_completions_to_the_predicting_columns() -> None:
    batch = pack([[10, 11, 12], [20]], [[13, 14], [21, 22, 23]], pad_id=0)
    assert batch.keep == 3
    # Left-padded sequences ending in the last column.
    assert batch.input_ids.tolist() == [[10, 11, 12, 13, 14], [0, 20, 21, 22, 23]]
    assert batch.attention_mask.tolist() == [[1, 1, 1, 1, 1], [0, 1, 1, 1, 1]]
    assert batch.position_ids.tolist() == [[0, 1, 2, 3, 4], [0, 0, 1, 2, 3]]
    assert batch.targets.tolist() == [[0, 13, 14], [21, 22, 23]]
    assert batch.mask.tolist() == [[0.0, 1.0, 1.0], [1.0, 1.0, 1.0]]


def test_pack_shared_stores_each_prompt_once_and_left_pads_completions() -> None:
    batch = pack_shared([[10, 11], [20], [10, 11]], [[12], [21, 22], [13, 14, 15]], pad_id=0)
    assert batch.prompt_ids.tolist() == [[10, 11], [0, 20]]
    assert batch.prompt_of.tolist() == [0, 1, 0]
    assert batch.completion_ids.tolist() == [[0, 0, 12], [0, 21, 22], [13, 14, 15]]
    assert batch.mask.tolist() == [[0.0, 0.0, 1.0], [0.0, 1.0, 1.0], [1.0, 1.0, 1.0]]
    assert batch.keep == 3


def test_pack_rows_shares_only_when_a_prompt_repeats() -> None:
    assert isinstance(pack_rows([[1, 2], [1, 2]], [[3], [4]], pad_id=0), SharedPromptBatch)
    assert not isinstance(pack_rows([[1, 2], [1, 3]], [[3], [4]], pad_id=0), SharedPromptBatch)


def _small_model() -> torch.nn.Module:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=64,
    )  # fmt: skip
    return Qwen3ForCausalLM(config).eval()


def test_a_shared_prompt_gives_the_same_log_probs_entropy_and_gradients() -> None:
    model = _small_model()
    distinct = [[5, 6, 7, 8, 9, 10, 11], [12, 13, 14], [15, 16, 17, 18, 19]]
    prompts = [distinct[i] for i in (0, 0, 1, 2, 1, 0, 2)]
    completions = [[20, 21, 22], [23], [24, 25, 26, 27, 28], [29, 30], [31, 32, 33], [34], [35]]
    plain, shared = pack(prompts, completions, 0), pack_shared(prompts, completions, 0)
    assert shared.prompt_ids.shape[0] == 3 and torch.equal(plain.mask, shared.mask)
    results = []
    for batch in (plain, shared):
        model.zero_grad()
        log_probs, entropy = batch_log_probs_and_entropy(model, batch, temperature=0.7)
        (log_probs * batch.mask).sum().backward()
        grads = [p.grad.clone() for p in model.parameters()]
        results.append((log_probs.detach(), entropy.detach(), grads))
    (lp1, h1, g1), (lp2, h2, g2) = results
    where = plain.mask.bool()
    assert torch.allclose(lp1[where], lp2[where], atol=1e-5)
    assert torch.allclose(h1[where], h2[where], atol=1e-5)
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(g1, g2, strict=True))


def _sample(prompt: list[int], completion_length: int) -> TurnSample:
    return TurnSample("kuhn_poker", 0, 0, 0, prompt, [1] * completion_length)


def test_micro_batches_keep_replies_to_one_prompt_together_under_the_token_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from train_backend.local import update as trainer

    samples = [_sample([7] * 10, 5), _sample([8] * 30, 5), _sample([7] * 10, 9)]
    samples += [_sample([9] * 40, 2) for _ in range(5)]
    monkeypatch.setattr(trainer, "MICRO_BATCH_TOKENS", 130)
    chunks = trainer._micro_batches(list(range(len(samples))), samples)
    assert sorted(i for chunk in chunks for i in chunk) == list(range(len(samples)))
    home = {i: n for n, chunk in enumerate(chunks) for i in chunk}
    assert home[0] == home[2]  # siblings of one prompt
    for chunk in chunks:
        width = max(len(samples[i].prompt_ids) + len(samples[i].completion_ids) for i in chunk)
        assert width * len(chunk) <= 130  # the five siblings of 42 tokens are split in threes
    assert sorted(len(chunk) for chunk in chunks if 3 in chunk or 7 in chunk) == [2, 3]
