"""Which problems a MAS training run trains on, step by step, and which it holds out.

Shared by the CPU trainer and the verl dataset (train_backend/verl/data.py), so both backends
train on the same problems in the same order for a given config.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from core.errors import MarsError
from train_backend.mas.arithmetic import arithmetic_problems
from train_backend.mas.code_problems import code_problems
from train_backend.mas.config import WorkflowTrainConfig
from train_backend.mas.data import (
    Problem,
    is_puzzle_set,
    load_code_train_file,
    load_train_set,
    puzzle_problems,
)
from train_backend.mas.rewards import check_problem_kind

ARITHMETIC_POOL = 2048  # distinct training expressions drawn for the arithmetic set
PUZZLE_POOL = 1024  # training levels of a puzzle set (generated once per run)
CODE_POOL = 120  # of the code miniature's 160 training problems


def training_problems(config: WorkflowTrainConfig) -> tuple[list[Problem], list[Problem]]:
    """(training pool, held-out problems), checked to be of a kind the workflow scores."""
    pool, heldout = _problems(config)
    check_problem_kind(config.workflow, pool[0].kind, config.train_set)
    return pool, heldout


def _problems(config: WorkflowTrainConfig) -> tuple[list[Problem], list[Problem]]:
    """Arithmetic, code_mini: their own held-out split. A puzzle suite: its evaluation levels. A
    real set: its last `heldout_problems` problems are held out of training (the benchmarks'
    test sets are never used: the loader refuses any overlap with them)."""
    if config.train_set == "arithmetic" and config.train_file is None:
        pool = arithmetic_problems(ARITHMETIC_POOL, config.seed)
        return pool, arithmetic_problems(config.heldout_problems, config.seed, "heldout")
    if config.train_set == "code_mini" and config.train_file is None:
        pool = code_problems(CODE_POOL, config.seed)
        return pool, code_problems(config.heldout_problems, config.seed, "heldout")
    if config.train_set == "code":
        if config.train_file is None:
            raise MarsError("train_set code reads train_file: a JSONL of code problems")
        problems = load_code_train_file(Path(config.train_file)).problems
        return _hold_out(config, problems)
    if is_puzzle_set(config.train_set):
        # Held out: the suite's own evaluation levels, which no training level equals.
        pool = puzzle_problems(config.train_set, "train", PUZZLE_POOL)
        return pool, puzzle_problems(config.train_set, "eval", config.heldout_problems)
    train_file = Path(config.train_file) if config.train_file else None
    problems = load_train_set(config.train_set, train_file=train_file).problems
    return _hold_out(config, problems)


def _hold_out(
    config: WorkflowTrainConfig, problems: list[Problem]
) -> tuple[list[Problem], list[Problem]]:
    """The last `heldout_problems` problems held out of training."""
    if len(problems) <= config.heldout_problems:
        raise MarsError(
            f"{config.train_set}: {len(problems)} problems, not more than the "
            f"{config.heldout_problems} held out; lower heldout_problems or add problems"
        )
    return problems[: -config.heldout_problems], problems[-config.heldout_problems :]


def step_problems(config: WorkflowTrainConfig, pool: list[Problem], step: int) -> list[Problem]:
    """Step `step`'s problems (from 1): the pool in one seeded order, wrapping around."""
    order = np.random.default_rng(config.seed).permutation(len(pool))
    size = config.problems_per_step
    start = (step - 1) * size
    return [pool[int(order[(start + i) % len(pool)])] for i in range(size)]
