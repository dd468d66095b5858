"""The options of every command that talks to a model, declared once.

Each field below is one command-line option: its flag, default, help and bounds live in the
field. `mars` turns the fields into the options of each command that talks to a model
(`mars.commands.model_options`), `mars loop` turns an options object back into the argument list
of the commands it runs (`as_argv`), and `open_endpoint` turns it into a model endpoint. Adding an
option is one field here, plus its use in `open_endpoint` or `generation` when it changes a request.

A command may give an option another default (self-play samples at temperature 0.6); the
defaults of every command are listed in docs/run-format.md, and a test keeps that list true.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from core.endpoint import EndpointConfig, GenerationConfig
    from core.runstore import RunDir


def option(
    default: Any,
    flag: str,
    help: str = "",
    *,
    min: float | None = None,
    max: float | None = None,
) -> Any:
    """A dataclass field that is also a command-line option."""
    return field(default=default, metadata={"flag": flag, "help": help, "min": min, "max": max})


@dataclass(frozen=True)
class ModelOptions:
    """Which model answers, and how the client talks to it."""

    model: str | None = option(
        None,
        "--model",
        "Checkpoint folder or hub id to serve (default: the embedded tiny model); "
        "with --base-url, the model name the server expects.",
    )
    base_url: str | None = option(
        None,
        "--base-url",
        "An OpenAI-compatible endpoint already running (e.g. http://host:8000/v1).",
    )
    backend: str = option("auto", "--backend", "Server for --model: auto | vllm | transformers.")
    api_key_env: str = option(
        "OPENAI_API_KEY", "--api-key-env", "Name of the env var holding the API key."
    )
    concurrency: int = option(32, "--concurrency", "Model requests in flight at most.", min=1)
    timeout: float = option(120.0, "--timeout", "Seconds per request attempt.", min=0.1)
    max_retries: int = option(
        4, "--max-retries", "Retries on 429 / 5xx / timeouts / dropped connections.", min=0
    )
    cache: Path | None = option(
        None, "--cache", "sqlite response cache: a rerun with it is deterministic and free."
    )

    def __post_init__(self) -> None:
        # Checked as the flags are read, before any run folder or server exists.
        if self.cache is not None and Path(self.cache).is_dir():
            from core.errors import MarsError

            raise MarsError(
                f"--cache {self.cache} is a folder; give a file, e.g. {self.cache}/responses.sqlite"
            )


@dataclass(frozen=True)
class SamplingOptions:
    """How the model samples its replies."""

    temperature: float = option(0.0, "--temperature", "Sampling temperature.", min=0.0)
    top_p: float = option(1.0, "--top-p", "Nucleus sampling: the top-p mass.", min=0.0, max=1.0)
    max_tokens: int = option(1024, "--max-tokens", "New tokens per model reply.", min=1)
    seed: int = option(0, "--seed", "Seed for sampling and for anything shuffled.")

    def generation(self) -> GenerationConfig:
        from core.endpoint import GenerationConfig

        return GenerationConfig(
            temperature=self.temperature,
            top_p=self.top_p,
            max_tokens=self.max_tokens,
            seed=self.seed,
        )


OptionGroup = ModelOptions | SamplingOptions


def as_argv(options: OptionGroup, *, skip: Sequence[str] = ()) -> list[str]:
    """The flags that reproduce `options` on another `mars` command's line (unset ones left out,
    and the fields named in `skip`)."""
    argv: list[str] = []
    for spec in dataclasses.fields(options):
        value = getattr(options, spec.name)
        if spec.name in skip or value is None:
            continue
        argv += [spec.metadata["flag"], repr(value) if isinstance(value, float) else str(value)]
    return argv


@contextmanager
def open_endpoint(
    options: ModelOptions,
    run: RunDir | Path | None,
    generation: GenerationConfig,
    *,
    extra_sampling: Sequence[GenerationConfig] = (),
    adapters: Mapping[str, str] | None = None,
) -> Iterator[EndpointConfig]:
    """The endpoint `options` name, for as long as the `with` lasts: the URL given, or the model
    served here (its server log in `run`, a run directory or a folder). `generation` is what the
    command asks for (a served model is warmed up with it); `extra_sampling` lists other settings
    it asks the same model for (an LLM judge), so a server that would pin one setting is not used
    for them. `adapters` (name -> LoRA adapter folder) are served beside the model on the same
    server."""
    from core.model_access import model_endpoint

    with model_endpoint(
        model=options.model,
        base_url=options.base_url,
        gen=generation,
        backend=options.backend,
        concurrency=options.concurrency,
        timeout_s=options.timeout,
        max_retries=options.max_retries,
        api_key_env=options.api_key_env,
        cache_path=options.cache,
        log_dir=run if run is None or isinstance(run, Path) else run.path,
        extra_sampling=extra_sampling,
        adapters=adapters,
    ) as endpoint:
        yield endpoint
