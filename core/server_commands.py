"""The command lines of the model servers `core.servers.ModelServer` starts: `vllm serve` where
CUDA and vLLM are present, `transformers serve` (on the CPU) otherwise, and the names they serve a
model under (`transformers serve` serves a local folder as `local/<folder name>` from a private
hub cache that holds only that folder).
"""

from __future__ import annotations

import hashlib
import re
import shutil
import sys
from pathlib import Path

from core.errors import MarsError
from core.fingerprints import model_fingerprint

BACKENDS = ("auto", "vllm", "transformers")


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


def is_local_folder(model: str) -> bool:
    return Path(model).expanduser().is_dir()


def local_served_name(model: str) -> str:
    """The hub-style id under which `transformers serve` serves a local folder."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(model).expanduser().resolve().name)
    name = re.sub(r"-{2,}", "-", name).strip("-.") or "model"
    return f"local/{name[:80]}"


def private_hub_cache(model: str, served_name: str, root: Path) -> Path:
    """A hub cache in `root` holding only `model` (symlinks), under `served_name`, offline-ready."""
    org, name = served_name.split("/", 1)
    repo = root / f"models--{org}--{name}"
    revision = hashlib.sha1(model_fingerprint(model).encode()).hexdigest()
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True, exist_ok=True)
    (repo / "blobs").mkdir(exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(revision)
    for entry in Path(model).expanduser().resolve().iterdir():
        link = snapshot / entry.name
        if not link.exists():
            link.symlink_to(entry)
    return root


def model_argument(model: str) -> str:
    """A local folder as an absolute path (servers resolve relative paths against their own cwd)."""
    path = Path(model).expanduser()
    return str(path.resolve()) if path.is_dir() else model


def _serve_command(tool: str, model: str, host: str, port: int) -> list[str]:
    """`<tool> serve <model> --host <host> --port <port>`, the start both servers share."""
    return [_executable(tool), "serve", model, "--host", host, "--port", str(port)]


def vllm_command(
    model: str,
    *,
    host: str,
    port: int,
    served_name: str,
    reasoning_parser: str | None = "qwen3",
    extra_args: tuple[str, ...] = (),
) -> list[str]:
    command = [*_serve_command("vllm", model, host, port), "--served-model-name", served_name]
    if reasoning_parser:
        command += ["--reasoning-parser", reasoning_parser]
    return command + list(extra_args)


# `transformers serve --continuous-batching` otherwise reserves ~90% of free RAM for its KV cache
# (6-7 GB and up to a minute before the first reply on CPU). 512 blocks of 256 tokens cover
# 64 requests of 2,048 tokens; raise --cb-num-blocks for longer contexts.
CB_NUM_BLOCKS = 512
CB_MAX_BATCH_TOKENS = 512


def transformers_command(
    model: str,
    *,
    host: str,
    port: int,
    continuous_batching: bool = True,
    extra_args: tuple[str, ...] = (),
) -> list[str]:
    command = [*_serve_command("transformers", model, host, port), "--device", "cpu"]
    if continuous_batching:
        command += [
            "--continuous-batching",
            "--cb-num-blocks",
            str(CB_NUM_BLOCKS),
            "--cb-max-batch-tokens",
            str(CB_MAX_BATCH_TOKENS),
        ]
    return [*command, "--log-level", "info", *extra_args]
