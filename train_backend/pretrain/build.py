"""Format pre-training: teach a small causal LM to answer game prompts with a legal move.

`pretrain_tiny_model(base_dir, out_dir, ...)` fine-tunes a Hugging Face model folder (the embedded
tiny model by default) on synthetic transcripts of legal play (`format_data`) with the loss on
the assistant reply only, measures the legal-move rate on held-out positions before and after
(`format_eval`), and writes an ordinary HF folder plus `pretrain.json`.

Prompt styles: `compact` prompts (100-240 tokens) are used whole. `full` prompts grow with the game
(600-3,300 tokens) and would make every step many times dearer, so full-style examples are fewer
and only the last `full_prompt_tokens` tokens of their prompt are kept for training; the reply
depends mostly on the end of the prompt (the current state and the legal list). Evaluation always
uses whole prompts, as a server would receive them.

Training runs on one thread with seeded RNGs, so the same seed gives the same weights. torch and
transformers are imported inside the functions (the CLI stays fast to start).

Beside this module (which loads, evaluates, saves and caches): the recipe (`recipe`), its
example sets (`examples`) and the loop that trains on the replies (`reply_training`).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from core.errors import MarsError
from core.files import build_once
from core.reply_tuning import torch_threads
from core.settings_files import settings_error
from core.tiny_model import move_into_place
from train_backend.local.checkpoint import keep_tokenizer_class
from train_backend.pretrain.examples import (
    check_games,
    copy_stage_examples,
    held_out_examples,
    training_examples,
)
from train_backend.pretrain.format_data import Example
from train_backend.pretrain.format_eval import prompt_key, reply_rates
from train_backend.pretrain.recipe import (
    PRETRAIN_VERSION,
    SELFPLAY_START,
    SELFPLAY_START_NAME,
    PretrainSettings,
    load_recipe,
)
from train_backend.pretrain.reply_training import encode_examples, train_on_replies

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

# The command line, the tests and the benches import the recipe's names from here too.
__all__ = [
    "REPORT_FILE",
    "SELFPLAY_START",
    "SELFPLAY_START_NAME",
    "PretrainSettings",
    "default_pretrained_dir",
    "ensure_pretrained_tiny_model",
    "is_current_build",
    "load_recipe",
    "pretrain_tiny_model",
    "read_report",
    "training_examples",
]

REPORT_FILE = "pretrain.json"


def _check_base(base_dir: Path) -> None:
    if not base_dir.is_dir():
        raise MarsError(f"model folder not found: {base_dir}")
    if not (base_dir / "config.json").is_file():
        raise MarsError(f"{base_dir} has no config.json (not a Hugging Face model folder)")


def _check_out(out_dir: Path, base_dir: Path, overwrite: bool) -> None:
    if out_dir == base_dir:
        raise MarsError("--out must differ from --model (the base model is read, not replaced)")
    if out_dir.exists() and not out_dir.is_dir():
        raise MarsError(f"{out_dir} is a file, not a folder")
    if out_dir.exists() and any(out_dir.iterdir()):
        if not overwrite:
            raise MarsError(f"{out_dir} already exists; pass --overwrite to replace it")
        if not (out_dir / REPORT_FILE).is_file():
            raise MarsError(f"{out_dir} is not a pre-trained model folder; refusing to replace it")


def load_model(base_dir: Path) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """A causal LM and its tokenizer in float32, quietly; one line when the folder cannot
    serve as a chat model (no chat template, no end-of-turn token)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        tokenizer = AutoTokenizer.from_pretrained(base_dir)
        model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    except (OSError, ValueError, KeyError) as exc:
        raise MarsError(f"cannot load a causal LM from {base_dir}: {exc}") from exc
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()
    if not getattr(tokenizer, "chat_template", None):
        raise MarsError(f"{base_dir} has no chat template; format pre-training needs one")
    if tokenizer.eos_token is None:
        raise MarsError(f"{base_dir}: the tokenizer has no end-of-turn (eos) token")
    return model, tokenizer


def _rates_table(rates: dict[str, dict[str, Any]]) -> dict[str, float]:
    return {key: group["rate"] for key, group in rates.items()}


def _save(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, base_dir: Path, folder: Path
) -> None:
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        model.save_pretrained(folder, safe_serialization=True)
        tokenizer.save_pretrained(folder)
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    keep_tokenizer_class(base_dir, folder)
    if (base_dir / "generation_config.json").is_file():
        shutil.copyfile(base_dir / "generation_config.json", folder / "generation_config.json")


