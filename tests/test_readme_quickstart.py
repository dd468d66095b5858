"""The README's by-hand Quickstart block runs as written on a machine with no test sets: the
server it starts (the tiny model behind `transformers serve`) serves every command of the block,
and the eval falls back to the three questions shipped with the project."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

from conftest import REPO, mars_env

PORT_IN_README = "8000"


def quickstart_block() -> list[str]:
    """The commands of the README's first bash block that starts with `mars serve`."""
    readme = (REPO / "README.md").read_text()
    for block in re.findall(r"```bash\n(.*?)```", readme, re.DOTALL):
        if block.startswith("mars serve"):
            return [line for line in block.splitlines() if line and not line.startswith("#")]
    raise AssertionError("README.md has no ```bash block starting with `mars serve`")


def test_the_quickstart_block_runs_as_written_without_test_sets(tmp_path: Path) -> None:
    serve, *rest = quickstart_block()
    assert serve.startswith("mars serve --port ")
    # A free port instead of 8000, a folder that looks like the checkout from where it runs.
    port = _free_port()
    workdir = tmp_path / "checkout"
    workdir.mkdir()
    (workdir / "harness").symlink_to(REPO / "harness")
    env = mars_env(PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    env.pop("MARS_DATA_DIR", None)  # a machine with no test sets
    log = tmp_path / "serve.log"
    server = subprocess.Popen(
        ["bash", "-c", serve.split("#")[0].replace(PORT_IN_README, str(port))],
        cwd=workdir, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        _wait_for(server, f"http://127.0.0.1:{port}/v1/models", log)
        script = "set -e\n" + "\n".join(rest).replace(f":{PORT_IN_README}/", f":{port}/")
        done = subprocess.run(
            ["bash", "-c", script], cwd=workdir, env=env, capture_output=True, text=True,
            timeout=600,
        )  # fmt: skip
    finally:
        os.killpg(server.pid, 15)
        server.wait(60)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "demo_samples" in done.stdout  # where the samples came from, as every eval says
    assert "gsm8k" in done.stdout and "accuracy" in done.stdout  # the report's table


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_for(server: subprocess.Popen[str], url: str, log: Path, timeout_s: float = 300) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise AssertionError(f"mars serve exited: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.5)
    raise AssertionError("mars serve never answered")
