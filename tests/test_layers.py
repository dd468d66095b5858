"""Imports point one way: each package imports only the layers below it (docs/architecture.md).

    core                       the ground floor: errors, endpoint, servers, run store, files,
                               checkpoints, stats, tiny model; imports nothing of ours
    harness                    -> core (suites, graders, evaluation, MAST analysis, sandbox)
    games                      -> core
    mas                        -> core, harness
    train_backend              -> core, harness, games, mas
    dashboard                  -> core, harness
    mars                       -> anything: the command line, the composition root on top

Every import counts, the ones inside functions and under TYPE_CHECKING too: a type is a
dependency for whoever reads the code.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ALLOWED = {
    "core": {"core"},
    "harness": {"core", "harness"},
    "games": {"core", "games"},
    "mas": {"core", "harness", "mas"},
    "train_backend": {"core", "harness", "games", "mas", "train_backend"},
    "dashboard": {"core", "harness", "dashboard"},
}
OURS = {*ALLOWED, "mars"}
# Game replays redraw each position with OpenSpiel: the dashboard's one reach into a game layer,
# imported when the first replay is drawn (docs/dashboard.md).
EXCEPTIONS = {("dashboard/boards.py", "games.positions")}


def imported_modules(path: Path) -> set[str]:
    modules = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            modules |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module)
    return modules


def test_every_import_goes_down_the_layers() -> None:
    upward = []
    for layer, allowed in ALLOWED.items():
        for path in sorted((REPO / layer).rglob("*.py")):
            relative = path.relative_to(REPO).as_posix()
            for module in imported_modules(path):
                top = module.split(".")[0]
                if top in OURS and top not in allowed and (relative, module) not in EXCEPTIONS:
                    upward.append(f"{relative} imports {module}")
    assert upward == []


def test_the_command_line_is_the_only_room_that_sees_every_layer() -> None:
    seen = set()
    for path in (REPO / "mars").rglob("*.py"):
        seen |= {module.split(".")[0] for module in imported_modules(path)}
    assert {"mas", "games", "train_backend"} <= seen  # it composes them; nothing below does