def pretrain_tiny_model(
    base_dir: Path | str | None,
    out_dir: Path | str,
    *,
    games: Sequence[str] | None = None,
    examples: int | None = None,
    steps: int | None = None,
    seed: int | None = None,
    overwrite: bool = False,
    eval_positions: int | None = None,
    settings: PretrainSettings | None = None,
    on_step: Callable[[int, float], None] | None = None,
    on_phase: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Fine-tune `base_dir` (default: the embedded tiny model) into `out_dir`; return the report.
    `on_step(step, loss)` after each update, `on_phase(what)` as each phase starts.

    `games`, `examples`, `steps`, `seed` and `eval_positions` override `settings` when given.

    The report (also written as `out_dir/pretrain.json`) holds the recipe, the losses, the time
    taken and the legal-move rate per "game/style" before and after on held-out positions.
    The folder appears whole or not at all (built beside it, then renamed).
    """
    started = time.perf_counter()
    if base_dir is None:
        from core.tiny_model import ensure_tiny_model

        base_dir = ensure_tiny_model()
    base_dir = Path(base_dir).expanduser().resolve()
    out_dir = Path(out_dir).expanduser().resolve()
    overrides: dict[str, Any] = {}
    for name, value in (
        ("games", None if games is None else list(games)),
        ("seed", seed),
        ("examples", examples),
        ("steps", steps),
        ("eval_positions", eval_positions),
    ):
        if value is not None:
            overrides[name] = value
    try:
        settings = (settings or PretrainSettings()).model_copy(update=overrides)
        PretrainSettings.model_validate(settings.model_dump())
    except ValidationError as exc:
        raise settings_error(exc, "pre-training") from None
    specs = check_games(settings.games)
    settings = settings.model_copy(update={"games": [spec.name for spec in specs]})
    _check_base(base_dir)
    _check_out(out_dir, base_dir, overwrite)

    import torch

    say = on_phase or (lambda _what: None)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(settings.seed)
        model, tokenizer = load_model(base_dir)
        data_started = time.perf_counter()
        train = training_examples(specs, settings)
        held_out = held_out_examples(specs, settings)
        rows = encode_examples(tokenizer, train, settings)
        data_s = time.perf_counter() - data_started
        seen = {prompt_key(e) for e in train}

        eval_started = time.perf_counter()
        if held_out:
            say(f"legal-move rate before training, on {len(held_out)} held-out positions")
        before = reply_rates(model, tokenizer, held_out, seen_prompts=seen) if held_out else {}
        eval_s = time.perf_counter() - eval_started
        train_started = time.perf_counter()
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        # Training on `threads` threads (1: the same bytes on any machine); evaluation is greedy
        # and keeps torch's default threads.
        with torch_threads(settings.threads):
            copy_losses = _copy_stage(model, tokenizer, specs, settings, pad_id, say, on_step)
            say(f"training on {len(rows)} replies for {settings.steps} steps")
            losses = train_on_replies(model, rows, settings, pad_id, on_step)
        train_s = time.perf_counter() - train_started
        eval_started = time.perf_counter()
        if held_out:
            say("legal-move rate after training, on the same positions")
        after = reply_rates(model, tokenizer, held_out, seen_prompts=seen) if held_out else {}
        eval_s += time.perf_counter() - eval_started

        report: dict[str, Any] = {
            "version": PRETRAIN_VERSION,
            "base_model": str(base_dir),
            "base_recipe": _base_recipe(base_dir),
            "recipe": settings.recipe(),
            "parameters": sum(p.numel() for p in model.parameters()),
            "training": {
                "examples": len(train),
                "by_kind": _count_by_group(train),
                "reply_tokens": sum(len(ids) - n for ids, n in rows),
                "prompt_tokens": sum(n for _, n in rows),
                "first_loss": round(losses[0], 4) if losses else None,
                "last_loss": round(sum(losses[-10:]) / len(losses[-10:]), 4) if losses else None,
                "losses_every_10": [round(v, 4) for v in losses[::10]],
                "copy_stage": {
                    "steps": len(copy_losses),
                    "last_loss": round(sum(copy_losses[-25:]) / len(copy_losses[-25:]), 4)
                    if copy_losses
                    else None,
                    "losses_every_10": [round(v, 4) for v in copy_losses[::10]],
                },
            },
            "evaluation": {
                "how": "greedy replies to held-out positions (random-vs-random games with seeds "
                "no training game uses; whole prompts, no truncation), read by "
                "games.parsing.parse_move against the legal actions; arithmetic: the boxed "
                "answer equals the sum",
                "legal_rate_before": _rates_table(before),
                "legal_rate_after": _rates_table(after),
                "before": before,
                "after": after,
            },
            "seconds": {},
        }
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.building-", dir=out_dir.parent))
        try:
            staging.chmod(0o755)
            _save(model, tokenizer, base_dir, staging)
            report["seconds"] = {
                "data": round(data_s, 2),
                "train": round(train_s, 2),
                "eval": round(eval_s, 2),
                "total": round(time.perf_counter() - started, 2),
            }
            (staging / REPORT_FILE).write_text(json.dumps(report, indent=2) + "\n")
            for path in staging.iterdir():
                path.chmod(0o644)
            move_into_place(staging, out_dir, overwrite=True)  # checked by _check_out
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    report["out_dir"] = str(out_dir)
    return report


def _copy_stage(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    specs: Sequence[Any],
    settings: PretrainSettings,
    pad_id: int,
    say: Callable[[str], None],
    on_step: Callable[[int, float], None] | None,
) -> list[float]:
    """The recipe's copy stage (`copy_steps`), before the main one; its losses."""
    if not settings.copy_steps:
        return []
    stage = settings.model_copy(
        update={"steps": settings.copy_steps, "batch_size": settings.copy_batch_size}
    )
    rows = encode_examples(tokenizer, copy_stage_examples(specs, settings), stage)
    say(
        f"copy stage: {len(rows)} relabelled replies, until the loss is under "
        f"{settings.copy_stop_below} (at most {settings.copy_steps} steps)"
    )
    return train_on_replies(model, rows, stage, pad_id, on_step, settings.copy_stop_below)


def _count_by_group(examples: Sequence[Example]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for example in examples:
        key = f"{example.kind}/{example.style}"
        counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items()))


