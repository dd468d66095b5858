"""The recipe of a format pre-training: its settings, the self-play starting recipe, YAML files."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from core.errors import MarsError
from core.settings_files import read_yaml_mapping, settings_error
from train_backend.pretrain.format_data import FORMAT_DATA_VERSION
from train_backend.pretrain.relabel import RELABEL_VERSION
from train_backend.pretrain.teacher_replies import ReplyTeacher, check_teacher

PRETRAIN_VERSION = 1
DEFAULT_GAMES: tuple[str, ...] = ("tic_tac_toe", "kuhn_poker", "mini_hanabi")


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
    # `last_listed_share`, else the teacher's move (see train_backend.pretrain.format_data for why).
    reply_teacher: str | None = None
    last_listed_share: float = Field(1.0, ge=0, le=1)
    # Bots whose games make the positions (and, in poker and Hanabi, whose moves the replies
    # name), per game; games not named use `random` plus a strong bot where one exists.
    # `{kuhn_poker: [random]}` teaches the format with no strategy at all.
    teachers: dict[str, list[str]] = Field(default_factory=dict)
    # Per game: the replies name a move drawn from this policy at this level (CFR in poker,
    # MCTS visit counts in board games, tempered and mixed with random moves), in place of the
    # rules above (train_backend.pretrain.teacher_replies).
    reply_teachers: dict[str, ReplyTeacher] = Field(default_factory=dict)
    # The reply: `choose` = "I choose X." then the answer tag; `restate` = in the hidden-information
    # games, the seat's compact view of the state on one line, then the answer tag (see
    # train_backend.pretrain.format_data.game_reply); perfect-information games keep `choose`.
    # `restate_all`: every game restates, a board as its rows on one line (restating is what
    # taught the poker start to copy relabelled labels, pretraining.md).
    reply_style: Literal["choose", "restate", "restate_all"] = "choose"
    # This share of each game's compact examples is a relabelled copy: words and labels renamed
    # to invented ones (train_backend.pretrain.relabel), so that reading the move off the
    # `Legal:` line is the only way to a valid reply, on renamed games too.
    relabel_share: float = Field(0.0, ge=0, le=1)
    # The style of the short (non-`full`) examples: `compact`, or `numbered` (the legal list
    # numbered, the reply's answer a number of it: games.prompts), which a start must be taught
    # for a run with `prompt_style: numbered`. Relabelled numbered examples teach answering a
    # number whatever the words around it (pretraining.md).
    prompt_style: Literal["compact", "numbered"] = "compact"
    # A first stage on relabelled examples alone (other positions, other names), in batches of
    # `copy_batch_size`, until its loss has fallen under `copy_stop_below` (at most this many
    # steps): in the mix, 600 steps taught the tiny model to invent words like the relabelled
    # ones, not to copy them (pretraining.md).
    copy_steps: int = Field(0, ge=0)
    copy_stop_below: float = Field(0.1, gt=0)
    copy_batch_size: int = Field(32, ge=1)
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

    @model_validator(mode="after")
    def _reply_teachers_fit_their_games(self) -> PretrainSettings:
        from games.spec import get_game

        for name, teacher in self.reply_teachers.items():
            if name not in self.games:
                raise ValueError(f"reply_teachers names {name}, which is not among the games")
            try:
                check_teacher(get_game(name), teacher)
            except MarsError as exc:
                raise ValueError(str(exc)) from None
        return self

    def recipe(self) -> dict[str, Any]:
        # Without reply teachers or relabelling a recipe reads as before they existed: its builds
        # stay found.
        unused = {"reply_teachers"} if not self.reply_teachers else set()
        unused |= {"relabel_share"} if not self.relabel_share else set()
        unused |= {"prompt_style"} if self.prompt_style == "compact" else set()
        if not self.copy_steps:
            unused |= {"copy_steps", "copy_stop_below", "copy_batch_size"}
        excluded = {"eval_positions", "eval_full_positions", "threads", *unused}
        relabelling = (
            {"relabel_version": RELABEL_VERSION} if self.relabel_share or self.copy_steps else {}
        )
        return {
            "version": PRETRAIN_VERSION,
            "data_version": FORMAT_DATA_VERSION,
            **relabelling,
            **self.model_dump(exclude=excluded),
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
