"""An OpenAI-compatible server on a CPU for one base model and LoRA adapters on it.

    python -m core.adapter_server --base PATH --adapter NAME=PATH [...] \\
        --host 127.0.0.1 --port N [--served-base-name NAME]

The base is loaded once and every adapter onto it (PEFT's `load_adapter`); each adapter answers
under its own name, the base under `--served-base-name`. `GET /v1/models` lists them,
`POST /v1/chat/completions` answers (no streaming, n = 1). `core.servers.ModelServer` starts it
for an adapter checkpoint on a CPU (`core.adapter_serving`).

Every request's own settings apply: temperature (0 = greedy), top_p, top_k, max_tokens, stop
strings (the text is cut at the first), seed. Requests that arrive while a batch runs are batched
by (model, sampling settings, seed) with `batcher.generate_batch`, one batch at a time on one
thread, so the event loop keeps accepting requests and torch is never entered twice at once. A
sampled request's seed seeds its batch's generator: requests with the same settings and seed share
a batch, so a seeded reply is reproducible when it runs alone (as with `transformers serve`).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request

from core.errors import MarsError

if TYPE_CHECKING:
    from core.batcher import Generated, Sampling
    from core.causal_lm import Policy

DEFAULT_MAX_TOKENS = 512
MAX_BATCH = 32


class RequestError(Exception):
    """A request the server refuses: its HTTP status and one line."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class ChatRequest:
    model: str
    messages: list[dict[str, str]]
    sampling: Sampling
    max_tokens: int | None
    stop: tuple[str, ...]
    seed: int | None


def _number(body: dict[str, Any], key: str, default: float, low: float, high: float) -> float:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise RequestError(400, f"{key} must be a number in [{low:g}, {high:g}], got {value!r}")
    return float(value)


def _top_p(body: dict[str, Any]) -> float:
    value = _number(body, "top_p", 1.0, 0.0, 1.0)
    if value <= 0.0:
        raise RequestError(400, "top_p must be above 0 (at most 1)")
    return value


def _integer(body: dict[str, Any], key: str, low: int) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise RequestError(400, f"{key} must be an integer of at least {low}, got {value!r}")
    return value


