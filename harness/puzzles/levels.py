"""The environments by name; levels made, named and read back; fresh states; rules."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from core.errors import MarsError
from core.names import unknown_name
from harness.puzzles.base import SPLITS, Level, PuzzleEnv, PuzzleState, Split
from harness.puzzles.plan_path import PlanPathEnv
from harness.puzzles.sokoban import SokobanEnv
from harness.puzzles.splits import canonical_params, content_digest, generate_in_split
from harness.puzzles.sudoku import SudokuEnv

_ENVS: dict[str, PuzzleEnv] = {env.name: env for env in (PlanPathEnv(), SokobanEnv(), SudokuEnv())}
ENVIRONMENTS: tuple[str, ...] = tuple(_ENVS)


def environment(name: object) -> PuzzleEnv:
    env = _ENVS.get(name) if isinstance(name, str) else None
    if env is None:
        raise MarsError(unknown_name("puzzle environment", str(name), ENVIRONMENTS))
    return env


def make_level(env: str, split: Split, index: int, **params: Any) -> Level:
    """Level `index` of `split` ("train" or "eval"): the same arguments always give the same
    level. MarsError on an unknown environment, split or parameter, or a bad value."""
    puzzle_env = environment(env)
    if split not in SPLITS:
        raise MarsError(f"{env}: unknown split {split!r}; use train or eval")
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise MarsError(f"{env}: a level index is a whole number >= 0, got {index!r}")
    checked = puzzle_env.check_params(params)
    return _make(env, split, index, tuple(checked.items()))


@lru_cache(maxsize=2048)
def _make(env: str, split: str, index: int, params: tuple[tuple[str, Any], ...]) -> Level:
    puzzle_env = _ENVS[env]
    values = dict(params)
    made = generate_in_split(puzzle_env, split, index, values)
    ref = ":".join(
        (
            env,
            f"v{puzzle_env.version}",
            split,
            str(index),
            canonical_params(values),
            content_digest(made.content_key),
        )
    )
    return Level(
        env=env,
        version=puzzle_env.version,
        split=split,
        index=index,
        params=values,
        ref=ref,
        solution=made.solution,
        optimal_length=made.optimal_length,
        layout=made.layout,
    )


def level_from_ref(ref: str) -> Level:
    """The level a ref names (`env:vVERSION:split:index:params:digest`, one line); MarsError
    when it is malformed, names another generator version, or the content differs."""
    if not isinstance(ref, str):
        raise MarsError(f"a puzzle ref is a string, got {ref!r}")
    parts = ref.strip().split(":")
    if len(parts) != 6:
        raise MarsError(
            f"malformed puzzle ref {ref!r}: expected env:vVERSION:split:index:params:digest"
        )
    env, version, split, index_text, params_text, _digest = parts
    puzzle_env = environment(env)
    if version != f"v{puzzle_env.version}":
        raise MarsError(
            f"puzzle ref {ref!r} comes from {env} generator {version}; this build has "
            f"v{puzzle_env.version}"
        )
    if not (index_text.isascii() and index_text.isdecimal()):
        raise MarsError(f"malformed puzzle ref {ref!r}: the index is not a whole number")
    params: dict[str, Any] = {}
    for item in filter(None, params_text.split(",")):
        name, sep, value = item.partition("=")
        spec = puzzle_env.params.get(name)
        if not sep or spec is None:
            raise MarsError(f"malformed puzzle ref {ref!r}: bad parameter {item!r}")
        try:
            params[name] = int(value) if isinstance(spec.default, int) else float(value)
        except ValueError:
            raise MarsError(f"malformed puzzle ref {ref!r}: bad parameter {item!r}") from None
    level = make_level(env, split, int(index_text), **params)
    if level.ref != ref.strip():
        raise MarsError(
            f"puzzle ref {ref!r} does not match the level this build generates ({level.ref}): "
            "the generator changed without a version bump, or the ref was edited"
        )
    return level


def new_state(level: Level) -> PuzzleState:
    return environment(level.env).new_state(level)


def rules_text(level: Level) -> str:
    return environment(level.env).rules_text(level)
