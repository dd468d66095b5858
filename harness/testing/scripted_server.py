"""A small scripted OpenAI-compatible server for tests and benchmarks.

It speaks just enough HTTP/1.1 (keep-alive, Content-Length bodies) to serve `GET /v1/models` and
`POST /v1/chat/completions`, and lets a script decide every reply: its text, a delay, an HTTP
status, or a fault (a hang, a dropped connection, a malformed JSON body). It runs on 127.0.0.1,
either in a background thread of the test process (`ScriptedServer`) or as its own process
(`python -m mars.testing.scripted_server`, for benchmarks that measure the client's CPU).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TextIO

Fault = Literal["hang", "drop", "malformed"]


@dataclass
class Reply:
    """What the server does with one request."""

    text: str = "ok"
    reasoning: str | None = None  # sent as `reasoning_content`, as vLLM's reasoning parser does
    status: int = 200
    delay_s: float = 0.0
    fault: Fault | None = None
    finish_reason: str = "stop"


@dataclass
class SeenRequest:
    body: dict[str, Any]
    reply: Reply
    at: float


Script = Callable[[dict[str, Any]], Reply]


def _count_words(messages: list[dict[str, Any]]) -> int:
    return sum(len(str(m.get("content") or "").split()) for m in messages)


@dataclass
class _State:
    script: Script
    model: str
    seen: list[SeenRequest] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    timeline: TextIO | None = None  # a line "arrived<TAB>replied" (epoch seconds) per completion
    # At most this many replies in the making at once (a GPU server's batch slots); None: any
    slots: asyncio.Semaphore | None = None


def _completion_body(req: dict[str, Any], reply: Reply, model: str, n: int) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text}
    if reply.reasoning is not None:
        message["reasoning_content"] = reply.reasoning
    completion_tokens = len(reply.text.split()) + len((reply.reasoning or "").split())
    return {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": req.get("model", model),
        "choices": [{"index": 0, "message": message, "finish_reason": reply.finish_reason}],
        "usage": {
            "prompt_tokens": _count_words(req.get("messages", [])),
            "completion_tokens": completion_tokens,
            "total_tokens": _count_words(req.get("messages", [])) + completion_tokens,
        },
    }


def _http_response(status: int, body: bytes, content_type: str = "application/json") -> bytes:
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 429: "Too Many Requests"}.get(
        status, "Error"
    )
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: keep-alive\r\n\r\n"
    )
    return head.encode() + body


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str, bytes] | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    body = await reader.readexactly(length) if length else b""
    return method, path, body


async def _handle(
    state: _State, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    try:
        while True:
            request = await _read_request(reader)
            if request is None:
                return
            method, path, body = request
            if method == "GET" and path.rstrip("/").endswith("/models"):
                models = {"object": "list", "data": [{"id": state.model, "object": "model"}]}
                writer.write(_http_response(200, json.dumps(models).encode()))
                await writer.drain()
                continue
            if method != "POST" or not path.rstrip("/").endswith("/chat/completions"):
                writer.write(_http_response(404, b'{"error": {"message": "not found"}}'))
                await writer.drain()
                continue
            arrived = time.time()
            req = json.loads(body or b"{}")
            reply = state.script(req)
            with state.lock:
                state.seen.append(SeenRequest(body=req, reply=reply, at=time.monotonic()))
                n = len(state.seen)
            if reply.delay_s and state.slots is not None:
                async with state.slots:
                    await asyncio.sleep(reply.delay_s)
            elif reply.delay_s:
                await asyncio.sleep(reply.delay_s)
            if reply.fault == "hang":
                await asyncio.sleep(3600)
            if reply.fault == "drop":
                return
            if reply.fault == "malformed":
                writer.write(_http_response(200, b'{"id": "x", "choices": [{"message": '))
            elif reply.status != 200:
                error = {"error": {"message": reply.text, "code": reply.status}}
                writer.write(_http_response(reply.status, json.dumps(error).encode()))
            else:
                payload = _completion_body(req, reply, state.model, n)
                writer.write(_http_response(200, json.dumps(payload).encode()))
            await writer.drain()
            if state.timeline is not None:
                state.timeline.write(f"{arrived:.6f}\t{time.time():.6f}\n")
                state.timeline.flush()
    except (ConnectionError, asyncio.CancelledError):
        return
    finally:
        with contextlib.suppress(Exception):
            writer.close()


class ScriptedServer:
    """Runs the scripted server on 127.0.0.1 in a background thread.

    >>> with ScriptedServer(lambda req: Reply(text="\\\\boxed{4}")) as server:
    ...     server.base_url  # http://127.0.0.1:PORT/v1
    """

    def __init__(self, script: Script, *, model: str = "scripted", port: int = 0) -> None:
        self._state = _State(script=script, model=model)
        self._port = port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._server: asyncio.Server | None = None

    @property
    def seen(self) -> list[SeenRequest]:
        with self._state.lock:
            return list(self._state.seen)

    @property
    def port(self) -> int:
        assert self._server is not None, "server not started"
        return self._server.sockets[0].getsockname()[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> ScriptedServer:
        self._thread = threading.Thread(target=self._run, name="scripted-server", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("scripted server did not start within 10 s")
        return self

    def _run(self) -> None:
        self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self._loop)

        async def serve() -> None:
            self._server = await asyncio.start_server(
                lambda r, w: _handle(self._state, r, w), "127.0.0.1", self._port, backlog=1024
            )

        self._loop.run_until_complete(serve())
        # Ready only once run_forever runs: a stop() scheduled earlier would be consumed by
        # run_until_complete, and the loop would then run until join() gives up.
        self._loop.call_soon(self._ready.set)
        self._loop.run_forever()
        # Cancel handlers still sleeping (hangs) so the loop closes cleanly.
        pending = asyncio.all_tasks(self._loop)
        for task in pending:
            task.cancel()
        self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self._loop.close()

    def stop(self) -> None:
        if self._loop is None or self._server is None:
            return
        loop, server = self._loop, self._server
        self._server = None  # a second stop() is a no-op

        def shutdown() -> None:
            server.close()
            loop.stop()

        loop.call_soon_threadsafe(shutdown)
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def fixed_delay_script(delay_s: float, text: str = "The answer is \\boxed{42}.") -> Script:
    def script(_req: dict[str, Any]) -> Reply:
        return Reply(text=text, delay_s=delay_s)

    return script


def main() -> None:
    parser = argparse.ArgumentParser(description="Scripted OpenAI-compatible server (loopback).")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--delay", type=float, default=0.1, help="seconds before each reply")
    parser.add_argument("--text", default="The answer is \\boxed{42}.")
    parser.add_argument(
        "--timeline", help="append 'arrived<TAB>replied' (epoch seconds) per completion here"
    )
    parser.add_argument("--slots", type=int, help="replies in the making at once (default: any)")
    args = parser.parse_args()

    async def serve() -> None:
        state = _State(script=fixed_delay_script(args.delay, args.text), model="scripted")
        if args.slots:
            state.slots = asyncio.Semaphore(args.slots)
        if args.timeline:
            state.timeline = open(args.timeline, "a", encoding="utf-8")  # noqa: SIM115
        server = await asyncio.start_server(
            lambda r, w: _handle(state, r, w), "127.0.0.1", args.port, backlog=4096
        )
        print(server.sockets[0].getsockname()[1], flush=True)
        async with server:
            await server.serve_forever()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())


if __name__ == "__main__":
    main()
