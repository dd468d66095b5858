"""The endpoint layer against the scripted server: retries, timeouts, concurrency, cache, usage."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from typing import Any

import pytest

from core.endpoint import Endpoint, EndpointConfig, EndpointError, GenerationConfig
from harness.testing.scripted_server import Reply, ScriptedServer


def _endpoint(server: ScriptedServer, **overrides: Any) -> Endpoint:
    config = {
        "base_url": server.base_url,
        "model": "scripted",
        "timeout_s": 2.0,
        "max_retries": 3,
        "backoff_base_s": 0.01,
        "backoff_max_s": 0.05,
    }
    config.update(overrides)
    return Endpoint(EndpointConfig(**config))


def _faults_then_ok(faults: list[Reply], final: Reply) -> Any:
    """A script that answers each distinct prompt with `faults` in order, then `final`."""
    attempts: Counter[str] = Counter()
    lock = threading.Lock()

    def script(req: dict[str, Any]) -> Reply:
        prompt = req["messages"][-1]["content"]
        with lock:
            n = attempts[prompt]
            attempts[prompt] += 1
        return faults[n] if n < len(faults) else final

    return script


@pytest.mark.parametrize(
    "fault",
    [
        Reply(status=429, text="slow down"),
        Reply(status=500, text="boom"),
        Reply(status=503, text="overloaded"),
        Reply(fault="drop"),
        Reply(fault="malformed"),
        Reply(fault="hang"),
    ],
    ids=["429", "500", "503", "drop", "malformed", "hang"],
)
async def test_transient_faults_are_retried_and_counted(fault: Reply) -> None:
    script = _faults_then_ok([fault, fault], Reply(text="fine"))
    with ScriptedServer(script) as server:
        endpoint = _endpoint(server, timeout_s=0.5)
        completion = await endpoint.complete([{"role": "user", "content": "q"}], role="solver")
        await endpoint.aclose()
    assert completion.text == "fine"
    assert completion.retries == 2
    assert len(server.seen) == 3
    assert endpoint.ledger.by_role()["solver"]["retries"] == 2


async def test_retries_are_bounded_then_an_error_is_raised() -> None:
    with ScriptedServer(lambda req: Reply(status=500, text="always broken")) as server:
        endpoint = _endpoint(server, max_retries=2)
        with pytest.raises(EndpointError) as info:
            await endpoint.complete([{"role": "user", "content": "q"}], role="judge")
        await endpoint.aclose()
    assert info.value.retries == 2
    assert info.value.status == 500
    assert len(server.seen) == 3  # one attempt plus two retries, then no more
    usage = endpoint.ledger.by_role()["judge"]
    assert usage["errors"] == 1 and usage["calls"] == 0


async def test_a_hang_is_cut_by_the_timeout_and_never_blocks() -> None:
    with ScriptedServer(lambda req: Reply(fault="hang")) as server:
        endpoint = _endpoint(server, timeout_s=0.3, max_retries=1)
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(EndpointError, match="timed out"):
            await endpoint.complete([{"role": "user", "content": "q"}])
        elapsed = loop.time() - started
        await endpoint.aclose()
    assert elapsed < 60  # cut by the timeout, not waiting out the hour (no speed figure)
    assert len(server.seen) == 2  # the attempt and its one retry, each cut


@pytest.mark.parametrize("status", [400, 401, 404, 422])
async def test_client_errors_fail_at_once(status: int) -> None:
    with ScriptedServer(lambda req: Reply(status=status, text="bad request")) as server:
        endpoint = _endpoint(server)
        with pytest.raises(EndpointError) as info:
            await endpoint.complete([{"role": "user", "content": "q"}])
        await endpoint.aclose()
    assert info.value.status == status
    assert info.value.retries == 0
    assert len(server.seen) == 1


async def test_unreachable_endpoint_gives_an_error_after_bounded_retries() -> None:
    endpoint = Endpoint(
        EndpointConfig(
            base_url="http://127.0.0.1:9/v1",
            model="none",
            max_retries=2,
            backoff_base_s=0.01,
            timeout_s=1.0,
        )
    )
    with pytest.raises(EndpointError) as info:
        await endpoint.complete([{"role": "user", "content": "q"}])
    await endpoint.aclose()
    assert info.value.retries == 2


async def test_concurrency_limit_holds() -> None:
    in_flight = 0
    peak = 0
    lock = threading.Lock()

    def script(req: dict[str, Any]) -> Reply:
        nonlocal in_flight, peak
        with lock:
            in_flight += 1
            peak = max(peak, in_flight)
        return Reply(text="x", delay_s=0.05)

    with ScriptedServer(script) as server:
        endpoint = _endpoint(server, concurrency=4)

        async def call(i: int) -> None:
            await endpoint.complete([{"role": "user", "content": f"q{i}"}])
            with lock:
                nonlocal in_flight
                in_flight -= 1

        await asyncio.gather(*(call(i) for i in range(20)))
        await endpoint.aclose()
    assert len(server.seen) == 20
    # The script counts arrivals and the client counts completions, so allow the window between
    # a reply leaving the server and the client releasing its slot.
    assert 2 <= peak <= 5


async def test_reasoning_is_kept_apart() -> None:
    def script(req: dict[str, Any]) -> Reply:
        if "served" in req["messages"][-1]["content"]:
            return Reply(text="final A", reasoning="served thoughts")
        return Reply(text="<think>tagged thoughts</think>\nfinal B")

    with ScriptedServer(script) as server:
        endpoint = _endpoint(server)
        served = await endpoint.complete([{"role": "user", "content": "served"}])
        tagged = await endpoint.complete([{"role": "user", "content": "tagged"}])
        await endpoint.aclose()
    assert (served.text, served.reasoning) == ("final A", "served thoughts")
    assert (tagged.text, tagged.reasoning) == ("final B", "tagged thoughts")


async def test_cache_makes_a_rerun_free_and_identical(tmp_path: Any) -> None:
    calls = Counter[str]()

    def script(req: dict[str, Any]) -> Reply:
        prompt = req["messages"][-1]["content"]
        calls[prompt] += 1
        return Reply(text=f"{prompt} reply #{calls[prompt]}")

    gen = GenerationConfig(temperature=0.7, max_tokens=16)
    cache = str(tmp_path / "cache.sqlite")
    with ScriptedServer(script) as server:
        first = _endpoint(server, cache_path=cache)
        a = await first.complete([{"role": "user", "content": "p"}], gen=gen, epoch=0)
        b = await first.complete([{"role": "user", "content": "p"}], gen=gen, epoch=1)
        await first.aclose()
        second = _endpoint(server, cache_path=cache)
        a2 = await second.complete([{"role": "user", "content": "p"}], gen=gen, epoch=0)
        b2 = await second.complete([{"role": "user", "content": "p"}], gen=gen, epoch=1)
        other_gen = await second.complete(
            [{"role": "user", "content": "p"}], gen=GenerationConfig(max_tokens=16), epoch=0
        )
        await second.aclose()
    assert a.text == "p reply #1" and b.text == "p reply #2"  # epochs are sampled apart
    assert (a2.text, b2.text) == (a.text, b.text)
    assert a2.cached and b2.cached and not a.cached
    assert other_gen.text == "p reply #3"  # another generation config misses the cache
    assert len(server.seen) == 3
    assert second.ledger.by_role()["default"]["cached"] == 2


async def test_usage_is_aggregated_per_role() -> None:
    with ScriptedServer(lambda req: Reply(text="one two three")) as server:
        endpoint = _endpoint(server)
        await endpoint.complete([{"role": "user", "content": "a b"}], role="affirmative")
        await endpoint.complete([{"role": "user", "content": "a b c d"}], role="negative")
        await endpoint.complete([{"role": "user", "content": "a"}], role="negative")
        await endpoint.aclose()
    roles = endpoint.ledger.by_role()
    assert roles["affirmative"]["calls"] == 1
    assert roles["affirmative"]["prompt_tokens"] == 2
    assert roles["negative"]["calls"] == 2
    assert roles["negative"]["prompt_tokens"] == 5
    assert roles["negative"]["completion_tokens"] == 6
    assert endpoint.ledger.totals()["calls"] == 3


def test_api_key_is_read_from_the_named_env_var_and_not_kept_in_config(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MY_SECRET_KEY", "sk-secret-value")
    config = EndpointConfig(
        base_url="http://127.0.0.1:1/v1", model="m", api_key_env="MY_SECRET_KEY"
    )
    endpoint = Endpoint(config)
    assert "sk-secret-value" not in config.model_dump_json()
    assert endpoint._client.api_key == "sk-secret-value"


@pytest.mark.parametrize("status", [404, 429, 500])
async def test_the_lean_http_path_fails_as_the_openai_client_path(status: int) -> None:
    messages: list[str] = []
    with ScriptedServer(lambda req: Reply(status=status, text="model not found")) as server:
        for lean in (True, False):
            endpoint = _endpoint(server, max_retries=0)
            if not lean:
                endpoint._replicas[0].poster = None  # every request through the openai client
            with pytest.raises(EndpointError) as info:
                await endpoint.complete([{"role": "user", "content": "q"}])
            await endpoint.aclose()
            messages.append(str(info.value))
            assert info.value.status == status and info.value.retries == 0
    assert messages[0] == messages[1]
    if status == 404:
        assert "Error code: 404 - model not found" in messages[0]
