"""Format pre-training: teach a small causal LM to answer game prompts with a legal move.

`pretrain_tiny_model(base_dir, out_dir, ...)` fine-tunes a Hugging Face model folder (the embedded
tiny model by default) on synthetic transcripts of legal play (`train_backend.format_data`) with
the loss on the assistant reply only, measures the legal-move rate on held-out positions before
and after (`train_backend.format_eval`), and writes an ordinary HF folder plus `pretrain.json`.

Prompt styles: `compact` prompts (100-240 tokens) are used whole. `full` prompts grow with the game
(600-3,300 tokens) and would make every step many times dearer, so full-style examples are fewer
and only the last `full_prompt_tokens` tokens of their prompt are kept for training; the reply
depends mostly on the end of the prompt (the current state and the legal list). Evaluation always
uses whole prompts, as a server would receive them.

Training runs on one thread with seeded RNGs, so the same seed gives the same weights. torch and
transformers are imported inside the functions (the CLI stays fast to start).
"""

from __future__ import annotations

import contextlib
import json
import random
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core.errors import MarsError
from core.settings_files import read_yaml_mapping, settings_error
from core.tiny_model import move_into_place, pad_reply_batch
from games.spec import GameSpec, get_game
from train_backend.format_data import (
    FORMAT_DATA_VERSION,
    Example,
    arithmetic_examples,
    build_teachers,
    game_examples,
    reply_teacher_for,
    teachers_for,
)
from train_backend.format_eval import prompt_ids, prompt_key, reply_rates
from train_backend.local.checkpoint import keep_tokenizer_class

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

PRETRAIN_VERSION = 1
REPORT_FILE = "pretrain.json"
DEFAULT_GAMES: tuple[str, ...] = ("tic_tac_toe", "kuhn_poker", "mini_hanabi")
# Held-out positions come from games seeded far away from every training game.
EVAL_SEED_OFFSET = 1_000_000_007
ARITHMETIC_SEED_OFFSET = 7_919


class PretrainSettings(BaseModel):
    """What decides the result (besides the base model): the recipe of a format pre-training."""

    model_config = ConfigDict(extra="forbid")  # a misspelt setting in a recipe file is an error

    games: list[str] = Field(default_factory=lambda: list(DEFAULT_GAMES))
    examples: int = Field(6000, ge=1)  # training examples in all (games and arithmetic)
    steps: int = Field(300, ge=0)  # optimizer steps
    batch_size: int = Field(16, ge=1)
    learning_rate: float = Field(2e-3, gt=0)
    warmup_steps: int = Field(10, ge=0)
    decay_share: float = Field(0.2, ge=0, le=1)  # the last steps, where the rate falls to 5%
    weight_decay: float = Field(0.01, ge=0)
    full_share: float = Field(0.04, ge=0, le=1)  # share of game examples in the `full` style
    full_seat_turns: int = Field(1, ge=1)  # full-style examples: each seat's first turns only
    full_prompt_tokens: int = Field(800, ge=16)  # ...and only prompts up to this length
    arithmetic_share: float = Field(0.05, ge=0, lt=1)  # `\boxed{}` answers to small sums
    per_episode: int = Field(4, ge=1)  # positions kept per teacher game (spread over many games)
    # Perfect-information games this player can play (`minimax:last` solves Tic-Tac-Toe): the
    # replies name its moves, and it joins the bots whose games make the positions. In the
    # others the replies name the last legal action listed with probability
    # `last_listed_share`, else the teacher's move (see train_backend.format_data for why).
    reply_teacher: str | None = None
    last_listed_share: float = Field(1.0, ge=0, le=1)
    # Bots whose games make the positions (and, in poker and Hanabi, whose moves the replies
    # name), per game; games not named use `random` plus a strong bot where one exists.
    # `{kuhn_poker: [random]}` teaches the format with no strategy at all.
    teachers: dict[str, list[str]] = Field(default_factory=dict)
    # The reply: `choose` = "I choose X." then the answer tag; `restate` = in the hidden-information
    # games, the seat's compact view of the state on one line, then the answer tag (see
    # train_backend.format_data.game_reply); perfect-information games keep `choose`.
    reply_style: Literal["choose", "restate"] = "choose"
    # Examples per game are split in proportion to these weights (1 for games not named): the
    # Tic-Tac-Toe legal list changes every turn and is learnt last; Hanabi's depends on the
    # information tokens; Kuhn's never changes (both its actions are always legal).
    game_weights: dict[str, float] = Field(
        default_factory=lambda: {
            "tic_tac_toe": 4.0,
            "connect_four": 4.0,
            "mini_hanabi": 2.0,
            "simple_hanabi": 2.0,
        }
    )
    # Draw this many times the positions needed and keep them evenly over the move named.
    balance: int = Field(3, ge=1)
    eval_positions: int = Field(48, ge=0)  # held-out positions per game and style (0: no eval)
    eval_full_positions: int = Field(8, ge=0)  # fewer for `full`: its prompts are long
    seed: int = 0
    threads: int = Field(1, ge=1)  # 1 = the same bytes on any machine

    def recipe(self) -> dict[str, Any]:
        return {
            "version": PRETRAIN_VERSION,
            "data_version": FORMAT_DATA_VERSION,
            **self.model_dump(exclude={"eval_positions", "eval_full_positions", "threads"}),
        }


