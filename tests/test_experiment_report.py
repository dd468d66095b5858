"""The experiment report's answers to the file's questions, its tables of invalid replies and of
distinct self-play games, and the paper's headline questions it does not attempt; and the file's
`report:` entries checked in one line (by the schema, and by the dry run against the loops)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from experiment_testkit import arena_entry, arena_run, exploit_entry, write_curve, write_metrics

from core.errors import MarsError
from mars.orchestration.experiments import load_experiment
from mars.orchestration.experiments.check import check_experiment
from mars.orchestration.experiments.report import build_report

# Connect Four is an item of the loop with no figure yet (not reached, or failed)
EVALS = [
    "arena:tic_tac_toe:random:20",
    "arena:tic_tac_toe.v1:random:20",
    "exploit:leduc_poker:4",
    "arena:connect_four:random:20",
]
RANDOM: dict[str, Any] = {"opponent": "random"}
QUESTIONS: list[Any] = [
    {"question": "Does it carry to Leduc?",
     "answers": [{"part": "eval", "eval": "exploit-leduc_poker"}]},
    {"question": "Does Tic-Tac-Toe change, and its variant with it?", "answers": [
        {"part": "eval", "eval": "arena-tic_tac_toe-random", "seat": "first"},
        {"part": "eval", "eval": "arena-tic_tac_toe.v1-random", "seat": "first",
         "against": {"eval": "arena-tic_tac_toe-random", "step": "last"}},
        {"part": "eval", "eval": "arena-connect_four-random"}]},
    "An old file's question, with nothing to answer it?",
]  # fmt: skip


def _experiment(tmp_path: Path, **report: Any) -> Path:
    path = tmp_path / "e.yaml"
    parts = [
        {"name": name, "run": "train", "args": {"trainer": "local"}}
        for name in ("train", "train-varied", "train-old")
    ]
    parts.append(
        {"name": "eval", "run": "loop", "args": {"watch": "${part:train}", "once": True},
         "evals": EVALS}
    )  # fmt: skip
    report = {"questions": QUESTIONS, **report}
    path.write_text(yaml.safe_dump({"name": "e", "paper": "marshal", "parts": parts,
                                    "report": report}))  # fmt: skip
    return path


def _runs(root: Path) -> None:
    """A loop whose Tic-Tac-Toe moved (+50 as the first seat) while its variant and Leduc
    replies went mostly invalid; three training runs' metrics."""
    loop = root / "eval"
    arena_run(loop / "step_0-ttt", "tic_tac_toe", [False] * 20)
    arena_run(loop / "step_5-ttt", "tic_tac_toe", [True] * 10 + [False] * 10)
    arena_run(loop / "step_0-v1", "tic_tac_toe.v1", [False] * 20)
    arena_run(loop / "step_5-v1", "tic_tac_toe.v1", [False] * 20)
    ttt, v1 = "arena-tic_tac_toe-random", "arena-tic_tac_toe.v1-random"
    write_curve(loop, [
        {"step": 0, "evals": {
            ttt: arena_entry("step_0-ttt", "tic_tac_toe", 0.0, **RANDOM),
            v1: arena_entry("step_0-v1", "tic_tac_toe.v1", 0.0, **RANDOM),
            "exploit-leduc_poker": exploit_entry("leduc_poker", 2.0, invalid=0.16)}},
        {"step": 5, "evals": {
            ttt: arena_entry("step_5-ttt", "tic_tac_toe", 0.5, **RANDOM),
            v1: arena_entry("step_5-v1", "tic_tac_toe.v1", 0.0, invalid=0.6, **RANDOM),
            "exploit-leduc_poker": exploit_entry("leduc_poker", 3.0, invalid=0.04)}},
    ])  # fmt: skip
    steps = [(1, 29), (2, 10), (3, 26)]
    write_metrics(root / "train", [
        {"step": s, "episodes": 32, "selfplay/distinct_games": d,
         "selfplay/distinct_share": d / 32} for s, d in steps])  # fmt: skip
    write_metrics(root / "train-varied", [
        {"step": s, "episodes": 32, "selfplay/distinct_games": 20 + s,
         "selfplay/distinct_share": (20 + s) / 32} for s in (1, 2)])  # fmt: skip
    write_metrics(root / "train-old", [{"step": 1, "episodes": 32}])


def _section(text: str, title: str) -> str:
    return text.split(f"## {title}", 1)[1].split("\n## ", 1)[0]


def _line(text: str, *parts: str) -> str:
    return next(x for x in text.splitlines() if all(p in x for p in parts))


