"""`mars experiment`: the file format, the dry run of the shipped experiments, the runner's
resume, skip, retry and block rules, and a real run of two bot-only parts."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from experiment_testkit import arena_entry, arena_run, exploit_entry, write_curve

from core.errors import MarsError
from mars.orchestration.experiments import load_experiment, recipe_names, run_experiment
from mars.orchestration.experiments.check import check_experiment
from mars.orchestration.experiments.parts import resolve_parts
from mars.orchestration.experiments.spec import parse_sets

SHIPPED = ("marshal", "marshal-mini", "stronger-mas", "stronger-mas-mini")


def _check(name: str, root: Path, **sets: object) -> list[str]:
    return check_experiment(load_experiment(name, dict(sets)), root)


def test_the_four_experiments_are_shipped() -> None:
    assert set(SHIPPED) <= set(recipe_names())


@pytest.mark.parametrize("name", SHIPPED)
def test_each_shipped_experiment_passes_its_dry_run(name: str, tmp_path: Path) -> None:
    lines = _check(name, tmp_path / name)
    assert len(lines) == len(load_experiment(name).parts)
    assert not (tmp_path / name).exists()  # a dry run writes nothing


def test_the_mini_answers_its_questions_with_held_out_games_and_variants(tmp_path: Path) -> None:
    experiment = load_experiment("marshal-mini")
    evals = " ".join(str(e) for p in experiment.parts for e in p.evals or [])
    for item in ("exploit:leduc_poker", "arena:connect_four:random", "kuhn_poker.v1",
                 "tic_tac_toe.v1", "eval:gsm8k:mad"):  # fmt: skip
        assert item in evals
    trained = {p.config["games"][0] for p in experiment.parts if p.run == "train"}
    assert trained == {"kuhn_poker", "tic_tac_toe"}


def test_the_mini_starts_one_model_per_question_taught_by_strong_teachers() -> None:
    from games.spec import get_game
    from train_backend.pretrain.recipe import PretrainSettings

    experiment = load_experiment("marshal-mini")
    starts = {
        n: PretrainSettings.model_validate(experiment.start_recipe(n)) for n in ("poker", "board")
    }
    assert set(starts["poker"].games) == {"kuhn_poker", "leduc_poker"}
    assert set(starts["board"].games) == {"tic_tac_toe", "connect_four"}
    for settings in starts.values():
        assert set(settings.reply_teachers) == set(settings.games)  # no fixed rule left
        for name in settings.games:
            assert get_game(name).variant_of is None  # the variants are held out of both
    assert {t.policy.split(":")[0] for t in starts["poker"].reply_teachers.values()} == {"cfr"}
    assert {t.policy.split(":")[0] for t in starts["board"].reply_teachers.values()} == {"mcts"}
    # Each question trains on one game of its start and evaluates the other from it.
    models = {
        p.name: (p.config or {}).get("model") or p.args.get("baseline") for p in experiment.parts
    }
    assert models["train-kuhn"] == models["eval-kuhn"] == "${model:poker}"
    assert models["train-ttt"] == models["eval-ttt"] == "${model:board}"


def test_variables_are_substituted_with_their_types(tmp_path: Path) -> None:
    experiment = load_experiment("marshal-mini", parse_sets(["kuhn_steps=7"]))
    parts = {r.part.name: r for r in resolve_parts(experiment, tmp_path, build=False)}
    assert parts["train-kuhn"].config["steps"] == 7  # an int, not "7"
    assert parts["failures-mad-trained"].argv[1] == str(
        tmp_path / "eval-kuhn/step_7-eval-gsm8k-mad"
    )
    assert str(tmp_path / "train-kuhn") in parts["eval-kuhn"].argv


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"parts": [{"name": "a", "run": "arena", "args": {"x": "${part:b}"}}]},
         "not an earlier part"),
        ({"parts": [{"name": "a", "run": "tran"}]}, "did you mean 'train'"),
        ({"parts": [{"name": "a", "run": "arena", "args": {"run_dir": "x"}}]}, "drop it"),
        ({"parts": [{"name": "a", "run": "failures"}]}, "needs `target`"),
        ({"parts": [{"name": "a", "run": "arena"}], "report": {"ablations": [
            {"label": "x", "part": "nope"}]}}, "lacks"),
    ],
)  # fmt: skip
def test_a_bad_experiment_is_one_line(tmp_path: Path, change: dict, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"name": "bad", **change}))
    with pytest.raises(MarsError, match=message) as info:
        load_experiment(str(path))
    assert "\n" not in str(info.value)


def test_unknown_names_are_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(MarsError, match="did you mean 'marshal-mini'"):
        load_experiment("marshal-mni")
    with pytest.raises(MarsError, match="unknown variable of marshal-mini 'kuhn_step'"):
        load_experiment("marshal-mini", {"kuhn_step": 3})
    path = tmp_path / "e.yaml"
    path.write_text(yaml.safe_dump({"name": "e", "parts": [
        {"name": "loop", "run": "loop", "args": {"watch": "x", "once": True},
         "evals": ["arena:tic_tac_tow:random:3"]}]}))  # fmt: skip
    with pytest.raises(MarsError, match=r"part loop: .*tic_tac_tow"):
        _check(str(path), tmp_path / "e")
    path.write_text(yaml.safe_dump({"name": "e", "parts": [
        {"name": "a", "run": "arena", "args": {"game": "tic_tac_toe", "bogus": 1}}]}))  # fmt: skip
    with pytest.raises(MarsError, match=r"part a: .*(?i:no such option)"):
        _check(str(path), tmp_path / "e")


def _tiny_experiment(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump({
        "name": "tiny",
        "parts": [
            {"name": "arena", "run": "arena", "args": {
                "game": "tic_tac_toe", "player": "random", "opponent": "random",
                "episodes": 2, "quiet": True}},
            {"name": "exploit", "run": "exploitability", "args": {
                "game": "kuhn_poker", "player": "nash", "bootstrap": 0}},
        ],
    }))  # fmt: skip
    return path


def test_a_real_run_then_a_rerun_that_skips_and_resumes(tmp_path: Path) -> None:
    path = _tiny_experiment(tmp_path)
    experiment = load_experiment(str(path))
    root = tmp_path / "exp"
    outcome = run_experiment(experiment, root, source=path, log=lambda _: None)
    assert [p.status for p in outcome.parts] == ["completed", "completed"]
    summary = json.loads((root / "exploit" / "summary.json").read_text())
    assert summary["exploitability"] < 0.01  # the Nash bot
    state = json.loads((root / "experiment.json").read_text())
    assert state["parts"]["arena"]["status"] == "completed"

    from mars.orchestration.experiments.report import report_folder

    report = report_folder(root)  # what `mars report EXP` prints
    assert (
        report is not None and "| exploit | `mars exploitability` | exploitability 0.000" in report
    )

    again = run_experiment(experiment, root, source=path, log=lambda _: None)
    assert [p.status for p in again.parts] == ["done", "done"]

    run_file = root / "arena" / "run.json"  # an interrupted part: rerun, the command resumes
    info = json.loads(run_file.read_text())
    run_file.write_text(json.dumps({**info, "status": "interrupted"}))
    third = run_experiment(experiment, root, source=path, log=lambda _: None)
    assert [p.status for p in third.parts] == ["completed", "done"]


def test_a_failing_part_is_retried_a_bounded_number_of_times_and_blocks_its_readers(
    tmp_path: Path,
) -> None:
    path = tmp_path / "e.yaml"
    path.write_text(yaml.safe_dump({"name": "e", "parts": [
        {"name": "train", "run": "train", "retries": 2, "args": {"trainer": "local"}},
        {"name": "loop", "run": "loop", "args": {"watch": "${part:train}", "once": True},
         "evals": ["arena:tic_tac_toe:random:2"]},
        {"name": "other", "run": "arena", "args": {"game": "tic_tac_toe"}},
    ]}))  # fmt: skip
    calls: list[list[str]] = []

    def fake(command: list[str], log: Path, timeout: float | None) -> int:
        calls.append(command)
        return 3 if command[3] == "train" else 0

    outcome = run_experiment(
        load_experiment(str(path)), tmp_path / "exp", source=path, log=lambda _: None, runner=fake
    )
    assert [p.status for p in outcome.parts] == ["failed", "blocked", "completed"]
    assert sum(1 for c in calls if c[3] == "train") == 3  # the first try and two retries
    assert calls[0][:3] == [sys.executable, "-m", "mars"]
    assert outcome.failed == ["train", "loop"]


def test_bad_input_is_not_retried(tmp_path: Path) -> None:
    path = _tiny_experiment(tmp_path)
    calls = []

    def fake(command: list[str], log: Path, timeout: float | None) -> int:
        calls.append(command)
        return 2

    outcome = run_experiment(
        load_experiment(str(path)), tmp_path / "exp", source=path, log=lambda _: None, runner=fake
    )
    assert len(calls) == 2 and outcome.failed == ["arena", "exploit"]


def test_the_report_pairs_episodes_cites_the_paper_and_sets_variants_side_by_side(
    tmp_path: Path,
) -> None:
    from mars.orchestration.experiments.report import build_report, report_folder

    path = tmp_path / "e.yaml"
    path.write_text(yaml.safe_dump({"name": "e", "paper": "marshal", "parts": [
        {"name": "train", "run": "train", "args": {"trainer": "local"}},
        {"name": "eval", "run": "loop", "args": {"watch": "${part:train}", "once": True},
         "evals": ["arena:kuhn_poker:cfr:1000:20"]},
    ], "report": {"ablations": [{"label": "start", "part": "eval", "step": "start"},
                                {"label": "trained", "part": "eval"}]},
       "notes": ["tiny model"]}))  # fmt: skip
    experiment = load_experiment(str(path))
    root = tmp_path / "exp"
    loop = root / "eval"
    arena_run(loop / "step_0-arena", "kuhn_poker", [False] * 20)
    arena_run(loop / "step_5-arena", "kuhn_poker", [True] * 10 + [False] * 10)
    arena_run(loop / "step_0-arena-v1", "kuhn_poker.v1", [False] * 20)
    arena_run(loop / "step_5-arena-v1", "kuhn_poker.v1", [False] * 20)
    rows = [
        {"step": 0, "evals": {
            "a": arena_entry("step_0-arena", "kuhn_poker", 0.0),
            "b": arena_entry("step_0-arena-v1", "kuhn_poker.v1", 0.0),
            "x": exploit_entry("leduc_poker", 2.0)}},
        {"step": 5, "evals": {
            "a": arena_entry("step_5-arena", "kuhn_poker", 0.5),
            "b": arena_entry("step_5-arena-v1", "kuhn_poker.v1", 0.0),
            "x": exploit_entry("leduc_poker", 1.5)}},
    ]  # fmt: skip
    write_curve(loop, rows)
    text = build_report(experiment, root)
    # Kuhn, first seat, paired over 20 episodes: half of them turn from -1 to +1, i.e. +25 on
    # the normalised scale (Kuhn's returns span [-2, 2]); the paper's 62.3 -> 76.2 beside it
    line = next(
        x for x in text.splitlines() if x.startswith("| eval | kuhn_poker | ") and "first" in x
    )
    assert (
        "+25.0 [" in line
        and "(n=20)" in line
        and "62.3 → 76.2 (+13.9) (references.md §3.1)" in line
    )
    assert "*" in line  # the interval excludes 0
    held_out = next(x for x in text.splitlines() if "| leduc_poker | yes |" in x)
    assert "-0.500 [" in held_out and "*" in held_out
    variants = next(x for x in text.splitlines() if "| arena vs cfr:1000, first seat |" in x)
    assert "kuhn_poker: 0.0 → 50.0" in variants and "kuhn_poker.v1: 0.0 → 0.0" in variants
    assert "| start | start |" in text and "| trained | step 5 |" in text
    assert "- tiny model" in text
    assert report_folder(root) is None  # no experiment.json yet: not an experiment folder


def _with_usage(record: dict, tokens: int, calls: int) -> dict:
    usage = {"prompt_tokens": tokens - 10, "completion_tokens": 10}
    return {**record, "metrics": {"llm_calls": calls, "tokens_per_agent": {"a": usage}}}


def test_the_report_sets_each_mas_beside_its_compute_matched_single_agent(tmp_path: Path) -> None:
    from core.runstore import RunDir
    from dashboard import synthetic
    from harness.compute_match import record_decision
    from mars.orchestration.experiments.report import build_report

    path = tmp_path / "e.yaml"
    path.write_text(yaml.safe_dump({"name": "e", "parts": [
        {"name": "mad", "run": "eval", "args": {"suite": "gsm8k", "mas": "mad"}},
        {"name": "match", "run": "eval", "args": {"suite": "gsm8k",
                                                  "match_compute": "${part:mad}"}},
    ]}))  # fmt: skip
    root = tmp_path / "exp"
    mad = [_with_usage(synthetic.eval_record(i, correct=i < 3), 900, 6) for i in range(10)]
    synthetic.write_eval_run(root / "mad", mad, mas="mad")
    single = [
        {**_with_usage(synthetic.eval_record(i, correct=i < 5 or e == 0), 300, 1), "epoch": e}
        for i in range(10)
        for e in range(3)
    ]
    synthetic.write_eval_run(root / "match", single, mas="single")
    for name in ("mad", "match"):
        (root / name / "summary.json").write_text("{}")
    decision = {"run": str(root / "mad"), "mas": "mad", "model": "tiny", "suites": {"gsm8k": {
        "mas_tokens_per_question": 900.0, "mas_completion_tokens_per_question": 10.0,
        "mas_calls_per_question": 6.0, "sample_tokens": 300.0, "k": 3,
        "k_if_completion_matched": 1}}}  # fmt: skip
    record_decision(RunDir.open(root / "match"), decision)

    text = build_report(load_experiment(str(path)), root)
    section = text.split("## Compute per question")[1].split("\n## ")[0]
    assert "**match** against `mad`:" in section
    # the baseline's 3 samples of 300 tokens a question: 900 tokens/q, ratio 1.00 to MAD's
    row = next(x for x in section.splitlines() if x.startswith("| match | gsm8k | mad (mad) |"))
    assert "| 3 | 900 | 900 | 1.00 | 3.0 | 6.0 |" in row
    assert "30.0" in section and "maj@k" in section  # MAD's accuracy, the baseline's vote
    assert "## Other evaluations" not in text  # no arena or exploitability part


def test_a_start_is_declared_by_its_recipe_and_checked_in_one_line(tmp_path: Path) -> None:
    experiment = load_experiment("marshal-mini", parse_sets(["poker_start_steps=5"]))
    assert experiment.start_recipe("poker")["steps"] == 5
    parts = {r.part.name: r for r in resolve_parts(experiment, tmp_path, build=False)}
    start = parts["train-kuhn"].config["model"]
    assert start.endswith("-format-marshal-mini-poker")  # cached per experiment and start
    assert start in parts["eval-kuhn"].argv  # the loop's step 0 is the same start
    board = parts["train-ttt"].config["model"]
    assert board.endswith("-format-marshal-mini-board") and board in parts["eval-ttt"].argv
    path = tmp_path / "s.yaml"
    for starts, message in [
        ({"tiny": {}}, "built-in model"),
        ({"g": {"games": ["kuhn_poker"], "stepz": 3}}, r"starts\.g\.stepz"),
        ({"g": {"steps": "${nope}"}}, r"\$\{nope\} is not a variable"),
    ]:
        path.write_text(yaml.safe_dump({"name": "s", "starts": starts,
                                        "parts": [{"name": "a", "run": "arena"}]}))  # fmt: skip
        with pytest.raises(MarsError, match=message) as info:
            load_experiment(str(path))
        assert "\n" not in str(info.value)
    path.write_text(yaml.safe_dump({"name": "s", "starts": {"g": {}}, "parts": [
        {"name": "a", "run": "arena", "args": {"player": "${model:gg}"}}]}))  # fmt: skip
    with pytest.raises(MarsError, match="did you mean 'g'"):
        resolve_parts(load_experiment(str(path)), tmp_path, build=False)


def test_a_finished_part_with_changed_arguments_is_refused_until_fresh(tmp_path: Path) -> None:
    path = _tiny_experiment(tmp_path)
    root = tmp_path / "exp"
    run_experiment(load_experiment(str(path)), root, source=path, log=lambda _: None)
    text = path.read_text().replace("episodes: 2", "episodes: 4")
    path.write_text(text)
    changed = load_experiment(str(path))
    before = (root / "arena" / "records.jsonl").read_text()
    with pytest.raises(MarsError, match=r"part arena finished with other settings .*--fresh arena"):
        run_experiment(changed, root, source=path, log=lambda _: None)
    assert (root / "arena" / "records.jsonl").read_text() == before  # nothing touched
    redone = run_experiment(changed, root, source=path, fresh=["arena"], log=lambda _: None)
    assert [p.status for p in redone.parts] == ["completed", "done"]
    kept = list(root.glob("arena.replaced-*"))
    assert len(kept) == 1 and (kept[0] / "records.jsonl").read_text() == before  # set aside
    records = (root / "arena" / "records.jsonl").read_text().splitlines()
    assert len(records) == 2 * len(before.splitlines())  # 4 episodes now, 2 before
    again = run_experiment(changed, root, source=path, log=lambda _: None)
    assert [p.status for p in again.parts] == ["done", "done"]


def test_one_runner_per_experiment_and_no_part_beside_a_live_one(tmp_path: Path) -> None:
    import subprocess
    import time

    from core.run_lock import WRITER_LOCK, WriterLock

    path = _tiny_experiment(tmp_path)
    root = tmp_path / "exp"
    root.mkdir()
    held = WriterLock(root).acquire()
    with pytest.raises(MarsError, match="is being written by pid"):
        run_experiment(load_experiment(str(path)), root, source=path, log=lambda _: None)
    held.release()
    # A part folder still written by a live command (its runner was killed before parts died
    # with their runners): the rerun refuses in one line naming it.
    (root / "arena").mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from core.run_lock import WriterLock; "
         "held = WriterLock(sys.argv[1]).acquire(); print('held', flush=True); time.sleep(60)",
         str(root / "arena")],
        stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[1],
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(MarsError, match=rf"part arena is still running .*pid {holder.pid}"):
            run_experiment(load_experiment(str(path)), root, source=path, log=lambda _: None)
    finally:
        holder.kill()
        holder.wait()
    time.sleep(0.1)
    assert (root / "arena" / WRITER_LOCK).exists()  # left by the killed holder: not live
    outcome = run_experiment(load_experiment(str(path)), root, source=path, log=lambda _: None)
    assert [p.status for p in outcome.parts] == ["completed", "completed"]


def test_a_part_dies_with_its_runner(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import time

    from mars.orchestration.experiments.runner import run_logged

    marker = tmp_path / "child.pid"
    runner_code = (
        "import sys; from pathlib import Path; "
        "from mars.orchestration.experiments.runner import run_logged; "
        "run_logged([sys.executable, '-c', "
        '\'import os, sys, time; open(sys.argv[1], "w").write(str(os.getpid())); '
        "time.sleep(120)', sys.argv[1]], Path(sys.argv[2]), None)"
    )
    assert callable(run_logged)
    runner = subprocess.Popen(
        [sys.executable, "-c", runner_code, str(marker), str(tmp_path / "log.txt")],
        cwd=Path(__file__).resolve().parents[1],
    )
    deadline = time.monotonic() + 60
    while not (marker.exists() and marker.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int(marker.read_text())
    runner.send_signal(signal.SIGKILL)  # the runner dies hard
    runner.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        with open(f"/proc/{child}/stat") as stat:  # a zombie waiting for init counts as dead
            if stat.read().split(") ")[1].startswith("Z"):
                break
        time.sleep(0.05)
    else:
        os.kill(child, signal.SIGKILL)
        pytest.fail("the part outlived its runner")


def test_the_report_flags_figures_made_of_invalid_replies(tmp_path: Path) -> None:
    from mars.orchestration.experiments.report import build_report

    path = _tiny_experiment(tmp_path)
    root = tmp_path / "exp"
    (root / "arena").mkdir(parents=True)
    seat = {"normalized_return": 10.0, "normalized_return_ci": [0, 20], "invalid_rate": 1.0}
    (root / "arena" / "summary.json").write_text(json.dumps({"seats": {"first": seat}}))
    text = build_report(load_experiment(str(path)), root)
    cannot = text.split("## What this run cannot show", 1)[1]
    assert "arena (`mars arena`): 100% (first seat) of the model's replies were invalid" in cannot


def test_the_example_file_in_the_docs_parses_and_passes_its_dry_run(tmp_path: Path) -> None:
    docs = (Path(__file__).resolve().parents[1] / "docs" / "experiments.md").read_text()
    blocks = [b.split("```", 1)[0] for b in docs.split("```yaml\n")[1:]]
    assert blocks, "docs/experiments.md shows no ```yaml example"
    for number, block in enumerate(blocks):
        path = tmp_path / f"example{number}.yaml"
        path.write_text(block)
        yaml.safe_load(block)  # valid YAML
        experiment = load_experiment(str(path))
        assert experiment.parts
        assert len(_check(str(path), tmp_path / f"e{number}")) == len(experiment.parts)
