"""Imports point one way: each layer imports only the layers below it (docs/architecture.md).

    core                       the ground floor: errors, endpoint, servers, run store, files,
                               checkpoints, stats, tiny model; imports nothing of ours
    harness                    -> core (suites, graders, evaluation, MAST analysis, sandbox)
    games                      -> core
    mas                        -> core, harness
    train_backend              -> core, harness, games, mas
    dashboard                  -> core, harness (and games, to redraw replays and solve poker)
    mars.api                   -> all of the above: the library API, the use cases
    mars.commands              -> mars.api and below: the command line, thin
    mars (the program)         -> anything: mars.main, the `mars` facade, mars.command_check and
                                  mars.orchestration (the loop, experiments and demo, which run
                                  other commands as `python -m mars ...`)

Every import counts, the ones inside functions and under TYPE_CHECKING too: a type is a
dependency for whoever reads the code. So do the links an import cannot show: a subprocess
started as `python -m MODULE` and a module named in a string (`importlib.import_module(NAME)`,
a constant naming a module to start).
"""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BELOW_MARS = {"core", "harness", "games", "mas", "train_backend", "dashboard"}
ALLOWED = {
    "core": {"core"},
    "harness": {"core", "harness"},
    "games": {"core", "games"},
    "mas": {"core", "harness", "mas"},
    "train_backend": {"core", "harness", "games", "mas", "train_backend"},
    "dashboard": {"core", "harness", "games", "dashboard"},
    "mars.api": BELOW_MARS | {"mars.api"},
    "mars.commands": BELOW_MARS | {"mars.api", "mars.commands"},
}
PROGRAM = "mars"  # mars.main, mars/__init__, mars.command_check, mars.orchestration: anything
# Game replays redraw each position with OpenSpiel through games.positions only; the poker
# panels read the solver (docs/dashboard.md).
DASHBOARD_GAMES = ("games.positions", "games.solvers")


def layer_of_module(module: str) -> str | None:
    """The layer a dotted module name belongs to (None: not ours)."""
    top = module.split(".")[0]
    if top in BELOW_MARS:
        return top
    if top != "mars":
        return None
    for sub in ("mars.api", "mars.commands"):
        if module == sub or module.startswith(sub + "."):
            return sub
    return PROGRAM


def layer_of_path(path: Path) -> str | None:
    return layer_of_module(".".join(path.relative_to(REPO).with_suffix("").parts))


def is_our_module(name: str) -> bool:
    """A dotted name that is one of our modules or packages, as a file here says."""
    if layer_of_module(name) is None:
        return False
    base = REPO.joinpath(*name.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def imported_modules(tree: ast.AST) -> set[str]:
    modules = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module)
    return modules


def named_modules(tree: ast.AST) -> set[str]:
    """Modules named in strings: the target after a "-m" in a sequence or a call's arguments,
    and any string constant that is exactly one of our dotted module names."""
    named = set()
    for node in ast.walk(tree):
        items: list[ast.expr] = []
        if isinstance(node, ast.List | ast.Tuple):
            items = list(node.elts)
        elif isinstance(node, ast.Call):
            items = list(node.args)
        for first, second in itertools.pairwise(items):
            if _text(first) == "-m" and _text(second):
                named.add(_text(second).split()[0])
        text = _text(node) if isinstance(node, ast.Constant) else ""
        if "." in text and is_our_module(text):
            named.add(text)
    return named


def _text(node: ast.expr) -> str:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else ""


def allowed(layer: str, target: str) -> bool:
    return layer == PROGRAM or target in ALLOWED[layer]


def upward_links() -> list[str]:
    found = []
    for path in sorted(REPO.glob("*/**/*.py")):
        layer = layer_of_path(path)
        if layer is None:
            continue
        relative = path.relative_to(REPO).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        links = [("imports", m) for m in imported_modules(tree)]
        links += [("names", m) for m in named_modules(tree)]
        for how, module in links:
            target = layer_of_module(module)
            if target is None or allowed(layer, target):
                continue
            if layer == "dashboard" and module.startswith(DASHBOARD_GAMES):
                continue
            found.append(f"{relative} {how} {module}")
    return found


def test_every_import_and_named_module_goes_down_the_layers() -> None:
    assert upward_links() == []


def test_the_check_sees_an_upward_subprocess_target_and_a_module_string(tmp_path) -> None:
    code = (
        "import importlib, subprocess, sys\n"
        "subprocess.run([sys.executable, '-m', 'mars', 'eval'])\n"
        "importlib.import_module('train_backend.local.trainer')\n"
        "ESTIMATORS = 'train_backend.advantage'\n"
    )
    tree = ast.parse(code)
    assert named_modules(tree) == {
        "mars",
        "train_backend.local.trainer",
        "train_backend.advantage",
    }
    layers = {layer_of_module(m) for m in named_modules(tree)}
    assert not any(allowed("core", layer) for layer in layers)
    assert allowed("mars.commands", "train_backend") and not allowed("mars.api", "mars.commands")


def test_the_program_is_the_only_room_that_sees_every_layer() -> None:
    seen = set()
    for path in (REPO / "mars").rglob("*.py"):
        seen |= {layer_of_module(m) for m in imported_modules(ast.parse(path.read_text()))}
    assert {"mas", "games", "train_backend", "mars.api", "mars.commands"} <= seen
