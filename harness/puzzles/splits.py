"""Seeds and splits: each level comes from one `random.Random` seeded by its own identity
(environment, version, split, index, parameters), and belongs to the split its CONTENT hashes
to. The evaluation split keeps only levels whose content falls in the evaluation bucket and the
training split only the others, so no training level can equal an evaluation level, however
small the space of puzzles (the reference evaluates on training puzzles: docs/puzzles.md)."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping
from typing import Any

from core.errors import MarsError
from harness.puzzles.base import Generated, PuzzleEnv

EVAL_BUCKETS = 4  # one content hash in EVAL_BUCKETS belongs to the evaluation split
MAX_ATTEMPTS = 400  # generator attempts per level, failed ones and wrong-split ones together


def canonical_params(params: Mapping[str, Any]) -> str:
    """`a=1,b=0.22` in name order: the parameters as the seed and the ref spell them."""
    return ",".join(f"{name}={params[name]!r}" for name in sorted(params))


def level_seed(env: str, version: str, split: str, index: int, params: Mapping[str, Any]) -> int:
    identity = f"{env}|v{version}|{split}|{index}|{canonical_params(params)}"
    return int.from_bytes(hashlib.sha256(identity.encode()).digest()[:8], "big")


def content_split(env: str, content_key: str) -> str:
    """The split a puzzle's content belongs to."""
    digest = hashlib.sha256(f"{env}|{content_key}".encode()).digest()
    return "eval" if int.from_bytes(digest[:8], "big") % EVAL_BUCKETS == 0 else "train"


def content_digest(content_key: str) -> str:
    """A short fingerprint of a level's content, carried in its ref."""
    return hashlib.sha256(content_key.encode()).hexdigest()[:10]


def generate_in_split(
    env: PuzzleEnv, split: str, index: int, params: Mapping[str, Any]
) -> Generated:
    """The level `index` of `split`: attempts from one seeded stream until one is certified and
    its content belongs to `split` (bounded)."""
    rng = random.Random(level_seed(env.name, env.version, split, index, params))
    for _ in range(MAX_ATTEMPTS):
        made = env.generate(rng, params)
        if made is not None and content_split(env.name, made.content_key) == split:
            return made
    raise MarsError(
        f"{env.name}: no certified {split} level {index} with {canonical_params(params)} "
        f"after {MAX_ATTEMPTS} attempts; try other parameters"
    )
