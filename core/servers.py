"""Model servers: put a checkpoint behind an OpenAI-compatible API.

`vllm serve` where CUDA and vLLM are present, `transformers serve` (continuous batching, CPU)
otherwise. A server is a child process in its own process group, started with an argument list
(no shell), logged to a file, ready when `/v1/models` answers, and stopped with its whole group.

The model name to send. vLLM serves the name it is given (`--served-model-name`). `transformers
serve` pins the exact argument it was started with (any other name gets 400) and its `/v1/models`
lists the models in its hub cache, not the pinned one; so a local folder is served under a hub
id, `local/<folder name>`, from a private hub cache that holds only that folder (symlinks): the
name `/v1/models` lists is then exactly the name the server accepts.

Sampling under `transformers serve --continuous-batching` (transformers 5.23, read in
`cli/serving/utils.py` and measured on the tiny model): `max_tokens` is applied per request, but
temperature and top_p come from the first request the server handles and stay for its whole life
(`CBGenerateManager.init_cb`); a request's `seed` reseeds torch's global generator when the
request arrives, so it reproduces a reply only when requests run one at a time (true without
continuous batching too). `warm_up` therefore sends the run's own settings first and records them
as `pinned_sampling`; with `continuous_batching=False` every request's settings are applied
(sequential generation, slower). Each server started here also leaves a small state file
(`core.server_state`), so a client given only the URL finds the model name and the pinned
settings.

A LoRA adapter checkpoint (or a base with named adapters) is served as its base plus each
adapter under its own name: vLLM's multi-LoRA on a GPU, the project's adapter server on a CPU
(`core.adapter_serving`); both apply every request's own sampling settings.

The servers' command lines and served names are `core.server_commands`; a checkpoint's identity
(its weights' fingerprint) is `core.fingerprints`.
"""

from __future__ import annotations

import contextlib
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
from typing import TYPE_CHECKING

from core.errors import MarsError
from core.files import mars_cache_dir
from core.fingerprints import model_fingerprint
from core.processes import log_tail, stop_process_group
from core.server_commands import (
    is_local_folder,
    local_served_name,
    model_argument,
    private_hub_cache,
    resolve_backend,
    transformers_command,
    vllm_command,
)
from core.server_state import write_server_state

