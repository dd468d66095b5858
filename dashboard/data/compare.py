"""Two eval runs sample by sample: the join on (suite, sample id, epoch), where they disagree,
and McNemar's exact test on the discordant pairs."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

KEY = ["suite", "sample_id", "epoch"]
A_ONLY = "A right, B wrong"
B_ONLY = "B right, A wrong"
BOTH_RIGHT = "both right"
BOTH_WRONG = "both wrong"
NOT_GRADED = "not graded"  # an error in either run: no grade to pair
OUTCOMES = (A_ONLY, B_ONLY, BOTH_RIGHT, BOTH_WRONG, NOT_GRADED)
PAIR_COLUMNS = [
    *KEY,
    "question",
    "gold",
    "outcome",
    "A",
    "B",
    "A extracted",
    "B extracted",
    "A tokens",
    "B tokens",
    "A calls",
    "B calls",
    "a_row",
    "b_row",
]


def mcnemar_exact_p(a_only: int, b_only: int) -> float:
    """Two-sided exact McNemar p-value: under "both runs are as good", each discordant pair is A's
    or B's with probability 1/2, so the smaller count is Binomial(a_only + b_only, 1/2); the p-value
    is twice its lower tail, at most 1. No discordant pair: 1."""
    n = a_only + b_only
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(a_only, b_only) + 1))
    return min(1.0, 2 * tail / 2**n)


@dataclass(frozen=True)
class PairedCounts:
    paired: int  # keys in both runs
    a_only: int
    b_only: int
    both_right: int
    both_wrong: int
    not_graded: int
    only_in_a: int  # keys one run has and the other has not (not paired)
    only_in_b: int

    @property
    def p_value(self) -> float:
        return mcnemar_exact_p(self.a_only, self.b_only)


def _grade(has_error: bool, correct: bool) -> str:
    return "error" if has_error else "right" if correct else "wrong"


def _one_per_key(frame: pd.DataFrame) -> pd.DataFrame:
    """The first graded record per key (else the first): a run file has one per key after a
    resume, but a run still being written may hold an errored line and its redo."""
    ordered = frame.sort_values(["has_error", "row"], kind="stable")
    return ordered.drop_duplicates(subset=KEY, keep="first")


def pair_samples(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """The eval rows (`eval_frame`) of runs A and B joined on (suite, sample id, epoch), one row
    per key both hold, with the outcome of the pair; `a_row`/`b_row` index each run's records."""
    if a.empty or b.empty:
        return pd.DataFrame(columns=PAIR_COLUMNS)
    joined = _one_per_key(a).merge(_one_per_key(b), on=KEY, suffixes=("_a", "_b"))
    grade_a = [
        _grade(e, c) for e, c in zip(joined["has_error_a"], joined["correct_a"], strict=True)
    ]
    grade_b = [
        _grade(e, c) for e, c in zip(joined["has_error_b"], joined["correct_b"], strict=True)
    ]
    outcomes = []
    for x, y in zip(grade_a, grade_b, strict=True):
        if "error" in (x, y):
            outcomes.append(NOT_GRADED)
        elif x == y:
            outcomes.append(BOTH_RIGHT if x == "right" else BOTH_WRONG)
        else:
            outcomes.append(A_ONLY if x == "right" else B_ONLY)
    table = pd.DataFrame(
        {
            **{k: joined[k] for k in KEY},
            "question": joined["question_a"].where(
                joined["question_a"].notna(), joined["question_b"]
            ),
            "gold": joined["gold_a"],
            "outcome": outcomes,
            "A": grade_a,
            "B": grade_b,
            "A extracted": joined["extracted_a"],
            "B extracted": joined["extracted_b"],
            "A tokens": joined["tokens_a"],
            "B tokens": joined["tokens_b"],
            "A calls": joined["llm_calls_a"],
            "B calls": joined["llm_calls_b"],
            "a_row": joined["row_a"],
            "b_row": joined["row_b"],
        },
        columns=PAIR_COLUMNS,
    )
    return table.sort_values(KEY, kind="stable").reset_index(drop=True)


def paired_counts(pairs: pd.DataFrame, a: pd.DataFrame, b: pd.DataFrame) -> PairedCounts:
    counts = pairs["outcome"].value_counts()
    keys_a = set(map(tuple, a[KEY].itertuples(index=False)))
    keys_b = set(map(tuple, b[KEY].itertuples(index=False)))
    return PairedCounts(
        paired=len(pairs),
        a_only=int(counts.get(A_ONLY, 0)),
        b_only=int(counts.get(B_ONLY, 0)),
        both_right=int(counts.get(BOTH_RIGHT, 0)),
        both_wrong=int(counts.get(BOTH_WRONG, 0)),
        not_graded=int(counts.get(NOT_GRADED, 0)),
        only_in_a=len(keys_a - keys_b),
        only_in_b=len(keys_b - keys_a),
    )
