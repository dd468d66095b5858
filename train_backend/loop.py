"""The train -> evaluate loop: every new checkpoint is served, evaluated, and added to a curve.

Contract with the trainers (the CPU trainer and the verl adapter both write it):

    CHECKPOINT_DIR/step_N/            N an integer (the number of updates made)
        config.json, model.safetensors, tokenizer files ...   a Hugging Face model folder
        checkpoint.json               written last: the folder is complete once it exists

For each complete checkpoint not yet evaluated, `run_loop` serves the folder once
(`harness.model_access.model_endpoint`: `transformers serve` on a CPU, vLLM on a GPU), runs every
evaluation of the spec as the real command in a subprocess against that server
(`python -m harness arena|eval|exploitability ... --base-url URL --model NAME --run-dir ...`, so
each sub-run is
an ordinary run directory), stops the server, and appends one row to the loop's run directory.
A checkpoint that cannot be served gives an error row; the loop goes on.

The loop's run directory:

    run.json                 the loop's command, spec and watch folder
    records.jsonl            one row per checkpoint, appended as each finishes (resume reads it)
    learning_curve.jsonl     the same rows, one per step, sorted by step (rewritten each time)
    learning_curve.csv       one line per step, the figures flattened into columns
    step_N-<eval name>/      each evaluation's own run directory
    logs/step_N/             the server's log and each sub-command's output

A `mars train-mas` run (`--watch RUN`) has a checkpoint per policy and step
(`RUN/policies/<name>/checkpoints/step_N/` with several policies): a step is complete once every
policy saved it, and its suite items run `mars eval --trained RUN --trained-step N`, which serves
each role its own policy's checkpoint.

Resume is by checkpoint step: a rerun into the same `--run-dir` skips steps that have a good row
and retries steps whose row has an error (as every `mars` command redoes errored records).
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, Field, ValidationError, model_validator

from harness import checkpoints as contract
from harness.errors import MarsError
from harness.files import write_atomic
from harness.runstore import FINISHED_STATUSES, RUN_FILE, RunDir, RunStatus

CURVE_JSONL, CURVE_CSV = "learning_curve.jsonl", "learning_curve.csv"
ROW_SCHEMA_VERSION = 1
# The MAS trainer's per-role and per-policy figures the learning curve keeps (train/...).
MAS_CURVE_METRICS = ("return_mean/", "policy/", "train_accuracy", "eval/accuracy")


# ---------------------------------------------------------------------------------------------
# The evaluation spec


class ArenaItem(BaseModel):
    kind: Literal["arena"] = "arena"
    game: str
    opponent: str
    episodes: int = Field(ge=1)  # per seat
    seats: Literal["both", "first", "second"] = "both"
    prompt_style: Literal["full", "compact"] | None = None  # None: the loop's setting
    invalid: str = "penalty"
    name: str | None = None

    @property
    def key(self) -> str:
        return self.name or _slug(f"arena-{self.game}-{self.opponent}")


class SuiteItem(BaseModel):
    kind: Literal["eval"] = "eval"
    suite: str
    mas: str = "single"
    limit: int | None = Field(None, ge=1)
    epochs: int = Field(1, ge=1)
    name: str | None = None

    @property
    def key(self) -> str:
        return self.name or _slug(f"eval-{self.suite}-{self.mas}")


class ExploitItem(BaseModel):
    """Exploitability of the checkpoint's policy (`mars exploitability`), sampled at the loop's
    temperature: at 0 every sample is the greedy reply."""

    kind: Literal["exploit"] = "exploit"
    game: str
    samples: int = Field(16, ge=1)  # replies per information state
    bootstrap: int = Field(200, ge=0)
    prompt_style: Literal["full", "compact"] | None = None  # None: the loop's setting
    name: str | None = None

    @property
    def key(self) -> str:
        return self.name or _slug(f"exploit-{self.game}")


class RatingItem(BaseModel):
    """The checkpoint's rating at a game (`games.ratings`): it plays `episodes` per seat against
    each bot and each of the `previous` latest earlier checkpoints, then every arena record of
    the game in the loop (arena items included) is fitted together."""

    kind: Literal["rating"] = "rating"
    game: str
    episodes: int = Field(ge=1)  # per seat, per opponent
    previous: int = Field(2, ge=0)  # earlier checkpoints played (the latest ones)
    bots: list[str] = Field(default_factory=lambda: ["random"])
    anchor: str | None = None  # pinned at 1000; None: the first bot, else the field's mean
    bootstrap: int = Field(0, ge=0)  # 0: the posterior interval; N: a bootstrap over games
    prompt_style: Literal["full", "compact"] | None = None  # None: the loop's setting
    invalid: str = "penalty"
    name: str | None = None

    @property
    def key(self) -> str:
        return self.name or _slug(f"rating-{self.game}")


Item = ArenaItem | SuiteItem | ExploitItem | RatingItem
EvalItem = Annotated[Item, Field(discriminator="kind")]


class LoopSpec(BaseModel):
    """What to run on every checkpoint. Generation settings apply to every evaluation: one
    server per checkpoint, and `transformers serve` keeps the temperature of its first request."""

    evals: list[EvalItem] = Field(min_length=1)
    temperature: float = Field(0.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    max_tokens: int | None = Field(None, ge=1)  # None: the checkpoint's max_new_tokens, or 1024
    prompt_style: Literal["full", "compact"] | None = None  # None: the checkpoint's, or full
    concurrency: int = Field(16, ge=1)
    data_dir: str | None = None  # passed to `mars eval --data-dir`
    eval_timeout_s: float = Field(3600.0, gt=0)  # per sub-command

    @model_validator(mode="after")
    def _unique_names(self) -> LoopSpec:
        keys = [item.key for item in self.evals]
        repeated = sorted({k for k in keys if keys.count(k) > 1})
        if repeated:
            raise ValueError(f"two evaluations share the name {repeated[0]!r}; give one a name")
        return self


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "", text.replace(":", "")) or "eval"


def parse_item(text: str) -> dict[str, Any]:
    """One inline item: `arena:GAME:OPPONENT:EPISODES`, `eval:SUITE[:MAS[:LIMIT]]`,
    `exploit:GAME[:SAMPLES]` or `rating:GAME:EPISODES[:PREVIOUS]`.

    The opponent may hold a colon itself (`mcts:100`), so in an arena item the last field is
    always the episode count: `arena:tic_tac_toe:mcts:100:20` is 20 episodes per seat against
    `mcts:100`.
    """
    parts = [p.strip() for p in text.strip().split(":")]
    kind = parts[0].lower()
    if kind == "arena":
        if len(parts) < 4 or not parts[-1].isdigit():
            raise MarsError(
                f"arena item {text!r}: write arena:GAME:OPPONENT:EPISODES "
                "(e.g. arena:tic_tac_toe:mcts:100:20)"
            )
        return {
            "kind": "arena",
            "game": parts[1],
            "opponent": ":".join(parts[2:-1]),
            "episodes": int(parts[-1]),
        }
    if kind == "eval":
        if not 2 <= len(parts) <= 4 or not parts[1]:
            raise MarsError(f"eval item {text!r}: write eval:SUITE[:MAS[:LIMIT]]")
        item: dict[str, Any] = {"kind": "eval", "suite": parts[1]}
        if len(parts) >= 3 and parts[2]:
            item["mas"] = parts[2]
        if len(parts) == 4:
            if not parts[3].isdigit():
                raise MarsError(f"eval item {text!r}: LIMIT must be a whole number")
            item["limit"] = int(parts[3])
        return item
    if kind == "exploit":
        if not 2 <= len(parts) <= 3 or not parts[1]:
            raise MarsError(f"exploit item {text!r}: write exploit:GAME[:SAMPLES]")
        item = {"kind": "exploit", "game": parts[1]}
        if len(parts) == 3:
            if not parts[2].isdigit():
                raise MarsError(f"exploit item {text!r}: SAMPLES must be a whole number")
            item["samples"] = int(parts[2])
        return item
    if kind == "rating":
        if not 3 <= len(parts) <= 4 or not parts[1] or not all(p.isdigit() for p in parts[2:]):
            raise MarsError(
                f"rating item {text!r}: write rating:GAME:EPISODES[:PREVIOUS] "
                "(e.g. rating:tic_tac_toe:10:2)"
            )
        item = {"kind": "rating", "game": parts[1], "episodes": int(parts[2])}
        if len(parts) == 4:
            item["previous"] = int(parts[3])
        return item
    raise MarsError(f"evaluation {text!r} must start with arena:, eval:, exploit: or rating:")


def parse_spec(text: str, **overrides: Any) -> LoopSpec:
    """A YAML/JSON file (a mapping with `evals`, or a bare list), or an inline comma list.

    In a file, each evaluation is an inline string or a mapping of the item's fields. Overrides
    (CLI flags) are applied on top when not None.
    """
    text = text.strip()
    if not text:
        raise MarsError("--eval needs at least one evaluation")
    path = Path(text).expanduser()
    data: Any
    if path.suffix.lower() in (".yaml", ".yml", ".json") or path.is_file():
        try:
            data = yaml.safe_load(path.read_text())  # YAML is a superset of JSON
        except OSError as exc:
            raise MarsError(f"cannot read the eval spec {path}: {exc.strerror}") from exc
        except yaml.YAMLError as exc:
            raise MarsError(f"eval spec {path} is not valid YAML/JSON: {exc}") from exc
        if isinstance(data, list):
            data = {"evals": data}
        if not isinstance(data, dict):
            raise MarsError(f"eval spec {path} must be a mapping with 'evals' or a list")
    else:
        data = {"evals": [part for part in text.split(",") if part.strip()]}
    evals = data.get("evals")
    if not isinstance(evals, list) or not evals:
        raise MarsError("the eval spec needs a non-empty list of evaluations under 'evals'")
    data["evals"] = [parse_item(e) if isinstance(e, str) else e for e in evals]
    data.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return LoopSpec.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise MarsError(f"bad eval spec at {where}: {first['msg']}") from exc


def check_spec(spec: LoopSpec) -> None:
    """Fail before anything is served: unknown games, opponents and suites; games too large
    for an exact best response."""
    from games.infostates import check_exact_best_response
    from games.players import PlayerContext, known_players, make_player, needs_model
    from games.spec import get_game
    from harness.benchmarks import get_suite

    for item in spec.evals:
        if isinstance(item, ArenaItem):
            game = get_game(item.game)
            if needs_model(item.opponent):
                if item.opponent.split(":")[0].strip().lower() not in known_players():
                    raise MarsError(f"unknown opponent {item.opponent!r}")
            else:
                make_player(item.opponent, PlayerContext(spec=game))
        elif isinstance(item, ExploitItem):
            check_exact_best_response(get_game(item.game))
        elif isinstance(item, RatingItem):
            game = get_game(item.game)
            if game.cooperative:
                raise MarsError(f"rating item: {item.game} is cooperative (one shared score)")
            for bot in item.bots:
                if needs_model(bot):
                    raise MarsError(f"rating item: {bot!r} is not a bot (list bots only)")
                make_player(bot, PlayerContext(spec=game))
        else:
            get_suite(item.suite)


# ---------------------------------------------------------------------------------------------
# Checkpoints


@dataclass(frozen=True)
class Checkpoint:
    step: int
    path: Path
    # A `mars train-mas` run: its eval items run `mars eval --trained RUN --trained-step STEP`,
    # each role answered by its own policy's checkpoint (`path` is the first role's).
    mas_run: Path | None = None
    # The MAS options a suite item runs with (a MAS run's baseline: the workflow as trained).
    mas_options: dict[str, Any] = field(default_factory=dict)

    def info(self) -> dict[str, Any]:
        """checkpoint.json as a dict ({} if unreadable: the row then says so)."""
        try:
            return contract.read_checkpoint(self.path)
        except MarsError:
            return {}


def checkpoints_folder(watch: Path) -> Path:
    """The folder holding `step_N/`: `watch` itself, or `watch/checkpoints` (a training run)."""
    nested = watch / contract.CHECKPOINTS_DIR
    if nested.is_dir() and not any(contract.step_of(p.name) is not None for p in watch.iterdir()):
        return nested
    return watch


def complete_checkpoints(folder: Path) -> list[Checkpoint]:
    """`step_N/` folders holding checkpoint.json, by step."""
    return [Checkpoint(step, path) for step, path in contract.complete_checkpoints(folder)]


def mas_checkpoints(run: Path) -> list[Checkpoint]:
    """The steps of a MAS training run at which every policy saved a checkpoint."""
    from train_backend.mas.trained import saved_steps

    config = json.loads((run / RUN_FILE).read_text())["config"]
    return [
        Checkpoint(step, next(iter(roles.values())), mas_run=run)
        for step, roles in saved_steps(run, config).items()
    ]


def check_mas_spec(spec: LoopSpec, run: Path) -> None:
    """A MAS training run is evaluated by suites through the workflow it trained, only."""
    workflow = json.loads((run / RUN_FILE).read_text())["config"]["workflow"]
    for item in spec.evals:
        if not isinstance(item, SuiteItem):
            raise MarsError(
                f"{run} is a MAS training run: evaluate it with eval:SUITE:{workflow}:N items "
                f"(not {item.kind})"
            )
        if item.mas != workflow:
            raise MarsError(
                f"{run} trained the MAS {workflow!r}: the eval item {item.key} runs {item.mas!r}"
            )


def training_status(folder: Path) -> str | None:
    """The status of the training run that writes `folder` (its run.json), when known.

    Only known when the checkpoints sit in a run directory (`RUN/checkpoints/`); otherwise None
    and the loop runs until --timeout.
    """
    for candidate in (folder, folder.parent):
        if (candidate / RUN_FILE).is_file():
            try:
                return json.loads((candidate / RUN_FILE).read_text()).get("status")
            except (OSError, json.JSONDecodeError):
                return None
    return None


def training_finished(folder: Path) -> bool:
    """Whether the training run that writes `folder` says it has stopped."""
    return training_status(folder) in FINISHED_STATUSES


def checkpoint_defaults(checkpoint: Checkpoint) -> dict[str, Any]:
    """Prompt style and reply length the checkpoint was trained with, when it says so."""
    config = checkpoint.info().get("config")
    if not isinstance(config, dict):
        return {}
    out: dict[str, Any] = {}
    if config.get("prompt_style") in ("full", "compact"):
        out["prompt_style"] = config["prompt_style"]
    if isinstance(config.get("max_new_tokens"), int) and config["max_new_tokens"] > 0:
        out["max_tokens"] = config["max_new_tokens"]
    return out


# ---------------------------------------------------------------------------------------------
# Running one checkpoint's evaluations


@dataclass(frozen=True)
class Settings:
    """What one checkpoint's evaluations run with, after the checkpoint's own defaults."""

    prompt_style: str
    max_tokens: int
    temperature: float
    top_p: float
    concurrency: int


def resolve_settings(spec: LoopSpec, checkpoint: Checkpoint) -> Settings:
    defaults = checkpoint_defaults(checkpoint)
    return Settings(
        prompt_style=spec.prompt_style or defaults.get("prompt_style", "full"),
        max_tokens=spec.max_tokens or defaults.get("max_tokens", 1024),
        temperature=spec.temperature,
        top_p=spec.top_p,
        concurrency=spec.concurrency,
    )


@dataclass(frozen=True)
class SubCommand:
    """One evaluation's `mars` command line and what the loop needs to know about it."""

    argv: list[str]
    run_dir: Path
    prompt_style: str | None = None  # arena and exploitability items


