"""A new game, or a new MAS workflow, is one file plus one registration line (issue 51).

The test does what docs/games.md ("Adding a game") and docs/mas.md ("Adding a system") tell a
contributor to do, on a copy of the project's Python packages: it writes a toy game (OpenSpiel's
m,n,k-game on a 4 x 4 board, three in a line wins) as one module in games/catalog/ with its line
in `games.catalog.MODULES`, and a toy two-agent workflow as one module in mas/ with its line in
`mas.base.SYSTEM_MODULES`. It lists the files the addition touched by comparing the copy with the
original and requires exactly those four (each registry one line longer, nothing else in it
changed). Then, in a fresh interpreter that imports only the copy:

- the game is listed, plays arena episodes with a scripted model seat (so its rules, views,
  labels, prompts and parsing all run) against `random`, and the dashboard's replay code
  rebuilds every position and draws it as the game's declared board (a grid of marks);
- the workflow is listed, passes the options check, runs a task against a scripted server on
  127.0.0.1, is found without importing the other systems, and is a training workflow (its
  roles and rewards, read by train_backend, declared in its own file).

The two files are written word for word as docs/games.md and docs/mas.md print them (checked).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("core", "harness", "games", "mas", "dashboard", "train_backend", "mars")
SKIP = shutil.ignore_patterns("__pycache__", "*.pyc")

GAME_FILE = "games/catalog/three_in_a_row.py"
GAME_REGISTRY = "games/catalog/__init__.py"
WORKFLOW_FILE = "mas/solve_check.py"
WORKFLOW_REGISTRY = "mas/base.py"

GAME = '''\
"""Three in a Row: OpenSpiel's m,n,k-game on a 4 x 4 board; three marks in a line win."""

from __future__ import annotations

import pyspiel

from games.catalog.board import BOARD_REWARDS, MARKS_BOARD, bracket_upper
from games.spec import GameSpec, SeatView, register_game


def _view(state: pyspiel.State, seat: int) -> SeatView:
    rows = [row for row in state.observation_string(seat).split("\\n") if row]
    numbered = ["    " + " ".join(str(c) for c in range(len(rows[0])))]
    numbered += [f" {r}  " + " ".join(row) for r, row in enumerate(rows)]
    return SeatView(state="\\n".join(numbered), compact="\\n".join(rows))


register_game(
    GameSpec(
        name="three_in_a_row",
        title="Three in a Row",
        openspiel_name="mnk",
        params={"m": 4, "n": 4, "k": 3},
        split="heldout",
        rules=(
            "Three in a Row is played by two players on a 4x4 grid. X moves first, then O; each "
            "move marks one empty cell. Three of your marks in a row, a column or a diagonal win "
            "at once; a full grid without such a line is a draw. Cells are named (row,column) "
            "from 0 at the top left: <X(1,2)> marks row 1, column 2 with X."
        ),
        compact_rules="Three in a row on a 4x4 board wins. Cells (row,col) from 0.",
        seat_names=("X", "O"),
        label=bracket_upper,
        view=_view,
        rewards=BOARD_REWARDS,
        board=MARKS_BOARD,
    )
)
'''

WORKFLOW = '''\
"""`solve_check`: a solver answers, a checker reads its solution and gives the final answer."""

from __future__ import annotations

from typing import Any

from mas.answers import answer_key, extract_answer
from mas.base import Conversation, Models, Task, Transcript, mas

CHECKER = "Check the proposed solution. End with the final answer in \\\\boxed{}."


def solve_check_rewards(
    transcript: Transcript, reference: str, task: Task
) -> dict[tuple[str, int], float]:
    """Each agent's call earns 1 when its own answer is the reference's."""
    rewards = {}
    for message in transcript.messages:
        answer = extract_answer(task, message.text)
        right = answer is not None and answer_key(answer) == answer_key(reference)
        rewards[(message.agent, 0)] = float(right)
    return rewards


@mas("solve_check", roles=("solver", "checker"), rewards=solve_check_rewards)
async def solve_check(task: Task, models: Models, config: dict[str, Any]) -> Transcript:
    conversation = Conversation(models, task)
    checker_prompt = config.get("checker_prompt", CHECKER)
    solved = await conversation.call("solver", [{"role": "user", "content": task.prompt}])
    shown = f"{task.prompt}\\n\\nProposed solution:\\n{solved.text}"
    checked = await conversation.call(
        "checker",
        [{"role": "system", "content": checker_prompt}, {"role": "user", "content": shown}],
    )
    transcript = conversation.transcript
    transcript.final_answer = checked.text
    transcript.rounds = 1
    transcript.stop_reason = "answered"
    return transcript
