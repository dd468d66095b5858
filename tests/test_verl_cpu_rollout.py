"""The CPU device's rollout server (train_backend/verl/cpu_rollout.py) with the tiny model, in
process: a request with its own seed is answered the same whatever else the server batches."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("verl", reason="verl is not installed (make setup-verl)")

from core.tiny_model import ensure_tiny_model
from train_backend.verl import cpu_rollout

PROMPTS = [[11, 12, 13, 14, 15], [21, 22], [31, 32, 33, 34, 35, 36, 37, 38, 39], [41, 42, 43]]
SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_tokens": 24, "logprobs": True}


@pytest.fixture(scope="module")
def server() -> Any:
    config = SimpleNamespace(seed=0, max_model_len=256, prompt_length=128, response_length=64)
    # the class Ray would start as an actor: driven here without Ray, on this event loop
    server_class = cpu_rollout.CPURolloutServer.__ray_metadata__.modified_class
    return server_class(config, str(ensure_tiny_model()), 0)


def answers(server: Any, requests: list[tuple[list[int], int | None]]) -> list[list[int]]:
    async def all_at_once() -> list[Any]:
        calls = [
            server.generate(
                f"r{i}", prompt, {**SAMPLING, **({"seed": seed} if seed is not None else {})}
            )
            for i, (prompt, seed) in enumerate(requests)
        ]
        return list(await asyncio.gather(*calls))

    return [list(output.token_ids) for output in asyncio.run(all_at_once())]


def test_a_seeded_request_gets_the_same_reply_alone_or_among_others(server: Any) -> None:
    alone = answers(server, [(PROMPTS[0], 7)])[0]
    crowded = answers(server, [(PROMPTS[1], None), (PROMPTS[0], 7), (PROMPTS[2], 3)])
    reordered = answers(server, [(PROMPTS[2], 3), (PROMPTS[3], None), (PROMPTS[0], 7)])
    assert crowded[1] == alone and reordered[2] == alone
    assert crowded[2] == reordered[0]  # the other seeded request, in two crowds
    # the seed decides the reply: another seed, another sample (24 tokens at temperature 1)
    assert answers(server, [(PROMPTS[0], 8)])[0] != alone


def test_requests_without_a_seed_share_the_servers_generator(server: Any) -> None:
    first = answers(server, [(PROMPTS[0], None), (PROMPTS[0], None)])
    # one batch, one generator: the two rows of the same prompt draw different samples
    assert first[0] != first[1]
