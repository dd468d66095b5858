"""MAST failure analysis: verdict parsing, truncation, rates, comparison, and `mars failures`
end to end against a scripted OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from core.stats import wilson_ci
from dashboard import synthetic
from harness.failures import (
    FAILURES_FILE,
    FAILURES_SUMMARY_FILE,
    TruncationLimits,
    compare_failures,
    failure_judge_messages,
    load_failures,
    parse_failure_verdict,
    render_transcript,
    select_records,
    summarize_failures,
)
from harness.failures.taxonomy import CATEGORIES, FAILURE_MODES, normalize_mode_id, taxonomy_text
from harness.testing.scripted_server import Reply, ScriptedServer

# ---------------------------------------------------------------- taxonomy


def test_taxonomy_has_fourteen_modes_in_three_categories() -> None:
    assert len(FAILURE_MODES) == 14
    counts = {c.key: sum(m.category == c.key for m in FAILURE_MODES) for c in CATEGORIES}
    assert counts == {"specification": 5, "misalignment": 6, "verification": 3}
    ids = [m.id for m in FAILURE_MODES]
    assert ids[0] == "FM-1.1" and ids[-1] == "FM-3.3" and len(set(ids)) == 14
    text = taxonomy_text()
    assert all(m.id in text and m.definition in text for m in FAILURE_MODES)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("FM-2.3", "FM-2.3"),
        ("fm 2.3", "FM-2.3"),
        ("FM2.3", "FM-2.3"),
        ("2.3", "FM-2.3"),
        ("FM-2.3: Task derailment", "FM-2.3"),
        ("Premature termination", "FM-3.1"),
        ("FM-3.4", None),
        ("FM-4.1", None),
        ("derailment", None),
    ],
)
def test_mode_ids_are_normalised(raw: str, expected: str | None) -> None:
    assert normalize_mode_id(raw) == expected


# ---------------------------------------------------------------- parsing


def test_fenced_json_with_text_around_it() -> None:
    reply = (
        "Here is my analysis.\n```json\n"
        '{"failure_modes": [{"id": "FM-2.5", "evidence": "ignored the critic"}, "fm 3.2"],'
        ' "summary": "nobody checked"}\n```\nHope this helps."'
    )
    verdict = parse_failure_verdict(reply)
    assert verdict.parsed
    assert verdict.modes == ["FM-2.5", "FM-3.2"]
    assert verdict.evidence == {"FM-2.5": "ignored the critic"}
    assert verdict.summary == "nobody checked"


def test_bare_json_with_trailing_comma_and_unknown_id() -> None:
    verdict = parse_failure_verdict('Verdict: {"modes": ["FM-1.3", "FM-7.7",], } done')
    assert verdict.parsed and verdict.modes == ["FM-1.3"] and verdict.unknown_ids == ["FM-7.7"]


def test_map_of_ids_to_presence() -> None:
    verdict = parse_failure_verdict(
        '{"FM-1.1": false, "FM-2.3": true, "FM-3.1": "stopped after one round"}'
    )
    assert verdict.modes == ["FM-2.3", "FM-3.1"]
    assert verdict.evidence == {"FM-3.1": "stopped after one round"}


def test_empty_list_is_a_verdict_of_no_failure() -> None:
    verdict = parse_failure_verdict('{"failure_modes": []}')
    assert verdict.parsed and verdict.modes == []


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("I think the agents derailed.", "no JSON object"),
        ('{"failure_modes": [', "no JSON object"),
        ('{"answer": 42}', "no failure_modes field"),
        ("", "no JSON object"),
    ],
)
def test_unusable_replies_are_parse_failures(reply: str, reason: str) -> None:
    verdict = parse_failure_verdict(reply)
    assert not verdict.parsed and reason in (verdict.parse_error or "")


# ---------------------------------------------------------------- truncation and prompt


def _messages(count: int, chars: int) -> list[dict[str, Any]]:
    return [
        {"agent": f"agent{i}", "round": i, "reasoning": "r" * chars, "text": f"M{i}:" + "t" * chars}
        for i in range(count)
    ]


def test_short_transcript_is_kept_whole() -> None:
    text, truncated = render_transcript(_messages(3, 50), TruncationLimits())
    assert not truncated
    assert all(f"M{i}:" in text for i in range(3))
    assert "cut" not in text and "omitted" not in text


def test_long_messages_are_clipped_head_and_tail() -> None:
    limits = TruncationLimits(reasoning_chars=300, message_chars=600, transcript_chars=100_000)
    text, truncated = render_transcript(_messages(2, 5000), limits)
    assert truncated
    assert text.count("characters cut") == 4  # reasoning and text of both messages
    assert "M0:" in text and "M1:" in text
    assert len(text) < 2 * (300 + 600) + 600


def test_long_conversations_drop_middle_messages() -> None:
    limits = TruncationLimits(reasoning_chars=100, message_chars=200, transcript_chars=2000)
    text, truncated = render_transcript(_messages(40, 1000), limits)
    assert truncated
    omitted = int(re.search(r"\[\.\.\. (\d+) messages omitted \.\.\.\]", text).group(1))
    kept = [int(m) for m in re.findall(r"M(\d+):", text)]
    assert kept[0] == 0 and kept[-1] == 39  # both ends survive
    assert len(kept) + omitted == 40
    assert len(text) <= 2000 + 100


def test_judge_prompt_carries_the_case_and_the_taxonomy() -> None:
    record = synthetic.eval_record(5, correct=False)
    messages, truncated = failure_judge_messages(record, TruncationLimits())
    assert [m["role"] for m in messages] == ["system", "user"]
    assert "FM-2.6" in messages[0]["content"] and '"failure_modes"' in messages[0]["content"]
    user = messages[1]["content"]
    assert "Question 5:" in user and "Gold answer: 5" in user and "moderator" in user
    assert not truncated


def test_selection_is_failed_and_not_errored_unless_all() -> None:
    records = [
        synthetic.eval_record(0, correct=True),
        synthetic.eval_record(1, correct=False),
        synthetic.eval_record(2, correct=False, error="EndpointError: gave up"),
        synthetic.eval_record(3, correct=False, extraction_failed=True),
    ]
    assert [r["sample_id"] for r in select_records(records, include_all=False)] == [
        "gsm8k-1",
        "gsm8k-3",
    ]
    # The errored record has no transcript, so even --all cannot judge it.
    assert len(select_records(records, include_all=True)) == 3


# ---------------------------------------------------------------- rates and comparison


def _verdicts(modes_per_sample: list[list[str]], offset: int = 0) -> list[dict[str, Any]]:
    return [
        synthetic.verdict(synthetic.eval_record(i + offset, correct=False), modes)
        for i, modes in enumerate(modes_per_sample)
    ]


def test_rates_count_a_category_once_per_transcript() -> None:
    verdicts = _verdicts([["FM-2.1", "FM-2.5"], ["FM-2.3"], ["FM-1.1"], []])
    verdicts.append(synthetic.verdict(synthetic.eval_record(9, correct=False), [], parsed=False))
    summary = summarize_failures(verdicts)
    assert summary["n_judged"] == 4 and summary["parse_failures"] == 1
    misalignment = summary["categories"]["misalignment"]
    assert misalignment["count"] == 2 and misalignment["rate"] == 0.5
    assert misalignment["ci95"] == pytest.approx(list(wilson_ci(2, 4)))
    assert summary["modes"]["FM-2.5"]["count"] == 1
    assert summary["any_failure"]["count"] == 3


def test_compare_is_paired_on_identical_keys() -> None:
    a = _verdicts([["FM-2.1"], ["FM-2.3"], [], ["FM-1.1"]])
    b = _verdicts([[], ["FM-2.3"], [], ["FM-1.1"]])
    result = compare_failures(a, b, n_boot=500)
    assert result["method"] == "paired" and result["n_shared"] == 4
    row = result["categories"]["misalignment"]
    assert row["rate_a"] == 0.5 and row["rate_b"] == 0.25
    assert row["diff"] == pytest.approx(-0.25)
    assert row["ci95"][0] <= -0.25 <= row["ci95"][1]


def test_compare_is_unpaired_on_different_samples() -> None:
    a = _verdicts([["FM-2.1"]] * 30)
    b = _verdicts([[]] * 30, offset=100)
    result = compare_failures(a, b, n_boot=500)
    assert result["method"] == "unpaired" and result["n_shared"] == 0
    row = result["categories"]["misalignment"]
    assert row["diff"] == pytest.approx(-1.0)
    assert row["ci95"] == pytest.approx([-1.0, -1.0])


# ---------------------------------------------------------------- `mars failures` end to end


def _index_of(request: dict[str, Any]) -> int:
    match = re.search(r"Question (\d+):", request["messages"][-1]["content"])
    assert match, "the judge prompt should carry the question"
    return int(match.group(1))


REPLIES = {
    0: '```json\n{"failure_modes": [{"id": "FM-2.5", "evidence": "ignored"}, '
    '{"id": "FM-3.2", "evidence": "no check"}]}\n```',
    4: 'My verdict: {"failure_modes": ["FM-1.3"], "summary": "looped"} -- end',
    8: "The agents derailed, I believe.",  # no JSON: a parse failure
    12: '{"failure_modes": []}',
    16: '{"FM-2.3": true, "FM-3.1": "stopped early", "FM-1.1": false}',
}


def _judge_script(request: dict[str, Any]) -> Reply:
    return Reply(text=REPLIES.get(_index_of(request), '{"failure_modes": ["FM-3.3"]}'))


@pytest.fixture
def cli() -> Any:
    import mars.commands.failures  # noqa: F401  registers the command
    from mars.main import app, register_commands

    register_commands()
    runner = CliRunner()

    def invoke(*args: str) -> Any:
        return runner.invoke(app, ["failures", *args], catch_exceptions=False)

    return invoke


def _eval_run(path: Path, wrong_every: int = 4, n: int = 20) -> Path:
    records = [synthetic.eval_record(i, correct=i % wrong_every != 0) for i in range(n)]
    records.append(synthetic.eval_record(99, correct=False, error="EndpointError: gave up"))
    synthetic.write_eval_run(path, records)
    return path


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_mars_failures_judges_failed_transcripts_and_resumes(tmp_path: Path, cli: Any) -> None:
    run = _eval_run(tmp_path / "eval-base")
    with ScriptedServer(_judge_script, model="judge") as server:
        args = [str(run), "--base-url", server.base_url, "--judge-model", "judge", "--quiet"]
        result = cli(*args)
        assert result.exit_code == 0, result.output
        assert len(server.seen) == 5  # samples 0, 4, 8, 12, 16; the errored one is skipped
        verdicts = {v["sample_id"]: v for v in _lines(run / FAILURES_FILE)}
        assert set(verdicts) == {f"gsm8k-{i}" for i in (0, 4, 8, 12, 16)}
        assert verdicts["gsm8k-0"]["modes"] == ["FM-2.5", "FM-3.2"]
        assert verdicts["gsm8k-0"]["categories"] == ["misalignment", "verification"]
        assert verdicts["gsm8k-0"]["evidence"]["FM-3.2"] == "no check"
        assert verdicts["gsm8k-16"]["modes"] == ["FM-2.3", "FM-3.1"]
        assert not verdicts["gsm8k-8"]["parsed"] and verdicts["gsm8k-8"]["raw"].startswith("The")
        assert verdicts["gsm8k-12"]["parsed"] and verdicts["gsm8k-12"]["modes"] == []
        assert all(v["judge_model"] == "judge" and v["error"] is None for v in verdicts.values())

        summary = json.loads((run / FAILURES_SUMMARY_FILE).read_text())
        assert summary["n_selected"] == 5 and summary["n_judged"] == 4
        assert summary["parse_failures"] == 1 and summary["selection"] == "failed"
        assert summary["categories"]["misalignment"]["rate"] == 0.5
        assert summary["categories"]["verification"]["rate"] == 0.5
        assert summary["categories"]["specification"]["rate"] == 0.25
        assert summary["any_failure"]["ci95"] == pytest.approx(list(wilson_ci(3, 4)))
        assert "Inter-agent misalignment" in result.output and "1 replies did not parse" in (
            result.output
        )

        # A rerun judges nothing new; --retry-unparsed asks again only for the unparsed one.
        before = (run / FAILURES_FILE).read_text()
        assert cli(*args).exit_code == 0
        assert len(server.seen) == 5
        assert sorted(before.splitlines()) == sorted((run / FAILURES_FILE).read_text().splitlines())
        assert cli(*args, "--retry-unparsed").exit_code == 0
        assert len(server.seen) == 6 and _index_of(server.seen[-1].body) == 8
        assert len(_lines(run / FAILURES_FILE)) == 5

        # --all judges the correct transcripts too (only those not judged yet).
        assert cli(*args, "--all").exit_code == 0
        assert len(server.seen) == 6 + 15
        summary = json.loads((run / FAILURES_SUMMARY_FILE).read_text())
        assert summary["selection"] == "all" and summary["n_verdicts"] == 20


def test_a_cut_short_verdict_line_is_counted_and_dropped_on_resume(
    tmp_path: Path, cli: Any
) -> None:
    run = _eval_run(tmp_path / "eval-killed")
    with ScriptedServer(_judge_script, model="judge") as server:
        args = [str(run), "--base-url", server.base_url, "--judge-model", "judge", "--quiet"]
        assert cli(*args).exit_code == 0
        first = json.loads((run / FAILURES_SUMMARY_FILE).read_text())
        assert first["malformed_lines"] == 0
        # A kill mid-write leaves half a line; a stray non-object line counts too.
        with (run / FAILURES_FILE).open("a") as handle:
            handle.write('{"suite": "gsm8k", "sample_id": "gsm8k-0", "mod\n[1, 2]\n')
        assert load_failures(run)[1] == 2
        result = cli(*args)
        assert result.exit_code == 0, result.output
        assert len(server.seen) == 5  # nothing judged again
    summary = json.loads((run / FAILURES_SUMMARY_FILE).read_text())
    assert summary["malformed_lines"] == 2
    assert "2 malformed lines skipped" in result.output
    for field in ("n_judged", "parse_failures", "any_failure", "categories", "modes"):
        assert summary[field] == first[field]
    assert len(_lines(run / FAILURES_FILE)) == 5  # the file is clean again
    assert load_failures(run)[1] == 0


def test_failed_judge_calls_are_recorded_and_redone(tmp_path: Path, cli: Any) -> None:
    run = _eval_run(tmp_path / "eval-flaky")
    refuse = {"on": True}

    def script(request: dict[str, Any]) -> Reply:
        if refuse["on"] and _index_of(request) == 4:
            return Reply(status=400, text="context too long")
        return _judge_script(request)

    with ScriptedServer(script, model="judge") as server:
        args = [str(run), "--base-url", server.base_url, "--judge-model", "judge", "--quiet"]
        assert cli(*args).exit_code == 0
        errored = [v for v in _lines(run / FAILURES_FILE) if v["error"]]
        assert [v["sample_id"] for v in errored] == ["gsm8k-4"]
        assert "400" in errored[0]["error"]
        summary = json.loads((run / FAILURES_SUMMARY_FILE).read_text())
        assert summary["errors"] == 1 and summary["n_judged"] == 3
        refuse["on"] = False
        calls = len(server.seen)
        assert cli(*args).exit_code == 0
        assert len(server.seen) == calls + 1
        verdicts = _lines(run / FAILURES_FILE)
        assert len(verdicts) == 5 and not any(v["error"] for v in verdicts)


def test_a_different_judge_needs_fresh(tmp_path: Path, cli: Any) -> None:
    from core.errors import MarsError

    run = _eval_run(tmp_path / "eval-judges", n=9)
    with ScriptedServer(_judge_script, model="judge") as server:
        base = [str(run), "--base-url", server.base_url, "--quiet"]
        assert cli(*base, "--judge-model", "judge", "--limit", "1").exit_code == 0
        with pytest.raises(MarsError, match="judge_model judge -> other-judge"):
            cli(*base, "--judge-model", "other-judge")
        assert cli(*base, "--judge-model", "other-judge", "--fresh").exit_code == 0
        assert {v["judge_model"] for v in _lines(run / FAILURES_FILE)} == {"other-judge"}


def test_fresh_against_an_unreachable_judge_loses_nothing(tmp_path: Path, cli: Any) -> None:
    from core.errors import MarsError

    run = _eval_run(tmp_path / "eval-fresh", n=9)
    with ScriptedServer(_judge_script, model="judge") as server:
        base = [str(run), "--base-url", server.base_url, "--quiet", "--judge-model", "judge"]
        assert cli(*base).exit_code == 0
        dead_url = server.base_url  # nothing listens there once the server stops
    kept = {name: (run / name).read_bytes() for name in (FAILURES_FILE, FAILURES_SUMMARY_FILE)}
    kept_identity = sorted(p.name for p in run.iterdir())
    with pytest.raises(MarsError):
        cli(str(run), "--base-url", dead_url, "--judge-model", "judge", "--fresh", "--quiet")
    assert {name: (run / name).read_bytes() for name in kept} == kept
    assert sorted(p.name for p in run.iterdir()) == kept_identity  # no leftover either


def test_mars_failures_compare(tmp_path: Path, cli: Any) -> None:
    base = _eval_run(tmp_path / "eval-base", wrong_every=2)  # 10 wrong
    trained = _eval_run(tmp_path / "eval-trained", wrong_every=5)  # 4 wrong

    def script(request: dict[str, Any]) -> Reply:
        index = _index_of(request)
        modes = ["FM-2.5"] if index % 5 != 0 or index == 0 else ["FM-3.2"]
        return Reply(text=json.dumps({"failure_modes": modes}))

    with ScriptedServer(script, model="judge") as server:
        for run in (base, trained):
            result = cli(str(run), "--base-url", server.base_url, "--judge-model", "judge")
            assert result.exit_code == 0, result.output
    result = cli("compare", str(base), str(trained), "--json", "--n-boot", "500")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output.strip().splitlines()[-1])["compare"]
    assert payload["method"] == "unpaired"
    assert (payload["n_a"], payload["n_b"]) == (10, 4)
    row = payload["categories"]["misalignment"]
    # Base: samples 0,2,...,18 -> misaligned unless a multiple of 10 other than 0 (10): 9/10.
    # Trained: samples 0, 5, 10, 15 -> only 0 is misaligned: 1/4.
    assert row["rate_a"] == pytest.approx(0.9) and row["rate_b"] == pytest.approx(0.25)
    assert row["diff"] == pytest.approx(-0.65)
    assert row["ci95"][0] < -0.65 < row["ci95"][1]
    assert "Inter-agent misalignment" in result.output and "-65.0" in result.output
    # The flag form gives the same numbers.
    flagged = cli("--compare", str(base), str(trained), "--json", "--n-boot", "500")
    assert json.loads(flagged.output.strip().splitlines()[-1])["compare"] == payload


def test_user_errors_are_one_line_mars_errors(tmp_path: Path, cli: Any) -> None:
    from core.errors import MarsError

    with pytest.raises(MarsError, match="not a run directory"):
        cli(str(tmp_path / "nowhere"))
    arena = synthetic.write_arena_run(tmp_path / "arena", [synthetic.arena_record(0, "first")])
    with pytest.raises(MarsError, match="reads eval runs"):
        cli(str(arena.path))
    with pytest.raises(MarsError, match="exactly two"):
        cli("compare", str(arena.path))
    run = _eval_run(tmp_path / "eval-unjudged", n=4)
    with pytest.raises(MarsError, match="has no verdicts"):
        cli("compare", str(run), str(run))


def test_a_judge_none_of_whose_replies_parse_exits_4(tmp_path: Path, cli: Any) -> None:
    run = _eval_run(tmp_path / "eval-unparsed", n=8)
    refusal = Reply(text="I would rather not say.")
    with ScriptedServer(lambda _request: refusal, model="j") as server:
        result = cli(str(run), "--base-url", server.base_url, "--judge-model", "j", "--quiet")
    assert result.exit_code == 4  # ExitCode.NO_SCORE, as docs/experiments.md says
    summary = json.loads((run / FAILURES_SUMMARY_FILE).read_text())
    assert summary["n_judged"] == 0 and summary["parse_failures"] == 2


def test_compare_refuses_a_run_without_a_parsed_verdict(tmp_path: Path, cli: Any) -> None:
    from core.errors import MarsError

    judged, unparsed = _eval_run(tmp_path / "eval-a", n=8), _eval_run(tmp_path / "eval-b", n=8)
    refusal = Reply(text="I would rather not say.")
    with (
        ScriptedServer(_judge_script, model="j") as good,
        ScriptedServer(lambda _request: refusal, model="j") as bad,
    ):
        for run, server in ((judged, good), (unparsed, bad)):
            cli(str(run), "--base-url", server.base_url, "--judge-model", "j", "--quiet")
    with pytest.raises(MarsError, match="has no parsed verdict"):
        cli("compare", str(judged), str(unparsed))
