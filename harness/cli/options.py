"""Options shared by the commands that talk to a model or write a run directory."""

from __future__ import annotations

from pathlib import Path

import typer

MODEL = typer.Option(
    None,
    "--model",
    help="Checkpoint folder or hub id to serve (default: the embedded tiny model); "
    "with --base-url, the model name the server expects.",
)
BASE_URL = typer.Option(
    None,
    "--base-url",
    help="An OpenAI-compatible endpoint already running (e.g. http://host:8000/v1).",
)
BACKEND = typer.Option("auto", "--backend", help="Server for --model: auto | vllm | transformers.")
API_KEY_ENV = typer.Option(
    "OPENAI_API_KEY", "--api-key-env", help="Name of the env var holding the API key."
)
CONCURRENCY = typer.Option(32, "--concurrency", min=1, help="Model requests in flight at most.")
TIMEOUT = typer.Option(120.0, "--timeout", min=0.1, help="Seconds per request attempt.")
MAX_RETRIES = typer.Option(
    4, "--max-retries", min=0, help="Retries on 429 / 5xx / timeouts / dropped connections."
)
TEMPERATURE = typer.Option(0.0, "--temperature", min=0.0)
TOP_P = typer.Option(1.0, "--top-p", min=0.0, max=1.0)
MAX_TOKENS = typer.Option(1024, "--max-tokens", min=1, help="New tokens per model reply.")
SEED = typer.Option(0, "--seed", help="Seed for sampling and for anything shuffled.")
CACHE = typer.Option(
    None, "--cache", help="sqlite response cache: a rerun with it is deterministic and free."
)
OUT = typer.Option(
    Path("runs"), "--out", help="Root folder; a new run directory is created inside it."
)
RUN_DIR = typer.Option(
    None, "--run-dir", help="Exactly this run directory; rerunning with the same path resumes."
)
