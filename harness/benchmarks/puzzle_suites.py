"""Procedural puzzle suites (Stronger-MAS's planning domains): Plan-Path, Sokoban, Sudoku.

No data files: a suite generates the evaluation-split levels 0..99 of its environment (100 as
in the paper; `--limit` takes fewer), which no training level can equal (harness/puzzles/
splits.py). The gold answer is the level's ref, so grading regenerates the level from it and
plays the reply's move list on a fresh state: correct means `solved`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from core.errors import MarsError
from harness.benchmarks.registry import Suite, benchmark
from harness.benchmarks.sources import Row
from harness.benchmarks.types import LoadResult, Sample, Verdict
from harness.puzzles import (
    format_actions,
    level_from_ref,
    make_level,
    new_state,
    parse_actions,
    rules_text,
)
from harness.puzzles.levels import environment

EVAL_LEVELS = 100
MOVES_INSTRUCTION = (
    "Think it through step by step. When you are done, write your whole move list on the final "
    "line, in this form: #### [U, R, D]"
)
GRID_INSTRUCTION = (
    "Think it through step by step. When you are done, write the completed grid on the final "
    "line as a list of rows, in this form: #### [[row 0 values], [row 1 values], ...]"
)


class PuzzleSuite(Suite):
    """Evaluation levels of one puzzle environment at fixed parameters; a subclass naming its
    `environment` takes that environment's generator version as its own."""

    kind = "puzzle"
    environment: ClassVar[str] = ""
    level_params: ClassVar[dict[str, Any]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.environment:
            cls.version = environment(cls.environment).version

    def load(self, data_dir: Path | None = None, limit: int | None = None) -> LoadResult:
        if limit is not None and limit < 1:
            raise MarsError(f"--limit must be a positive number of samples, got {limit}")
        count = EVAL_LEVELS if limit is None else min(limit, EVAL_LEVELS)
        samples = [self.level_sample("eval", index) for index in range(count)]
        return LoadResult(
            suite=self.name,
            version=self.version,
            samples=samples,
            source=f"procedural:{self.environment}:v{self.version}",
        )

    def builtin_source(self) -> tuple[str, int]:
        return f"procedural:{self.environment}:v{self.version} (generated levels)", EVAL_LEVELS

    def level_sample(self, split: Literal["train", "eval"], index: int) -> Sample:
        """Level `index` of `split` as a sample (the suite itself is the eval split; training
        poses the train split's levels the same way)."""
        level = make_level(self.environment, split, index, **self.level_params)
        state = new_state(level)
        return Sample(
            id=str(index),
            question=f"{rules_text(level)}\n\n{state.observation()}",
            gold=level.ref,
            metadata={"environment": level.ref},
        )

    def sample_from_local_row(self, row: Row, index: int) -> Sample:
        raise MarsError(f"{self.name} is generated, not read from files")

    def prompt(self, sample: Sample) -> str:
        instruction = GRID_INSTRUCTION if self.environment == "sudoku" else MOVES_INSTRUCTION
        return f"{sample.question.strip()}\n\n{instruction}"

    def extract(self, response: str, choices: list[str] | None = None) -> str | None:
        actions = parse_actions(self.environment, response)
        return None if actions is None else format_actions(self.environment, actions)

    def grade(self, response: str, gold: str, choices: list[str] | None = None) -> Verdict:
        level = level_from_ref(str(gold))
        if level.env != self.environment:
            raise MarsError(f"{self.name}: the gold {gold!r} is a {level.env} level")
        actions = parse_actions(self.environment, response)
        if actions is None:
            return Verdict(extracted=None, gold=level.ref, correct=False, extraction_failed=True)
        outcome = new_state(level).apply(actions)
        return Verdict(
            extracted=format_actions(self.environment, actions),
            gold=level.ref,
            correct=outcome.solved,
            extraction_failed=False,
        )


@benchmark("plan_path")
class PlanPath(PuzzleSuite):
    environment = "plan_path"
    level_params: ClassVar[dict[str, Any]] = {"size": 10}


@benchmark("plan_path_5x5")
class PlanPath5x5(PuzzleSuite):
    """The small grid of the CPU miniature."""

    environment = "plan_path"
    level_params: ClassVar[dict[str, Any]] = {"size": 5}


@benchmark("sokoban")
class Sokoban(PuzzleSuite):
    environment = "sokoban"
    level_params: ClassVar[dict[str, Any]] = {"size": 6, "boxes": 1}


@benchmark("sudoku")
class Sudoku(PuzzleSuite):
    environment = "sudoku"
    level_params: ClassVar[dict[str, Any]] = {"size": 4}


@benchmark("sudoku_9x9")
class Sudoku9x9(PuzzleSuite):
    environment = "sudoku"
    level_params: ClassVar[dict[str, Any]] = {"size": 9}
