"""The training configuration: one typed source for the CPU trainer and the verl backend.

Defaults follow the MARSHAL setup (docs/parity.md) where they make sense on any machine; the
CPU trainer's small-model defaults (compact prompts, short replies, a larger learning rate) are
set by `TrainConfig.for_local()`. YAML files and CLI flags override fields.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from core.settings_files import read_yaml_mapping, settings_error
from games.rules import (
    InvalidOutcome,
    LeducDeals,
    LengthPenaltyStyle,
    ParseMode,
    PlayRules,
    PromptStyle,
    TurnRewards,
)

if TYPE_CHECKING:
    from games.spec import GameSpec


class VerlSettings(BaseModel):
    """Cluster-only knobs passed to verl (ignored by the CPU trainer)."""

    model_config = ConfigDict(extra="forbid")

    n_gpus_per_node: int = 8
    nnodes: int = 1
    rollout_engine: Literal["vllm", "sglang"] = "vllm"
    # cpu: train on this machine's CPU with verl's own trainer (a rehearsal; docs/verl.md)
    device: Literal["cuda", "cpu"] = "cuda"
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.6
    ray_address: str | None = None
    extra_overrides: list[str] = Field(default_factory=list)
    # One policy per role (train-mas --policies): every policy in one verl job, colocated on the
    # GPUs (policies.py); false = one verl launch per phase, one trained model on the GPUs at a
    # time and the others served beside it (mas_phases.py).
    one_job: bool = True
    # verl's full_determinism for the actor, the reference and the rollout, and a sampling seed
    # per request from the call's place (workflow_loop.call_seed): a run stopped and resumed
    # samples and trains what it would have straight through. On the CPU device every seeded
    # request is decoded alone; on vLLM it sets VLLM_BATCH_INVARIANT (slower kernels).
    deterministic: bool = False

    @model_validator(mode="after")
    def _one_rank_on_cpu(self) -> VerlSettings:
        # On the CPU device a "GPU" is a logical slot: one rank unless more are asked for.
        if self.device == "cpu" and "n_gpus_per_node" not in self.model_fields_set:
            self.n_gpus_per_node = 1
        return self


class TreeSettings(BaseModel):
    """Tree sampling for `estimator: at_grpo` (train_backend.local.tree; docs/estimators.md): the
    one type both trainers read (the CPU trainer's tree, and verl's agent loop from the dataset
    row's columns of the same names, train_backend.verl.data)."""

    model_config = ConfigDict(extra="forbid")

    branches: int = Field(4, ge=2)  # K replies sampled at every policy turn
    # which branch continues the main line: auto = greedy in perfect-information games, else random
    continuation: Literal["auto", "random", "greedy"] = "auto"
    all_actions: bool = False  # every legal action among the K branches (when K allows)
    counterfactual: bool = False  # branches = one sampled reply x every legal answer
    team_weight: float = Field(0.0, ge=0)  # alpha in r = alpha * team + local
    # chance that a random continuation takes a uniformly chosen branch (own-move exploration)
    explore: float = Field(0.0, ge=0, le=1)
    # chance that a main-line policy turn is branched; the others get one untrained sample
    branch_rate: float = Field(1.0, gt=0, le=1)
    keep_invalid: bool = False  # all_actions rewrites duplicated branches only, not invalid ones

    def continuation_for(self, spec: GameSpec) -> Literal["random", "greedy"]:
        if self.continuation != "auto":
            return self.continuation
        return "greedy" if spec.perfect_information else "random"


class TrainConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt setting is an error, not ignored

    model: str | None = None  # a Hugging Face causal-LM folder or hub id; None = the tiny model
    # A named bundle of settings (train_backend.presets): "marshal" = the released code's choices
    preset: str | None = None
    games: list[str] = Field(default_factory=lambda: ["tic_tac_toe"])
    estimator: str = "marshal"
    estimator_options: dict[str, Any] = Field(default_factory=dict)  # gamma, eps, scale, ...
    tree: TreeSettings = Field(default_factory=TreeSettings)  # at_grpo only
    # Group filtering before the update (train_backend.group_filter; tree estimators only):
    # none | mean | std | dapo | uid, with the share `group_filter_ratio` (mean, std, uid)
    group_filter: str = "none"
    group_filter_ratio: float = Field(0.5, ge=0, le=1)
    drop_flat_groups: bool = False  # groups whose returns are all equal (advantages exactly 0)
    drop_singleton_groups: bool = False  # groups of one sample
    steps: int = Field(200, ge=1)
    games_per_step: int = Field(192, ge=1)  # self-play games per update (both seats train)
    group_size: int = Field(1, ge=1)  # games sharing a seed (GRPO prompt groups); paper: 1
    # None: self-play (both seats train). Else a fixed opponent in the other seat: an arena bot
    # (random, mcts:N, cfr:N, ...) or checkpoint:PATH; the policy's seat alternates.
    opponent: str | None = None
    # `opponent: pool` (fictitious self-play): every step the opponent is one of the policy's past
    # snapshots, drawn uniformly; a snapshot joins every `pool_every` steps, the newest
    # `pool_size` are kept (the starting model is the first).
    pool_every: int = Field(5, ge=1)
    pool_size: int = Field(8, ge=1)
    learning_rate: float = Field(1e-6, gt=0)
    lr_schedule: Literal["cosine", "constant"] = "cosine"
    min_lr_ratio: float = Field(0.0, ge=0, le=1)  # the cosine schedule's floor, x learning_rate
    adam_betas: tuple[float, float] = (0.9, 0.999)  # AdamW (beta1, beta2)
    warmup_steps: int = Field(10, ge=0)
    weight_decay: float = Field(0.05, ge=0)
    grad_clip: float = Field(1.0, gt=0)
    clip_ratio: float = Field(0.2, gt=0)
    dual_clip: float | None = Field(3.0, gt=1)
    kl_coef: float = Field(0.2, ge=0)  # k3 KL to the frozen reference model; 0 = no reference
    # Regularisers that keep a mixed strategy alive (docs/training.md); 0 = off
    entropy_coef: float = Field(0.0, ge=0)  # bonus on the mean token entropy of the replies
    ppo_epochs: int = Field(1, ge=1)
    minibatch_turns: int = Field(64, ge=1)
    temperature: float = Field(0.6, ge=0)
    top_p: float = Field(0.99, gt=0, le=1)
    top_k: int = Field(100, ge=0)
    max_new_tokens: int = Field(4096, ge=1)  # per turn
    max_game_tokens: int = Field(32768, ge=1)
    prompt_style: PromptStyle = "full"
    # conversation: one training sample per seat and game (its whole chat, loss on its replies);
    # turn: one sample per model call (that turn's prompt and reply)
    sample_unit: Literal["conversation", "turn"] = "conversation"
    invalid: str = "penalty"
    # How games are dealt, read and scored (games.rules; docs/parity.md)
    turn_rewards: TurnRewards = "outcome"
    invalid_outcome: InvalidOutcome = "forfeit"
    length_penalty: LengthPenaltyStyle = "light"
    leduc_deals: LeducDeals = "natural"
    parse_mode: ParseMode = "lenient"
    save_every: int = Field(20, ge=1)
    eval_every: int = Field(20, ge=0)  # 0 = no in-training evaluation
    eval_episodes: int = Field(50, ge=1)  # per seat and opponent
    eval_opponents: dict[str, list[str]] = Field(
        default_factory=lambda: {
            "tic_tac_toe": ["random", "mcts:100"],
            "kuhn_poker": ["random", "cfr:1000"],
            "mini_hanabi": ["self"],
        }
    )
    # Exploitability at eval steps: game (kuhn_poker, leduc_poker) -> sampled replies per
    # information state. None: kuhn_poker at 32 when it is among the games (local backend).
    eval_exploitability: dict[str, int] | None = None
    seed: int = 0
    verl: VerlSettings = Field(default_factory=VerlSettings)
    # Trackers that get the metrics.jsonl rows and this config too (core.trackers; `--logger`):
    # console, wandb, tensorboard, mlflow. Not part of the run's identity: a resume may change it.
    logger: list[str] = Field(default_factory=list)

    @field_validator("games")
    @classmethod
    def _at_least_one_game(cls, games: list[str]) -> list[str]:
        if not games:
            raise ValueError("at least one game is needed")
        return games

    @field_validator("group_filter")
    @classmethod
    def _known_group_filter(cls, name: str) -> str:
        from train_backend.group_filter import GROUP_FILTERS

        if name not in GROUP_FILTERS:
            raise ValueError(
                f"unknown group_filter {name!r}; choose one of: {', '.join(GROUP_FILTERS)}"
            )
        return name

    @field_validator("preset")
    @classmethod
    def _known_preset(cls, name: str | None) -> str | None:
        from train_backend.presets import checked_preset

        return checked_preset(name)

    @field_validator("logger", mode="before")
    @classmethod
    def _known_loggers(cls, names: Any) -> Any:
        """Known names whose packages are installed (one line otherwise); `a,b` works too."""
        from core.trackers import logger_setting

        return logger_setting(names)

    @field_validator("adam_betas")
    @classmethod
    def _betas_in_range(cls, betas: tuple[float, float]) -> tuple[float, float]:
        if not all(0.0 <= beta < 1.0 for beta in betas):
            raise ValueError(f"each beta must be in [0, 1), got {list(betas)}")
        return betas

    def play_rules(self) -> PlayRules:
        return PlayRules(
            turn_rewards=self.turn_rewards,
            invalid_outcome=self.invalid_outcome,
            length_penalty=self.length_penalty,
            leduc_deals=self.leduc_deals,
            parse_mode=self.parse_mode,
        )

    @field_validator("eval_exploitability")
    @classmethod
    def _exact_best_response_games(cls, games: dict[str, int] | None) -> dict[str, int] | None:
        from core.errors import MarsError
        from games.infostates import check_exact_best_response
        from games.spec import get_game

        for name, samples in (games or {}).items():
            if samples < 1:
                raise ValueError(f"{name}: at least 1 sample per information state")
            try:
                check_exact_best_response(get_game(name))
            except MarsError as exc:
                raise ValueError(str(exc)) from None
        return games

    @classmethod
    def for_local(cls, **overrides: Any) -> TrainConfig:
        """Defaults sized for the embedded tiny model on a CPU."""
        local = {
            "games_per_step": 32,
            "steps": 60,
            "learning_rate": 1e-4,
            "warmup_steps": 2,
            "kl_coef": 0.0,
            "temperature": 1.0,
            "top_p": 1.0,
            "top_k": 0,
            "max_new_tokens": 48,
            "max_game_tokens": 2048,
            "prompt_style": "compact",
            "save_every": 10,
            "eval_every": 10,
            "eval_episodes": 30,
        }
        local.update(overrides)
        return cls.model_validate(local)


def load_train_config(
    path: Path | None,
    overrides: dict[str, Any],
    *,
    local: bool,
    default_preset: str | None = None,
) -> TrainConfig:
    """Defaults (local or cluster), then the preset, then a YAML file, then CLI overrides.

    The preset is the one the overrides or the file name, else `default_preset`; one clear error
    line for anything bad.
    """
    from train_backend.presets import preset_settings

    data: dict[str, Any] = {} if path is None else read_yaml_mapping(path, "config")
    data.update({k: v for k, v in overrides.items() if v is not None})
    data.setdefault("preset", default_preset)
    data = {**preset_settings(data["preset"]), **data}
    try:
        return TrainConfig.for_local(**data) if local else TrainConfig.model_validate(data)
    except ValidationError as exc:
        raise settings_error(exc, "training") from exc