# The starting model of the self-play demo: the format only, no strategy. Its replies restate the
# seat's view of the state, then name a uniformly random legal move, so self-play has a policy to
# improve. Kuhn and Mini Hanabi only (Tic-Tac-Toe's last-listed copying needs most of a recipe's
# steps); `bench/recipes/selfplay-generalist.yaml` adds it for the ablation.
SELFPLAY_START = PretrainSettings(
    games=["kuhn_poker", "mini_hanabi"],
    teachers={"kuhn_poker": ["random"], "mini_hanabi": ["random"]},
    reply_style="restate",
    examples=2500,
    steps=160,
    full_share=0.0,
    eval_full_positions=0,
)
SELFPLAY_START_NAME = "selfplay"


def load_recipe(path: Path, **overrides: Any) -> PretrainSettings:
    """Pre-training settings from a YAML mapping (any `PretrainSettings` field), then overrides."""
    data = read_yaml_mapping(path, "recipe")
    data.update(overrides)
    try:
        return PretrainSettings.model_validate(data)
    except ValidationError as exc:
        raise MarsError(f"recipe {path}: {settings_error(exc, 'pre-training')}") from exc


def check_games(names: Sequence[str]) -> list[GameSpec]:
    specs = [get_game(name) for name in names]  # MarsError for an unknown name
    if not specs:
        raise MarsError("give at least one game to pre-train on")
    return specs


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


@contextlib.contextmanager
def _torch_threads(count: int) -> Iterator[None]:
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _load(base_dir: Path) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
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


def _split(total: int, weights: Sequence[float]) -> list[int]:
    """`total` cut into integer parts proportional to `weights` (largest remainders first)."""
    exact = [total * w / sum(weights) for w in weights]
    parts = [int(x) for x in exact]
    by_remainder = sorted(range(len(weights)), key=lambda i: parts[i] - exact[i])
    for i in by_remainder[: total - sum(parts)]:
        parts[i] += 1
    return parts


def training_examples(specs: Sequence[GameSpec], settings: PretrainSettings) -> list[Example]:
    """Game positions (both styles) plus a few arithmetic answers, shuffled with the seed."""
    arithmetic = round(settings.examples * settings.arithmetic_share)
    game_total = settings.examples - arithmetic
    full_total = round(game_total * settings.full_share)
    weights = [settings.game_weights.get(spec.name, 1.0) for spec in specs]
    compact_counts = _split(game_total - full_total, weights)
    full_counts = _split(full_total, weights)
    examples: list[Example] = []
    for index, spec in enumerate(specs):
        teachers = build_teachers(spec, settings.teachers.get(spec.name) or teachers_for(spec))
        reply_teacher = reply_teacher_for(spec, settings.reply_teacher)
        if reply_teacher is not None:
            teachers.append(reply_teacher)
        last_listed = (
            settings.last_listed_share
            if spec.perfect_information and reply_teacher is None
            else 0.0
        )
        for style, count, stream in (
            ("compact", compact_counts[index], 0),
            ("full", full_counts[index], 1),
        ):
            if count:
                first_seed = (settings.seed * 4 + stream) * 10_000_000 + index * 1_000_000
                examples += game_examples(
                    spec,
                    style,
                    count=count,
                    first_seed=first_seed,
                    teachers=teachers,
                    per_episode=settings.per_episode,
                    last_listed_share=last_listed,
                    reply_teacher=reply_teacher,
                    balance=settings.balance if spec.perfect_information else 1,
                    max_seat_turns=settings.full_seat_turns if style == "full" else None,
                    restate=settings.reply_style == "restate" and not spec.perfect_information,
                )
    examples += arithmetic_examples(arithmetic, settings.seed + ARITHMETIC_SEED_OFFSET)
    random.Random(settings.seed).shuffle(examples)
    return examples