def sub_command(
    item: Item,
    spec: LoopSpec,
    settings: Settings,
    *,
    base_url: str,
    model: str,
    run_dir: Path,
    model_label: str | None = None,
    opponent: str | None = None,
    trained: tuple[Path, int] | None = None,
    mas_options: dict[str, Any] | None = None,
) -> SubCommand:
    """The `mars` command line of one evaluation against the served checkpoint (`opponent`: the
    one a rating item plays in this command; `trained`: a MAS training run and step, whose
    policies the eval serves itself, one per role)."""
    served = ["--base-url", base_url, "--model", model]
    if trained is not None:
        served = ["--trained", str(trained[0]), "--trained-step", str(trained[1])]
    common = [
        *served,
        "--run-dir",
        str(run_dir),
        "--concurrency",
        str(settings.concurrency),
        "--max-tokens",
        str(settings.max_tokens),
        "--temperature",
        repr(settings.temperature),
        "--top-p",
        repr(settings.top_p),
        "--quiet",
    ]
    mars = [sys.executable, "-m", "harness"]
    prompt_style = getattr(item, "prompt_style", None) or settings.prompt_style
    if isinstance(item, ArenaItem | RatingItem):
        argv = [
            *mars,
            "arena",
            "--game",
            item.game,
            "--player",
            "llm",
            "--opponent",
            opponent or getattr(item, "opponent", ""),
            "--episodes",
            str(item.episodes),
            "--seats",
            getattr(item, "seats", "both"),
            "--invalid",
            item.invalid,
            "--prompt-style",
            prompt_style,
            # the checkpoint's name in records: its folder, as `llm:FOLDER` names it elsewhere
            *(["--model-label", model_label] if model_label else []),
            *common,
        ]
        return SubCommand(argv, run_dir, prompt_style)
    if isinstance(item, ExploitItem):
        argv = [
            *mars,
            "exploitability",
            "--game",
            item.game,
            "--samples",
            str(item.samples),
            "--bootstrap",
            str(item.bootstrap),
            "--prompt-style",
            prompt_style,
            *common,
        ]
        return SubCommand(argv, run_dir, prompt_style)
    command = [*mars, "eval", "--suite", item.suite, "--mas", item.mas]
    command += ["--epochs", str(item.epochs)]
    if item.limit is not None:
        command += ["--limit", str(item.limit)]
    if spec.data_dir:
        command += ["--data-dir", spec.data_dir]
    for key, value in (mas_options or {}).items():
        command += ["--mas-option", f"{key}={json.dumps(value)}"]
    return SubCommand(command + common, run_dir)


