"""End to end against the project's own tiny model behind a real `transformers serve` on 127.0.0.1.

The tiny model's answers are mostly wrong; these tests check that the whole pipeline is intact:
requests, usage, transcripts, records, summaries.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import DATA_DIR, run_mars

from core.endpoint import Endpoint, EndpointConfig, GenerationConfig
from core.servers import ModelServer

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    from core.tiny_model import ensure_tiny_model

    return ensure_tiny_model()


@pytest.fixture(scope="session")
def tiny_server(
    tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ModelServer]:
    log_dir = tmp_path_factory.mktemp("server")
    with ModelServer(model=str(tiny_model_dir), backend="transformers", log_dir=log_dir) as server:
        yield server


def _config(server: ModelServer, **extra: object) -> EndpointConfig:
    return EndpointConfig(
        base_url=server.base_url, model=server.served_name, model_identity=server.identity, **extra
    )


async def test_endpoint_against_transformers_serve(
    tiny_server: ModelServer, tmp_path: Path
) -> None:
    cache = tmp_path / "cache.sqlite"
    endpoint = Endpoint(_config(tiny_server, concurrency=4, cache_path=str(cache)))
    gen = GenerationConfig(max_tokens=24)
    prompts = [f"What is {i} + {i}? Put the answer in \\boxed{{}}." for i in range(6)]
    replies = await asyncio.gather(
        *(
            endpoint.complete([{"role": "user", "content": p}], role=f"r{i % 2}", gen=gen)
            for i, p in enumerate(prompts)
        )
    )
    for reply in replies:
        assert reply.usage.prompt_tokens > 0
        assert 0 < reply.usage.completion_tokens <= 24
        assert reply.finish_reason in ("stop", "length")
        assert not reply.cached
    roles = endpoint.ledger.by_role()
    assert roles["r0"]["calls"] == 3 and roles["r1"]["calls"] == 3
    again = await endpoint.complete([{"role": "user", "content": prompts[0]}], gen=gen)
    await endpoint.aclose()
    assert (
        again.cached and again.text == replies[0].text and again.reasoning == replies[0].reasoning
    )


def test_a_wrong_model_name_fails_at_once_with_the_servers_reason(tiny_server: ModelServer) -> None:
    from core.errors import EndpointError

    async def ask() -> None:
        endpoint = Endpoint(EndpointConfig(base_url=tiny_server.base_url, model="not-this-one"))
        try:
            await endpoint.complete([{"role": "user", "content": "hi"}])
        finally:
            await endpoint.aclose()

    with pytest.raises(EndpointError) as info:
        asyncio.run(ask())
    assert info.value.status == 400 and info.value.retries == 0


def test_models_lists_the_accepted_name_and_batching_pins_sampling(
    tiny_server: ModelServer,
) -> None:
    from core.model_access import listed_models

    assert listed_models(tiny_server.base_url) == [tiny_server.served_name]
    # Every earlier request in this session was greedy, so warming up greedy changes nothing.
    tiny_server.warm_up(temperature=0.0, top_p=1.0)
    assert tiny_server.pinned_sampling == {"temperature": 0.0, "top_p": 1.0}

    async def ask_hot() -> list[str]:
        endpoint = Endpoint(_config(tiny_server))  # no guard: see what the server does
        hot = GenerationConfig(temperature=1.5, max_tokens=24)
        prompt = [{"role": "user", "content": "Tell me a story."}]
        try:
            replies = [await endpoint.complete(prompt, gen=hot, epoch=i) for i in range(3)]
        finally:
            await endpoint.aclose()
        return [r.reasoning + "|" + r.text for r in replies]

    # transformers 5.23 with continuous batching: temperature 1.5 is ignored, replies stay
    # greedy. If this fails, the server now honours per-request sampling: update servers.py.
    assert len(set(asyncio.run(ask_hot()))) == 1


@pytest.mark.parametrize("mas_name", ["single", "mad", "debate", "autogen"])
def test_eval_through_each_mas_completes_with_full_transcripts(
    tiny_server: ModelServer, mas_name: str, tmp_path: Path
) -> None:
    # Without --model (single) the name comes from the server's state file.
    name = [] if mas_name == "single" else ["--model", tiny_server.served_name]
    result = run_mars(
        "eval", "--suite", "gsm8k", "--mas", mas_name, "--limit", "5",
        "--base-url", tiny_server.base_url, *name,
        "--max-tokens", "48", "--concurrency", "8", "--data-dir", str(DATA_DIR),
        "--run-dir", str(tmp_path / "run"), "--quiet",
        timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    assert info["model"] == tiny_server.served_name
    records = [
        json.loads(line) for line in (tmp_path / "run" / "records.jsonl").read_text().splitlines()
    ]
    assert len(records) == 5
    for record in records:
        assert record["error"] is None
        messages = record["transcript"]["messages"]
        assert len(messages) == record["metrics"]["llm_calls"] >= 1
        assert all(m["usage"]["completion_tokens"] > 0 for m in messages)
    minimum_agents = {"single": 1, "mad": 3, "debate": 3, "autogen": 2}[mas_name]
    agents = {m["agent"] for r in records for m in r["transcript"]["messages"]}
    assert len(agents) >= minimum_agents
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["suites"]["gsm8k"]["n"] == 5


def test_arena_llm_against_random_on_the_served_tiny_model(
    tiny_server: ModelServer, tmp_path: Path
) -> None:
    result = run_mars(
        "arena", "--game", "tic_tac_toe", "--player", "llm", "--opponent", "random",
        "--episodes", "20", "--base-url", tiny_server.base_url, "--model", tiny_server.served_name,
        "--prompt-style", "compact", "--max-tokens", "32", "--run-dir", str(tmp_path / "arena"),
        timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == f"run dir: {tmp_path / 'arena'}"
    records = [
        json.loads(x) for x in (tmp_path / "arena" / "records.jsonl").read_text().splitlines()
    ]
    assert len(records) == 40  # 20 episodes per seat
    seat_index = {"first": 0, "second": 1}
    model_turns = [t for r in records for t in r["turns"] if t["seat"] == seat_index[r["seat"]]]
    assert len(model_turns) >= 40
    assert all(t["usage"]["completion_tokens"] > 0 and "reply" in t for t in model_turns)
    assert sum(r["model_turns"][seat_index[r["seat"]]] for r in records) == len(model_turns)
    seats = json.loads((tmp_path / "arena" / "summary.json").read_text())["seats"]
    for seat in ("first", "second"):
        assert seats[seat]["n"] == 20
        assert seats[seat]["win"] + seats[seat]["draw"] + seats[seat]["loss"] == pytest.approx(1.0)


def test_eval_serves_the_model_itself_when_no_url_is_given(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    result = run_mars(
        "eval", "--suite", "aqua", "--limit", "2", "--model", str(tiny_model_dir),
        "--max-tokens", "16", "--data-dir", str(DATA_DIR), "--run-dir", str(tmp_path / "run"),
        "--quiet", timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    assert info["endpoint"]["model_identity"].startswith("tiny-model-v1@")
    log = next((tmp_path / "run").glob("server-transformers-*.log"))
    port = int(log.stem.rsplit("-", 1)[1])
    import socket

    with pytest.raises(ConnectionRefusedError):  # the server it started is gone
        socket.create_connection(("127.0.0.1", port), timeout=5)


def test_sigterm_during_eval_stops_its_server_and_marks_the_run(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    import signal
    import socket
    import subprocess
    import sys
    import time

    from conftest import REPO, mars_env

    run_dir = tmp_path / "run"
    process = subprocess.Popen(
        [sys.executable, "-m", "mars", "eval", "--suite", "gsm8k", "--limit", "200",
         "--model", str(tiny_model_dir), "--max-tokens", "64", "--concurrency", "2",
         "--data-dir", str(DATA_DIR), "--run-dir", str(run_dir), "--quiet"],
        cwd=REPO, env=mars_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    records = run_dir / "records.jsonl"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not (records.exists() and records.stat().st_size):
        time.sleep(0.2)
    process.send_signal(signal.SIGTERM)
    assert process.wait(60) == 130
    assert "interrupted" in process.stderr.read()
    assert json.loads((run_dir / "run.json").read_text())["status"] == "interrupted"
    log = next(run_dir.glob("server-transformers-*.log"))
    port = int(log.stem.rsplit("-", 1)[1])
    with pytest.raises(ConnectionRefusedError):  # no orphan server is left listening
        socket.create_connection(("127.0.0.1", port), timeout=5)
