"""From `--model` / `--base-url` to an endpoint: use the URL given, or serve the model for the run.

With `--base-url` the model name is sent as is; without `--model`, the name is found by one rule:
the name a server started by `mars` (e.g. `mars serve`) on this machine recorded for that URL, else
the only model the server's `/v1/models` lists (none or several: a one-line error asking for
`--model`). Without `--base-url`, `--model` (a checkpoint folder or hub id; the embedded tiny model
when omitted) is served for the length of the command and stopped afterwards; the cache identity
is then a fingerprint of the checkpoint, not its name.

Sampling: a `transformers serve --continuous-batching` server applies the temperature and top_p of
its first request to every request (see `core.servers`). A server `mars` starts is warmed up
with the run's settings, or started without continuous batching when the command samples at more
than one setting (`extra_sampling`); a `mars`-started server at `--base-url` whose pinned
settings differ from the run's is refused in one line, and `Endpoint` refuses any request whose
settings such a server would not apply.

Adapters: `--model` may be a LoRA adapter checkpoint; it is served as its base plus that adapter,
and the endpoint's model name is the adapter's name, its identity the adapter folder's
fingerprint. `adapters` names more adapters for the same server (one server for every role's
policy); `adapter_endpoint` points a copy of the endpoint at one of them. A `mars`-started
server with adapters records each name's identity in its state file.
"""

from __future__ import annotations

import contextlib
import json
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from core.endpoint import EndpointConfig, GenerationConfig, replica_urls
from core.errors import MarsError
from core.fingerprints import model_fingerprint
from core.server_state import server_state
from core.servers import ModelServer, check_model


def default_model() -> str:
    from core.tiny_model import ensure_tiny_model

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