def arena_figures(summary: dict[str, Any]) -> dict[str, Any]:
    """Per seat: n, win/draw/loss, normalized return with its interval, invalid rate, errors."""
    seats = {}
    for seat, stats in summary.get("seats", {}).items():
        seats[seat] = {
            key: stats.get(key)
            for key in (
                "n",
                "win",
                "draw",
                "loss",
                "normalized_return",
                "normalized_return_ci",
                "mean_return",
                "invalid_rate",
                "errors",
            )
        }
    return {"seats": seats}


def suite_figures(summary: dict[str, Any], suite: str) -> dict[str, Any]:
    stats = summary.get("suites", {}).get(suite, {})
    return {
        key: stats.get(key)
        for key in ("n", "correct", "accuracy", "ci95", "extraction_failure_rate", "errors")
    }


def exploit_figures(summary: dict[str, Any]) -> dict[str, Any]:
    return {
        key: summary.get(key)
        for key in (
            "exploitability",
            "ci95",
            "nash_conv",
            "nash_conv_ci95",
            "invalid_rate",
            "samples",
            "states",
            "replies",
            "temperature",
            "action_shares",
        )
    }


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def run_item(item: Item, sub: SubCommand, *, timeout_s: float, log_path: Path) -> dict[str, Any]:
    """Run one evaluation's command (`sub_command`) as a subprocess; its figures, or the error
    that stopped it. The command writes its run directory, `sub.run_dir`."""
    command, run_dir = sub.argv, sub.run_dir
    entry: dict[str, Any] = {**item.model_dump(exclude={"name"}), "run_dir": run_dir.name}
    if sub.prompt_style is not None:
        entry["prompt_style"] = sub.prompt_style
    started = time.perf_counter()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=env,
            check=False,
        )
        output, code = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as exc:
        output, code = f"{exc.stdout or ''}{exc.stderr or ''}", None
    log_path.write_text(f"$ {' '.join(command)}\n{output}")
    entry["wall_s"] = round(time.perf_counter() - started, 2)
    summary_path = run_dir / "summary.json"
    if code != 0 or not summary_path.is_file():
        reason = "timed out" if code is None else f"exit code {code}"
        entry["error"] = f"{item.kind} failed ({reason}): {_last_line(output)}"
        return entry
    summary = json.loads(summary_path.read_text())
    if isinstance(item, ArenaItem | RatingItem):
        entry.update(arena_figures(summary))
    elif isinstance(item, ExploitItem):
        entry.update(exploit_figures(summary))
    else:
        entry.update(suite_figures(summary, item.suite))
    entry["error"] = None
    return entry


