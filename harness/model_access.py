"""From `--model` / `--base-url` to an endpoint: use the URL given, or serve the model for the run.

With `--base-url` the model name is sent as is. Without it, `--model` (a checkpoint folder or hub
id; the embedded tiny model when omitted) is served for the length of the command and stopped
afterwards; the cache identity is then a fingerprint of the checkpoint, not its name.
"""

from __future__ import annotations

import contextlib
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from harness.endpoint import EndpointConfig, GenerationConfig
from harness.errors import MarsError
from harness.servers import ModelServer, check_model


def default_model() -> str:
    from harness.tiny_model import ensure_tiny_model

    return str(ensure_tiny_model())


def check_reachable(base_url: str, timeout_s: float = 5.0) -> None:
    """Fail early and clearly when nothing listens at the URL (any HTTP answer will do)."""
    try:
        with urllib.request.urlopen(f"{base_url}/models", timeout=timeout_s):
            return
    except urllib.error.HTTPError:
        return  # it answered: reachable, even if it has no /models route or wants a key
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise MarsError(f"cannot reach {base_url} ({reason})") from exc


@contextlib.contextmanager
def model_endpoint(
    *,
    model: str | None,
    base_url: str | None,
    backend: str = "auto",
    concurrency: int = 32,
    timeout_s: float = 120.0,
    max_retries: int = 4,
    api_key_env: str = "OPENAI_API_KEY",
    cache_path: Path | None = None,
    log_dir: Path | None = None,
    gen: GenerationConfig | None = None,
) -> Iterator[EndpointConfig]:
    common = {
        "concurrency": concurrency,
        "timeout_s": timeout_s,
        "max_retries": max_retries,
        "api_key_env": api_key_env,
        "cache_path": str(cache_path) if cache_path else None,
    }
    if base_url:
        if not base_url.startswith(("http://", "https://")):
            raise MarsError(f"--base-url must start with http:// or https:// (got {base_url})")
        if not model:
            raise MarsError("--base-url needs --model NAME (the model name the server expects)")
        base_url = base_url.rstrip("/")
        check_reachable(base_url)
        yield EndpointConfig(base_url=base_url, model=model, **common)
        return
    model = model or default_model()
    check_model(model)
    with ModelServer(model=model, backend=backend, log_dir=log_dir) as server:
        gen = gen or GenerationConfig()
        server.warm_up(temperature=gen.temperature, top_p=gen.top_p)
        yield EndpointConfig(
            base_url=server.base_url,
            model=server.served_name,
            model_identity=server.identity,
            **common,
        )
