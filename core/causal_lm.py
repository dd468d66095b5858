"""A policy: one Hugging Face causal LM and its tokenizer, held in this process (the CPU
trainers' policies, shared by both seats of every game, and the CPU adapter server's models).

Loading turns every way a folder can be wrong (missing, not a causal LM, no tokenizer, no chat
template) into one `MarsError` line. torch and transformers are imported inside the functions so
the CLI stays fast to start.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.errors import MarsError

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

Message = dict[str, str]


@dataclass
class Policy:
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    source: str  # the folder (or hub id) it was loaded from
    stop_ids: tuple[int, ...]  # generation ends at any of these (kept in the completion)
    pad_id: int
    # The PEFT adapter of a shared model that is this policy (train_backend.local.adapters,
    # `core.adapter_server`);
    # None: `model` is a whole model of its own.
    adapter: str | None = None

    def encode_chat(self, messages: list[Message]) -> list[int]:
        """Token ids of the chat rendered by the model's chat template, ready for the reply."""
        text = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=False
        )
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)


def activate(policy: Policy) -> None:
    """Make `policy`'s adapter the one the shared model runs (no-op for a whole model)."""
    if policy.adapter is not None and policy.model.active_adapter != policy.adapter:
        policy.model.set_adapter(policy.adapter)


def resolve_model_path(model: str | None) -> str:
    """`model` as given, or the embedded tiny model (built on first use) when None."""
    if model is None:
        from core.tiny_model import ensure_tiny_model

        return str(ensure_tiny_model())
    return str(model)


@contextlib.contextmanager
def _quiet_loading() -> Iterator[None]:
    from transformers.utils import logging as hf_logging

    bars_were_on = hf_logging.is_progress_bar_enabled()
    verbosity = hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars_were_on:
            hf_logging.enable_progress_bar()


def load_policy(model: str | Path, *, tokenizer_from: str | Path | None = None) -> Policy:
    """Load a causal LM (float32, eval mode) and its tokenizer; MarsError if the folder is wrong.

    `tokenizer_from` reads the tokenizer from another folder (a checkpoint always holds its own;
    this is for callers that only saved weights).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = str(model)
    local = Path(source).expanduser()
    looks_local = local.exists() or source.startswith((".", "/", "~")) or source.count("/") > 1
    if looks_local and not local.is_dir():
        raise MarsError(f"model folder {source} does not exist")
    if looks_local and not (local / "config.json").is_file():
        raise MarsError(f"{source} is not a Hugging Face model folder (no config.json)")
    try:
        with _quiet_loading():
            loaded = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
            tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_from or source))
    except (OSError, ValueError, KeyError, TypeError, RuntimeError, AttributeError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise MarsError(f"{source} is not a loadable Hugging Face causal LM: {reason}") from exc
    if not getattr(tokenizer, "chat_template", None):
        raise MarsError(f"{source}: the tokenizer has no chat template")
    loaded.eval()
    return Policy(
        model=loaded,
        tokenizer=tokenizer,
        source=source,
        stop_ids=_stop_ids(loaded, tokenizer),
        pad_id=_pad_id(tokenizer),
    )


def _as_ids(value: Any) -> list[int]:
    if value is None:
        return []
    if isinstance(value, int):
        return [value]
    return [int(v) for v in value]


def _stop_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> tuple[int, ...]:
    generation = getattr(model, "generation_config", None)
    ids = _as_ids(getattr(generation, "eos_token_id", None)) + _as_ids(tokenizer.eos_token_id)
    if not ids:
        raise MarsError("the model names no end-of-sequence token; generation could not stop")
    return tuple(dict.fromkeys(ids))


def _pad_id(tokenizer: PreTrainedTokenizerBase) -> int:
    if tokenizer.pad_token_id is not None:
        return int(tokenizer.pad_token_id)
    return _as_ids(tokenizer.eos_token_id)[0]