def rating_opponents(item: RatingItem, earlier: list[Checkpoint]) -> list[tuple[str, str]]:
    """(opponent, run-dir suffix) of each match a rating item plays: its bots, then the latest
    `previous` earlier checkpoints as `llm:FOLDER` (each served by the sub-command)."""
    matches = [(bot, _slug(bot)) for bot in item.bots]
    latest = earlier[-item.previous :] if item.previous else []
    matches += [(f"llm:{c.path.resolve()}", f"step_{c.step}") for c in latest]
    return matches


def loop_matches(loop_dir: Path, game: str) -> Any:
    """Every rated game of `game` in the loop's arena sub-runs (`games.ratings.Collected`)."""
    from games.ratings import Collected, collect_matches
    from harness.runstore import list_runs

    collected = Collected()
    for sub_run in list_runs(loop_dir):
        if sub_run.kind == "arena":
            model = sub_run.info().model
            collect_matches(sub_run.records(), model=model, games={game}, into=collected)
    return collected


def rating_figures(item: RatingItem, label: str, loop_dir: Path) -> dict[str, Any]:
    """The checkpoint's rating over every game of `item.game` the loop has played so far."""
    from games.ratings import rate_game

    matches = loop_matches(loop_dir, item.game).matches
    players = {m.a for m in matches} | {m.b for m in matches}
    if label not in players:
        return {"error": f"rating failed: {label} has no rated {item.game} game"}
    anchor = item.anchor or (item.bots[0] if item.bots else None)
    if anchor not in players:
        anchor = None  # its games failed: the field's mean instead
    fit = rate_game(matches, bootstrap=item.bootstrap, seed=0, anchor=anchor)
    mine = next(row for row in fit["players"] if row["player"] == label)
    return {
        "rating": mine["rating"],
        "ci95": mine["ci95"],
        "rank": mine["rank"],
        "players": len(fit["players"]),
        "games": mine["games"],
        "score": mine["score"],
        "anchor": anchor,
        "all_games": fit["games"],
        "table": [
            {key: row[key] for key in ("player", "rating", "ci95", "games", "score")}
            for row in fit["players"]
        ],
    }


