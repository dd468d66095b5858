"""The papers' own numbers, for the report's paper column, each with its source in
docs/references.md (which gives the paper and table it was read from)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PaperFigure:
    before: float
    after: float
    source: str  # the section of docs/references.md
    what: str  # whose numbers: model and arm

    def text(self) -> str:
        return f"{self.before:.1f} → {self.after:.1f} ({self.after - self.before:+.1f})"


_GAMES = "MARSHAL: Qwen3-4B → generalist, normalised return"
# (game, opponent kind, seat) -> figure; MARSHAL §3.1, opponents as §2.8 names them (MCTS in the
# board games, CFR in Kuhn, a Nash policy in Leduc, the model itself in Hanabi).
MARSHAL_GAMES: dict[tuple[str, str, str], PaperFigure] = {
    (game, opponent, seat): PaperFigure(before, after, "references.md §3.1", _GAMES)
    for game, opponent, rows in (
        ("tic_tac_toe", "mcts", {"first": (70.2, 77.2), "second": (18.6, 29.1)}),
        ("kuhn_poker", "cfr", {"first": (62.3, 76.2), "second": (3.9, 3.9)}),
        ("mini_hanabi", "self", {"first": (30.0, 54.3)}),
        ("connect_four", "mcts", {"first": (26.9, 28.9), "second": (4.4, 11.0)}),
        ("leduc_poker", "nash", {"first": (47.7, 61.7), "second": (28.7, 47.4)}),
        ("simple_hanabi", "self", {"first": (13.9, 36.8)}),
    )
    for seat, (before, after) in rows.items()
}

_SUITES = "MARSHAL: Qwen3-4B → generalist in the MAS, accuracy %"
# (suite, mas) -> figure; MARSHAL §3.2 (MASLab's protocols, §5).
MARSHAL_SUITES: dict[tuple[str, str], PaperFigure] = {
    (suite, mas): PaperFigure(before, after, "references.md §3.2", _SUITES)
    for mas, rows in (
        (
            "mad",
            {
                "math500": (90.2, 92.8),
                "gsm8k": (95.9, 95.6),
                "aqua": (80.7, 83.9),
                "aime24": (40.0, 46.7),
                "amc23": (75.0, 80.0),
                "mmlu_stem": (87.4, 87.4),
                "gpqa_diamond": (37.9, 45.5),
            },
        ),
        (
            "autogen",
            {
                "math500": (93.4, 95.2),
                "gsm8k": (94.7, 94.5),
                "aqua": (85.0, 86.6),
                "aime24": (56.7, 66.7),
                "amc23": (87.5, 92.5),
                "mmlu_stem": (89.2, 89.5),
                "gpqa_diamond": (47.5, 50.0),
            },
        ),
    )
    for suite, (before, after) in rows.items()
}

# MAST category key (harness.failures.taxonomy) -> figure; MARSHAL §3.3 (GPQA-Diamond, MAD).
MARSHAL_FAILURES_ON = ("gpqa_diamond", "mad")
MARSHAL_FAILURES: dict[str, PaperFigure] = {
    key: PaperFigure(
        before, after, "references.md §3.3", "MARSHAL: Qwen3-4B → generalist, % of transcripts"
    )
    for key, (before, after) in {
        "misalignment": (55.2, 43.7),
        "specification": (29.5, 13.9),
        "verification": (70.7, 67.4),
    }.items()
}

# Stronger-MAS §12.5: accuracy % of single / single + GRPO / MAS untrained / AT-GRPO shared /
# AT-GRPO per role, by model and suite (this project's suite names).
STRONGER_MAS_ARMS = ("single", "single_grpo", "mas", "mas_shared", "mas_per_role")
STRONGER_MAS: dict[tuple[str, str], tuple[float, ...]] = {
    ("Qwen3-1.7B", "sudoku"): (7, 29, 69, 99, 99),
    ("Qwen3-1.7B", "sokoban"): (0, 3, 0, 10, 11.5),
    ("Qwen3-1.7B", "plan_path"): (5, 11, 10, 96, 97),
    ("Qwen3-1.7B", "livecodebench"): (11.6, 18.8, 19.0, 20.9, 24.0),
    ("Qwen3-1.7B", "apps"): (16.2, 17.0, 16.6, 17.6, 18.6),
    ("Qwen3-1.7B", "codecontests"): (3.6, 3.0, 3.6, 4.8, 7.8),
    ("Qwen3-8B", "sudoku"): (48, 54, 72, 99.5, 99),
    ("Qwen3-8B", "sokoban"): (9, 14, 16, 96, 98),
    ("Qwen3-8B", "plan_path"): (12, 47, 71, 93, 96),
    ("Qwen3-8B", "livecodebench"): (22.8, 25.7, 28.0, 30.3, 33.1),
    ("Qwen3-8B", "apps"): (30.2, 37.0, 44.4, 45.8, 46.5),
    ("Qwen3-8B", "codecontests"): (15.75, 12.1, 17.6, 18.1, 18.1),
}
STRONGER_MAS_SOURCE = "references.md §12.5"


def opponent_kind(opponent: str) -> str:
    """`mcts:100` -> mcts, `cfr:1000` -> cfr: the paper names the kind of opponent."""
    return opponent.split(":")[0].strip().lower()


def marshal_game(game: str, opponent: str, seat: str) -> PaperFigure | None:
    return MARSHAL_GAMES.get((game, opponent_kind(opponent), seat))


def stronger_mas_figure(model: str, suite: str, arm: str) -> float | None:
    """The paper's accuracy of `arm` on `suite` at `model` (a hub id or its last part)."""
    row = STRONGER_MAS.get((model.rsplit("/", 1)[-1], suite))
    if row is None or arm not in STRONGER_MAS_ARMS:
        return None
    return row[STRONGER_MAS_ARMS.index(arm)]
