"""Model servers: put a checkpoint behind an OpenAI-compatible API.

`vllm serve` where CUDA and vLLM are present, `transformers serve` (continuous batching, CPU)
otherwise. A server is a child process in its own process group, started with an argument list
(no shell), logged to a file, ready when `/v1/models` answers, and stopped with its whole group.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import MarsError
from harness.processes import log_tail, stop_process_group

BACKENDS = ("auto", "vllm", "transformers")
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")


def looks_like_hub_id(model: str) -> bool:
    """`org/name` with no path markers: a Hugging Face hub id rather than a local folder."""
    parts = model.split("/")
    return (
        len(parts) == 2
        and all(parts)
        and not model.startswith((".", "~"))
        and not any(p in (".", "..") for p in parts)
    )


def check_model(model: str) -> None:
    if Path(model).expanduser().is_dir():
        if not (Path(model).expanduser() / "config.json").is_file():
            raise MarsError(f"model folder {model} has no config.json (not a Hugging Face model)")
        return
    if Path(model).expanduser().exists():
        raise MarsError(f"model {model} is a file; give a Hugging Face model folder or a hub id")
    if not looks_like_hub_id(model):
        raise MarsError(f"model folder not found: {model}")


def model_fingerprint(model: str) -> str:
    """A cheap identity for a checkpoint: names, sizes and edge bytes of its files.

    Used as the response cache's model identity, so a retrained folder at the same path misses the
    cache. Reading only the first and last MiB keeps it fast for multi-GB weights.
    """
    folder = Path(model).expanduser()
    if not folder.is_dir():
        return model
    digest = hashlib.sha256()
    for path in sorted(folder.iterdir()):
        if not path.is_file():
            continue
        size = path.stat().st_size
        digest.update(f"{path.name}:{size}".encode())
        if path.suffix in _WEIGHT_SUFFIXES or path.name.endswith(".json"):
            with path.open("rb") as handle:
                digest.update(handle.read(1 << 20))
                if size > 2 << 20:
                    handle.seek(-(1 << 20), os.SEEK_END)
                    digest.update(handle.read())
    return f"{folder.name}@{digest.hexdigest()[:16]}"


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def resolve_backend(backend: str) -> str:
    if backend not in BACKENDS:
        raise MarsError(f"unknown backend '{backend}'; choose one of {', '.join(BACKENDS)}")
    if backend != "auto":
        return backend
    return "vllm" if shutil.which("vllm") and cuda_available() else "transformers"


def _executable(name: str) -> str:
    """The console script next to this interpreter (the venv's), else the one on PATH."""
    beside = Path(sys.executable).with_name(name)
    if beside.exists():
        return str(beside)
    found = shutil.which(name)
    if found is None:
        raise MarsError(f"'{name}' is not installed (no {name} executable on PATH)")
    return found


def model_argument(model: str) -> str:
    """A local folder as an absolute path (servers resolve relative paths against their own cwd)."""
    path = Path(model).expanduser()
    return str(path.resolve()) if path.is_dir() else model


def vllm_command(
    model: str,
    *,
    host: str,
    port: int,
    served_name: str,
    reasoning_parser: str | None = "qwen3",
    extra_args: tuple[str, ...] = (),
) -> list[str]:
    command = [
        _executable("vllm"),
        "serve",
        model,
        "--host",
        host,
        "--port",
        str(port),
        "--served-model-name",
        served_name,
    ]
    if reasoning_parser:
        command += ["--reasoning-parser", reasoning_parser]
    return command + list(extra_args)


# `transformers serve --continuous-batching` otherwise reserves ~90% of free RAM for its KV cache
# (6-7 GB and up to a minute before the first reply on CPU). 512 blocks of 256 tokens cover
# 64 requests of 2,048 tokens; raise --cb-num-blocks for longer contexts.
CB_NUM_BLOCKS = 512
CB_MAX_BATCH_TOKENS = 512


def transformers_command(
    model: str, *, host: str, port: int, extra_args: tuple[str, ...] = ()
) -> list[str]:
    return [
        _executable("transformers"),
        "serve",
        model,
        "--host",
        host,
        "--port",
        str(port),
        "--device",
        "cpu",
        "--continuous-batching",
        "--cb-num-blocks",
        str(CB_NUM_BLOCKS),
        "--cb-max-batch-tokens",
        str(CB_MAX_BATCH_TOKENS),
        "--log-level",
        "info",
        *extra_args,
    ]


def _die_with_parent() -> None:
    """In the child: ask Linux to SIGTERM it when its parent dies, even by SIGKILL.

    The server runs in its own session so a Ctrl-C in the terminal does not reach it before we
    stop it in order; this keeps a killed `mars` from leaving an orphan server holding a port.
    """
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def check_port_free(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise MarsError(f"port {port} on {host} is in use ({exc.strerror})") from exc


def models_endpoint_ready(base_url: str, timeout_s: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"{base_url}/models", timeout=timeout_s) as response:
            json.loads(response.read())
            return response.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


@dataclass
class ModelServer:
    """A model server child process; use as a context manager or call start() / stop()."""

    model: str
    backend: str = "auto"
    host: str = "127.0.0.1"
    port: int | None = None
    startup_timeout_s: float = 300.0
    log_dir: Path | None = None
    extra_args: tuple[str, ...] = ()
    resolved_backend: str = field(init=False, default="")
    base_url: str = field(init=False, default="")
    log_path: Path = field(init=False)
    _process: subprocess.Popen[bytes] | None = field(init=False, default=None, repr=False)

    @property
    def served_name(self) -> str:
        """The `model` field requests must carry. `transformers serve` pins the exact argument it
        was given and rejects any other name; vLLM serves the name we pass it."""
        argument = model_argument(self.model)
        if self.resolved_backend == "vllm":
            return Path(argument).name if Path(argument).is_dir() else argument
        return argument

    @property
    def identity(self) -> str:
        return model_fingerprint(self.model)

    def command(self) -> list[str]:
        assert self.port is not None
        if self.resolved_backend == "vllm":
            return vllm_command(
                model_argument(self.model),
                host=self.host,
                port=self.port,
                served_name=self.served_name,
                extra_args=self.extra_args,
            )
        return transformers_command(
            model_argument(self.model), host=self.host, port=self.port, extra_args=self.extra_args
        )

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.resolved_backend == "transformers":
            # Offline and with a writable hub cache, or /v1/models fails on a machine with no hub.
            env.setdefault("HF_HUB_OFFLINE", "1")
            cache = Path(env.get("MARS_CACHE_DIR", Path.home() / ".cache" / "mars")) / "hf-hub"
            cache.mkdir(parents=True, exist_ok=True)
            env.setdefault("HF_HUB_CACHE", str(cache))
            env.setdefault("TOKENIZERS_PARALLELISM", "false")
            # One thread per forward pass: on 2 cores this is ~4x faster than torch's default.
            env.setdefault("OMP_NUM_THREADS", "1")
        return env

    def start(self) -> str:
        self.resolved_backend = resolve_backend(self.backend)
        check_model(self.model)
        if self.port is None:
            self.port = free_port(self.host)
        else:
            check_port_free(self.host, self.port)
        self.base_url = f"http://{self.host}:{self.port}/v1"
        log_dir = self.log_dir or Path(tempfile.mkdtemp(prefix="mars-server-"))
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"server-{self.resolved_backend}-{self.port}.log"
        command = self.command()
        with self.log_path.open("wb") as log:
            log.write(f"$ {' '.join(command)}\n".encode())
            log.flush()
            try:
                self._process = subprocess.Popen(
                    command,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=self.environment(),
                    start_new_session=True,
                    preexec_fn=_die_with_parent,
                )
            except OSError as exc:
                raise MarsError(f"cannot start {command[0]}: {exc.strerror}") from exc
        self._wait_until_ready()
        return self.base_url

    def _wait_until_ready(self) -> None:
        assert self._process is not None
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                code = self._process.returncode
                self._process = None
                raise MarsError(
                    f"{self.resolved_backend} server exited with code {code} before it was ready; "
                    f"last log lines: {self.last_log_lines()}"
                )
            if models_endpoint_ready(self.base_url):
                return
            time.sleep(0.5)
        self.stop()
        raise MarsError(
            f"{self.resolved_backend} server not ready after {self.startup_timeout_s:g}s; "
            f"last log lines: {self.last_log_lines()}"
        )

    def warm_up(self, *, temperature: float, top_p: float, timeout_s: float = 120.0) -> None:
        """Send one tiny request with the run's sampling settings.

        `transformers serve --continuous-batching` fixes temperature and top_p from the first
        request it handles for its whole life, so the first request must carry the run's own.
        """
        if self.resolved_backend != "transformers":
            return
        body = {
            "model": self.served_name,
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 1,
            "temperature": temperature,
            "top_p": top_p,
        }
        request = urllib.request.Request(
            f"{self.base_url}/chat/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                response.read()
        except (urllib.error.URLError, OSError) as exc:
            raise MarsError(
                f"warm-up request to {self.base_url} failed ({exc}); "
                f"last log lines: {self.last_log_lines()}"
            ) from exc

    def last_log_lines(self, n: int = 5) -> str:
        return log_tail(self.log_path, n)

    def stop(self, grace_s: float = 10.0) -> None:
        process, self._process = self._process, None
        if process is not None:
            stop_process_group(process, grace_s)

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def __enter__(self) -> ModelServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