def run_rating(
    item: RatingItem,
    checkpoint: Checkpoint,
    spec: LoopSpec,
    settings: Settings,
    *,
    base_url: str,
    model: str,
    loop_dir: Path,
    earlier: list[Checkpoint],
    log_dir: Path,
) -> dict[str, Any]:
    """Play the rating item's matches (one `mars arena` each), then fit the ratings."""
    label = str(checkpoint.path.resolve())
    entry: dict[str, Any] = {**item.model_dump(exclude={"name"}), "player": label, "matches": {}}
    started = time.perf_counter()
    for opponent, suffix in rating_opponents(item, earlier):
        command = sub_command(
            item,
            spec,
            settings,
            base_url=base_url,
            model=model,
            run_dir=loop_dir / f"step_{checkpoint.step}-{item.key}-vs-{suffix}",
            model_label=label,
            opponent=opponent,
        )
        played = run_item(
            item,
            command,
            timeout_s=spec.eval_timeout_s,
            log_path=log_dir / f"{item.key}-{suffix}.log",
        )
        entry["matches"][suffix] = {
            key: played.get(key) for key in ("run_dir", "wall_s", "error")
        } | {"opponent": opponent}
    failed = [suffix for suffix, match in entry["matches"].items() if match["error"]]
    entry.update(rating_figures(item, label, loop_dir))
    entry["wall_s"] = round(time.perf_counter() - started, 2)
    if failed:
        entry["error"] = f"rating matches failed: {', '.join(failed)}"
    entry.setdefault("error", None)
    return entry


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def evaluate_checkpoint(
    checkpoint: Checkpoint,
    spec: LoopSpec,
    loop_dir: Path,
    *,
    backend: str = "auto",
    defaults_from: Checkpoint | None = None,
    earlier: list[Checkpoint] | None = None,
) -> dict[str, Any]:
    """Serve the checkpoint once, run every evaluation against it, and return its curve row.

    `defaults_from`: the checkpoint whose training config gives the default prompt style and
    reply length (a baseline model has none of its own). `earlier`: the checkpoints evaluated
    before, by step (rating items play the latest of them).
    """
    from harness.endpoint import GenerationConfig
    from harness.model_access import model_endpoint

    started = time.perf_counter()
    settings = resolve_settings(spec, defaults_from or checkpoint)
    info = checkpoint.info()
    metrics = info.get("metrics")
    row: dict[str, Any] = {
        "schema_version": ROW_SCHEMA_VERSION,
        "step": checkpoint.step,
        "checkpoint": str(checkpoint.path.resolve()),
        "evaluated_at": _now(),
        "settings": settings.__dict__,
        "train_metrics": metrics if isinstance(metrics, dict) else None,
        "evals": {},
        "error": None,
    }
    log_dir = loop_dir / "logs" / f"step_{checkpoint.step}"
    log_dir.mkdir(parents=True, exist_ok=True)
    if checkpoint.mas_run is not None:
        return _evaluate_trained_mas(checkpoint, spec, settings, row, loop_dir, log_dir, started)
    gen = GenerationConfig(temperature=settings.temperature, top_p=settings.top_p)
    try:
        with model_endpoint(
            model=str(checkpoint.path.resolve()),
            base_url=None,
            backend=backend,
            log_dir=log_dir,
            gen=gen,
        ) as endpoint:
            # Rating items last: their fit then holds this step's arena games too.
            for item in sorted(spec.evals, key=lambda item: isinstance(item, RatingItem)):
                if isinstance(item, RatingItem):
                    row["evals"][item.key] = run_rating(
                        item,
                        checkpoint,
                        spec,
                        settings,
                        base_url=endpoint.base_url,
                        model=endpoint.model,
                        loop_dir=loop_dir,
                        earlier=list(earlier or []),
                        log_dir=log_dir,
                    )
                    continue
                command = sub_command(
                    item,
                    spec,
                    settings,
                    base_url=endpoint.base_url,
                    model=endpoint.model,
                    run_dir=loop_dir / f"step_{checkpoint.step}-{item.key}",
                    model_label=str(checkpoint.path.resolve()),
                    mas_options=checkpoint.mas_options,
                )
                row["evals"][item.key] = run_item(
                    item,
                    command,
                    timeout_s=spec.eval_timeout_s,
                    log_path=log_dir / f"{item.key}.log",
                )
    except MarsError as exc:  # could not be served (bad folder, server died, warm-up failed)
        row["error"] = f"serving failed: {exc}"
    return _finish_row(row, spec, started)


