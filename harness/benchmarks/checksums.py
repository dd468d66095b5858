"""The benchmark test files as the project knows them: sha256, size and row count of each file.

Computed from the project's reference copies of the seven reasoning test sets, byte-for-byte
copies of public files whose source repository, path and commit are in docs/references.md §13
(the sha256 values below equal the ones listed there; docs/benchmarks.md, "Checksums").
`mars data verify` checks local files against them.

To record another file: its `sha256sum`, its size in bytes and the rows `mars data list` counts.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RecordedFile:
    suite: str
    relative_path: str  # under a data root
    sha256: str
    size: int  # bytes
    rows: int  # JSON Lines: non-blank lines; CSV: records after the header


RECORDED_FILES: tuple[RecordedFile, ...] = (
    RecordedFile(
        "aime24",
        "aime24/test.jsonl",
        "af2b8bd2aa911b6333ad0df32f3ca05c7ae8ed10f1731f4372c8ae26990bf7ac",
        156944,
        30,
    ),
    RecordedFile(
        "amc23",
        "amc23/test.jsonl",
        "43707e1ca784602d8479de24ee8ce36609dbebc46dd152b0b12a46611aa898a4",
        27631,
        40,
    ),
    RecordedFile(
        "aqua",
        "aqua/test.json",
        "de41581881ef95c5588c44ddc701c77fd480839241dd422a0d181262af24520c",
        130192,
        254,
    ),
    RecordedFile(
        "gpqa_diamond",
        "gpqa_diamond/gpqa_diamond.csv",
        "41d1213cd7a4998605a26c2798500652572007161b3a92817ba46b35befcd305",
        1373492,
        198,
    ),
    RecordedFile(
        "gsm8k",
        "gsm8k/test.jsonl",
        "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14",
        749738,
        1319,
    ),
    RecordedFile(
        "math500",
        "math500/test.jsonl",
        "35dc41080a3680858b27fa7e0533d2d547825316fc5dafe5d316f4ccc5a06132",
        446564,
        500,
    ),
    RecordedFile(
        "mmlu_stem",
        "mmlu_stem/test.jsonl",
        "fd7c16f96067d285638abb5aaef9cd8a063b11454e14cb64df93141a58691478",
        1024981,
        3018,
    ),
)


def recorded_file(suite: str) -> RecordedFile | None:
    return next((f for f in RECORDED_FILES if f.suite == suite), None)
