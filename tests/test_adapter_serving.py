"""LoRA adapters served, merged and evaluated: two adapters on the tiny model (their lora_B
weights perturbed, seeded, so each answers differently), `mars serve` with both on one CPU
adapter server, `mars export --merge`, `mars eval --trained` on a run whose policies are
adapters, and the refusals (a changed base, a folder that is no adapter)."""

from __future__ import annotations

import json
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import DATA_DIR, REPO, mars_env, run_mars, run_mars_in_process

from core.adapter_serving import adapter_set, vllm_lora_args
from core.causal_lm import Policy
from core.checkpoints import CHECKPOINT_FILE, checked_adapter
from core.endpoint import GenerationConfig
from core.errors import MarsError
from core.fingerprints import model_fingerprint
from core.model_access import model_endpoint
from core.server_state import server_state
from core.servers import ModelServer
from core.tiny_model import ensure_tiny_model
from mars.command_check import check_command_line

NAMES = ("coder", "thinker")
QUESTION = [{"role": "user", "content": "What is 17 + 25?"}]


@dataclass
class Adapters:
    base: Path
    folders: dict[str, Path]
    policies: dict[str, Policy]  # in process, the same weights as the folders


@pytest.fixture(scope="module")
def adapters(tmp_path_factory: pytest.TempPathFactory) -> Adapters:
    import torch

    from core.causal_lm import load_policy
    from train_backend.local.adapters import adapter_policies, save_adapter
    from train_backend.mas.config import LoraSettings

    base = ensure_tiny_model()
    policies = adapter_policies(load_policy(base), NAMES, LoraSettings())
    root = tmp_path_factory.mktemp("adapters")
    folders = {}
    with torch.no_grad():
        for seed, name in enumerate(NAMES, start=1):
            generator = torch.Generator().manual_seed(seed)
            for key, param in policies[name].model.named_parameters():
                if "lora_B" in key and f".{name}." in key:
                    param.copy_(torch.randn(param.shape, generator=generator) * 0.05)
    for name in NAMES:
        folder = root / name
        folder.mkdir()
        info = save_adapter(policies[name], folder, base=str(base))
        (folder / CHECKPOINT_FILE).write_text(json.dumps({"step": 1, "adapter": info.as_json()}))
        folders[name] = folder
    return Adapters(base=base, folders=folders, policies=policies)


@dataclass
class Served:
    base_url: str
    lines: list[str]  # what `mars serve` printed until it was ready


def _read_until_ready(process: subprocess.Popen[str], timeout_s: float) -> list[str]:
    """`mars serve`'s lines up to the one saying what to run next (it is ready then)."""
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    seen: list[str] = []
    deadline = time.monotonic() + timeout_s
    while (left := deadline - time.monotonic()) > 0:
        try:
            line = lines.get(timeout=left)
        except queue.Empty:
            break
        if line is None:
            break
        seen.append(line)
        if line.startswith("next, in another shell:"):
            return seen
    raise AssertionError(f"mars serve did not get ready: {seen}")