def held_out_examples(specs: Sequence[GameSpec], settings: PretrainSettings) -> list[Example]:
    """Positions from random-vs-random games with seeds no training game uses."""
    examples: list[Example] = []
    for index, spec in enumerate(specs):
        teachers = build_teachers(spec, ["random"])
        for style, count in (
            ("compact", settings.eval_positions),
            ("full", settings.eval_full_positions),
        ):
            if count:
                first_seed = EVAL_SEED_OFFSET + settings.seed * 100_000 + index * 10_000
                examples += game_examples(
                    spec,
                    style,
                    count=count,
                    first_seed=first_seed,
                    teachers=teachers,
                    per_episode=2,
                )
    if settings.arithmetic_share > 0 and settings.eval_positions:
        examples += arithmetic_examples(settings.eval_positions, EVAL_SEED_OFFSET + settings.seed)
    return examples


Row = tuple[list[int], int]  # token ids (prompt + reply), prompt length


def encode_examples(
    tokenizer: PreTrainedTokenizerBase, examples: Sequence[Example], settings: PretrainSettings
) -> list[Row]:
    """Prompt ids by the chat template, then the reply and the end-of-turn token.

    Full-style prompts longer than `full_prompt_tokens` are left out, not cut: a model trained on
    windows cut from longer prompts learnt nothing that carried over to whole prompts (measured:
    compact prompts cut to their last 72 tokens gave 2-35% legal moves on whole prompts).
    """
    rows: list[Row] = []
    eos = tokenizer.eos_token
    for example in examples:
        prompt = prompt_ids(tokenizer, example.messages)
        if example.style == "full" and len(prompt) > settings.full_prompt_tokens:
            continue
        reply = tokenizer(example.reply + eos, add_special_tokens=False)["input_ids"]
        rows.append((prompt + list(reply), len(prompt)))
    return rows


def _batch_tensors(rows: Sequence[Row], pad_id: int) -> tuple[Any, Any, Any]:
    """Right-padded ids, attention mask, and labels that are -100 outside the replies."""
    input_ids, labels, attention = pad_reply_batch(list(rows), pad_id)
    return input_ids, attention, labels


def _reply_loss(model: PreTrainedModel, input_ids: Any, attention: Any, labels: Any) -> Any:
    """Cross-entropy on the reply tokens only.

    The output layer runs only where a reply token is predicted (a few percent of positions)
    instead of over the whole padded batch: about a sixth less work per step for the tiny model.
    """
    import torch

    body, head = getattr(model, "model", None), getattr(model, "lm_head", None)
    if body is None or head is None:  # another architecture: the plain (dearer) path
        return model(input_ids=input_ids, attention_mask=attention, labels=labels).loss
    hidden = body(input_ids=input_ids, attention_mask=attention).last_hidden_state
    targets = labels[:, 1:]
    picked = targets != -100
    logits = head(hidden[:, :-1][picked])
    return torch.nn.functional.cross_entropy(logits.float(), targets[picked])


LONG_ROW_TOKENS = 320


def _batches(rows: Sequence[Row], batch_size: int, generator: Any) -> Iterator[list[int]]:
    """Endless seeded shuffled passes over the rows, in batches.

    Long rows (the full-style prompts) are batched among themselves, so that one of them does not
    pad fifteen short rows to its width; short rows are batched at random (batches sorted by
    length learnt the Tic-Tac-Toe lookup no faster in our runs, and a batch of alike positions
    is a narrower sample).
    """
    import torch

    while True:
        order = torch.randperm(len(rows), generator=generator).tolist()
        short = [i for i in order if len(rows[i][0]) <= LONG_ROW_TOKENS]
        long = [i for i in order if len(rows[i][0]) > LONG_ROW_TOKENS]
        batches = [
            group[i : i + batch_size]
            for group in (short, long)
            for i in range(0, len(group), batch_size)
        ]
        for index in torch.randperm(len(batches), generator=generator).tolist():
            yield batches[index]


