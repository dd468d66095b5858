"""`mars serve`: put a checkpoint behind an OpenAI-compatible API until Ctrl-C or SIGTERM.

A LoRA adapter checkpoint, or a base with `--adapter NAME=PATH` (repeatable), is served as the
base plus each adapter under its own name (`core.adapter_serving`)."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

import typer

from core.errors import MarsError
from mars.commands.app import app

if TYPE_CHECKING:
    from core.servers import ModelServer


MODEL_OPTION = typer.Argument(
    None,
    help="Checkpoint folder or hub id (default: the tiny model); an adapter checkpoint is "
    "served on its base.",
)
ADAPTER_OPTION = typer.Option(
    [],
    "--adapter",
    help="A LoRA adapter checkpoint served on MODEL (the base) as NAME: NAME=PATH "
    "(repeatable). Without MODEL, the adapters' own base.",
)
CONTINUOUS_BATCHING_OPTION = typer.Option(
    True,
    "--continuous-batching/--no-continuous-batching",
    help="transformers: batch requests (fast), sampling every request at --temperature / "
    "--top-p; without it each request's own settings apply, one request at a time.",
)
TEMPERATURE_OPTION = typer.Option(
    0.0, "--temperature", min=0.0, help="transformers with batching: the sampling temperature."
)
TOP_P_OPTION = typer.Option(
    1.0, "--top-p", min=0.0, max=1.0, help="transformers with batching: the sampling top_p."
)


@app.command("serve")
def serve(
    model: str = MODEL_OPTION,
    model_option: str = typer.Option(None, "--model", help="The same as MODEL."),
    adapter: list[str] = ADAPTER_OPTION,
    backend: str = typer.Option("auto", help="auto | vllm | transformers"),
    host: str = typer.Option("127.0.0.1", help="Address to listen on."),
    port: int = typer.Option(None, help="Port (default: a free one)."),
    startup_timeout: float = typer.Option(300.0, help="Seconds to wait for /v1/models."),
    log_dir: Path = typer.Option(None, help="Folder for the server log (default: a temp dir)."),
    continuous_batching: bool = CONTINUOUS_BATCHING_OPTION,
    temperature: float = TEMPERATURE_OPTION,
    top_p: float = TOP_P_OPTION,
) -> None:
    """Serve MODEL; print the model name to send and the base URL; stop on Ctrl-C / SIGTERM."""
    from core.adapter_serving import parse_adapter_options
    from core.servers import ModelServer

    if model and model_option and model != model_option:
        raise MarsError(f"MODEL {model} and --model {model_option} differ: give one")
    adapters = parse_adapter_options(adapter)
    server = ModelServer(
        model=_model_to_serve(model or model_option, adapters),
        adapters=adapters,
        backend=backend,
        host=host,
        port=port,
        startup_timeout_s=startup_timeout,
        log_dir=log_dir,
        continuous_batching=continuous_batching,
    )
    with _stop_on_sigterm() as stop:
        try:
            server.start()
            # Fixes the sampling of a batching transformers server for its life (core.servers).
            server.warm_up(temperature=temperature, top_p=top_p)
            _print_serving(server, temperature, top_p)
            _wait(server, stop)
        except KeyboardInterrupt:
            pass
        finally:
            server.stop()
    print("stopped", flush=True)


@contextlib.contextmanager
def _stop_on_sigterm() -> Iterator[threading.Event]:
    """An event SIGTERM sets while the `with` lasts (the earlier handler back after it)."""
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stop.set()

    previous = signal.signal(signal.SIGTERM, on_signal)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGTERM, previous)


def _print_serving(server: ModelServer, temperature: float, top_p: float) -> None:
    """What is served, under which names, where, and the command to run next."""
    print(f"serving {server.model} with {_server_words(server)}", flush=True)
    if server.pinned_sampling:
        print(
            f"sampling: every request at temperature {temperature:g}, top_p {top_p:g} "
            "(continuous batching; --no-continuous-batching applies each request's own)",
            flush=True,
        )
    lora = server.lora
    if lora is None:
        print(f"model: {server.served_name}", flush=True)
    else:
        base_name, *names = server.served_names
        print(f"model: {base_name}   (the base, {lora.base})", flush=True)
        for name in names:
            print(f"model: {name}   (adapter {lora.adapters[name]})", flush=True)
    print(f"log: {server.log_path}", flush=True)
    print(f"base url: {server.base_url}", flush=True)
    print(f"next, in another shell: {_next_command(server)}", flush=True)


def _wait(server: ModelServer, stop: threading.Event) -> None:
    """Until `stop` is set (SIGTERM); exit 1 when the server exits on its own."""
    while not stop.wait(0.5):
        if not server.running:
            print(f"server exited; last log lines: {server.last_log_lines()}", flush=True)
            raise typer.Exit(1)


def _model_to_serve(model: str | None, adapters: dict[str, str]) -> str:
    """MODEL, else the base the adapters name (they must agree), else the tiny model."""
    from core.checkpoints import adapter_info
    from core.model_access import default_model

    if model:
        return model
    bases = set()
    for name, path in adapters.items():
        info = adapter_info(Path(path)) if Path(path).is_dir() else None
        if info is None:
            raise MarsError(f"--adapter {name}: {path} is not an adapter checkpoint folder")
        bases.add(info.base)
    if len(bases) > 1:
        raise MarsError(
            f"the adapters sit on {len(bases)} bases ({', '.join(sorted(bases))}); "
            "serve one base at a time: give it as MODEL"
        )
    return bases.pop() if bases else default_model()


def _server_words(server: ModelServer) -> str:
    if server.kind == "adapters":
        return "the CPU adapter server (each request's own sampling settings)"
    if server.lora is not None:
        return f"{server.resolved_backend} (LoRA adapters)"
    return server.resolved_backend


def _next_command(server: ModelServer) -> str:
    """The eval to paste next: with adapters, the first one as the model and any second as
    another role's (`--role`)."""
    url = server.base_url
    command = f"mars eval --base-url {url} --suite gsm8k --limit 5"
    if server.lora is None:
        return f"{command}   (Ctrl-C here stops the server)"
    names = list(server.lora.adapters)
    command = f"{command} --model {names[0]}"
    if len(names) > 1:
        command += f" --mas reasoner_tool --role reasoner={names[1]}@{url}"
    return f"{command}   (Ctrl-C here stops the server)"
