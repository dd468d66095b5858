"""`--mas-option`: every option a MAS documents is accepted, and a key no MAS part reads (a
typo, or another system's option) is refused once, before any sample, instead of ignored."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from conftest import DATA_DIR, run_mars

from core.errors import MarsError
from harness.testing.scripted_server import Reply, ScriptedServer
from mas.base import check_options, get_mas

# Each system with every option it reads (values that pass its own checks).
KNOWN_OPTIONS: list[tuple[str, dict[str, Any]]] = [
    ("single", {"system_prompt": "Be brief."}),
    ("debate", {"agents": 2, "rounds": 1, "aggregate": True, "stop_on_consensus": True}),
    ("debate", {"protocol": "maslab", "agents": 2, "rounds": 1}),
    ("mad", {"rounds": 2, "force_rounds": True, "protocol": "default"}),
    ("mad", {"protocol": "maslab", "rounds": 2}),
    ("autogen", {"max_solver_turns": 2, "max_messages": 4, "approval_word": "OK"}),
    ("autogen", {"protocol": "maslab", "max_turns": 2, "termination_word": "DONE"}),
    ("agent_framework", {"max_solver_turns": 2, "max_rounds": 3, "approval_word": "OK"}),
    ("reasoner_tool", {"rounds": 2, "code_seconds": 5.0}),
]


def _check(name: str, options: dict[str, Any]) -> None:
    asyncio.run(check_options(get_mas(name), options, name=name))


@pytest.mark.parametrize(("name", "options"), KNOWN_OPTIONS)
def test_every_option_a_system_reads_is_accepted(name: str, options: dict[str, Any]) -> None:
    _check(name, options)


@pytest.mark.parametrize(
    ("name", "options", "stray"),
    [
        ("single", {"system_promt": "typo"}, "'system_promt'"),
        ("single", {"rounds": 3}, "'rounds'"),  # a debate option on the single agent
        ("debate", {"agents": 2, "round": 1}, "'round'"),
        ("mad", {"rounds": 2, "agents": 3}, "'agents'"),
        ("reasoner_tool", {"code_secs": 5}, "'code_secs'"),
        ("autogen", {"max_turn": 2}, "'max_turn'"),
    ],
)
def test_an_option_the_system_never_reads_is_refused(
    name: str, options: dict[str, Any], stray: str
) -> None:
    with pytest.raises(MarsError, match=f"MAS '{name}' has no option {stray}"):
        _check(name, options)


def test_the_cli_refuses_a_stray_option_in_one_line_before_any_request(tmp_path: Path) -> None:
    with ScriptedServer(lambda req: Reply(text="\\boxed{1}")) as server:
        result = run_mars(
            "eval", "--suite", "gsm8k", "--limit", "2", "--base-url", server.base_url,
            "--model", "scripted", "--run-dir", str(tmp_path / "run"),
            "--data-dir", str(DATA_DIR), "--mas-option", "system_promt=x", "--quiet",
        )  # fmt: skip
        requests = len(server.seen)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "error: MAS 'single' has no option 'system_promt' (did you mean 'system_prompt'?); "
        "it reads system_prompt"
    )
    assert requests == 0 and not (tmp_path / "run").exists()