'''

PROBE = r"""
import asyncio, json, sys

ROOT = sys.argv[1]
facts = {}

# --- the game -------------------------------------------------------------------------------
from games.arena import ArenaConfig, run_arena
from games.players import PlayerContext, make_player
from games.spec import get_game, list_games
from games.testing import first_legal, scripted_player

spec = get_game("three_in_a_row")
facts["games"] = [s.name for s in list_games()]
records = []
opponent = make_player("random", PlayerContext(spec=spec))
asyncio.run(
    run_arena(spec, scripted_player(first_legal), opponent, ArenaConfig(episodes=2),
              on_record=records.append)
)
facts["records"] = len(records)
model_turns = [[t for t in r["turns"] if "prompt" in t] for r in records]
facts["model_turns"] = [  # legal, and shown the game's view: its numbered 4 x 4 grid
    (t["legal"], "    0 1 2 3\n 0  " in t["prompt"][-1]["content"])
    for turns in model_turns for t in turns
]
facts["titled"] = [  # each seat's chat opens with the game's rules
    any("Three in a Row is played" in m["content"] for m in turns[0]["prompt"])
    for turns in model_turns
]
facts["returns"] = [r["returns"] for r in records]

from dashboard.boards import board_html, positions_for

positions, why = positions_for(records[0])
facts["why"] = why
facts["positions"] = len(positions or [])
facts["turns"] = len(records[0]["turns"])
facts["kinds"] = sorted({p["kind"] for p in positions or []})
final = board_html(positions[-1], ["model", "random"]) if positions else ""
facts["cells"] = final.count("data-cell=")
facts["marks"] = final.count('data-mark="x"') + final.count('data-mark="o"')
facts["drawn"] = 'data-board="three_in_a_row"' in final and "game over" in final

# --- the workflow ---------------------------------------------------------------------------
from core.endpoint import Endpoint, EndpointConfig, GenerationConfig
from harness.testing.scripted_server import Reply, ScriptedServer
from mas.base import Models, Task, builtin_systems, check_options, get_mas

def script(request):
    checking = "Proposed solution" in request["messages"][-1]["content"]
    return Reply(text="Checked: \\boxed{4}." if checking else "2 + 2 = \\boxed{4}.")

workflow = get_mas("solve_check")
facts["other_systems_imported"] = sorted(m for m in ("mas.mad", "mas.single") if m in sys.modules)
asyncio.run(check_options(workflow, {"checker_prompt": "Check."}, name="solve_check"))
task = Task(prompt="What is 2 + 2?", sample_id="q1", kind="math")

async def run():
    with ScriptedServer(script) as server:
        endpoint = Endpoint(EndpointConfig(base_url=server.base_url, model="scripted",
                                           max_retries=0, timeout_s=20))
        try:
            return await workflow(task, Models(default=endpoint,
                                               gen=GenerationConfig(max_tokens=64)), {})
        finally:
            await endpoint.aclose()

transcript = asyncio.run(run())
facts["agents"] = [m.agent for m in transcript.messages]
facts["final_answer"] = transcript.final_answer

from mas.base import list_mas
from train_backend.mas.rewards import ROLES, reward_function

facts["systems"] = list_mas()
facts["module"] = builtin_systems().get("solve_check")
facts["roles"] = list(ROLES["solve_check"])
facts["trainable"] = "solve_check" in list(ROLES)
facts["rewards"] = sorted(
    [agent, k, v] for (agent, k), v in reward_function("solve_check")(transcript, "4", task).items()
)
facts["outside_the_copy"] = sorted(
    name for name, module in sys.modules.items()
    if name.split(".")[0] in {PACKAGES}
    and not str(getattr(module, "__file__", None) or ROOT).startswith(ROOT)
)
print(json.dumps(facts))
"""


def add_to_registry(path: Path, opening: str, line: str) -> None:
    """Add `line` as the last item of the tuple that opens with the line `opening`."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    (start,) = [k for k, text in enumerate(lines) if text.rstrip() == opening]
    end = next(k for k in range(start, len(lines)) if lines[k].rstrip() == ")")
    lines.insert(end, line + "\n")
    path.write_text("".join(lines), encoding="utf-8")


def files_of(root: Path) -> dict[str, bytes]:
    return {
        path.relative_to(root).as_posix(): path.read_bytes()
        for package in PACKAGES
        for path in sorted((root / package).rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }


def added_lines(before: bytes, after: bytes) -> tuple[list[str], list[str]]:
    """(lines added, lines removed) from `before` to `after`."""
    diff = list(difflib.ndiff(before.decode().splitlines(), after.decode().splitlines()))
    return [d[2:] for d in diff if d.startswith("+ ")], [d[2:] for d in diff if d.startswith("- ")]


def test_the_docs_say_exactly_what_this_test_writes() -> None:
    games, mas = (REPO / "docs" / name for name in ("games.md", "mas.md"))
    assert GAME in games.read_text(encoding="utf-8")
    assert '    "three_in_a_row",\n)' in games.read_text(encoding="utf-8")
    assert WORKFLOW in mas.read_text(encoding="utf-8")
    assert '`"mas.solve_check",` added to `SYSTEM_MODULES`' in mas.read_text(encoding="utf-8")


def test_a_game_and_a_workflow_are_each_one_file_and_one_registration_line(
    tmp_path: Path,
) -> None:
    original, tree = tmp_path / "original", tmp_path / "tree"
    for package in PACKAGES:  # a snapshot first: others may be editing the working tree
        shutil.copytree(REPO / package, original / package, ignore=SKIP)
    shutil.copytree(original, tree)

    # The addition, exactly as the docs say.
    (tree / GAME_FILE).write_text(GAME, encoding="utf-8")
    add_to_registry(tree / GAME_REGISTRY, "MODULES = (", '    "three_in_a_row",')
    (tree / WORKFLOW_FILE).write_text(WORKFLOW, encoding="utf-8")
    add_to_registry(tree / WORKFLOW_REGISTRY, "SYSTEM_MODULES = (", '    "mas.solve_check",')

    before, after = files_of(original), files_of(tree)
    touched = sorted(
        name for name in before.keys() | after.keys() if before.get(name) != after.get(name)
    )
    assert touched == sorted([GAME_FILE, GAME_REGISTRY, WORKFLOW_FILE, WORKFLOW_REGISTRY])
    assert set(after) - set(before) == {GAME_FILE, WORKFLOW_FILE}  # two new files...
    for registry in (GAME_REGISTRY, WORKFLOW_REGISTRY):  # ...and one line in each registry
        added, removed = added_lines(before[registry], after[registry])
        assert len(added) == 1 and removed == [], (registry, added, removed)

    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}
    probe = PROBE.replace("{PACKAGES}", repr(set(PACKAGES)))
    result = subprocess.run(
        [sys.executable, "-c", probe, str(tree)],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    facts = json.loads(result.stdout.strip().splitlines()[-1])
    assert facts["outside_the_copy"] == []

    # The game: listed, played against random from both seats, replayed and drawn.
    assert "three_in_a_row" in facts["games"] and "tic_tac_toe" in facts["games"]
    assert facts["records"] == 4
    assert facts["model_turns"] and all(legal and seen for legal, seen in facts["model_turns"])
    assert facts["titled"] == [True] * 4
    assert all(sum(returns) == 0 for returns in facts["returns"])  # zero-sum: won, lost or drawn
    assert facts["why"] == "" and facts["positions"] == facts["turns"] + 1
    assert facts["kinds"] == ["grid"] and facts["cells"] == 16 and facts["marks"] >= 5
    assert facts["drawn"]

    # The workflow: listed, run against the scripted server, trainable from its own file.
    assert facts["other_systems_imported"] == []  # found by its registry line alone
    assert facts["module"] == "mas.solve_check" and "solve_check" in facts["systems"]
    assert facts["agents"] == ["solver", "checker"]
    assert facts["final_answer"] == "Checked: \\boxed{4}."
    assert facts["roles"] == ["solver", "checker"] and facts["trainable"]
    assert facts["rewards"] == [["checker", 0, 1.0], ["solver", 0, 1.0]]


def test_a_game_that_declares_no_board_is_replayed_as_openspiel_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from dashboard.boards import board_html, positions_for
    from games import spec as specs

    plain = dataclasses.replace(specs.get_game("tic_tac_toe"), name="plain_grid", board=None)
    monkeypatch.setitem(specs._REGISTRY, "plain_grid", plain)
    turns = [{"seat": 0, "action": "<X(1,1)>", "legal": True}]
    positions, why = positions_for({"game": "plain_grid", "seed": 0, "turns": turns})
    assert why == "" and positions is not None
    assert [p["kind"] for p in positions] == ["text", "text"]
    assert positions[-1]["text"] == "...\n.x.\n..."
    html = board_html(positions[-1])
    assert 'data-board="plain_grid"' in html and "...\n.x.\n..." in html
