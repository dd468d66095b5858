"""The embedded CPU self-play trainer (`mars train --trainer local`).

One step:
1. rollout: `games_per_step` self-play games (round-robin over `config.games`) played at once with
   the policy in both seats, all pending turns decoded as one batch, sampling at the configured
   temperature / top-p / top-k;
2. advantages: `compute_advantages` over the step's table of turns with the chosen estimator; each
   turn's advantage applies to every token of its reply;
3. update: a training sequence is a seat's whole conversation (`sample_unit: conversation`,
   with `full` prompts: loss on each of its replies, with its turn's advantage) or one model call
   (its prompt + its reply; only reply tokens carry loss). PPO-clip with dual clip and an
   optional k3 KL to the frozen initial model, token mean per sequence then mean over sequences;
   `ppo_epochs` passes over the sequences in minibatches of `minibatch_turns` (one AdamW update
   each), gradients clipped to `grad_clip`;
4. every `eval_every` steps: greedy arena evaluation against each game's opponents (and, with
   `eval_every` on, once before the first update: step 0, the start policy, written once);
5. one line in metrics.jsonl, the step's records in records.jsonl, and every `save_every` steps
   (and at the end) a checkpoint.

The learning rate is a function of the step (linear warm-up over `warmup_steps`, then cosine decay
over the remaining steps towards `min_lr_ratio` x the peak, or constant), set before each step's
update.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from core import branch_log
from core.batcher import GREEDY, Sampling
from core.causal_lm import Policy, load_policy, resolve_model_path
from core.checkpoints import read_checkpoint
from core.errors import MarsError
from core.files import write_jsonl_atomic
from core.runstore import RunDir
from core.trackers import Trackers
from games.engine import EpisodeOptions
from games.players.base import Player
from games.selfplay import TURN_COLUMNS
from games.spec import GameSpec, get_game
from train_backend.advantage import ESTIMATORS, TREE_ESTIMATORS, compute_advantages, needs_state
from train_backend.config import TrainConfig
from train_backend.group_filter import (
    GroupFilter,
    Selection,
    check_group_filter,
    kept_advantages,
    select_step,
)
from train_backend.local import checkpoint, runlog
from train_backend.local.evaluate import EvalPair, eval_pairs, evaluate
from train_backend.local.exploitability import exploitability_eval
from train_backend.local.opponents import (
    OpponentPool,
    load_opponent_policy,
    make_fixed_opponent,
)
from train_backend.local.rollout import (
    PolicyResponder,
    StepRollout,
    TurnSample,
    make_responder,
    play_step,
)
from train_backend.local.step_metrics import (
    average_policy_metrics,
    evaluation_lines,
    progress_line,
    row_states,
    step_metrics,
)
from train_backend.local.tree import play_tree_step
from train_backend.local.update import (
    UpdateStats,
    sequence_log_probs,
    step_generator,
    update_policy,
    used_by_update,
)

if TYPE_CHECKING:
    import torch


def learning_rate_at(step: int, config: TrainConfig) -> float:
    """The learning rate of update `step` (1-based)."""
    base = config.learning_rate
    if config.warmup_steps and step <= config.warmup_steps:
        return base * step / config.warmup_steps
    if config.lr_schedule == "constant":
        return base
    decay_steps = max(1, config.steps - config.warmup_steps)
    progress = (step - config.warmup_steps - 1) / decay_steps  # 0 right after warm-up, < 1 at end
    floor = config.min_lr_ratio
    return base * (floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress)))


def check_games_and_estimator(config: TrainConfig) -> list[GameSpec]:
    """Fail fast on bad names (any backend): games, estimator and its options."""
    specs = [get_game(name) for name in config.games]
    if len({spec.name for spec in specs}) != len(specs):
        raise MarsError(f"--games lists a game twice: {', '.join(config.games)}")
    if config.estimator not in ESTIMATORS:
        raise MarsError(
            f"unknown estimator {config.estimator!r}; choose one of: {', '.join(ESTIMATORS)}"
        )
    empty: dict[str, list[Any]] = {column: [] for column in (*TURN_COLUMNS, "state")}
    compute_advantages(empty, config.estimator, **config.estimator_options)  # checks options
    check_group_filter(config)
    return specs


def check_config(config: TrainConfig) -> list[GameSpec]:
    """Everything the local backend needs to hold before it starts."""
    specs = check_games_and_estimator(config)
    if config.group_size != 1:
        raise MarsError(
            "the local backend plays every game from its own seed (group_size 1); "
            f"got group_size {config.group_size}"
        )
    episode_options(config)
    if config.opponent:
        make_fixed_opponent(config.opponent, specs)
    if config.estimator in TREE_ESTIMATORS and conversation_samples(config):
        raise MarsError(
            f"{config.estimator} trains one sample per reply: use --prompt-style compact or "
            "sample_unit: turn (a seat's whole conversation is one sample otherwise)"
        )
    return specs


def conversation_samples(config: TrainConfig) -> bool:
    """Whether a training sample is a seat's whole conversation (else one model call)."""
    return config.sample_unit == "conversation" and config.prompt_style == "full"