def _evaluate_trained_mas(
    checkpoint: Checkpoint,
    spec: LoopSpec,
    settings: Settings,
    row: dict[str, Any],
    loop_dir: Path,
    log_dir: Path,
    started: float,
) -> dict[str, Any]:
    """A MAS training step: each eval item is `mars eval --trained RUN --trained-step N`, which
    serves every policy's checkpoint for its roles; the row keeps the role -> checkpoint map."""
    from train_backend.mas.trained import trained_mas

    assert checkpoint.mas_run is not None
    try:
        trained = trained_mas(checkpoint.mas_run, checkpoint.step)
    except MarsError as exc:  # e.g. a policy's checkpoint of this step was removed meanwhile
        row["error"] = str(exc)
        return _finish_row(row, spec, started)
    row["roles"] = {role: str(path.resolve()) for role, path in trained.role_models.items()}
    for item in spec.evals:
        command = sub_command(
            item,
            spec,
            settings,
            base_url="",
            model="",
            run_dir=loop_dir / f"step_{checkpoint.step}-{item.key}",
            trained=(checkpoint.mas_run, checkpoint.step),
        )
        row["evals"][item.key] = run_item(
            item, command, timeout_s=spec.eval_timeout_s, log_path=log_dir / f"{item.key}.log"
        )
    return _finish_row(row, spec, started)


