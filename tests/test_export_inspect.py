"""`mars export --format inspect`: a real eval run (made by `mars eval` against the scripted server)
written as Inspect logs and read back with inspect_ai's own `read_eval_log`."""

from __future__ import annotations

import json
import shutil
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from conftest import DATA_DIR, run_mars
from inspect_ai.log import EvalLog, read_eval_log
from inspect_ai.model import ContentReasoning

from core.errors import MarsError
from core.runstore import RunDir
from harness.benchmarks import get_suite
from harness.export_inspect import SCORER, export_inspect
from harness.testing.scripted_server import Reply, ScriptedServer

pytestmark = pytest.mark.skipif(not DATA_DIR.is_dir(), reason="shared benchmark data not found")

SUITES = ("gsm8k", "aqua")
# What the solver answers per (suite, position): right, wrong, no readable answer, or a 400.
PLAN = {"gsm8k": ("right", "wrong", "none"), "aqua": ("fail", "right", "wrong")}


def _script() -> Any:
    replies: dict[str, Reply] = {}
    for suite in SUITES:
        samples = get_suite(suite).load(data_dir=DATA_DIR, limit=3).samples
        for sample, outcome in zip(samples, PLAN[suite], strict=True):
            wrong = ("C" if sample.gold == "B" else "B") if sample.choices else "-1"
            text = {
                "right": f"So \\boxed{{{sample.gold}}}.",
                "wrong": f"So \\boxed{{{wrong}}}.",
                "none": "I cannot tell.",
                "fail": "rejected",
            }[outcome]
            status = 400 if outcome == "fail" else 200
            replies[sample.question[:60]] = Reply(text=text, status=status, reasoning="I think.")

    def script(request: dict[str, Any]) -> Reply:
        if request["messages"][0]["content"].startswith("You are the critic"):
            return Reply(text="Fine. TERMINATE")
        task = request["messages"][1]["content"]
        return next(reply for fragment, reply in replies.items() if fragment in task)

    return script


@pytest.fixture(scope="module")
def eval_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("export") / "run"
    with ScriptedServer(_script()) as server:
        result = run_mars(
            "eval", "--suite", ",".join(SUITES), "--limit", "3", "--epochs", "2",
            "--mas", "agent_framework", "--mas-option", "max_rounds=2",
            "--base-url", server.base_url, "--model", "scripted", "--max-retries", "0",
            "--data-dir", str(DATA_DIR), "--run-dir", str(run_dir), "--quiet",
        )  # fmt: skip
    records = RunDir.open(run_dir).records()
    assert len(records) == 12 and (run_dir / "summary.json").exists(), result.stderr
    return run_dir


def _records(run_dir: Path) -> dict[str, list[dict[str, Any]]]:
    by_suite: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in RunDir.open(run_dir).records():
        by_suite[record["suite"]].append(record)
    return by_suite


def _exported(run_dir: Path, out: Path) -> dict[str, EvalLog]:
    result = run_mars("export", "--format", "inspect", str(run_dir), "-o", str(out))
    assert result.returncode == 0, result.stderr
    files = sorted(out.glob("*.eval"))
    assert [line.removeprefix("wrote ") for line in result.stdout.splitlines()[:-1]] == [
        str(f) for f in files
    ]
    logs = {log.eval.task: log for log in map(read_eval_log, map(str, files))}
    assert set(logs) == set(SUITES)
    return logs


