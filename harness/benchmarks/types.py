"""The data that flows between a suite, the runner and the run store."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field


class Sample(BaseModel):
    """One benchmark question, normalised the same way whatever the source."""

    id: str
    question: str
    choices: list[str] | None = None  # option texts in display order (choice suites only)
    gold: str  # the reference answer; a letter for choice suites
    metadata: dict[str, Any] = Field(default_factory=dict)


class Verdict(BaseModel):
    """The grade of one response. A response with no usable answer is an extraction failure,
    which is counted apart from a wrong answer."""

    extracted: str | None
    gold: str
    correct: bool
    extraction_failed: bool


@dataclass
class LoadResult:
    """Samples in file order plus how they were obtained."""

    suite: str
    version: str
    samples: list[Sample]
    source: str  # e.g. "hub:openai/gsm8k[main]:test" or "local:/path/to/test.jsonl"
    skipped: int = 0  # malformed rows that were left out
    notes: list[str] = field(default_factory=list)  # e.g. why the hub was not used
    root: str | None = None  # a local file's root: "--data-dir", "$MARS_DATA_DIR", "cache"

    @property
    def origin(self) -> str:
        return describe_origin(self.source, self.root)

    def __len__(self) -> int:
        return len(self.samples)


def describe_origin(source: str, root: str | None) -> str:
    """Where samples came from, for people: the hub id, or the local file and which root it was
    found under ("--data-dir", "$MARS_DATA_DIR", "cache")."""
    return source if root is None else f"{source} (root: {root})"