def _finish_row(row: dict[str, Any], spec: LoopSpec, started: float) -> dict[str, Any]:
    failed = [key for key, entry in row["evals"].items() if entry.get("error")]
    if row["error"] is None and failed:
        row["error"] = f"{len(failed)} of {len(spec.evals)} evaluations failed: {', '.join(failed)}"
    row["wall_s"] = round(time.perf_counter() - started, 2)
    return row


# ---------------------------------------------------------------------------------------------
# The learning curve


def curve_rows(run: RunDir) -> list[dict[str, Any]]:
    """One row per step (the last one recorded), sorted by step."""
    by_step: dict[int, dict[str, Any]] = {}
    for record in run.records():
        if isinstance(record.get("step"), int):
            by_step[record["step"]] = record
    return [by_step[step] for step in sorted(by_step)]


def flatten_row(row: dict[str, Any]) -> dict[str, Any]:
    """One CSV line: step, checkpoint, error, then `EVAL/...` figures per evaluation."""
    flat: dict[str, Any] = {
        "step": row.get("step"),
        "checkpoint": row.get("checkpoint"),
        "error": row.get("error") or "",
        "wall_s": row.get("wall_s"),
    }
    for key, entry in (row.get("evals") or {}).items():
        if entry.get("kind") == "arena":
            seats = entry.get("seats")  # a failed item keeps its setting ("both") here
            for seat, stats in (seats if isinstance(seats, dict) else {}).items():
                for field in ("win", "draw", "loss", "normalized_return", "invalid_rate", "n"):
                    flat[f"{key}/{seat}/{field}"] = stats.get(field)
                low, high = stats.get("normalized_return_ci") or (None, None)
                flat[f"{key}/{seat}/normalized_return_ci_low"] = low
                flat[f"{key}/{seat}/normalized_return_ci_high"] = high
        elif entry.get("kind") == "rating":
            flat[f"{key}/rating"] = entry.get("rating")
            low, high = entry.get("ci95") or (None, None)
            flat[f"{key}/rating_ci95_low"] = low
            flat[f"{key}/rating_ci95_high"] = high
            for field in ("rank", "players", "games", "score"):
                flat[f"{key}/{field}"] = entry.get(field)
        elif entry.get("kind") == "exploit":
            for field, interval in (("exploitability", "ci95"), ("nash_conv", "nash_conv_ci95")):
                flat[f"{key}/{field}"] = entry.get(field)
                low, high = entry.get(interval) or (None, None)
                flat[f"{key}/{field}_ci95_low"] = low
                flat[f"{key}/{field}_ci95_high"] = high
            flat[f"{key}/invalid_rate"] = entry.get("invalid_rate")
            flat[f"{key}/samples"] = entry.get("samples")
            for state, shares in (entry.get("action_shares") or {}).items():
                for action, share in shares.items():
                    flat[f"{key}/policy/{state}/{action}"] = share
        else:
            flat[f"{key}/accuracy"] = entry.get("accuracy")
            low, high = entry.get("ci95") or (None, None)
            flat[f"{key}/ci95_low"] = low
            flat[f"{key}/ci95_high"] = high
            flat[f"{key}/n"] = entry.get("n")
        flat[f"{key}/run_dir"] = entry.get("run_dir")
        flat[f"{key}/error"] = entry.get("error") or ""
    if row.get("roles"):  # a MAS training step: each role's return, each policy's update
        for name, value in (row.get("train_metrics") or {}).items():
            if name.startswith(MAS_CURVE_METRICS) and isinstance(value, int | float):
                flat[f"train/{name}"] = value
    return flat


def write_curve(run: RunDir) -> list[dict[str, Any]]:
    """Rewrite learning_curve.jsonl and learning_curve.csv from the records (atomically)."""
    rows = curve_rows(run)
    lines = "".join(json.dumps(row, ensure_ascii=False, default=str) + "\n" for row in rows)
    write_atomic(run.path / CURVE_JSONL, lines)
    flat = [flatten_row(row) for row in rows]
    columns: list[str] = []
    for line in flat:
        columns += [c for c in line if c not in columns]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, restval="", lineterminator="\n")
    writer.writeheader()
    writer.writerows(flat)
    write_atomic(run.path / CURVE_CSV, buffer.getvalue())
    return rows


