"""Batched in-process generation: many games' pending turns become one left-padded forward pass.

`generate_batch` decodes a batch of prompts with a KV cache: prompts are left-padded so every row's
next token sits in the last column, positions count only real tokens, rows that have stopped are
dropped from the cache, and sampling (temperature, top-k, top-p, or greedy at temperature 0) draws
from a seeded `torch.Generator`, so a run is reproducible from its seed.

`MicroBatcher` is the asyncio side: each game's model seat awaits `submit(prompt_ids)`; the
batcher waits until the event loop has nothing else runnable (every live game is waiting on a
model reply, or has finished), then runs one `generate_batch` over all waiting prompts and hands
each game its own result. Waiting for quiescence rather than for a timer keeps the batches (and so
the sampled tokens) identical from run to run.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from core.causal_lm import Policy


@dataclass(frozen=True)
class Sampling:
    temperature: float = 1.0  # 0 = greedy
    top_p: float = 1.0
    top_k: int = 0  # 0 = no top-k cut

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


GREEDY = Sampling(temperature=0.0)


@dataclass(frozen=True)
class Request:
    prompt_ids: list[int]
    max_new_tokens: int


@dataclass(frozen=True)
class Generated:
    completion_ids: list[int]  # includes the stop token when one was produced
    stopped: bool  # True: ended on a stop token; False: hit max_new_tokens


def _filter_logits(logits: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    import torch

    logits = logits / sampling.temperature
    if sampling.top_k > 0 and sampling.top_k < logits.shape[-1]:
        kth = torch.topk(logits, sampling.top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if sampling.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        # Drop a token when the mass before it already reaches top_p (the first always stays).
        drop_sorted = (probs.cumsum(dim=-1) - probs) >= sampling.top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def _next_tokens(
    logits: torch.Tensor, sampling: Sampling, generator: torch.Generator | None
) -> torch.Tensor:
    import torch

    if sampling.greedy:
        return logits.argmax(dim=-1)
    probs = torch.softmax(_filter_logits(logits.float(), sampling), dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def cache_keyword(model: object) -> str:
    """The forward argument that takes a KV cache: `cache` in newer transformers, where the older
    `past_key_values` still works but prints a deprecation warning, else `past_key_values`."""
    inner = getattr(model, "get_base_model", None)  # a PEFT model forwards **kwargs on
    forward = type(inner() if inner else model).forward
    name = _CACHE_KEYWORDS.get(forward)
    if name is None:
        name = "cache" if "cache" in inspect.signature(forward).parameters else "past_key_values"
        _CACHE_KEYWORDS[forward] = name
    return name


_CACHE_KEYWORDS: dict[object, str] = {}


def generate_batch(
    policy: Policy,
    requests: Sequence[Request],
    sampling: Sampling,
    generator: torch.Generator | None = None,
) -> list[Generated]:
    """Decode all requests together; one result per request, in order."""
    import torch

    if not requests:
        return []
    if policy.adapter is not None:  # one base shared by several adapters: run this one's
        policy.model.set_adapter(policy.adapter)
    model, pad_id = policy.model, policy.pad_id
    width = max(len(r.prompt_ids) for r in requests)
    input_ids = torch.full((len(requests), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(requests), width), dtype=torch.long)
    for row, request in enumerate(requests):
        if request.prompt_ids:
            input_ids[row, width - len(request.prompt_ids) :] = torch.tensor(request.prompt_ids)
            attention[row, width - len(request.prompt_ids) :] = 1
    positions = (attention.cumsum(dim=1) - 1).clamp(min=0)
    limits = torch.tensor([r.max_new_tokens for r in requests])
    stops = torch.tensor(policy.stop_ids)
    outputs: list[list[int]] = [[] for _ in requests]
    stopped = [False] * len(requests)
    live = torch.arange(len(requests))  # request index of each row still decoding
    live = live[limits > 0]
    if len(live) == 0:
        return [Generated([], False) for _ in requests]
    input_ids, attention, positions = input_ids[live], attention[live], positions[live]
    limits = limits[live]

    from transformers import DynamicCache

    cache = DynamicCache()  # filled in place by each forward pass
    cache_arg = cache_keyword(model)
    with torch.inference_mode():
        out = model(
            input_ids=input_ids,
            attention_mask=attention,
            position_ids=positions,
            use_cache=True,
            logits_to_keep=1,
            **{cache_arg: cache},
        )
        last_position = positions[:, -1]
        produced = 0
        while True:
            tokens = _next_tokens(out.logits[:, -1, :], sampling, generator)
            produced += 1
            for row, token in zip(live.tolist(), tokens.tolist(), strict=True):
                outputs[row].append(token)
            ended = torch.isin(tokens, stops)
            for row in live[ended].tolist():
                stopped[row] = True
            finished = ended | (limits <= produced)
            if bool(finished.all()):
                break
            if bool(finished.any()):
                keep = (~finished).nonzero().squeeze(-1)
                cache.batch_select_indices(keep)
                live, tokens, attention = live[keep], tokens[keep], attention[keep]
                last_position, limits = last_position[keep], limits[keep]
            attention = torch.cat([attention, attention.new_ones((len(live), 1))], dim=1)
            last_position = last_position + 1
            out = model(
                input_ids=tokens.unsqueeze(-1),
                attention_mask=attention,
                position_ids=last_position.unsqueeze(-1),
                use_cache=True,
                **{cache_arg: cache},
            )
    return [Generated(ids, done) for ids, done in zip(outputs, stopped, strict=True)]


GenerateFn = Callable[[list[Request]], list[Generated]]


class MicroBatcher:
    """Gathers concurrent `submit` calls into batched `generate` calls (at most `max_batch` rows).

    `generate` runs synchronously on the event loop thread: while it runs no game can move anyway,
    since every live game is waiting for a reply.
    """

    def __init__(self, generate: GenerateFn, *, max_batch: int = 64) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self._generate = generate
        self.max_batch = max_batch
        self._pending: list[tuple[Request, asyncio.Future[Generated]]] = []
        self._flusher: asyncio.Task[None] | None = None
        self.calls = 0  # generate calls made
        self.rows = 0  # requests served

    async def submit(self, prompt_ids: list[int], max_new_tokens: int) -> Generated:
        future: asyncio.Future[Generated] = asyncio.get_running_loop().create_future()
        self._pending.append((Request(prompt_ids, max_new_tokens), future))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush_when_quiet())
        return await future

    async def _flush_when_quiet(self) -> None:
        # One loop pass lets every task woken by the last batch run up to its next await (its
        # next submit, or the end of its game); stop once a pass adds nothing.
        while True:
            seen = len(self._pending)
            await asyncio.sleep(0)
            if len(self._pending) == seen:
                break
        while self._pending:
            chunk, self._pending = self._pending[: self.max_batch], self._pending[self.max_batch :]
            futures = [future for _, future in chunk]
            try:
                results = self._generate([request for request, _ in chunk])
            except Exception as exc:
                for future in futures:
                    if not future.done():
                        future.set_exception(exc)
                continue
            self.calls += 1
            self.rows += len(chunk)
            for future, result in zip(futures, results, strict=True):
                if not future.done():  # its game may have been cancelled meanwhile
                    future.set_result(result)