def test_exported_logs_match_the_runs_records(eval_run: Path, tmp_path: Path) -> None:
    logs = _exported(eval_run, tmp_path / "logs")
    records = _records(eval_run)
    summary = json.loads((eval_run / "summary.json").read_text())["suites"]
    for suite, log in logs.items():
        assert log.status == "success" and log.samples is not None
        assert log.eval.solver == "mars/agent_framework" and log.eval.model == "scripted"
        assert log.eval.config.epochs == 2
        by_key = {(r["sample_id"], r["epoch"] + 1): r for r in records[suite]}
        assert sorted((str(s.id), s.epoch) for s in log.samples) == sorted(by_key)

        for sample in log.samples:
            record = by_key[(str(sample.id), sample.epoch)]
            assert (sample.input, sample.target) == (record["question"], record["gold"])
            assert sample.choices == record["choices"]
            if record["error"]:
                assert sample.error is not None and "400" in sample.error.message
                assert sample.scores is None
                continue
            score = sample.scores[SCORER] if sample.scores else None
            assert score is not None
            expected = "N" if record["extraction_failed"] else "C" if record["correct"] else "I"
            assert (score.value, score.answer) == (expected, record["extracted"])
            assert sample.output.completion == record["final_answer"]
            calls = record["transcript"]["messages"]
            replies = [m for m in sample.messages if m.role == "assistant"]
            assert [m.metadata["agent"] for m in replies if m.metadata] == [
                c["agent"] for c in calls
            ]
            assert isinstance(replies[0].content[0], ContentReasoning)
            assert replies[0].content[0].reasoning == calls[0]["reasoning"] == "I think."
            assert [e.role for e in sample.events if e.event == "model"] == [
                c["agent"] for c in calls
            ]
            for agent, usage in record["metrics"]["tokens_per_agent"].items():
                assert sample.role_usage[agent].input_tokens == usage["prompt_tokens"]
                assert sample.role_usage[agent].output_tokens == usage["completion_tokens"]

        # Aggregate scores: what the samples say, and what `mars eval` summarised.
        graded = [r for r in records[suite] if not r["error"]]
        aggregate = log.results.scores[0] if log.results else None
        assert aggregate is not None and aggregate.name == SCORER
        accuracy = sum(r["correct"] for r in graded) / len(graded)
        assert aggregate.metrics["accuracy"].value == pytest.approx(accuracy)
        assert aggregate.metrics["accuracy"].value == pytest.approx(summary[suite]["accuracy"])
        lower, upper = summary[suite]["ci95"]
        assert aggregate.metrics["ci95_lower"].value == pytest.approx(lower)
        assert aggregate.metrics["ci95_upper"].value == pytest.approx(upper)
        assert (aggregate.scored_samples, aggregate.unscored_samples) == (
            len(graded),
            len(records[suite]) - len(graded),
        )
    assert [logs["gsm8k"].results.scores[0].metrics["accuracy"].value] == [pytest.approx(1 / 3)]
    assert logs["aqua"].results.scores[0].unscored_samples == 2  # the 400, in both epochs

    # Model usage: per role and per model, equal to what the endpoint's ledger counted.
    ledger = json.loads((eval_run / "usage.json").read_text())["by_role"]
    role_usage: Counter[str] = Counter()
    for log in logs.values():
        for role, usage in log.stats.role_usage.items():
            role_usage[role] += usage.input_tokens
        assert set(log.stats.model_usage) == {"scripted"}
    assert dict(role_usage) == {r: u["prompt_tokens"] for r, u in ledger.items()}
    total_output = sum(log.stats.model_usage["scripted"].output_tokens for log in logs.values())
    assert total_output == sum(u["completion_tokens"] for u in ledger.values())


def test_a_single_suite_run_exports_to_one_named_file(eval_run: Path, tmp_path: Path) -> None:
    single = tmp_path / "single"
    shutil.copytree(eval_run, single)
    lines = (single / "records.jsonl").read_text().splitlines()
    kept = [line for line in lines if json.loads(line)["suite"] == "gsm8k"]
    (single / "records.jsonl").write_text("\n".join([*kept, "{not json"]) + "\n")
    with pytest.raises(MarsError, match="2 suites"):
        export_inspect(eval_run, tmp_path / "both.json")

    written = export_inspect(single, tmp_path / "gsm8k.json")
    assert written == [tmp_path / "gsm8k.json"]
    log = read_eval_log(str(written[0]))
    assert json.loads(written[0].read_text())["eval"]["task"] == "gsm8k"  # plain JSON format
    assert log.samples is not None and len(log.samples) == len(kept)
    # Exporting again rewrites the same files rather than adding new ones.
    default = export_inspect(single)
    assert default == export_inspect(single) and len(list((single / "inspect").iterdir())) == 1


def test_bad_runs_get_a_one_line_error(tmp_path: Path) -> None:
    missing = run_mars("export", str(tmp_path / "nowhere"))
    assert missing.returncode != 0
    assert missing.stderr.strip() == f"error: {tmp_path / 'nowhere'}: no such run directory"

    arena = tmp_path / "arena"
    arena.mkdir()
    (arena / "run.json").write_text(json.dumps({"kind": "arena"}))
    result = run_mars("export", "--format", "inspect", str(arena))
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        f"error: {arena} is an 'arena' run; only eval runs export to Inspect"
    ]

    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(MarsError, match="not a run directory"):
        export_inspect(empty)
    (empty / "run.json").write_text(json.dumps({"kind": "eval"}))
    with pytest.raises(MarsError, match="no eval records"):
        export_inspect(empty)
    unknown = run_mars("export", "--format", "csv", str(empty))
    assert unknown.returncode != 0 and "not supported" in unknown.stderr