def episode_options(config: TrainConfig) -> EpisodeOptions:
    return EpisodeOptions(
        prompt_style=config.prompt_style, invalid=config.invalid, rules=config.play_rules()
    )


def sampling_of(config: TrainConfig) -> Sampling:
    return Sampling(temperature=config.temperature, top_p=config.top_p, top_k=config.top_k)


class LocalTrainer:
    def __init__(
        self,
        config: TrainConfig,
        run: RunDir,
        *,
        log: Callable[[str], None] = print,
    ) -> None:
        self.config = config
        self.run = run
        self.log = log
        self.specs = check_config(config)
        self.pairs: list[EvalPair] = (
            eval_pairs(self.specs, config.eval_opponents) if config.eval_every else []
        )
        self.options = episode_options(config)
        self.opponent = (
            make_fixed_opponent(config.opponent, self.specs) if config.opponent else None
        )
        self.opponent_policy: Policy | None = None
        self.pool: OpponentPool | None = None
        self.pool_pick: int | None = None  # the step of this step's pool snapshot
        self.start_step = 0
        self.model_source = resolve_model_path(config.model)
        self.policy: Policy
        self.reference: Any = None
        self.optimizer: Any = None
        self.last_metrics: dict[str, Any] = {}
        self.trackers = Trackers()  # `config.logger`'s, opened by `train_local`

    # -- setup ----------------------------------------------------------------------------------

    def load(self, policy: Policy | None = None) -> None:
        """Load the policy (from the last checkpoint when resuming), reference and optimizer.

        `policy`: the model already loaded from `config.model` (used unless resuming).
        """
        import torch

        checkpoint.remove_partial(self.run.path)
        latest = checkpoint.latest_checkpoint(self.run.path)
        state: dict[str, Any] | None = None
        if latest is not None:
            self.start_step, folder = latest
            self.policy = load_policy(folder)
            state = checkpoint.load_trainer_state(folder)
            self.last_metrics = read_checkpoint(folder).get("metrics") or {}
            self.log(f"resuming from {folder} (step {self.start_step})")
        else:
            self.policy = policy or load_policy(self.model_source)
        runlog.truncate_after(self.run.path, self.start_step, self.run.records_path)
        if self.opponent is not None:
            self.opponent_policy = load_opponent_policy(self.opponent, self.model_source)
        if self.opponent is not None and self.opponent.pool:
            # The start (or, resuming, the resumed weights) is the first snapshot.
            self.pool = OpponentPool(self.config.pool_size, self.config.seed)
            self.pool.add(self.start_step, self.policy.model)
        if self.config.kl_coef > 0:
            reference = load_policy(self.model_source).model
            reference.requires_grad_(False)
            self.reference = reference
        # Dropout stays off (eval mode) in the update too, so the log-probs the loss compares are
        # those of the policy that sampled.
        self.policy.model.eval()
        self.optimizer = torch.optim.AdamW(
            self.policy.model.parameters(),
            lr=self.config.learning_rate,
            betas=tuple(self.config.adam_betas),
            weight_decay=self.config.weight_decay,
        )
        if state is not None:
            self.optimizer.load_state_dict(state["optimizer"])
            torch.set_rng_state(state["torch_rng"])

    def update(
        self, samples: Sequence[TurnSample], advantages: np.ndarray, step: int
    ) -> UpdateStats:
        return update_policy(
            self.config, self.policy, self.reference, self.optimizer, samples, advantages, step
        )

    def sequence_log_probs(self, model: Any, samples: Sequence[TurnSample]) -> list[torch.Tensor]:
        return sequence_log_probs(self.config, self.policy.pad_id, model, samples)

    # -- the loop -------------------------------------------------------------------------------

    def train(self) -> dict[str, Any]:
        """Run the remaining steps; returns the summary (also written to summary.json)."""
        import torch

        config = self.config
        if self.start_step >= config.steps:
            self.log(f"nothing to do: {self.start_step} of {config.steps} steps already done")
        if config.eval_every and self.start_step == 0 and not self._start_evaluated():
            self._evaluate_start()
        for step in range(self.start_step + 1, config.steps + 1):
            started = time.perf_counter()
            lr = learning_rate_at(step, config)
            for group in self.optimizer.param_groups:
                group["lr"] = lr
            rollout = self.rollout(step)
            selection = select_step(rollout.rows, GroupFilter.of(config))
            advantages = self.step_advantages(rollout, selection)
            samples, trained = kept_samples(rollout.samples, advantages, selection)
            update_started = time.perf_counter()
            stats = self.update(samples, trained, step)
            update_s = time.perf_counter() - update_started
            deals = self.options.rules.leduc_deals
            metrics = step_metrics(step, rollout, trained, stats, lr=lr, leduc_deals=deals)
            metrics["update_s"] = round(update_s, 3)
            branches = self.branch_lines(step, rollout, advantages, selection)
            metrics.update(branch_log.sampled_collapse_signals(branches))
            if selection is not None:
                metrics.update(selection.metrics())
            if self.pool is not None:
                metrics["pool_opponent_step"] = self.pool_pick
                if step % config.pool_every == 0:
                    self.pool.add(step, self.policy.model)
                metrics["pool_size"] = len(self.pool.snapshots)
            eval_records: list[dict[str, Any]] = []
            if config.eval_every and (step % config.eval_every == 0 or step == config.steps):
                eval_started = time.perf_counter()
                eval_metrics, eval_records = self._evaluate(step)
                metrics.update(eval_metrics)
                metrics["eval_s"] = round(time.perf_counter() - eval_started, 3)
            metrics["seconds_per_step"] = round(time.perf_counter() - started, 3)
            self.run.append_many(rollout.records)
            branch_log.write_step(self.run.path, step, branches)
            runlog.append_lines(runlog.eval_records_path(self.run.path, step), eval_records)
            runlog.append_lines(runlog.metrics_path(self.run.path), [metrics])
            self.trackers.log(metrics, step)
            self.last_metrics = metrics
            self.log(progress_line(metrics, config.steps))
            if step % config.save_every == 0 or step == config.steps:
                path = checkpoint.save_checkpoint(
                    self.run.path,
                    step,
                    self.policy,
                    trainer_state={
                        "step": step,
                        "optimizer": self.optimizer.state_dict(),
                        "torch_rng": torch.get_rng_state(),
                    },
                    config=config.model_dump(mode="json"),
                    metrics=metrics,
                )
                self.log(f"checkpoint: {path}")
        summary = {
            "steps": config.steps,
            "last_step": max(self.start_step, config.steps),
            "checkpoints": [str(p) for _, p in checkpoint.list_checkpoints(self.run.path)],
            "last_metrics": self.last_metrics,
            "preset": config.preset,
            "rules": config.play_rules().describe(),
        }
        self.run.write_summary(summary)
        self._log_last_evaluation()
        return summary

    def _start_evaluated(self) -> bool:
        """Whether metrics.jsonl holds step 0 already (a rerun of a run killed before its first
        checkpoint keeps it: `runlog.truncate_after` drops only the steps after 0)."""
        rows = runlog.read_lines(runlog.metrics_path(self.run.path))
        return any(row.get("step") == 0 for row in rows)

    def _evaluate_start(self) -> None:
        """Step 0: the start policy evaluated before any update, so the curves have a first
        point and the policy panel a start column. Its records replace evals/step_0.jsonl whole
        and its metrics line comes after them: a kill between the two is redone once, whole."""
        started = time.perf_counter()
        metrics, records = self._evaluate(0)
        row = {"step": 0, **metrics, "eval_s": round(time.perf_counter() - started, 3)}
        path = runlog.eval_records_path(self.run.path, 0)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_jsonl_atomic(path, records)
        runlog.append_lines(runlog.metrics_path(self.run.path), [row])
        self.trackers.log(row, 0)
        self.log("step 0 (the start policy, before any update):")
        for line in evaluation_lines(row):
            self.log(line)

    def _log_last_evaluation(self) -> None:
        """The run's last in-training evaluation, again at the end, where a user looks."""
        for metrics in reversed(runlog.read_lines(runlog.metrics_path(self.run.path))):
            lines = evaluation_lines(metrics)
            if lines:
                self.log(f"last evaluation (step {metrics['step']}):")
                for line in lines:
                    self.log(line)
                return

    def _responder(
        self,
        policy: Policy,
        sampling: Sampling,
        generator: torch.Generator | None,
        *,
        keep_tokens: bool = False,
        conversation: bool = False,
    ) -> PolicyResponder:
        """A batched responder for `policy` within the run's reply and game token budgets."""
        return make_responder(
            policy,
            sampling,
            generator=generator,
            max_new_tokens=self.config.max_new_tokens,
            max_context_tokens=self.config.max_game_tokens,
            keep_tokens=keep_tokens,
            conversation=conversation,
        )

    def rollout(self, step: int) -> StepRollout:
        config = self.config
        responder = self._responder(
            self.policy,
            sampling_of(config),
            step_generator(config.seed, step, 0),
            keep_tokens=True,
            conversation=conversation_samples(config),
        )
        if config.estimator in TREE_ESTIMATORS:
            return asyncio.run(
                play_tree_step(
                    responder,
                    self.specs,
                    tree=config.tree,
                    step=step,
                    run_seed=config.seed,
                    games_per_step=config.games_per_step,
                    options=self.options,
                    opponents=self.fixed_players(step),
                )
            )
        return asyncio.run(
            play_step(
                responder,
                self.specs,
                step=step,
                run_seed=config.seed,
                games_per_step=config.games_per_step,
                options=self.options,
                opponents=self.fixed_players(step),
            )
        )

    def fixed_players(self, step: int) -> dict[str, Player] | None:
        """Game -> the fixed opponent's player for this step's rollout (None: self-play)."""
        if self.opponent is None:
            return None
        if self.opponent_policy is None:
            return self.opponent.bots
        config = self.config
        if self.pool is not None:
            self.pool_pick, weights = self.pool.draw(step)
            self.opponent_policy.model.load_state_dict(weights)
        responder = self._responder(
            self.opponent_policy,
            sampling_of(config),
            step_generator(config.seed, step, 2),
            conversation=conversation_samples(config),
        )
        name = self.opponent.name
        return {spec.name: responder.player(spec.name, name=name) for spec in self.specs}

    def step_advantages(
        self, rollout: StepRollout, selection: Selection | None = None
    ) -> np.ndarray:
        """One advantage per row; with a selection, of the kept rows only (the others get 0)."""
        if not rollout.rows:
            return np.zeros(0)
        table = {column: [row[column] for row in rollout.rows] for column in TURN_COLUMNS}
        if needs_state(self.config.estimator_options):
            table["state"] = row_states(rollout)
        estimator, options = self.config.estimator, self.config.estimator_options
        if selection is not None:
            return kept_advantages(table, selection.keep, estimator, **options)
        return compute_advantages(table, estimator, **options)

    def branch_lines(
        self,
        step: int,
        rollout: StepRollout,
        advantages: np.ndarray,
        selection: Selection | None,
    ) -> list[dict[str, Any]]:
        """The step's tree branches for `branches/step_N.jsonl.gz` (none without a tree)."""
        if not rollout.replies:
            return []
        keep = selection.keep if selection is not None else np.ones(len(rollout.rows), bool)
        used = used_by_update(self.config, rollout.samples, advantages, keep)
        return branch_log.step_lines(step, rollout.rows, rollout.replies, advantages, used)

    def _evaluate(self, step: int) -> tuple[dict[str, float], list[dict[str, Any]]]:
        config = self.config
        # The policy plays the evaluation as it plays in training: with a seat's earlier replies
        # kept verbatim in its context when training samples are whole conversations.
        responder = self._responder(
            self.policy, GREEDY, None, conversation=conversation_samples(config)
        )
        metrics, records = asyncio.run(
            evaluate(
                responder,
                self.pairs,
                episodes=config.eval_episodes,
                options=self.options,
                step=step,
                exploitability=exploitability_eval(config),
            )
        )
        earlier = runlog.read_lines(runlog.metrics_path(self.run.path))
        metrics.update(average_policy_metrics([*earlier, metrics]))
        return metrics, records

    # -- the update -----------------------------------------------------------------------------


def kept_samples(
    samples: Sequence[TurnSample], advantages: np.ndarray, selection: Selection | None
) -> tuple[list[TurnSample], np.ndarray]:
    """The samples the update sees, with their advantages: all of them, or the selection's
    (tree samples: one per row, in row order)."""
    if selection is None:
        return list(samples), advantages
    if len(samples) != selection.keep.size or any(sample.rows for sample in samples):
        raise MarsError("group filtering needs one sample per branch row (tree samples)")
    kept = np.flatnonzero(selection.keep)
    return [samples[i] for i in kept], advantages[kept]


def train_local(
    config: TrainConfig,
    run: RunDir,
    *,
    command: list[str],
    log: Callable[[str], None] = print,
    policy: Policy | None = None,
) -> dict[str, Any]:
    """Train into `run` (resuming from its last checkpoint); marks the run interrupted on Ctrl-C.

    `policy`: the model of `config.model`, already loaded (ignored when a checkpoint exists).
    """
    trainer = LocalTrainer(config, run, log=log)
    trainer.load(policy)
    return runlog.train_tracked(
        run, trainer, config, command=command, model=str(trainer.model_source)
    )
