"""The one way to talk to a model: every evaluation call (MAS agents, AutoGen, game players, judges)
goes through `Endpoint.complete`.

An endpoint is an OpenAI-compatible base URL (or several, comma-separated: replicas of one model)
plus a model name. Requests go to the replica with the fewest in flight; one that fails to
answer (a dropped connection, a timeout, a 5xx) is set aside for a while and the request is
retried at once on another; usage and latency are counted per replica. It owns one shared
`openai.AsyncOpenAI` client (a client per call costs ~30 ms of CPU; built on first use, since
plain-http URLs never need it and importing `openai` costs most of a second), an asyncio
semaphore that bounds requests in flight, a hard wall-clock timeout per attempt, and bounded
retries with exponential backoff and full jitter on 429, 5xx, timeouts, dropped connections and
malformed bodies. Any other 4xx fails at once. It never returns None: it returns a `Completion`
or raises `EndpointError` carrying the number of retries spent. How a failed exchange becomes a
retry or an error is `core.endpoint_errors`.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
import time
import urllib.parse
import zlib
from collections.abc import Awaitable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import httpx2
from pydantic import BaseModel, Field

from core.endpoint_errors import (
    Retryable,
    header,
    retry_after_s,
    short,
    status_error,
)
from core.errors import EndpointError, MarsError
from core.http_transport import JSONPoster, LeanHTTPTransport, lean_async_client
from core.reasoning import split_reasoning
from core.response_cache import ResponseCache, cache_key
from core.usage import UsageLedger

if TYPE_CHECKING:
    import openai

Message = dict[str, str]


class GenerationConfig(BaseModel):
    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = 512
    seed: int | None = None
    # Sent only when set: top_k is not an OpenAI field (vLLM and the adapter server take it;
    # `transformers serve` refuses it), stop is.
    top_k: int | None = None
    stop: list[str] | None = None

    def request_fields(self) -> dict[str, Any]:
        # Only standard fields: `transformers serve` answers 422 to anything it does not know.
        fields: dict[str, Any] = {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_tokens,
        }
        if self.seed is not None:
            fields["seed"] = self.seed
        if self.top_k is not None:
            fields["top_k"] = self.top_k
        if self.stop:
            fields["stop"] = list(self.stop)
        return fields

    def cache_fields(self) -> dict[str, Any]:
        """What the response cache keys on: the fields, less the optional ones left unset (so
        keys made before they existed still match)."""
        fields = self.model_dump()
        for name in ("top_k", "stop"):
            if fields[name] is None:
                del fields[name]
        return fields


def request_seed(seed: int, epoch: int, role: str, messages: list[Message]) -> int:
    """The `seed` a request carries: the run's seed mixed with the epoch, the agent and the prompt.

    One fixed seed on every request would make a server that honours it (vLLM) draw the same
    sample for the same prompt: every epoch of a question, every debater's first answer, every
    arena game's first move alike. Mixed, the draws differ and a rerun still repeats them.
    """
    prompt = zlib.crc32(f"{epoch}\0{role}\0{messages!r}".encode())
    return (seed * 1_000_003 + prompt) % 2**31


def replica_urls(base_url: str) -> list[str]:
    """The URLs in `base_url`: one, or several comma-separated replicas of one model. A URL
    that is not http(s)://HOST[:PORT][/PATH] is refused in one line."""
    urls = [url.strip() for url in base_url.split(",")]
    for url in urls:
        try:
            parts = urllib.parse.urlsplit(url)
            port_ok = parts.port is None or parts.port > 0
        except ValueError:
            parts, port_ok = None, False
        if (
            parts is None
            or parts.scheme not in ("http", "https")
            or not parts.hostname
            or not port_ok
            or any(char.isspace() for char in url)
        ):
            shown = url or "(empty)"
            raise MarsError(
                f"--base-url: {shown!r} is not a URL like http://HOST:PORT/v1 (replicas of one "
                "model: URL1,URL2)"
            )
    repeated = sorted({url for url in urls if urls.count(url) > 1})
    if repeated:
        raise MarsError(f"--base-url names {repeated[0]} twice")
    return urls