def train_on_replies(
    model: PreTrainedModel,
    rows: Sequence[Row],
    settings: PretrainSettings,
    pad_id: int,
    on_step: Callable[[int, float], None] | None = None,
) -> list[float]:
    """AdamW, warm-up / constant / linear decay; batches drawn in seeded shuffled passes."""

    import torch

    if settings.steps == 0 or not rows:
        return []
    generator = torch.Generator().manual_seed(settings.seed)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=settings.learning_rate, weight_decay=settings.weight_decay
    )
    steps, warmup = settings.steps, settings.warmup_steps

    decay_from = steps - round(steps * settings.decay_share)

    def factor(step: int) -> float:
        # Warm-up, a long constant stretch, then a linear decay: copying a label out of the
        # prompt is learnt late and suddenly, so the rate stays high until near the end.
        if step < warmup:
            return (step + 1) / warmup
        if step < decay_from:
            return 1.0
        return max(0.05, (steps - step) / max(1, steps - decay_from))

    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    batches = _batches(rows, settings.batch_size, generator)
    losses: list[float] = []
    model.train()
    try:
        for step in range(steps):
            batch = next(batches)
            input_ids, attention, labels = _batch_tensors([rows[i] for i in batch], pad_id)
            loss = _reply_loss(model, input_ids, attention, labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            losses.append(float(loss.detach()))
            if on_step is not None:
                on_step(step + 1, losses[-1])
    finally:
        model.eval()
    return losses


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
) -> dict[str, Any]:
    """Fine-tune `base_dir` (default: the embedded tiny model) into `out_dir`; return the report.

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
        first = exc.errors()[0]
        raise MarsError(f"bad pre-training setting {first['loc'][0]}: {first['msg']}") from exc
    specs = check_games(settings.games)
    settings = settings.model_copy(update={"games": [spec.name for spec in specs]})
    _check_base(base_dir)
    _check_out(out_dir, base_dir, overwrite)

    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(settings.seed)
        model, tokenizer = _load(base_dir)
        data_started = time.perf_counter()
        train = training_examples(specs, settings)
        held_out = held_out_examples(specs, settings)
        rows = encode_examples(tokenizer, train, settings)
        data_s = time.perf_counter() - data_started
        seen = {prompt_key(e) for e in train}

        eval_started = time.perf_counter()
        before = reply_rates(model, tokenizer, held_out, seen_prompts=seen) if held_out else {}
        eval_s = time.perf_counter() - eval_started
        train_started = time.perf_counter()
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        # Training on `threads` threads (1: the same bytes on any machine); evaluation is greedy
        # and keeps torch's default threads.
        with _torch_threads(settings.threads):
            losses = train_on_replies(model, rows, settings, pad_id, on_step)
        train_s = time.perf_counter() - train_started
        eval_started = time.perf_counter()
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
    settings: PretrainSettings | None = None, *, name: str = ""
) -> Path:
    """A format-pre-trained tiny model, built on first use and rebuilt when its recipe changes.

    The default recipe (`PretrainSettings()`) lives in `default_pretrained_dir()`; another recipe
    needs a `name` and lives beside it (`...-format-NAME`). The recipe plus the tiny model's own
    build recipe decide the result, so a change to either rebuilds it. Built like
    `ensure_tiny_model`: into a temporary sibling renamed into place, so concurrent callers see
    the whole folder or nothing, and whichever build lands first is kept.
    """
    from core.tiny_model import ensure_tiny_model

    if settings is not None and not name:
        raise MarsError("a pre-training recipe other than the default needs a cache name")
    settings = settings or PretrainSettings()
    base = ensure_tiny_model()
    target = default_pretrained_dir(name)
    if is_current_build(target, base, settings):
        return target
    if target.exists() and any(target.iterdir()) and not (target / REPORT_FILE).is_file():
        raise MarsError(f"{target} exists but is not a pre-trained tiny model; remove it and retry")
    with contextlib.suppress(FileExistsError):
        pretrain_tiny_model(base, target, overwrite=True, settings=settings)
    return target


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
