"""The dataset verl reads: one parquet row per game to play.

verl's `RLHFDataset` turns the `prompt` column (chat messages) into `raw_prompt` and hands every
column of the row to the agent loop named in `agent_name`. Our loop renders its own prompts per
seat as the game goes; `prompt` holds the opening of the first seat's chat (system prompt, rules,
seat), which verl shows in its logs and length checks.

Rows are ordered so that every training batch holds the games in equal shares (round robin), and
each game's seeds count up from `seed`: Kuhn and Leduc deals are picked by `seed mod deals`, so
consecutive seeds cover every deal evenly (docs/games.md). verl reads the file in order
(`data.shuffle=false`), one epoch of exactly `steps` batches. A run against a fixed opponent
names it in an `opponent` column; an at_grpo run carries its tree settings (a column per field of
`TreeSettings`: `branches`, ...).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from core.errors import MarsError
from games.prompts import seat_description, system_prompt
from games.spec import get_game
from train_backend.advantage import TREE_ESTIMATORS
from train_backend.config import TrainConfig
from train_backend.mas.config import WorkflowTrainConfig
from train_backend.verl import names


def prompts_per_step(config: TrainConfig) -> int:
    """Dataset rows per training step: each row is played `group_size` times (verl's rollout.n);
    a workflow's row is one problem, tree-sampled once."""
    if isinstance(config, WorkflowTrainConfig):
        return config.problems_per_step
    if config.games_per_step % config.group_size:
        raise MarsError(
            f"games_per_step ({config.games_per_step}) must be a multiple of group_size "
            f"({config.group_size}): each step plays games_per_step / group_size seeds"
        )
    return config.games_per_step // config.group_size


def opening_messages(game: str) -> list[dict[str, str]]:
    spec = get_game(game)
    rules = f"# Game rules\n{spec.rules}\n\n# Your seat\n{seat_description(spec, 0)}"
    return [
        {"role": "system", "content": system_prompt(spec)},
        {"role": "user", "content": rules},
    ]


def loop_settings(config: TrainConfig) -> dict[str, Any]:
    """Columns only some runs need: the fixed opponent, and the tree settings of at_grpo (the
    agent loop then samples K replies at every policy turn: one turn sample per branch)."""
    settings: dict[str, Any] = {}
    if config.opponent:
        settings["opponent"] = config.opponent
    if config.estimator in TREE_ESTIMATORS:
        settings.update(config.tree.model_dump())  # every field of TreeSettings, by its name
    return settings


def sample_unit(config: TrainConfig) -> str:
    """A tree's sample is one reply at one turn (a branch), whatever `sample_unit` says."""
    return "turn" if config.estimator in TREE_ESTIMATORS else config.sample_unit


def game_rows(config: TrainConfig) -> list[dict[str, Any]]:
    games = [get_game(name).name for name in config.games]
    if len(set(games)) != len(games):
        raise MarsError(f"games are listed twice: {', '.join(config.games)}")
    openings = {game: opening_messages(game) for game in games}
    rows = []
    rules = config.play_rules().describe()  # the agent loop plays by these (games.rules)
    settings = loop_settings(config)
    played = dict.fromkeys(games, 0)
    for index in range(config.steps * prompts_per_step(config)):
        game = games[index % len(games)]
        seed = config.seed + played[game]
        played[game] += 1
        rows.append(
            {
                "data_source": f"mars/{game}",
                "agent_name": names.AGENT_LOOP_NAME,
                "prompt": openings[game],
                "game": game,
                "seed": seed,
                "prompt_style": config.prompt_style,
                "invalid": config.invalid,
                "sample_unit": sample_unit(config),
                "max_new_tokens": config.max_new_tokens,
                **rules,
                **settings,
                "extra_info": {"index": index, "game": game, "seed": seed},
            }
        )
    return rows


def workflow_rows(config: WorkflowTrainConfig) -> list[dict[str, Any]]:
    """One row per training problem, step by step as the CPU trainer takes them; the agent loop
    (workflow_loop.py) tree-samples each through the workflow."""
    from mas.base import get_mas
    from train_backend.mas.rollout import task_of
    from train_backend.mas.schedule import step_problems, training_problems

    get_mas(config.workflow)  # an unknown workflow fails here, before verl starts
    pool, _heldout = training_problems(config)
    options = json.dumps(config.workflow_options, sort_keys=True)
    partners = json.dumps(config.frozen_partners, sort_keys=True)
    role_policies = json.dumps(config.job_policies, sort_keys=True)
    role_sampling = json.dumps(
        {
            role: sampling.model_dump(exclude_none=True, exclude={"stop"})
            for role, sampling in config.role_sampling.items()
        },
        sort_keys=True,
    )
    rows = []
    for step in range(1, config.steps + 1):
        for problem in step_problems(config, pool, step):
            index = len(rows)
            rows.append(
                {
                    "data_source": f"mars/{config.workflow}",
                    "agent_name": names.WORKFLOW_LOOP_NAME,
                    "prompt": [{"role": "user", "content": task_of(problem).prompt}],
                    "workflow": config.workflow,
                    "workflow_options": options,
                    "problem_id": problem.id,
                    "question": problem.question,
                    "answer": problem.answer,
                    "answers_are": problem.answers_are,
                    "kind": problem.kind,
                    "metadata": json.dumps(dict(problem.metadata), sort_keys=True),
                    "source": problem.source,
                    "branches": config.branches,
                    "continuation": config.continuation,
                    "seed": config.seed * 1_000_003 + index,
                    "max_new_tokens": config.max_new_tokens,
                    "partners": partners,
                    "role_policies": role_policies,
                    "role_sampling": role_sampling,
                    "extra_info": {"index": index, "step": step, "problem_id": problem.id},
                }
            )
    return rows


def write_dataset(config: TrainConfig, path: Path) -> Path:
    """Write the training games (or a workflow's problems) to `path` (parquet) and return it."""
    import pandas as pd

    rows = workflow_rows(config) if isinstance(config, WorkflowTrainConfig) else game_rows(config)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".parquet.tmp")
    pd.DataFrame(rows).to_parquet(tmp, index=False)
    tmp.replace(path)
    return path
