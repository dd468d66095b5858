"""The demo's before/after table: read from the loop's learning curve, intervals compared."""

from __future__ import annotations

from mars.orchestration.demo import before_after_rows, card_use_rows


def _exploit(value: float, low: float, high: float) -> dict:
    return {"kind": "exploit", "exploitability": value, "ci95": [low, high], "error": None}


def _arena(value: float, low: float, high: float) -> dict:
    seat = {"normalized_return": value, "normalized_return_ci": [low, high]}
    return {"kind": "arena", "seats": {"first": seat}, "error": None}


def _row(step: int, **evals: dict) -> dict:
    return {"step": step, "evals": evals}


def test_lower_exploitability_and_higher_score_without_overlap_are_better() -> None:
    curve = [
        _row(0, **{"exploit-kuhn_poker": _exploit(0.57, 0.48, 0.67)},
             **{"arena-mini_hanabi-self": _arena(12.0, 9.0, 15.0)}),
        _row(30, **{"exploit-kuhn_poker": _exploit(0.34, 0.33, 0.36)},
             **{"arena-mini_hanabi-self": _arena(55.1, 51.5, 58.8)}),
    ]  # fmt: skip
    rows = before_after_rows(curve)
    assert [(r[0].split()[0], r[3]) for r in rows] == [
        ("Kuhn", "better"),
        ("mini_hanabi", "better"),
    ]
    assert rows[0][1] == "0.570 [0.480, 0.670]" and rows[1][2] == "55.1 [51.5, 58.8]"


def test_overlapping_intervals_and_a_worse_end_are_said_plainly() -> None:
    curve = [
        _row(0, **{"exploit-kuhn_poker": _exploit(0.40, 0.35, 0.45)},
             **{"arena-mini_hanabi-self": _arena(30.0, 25.0, 35.0)}),
        _row(30, **{"exploit-kuhn_poker": _exploit(0.38, 0.33, 0.43)},
             **{"arena-mini_hanabi-self": _arena(10.0, 8.0, 12.0)}),
    ]  # fmt: skip
    assert [row[3] for row in before_after_rows(curve)] == ["overlapping", "worse"]


def test_an_evaluation_missing_at_the_end_gives_no_row() -> None:
    curve = [
        _row(0, **{"exploit-kuhn_poker": _exploit(0.40, 0.35, 0.45)}),
        _row(30, **{"exploit-kuhn_poker": {"kind": "exploit", "error": "server died"}}),
    ]
    assert before_after_rows(curve) == []


def test_the_card_use_table_lists_kuhn_states_in_card_order() -> None:
    start = {"K -": {"PASS": 0.5, "BET": 0.5}, "J -": {"PASS": 0.4, "BET": 0.6}}
    trained = {"K -": {"PASS": 0.1, "BET": 0.9}, "J -": {"PASS": 0.8, "BET": 0.2}}
    curve = [
        _row(0, **{"exploit-kuhn_poker": {**_exploit(0.4, 0.3, 0.5), "action_shares": start}}),
        _row(9, **{"exploit-kuhn_poker": {**_exploit(0.2, 0.1, 0.3), "action_shares": trained}}),
    ]
    assert card_use_rows(curve) == [("J -", "0.60", "0.20"), ("K -", "0.50", "0.90")]
    assert card_use_rows([_row(0), _row(9)]) == []
