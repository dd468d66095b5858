"""Server lifecycle: the vLLM launcher via a fake `vllm` executable, failures, bad input."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, mars_env, run_mars

from core.errors import MarsError
from core.fingerprints import model_fingerprint
from core.servers import ModelServer, looks_like_hub_id

FAKE_VLLM = """#!{python}
# A stand-in for `vllm`: records its argv, then serves /v1/models with the scripted server.
import json, os, sys
with open(os.environ["FAKE_VLLM_LOG"], "w") as f:
    json.dump(sys.argv[1:], f)
if os.environ.get("FAKE_VLLM_FAIL"):
    print("RuntimeError: CUDA out of memory (fake)", flush=True)
    sys.exit(1)
port = sys.argv[sys.argv.index("--port") + 1]
os.execv(sys.executable, [sys.executable, "-m", "harness.testing.scripted_server", "--port", port])
"""


@pytest.fixture
def fake_vllm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "vllm"
    script.write_text(FAKE_VLLM.format(python=sys.executable))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    log = tmp_path / "vllm-argv.json"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_VLLM_LOG", str(log))
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    return log


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "my-checkpoint"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "qwen3"}')
    (folder / "model.safetensors").write_bytes(b"\0" * 64)
    return folder


def test_vllm_launcher_builds_the_exact_command_and_serves(
    fake_vllm: Path, model_dir: Path, tmp_path: Path
) -> None:
    with ModelServer(model=str(model_dir), backend="vllm", log_dir=tmp_path) as server:
        assert server.base_url == f"http://127.0.0.1:{server.port}/v1"
        assert server.served_name == "my-checkpoint"
        argv = json.loads(fake_vllm.read_text())
        assert argv == [
            "serve", str(model_dir.resolve()), "--host", "127.0.0.1", "--port", str(server.port),
            "--served-model-name", "my-checkpoint", "--reasoning-parser", "qwen3",
        ]  # fmt: skip
        assert server.running
    assert not server.running


def test_start_failure_gives_a_clear_error_with_the_log_tail(
    fake_vllm: Path, model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_VLLM_FAIL", "1")
    with pytest.raises(MarsError, match=r"exited with code 1.*CUDA out of memory"):
        ModelServer(model=str(model_dir), backend="vllm", log_dir=tmp_path).start()


def test_port_in_use_is_refused(model_dir: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(MarsError, match=f"port {port} on 127.0.0.1 is in use"):
            ModelServer(model=str(model_dir), backend="transformers", port=port).start()


def test_missing_model_folder_and_unknown_backend(tmp_path: Path, model_dir: Path) -> None:
    with pytest.raises(MarsError, match="model folder not found"):
        ModelServer(model=str(tmp_path / "nope"), backend="transformers").start()
    with pytest.raises(MarsError, match="unknown backend 'tgi'"):
        ModelServer(model=str(model_dir), backend="tgi").start()
    (tmp_path / "empty").mkdir()
    with pytest.raises(MarsError, match=r"no config\.json"):
        ModelServer(model=str(tmp_path / "empty"), backend="transformers").start()


def test_hub_ids_and_fingerprints(model_dir: Path) -> None:
    assert looks_like_hub_id("Qwen/Qwen3-4B")
    assert not looks_like_hub_id("./runs/ckpt")
    assert not looks_like_hub_id("runs/a/b")
    before = model_fingerprint(str(model_dir))
    (model_dir / "model.safetensors").write_bytes(b"\1" * 64)
    assert model_fingerprint(str(model_dir)) != before


def test_mars_serve_prints_the_url_and_stops_on_sigterm(
    fake_vllm: Path, model_dir: Path, tmp_path: Path
) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "mars", "serve", str(model_dir), "--backend", "vllm",
         "--log-dir", str(tmp_path)],
        stdout=subprocess.PIPE, text=True, cwd=REPO, env=mars_env(PATH=os.environ["PATH"]),
    )  # fmt: skip
    assert process.stdout is not None
    lines = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        lines.append(line)
        if line.startswith("base url:"):
            break
    url = lines[-1].split(": ", 1)[1].strip()
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    process.send_signal(signal.SIGTERM)
    assert process.wait(30) == 0
    rest = process.stdout.read()
    assert f"next, in another shell: mars eval --base-url {url} " in rest  # what to run next
    assert "stopped" in rest
    with pytest.raises(ConnectionRefusedError):  # no orphan server is left listening
        socket.create_connection(("127.0.0.1", port), timeout=5)


def test_mars_serve_bad_input_is_one_line(tmp_path: Path) -> None:
    result = run_mars("serve", str(tmp_path / "missing"), timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: model folder not found: {tmp_path / 'missing'}"
    ]
    result = run_mars("serve", str(tmp_path), "--backend", "nope", timeout=60)
    assert result.returncode == 2 and "unknown backend" in result.stderr