# ---------------------------------------------------------------------------------------------
# The loop


def earlier_checkpoints(run: RunDir, step: int) -> list[Checkpoint]:
    """Checkpoints of the curve before `step` that were served and are still on disk, by step."""
    found = []
    for row in curve_rows(run):
        path = Path(str(row.get("checkpoint") or ""))
        served = not str(row.get("error") or "").startswith("serving failed")
        if row["step"] < step and served and (path / "config.json").is_file():
            found.append(Checkpoint(row["step"], path))
    return found


def step_key(record: dict[str, Any]) -> tuple[int]:
    return (int(record["step"]),)


@dataclass
class LoopOutcome:
    evaluated: list[int]  # steps evaluated by this call (errors included)
    skipped: list[int]  # complete steps already in the curve when found
    stop_reason: str


def run_loop(
    watch: Path,
    spec: LoopSpec,
    run: RunDir,
    *,
    once: bool = False,
    poll_s: float = 30.0,
    timeout_s: float = 86_400.0,
    backend: str = "auto",
    baseline: Path | None = None,
    on_row: Callable[[dict[str, Any]], None] | None = None,
    on_wait: Callable[[str], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> LoopOutcome:
    """Evaluate every complete checkpoint under `watch` that has no good row yet.

    `baseline`: a model folder (the one training started from) evaluated once as step 0, with the
    prompt style and reply length of the first checkpoint found, so the curve starts where
    training did.

    With `once`, what is there now and return. Otherwise poll every `poll_s` seconds until
    `timeout_s` has passed, or the training run that writes the checkpoints has finished (its
    run.json) and all its checkpoints are evaluated. A step whose evaluation gave an error row is
    not retried within the same call (a rerun retries it).
    """
    from train_backend.mas.trained import mas_training_run

    mas_run = mas_training_run(watch)
    workflow_options: dict[str, Any] = {}
    if mas_run is not None:
        check_mas_spec(spec, mas_run)
        config = json.loads((mas_run / RUN_FILE).read_text())["config"]
        workflow_options = dict(config.get("workflow_options") or {})
    done = {key[0] for key in run.prepare_resume(step_key)}
    write_curve(run)
    deadline = time.monotonic() + timeout_s
    attempted: set[int] = set()
    skipped: list[int] = []
    evaluated: list[int] = []
    announced_missing = False
    while True:
        folder = mas_run or checkpoints_folder(watch)
        if not folder.is_dir() and once:
            raise MarsError(f"--watch {watch} is not a folder")
        if not folder.is_dir() and not announced_missing and on_wait is not None:
            on_wait(f"waiting for {watch} to appear")
            announced_missing = True
        found = mas_checkpoints(mas_run) if mas_run else complete_checkpoints(folder)
        if baseline is not None and 0 not in attempted and (found or once):
            attempted.add(0)
            if 0 in done:
                skipped.append(0)
            else:
                start = Checkpoint(0, baseline)
                if mas_run is not None:  # every role the starting model, the workflow as trained
                    start = Checkpoint(0, baseline, mas_options=workflow_options)
                first = found[0] if found else None
                row = evaluate_checkpoint(
                    start, spec, run.path, backend=backend, defaults_from=first, earlier=[]
                )
                row["baseline"] = True
                run.append(row)
                write_curve(run)
                evaluated.append(0)
                if on_row is not None:
                    on_row(row)
        for checkpoint in found:
            if checkpoint.step in attempted:
                continue
            if checkpoint.step in done:
                attempted.add(checkpoint.step)
                skipped.append(checkpoint.step)
                continue
            attempted.add(checkpoint.step)
            row = evaluate_checkpoint(
                checkpoint,
                spec,
                run.path,
                backend=backend,
                earlier=earlier_checkpoints(run, checkpoint.step),
            )
            run.append(row)
            write_curve(run)
            evaluated.append(checkpoint.step)
            if on_row is not None:
                on_row(row)
        if once:
            return LoopOutcome(evaluated, skipped, "once")
        now = mas_checkpoints(mas_run) if mas_run else complete_checkpoints(folder)
        pending = [c for c in now if c.step not in attempted]
        status = training_status(folder)
        if not pending and status == RunStatus.DRY_RUN:
            return LoopOutcome(evaluated, skipped, "a dry run: nothing was trained")
        if not pending and status in FINISHED_STATUSES:
            return LoopOutcome(evaluated, skipped, "training finished")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return LoopOutcome(evaluated, skipped, "timeout")
        sleep(min(poll_s, remaining))
