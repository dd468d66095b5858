"""A lean HTTP/1.1 transport for plain-http model servers (vLLM, `transformers serve` on a LAN).

The `openai` client sends through an httpx2 client. Its default connection pool re-checks every
pooled connection on every request (socket-readability probes through anyio), which cost about
as much client CPU per request as everything else together: at 64 requests in flight the
client's CPU, not the server, became the limit on a 2-core machine (measured).

This transport keeps idle keep-alive connections in a plain list per host and speaks just what
an OpenAI-compatible server answers to non-streaming requests: a status line, headers, and a
body sized by Content-Length, chunked encoding or connection close. Errors surface as httpx2's
own exceptions, so the openai client maps them to APIConnectionError as usual, and the
endpoint's bounded retries take over. https URLs keep httpx2's standard transport.
"""

from __future__ import annotations

import asyncio
import contextlib

import httpx2

_MAX_HEADER_BYTES = 64 * 1024
_Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class LeanHTTPTransport(httpx2.AsyncBaseTransport):
    def __init__(self, *, connect_timeout_s: float = 10.0) -> None:
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._connect_timeout_s = connect_timeout_s

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        address = (request.url.host, request.url.port or 80)
        data = _encode_request(request, await request.aread())
        status, headers, body = await self.exchange(address, data, request.method)
        return httpx2.Response(status, headers=headers, content=body, request=request)

    async def exchange(
        self, address: tuple[str, int], data: bytes, method: str
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """Send one encoded request on a pooled connection; (status, headers, body)."""
        reader, writer = await self._connection(address)
        try:
            writer.write(data)
            status, headers, body, keep_alive = await _read_response(reader, method)
        except BaseException:  # cancelled by a deadline, or broken: never reuse this connection
            _close(writer)
            raise
        if keep_alive:
            self._idle.setdefault(address, []).append((reader, writer))
        else:
            _close(writer)
        return status, headers, body

    async def _connection(self, address: tuple[str, int]) -> _Connection:
        idle = self._idle.get(address)
        while idle:
            reader, writer = idle.pop()
            if not reader.at_eof() and not writer.is_closing():
                return reader, writer
            _close(writer)  # the server closed it while it sat idle
        try:
            return await asyncio.wait_for(
                asyncio.open_connection(*address, limit=_MAX_HEADER_BYTES),
                self._connect_timeout_s,
            )
        except asyncio.TimeoutError as exc:
            raise httpx2.ConnectTimeout(f"connect to {address[0]}:{address[1]} timed out") from exc
        except OSError as exc:
            raise httpx2.ConnectError(f"connect to {address[0]}:{address[1]}: {exc}") from exc

    async def aclose(self) -> None:
        for connections in self._idle.values():
            for _, writer in connections:
                _close(writer)
        self._idle.clear()


def _close(writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(Exception):
        writer.close()


def _encode_request(request: httpx2.Request, body: bytes) -> bytes:
    target = request.url.raw_path
    lines = [request.method.encode(), b" ", target, b" HTTP/1.1\r\n"]
    for name, value in request.headers.raw:
        lines += [name, b": ", value, b"\r\n"]
    lines.append(b"\r\n")
    return b"".join(lines) + body


async def _read_response(
    reader: asyncio.StreamReader, method: str
) -> tuple[int, list[tuple[bytes, bytes]], bytes, bool]:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        raise httpx2.RemoteProtocolError("server closed the connection without a response") from exc
    except asyncio.LimitOverrunError as exc:
        raise httpx2.RemoteProtocolError("response headers too large") from exc
    except ConnectionError as exc:
        raise httpx2.ReadError(str(exc)) from exc
    status_line, *header_lines = head[:-4].split(b"\r\n")
    parts = status_line.split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise httpx2.RemoteProtocolError(f"malformed status line {status_line[:80]!r}")
    status = int(parts[1])
    headers: list[tuple[bytes, bytes]] = []
    length: int | None = None
    chunked = False
    keep_alive = parts[0] == b"HTTP/1.1"
    for line in header_lines:
        name, _, value = line.partition(b":")
        value = value.strip()
        headers.append((name, value))
        lowered = name.lower()
        if lowered == b"content-length":
            length = int(value)
        elif lowered == b"transfer-encoding":
            chunked = b"chunked" in value.lower()
        elif lowered == b"connection":
            keep_alive = value.lower() == b"keep-alive" or (
                keep_alive and value.lower() != b"close"
            )
    try:
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            body = b""
        elif chunked:
            body = await _read_chunked(reader)
        elif length is not None:
            body = await reader.readexactly(length)
        else:
            body, keep_alive = await reader.read(), False
    except asyncio.IncompleteReadError as exc:
        raise httpx2.RemoteProtocolError("connection closed in the middle of the body") from exc
    except ConnectionError as exc:
        raise httpx2.ReadError(str(exc)) from exc
    # The body is decoded here, so it must not be decoded again.
    headers = [(n, v) for n, v in headers if n.lower() not in (b"transfer-encoding",)]
    return status, headers, body, keep_alive


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    chunks: list[bytes] = []
    while True:
        size_line = await reader.readuntil(b"\r\n")
        size = int(size_line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers
                pass
            return b"".join(chunks)
        chunks.append(await reader.readexactly(size))
        await reader.readexactly(2)


def lean_async_client(
    timeout_s: float, transport: LeanHTTPTransport | None = None
) -> httpx2.AsyncClient:
    """An httpx2 client for `AsyncOpenAI(http_client=...)`: lean on http, standard on https."""
    return httpx2.AsyncClient(
        timeout=timeout_s,
        follow_redirects=True,
        transport=_LazyTransport(),
        mounts={"http://": transport or LeanHTTPTransport()},
    )


class _LazyTransport(httpx2.AsyncBaseTransport):
    """httpx2's standard transport (https), built on first use: its TLS context takes tens of
    milliseconds to make, which a plain-http endpoint never needs."""

    def __init__(self) -> None:
        self._transport: httpx2.AsyncHTTPTransport | None = None

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if self._transport is None:
            self._transport = httpx2.AsyncHTTPTransport()
        return await self._transport.handle_async_request(request)

    async def aclose(self) -> None:
        if self._transport is not None:
            await self._transport.aclose()


class JSONPoster:
    """POSTs JSON bodies to one plain-http URL over a `LeanHTTPTransport`, with no httpx2 request
    or response objects: the request line and headers are encoded once, a call adds the
    Content-Length and the body. Errors are the transport's (httpx2 exceptions)."""

    def __init__(self, url: str, headers: dict[str, str], transport: LeanHTTPTransport) -> None:
        parsed = httpx2.URL(url)
        if parsed.scheme != "http":
            raise ValueError(f"JSONPoster speaks plain http only, not {url!r}")
        self.address = (parsed.host, parsed.port or 80)
        host = parsed.host if parsed.port is None else f"{parsed.host}:{parsed.port}"
        lines = [f"POST {parsed.raw_path.decode('ascii')} HTTP/1.1", f"Host: {host}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        lines += ["Content-Type: application/json", "Content-Length: "]
        self._head = "\r\n".join(lines).encode("latin-1")
        self._transport = transport

    async def post(self, body: bytes) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        data = b"".join((self._head, str(len(body)).encode(), b"\r\n\r\n", body))
        return await self._transport.exchange(self.address, data, "POST")