def read_report(folder: Path) -> dict[str, Any]:
    path = Path(folder) / REPORT_FILE
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise MarsError(f"cannot read {path}: {exc}") from exc


def default_pretrained_dir(name: str = "") -> Path:
    """Beside the tiny model: `$MARS_CACHE_DIR/tiny-model-v1-format[-NAME]` (else ~/.cache/mars)."""
    from core.tiny_model import default_tiny_model_dir

    tiny = default_tiny_model_dir()
    return tiny.with_name(f"{tiny.name}-format" + (f"-{name}" if name else ""))


def _base_recipe(base_dir: Path) -> dict[str, Any] | None:
    """The embedded tiny model's build recipe, when the base is one (else None)."""
    from core.tiny_model import read_build_info

    try:
        return read_build_info(base_dir).get("recipe")
    except MarsError:
        return None


def ensure_pretrained_tiny_model(
    settings: PretrainSettings | None = None,
    *,
    name: str = "",
    on_step: Callable[[int, float], None] | None = None,
) -> Path:
    """A format-pre-trained tiny model, built on first use and rebuilt when its recipe changes.

    The default recipe (`PretrainSettings()`) lives in `default_pretrained_dir()`; another recipe
    needs a `name` and lives beside it (`...-format-NAME`). The recipe plus the tiny model's own
    build recipe decide the result, so a change to either rebuilds it. Built like
    `ensure_tiny_model`: into a temporary sibling renamed into place, so concurrent callers see
    the whole folder or nothing, and whichever build lands first is kept. `on_step(step, loss)`
    follows a build.
    """
    from core.tiny_model import ensure_tiny_model

    if settings is not None and not name:
        raise MarsError("a pre-training recipe other than the default needs a cache name")
    settings = settings or PretrainSettings()
    base = ensure_tiny_model()
    target = default_pretrained_dir(name)

    def build() -> None:
        if target.exists() and any(target.iterdir()) and not (target / REPORT_FILE).is_file():
            raise MarsError(
                f"{target} exists but is not a pre-trained tiny model; remove it and retry"
            )
        with contextlib.suppress(FileExistsError):
            pretrain_tiny_model(base, target, overwrite=True, settings=settings, on_step=on_step)

    return build_once(target, lambda: is_current_build(target, base, settings), build)


def is_current_build(folder: Path, base: Path, settings: PretrainSettings | None = None) -> bool:
    """Whether `folder` holds this recipe's (default: the default's) pre-training of `base`."""
    try:
        report = json.loads((folder / REPORT_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return False
    return (
        report.get("recipe") == (settings or PretrainSettings()).recipe()
        and report.get("base_recipe") is not None
        and report.get("base_recipe") == _base_recipe(base)
    )
