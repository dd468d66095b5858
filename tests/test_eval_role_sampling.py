"""Per-role generation settings in evaluation (`mars eval --role-sampling`), and replicas of one
model behind `--base-url URL1,URL2`, through the real command against scripted servers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import DATA_DIR
from typer.testing import CliRunner, Result

from core.errors import MarsError
from harness.testing.scripted_server import Reply, ScriptedServer
from mars.api.eval_steps import trained_sampling as _trained_sampling
from mars.api.inputs import parse_role_sampling

pytestmark = pytest.mark.skipif(not DATA_DIR.is_dir(), reason="shared benchmark data not found")


def mars(*args: str) -> Result:
    from mars.main import app, register_commands

    register_commands()
    return CliRunner().invoke(app, list(args))


def _debate_reply(request: dict[str, Any]) -> Reply:
    return Reply(text="Final answer: \\boxed{18}")


def test_each_role_is_asked_with_its_own_settings_and_the_others_with_the_runs(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "run"
    with ScriptedServer(_debate_reply) as server:
        result = mars(
            "eval", "--suite", "gsm8k", "--limit", "2", "--mas", "reasoner_tool",
            "--mas-option", "rounds=1", "--base-url", server.base_url, "--model", "scripted",
            "--temperature", "0.3", "--max-tokens", "200",
            "--role-sampling", "reasoner:temperature=0.9,max_tokens=64,stop=</a>|END",
            "--run-dir", str(run_dir), "--quiet",
        )  # fmt: skip
        seen = [request.body for request in server.seen]
    assert result.exit_code == 0, result.output
    system = [str(body["messages"][0]["content"]).lower() for body in seen]
    reasoner = [b for b, s in zip(seen, system, strict=True) if "reasoner" in s]
    tool = [b for b, s in zip(seen, system, strict=True) if "reasoner" not in s]
    assert len(reasoner) == len(tool) == 2
    assert all(
        (b["temperature"], b["max_tokens"], b["stop"]) == (0.9, 64, ["</a>", "END"])
        for b in reasoner
    )
    assert all((b["temperature"], b["max_tokens"]) == (0.3, 200) and "stop" not in b for b in tool)
    config = json.loads((run_dir / "run.json").read_text())["config"]
    assert config["generation_by_role"]["reasoner"]["temperature"] == 0.9
    assert "reasoner" not in config["generation"]


def test_replicas_share_an_eval_and_are_reported_per_replica(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with ScriptedServer(_debate_reply) as first, ScriptedServer(_debate_reply) as second:
        urls = [first.base_url, second.base_url]
        result = mars(
            "eval", "--suite", "gsm8k", "--limit", "8", "--base-url", ",".join(urls),
            "--model", "scripted", "--concurrency", "4", "--run-dir", str(run_dir), "--quiet",
        )  # fmt: skip
        answered = [len(first.seen), len(second.seen)]
    assert result.exit_code == 0, result.output
    assert sum(answered) == 8 and min(answered) >= 2
    by_replica = json.loads((run_dir / "summary.json").read_text())["usage_by_replica"]
    assert [by_replica[url]["calls"] for url in urls] == answered
    assert f"replica {urls[0]}: {answered[0]} calls" in result.stdout


def test_a_replica_that_serves_another_model_is_refused_in_one_line(tmp_path: Path) -> None:
    with (
        ScriptedServer(_debate_reply) as first,
        ScriptedServer(_debate_reply, model="other") as second,
    ):
        other = second.base_url
        result = mars(
            "eval", "--suite", "gsm8k", "--limit", "1", "--model", "scripted",
            "--base-url", f"{first.base_url},{second.base_url}", "--run-dir", str(tmp_path / "r"),
        )  # fmt: skip
    # a MarsError: one line and exit 2 from `mars` (mars.main._run)
    assert isinstance(result.exception, MarsError)
    assert f"{other} does not serve scripted (it lists other)" in str(result.exception)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("reasoner", "expects ROLE:KEY=VALUE"),
        ("reasoner:temprature=1", "unknown setting 'temprature' (did you mean 'temperature'?)"),
        ("reasoner:top_p=1.5", "top_p 1.5 is out of range"),
        ("reasoner:max_tokens=x", "max_tokens must be a number"),
    ],
)
def test_malformed_role_sampling_is_one_line(value: str, message: str) -> None:
    with pytest.raises(MarsError) as info:
        parse_role_sampling([value])
    assert message in str(info.value) and "\n" not in str(info.value)


def test_a_trained_runs_evaluation_settings_are_the_default(tmp_path: Path) -> None:
    settings = {"reasoner": {"temperature": 0.0, "top_p": None, "max_new_tokens": 32}}
    (tmp_path / "run.json").write_text(json.dumps({"config": {"eval_role_sampling": settings}}))
    assert _trained_sampling(tmp_path) == {"reasoner": {"temperature": 0.0, "max_tokens": 32}}
