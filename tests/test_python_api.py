"""The Python API: docs/python-api.md's notebook runs as written against a scripted server and
prints the figures `mars eval` prints for the same settings; plans from keywords; the same
one-line errors as the command line."""

from __future__ import annotations

import contextlib
import io
import json
import re
import zlib
from pathlib import Path
from typing import Any

import pytest
from conftest import DATA_DIR, REPO, run_mars

import mars
from harness.testing.scripted_server import Reply, ScriptedServer

DOC = REPO / "docs" / "python-api.md"
SUITES = ("gsm8k", "aqua")
LIMIT = 4


def _samples() -> dict[str, list[Any]]:
    from harness.benchmarks import get_suite

    return {name: get_suite(name).load(data_dir=DATA_DIR, limit=LIMIT).samples for name in SUITES}


def _script(samples: dict[str, list[Any]]) -> Any:
    """A benchmark question: right or wrong by a hash of the whole conversation, so the debate
    (whose prompts carry the other agents' answers) and the single agent disagree on some, and a
    rerun of the same prompts gets the same replies. A game: a legal action, chosen the same way.
    """
    from games.prompts import legal_actions_in

    def script(request: dict[str, Any]) -> Reply:
        text = "\n".join(str(m.get("content") or "") for m in request["messages"])
        digest = zlib.crc32(text.encode())
        legal = legal_actions_in(str(request["messages"][-1].get("content") or ""))
        if legal:
            return Reply(text=f"<answer>{legal[digest % len(legal)]}</answer>")
        sample = next(s for items in samples.values() for s in items if s.question[:80] in text)
        wrong = "A" if sample.gold != "A" else "B"
        if not sample.choices:
            wrong = str(int(float(sample.gold)) + 1)
        answer = sample.gold if digest % 3 else wrong
        return Reply(text=f"Step by step.\nThe answer is \\boxed{{{answer}}}.")

    return script


def _notebook_code(base_url: str, out: Path) -> str:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    code = next(block for block in blocks if "results[system] = mars.evaluate(" in block)
    assert '"http://127.0.0.1:8000/v1"' in code and '"runs/notebook"' in code
    return code.replace('"http://127.0.0.1:8000/v1"', repr(base_url)).replace(
        '"runs/notebook"', repr(str(out))
    )


def test_the_notebook_in_the_docs_prints_the_figures_of_mars_eval(tmp_path: Path) -> None:
    samples = _samples()
    with ScriptedServer(_script(samples)) as server:
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(_notebook_code(server.base_url, tmp_path / "api"), {"__name__": "notebook"})
        by_cli = {}
        for system in ("single", "mad"):
            run_dir = tmp_path / "cli" / system
            result = run_mars(
                "eval", "--suite", ",".join(SUITES), "--mas", system, "--limit", str(LIMIT),
                "--base-url", server.base_url, "--run-dir", str(run_dir), "--quiet",
                "--data-dir", str(DATA_DIR),
            )  # fmt: skip
            assert result.returncode == 0, result.stderr
            by_cli[system] = json.loads((run_dir / "summary.json").read_text())["suites"]
    lines = printed.getvalue().splitlines()
    for system, suites in by_cli.items():
        for suite, stats in suites.items():
            low, high = stats["ci95"]
            expected = f"{system} {suite}: {stats['accuracy']:.3f} [{low:.3f}, {high:.3f}]"
            assert f"{expected} (n={stats['n']})" in lines
    # The two systems differ somewhere, and every disagreement printed is a real one.
    disagreements = [line for line in lines if ", mad " in line]
    accuracies = {s: [by_cli[s][suite]["accuracy"] for suite in SUITES] for s in by_cli}
    if accuracies["single"] != accuracies["mad"]:
        assert disagreements
    for line in disagreements:
        single_right, mad_right = re.findall(r"\((right|wrong)\)", line)
        assert single_right != mad_right
    assert "gsm8k" in printed.getvalue() and "aqua" in printed.getvalue()


def test_a_finished_run_reads_back_as_the_same_result(tmp_path: Path) -> None:
    samples = _samples()
    with ScriptedServer(_script(samples)) as server:
        result = mars.evaluate(
            suites=["gsm8k"], base_url=server.base_url, limit=LIMIT, run_dir=tmp_path / "run",
            quiet=True, data_dir=DATA_DIR,
        )  # fmt: skip
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    figure = result.figures["gsm8k"]
    assert figure.value == summary["suites"]["gsm8k"]["accuracy"]
    assert list(figure.ci95) == summary["suites"]["gsm8k"]["ci95"]
    assert len(result.records()) == LIMIT
    reopened = mars.open_run(tmp_path / "run")
    assert reopened.figures == result.figures and reopened.kind == "eval"
    assert [r["sample_id"] for r in reopened.records()] == [
        r["sample_id"] for r in result.records()
    ]


