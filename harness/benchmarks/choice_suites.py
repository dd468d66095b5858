"""Multiple-choice suites: AQUA-RAT (A-E), GPQA-Diamond (A-D, shuffled), MMLU-STEM (A-D)."""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from pathlib import Path

from harness.benchmarks.prompts import LETTERS
from harness.benchmarks.registry import ChoiceSuite, MalformedRow, benchmark, required_text
from harness.benchmarks.sources import HubSource, LocalSource, Row
from harness.benchmarks.types import LoadResult, Sample

MMLU_STEM_SUBJECTS = frozenset(
    {
        "abstract_algebra",
        "astronomy",
        "college_biology",
        "college_chemistry",
        "college_computer_science",
        "college_mathematics",
        "college_physics",
        "computer_security",
        "conceptual_physics",
        "electrical_engineering",
        "elementary_mathematics",
        "high_school_biology",
        "high_school_chemistry",
        "high_school_computer_science",
        "high_school_mathematics",
        "high_school_physics",
        "high_school_statistics",
        "machine_learning",
    }
)

GPQA_SHUFFLE_SALT = "mars-gpqa-shuffle-v1"
_AQUA_OPTION = re.compile(r"\s*(?P<letter>[A-E])\s*\)\s*(?P<text>.*)", re.DOTALL)


def shuffled_order(sample_id: str, count: int, salt: str = GPQA_SHUFFLE_SALT) -> list[int]:
    """A permutation of range(count) fixed by the sample id: positions sorted by a SHA-256 key, so
    it is the same in every process, Python version and platform."""

    def key(position: int) -> bytes:
        return hashlib.sha256(f"{salt}:{sample_id}:{position}".encode()).digest()

    return sorted(range(count), key=key)


def string_list(value: object, expected: int) -> list[str]:
    if not isinstance(value, list) or len(value) != expected:
        raise MalformedRow(f"expected a list of {expected} options")
    if not all(isinstance(item, str) for item in value):
        raise MalformedRow("options must be strings")
    return [item.strip() for item in value]


@benchmark("aqua")
class AQUA(ChoiceSuite):
    version = "1.1"
    num_choices = 5
    hub = HubSource("deepmind/aqua_rat", split="test", config="raw")
    local = LocalSource("aqua/test.json", "jsonl")  # JSON Lines despite the extension

    def sample_from_local_row(self, row: Row, index: int) -> Sample:
        choices: list[str] = []
        for position, option in enumerate(string_list(row.get("options"), self.num_choices)):
            match = _AQUA_OPTION.fullmatch(option)
            if not match or match.group("letter") != LETTERS[position]:
                raise MalformedRow(f"option {position} is not lettered {LETTERS[position]}")
            choices.append(match.group("text").strip())
        gold = required_text(row, "correct").strip().upper()
        if gold not in LETTERS[: self.num_choices]:
            raise MalformedRow(f"gold letter {gold!r} out of range")
        return Sample(
            id=str(index), question=required_text(row, "question"), choices=choices, gold=gold
        )


@benchmark("gpqa_diamond")
class GPQADiamond(ChoiceSuite):
    version = "1.1"
    num_choices = 4
    hub = HubSource("Idavidrein/gpqa", split="train", config="gpqa_diamond")
    local = LocalSource("gpqa_diamond/gpqa_diamond.csv", "csv")

    def sample_from_local_row(self, row: Row, index: int) -> Sample:
        # The CSV always puts the right answer first; the shuffle below is what makes the gold
        # letter vary.
        sample_id = required_text(row, "Record ID").strip()
        options = [
            required_text(row, column).strip()
            for column in (
                "Correct Answer",
                "Incorrect Answer 1",
                "Incorrect Answer 2",
                "Incorrect Answer 3",
            )
        ]
        order = shuffled_order(sample_id, len(options))
        return Sample(
            id=sample_id,
            question=required_text(row, "Question").strip(),
            choices=[options[position] for position in order],
            gold=LETTERS[order.index(0)],
            metadata={
                "domain": row.get("High-level domain"),
                "subdomain": row.get("Subdomain"),
            },
        )


@benchmark("mmlu_stem")
class MMLUStem(ChoiceSuite):
    version = "1.1"
    num_choices = 4
    hub = HubSource(
        "cais/mmlu",
        split="test",
        config="all",
        keep=lambda row: row["subject"] in MMLU_STEM_SUBJECTS,
    )
    local = LocalSource("mmlu_stem/test.jsonl", "jsonl")

    def sample_from_local_row(self, row: Row, index: int) -> Sample:
        subject = row.get("type") or row.get("subject")
        if subject not in MMLU_STEM_SUBJECTS:
            raise MalformedRow(f"not a STEM subject: {subject!r}")
        answer = row.get("answer")
        if isinstance(answer, bool) or not isinstance(answer, int):
            raise MalformedRow("answer must be a 0-based option index")
        if not 0 <= answer < self.num_choices:
            raise MalformedRow(f"answer index {answer} out of range")
        return Sample(
            id=str(index),
            question=required_text(row, "question"),
            choices=string_list(row.get("choices"), self.num_choices),
            gold=LETTERS[answer],
            metadata={"subject": subject},
        )

    def load(self, data_dir: Path | None = None, limit: int | None = None) -> LoadResult:
        # Ids are "<subject>/<n-th question of that subject>", which the hub's subject-sorted
        # order and the local file's grouped order share, unlike a global row index.
        result = super().load(data_dir, limit)
        seen: Counter[str] = Counter()
        for sample in result.samples:
            subject = str(sample.metadata["subject"])
            sample.id = f"{subject}/{seen[subject]}"
            seen[subject] += 1
        return result
