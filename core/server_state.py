"""Servers started by `mars` on this machine, by address: a state file per running server.

`~/.cache/mars/servers/<host>_<port>_v1.json` holds what the server serves (model name, weights
fingerprint, pinned sampling, pid), written when it is ready and removed when it stops, so a
client given only the URL (`--base-url`) finds the model name and the sampling it pins.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from core.files import mars_cache_dir, write_json_atomic


def _state_file(base_url: str) -> Path:
    """One file per server address; `localhost` and `127.0.0.1` are the same server."""
    address = base_url.rstrip("/").split("://", 1)[-1].replace("localhost", "127.0.0.1")
    return mars_cache_dir() / "servers" / (re.sub(r"[^A-Za-z0-9._-]+", "_", address) + ".json")


def write_server_state(state: dict[str, object]) -> Path:
    path = _state_file(str(state["base_url"]))
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, state)
    return path


def _alive(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def server_state(base_url: str) -> dict[str, object] | None:
    """What a server started by `mars` (on this machine) at `base_url` serves: model name,
    pinned sampling, ...; None when no live `mars`-started server is known there."""
    path = _state_file(base_url)
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict) or not _alive(state.get("server_pid")):
        return None
    return state