def listed_models(base_url: str, timeout_s: float = 5.0) -> list[str] | None:
    """The model ids `/v1/models` lists, or None when it cannot be read."""
    try:
        with urllib.request.urlopen(f"{base_url}/models", timeout=timeout_s) as response:
            payload = json.loads(response.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None
    data = payload.get("data") if isinstance(payload, dict) else None
    if not isinstance(data, list):
        return None
    return [str(entry["id"]) for entry in data if isinstance(entry, dict) and entry.get("id")]


def check_api_root(base_url: str) -> None:
    """A URL that lists no models while `URL/v1` does is missing its `/v1`: say so, instead of
    every request failing with 404."""
    if base_url.endswith("/v1") or listed_models(base_url) is not None:
        return
    if listed_models(f"{base_url}/v1") is not None:
        raise MarsError(
            f"{base_url} is not an OpenAI-compatible API root, {base_url}/v1 is: "
            f"pass --base-url {base_url}/v1"
        )


def checked_replicas(base_url: str) -> list[str]:
    """`--base-url`'s URLs (one, or comma-separated replicas of one model), each reachable and an
    API root; one line for the first that is not."""
    urls = [url.rstrip("/") for url in replica_urls(base_url)]
    for url in urls:
        check_reachable(url)
        check_api_root(url)
    return urls


def check_replicas_serve(urls: Sequence[str], model: str) -> None:
    """Every replica must serve `model` (a server that lists its models and not this one is
    another model, not a replica)."""
    for url in urls[1:]:
        names = listed_models(url)
        if names is not None and model not in names:
            listed = ", ".join(names) or "none"
            raise MarsError(
                f"--base-url: {url} does not serve {model} (it lists {listed}); every "
                "comma-separated URL must be a replica of the same model"
            )


def served_model_name(base_url: str) -> str:
    """The model name to send to `base_url` when the user gave none (the rule in the module doc)."""
    state = server_state(base_url)
    if state is not None and state.get("model"):
        return str(state["model"])
    names = listed_models(base_url)
    if names is not None and len(names) == 1:
        return names[0]
    if names is None:
        raise MarsError(
            f"{base_url}/models does not answer as an OpenAI-compatible API (no JSON list of "
            "models): give the API root of a model server, e.g. http://HOST:PORT/v1"
        )
    if not names:
        raise MarsError(
            f"{base_url}/models lists no model; pass --model NAME (the name the server expects)"
        )
    raise MarsError(
        f"{base_url} serves {len(names)} models ({', '.join(names)}); pass --model NAME"
    )


def _sampling(gen: GenerationConfig) -> tuple[float, float]:
    """What decides a reply's randomness; at temperature 0 (greedy) top_p does not matter."""
    return (0.0, 1.0) if gen.temperature == 0 else (gen.temperature, gen.top_p)


def check_pinned_sampling(
    base_url: str, pinned: dict[str, float] | None, gens: Sequence[GenerationConfig]
) -> None:
    """Refuse a run that asks for sampling settings the server would silently replace."""
    if not pinned:
        return
    fixed = GenerationConfig(temperature=pinned["temperature"], top_p=pinned["top_p"])
    wanted = sorted({_sampling(gen) for gen in gens})
    if wanted == [_sampling(fixed)]:
        return
    server = (
        f"the server at {base_url} (transformers serve with continuous batching) samples every "
        f"request at temperature {fixed.temperature:g}, top_p {fixed.top_p:g}, fixed by its "
        "first request"
    )
    if len(wanted) > 1:
        asked = "; ".join(f"temperature {t:g}, top_p {p:g}" for t, p in wanted)
        raise MarsError(
            f"{server}; this command samples at {len(wanted)} settings ({asked}): restart it "
            "with --no-continuous-batching to apply each request's own, or map the other "
            "role (e.g. the judge) to another server with --role"
        )
    temperature, top_p = wanted[0]
    raise MarsError(
        f"{server}; this command asks temperature {temperature:g}, top_p {top_p:g}: restart it "
        f"with `mars serve --temperature {temperature:g} --top-p {top_p:g}`, or with "
        "--no-continuous-batching to apply each request's own settings"
    )


@contextlib.contextmanager
def model_endpoint(
    *,
    model: str | None,
    base_url: str | None,
    gen: GenerationConfig,
    backend: str = "auto",
    concurrency: int = 32,
    timeout_s: float = 120.0,
    max_retries: int = 4,
    api_key_env: str = "OPENAI_API_KEY",
    cache_path: Path | None = None,
    log_dir: Path | None = None,
    extra_sampling: Sequence[GenerationConfig] = (),
    adapters: Mapping[str, str] | None = None,
) -> Iterator[EndpointConfig]:
    """`gen` is the command's generation config (a served model is warmed up with it);
    `extra_sampling` lists other settings the command will request from the same model (an LLM
    judge, ...), so a server that would pin one setting is not used for them. `gen` has no
    default: a command that left it out would be checked against greedy sampling. `adapters`
    (name -> adapter folder) are served beside `model` on the same server (not with
    `base_url`)."""
    common = {
        "concurrency": concurrency,
        "timeout_s": timeout_s,
        "max_retries": max_retries,
        "api_key_env": api_key_env,
        "cache_path": str(cache_path) if cache_path else None,
    }
    if base_url:
        if adapters:
            raise MarsError("adapters are served by a server started here: leave out --base-url")
        urls = checked_replicas(base_url)
        base_url = urls[0]  # the first replica's state file and model name stand for all
        state = server_state(base_url)
        model = model or served_model_name(base_url)
        check_replicas_serve(urls, model)
        pinned, identity = None, None
        identities = state.get("identities") if state is not None else None
        if state is not None and state.get("model") == model:
            # A server `mars` started: its weights' fingerprint keys the response cache.
            recorded = state.get("pinned_sampling")
            pinned = recorded if isinstance(recorded, dict) else None
            identity = str(state["model_identity"]) if state.get("model_identity") else None
            check_pinned_sampling(base_url, pinned, [gen, *extra_sampling])
        elif isinstance(identities, dict) and identities.get(model):
            identity = str(identities[model])  # an adapter (or the base) of a `mars` server
        yield EndpointConfig(
            base_url=",".join(urls),
            model=model,
            model_identity=identity,
            pinned_sampling=pinned,
            **common,
        )
        return
    model = model or default_model()
    check_model(model)
    settings = {_sampling(g) for g in (gen, *extra_sampling)}
    with ModelServer(
        model=model,
        backend=backend,
        log_dir=log_dir,
        continuous_batching=len(settings) == 1,
        adapters=dict(adapters or {}),
    ) as server:
        server.warm_up(temperature=gen.temperature, top_p=gen.top_p)
        yield EndpointConfig(
            base_url=server.base_url,
            model=server.served_name,
            model_identity=server.identity,
            pinned_sampling=server.pinned_sampling,
            **common,
        )


def adapter_endpoint(config: EndpointConfig, name: str, folder: str) -> EndpointConfig:
    """`config`'s server, asked for the adapter `name` (served from `folder`) instead."""
    return config.model_copy(update={"model": name, "model_identity": model_fingerprint(folder)})
