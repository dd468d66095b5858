"""The floor for `bench/peers.py`: the least any client can do against the bench's server.

A closed loop of `--concurrency` keep-alive connections, each writing the next pre-encoded
chat-completion request (the first N GSM8K questions, encoded before the first request) as soon
as its previous reply has been read, and reading replies by Content-Length without parsing them.
No grading, no records, no JSON on the way back: what is left of the request phase over its
ideal is the server's and the machine's, not an evaluation tool's.

    python bench/floor_client.py --base-url http://127.0.0.1:PORT/v1 [--questions 1000]
        [--concurrency 64]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import DRY_RUN_URL, DryRun, add_dry_run, gsm8k_file, local_gsm8k, run_dry


def encoded_requests(base_url: str, questions: int) -> list[bytes]:
    url = urlsplit(base_url)
    path = f"{url.path.rstrip('/')}/chat/completions".encode()
    requests = []
    with local_gsm8k().open(encoding="utf-8") as rows:
        for line, _ in zip(rows, range(questions), strict=False):
            question = json.loads(line)["question"]
            body = json.dumps(
                {
                    "model": "scripted",
                    "messages": [{"role": "user", "content": question}],
                    "temperature": 0.0,
                    "max_tokens": 512,
                }
            ).encode()
            head = b"POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n" % (
                path,
                url.netloc.encode(),
            )
            requests.append(head + b"Content-Length: %d\r\n\r\n" % len(body) + body)
    return requests


async def closed_loop(host: str, port: int, requests: list[bytes], concurrency: int) -> None:
    pending = iter(requests)

    async def connection() -> None:
        reader, writer = await asyncio.open_connection(host, port)
        for request in pending:
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            await reader.readexactly(length)
        writer.close()

    await asyncio.gather(*(connection() for _ in range(concurrency)))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", help="the server's URL (required but for --dry-run)")
    parser.add_argument("--questions", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=64)
    add_dry_run(parser)
    return parser


def dry_run(dry: DryRun, args: argparse.Namespace) -> None:
    """The GSM8K file, and every request encoded for the server's URL (none sent)."""
    from core.errors import MarsError

    url = urlsplit(args.base_url or DRY_RUN_URL)
    if url.scheme != "http" or not url.hostname:
        raise MarsError(f"--base-url {args.base_url}: expected http://HOST:PORT/...")
    gsm8k_file(dry)
    dry.count("request", len(encoded_requests(args.base_url or DRY_RUN_URL, args.questions)))


def main() -> None:
    parser = build_parser()
    args = parser.parse_args()
    if args.dry_run:
        run_dry(lambda dry: dry_run(dry, args))
        return
    if args.base_url is None:
        parser.error("the following arguments are required: --base-url")
    url = urlsplit(args.base_url)
    requests = encoded_requests(args.base_url, args.questions)
    host, port = url.hostname or "127.0.0.1", url.port or 80
    asyncio.run(closed_loop(host, port, requests, args.concurrency))


if __name__ == "__main__":
    main()