def test_each_question_is_answered_by_its_figures_with_intervals(tmp_path: Path) -> None:
    root = tmp_path / "exp"
    _runs(root)
    text = build_report(load_experiment(str(_experiment(tmp_path))), root)
    leduc = _line(text, "`eval` exploit-leduc_poker")
    assert "start 2.000 [1.980, 2.020] → step 5 3.000 [2.980, 3.020]" in leduc
    assert "change +1.000 [" in leduc and "] * (independent intervals)" in leduc
    # 16% invalid at the start: over the 10% target, said in words beside the figure
    assert "Invalid replies 16% → 4%: over 10%" in leduc and "not the play" in leduc
    ttt = _line(text, "`eval` arena-tic_tac_toe-random, normalised return (first seat)")
    assert "start 0.0 [-10.0, 10.0] → step 5 50.0 [40.0, 60.0]" in ttt
    assert "change +50.0 [" in ttt and "(paired bootstrap over episodes, n=20)" in ttt
    assert ttt.endswith("Invalid replies 0% → 0%.")  # under the target: no warning
    # the variant against its original, both trained: paired over the same seeds and seats
    variant = _line(text, "`eval` arena-tic_tac_toe.v1-random, normalised return (first seat)")
    assert (
        "arena-tic_tac_toe-random at step 5 50.0 [40.0, 60.0] → "
        "arena-tic_tac_toe.v1-random at step 5 0.0 [-10.0, 10.0]"
    ) in variant
    assert "difference -50.0 [" in variant and "n=20" in variant
    assert "Invalid replies 0% → 60%: over 10%" in variant
    missing = _line(text, "`eval` arena-connect_four-random")
    assert (
        "not answered yet" in missing and "has no evaluation arena-connect_four-random" in missing
    )
    lines = text.splitlines()
    bare = lines.index("- **Question:** An old file's question, with nothing to answer it?")
    assert "names no figure that answers it" in lines[bare + 1]


def test_the_report_flags_invalid_replies_and_repeated_self_play(tmp_path: Path) -> None:
    root = tmp_path / "exp"
    _runs(root)
    text = build_report(load_experiment(str(_experiment(tmp_path))), root)
    invalid = _section(text, "Valid play: invalid replies per game evaluation")
    assert "(target: at most 10%, at the start and after training)" in invalid
    row = _line(invalid, "| eval | tic_tac_toe | arena-tic_tac_toe-random | first |")
    assert "| 0% | 0% (step 5) |  |" in row  # within the target: no flag
    row = _line(invalid, "| arena-tic_tac_toe.v1-random | second |")
    assert "| 0% | 60% (step 5) | **over 10%** |" in row
    assert "| exploit-leduc_poker | — | 16% | 4% (step 5) | **over 10%** |" in invalid
    assert "3 of 5 rows over the target of 10% invalid replies" in invalid
    distinct = _section(text, "Self-play: distinct games per step")
    assert "| train | 3 | 0.31 (10 of 32 distinct at step 2) | 0.81 | **under 0.5** |" in distinct
    assert "| train-varied | 2 | 0.66 (21 of 32 distinct at step 1) | 0.67 |  |" in distinct
    assert "| train-old | — | not recorded" in distinct
    cannot = _section(text, "What this run cannot show")
    assert "train: self-play repeats its games (10 of 32 distinct at step 2, under 50%)" in cannot
    assert "train-varied" not in cannot


def test_the_headline_questions_not_attempted_are_a_section_of_their_own(tmp_path: Path) -> None:
    skipped = [{"question": "Generalist against specialists?", "why": "Two specialists only."},
               {"question": "Hanabi?", "why": "Not in the starts."}]  # fmt: skip
    path = _experiment(tmp_path, not_attempted=skipped)
    root = tmp_path / "exp"
    root.mkdir()
    text = build_report(load_experiment(str(path)), root)
    section = _section(text, "Headline questions of the MARSHAL paper not attempted")
    assert "- **Generalist against specialists?** Two specialists only." in section
    assert "- **Hanabi?** Not in the starts." in section
    assert text.index("not attempted") < text.index("## What this run cannot show")
    # no section when the file lists none
    plain = build_report(load_experiment(str(_experiment(tmp_path))), root)
    assert "not attempted" not in plain