class EndpointConfig(BaseModel):
    base_url: str  # one URL, or several comma-separated replicas of the same model
    model: str
    api_key_env: str = "OPENAI_API_KEY"
    concurrency: int = Field(32, ge=1)
    timeout_s: float = Field(120.0, gt=0)
    max_retries: int = Field(4, ge=0)
    backoff_base_s: float = Field(0.5, ge=0)
    backoff_max_s: float = Field(8.0, ge=0)
    cache_path: str | None = None
    # What the cache key calls "the model": defaults to the model name; servers of a local
    # checkpoint set it to a fingerprint of the weights so a retrained folder misses the cache.
    model_identity: str | None = None
    # The temperature / top_p the server applies to every request whatever it asks (transformers
    # serve with continuous batching); a request asking other settings is refused, not sent.
    pinned_sampling: dict[str, float] | None = None

    def public(self) -> dict[str, Any]:
        """The config as it may be written to run.json (no secrets: only the env var's name)."""
        return self.model_dump()


class Usage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int | None = None


class Completion(BaseModel):
    text: str
    reasoning: str = ""
    finish_reason: str | None = None
    usage: Usage = Field(default_factory=Usage)
    latency_s: float = 0.0
    retries: int = 0
    cached: bool = False


async def _within(seconds: float, awaitable: Awaitable[Completion]) -> Completion:
    """A hard wall-clock deadline; `asyncio.timeout` (3.11+) avoids wait_for's extra task."""
    if sys.version_info >= (3, 11):
        async with asyncio.timeout(seconds):
            return await awaitable
    return await asyncio.wait_for(awaitable, seconds)  # pragma: no cover - Python 3.10


def _lean_poster(base_url: str, api_key: str, transport: LeanHTTPTransport) -> JSONPoster | None:
    """For a plain-http base URL, a poster with the client's auth; None for https."""
    url = f"{base_url.rstrip('/')}/chat/completions"
    if not url.startswith("http://"):
        return None
    headers = {"Accept": "application/json", "Authorization": f"Bearer {api_key}"}
    return JSONPoster(url, headers, transport)


@dataclass
class ReplicaUsage:
    calls: int = 0
    failures: int = 0  # attempts that failed here (each retried, here or elsewhere)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0


@dataclass
class _Replica:
    url: str
    poster: JSONPoster | None
    sdk_client: openai.AsyncOpenAI | None = None
    in_flight: int = 0
    sent: int = 0
    set_aside_until: float = 0.0  # monotonic time; a replica that just failed waits till then
    failures_in_a_row: int = 0
    usage: ReplicaUsage = field(default_factory=ReplicaUsage)