@pytest.fixture(scope="module")
def served(adapters: Adapters, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """`mars serve --model BASE --adapter coder=... --adapter thinker=...`."""
    logs = tmp_path_factory.mktemp("serve-logs")
    process = subprocess.Popen(
        [
            sys.executable, "-m", "mars", "serve", "--model", str(adapters.base),
            "--log-dir", str(logs),
            *[f"--adapter={name}={folder}" for name, folder in adapters.folders.items()],
        ],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=mars_env(), cwd=REPO,
    )  # fmt: skip
    try:
        lines = _read_until_ready(process, timeout_s=180)
        base_url = next(line for line in lines if line.startswith("base url: ")).split(": ")[1]
        yield Served(base_url=base_url, lines=lines)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _post(base_url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        f"{base_url}/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def _reply(base_url: str, model: str, **fields: Any) -> dict[str, Any]:
    body = {"model": model, "messages": QUESTION, "max_tokens": 16, "temperature": 0, **fields}
    status, reply = _post(base_url, body)
    assert status == 200, reply
    return reply


def _text(reply: dict[str, Any]) -> str:
    return str(reply["choices"][0]["message"]["content"])


def _in_process(policy: Policy, max_tokens: int = 16, **sampling: Any) -> tuple[str, int]:
    """`policy`'s reply to QUESTION generated here, and its length in tokens."""
    import torch

    from core.batcher import Request, Sampling, generate_batch

    seed = sampling.pop("seed", None)
    generator = torch.Generator().manual_seed(seed) if seed is not None else None
    settings = Sampling(**sampling) if sampling else Sampling(temperature=0.0)
    (result,) = generate_batch(
        policy, [Request(policy.encode_chat(QUESTION), max_tokens)], settings, generator
    )
    return policy.decode(result.completion_ids), len(result.completion_ids)


def test_mars_serve_names_every_adapter_and_the_next_command(
    served: Served, adapters: Adapters
) -> None:
    base_name = "local/" + adapters.base.name
    printed = [line for line in served.lines if line.startswith("model: ")]
    assert [line.split()[1] for line in printed] == [base_name, *NAMES]
    assert f"adapter {adapters.folders['coder']}" in printed[1]
    next_line = served.lines[-1].removeprefix("next, in another shell: ").split("   (")[0]
    assert check_command_line(next_line) == ["eval"]  # the real parsers take it
    assert "--model coder" in next_line and f"--role reasoner=thinker@{served.base_url}" in (
        next_line
    )
    with urllib.request.urlopen(f"{served.base_url}/models", timeout=10) as response:
        listed = [entry["id"] for entry in json.loads(response.read())["data"]]
    assert listed == [base_name, *NAMES]
    # The state file names every model and each one's own weights.
    state = server_state(served.base_url)
    assert state is not None and state["models"] == listed
    assert state["identities"] == {
        base_name: model_fingerprint(str(adapters.base)),
        **{name: model_fingerprint(str(folder)) for name, folder in adapters.folders.items()},
    }
    with model_endpoint(
        model="thinker", base_url=served.base_url, gen=GenerationConfig(temperature=0.0)
    ) as config:
        assert config.model_identity == model_fingerprint(str(adapters.folders["thinker"]))
        assert config.pinned_sampling is None


def test_each_adapter_answers_as_it_does_in_process(served: Served, adapters: Adapters) -> None:
    from core.causal_lm import activate

    replies = {}
    for name in NAMES:
        reply = _reply(served.base_url, name)
        activate(adapters.policies[name])
        expected, length = _in_process(adapters.policies[name])
        assert _text(reply) == expected, name
        assert reply["model"] == name and reply["usage"]["completion_tokens"] == length
        prompt = adapters.policies[name].encode_chat(QUESTION)
        assert reply["usage"]["prompt_tokens"] == len(prompt)
        replies[name] = _text(reply)
    base = _text(_reply(served.base_url, "local/" + adapters.base.name))
    with adapters.policies["coder"].model.disable_adapter():
        assert base == _in_process(adapters.policies["coder"])[0]
    assert len({replies["coder"], replies["thinker"], base}) == 3  # three different models
    # Requests in flight together, for both adapters, are batched per adapter: same replies.
    with ThreadPoolExecutor(6) as pool:
        together = list(pool.map(lambda name: _text(_reply(served.base_url, name)), NAMES * 3))
    assert together == [replies[name] for name in NAMES * 3]


def test_each_requests_own_sampling_settings_apply(served: Served, adapters: Adapters) -> None:
    from core.causal_lm import activate

    coder = adapters.policies["coder"]
    activate(coder)
    greedy = _text(_reply(served.base_url, "coder"))
    # A seed reproduces a sampled reply, the same as generating here with that seed.
    sampled = _reply(served.base_url, "coder", temperature=1.0, seed=7)
    assert _text(sampled) == _in_process(coder, temperature=1.0, seed=7)[0]
    assert _text(_reply(served.base_url, "coder", temperature=1.0, seed=7)) == _text(sampled)
    assert _text(sampled) != greedy
    # top_k 1 and a tiny top_p leave one token to draw: greedy again.
    assert _text(_reply(served.base_url, "coder", temperature=1.0, top_k=1, seed=3)) == greedy
    assert _text(_reply(served.base_url, "coder", temperature=1.0, top_p=1e-6)) == greedy
    short = _reply(served.base_url, "coder", max_tokens=3)
    assert short["usage"]["completion_tokens"] == 3
    assert short["choices"][0]["finish_reason"] == "length"
    assert greedy.startswith(_text(short))
    stop = greedy[len(greedy) // 2 : len(greedy) // 2 + 3]
    cut = _reply(served.base_url, "coder", stop=[stop])
    assert _text(cut) == greedy[: greedy.index(stop)]
    assert cut["choices"][0]["finish_reason"] == "stop"


def test_an_unknown_model_name_is_refused_naming_the_served_ones(
    served: Served, adapters: Adapters
) -> None:
    status, body = _post(
        served.base_url, {"model": "coderr", "messages": QUESTION, "max_tokens": 2}
    )
    assert status == 404
    message = body["error"]["message"]
    assert message == (
        f"model 'coderr' is not served here; served: local/{adapters.base.name}, coder, thinker"
    )
    status, body = _post(served.base_url, {"model": "coder", "messages": [], "max_tokens": 2})
    assert status == 400 and "messages" in body["error"]["message"]


def test_export_merge_writes_a_model_with_the_adapters_logits(
    adapters: Adapters,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from core.causal_lm import activate

    out = tmp_path / "merged"
    result = run_mars("export", str(adapters.folders["coder"]), "--merge", "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert f"serve it with: mars serve {out}" in result.stdout
    merged = AutoModelForCausalLM.from_pretrained(out)
    merged.eval()
    coder = adapters.policies["coder"]
    activate(coder)
    ids = torch.tensor([coder.encode_chat(QUESTION)])
    with torch.no_grad():
        expected = coder.model(input_ids=ids).logits
        got = merged(input_ids=ids).logits
        with coder.model.disable_adapter():
            base = coder.model(input_ids=ids).logits
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
    assert not torch.allclose(got, base, atol=1e-3)  # the adapter is in the weights
    assert (out / "tokenizer_config.json").is_file() and (out / "model.safetensors").is_file()
    assert json.loads((out / "merged_from.json").read_text())["name"] == "coder"

    capsys.readouterr()
    coder_folder = str(adapters.folders["coder"])
    refusals = [
        (["export", coder_folder, "--merge", "-o", str(out)], f"error: -o {out} exists and is "
         "not empty: give a new folder"),
        (["export", coder_folder, "--merge"], "error: --merge needs -o DIR: the new folder for "
         "the merged model"),
        (["export", str(out), "--merge", "-o", str(tmp_path / "x")], "is not a LoRA adapter "
         "checkpoint (no adapter_config.json)"),
    ]  # fmt: skip
    for args, says in refusals:
        assert run_mars_in_process(args, monkeypatch) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and says in lines[0], lines
    assert not (tmp_path / "x").exists()


def _adapter_run(adapters: Adapters, root: Path) -> Path:
    """A `mars train-mas` run directory whose two policies saved adapters at step 1."""
    run = root / "run"
    for policy in NAMES:
        step = run / "policies" / policy / "checkpoints" / "step_1"
        shutil.copytree(adapters.folders[policy], step)
    config = {
        "workflow": "reasoner_tool",
        "policies": {"tool": "coder", "reasoner": "thinker"},
        "workflow_options": {"rounds": 1, "code_seconds": 2.0},
        "adapter": {"kind": "lora"},
    }
    (run / "run.json").write_text(json.dumps({"kind": "train", "config": config}))
    return run


def test_eval_trained_serves_every_roles_adapter_on_one_server(
    adapters: Adapters, tmp_path: Path
) -> None:
    run = _adapter_run(adapters, tmp_path)
    out = tmp_path / "eval"
    result = run_mars(
        "eval", "--suite", "gsm8k", "--limit", "2", "--data-dir", str(DATA_DIR),
        "--trained", str(run), "--max-tokens", "8", "--run-dir", str(out), "--quiet",
        timeout=300,
    )  # fmt: skip
    assert result.returncode in (0, 4), result.stderr[-3000:]  # 4: nothing scored right
    logs = sorted(path.name for path in out.rglob("server-*.log"))
    assert len(logs) == 1 and logs[0].startswith("server-adapters-"), logs
    assert not list(out.glob("role-*"))
    command = (out / logs[0]).read_text().splitlines()[0]
    thinker = run.resolve() / "policies" / "thinker" / "checkpoints" / "step_1"
    coder = run.resolve() / "policies" / "coder" / "checkpoints" / "step_1"
    assert f"--adapter coder={coder}" in command and f"--adapter thinker={thinker}" in command
    recorded = json.loads((out / "run.json").read_text())
    assert recorded["endpoint"]["model"] == "coder"
    assert recorded["endpoint"]["model_identity"] == model_fingerprint(str(coder))
    assert recorded["identity"]["roles"] == {"reasoner": model_fingerprint(str(thinker))}
    usage = json.loads((out / "summary.json").read_text())["usage_by_role"]
    assert sorted(usage) == ["reasoner", "tool"]
    assert usage["tool"]["model"] == "coder" and usage["reasoner"]["model"] == "thinker"
    for figures in usage.values():
        assert figures["calls"] == 2 and figures["errors"] == 0
        assert figures["prompt_tokens"] > 0 and 0 < figures["completion_tokens"] <= 2 * 8


def test_an_adapter_whose_base_changed_is_refused_in_one_line(
    adapters: Adapters,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    base_copy = tmp_path / "base-copy"
    shutil.copytree(adapters.base, base_copy)
    coder = adapters.folders["coder"]
    # The same weights in another folder serve the adapter.
    assert adapter_set(str(base_copy), {"coder": str(coder)}) is not None
    moved = tmp_path / "moved"
    shutil.copytree(coder, moved)
    record = json.loads((moved / CHECKPOINT_FILE).read_text())
    fingerprint = model_fingerprint(str(base_copy))
    record["adapter"].update(base=str(base_copy), base_fingerprint=fingerprint)
    (moved / CHECKPOINT_FILE).write_text(json.dumps(record))
    assert checked_adapter(moved).base == str(base_copy)

    config = json.loads((base_copy / "generation_config.json").read_text())
    (base_copy / "generation_config.json").write_text(json.dumps({**config, "top_k": 3}))
    with pytest.raises(MarsError, match=r"was trained on other weights") as other:
        adapter_set(str(base_copy), {"coder": str(coder)})
    assert "\n" not in str(other.value)
    with pytest.raises(MarsError, match=r"has changed since the adapter was trained"):
        ModelServer(model=str(moved)).start()
    capsys.readouterr()
    assert run_mars_in_process(["serve", str(moved)], monkeypatch) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: adapter {moved}: its base {base_copy} has changed since the adapter was "
        f"trained (fingerprint {model_fingerprint(str(base_copy))}, trained on "
        f"{record['adapter']['base_fingerprint']})"
    ]


def test_a_base_changed_in_the_middle_of_its_weights_is_refused(
    adapters: Adapters,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """One byte flipped halfway through the base's model.safetensors, size kept (the identity
    once read only the first and last MiB): serving and merging refuse the adapter."""
    base_copy = tmp_path / "base-copy"
    shutil.copytree(adapters.base, base_copy)
    moved = tmp_path / "moved"
    shutil.copytree(adapters.folders["coder"], moved)
    record = json.loads((moved / CHECKPOINT_FILE).read_text())
    fingerprint = model_fingerprint(str(base_copy))
    record["adapter"].update(base=str(base_copy), base_fingerprint=fingerprint)
    (moved / CHECKPOINT_FILE).write_text(json.dumps(record))
    assert checked_adapter(moved).base == str(base_copy)

    weights = base_copy / "model.safetensors"
    size = weights.stat().st_size
    assert size > 2 << 20  # a middle byte past the first and last MiB
    with weights.open("r+b") as handle:
        handle.seek(size // 2)
        byte = handle.read(1)[0]
        handle.seek(size // 2)
        handle.write(bytes([byte ^ 1]))
    assert weights.stat().st_size == size
    with pytest.raises(MarsError, match=r"was trained on other weights"):
        adapter_set(str(base_copy), {"coder": str(adapters.folders["coder"])})
    capsys.readouterr()
    out = tmp_path / "merged"
    assert run_mars_in_process(["export", str(moved), "--merge", "-o", str(out)], monkeypatch) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: adapter {moved}: its base {base_copy} has changed since the adapter was "
        f"trained (fingerprint {model_fingerprint(str(base_copy))}, trained on {fingerprint})"
    ]
    assert not out.exists()


def test_vllm_serves_the_adapters_with_multi_lora(
    adapters: Adapters, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import core.server_commands

    monkeypatch.setattr(core.server_commands, "_executable", lambda name: name)
    coder, thinker = (str(adapters.folders[name].resolve()) for name in NAMES)
    server = ModelServer(model=coder, adapters={"thinker": thinker}, backend="vllm", port=8000)
    server.resolved_backend = "vllm"
    assert server.served_name == "coder" and server.identity == model_fingerprint(coder)
    assert server.served_names == [adapters.base.name, "coder", "thinker"]
    assert not server.batching_pins_sampling
    command = server.command()
    assert command[:3] == ["vllm", "serve", str(adapters.base.resolve())]
    assert command[command.index("--served-model-name") + 1] == adapters.base.name
    assert command[command.index("--enable-lora") :] == [
        "--enable-lora", "--lora-modules", f"coder={coder}", f"thinker={thinker}",
        "--max-loras", "2", "--max-lora-rank", "16",
    ]  # fmt: skip
    config = json.loads((Path(thinker) / "adapter_config.json").read_text())
    (tmp_path / "adapter_config.json").write_text(json.dumps({**config, "r": 17}))
    assert vllm_lora_args({"a": str(tmp_path)})[-1] == "32"  # rounded up to a rank vLLM takes


def test_mars_serve_without_a_model_serves_the_adapters_own_base(adapters: Adapters) -> None:
    from mars.commands.serve import _model_to_serve

    folders = {name: str(folder) for name, folder in adapters.folders.items()}
    assert _model_to_serve(None, folders) == str(adapters.base)
    assert _model_to_serve("other", folders) == "other"
    with pytest.raises(MarsError, match="is not an adapter checkpoint folder"):
        _model_to_serve(None, {"x": str(adapters.base)})


def test_an_eval_with_a_role_map_reports_each_roles_usage_in_its_summary(
    tmp_path: Path,
) -> None:
    from harness.testing.scripted_server import Reply, ScriptedServer

    with (
        ScriptedServer(lambda _request: Reply(text="The answer is 3."), model="a") as main,
        ScriptedServer(lambda _request: Reply(text="No verdict."), model="b") as other,
    ):
        result = run_mars(
            "eval", "--suite", "gsm8k", "--limit", "2", "--data-dir", str(DATA_DIR),
            "--mas", "mad", "--mas-option", "rounds=1", "--base-url", main.base_url,
            "--model", "a", "--role", f"moderator=b@{other.base_url}",
            "--run-dir", str(tmp_path / "eval"), "--quiet",
        )  # fmt: skip
    assert result.returncode in (0, 4), result.stderr[-3000:]
    assert len(other.seen) == 2  # the moderator's calls, one per question
    usage = json.loads((tmp_path / "eval" / "summary.json").read_text())["usage_by_role"]
    models = {role: figures["model"] for role, figures in usage.items()}
    assert models == {"affirmative": "a", "judge": "a", "moderator": "b", "negative": "a"}
    assert all(figures["calls"] == 2 for figures in usage.values())
    assert len(main.seen) == 6  # the two debaters and the judge, twice
    assert usage["moderator"]["prompt_tokens"] > 0 and usage["moderator"]["errors"] == 0