@pytest.mark.parametrize(
    ("report", "message"),
    [
        ({"questions": [{"question": "q", "answers": [{"part": "train", "eval": "x"}]}]},
         "reads part 'train', which is not a loop"),
        ({"questions": [{"question": "q", "answers": [{"part": "nope", "eval": "x"}]}]},
         "names part 'nope', which the experiment lacks"),
        ({"questions": [{"question": "q", "answers": [
            {"part": "eval", "eval": "x", "step": "start"}]}]},
         "compares it with itself"),
        ({"not_attempted": [{"question": "q"}]}, "not_attempted.0.why"),
    ],
)  # fmt: skip
def test_a_bad_report_entry_is_one_line(tmp_path: Path, report: dict, message: str) -> None:
    path = _experiment(tmp_path)
    data = yaml.safe_load(path.read_text())
    data["report"] = report
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(MarsError, match=message) as caught:
        load_experiment(str(path))
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        ({"part": "eval", "eval": "exploit-leduc"},
         "unknown evaluation of part eval 'exploit-leduc' .did you mean 'exploit-leduc_poker'"),
        ({"part": "eval", "eval": "exploit-leduc_poker", "seat": "first"},
         "`seat` and `figure` are for arena evaluations"),
        ({"part": "eval", "eval": "exploit-leduc_poker",
          "against": {"eval": "arena-tic_tac_toe-random"}},
         r"exploit-leduc_poker \(exploit\) cannot be compared with arena-tic_tac_toe-random"),
    ],
)  # fmt: skip
def test_the_dry_run_checks_answers_against_the_loops_evaluations(
    tmp_path: Path, answer: dict, message: str
) -> None:
    path = _experiment(tmp_path, questions=[{"question": "q", "answers": [answer]}])
    with pytest.raises(MarsError, match=message):
        check_experiment(load_experiment(str(path)), tmp_path / "exp")
    assert check_experiment(load_experiment(str(_experiment(tmp_path))), tmp_path / "ok")


def _suite_loop(loop: Path, mas: str, correct: int, unreadable: float) -> None:
    """A loop whose trained checkpoint answered `correct` of 10 GSM8K questions through `mas`."""
    from dashboard import synthetic

    rows = []
    for step, right in ((0, 2), (5, correct)):
        run_dir = f"step_{step}-eval-gsm8k-{mas}"
        records = [synthetic.eval_record(i, correct=i < right) for i in range(10)]
        synthetic.write_eval_run(loop / run_dir, records, mas=mas)
        (loop / run_dir / "summary.json").write_text("{}")
        entry = {"kind": "eval", "suite": "gsm8k", "mas": mas, "run_dir": run_dir, "n": 10,
                 "accuracy": right / 10, "ci95": [right / 10 - 0.2, right / 10 + 0.2],
                 "extraction_failure_rate": unreadable if step else 0.0}  # fmt: skip
        rows.append({"step": step, "evals": {f"eval-gsm8k-{mas}": entry}})
    write_curve(loop, rows)


def test_a_suite_answer_against_another_arm_is_paired_over_questions(tmp_path: Path) -> None:
    parts = [{"name": "train", "run": "train", "args": {"trainer": "local"}}] + [
        {"name": f"eval-{mas}", "run": "loop", "args": {"watch": "${part:train}", "once": True},
         "evals": [f"eval:gsm8k:{mas}:10"]} for mas in ("mad", "single")
    ]  # fmt: skip
    answer = {
        "part": "eval-mad",
        "eval": "eval-gsm8k-mad",
        "against": {"part": "eval-single", "eval": "eval-gsm8k-single", "step": "last"},
    }
    path = tmp_path / "e.yaml"
    path.write_text(yaml.safe_dump({"name": "e", "parts": parts, "report": {
        "questions": [{"question": "Does the MAS beat the single agent?",
                       "answers": [answer]}]}}))  # fmt: skip
    experiment = load_experiment(str(path))
    assert check_experiment(experiment, tmp_path / "dry")  # the keys are the loops' own
    root = tmp_path / "exp"
    _suite_loop(root / "eval-mad", "mad", correct=7, unreadable=0.0)
    _suite_loop(root / "eval-single", "single", correct=3, unreadable=0.3)
    line = _line(build_report(experiment, root), "`eval-mad` eval-gsm8k-mad, accuracy %")
    assert "`eval-single` eval-gsm8k-single at step 5 30.0 [10.0, 50.0] → " in line
    assert "`eval-mad` eval-gsm8k-mad at step 5 70.0 [50.0, 90.0]" in line
    assert "difference +40.0 [" in line and "(paired bootstrap over questions, n=10)" in line
    assert "Unreadable answers 30% → 0%: over 10%" in line
    assert "about the answer format, not the solving." in line
