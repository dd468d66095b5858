"""Several servers for one model: `--base-url URL1,URL2`. Requests go to the least loaded replica,
a failed one is set aside and its requests retried on another, usage is counted per replica."""

from __future__ import annotations

import asyncio
import itertools
import re
from typing import Any

import pytest

from core.endpoint import Endpoint, EndpointConfig, replica_urls
from core.errors import MarsError
from harness.testing.scripted_server import Reply, ScriptedServer


def _echo(delay_s: float):
    def script(req: dict[str, Any]) -> Reply:
        return Reply(text=f"echo {req['messages'][-1]['content']}", delay_s=delay_s)

    return script


async def _ask(endpoint: Endpoint, count: int) -> list[str]:
    questions = [[{"role": "user", "content": f"q{i}"}] for i in range(count)]
    done = await asyncio.gather(*(endpoint.complete(q) for q in questions))
    await endpoint.aclose()
    return [completion.text for completion in done]


async def test_requests_go_to_the_least_loaded_replica_and_are_counted_per_replica() -> None:
    with ScriptedServer(_echo(0.05)) as first, ScriptedServer(_echo(0.05)) as second:
        urls = f"{first.base_url},{second.base_url}"
        endpoint = Endpoint(EndpointConfig(base_url=urls, model="scripted", concurrency=8))
        texts = await _ask(endpoint, 40)
        usage = endpoint.replica_usage()
        both = (first.base_url, second.base_url)
    assert texts == [f"echo q{i}" for i in range(40)]
    assert len(first.seen) == len(second.seen) == 20  # 4 in flight at each, wave after wave
    assert [usage[url]["calls"] for url in both] == [20, 20]
    assert all(entry["failures"] == 0 and entry["latency_s"] > 0 for entry in usage.values())


@pytest.mark.parametrize("death", ["drop", "stop"])
async def test_a_replica_that_dies_halfway_loses_no_request(death: str) -> None:
    """`drop`: from its 11th request on, the replica closes the connection without a reply;
    `stop`: the whole server goes away while requests are in flight there."""
    answered = itertools.count()

    def dying(req: dict[str, Any]) -> Reply:
        if death == "drop" and next(answered) >= 10:
            return Reply(fault="drop")
        return _echo(0.02)(req)

    with ScriptedServer(_echo(0.02)) as healthy:
        failing = ScriptedServer(dying).start()
        dead_url, live_url = failing.base_url, healthy.base_url
        config = EndpointConfig(
            base_url=f"{dead_url},{live_url}", model="scripted", concurrency=8, timeout_s=5
        )
        endpoint = Endpoint(config)
        if death == "stop":
            asyncio.get_running_loop().call_later(0.1, failing.stop)
        texts = await _ask(endpoint, 60)
        failing.stop()
        usage = endpoint.replica_usage()
    assert texts == [f"echo q{i}" for i in range(60)]
    assert usage[dead_url]["failures"] >= 1
    assert usage[dead_url]["calls"] + usage[live_url]["calls"] == 60
    assert usage[live_url]["calls"] > 30


def test_one_url_or_several_and_a_malformed_one_is_refused_in_one_line() -> None:
    assert replica_urls("http://127.0.0.1:8000/v1") == ["http://127.0.0.1:8000/v1"]
    assert replica_urls("http://a:1/v1, https://b/v1") == ["http://a:1/v1", "https://b/v1"]
    for bad, shown in (
        ("http://a:1/v1,htp://b/v1", "'htp://b/v1' is not a URL"),
        ("http://a:1/v1,", "'(empty)' is not a URL"),
        ("http://a:99999/v1", "'http://a:99999/v1' is not a URL"),
        ("localhost:8000/v1", "'localhost:8000/v1' is not a URL"),
        ("http://a:1/v1,http://a:1/v1", "names http://a:1/v1 twice"),
    ):
        with pytest.raises(MarsError, match=re.escape(shown)) as info:
            replica_urls(bad)
        assert "\n" not in str(info.value)
