"""Which model name to send, pinned sampling, per-request seeds: against the scripted server on
127.0.0.1 and real server state files (no model server started here)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from conftest import mars_env, run_mars

from core.endpoint import Endpoint, EndpointConfig, GenerationConfig
from core.errors import EndpointError, MarsError
from core.model_access import model_endpoint, served_model_name
from core.server_commands import local_served_name, private_hub_cache, transformers_command
from core.server_state import server_state, write_server_state
from harness.testing.scripted_server import Reply, ScriptedServer


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MARS_CACHE_DIR", str(tmp_path / "mars-cache"))
    return tmp_path / "mars-cache"


def _state(base_url: str, pid: int, pinned: dict[str, float] | None) -> dict[str, object]:
    return {
        "base_url": base_url,
        "model": "local/ckpt",
        "model_identity": "ckpt@0123456789abcdef",
        "backend": "transformers",
        "pinned_sampling": pinned,
        "server_pid": pid,
    }


def test_a_local_folder_is_served_under_the_name_its_hub_cache_lists(tmp_path: Path) -> None:
    from huggingface_hub import scan_cache_dir

    folder = tmp_path / "step 10@x"
    folder.mkdir()
    (folder / "config.json").write_text('{"architectures": ["Qwen3ForCausalLM"]}')
    (folder / "model.safetensors").write_bytes(b"\0" * 32)
    name = local_served_name(str(folder))
    assert name == "local/step-10-x"
    cache = private_hub_cache(str(folder), name, tmp_path / "hub")
    repos = scan_cache_dir(cache).repos
    assert [repo.repo_id for repo in repos] == [name]  # what transformers' /v1/models lists
    (revision,) = next(iter(repos)).revisions
    assert sorted(f.file_name for f in revision.files) == ["config.json", "model.safetensors"]
    command = transformers_command(name, host="127.0.0.1", port=1, continuous_batching=False)
    assert command[1:3] == ["serve", name] and "--continuous-batching" not in command


def test_the_model_name_comes_from_the_state_file_else_the_only_listed_model(
    cache_dir: Path,
) -> None:
    with ScriptedServer(lambda _r: Reply(), model="only-one") as server:
        assert served_model_name(server.base_url) == "only-one"
        write_server_state(_state(server.base_url, os.getpid(), None))
        assert server_state(server.base_url.replace("127.0.0.1", "localhost")) is not None
        assert served_model_name(server.base_url) == "local/ckpt"
        # A state file whose server is gone is ignored.
        write_server_state(_state(server.base_url, 2**22 + 12345, None))
        assert served_model_name(server.base_url) == "only-one"


def test_no_listed_model_is_a_one_line_error(cache_dir: Path) -> None:
    with ScriptedServer(lambda _r: Reply(), model="") as server:
        base_url = server.base_url
        with pytest.raises(MarsError, match=r"lists no model; pass --model NAME"):
            served_model_name(base_url)
        result = run_mars(
            "eval", "--suite", "gsm8k", "--limit", "1", "--base-url", base_url,
            "--run-dir", str(cache_dir.parent / "run"), "--quiet",
            env=mars_env(MARS_CACHE_DIR=str(cache_dir)), timeout=120,
        )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: {base_url}/models lists no model; pass --model NAME (the name the server expects)"
    ]


def test_a_server_pinned_to_other_sampling_is_refused(cache_dir: Path) -> None:
    with ScriptedServer(lambda _r: Reply()) as server:
        write_server_state(_state(server.base_url, os.getpid(), {"temperature": 0.0, "top_p": 1.0}))
        greedy = GenerationConfig(temperature=0.0, top_p=0.5)  # greedy: top_p does not matter
        with model_endpoint(model=None, base_url=server.base_url, gen=greedy) as config:
            assert config.model == "local/ckpt"
            assert config.model_identity == "ckpt@0123456789abcdef"
            assert config.pinned_sampling == {"temperature": 0.0, "top_p": 1.0}
        hot = GenerationConfig(temperature=0.6)
        pinned = r"temperature 0, top_p 1, fixed by its first request"
        with (
            pytest.raises(MarsError, match=pinned),
            model_endpoint(model=None, base_url=server.base_url, gen=hot),
        ):
            pass
        judge = GenerationConfig(temperature=0.5)
        with (
            pytest.raises(MarsError, match=r"samples at 2 settings .* --no-continuous-batching"),
            model_endpoint(
                model=None, base_url=server.base_url, gen=greedy, extra_sampling=[judge]
            ),
        ):
            pass
    assert server.seen == []


async def test_endpoint_refuses_a_request_the_pinned_server_would_resample() -> None:
    with ScriptedServer(lambda _r: Reply(text="hi")) as server:
        endpoint = Endpoint(
            EndpointConfig(
                base_url=server.base_url,
                model="m",
                max_retries=0,
                pinned_sampling={"temperature": 0.6, "top_p": 0.95},
            )
        )
        ok = await endpoint.complete(
            [{"role": "user", "content": "a"}], gen=GenerationConfig(temperature=0.6, top_p=0.95)
        )
        with pytest.raises(EndpointError, match="asks temperature 0, top_p 1"):
            await endpoint.complete([{"role": "user", "content": "a"}], role="judge")
        await endpoint.aclose()
        assert ok.text == "hi" and len(server.seen) == 1
        assert endpoint.ledger.by_role()["judge"]["errors"] == 1


async def test_each_request_carries_its_own_reproducible_seed() -> None:
    with ScriptedServer(lambda _r: Reply()) as server:
        endpoint = Endpoint(EndpointConfig(base_url=server.base_url, model="m"))
        gen = GenerationConfig(temperature=0.7, seed=3)
        same_prompt = [{"role": "user", "content": "solve it"}]

        async def ask_all() -> None:
            await asyncio.gather(
                *(
                    endpoint.complete(same_prompt, role=f"agent_{agent}", gen=gen, epoch=epoch)
                    for agent in (1, 2, 3)
                    for epoch in (0, 1)
                )
            )

        await ask_all()
        first = [(r.body["seed"]) for r in server.seen]
        await ask_all()
        again = [(r.body["seed"]) for r in server.seen[6:]]
        await endpoint.complete(same_prompt, gen=GenerationConfig(seed=None))
        await endpoint.aclose()
    # Six debaters x epochs asking the same prompt draw six different samples ...
    assert len(set(first)) == 6 and all(0 <= s < 2**31 for s in first)
    # ... and a rerun sends the same six seeds; no seed configured sends none.
    assert sorted(first) == sorted(again)
    assert "seed" not in server.seen[-1].body


def test_the_arena_is_checked_against_its_own_sampling_on_a_pinned_server(
    cache_dir: Path,
) -> None:
    """A `mars loop` arena item samples at the loop's temperature; it must pass on a server
    pinned to that temperature and be refused on one pinned to another."""
    with ScriptedServer(lambda _r: Reply(text="<answer><PASS></answer>")) as server:
        write_server_state(_state(server.base_url, os.getpid(), {"temperature": 1.0, "top_p": 1.0}))
        args = ["arena", "--game", "kuhn_poker", "--player", "llm", "--opponent", "random"]
        args += ["--episodes", "1", "--base-url", server.base_url, "--model", "local/ckpt"]
        args += ["--quiet", "--top-p", "1"]
        env = mars_env(MARS_CACHE_DIR=str(cache_dir))
        hot = run_mars(
            *args, "--temperature", "1", "--run-dir", str(cache_dir.parent / "hot"), env=env
        )
        assert hot.returncode == 0, hot.stderr
        cold = run_mars(
            *args, "--temperature", "0", "--run-dir", str(cache_dir.parent / "cold"), env=env
        )
    assert cold.returncode == 2 and "fixed by its first request" in cold.stderr