def test_a_plan_from_keywords_checks_its_names_and_values(tmp_path: Path) -> None:
    plan = mars.EvalPlan(suites="gsm8k", limit=2)
    with pytest.raises(mars.MarsError, match="did you mean 'limit'"):
        mars.evaluate(suites="gsm8k", limt=2)
    with pytest.raises(mars.MarsError, match="not both"):
        mars.evaluate(plan, limit=3)
    with pytest.raises(mars.MarsError) as unknown:
        mars.evaluate(suites="gsm8", base_url="http://127.0.0.1:9/v1", out=tmp_path)
    cli = run_mars("eval", "--suite", "gsm8", "--base-url", "http://127.0.0.1:9/v1")
    assert cli.returncode == unknown.value.exit_code
    assert f"error: {unknown.value}" in " ".join(cli.stderr.split())
    assert not any(tmp_path.iterdir())  # refused before anything was written


def _function_examples() -> list[str]:
    section = DOC.read_text().split("## The functions", 1)[1]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


@pytest.mark.slow  # trains and serves the tiny model
def test_every_api_function_has_an_example_and_every_example_runs(tmp_path: Path) -> None:
    examples = _function_examples()
    documented = set(re.findall(r"^### `mars\.(\w+)\(", DOC.read_text(), flags=re.M))
    assert documented >= {
        "evaluate", "arena", "selfplay", "exploitability", "train", "train_mas", "loop",
        "experiment", "report",
    }  # fmt: skip
    called = {name for code in examples for name in re.findall(r"\bmars\.(\w+)\(", code)}
    assert {*documented, "failures", "ratings", "open_run"} <= called
    namespace: dict[str, Any] = {"__name__": "docs"}
    printed = io.StringIO()
    with ScriptedServer(_script(_samples())) as server, contextlib.redirect_stdout(printed):
        for code in examples:
            exec(
                code.replace('"http://127.0.0.1:8000/v1"', repr(server.base_url)).replace(
                    '"runs/api"', repr(str(tmp_path))
                ),
                namespace,
            )
    # What the examples print is what their runs wrote.
    result, duel, trained = namespace["result"], namespace["duel"], namespace["trained"]
    accuracy = json.loads((result.run_dir / "summary.json").read_text())["suites"]["gsm8k"]
    assert result.figures["gsm8k"].value == accuracy["accuracy"]
    assert str(result.figures["gsm8k"]) in printed.getvalue()
    seats = json.loads((duel.run_dir / "summary.json").read_text())["seats"]
    assert duel.figures["seat first"].value == seats["first"]["mean_return"]
    assert mars.open_run(duel.run_dir).records() == duel.records()
    assert namespace["policy"].figures["exploitability"].value == pytest.approx(0.4583, abs=1e-3)
    assert namespace["games"].records() and trained.figures["step"].value == 1.0
    curve = namespace["curve"]
    assert curve.figures and namespace["checked"].checked
    assert mars.open_run(curve.run_dir).figures == curve.figures  # a loop reads back alike
    assert namespace["plan"].summary["config"]["policies"] == {"reasoner": "a", "tool": "b"}


def test_a_plan_is_checked_as_the_command_checks_it_and_its_run_records_the_call(
    tmp_path: Path,
) -> None:
    from mars.api.inputs import checked_role_settings

    for keywords, message in (
        ({"concurrency": 0}, "--concurrency must be at least 1, not 0"),
        ({"top_p": 1.5}, "--top-p must be at least 0.0 and at most 1.0, not 1.5"),
        ({"epochs": 0}, "--epochs must be at least 1, not 0"),
        ({"mas_options": ["rounds"]}, "--mas-option expects KEY=VALUE, got 'rounds'"),
    ):
        with pytest.raises(mars.MarsError, match=re.escape(message)):
            mars.evaluate(suites="gsm8k", base_url="http://127.0.0.1:9/v1", **keywords)
    with pytest.raises(mars.MarsError, match="--limit must be at least 1"):
        mars.failures(run=tmp_path, limit=0)
    # A role's stops given as a list keep their commas and bars (the text form cannot).
    assert checked_role_settings("judge", {"stop": ["a,b", "c|d"], "max_tokens": 64}) == {
        "stop": ["a,b", "c|d"],
        "max_tokens": 64,
    }
    with ScriptedServer(_script(_samples())) as server:
        result = mars.evaluate(
            suites="gsm8k", mas="mad", mas_options=["rounds=1"], base_url=server.base_url,
            limit=2, run_dir=tmp_path / "run", quiet=True, data_dir=DATA_DIR,
        )  # fmt: skip
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    assert info["config"]["mas_config"] == {"rounds": 1}
    assert info["command"][:2] == ["python", "-c"]
    assert info["command"][2].startswith("import mars; mars.evaluate(mars.EvalPlan(suites=")
    assert mars.open_run(result.run_dir).records() == result.records()
