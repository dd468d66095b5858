"""`mars serve`: put a checkpoint behind an OpenAI-compatible API until Ctrl-C or SIGTERM."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from types import FrameType

import typer

from mars.main import app


@app.command("serve")
def serve(
    model: str = typer.Argument(
        None, help="Checkpoint folder or hub id (default: the tiny model)."
    ),
    backend: str = typer.Option("auto", help="auto | vllm | transformers"),
    host: str = typer.Option("127.0.0.1", help="Address to listen on."),
    port: int = typer.Option(None, help="Port (default: a free one)."),
    startup_timeout: float = typer.Option(300.0, help="Seconds to wait for /v1/models."),
    log_dir: Path = typer.Option(None, help="Folder for the server log (default: a temp dir)."),
    continuous_batching: bool = typer.Option(
        True,
        "--continuous-batching/--no-continuous-batching",
        help="transformers: batch requests (fast), sampling every request at --temperature / "
        "--top-p; without it each request's own settings apply, one request at a time.",
    ),
    temperature: float = typer.Option(
        0.0, "--temperature", min=0.0, help="transformers with batching: the sampling temperature."
    ),
    top_p: float = typer.Option(
        1.0, "--top-p", min=0.0, max=1.0, help="transformers with batching: the sampling top_p."
    ),
) -> None:
    """Serve MODEL; print the model name to send and the base URL; stop on Ctrl-C / SIGTERM."""
    from core.model_access import default_model
    from core.servers import ModelServer

    server = ModelServer(
        model=model or default_model(),
        backend=backend,
        host=host,
        port=port,
        startup_timeout_s=startup_timeout,
        log_dir=log_dir,
        continuous_batching=continuous_batching,
    )
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stop.set()

    previous = signal.signal(signal.SIGTERM, on_signal)
    try:
        server.start()
        # Fixes the sampling of a batching transformers server for its life (core.servers).
        server.warm_up(temperature=temperature, top_p=top_p)
        print(f"serving {server.model} with {server.resolved_backend}", flush=True)
        if server.pinned_sampling:
            print(
                f"sampling: every request at temperature {temperature:g}, top_p {top_p:g} "
                "(continuous batching; --no-continuous-batching applies each request's own)",
                flush=True,
            )
        print(f"model: {server.served_name}", flush=True)
        print(f"log: {server.log_path}", flush=True)
        print(f"base url: {server.base_url}", flush=True)
        print(
            f"next, in another shell: mars eval --base-url {server.base_url} --suite gsm8k "
            "--limit 5   (Ctrl-C here stops the server)",
            flush=True,
        )
        while not stop.wait(0.5):
            if not server.running:
                print(f"server exited; last log lines: {server.last_log_lines()}", flush=True)
                raise typer.Exit(1)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        signal.signal(signal.SIGTERM, previous)
    print("stopped", flush=True)
