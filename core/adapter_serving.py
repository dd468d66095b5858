"""Serving LoRA adapters: one base model with named adapters behind one OpenAI-compatible API.

`core.servers.ModelServer` serves an adapter checkpoint folder (as its base plus that adapter,
answering under the adapter's name) or a base with named adapters. On a GPU that is `vllm serve
BASE --enable-lora --lora-modules NAME=PATH ...`; on a CPU the project's own adapter server
(`python -m core.adapter_server`, over `core.causal_lm` and `core.batcher`). Both answer each
adapter under its name and the base under the base's served name, and both apply every request's
own sampling settings (nothing is pinned).

An adapter is refused in one line when its base is missing or has changed since it was trained,
or when it was trained on other weights than the base it is served on (`core.checkpoints`).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from core.checkpoints import ADAPTER_CONFIG_FILE, checked_adapter, is_adapter
from core.errors import MarsError
from core.fingerprints import model_fingerprint, recorded_weights_match

ADAPTER_SERVER_MODULE = "core.adapter_server"
# The ranks vLLM's `--max-lora-rank` accepts (vllm/config/lora.py, MaxLoRARanks).
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$")


@dataclass(frozen=True)
class AdapterSet:
    """A base model and the adapters served on it."""

    base: str  # the base model's folder (absolute) or hub id
    adapters: dict[str, str] = field(default_factory=dict)  # name -> adapter folder (absolute)
    # The name requests go to when the model asked for was an adapter folder; None: the base.
    default: str | None = None


def check_adapter_name(name: str) -> None:
    if not _NAME.match(name):
        raise MarsError(
            f"adapter name {name!r}: use letters, digits, '.', '_', '-' or '/' (at most 128), "
            "starting with a letter or digit"
        )


def parse_adapter_options(values: list[str]) -> dict[str, str]:
    """`--adapter NAME=PATH` values as {name: folder}; one line for a malformed or repeated one."""
    adapters: dict[str, str] = {}
    for value in values:
        name, sep, path = value.partition("=")
        name, path = name.strip(), path.strip()
        if not sep or not name or not path:
            raise MarsError(f"--adapter expects NAME=PATH (an adapter checkpoint), got {value!r}")
        check_adapter_name(name)
        if name in adapters:
            raise MarsError(f"--adapter {name} is given twice")
        adapters[name] = path
    return adapters


def _check_base(folder: str, recorded: str | None, base: str) -> None:
    """Refuse an adapter trained on other weights than `base`."""
    if recorded is None or not Path(base).is_dir():
        return  # a PEFT folder no `mars` trainer wrote, or a hub id: nothing to fingerprint
    if not recorded_weights_match(recorded, base):
        served = model_fingerprint(base)
        raise MarsError(
            f"adapter {folder} was trained on other weights (fingerprint {recorded}) than the "
            f"base {base} it would be served on ({served})"
        )


def adapter_set(model: str, adapters: Mapping[str, str] | None = None) -> AdapterSet | None:
    """What serving `model` (plus the named `adapters`) means: None for a whole model with no
    adapters; else its base and every adapter by name, each checked against that base."""
    adapters = dict(adapters or {})
    folder = Path(model).expanduser()
    if not adapters and not (folder.is_dir() and is_adapter(folder)):
        return None
    named: dict[str, str] = {}
    default = None
    if folder.is_dir() and is_adapter(folder):
        info = checked_adapter(folder)
        check_adapter_name(info.name)
        base = info.base
        default = info.name
        named[info.name] = str(folder.resolve())
    else:
        base = model
    base_path = Path(base).expanduser()
    base = str(base_path.resolve()) if base_path.is_dir() else base
    for name, path in adapters.items():
        check_adapter_name(name)
        adapter_folder = Path(path).expanduser()
        if not adapter_folder.is_dir():
            raise MarsError(f"adapter {name}: folder {path} not found")
        if not is_adapter(adapter_folder):
            raise MarsError(
                f"adapter {name}: {path} holds no adapter (no {ADAPTER_CONFIG_FILE}); "
                "a whole model is served on its own"
            )
        resolved = str(adapter_folder.resolve())
        if named.get(name, resolved) != resolved:
            raise MarsError(f"two adapters are named {name} ({named[name]} and {resolved})")
        info = checked_adapter(adapter_folder)
        _check_base(path, info.base_fingerprint, base)
        named[name] = resolved
    return AdapterSet(base=base, adapters=named, default=default)


def lora_rank(folder: str) -> int:
    """The rank `r` in an adapter's adapter_config.json."""
    path = Path(folder) / ADAPTER_CONFIG_FILE
    try:
        rank = json.loads(path.read_text()).get("r")
    except (OSError, ValueError, AttributeError) as exc:
        raise MarsError(f"cannot read the LoRA rank in {path}: {exc}") from exc
    if not isinstance(rank, int) or rank < 1:
        raise MarsError(f"{path}: 'r' (the LoRA rank) is missing or not a positive integer")
    return rank


def vllm_lora_args(adapters: Mapping[str, str]) -> list[str]:
    """vLLM's flags serving every adapter: `--max-lora-rank` is the largest adapter's rank,
    rounded up to a rank vLLM accepts."""
    rank = max(lora_rank(path) for path in adapters.values())
    allowed = [r for r in VLLM_LORA_RANKS if r >= rank]
    if not allowed:
        raise MarsError(f"LoRA rank {rank} is above vLLM's largest, {VLLM_LORA_RANKS[-1]}")
    modules = [f"{name}={path}" for name, path in adapters.items()]
    return [
        "--enable-lora",
        "--lora-modules",
        *modules,
        "--max-loras",
        str(len(adapters)),
        "--max-lora-rank",
        str(allowed[0]),
    ]


def adapter_server_command(
    lora: AdapterSet, *, host: str, port: int, base_name: str, extra_args: tuple[str, ...] = ()
) -> list[str]:
    """The CPU adapter server's command line (core.adapter_server)."""
    command = [sys.executable, "-m", ADAPTER_SERVER_MODULE, "--base", lora.base]
    for name, path in lora.adapters.items():
        command += ["--adapter", f"{name}={path}"]
    command += ["--served-base-name", base_name, "--host", host, "--port", str(port)]
    return command + list(extra_args)
