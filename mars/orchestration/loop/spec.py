"""What `mars loop` runs on every checkpoint: the evaluation items and their spec."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, Field, ValidationError, model_validator

from core.errors import MarsError
from core.settings_files import first_problem, yaml_error_line
from games.rules import PromptStyle


class ArenaItem(BaseModel):
    kind: Literal["arena"] = "arena"
    game: str
    opponent: str
    episodes: int = Field(ge=1)  # per seat
    seats: Literal["both", "first", "second"] = "both"
    prompt_style: PromptStyle | None = None  # None: the loop's setting
    invalid: str = "penalty"
    name: str | None = None

    @property
    def key(self) -> str:
        return self.name or slug(f"arena-{self.game}-{self.opponent}")


class SuiteItem(BaseModel):
    kind: Literal["eval"] = "eval"
    suite: str
    mas: str = "single"
    limit: int | None = Field(None, ge=1)
    epochs: int = Field(1, ge=1)
    name: str | None = None

    @property
    def key(self) -> str:
        return self.name or slug(f"eval-{self.suite}-{self.mas}")


class ExploitItem(BaseModel):
    """Exploitability of the checkpoint's policy (`mars exploitability`), sampled at the loop's
    temperature: at 0 every sample is the greedy reply."""

    kind: Literal["exploit"] = "exploit"
    game: str
    samples: int = Field(16, ge=1)  # replies per information state
    bootstrap: int = Field(200, ge=0)
    prompt_style: PromptStyle | None = None  # None: the loop's setting
    name: str | None = None

    @property
    def key(self) -> str:
        return self.name or slug(f"exploit-{self.game}")


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
    prompt_style: PromptStyle | None = None  # None: the loop's setting
    invalid: str = "penalty"
    name: str | None = None

    @property
    def key(self) -> str:
        return self.name or slug(f"rating-{self.game}")


Item = ArenaItem | SuiteItem | ExploitItem | RatingItem
EvalItem = Annotated[Item, Field(discriminator="kind")]


class LoopSpec(BaseModel):
    """What to run on every checkpoint. Generation settings apply to every evaluation: one
    server per checkpoint, and `transformers serve` keeps the temperature of its first request."""

    evals: list[EvalItem] = Field(min_length=1)
    temperature: float = Field(0.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    max_tokens: int | None = Field(None, ge=1)  # None: the checkpoint's max_new_tokens, or 1024
    prompt_style: PromptStyle | None = None  # None: the checkpoint's, or full
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


def slug(text: str) -> str:
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
            raise MarsError(yaml_error_line(exc, "eval spec", path)) from exc
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
        where, message = first_problem(exc)
        raise MarsError(f"bad eval spec{f' at {where}' if where else ''}: {message}") from exc


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