class Endpoint:
    # A replica that failed is not picked again for this long (doubling with each failure in a
    # row, up to the cap) while another is up.
    SET_ASIDE_S = 2.0
    SET_ASIDE_MAX_S = 30.0

    def __init__(self, config: EndpointConfig, *, rng: random.Random | None = None) -> None:
        self.config = config
        self.ledger = UsageLedger()
        self._rng = rng or random.Random()
        self._semaphore = asyncio.Semaphore(config.concurrency)
        self._transport = LeanHTTPTransport()
        self._api_key = os.environ.get(config.api_key_env) or "EMPTY"
        self._replicas = [
            _Replica(url, _lean_poster(url, self._api_key, self._transport))
            for url in replica_urls(config.base_url)
        ]
        self._cache = ResponseCache(config.cache_path) if config.cache_path else None

    @property
    def _client(self) -> openai.AsyncOpenAI:
        """The first replica's SDK client (https URLs, redirects)."""
        return self._sdk_client(self._replicas[0])

    def _sdk_client(self, replica: _Replica) -> openai.AsyncOpenAI:
        """The SDK client of one replica, sharing the lean path's connections."""
        if replica.sdk_client is None:
            import openai

            replica.sdk_client = openai.AsyncOpenAI(
                base_url=replica.url,
                api_key=self._api_key,
                max_retries=0,
                timeout=self.config.timeout_s,
                http_client=lean_async_client(self.config.timeout_s, self._transport),
            )
        return replica.sdk_client

    def replica_usage(self) -> dict[str, dict[str, float]]:
        """Per replica URL: calls answered, failed attempts, tokens and summed latency."""
        return {replica.url: asdict(replica.usage) for replica in self._replicas}

    def _pick_replica(self) -> _Replica:
        """The replica with the fewest requests in flight among those not set aside (the one
        sent the fewest on a tie); every one set aside: the one whose wait ends first."""
        if len(self._replicas) == 1:
            return self._replicas[0]
        now = time.monotonic()
        up = [replica for replica in self._replicas if replica.set_aside_until <= now]
        if not up:
            return min(self._replicas, key=lambda replica: replica.set_aside_until)
        return min(up, key=lambda replica: (replica.in_flight, replica.sent))

    def _another_is_up(self, failed: _Replica) -> bool:
        now = time.monotonic()
        return any(r is not failed and r.set_aside_until <= now for r in self._replicas)

    def _set_aside(self, replica: _Replica) -> None:
        replica.usage.failures += 1
        replica.failures_in_a_row += 1
        wait = min(self.SET_ASIDE_MAX_S, self.SET_ASIDE_S * 2 ** (replica.failures_in_a_row - 1))
        replica.set_aside_until = time.monotonic() + wait

    @property
    def model_identity(self) -> str:
        return self.config.model_identity or self.config.model

    async def complete(
        self,
        messages: list[Message],
        *,
        role: str = "default",
        gen: GenerationConfig | None = None,
        epoch: int = 0,
    ) -> Completion:
        gen = gen or GenerationConfig()
        if self.config.pinned_sampling is not None and (refusal := self._pinned_refusal(gen)):
            self.ledger.add_error(role, retries=0)
            raise EndpointError(refusal, retries=0)
        key = None
        if self._cache is not None:
            key = cache_key(self.model_identity, messages, gen.cache_fields(), epoch)
            hit = self._cache.get(key)
            if hit is not None:
                completion = Completion.model_validate(hit).model_copy(update={"cached": True})
                self.ledger.add(role, completion)
                return completion
        seed = None if gen.seed is None else request_seed(gen.seed, epoch, role, messages)
        try:
            completion = await self._complete_with_retries(messages, gen, seed)
        except EndpointError as exc:
            self.ledger.add_error(role, retries=exc.retries)
            raise
        self.ledger.add(role, completion)
        if self._cache is not None and key is not None:
            self._cache.put(key, completion.model_dump())
        return completion

    def _pinned_refusal(self, gen: GenerationConfig) -> str | None:
        """Why a request must not be sent to a server that would replace its sampling settings."""
        pinned = self.config.pinned_sampling or {}
        temperature, top_p = pinned.get("temperature", 0.0), pinned.get("top_p", 1.0)
        asked = (0.0, 1.0) if gen.temperature == 0 else (gen.temperature, gen.top_p)
        if asked == ((0.0, 1.0) if temperature == 0 else (temperature, top_p)):
            return None
        return (
            f"the server samples every request at temperature {temperature:g}, top_p {top_p:g} "
            f"(fixed by its first request under continuous batching); this request asks "
            f"temperature {gen.temperature:g}, top_p {gen.top_p:g}"
        )

    async def _complete_with_retries(
        self, messages: list[Message], gen: GenerationConfig, seed: int | None = None
    ) -> Completion:
        retries = 0
        while True:
            started = time.perf_counter()
            replica: _Replica | None = None
            try:
                async with self._semaphore:
                    replica = self._pick_replica()
                    replica.in_flight += 1
                    replica.sent += 1
                    started = time.perf_counter()
                    try:
                        completion = await _within(
                            self.config.timeout_s,
                            self._request_once(replica, messages, gen, seed),
                        )
                    finally:
                        replica.in_flight -= 1
            except Retryable as exc:
                failure, status, wait_hint = str(exc), exc.status, exc.wait_s
            except asyncio.TimeoutError:
                failure, status, wait_hint = (
                    f"timed out after {self.config.timeout_s:g}s",
                    None,
                    None,
                )
            else:
                completion.latency_s = time.perf_counter() - started
                completion.retries = retries
                _count(replica, completion)
                # The slot is free: let the request waiting for it go out before this reply is
                # graded and recorded (a reply's processing would otherwise delay the next
                # request, and at 64 in flight those delays pile up wave after wave).
                await asyncio.sleep(0)
                return completion
            if retries >= self.config.max_retries:
                raise EndpointError(
                    f"{failure} (gave up after {retries} retries)", retries=retries, status=status
                )
            failover = False
            if replica is not None and len(self._replicas) > 1 and status != 429:
                self._set_aside(replica)
                failover = self._another_is_up(replica)
            if not failover:  # another replica up: retry there at once
                await asyncio.sleep(self._backoff_s(retries, wait_hint))
            retries += 1

    def _backoff_s(self, attempt: int, retry_after: float | None) -> float:
        cap = min(self.config.backoff_max_s, self.config.backoff_base_s * 2**attempt)
        if retry_after is not None:
            return min(retry_after, self.config.backoff_max_s)
        return self._rng.uniform(0, cap)  # full jitter

    async def _request_once(
        self,
        replica: _Replica,
        messages: list[Message],
        gen: GenerationConfig,
        seed: int | None = None,
    ) -> Completion:
        body = {"model": self.config.model, "messages": messages, **gen.request_fields()}
        if seed is not None:
            body["seed"] = seed
        if replica.poster is not None:
            return await self._request_lean(replica, replica.poster, body)
        return await self._request_sdk(replica, body)

    async def _request_lean(
        self, replica: _Replica, poster: JSONPoster, body: dict[str, Any]
    ) -> Completion:
        """The SDK path's exchange and outcomes (errors, retries, messages), minus its CPU."""
        try:
            status, headers, content = await poster.post(json.dumps(body).encode())
        except httpx2.TimeoutException as exc:  # as the SDK maps transport errors
            raise Retryable("APITimeoutError: Request timed out.") from exc
        except Exception as exc:
            raise Retryable("APIConnectionError: Connection error.") from exc
        if 300 <= status < 400:  # a redirect: let the SDK's client follow it
            return await self._request_sdk(replica, body)
        if status >= 400:
            raise status_error(replica.url, status, headers, content)
        content_type = header(headers, b"content-type") or b"*"
        if not content_type.split(b";")[0].strip().endswith(b"json"):
            # The SDK hands back the text, which is not a chat-completion body.
            return _to_completion(content.decode("utf-8", "replace"))
        try:
            response = json.loads(content)
        except ValueError as exc:
            raise Retryable(f"malformed response: {short(str(exc))}") from exc
        return _to_completion(response)

    async def _request_sdk(self, replica: _Replica, body: dict[str, Any]) -> Completion:
        import openai

        url = replica.url
        try:
            # A plain POST through the client: same auth, base URL and errors as
            # `chat.completions.create`, without its request transform and response models, which
            # cost more client CPU per call than the HTTP exchange itself.
            response = await self._sdk_client(replica).post(
                "/chat/completions", body=body, cast_to=object
            )
        except openai.APIStatusError as exc:
            status = exc.status_code
            if status == 429 or status >= 500:
                raise Retryable(
                    f"HTTP {status} from {url}",
                    status=status,
                    wait_s=retry_after_s(exc) if status == 429 else None,
                ) from exc
            raise EndpointError(
                f"HTTP {status} from {url}: {short(exc.message)}",
                retries=0,
                status=status,
            ) from exc
        except (openai.APITimeoutError, openai.APIConnectionError) as exc:
            raise Retryable(f"{type(exc).__name__}: {short(str(exc))}") from exc
        except (openai.APIResponseValidationError, ValueError) as exc:
            raise Retryable(f"malformed response: {short(str(exc))}") from exc
        return _to_completion(response)

    async def aclose(self) -> None:
        clients = [r.sdk_client for r in self._replicas if r.sdk_client is not None]
        for client in clients:
            await client.close()
        if not clients:
            await self._transport.aclose()
        if self._cache is not None:
            self._cache.close()


