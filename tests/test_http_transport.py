"""The lean HTTP/1.1 transport against raw servers that answer in each framing it must read."""

from __future__ import annotations

import asyncio
import json

import httpx2
import pytest

from core.http_transport import LeanHTTPTransport

BODY = json.dumps({"choices": [{"message": {"content": "hi"}}]}).encode()


def _chunked(body: bytes) -> bytes:
    half = len(body) // 2
    parts = [body[:half], body[half:]]
    out = b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in parts)
    return out + b"0\r\n\r\n"


RESPONSES = {
    "length": b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(BODY) + BODY,
    "chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + _chunked(BODY),
    "close": b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + BODY,
    "error": b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 2\r\n\r\n{}",
}


async def _serve(kind: str, connections: list[int]) -> asyncio.Server:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                )
                await reader.readexactly(length)
                if kind == "garbage":
                    writer.write(b"NOT HTTP AT ALL\r\n\r\n")
                else:
                    writer.write(RESPONSES[kind])
                await writer.drain()
                if kind in ("close", "garbage"):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


@pytest.mark.parametrize("kind", ["length", "chunked", "close"])
async def test_bodies_in_every_framing_are_read(kind: str) -> None:
    connections: list[int] = []
    server = await _serve(kind, connections)
    port = server.sockets[0].getsockname()[1]
    async with httpx2.AsyncClient(transport=LeanHTTPTransport()) as client:
        for _ in range(3):
            response = await client.post(f"http://127.0.0.1:{port}/v1/chat/completions", json={})
            assert response.status_code == 200
            assert response.json()["choices"][0]["message"]["content"] == "hi"
    server.close()
    # Keep-alive connections are reused; a `Connection: close` answer is never reused.
    assert len(connections) == (3 if kind == "close" else 1)


async def test_status_codes_pass_through() -> None:
    server = await _serve("error", [])
    port = server.sockets[0].getsockname()[1]
    async with httpx2.AsyncClient(transport=LeanHTTPTransport()) as client:
        response = await client.post(f"http://127.0.0.1:{port}/x", json={})
    server.close()
    assert response.status_code == 503


async def test_garbage_and_refused_connections_raise_httpx_errors() -> None:
    server = await _serve("garbage", [])
    port = server.sockets[0].getsockname()[1]
    async with httpx2.AsyncClient(transport=LeanHTTPTransport()) as client:
        with pytest.raises(httpx2.RemoteProtocolError):
            await client.post(f"http://127.0.0.1:{port}/x", json={})
        server.close()
        await server.wait_closed()
        with pytest.raises(httpx2.ConnectError):
            await client.post(f"http://127.0.0.1:{port}/x", json={})