if TYPE_CHECKING:
    from core.adapter_serving import AdapterSet


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
        if (Path(model).expanduser() / "adapter_config.json").is_file():
            return  # a LoRA adapter: its base is checked when it is served
        if not (Path(model).expanduser() / "config.json").is_file():
            raise MarsError(f"model folder {model} has no config.json (not a Hugging Face model)")
        return
    if Path(model).expanduser().exists():
        raise MarsError(f"model {model} is a file; give a Hugging Face model folder or a hub id")
    if not looks_like_hub_id(model):
        raise MarsError(f"model folder not found: {model}")


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
    if not 1 <= port <= 65535:
        raise MarsError(f"--port {port} is not a port: give a number from 1 to 65535")
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
    # transformers only: False applies each request's temperature / top_p (no batching).
    continuous_batching: bool = True
    # LoRA adapters served on `model` (the base), by name; `model` may itself be an adapter.
    adapters: dict[str, str] = field(default_factory=dict)
    resolved_backend: str = field(init=False, default="")
    base_url: str = field(init=False, default="")
    log_path: Path = field(init=False)
    # The temperature / top_p every request gets whatever it asks (transformers with continuous
    # batching, once `warm_up` has fixed them); None when requests' own settings are applied.
    pinned_sampling: dict[str, float] | None = field(init=False, default=None)
    _process: subprocess.Popen[bytes] | None = field(init=False, default=None, repr=False)
    _hub_cache: Path | None = field(init=False, default=None, repr=False)
    _state_path: Path | None = field(init=False, default=None, repr=False)
    _lora: AdapterSet | None = field(init=False, default=None, repr=False)
    _lora_read: bool = field(init=False, default=False, repr=False)

    @property
    def lora(self) -> AdapterSet | None:
        """The base and adapters served, when `model` is an adapter or `adapters` are named."""
        return self._resolve_lora()

    def _resolve_lora(self) -> AdapterSet | None:
        if not self._lora_read:
            from core.adapter_serving import adapter_set

            self._lora = adapter_set(self.model, self.adapters)
            self._lora_read = True
        return self._lora

    def _name_of(self, model: str) -> str:
        argument = model_argument(model)
        if not is_local_folder(argument):
            return argument  # a hub id: both servers serve it under that id
        if self.resolved_backend == "vllm":
            return Path(argument).name
        return local_served_name(argument)

    @property
    def served_name(self) -> str:
        """The `model` field requests must carry (and the name `/v1/models` lists): for an
        adapter folder, the adapter's name."""
        lora = self.lora
        if lora is None:
            return self._name_of(self.model)
        return lora.default or self._name_of(lora.base)

    @property
    def served_names(self) -> list[str]:
        """Every name the server answers: the model, or the base and then each adapter."""
        lora = self.lora
        if lora is None:
            return [self.served_name]
        return [self._name_of(lora.base), *lora.adapters]

    @property
    def kind(self) -> str:
        """What runs: vllm, transformers (`transformers serve`) or adapters (the CPU adapter
        server)."""
        if self.resolved_backend == "transformers" and self.lora is not None:
            return "adapters"
        return self.resolved_backend

    @property
    def batching_pins_sampling(self) -> bool:
        return self.kind == "transformers" and self.continuous_batching

    @property
    def identity(self) -> str:
        return model_fingerprint(self.model)

    def identities(self) -> dict[str, str]:
        """Each served name's weights fingerprint (an adapter's: its own folder's)."""
        lora = self.lora
        if lora is None:
            return {self.served_name: self.identity}
        return {
            self._name_of(lora.base): model_fingerprint(lora.base),
            **{name: model_fingerprint(path) for name, path in lora.adapters.items()},
        }

    def command(self) -> list[str]:
        assert self.port is not None
        lora = self.lora
        if lora is not None:
            from core.adapter_serving import adapter_server_command, vllm_lora_args

            base_name = self._name_of(lora.base)
            if base_name in lora.adapters:
                raise MarsError(f"adapter {base_name} has the base's served name; rename it")
            if self.resolved_backend == "vllm":
                return vllm_command(
                    model_argument(lora.base),
                    host=self.host,
                    port=self.port,
                    served_name=base_name,
                    extra_args=(*vllm_lora_args(lora.adapters), *self.extra_args),
                )
            return adapter_server_command(
                lora,
                host=self.host,
                port=self.port,
                base_name=base_name,
                extra_args=self.extra_args,
            )
        if self.resolved_backend == "vllm":
            return vllm_command(
                model_argument(self.model),
                host=self.host,
                port=self.port,
                served_name=self.served_name,
                extra_args=self.extra_args,
            )
        return transformers_command(
            self.served_name,
            host=self.host,
            port=self.port,
            continuous_batching=self.continuous_batching,
            extra_args=self.extra_args,
        )

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.resolved_backend == "transformers":
            # Offline and with a writable hub cache, or /v1/models fails on a machine with no hub.
            env.setdefault("HF_HUB_OFFLINE", "1")
            env.setdefault("HF_HUB_DISABLE_UPDATE_CHECK", "1")  # the CLI's daily PyPI query
            if self._hub_cache is not None:  # a local folder, in its own hub cache
                env["HF_HUB_CACHE"] = str(self._hub_cache)
            else:
                cache = mars_cache_dir() / "hf-hub"
                cache.mkdir(parents=True, exist_ok=True)
                env.setdefault("HF_HUB_CACHE", str(cache))
            env.setdefault("TOKENIZERS_PARALLELISM", "false")
            # One thread per forward pass: on 2 cores this is ~4x faster than torch's default.
            env.setdefault("OMP_NUM_THREADS", "1")
        return env

    def start(self) -> str:
        self.resolved_backend = resolve_backend(self.backend)
        check_model(self.model)
        self._resolve_lora()  # an adapter whose base is missing or changed: refused here
        if self.port is None:
            self.port = free_port(self.host)
        else:
            check_port_free(self.host, self.port)
        self.base_url = f"http://{self.host}:{self.port}/v1"
        log_dir = self.log_dir or Path(tempfile.mkdtemp(prefix="mars-server-"))
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"server-{self.kind}-{self.port}.log"
        if self.kind == "transformers" and is_local_folder(self.model):
            root = Path(tempfile.mkdtemp(prefix="mars-hub-"))
            self._hub_cache = private_hub_cache(self.model, self.served_name, root)
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
                self._remove_hub_cache()
                raise MarsError(f"cannot start {command[0]}: {exc.strerror}") from exc
        self._wait_until_ready()
        self._write_state()
        return self.base_url

    def _wait_until_ready(self) -> None:
        assert self._process is not None
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                code = self._process.returncode
                self._process = None
                self._remove_hub_cache()
                raise MarsError(
                    f"{self.kind} server exited with code {code} before it was ready; "
                    f"last log lines: {self.last_log_lines()}"
                )
            if models_endpoint_ready(self.base_url):
                return
            time.sleep(0.5)
        self.stop()
        raise MarsError(
            f"{self.kind} server not ready after {self.startup_timeout_s:g}s; "
            f"last log lines: {self.last_log_lines()}"
        )

    def warm_up(self, *, temperature: float, top_p: float, timeout_s: float = 120.0) -> None:
        """Send one tiny request with the run's sampling settings.

        `transformers serve --continuous-batching` fixes temperature and top_p from the first
        request it handles for its whole life, so the first request must carry the run's own;
        they are then `pinned_sampling` (and in the state file). A second warm-up changes nothing.
        """
        if self.kind != "transformers" or self.pinned_sampling is not None:
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
        if self.batching_pins_sampling:
            self.pinned_sampling = {"temperature": temperature, "top_p": top_p}
            self._write_state()

    def _write_state(self) -> None:
        assert self._process is not None
        state = {
            "base_url": self.base_url,
            "model": self.served_name,
            "model_identity": self.identity,
            "backend": self.resolved_backend,
            "continuous_batching": self.batching_pins_sampling,
            "pinned_sampling": self.pinned_sampling,
            "server_pid": self._process.pid,
            "owner_pid": os.getpid(),
            "log": str(self.log_path),
        }
        lora = self.lora
        if lora is not None:  # every name it answers, each with its own weights' identity
            state["server"] = self.kind
            state["models"] = self.served_names
            state["identities"] = self.identities()
            state["base"] = lora.base
            state["adapters"] = lora.adapters
        self._state_path = write_server_state(state)

    def _remove_hub_cache(self) -> None:
        cache, self._hub_cache = self._hub_cache, None
        if cache is not None:
            shutil.rmtree(cache, ignore_errors=True)

    def last_log_lines(self, n: int = 5) -> str:
        return log_tail(self.log_path, n)

    def stop(self, grace_s: float = 10.0) -> None:
        process, self._process = self._process, None
        if process is not None:
            stop_process_group(process, grace_s)
        state, self._state_path = self._state_path, None
        if state is not None:
            state.unlink(missing_ok=True)
        self._remove_hub_cache()

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def __enter__(self) -> ModelServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
