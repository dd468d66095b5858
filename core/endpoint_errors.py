"""How a chat-completion exchange fails: a retry, or an error in the server's own words.

`Retryable` is a failure the endpoint retries (429 with its `Retry-After`, 5xx, timeouts,
dropped connections, malformed bodies); `status_error` turns any other status into the
`EndpointError` openai's SDK path would raise, with the same "Error code: N - message" text, so
the lean transport and the SDK path of `core.endpoint.Endpoint` fail alike.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from core.errors import EndpointError

if TYPE_CHECKING:
    import openai


class Retryable(Exception):
    def __init__(self, message: str, *, status: int | None = None, wait_s: float | None = None):
        super().__init__(message)
        self.status = status
        self.wait_s = wait_s


def retry_after_s(exc: openai.APIStatusError) -> float | None:
    value = exc.response.headers.get("retry-after") if exc.response is not None else None
    return parse_retry_after(value)


def parse_retry_after(value: str | bytes | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def header(headers: list[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    for key, value in headers:
        if key.lower() == name:
            return value
    return None


def status_message(status: int, content: bytes) -> str:
    """ "Error code: N - " and the server's own words: an OpenAI-style `error.message`, a
    FastAPI-style `detail` (transformers serve), a top-level `message`, or a short plain body."""
    message = f"Error code: {status}"
    text = content.decode("utf-8", "replace").strip()
    try:
        body = json.loads(text)
    except ValueError:
        body = None
    detail = body_detail(body) if body is not None else (text if 0 < len(text) <= 300 else None)
    return f"{message} - {' '.join(detail.split())}" if detail else message


def body_detail(body: object) -> str | None:
    if not isinstance(body, dict):
        return None
    error = body.get("error")
    for candidate in (
        error.get("message") if isinstance(error, dict) else error,
        body.get("detail"),
        body.get("message"),
    ):
        if isinstance(candidate, str) and candidate.strip():
            return candidate
        if isinstance(candidate, list | dict) and candidate:  # FastAPI's validation details
            return json.dumps(candidate)[:300]
    return None


def short(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def status_error(
    url: str, status: int, headers: list[tuple[bytes, bytes]], content: bytes
) -> Exception:
    """What the SDK path raises for this status (same text as openai's APIStatusError)."""
    if status == 429 or status >= 500:
        wait = parse_retry_after(header(headers, b"retry-after")) if status == 429 else None
        return Retryable(f"HTTP {status} from {url}", status=status, wait_s=wait)
    message = status_message(status, content)
    return EndpointError(
        f"HTTP {status} from {url}: {short(message)}",
        retries=0,
        status=status,
    )