def _count(replica: _Replica | None, completion: Completion) -> None:
    if replica is None:
        return
    replica.failures_in_a_row = 0
    usage = replica.usage
    usage.calls += 1
    usage.prompt_tokens += completion.usage.prompt_tokens
    usage.completion_tokens += completion.usage.completion_tokens
    usage.latency_s += completion.latency_s


def _to_completion(response: Any) -> Completion:
    """Read an OpenAI chat-completion body (a dict); anything off-shape is a malformed reply."""
    try:
        choice = response["choices"][0]
        message = choice["message"]
        raw_text = message.get("content") or ""
        served_reasoning = message.get("reasoning_content") or message.get("reasoning")
        usage_body = response.get("usage") or {}
        details = usage_body.get("completion_tokens_details") or {}
        usage = Usage(
            prompt_tokens=usage_body.get("prompt_tokens") or 0,
            completion_tokens=usage_body.get("completion_tokens") or 0,
            reasoning_tokens=details.get("reasoning_tokens"),
        )
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        raise Retryable(f"malformed response: {type(exc).__name__} {exc}") from exc
    if served_reasoning:
        text, reasoning = str(raw_text).strip(), str(served_reasoning).strip()
    else:
        text, reasoning = split_reasoning(str(raw_text))
    return Completion(
        text=text, reasoning=reasoning, finish_reason=choice.get("finish_reason"), usage=usage
    )