def _content(value: Any) -> str:
    """A message's content: a string, or OpenAI's list of text parts."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(
        isinstance(part, dict) and part.get("type") == "text" for part in value
    ):
        return "".join(str(part.get("text") or "") for part in value)
    raise RequestError(400, "a message's content must be a string or a list of text parts")


def parse_request(body: Any) -> ChatRequest:
    """A chat-completion body as a `ChatRequest`; RequestError (400) for what cannot be served."""
    from core.batcher import Sampling

    if not isinstance(body, dict):
        raise RequestError(400, "the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise RequestError(400, "'model' is required")
    if body.get("stream"):
        raise RequestError(400, "streaming is not supported by this server; send stream: false")
    if body.get("n") not in (None, 1):
        raise RequestError(400, "only n = 1 is supported")
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise RequestError(400, "'messages' must be a non-empty list")
    messages = []
    for message in raw:
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise RequestError(400, "each message needs a 'role' and a 'content'")
        messages.append({"role": message["role"], "content": _content(message.get("content"))})
    top_k = _integer(body, "top_k", -1)
    max_tokens = _integer(body, "max_completion_tokens", 1)
    if max_tokens is None:
        max_tokens = _integer(body, "max_tokens", 1)
    stop = body.get("stop")
    stops = (stop,) if isinstance(stop, str) else tuple(stop or ())
    if not all(isinstance(s, str) and s for s in stops):
        raise RequestError(400, "stop must be a string or a list of non-empty strings")
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise RequestError(400, f"seed must be an integer, got {seed!r}")
    sampling = Sampling(
        temperature=_number(body, "temperature", 1.0, 0.0, 100.0),
        top_p=_top_p(body),
        top_k=max(top_k or 0, 0),
    )
    return ChatRequest(model, messages, sampling, max_tokens, stops, seed)


def cut_at_stop(text: str, stops: Sequence[str]) -> tuple[str, bool]:
    """`text` up to the first of `stops` (left out, as OpenAI does), and whether one was found."""
    found = [index for index in (text.find(stop) for stop in stops) if index >= 0]
    return (text[: min(found)], True) if found else (text, False)


class AdapterEngine:
    """The base model with every adapter loaded onto it; torch runs here only."""

    def __init__(self, base: str, adapters: dict[str, str], base_name: str) -> None:
        import dataclasses
        import warnings

        from core.causal_lm import load_policy

        policy = load_policy(base)
        model: Any = policy.model
        if adapters:
            from peft import PeftModel

            with warnings.catch_warnings():  # transformers' deprecation notes on what PEFT calls
                warnings.simplefilter("ignore", FutureWarning)
                for index, (name, folder) in enumerate(adapters.items()):
                    try:
                        if index == 0:
                            model = PeftModel.from_pretrained(model, folder, adapter_name=name)
                        else:
                            model.load_adapter(folder, adapter_name=name)
                    except (OSError, ValueError, KeyError, RuntimeError, TypeError) as exc:
                        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                        raise MarsError(
                            f"cannot load adapter {name} from {folder} onto {base}: "
                            f"{reason or type(exc).__name__}"
                        ) from exc
            model.eval()
        self.peft_model = model if adapters else None
        self.base_name = base_name
        self.policies: dict[str, Policy] = {base_name: dataclasses.replace(policy, model=model)}
        for name in adapters:
            self.policies[name] = dataclasses.replace(policy, model=model, adapter=name)
        self.context = int(getattr(policy.model.config, "max_position_embeddings", 0) or 0)

    @property
    def names(self) -> list[str]:
        return list(self.policies)

    def encode(self, request: ChatRequest) -> list[int]:
        try:
            return self.policies[request.model].encode_chat(request.messages)
        except Exception as exc:  # the chat template refuses the conversation
            raise RequestError(400, f"cannot apply the chat template: {exc}") from exc

    def generate(
        self, name: str, sampling: Sampling, seed: int | None, prompts: list[tuple[list[int], int]]
    ) -> list[Generated]:
        import torch

        from core.batcher import Request, generate_batch
        from core.causal_lm import activate

        policy = self.policies[name]
        requests = [Request(ids, limit) for ids, limit in prompts]
        generator = None
        if seed is not None and not sampling.greedy:
            generator = torch.Generator().manual_seed(seed)
        if policy.adapter is None and self.peft_model is not None:
            with self.peft_model.disable_adapter():  # the base: every adapter off
                return generate_batch(policy, requests, sampling, generator)
        activate(policy)
        return generate_batch(policy, requests, sampling, generator)

    def decode(self, ids: list[int]) -> str:
        return self.policies[self.base_name].decode(ids)


@dataclass
class _Job:
    key: tuple[str, Sampling, int | None]
    prompt_ids: list[int]
    max_tokens: int
    future: asyncio.Future[Generated] = field(repr=False)


class BatchScheduler:
    """Gathers the requests that arrive while a batch runs into the next batches, one per
    (model, sampling, seed), each run on the one torch thread."""

    def __init__(self, engine: AdapterEngine, max_batch: int = MAX_BATCH) -> None:
        self.engine = engine
        self.max_batch = max_batch
        self._pending: list[_Job] = []
        self._wake = asyncio.Event()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="torch")
        self._task: asyncio.Task[None] | None = None
        self.batches = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def submit(
        self, key: tuple[str, Sampling, int | None], prompt_ids: list[int], max_tokens: int
    ) -> Generated:
        future: asyncio.Future[Generated] = asyncio.get_running_loop().create_future()
        self._pending.append(_Job(key, prompt_ids, max_tokens, future))
        self._wake.set()
        return await future

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                jobs, self._pending = self._pending, []
                groups: dict[tuple[str, Sampling, int | None], list[_Job]] = {}
                for job in jobs:
                    groups.setdefault(job.key, []).append(job)
                for (name, sampling, seed), group in groups.items():
                    for start in range(0, len(group), self.max_batch):
                        chunk = group[start : start + self.max_batch]
                        prompts = [(job.prompt_ids, job.max_tokens) for job in chunk]
                        try:
                            results = await loop.run_in_executor(
                                self._executor, self.engine.generate, name, sampling, seed, prompts
                            )
                        except Exception as exc:
                            for job in chunk:
                                if not job.future.done():
                                    job.future.set_exception(exc)
                            continue
                        self.batches += 1
                        for job, result in zip(chunk, results, strict=True):
                            if not job.future.done():
                                job.future.set_result(result)


def _error(status: int, message: str) -> Any:
    from fastapi.responses import JSONResponse

    kind = "invalid_request_error" if status < 500 else "server_error"
    return JSONResponse(
        status_code=status,
        content={"error": {"message": message, "type": kind, "code": status}},
    )


def build_app(engine: AdapterEngine, *, default_max_tokens: int = DEFAULT_MAX_TOKENS) -> Any:
    """The FastAPI app answering for `engine`'s names."""
    scheduler = BatchScheduler(engine)
    created = int(time.time())

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        scheduler.start()
        yield
        await scheduler.stop()

    app = FastAPI(lifespan=lifespan)
    app.state.scheduler = scheduler

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        data = [
            {
                "id": name,
                "object": "model",
                "created": created,
                "owned_by": "mars",
                "root": policy.source,
                "parent": None if policy.adapter is None else engine.base_name,
            }
            for name, policy in engine.policies.items()
        ]
        return {"object": "list", "data": data}

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Any:
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "the request body is not JSON")
        try:
            chat = parse_request(body)
            if chat.model not in engine.policies:
                raise RequestError(
                    404,
                    f"model {chat.model!r} is not served here; served: " + ", ".join(engine.names),
                )
            prompt = engine.encode(chat)
            room = engine.context - len(prompt) if engine.context else None
            if room is not None and room < 1:
                raise RequestError(
                    400,
                    f"the prompt has {len(prompt)} tokens; the model's context is {engine.context}",
                )
            limit = chat.max_tokens or default_max_tokens
            limit = min(limit, room) if room is not None else limit
        except RequestError as exc:
            return _error(exc.status, exc.message)
        seed = None if chat.sampling.greedy else chat.seed
        try:
            result = await scheduler.submit((chat.model, chat.sampling, seed), prompt, limit)
        except Exception as exc:  # a failed batch: the client may retry
            return _error(500, f"generation failed: {type(exc).__name__}: {exc}")
        text, cut = cut_at_stop(engine.decode(result.completion_ids), chat.stop)
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": chat.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop" if cut or result.stopped else "length",
                }
            ],
            "usage": {
                "prompt_tokens": len(prompt),
                "completion_tokens": len(result.completion_ids),
                "total_tokens": len(prompt) + len(result.completion_ids),
            },
        }

    return app


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m core.adapter_server",
        description="Serve a base model and LoRA adapters on it, each under its own name.",
    )
    parser.add_argument("--base", required=True, help="The base model's folder.")
    parser.add_argument(
        "--adapter",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="An adapter checkpoint served as NAME (repeatable).",
    )
    parser.add_argument(
        "--served-base-name", default=None, help="The base's name (default: its folder's name)."
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument(
        "--default-max-tokens",
        type=int,
        default=DEFAULT_MAX_TOKENS,
        help="Reply length for a request that sends no max_tokens.",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    from core.adapter_serving import adapter_set, parse_adapter_options

    args = _parse_args(argv)
    try:
        adapters = parse_adapter_options(args.adapter)
        lora = adapter_set(args.base, adapters)
        if lora is not None and lora.default is not None:
            raise MarsError(f"--base {args.base} is an adapter; give its base model")
        base = lora.base if lora is not None else args.base
        base_name = args.served_base_name or Path(base).name
        if base_name in adapters:
            raise MarsError(f"adapter {base_name} has the base's name; rename one")
        engine = AdapterEngine(base, lora.adapters if lora else {}, base_name)
    except MarsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    import uvicorn

    app = build_app(engine, default_max_tokens=args.default_max_tokens)
    print(f"serving {', '.join(engine.names)} on http://{args.host}:{args.port}/v1", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="info", access_log=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
