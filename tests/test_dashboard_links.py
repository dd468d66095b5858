"""The pieces behind the Inspector's links and the pages' defaults (issue 53, items 4, 6 and 7):
a state's policy-panel row read from what the seat was shown, checked against the game's own
prompts for every Kuhn and Leduc information state; the runs opened last and the longest-running
train run; the run scan's cache key; the app importing a page only when it is shown."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from core.branch_log import OBSERVATION_CHARS, clip_text
from dashboard import cache, defaults, serve
from dashboard.data.policy import _kuhn_rows, policy_row_label, policy_state_of
from dashboard.data.runs import RunEntry
from games.exploitability import state_title
from games.infostates import information_states, render_prompt
from games.spec import get_game

REPO = Path(__file__).resolve().parents[1]
PRIVATE = re.compile(r"\[Private: (\d+)\]")


def _observations(game: str, style: str) -> list[tuple[str, str]]:
    """(information state key, what the seat was shown as a branch log keeps it)."""
    spec = get_game(game)
    return [
        (s.key, clip_text(render_prompt(spec, s.history, style=style)[-1]["content"],
                          OBSERVATION_CHARS))
        for s in information_states(spec)
    ]  # fmt: skip


@pytest.mark.parametrize("style", ["compact", "full"])
def test_every_kuhn_state_is_read_back_from_its_prompt(style: str) -> None:
    spec = get_game("kuhn_poker")
    found = {key: policy_state_of("kuhn_poker", shown) for key, shown in _observations(
        "kuhn_poker", style)}  # fmt: skip
    assert found == {key: state_title(spec, key) for key in found}
    assert len(set(found.values())) == 12


@pytest.mark.parametrize("style", ["compact", "full"])
def test_every_leduc_state_is_read_back_as_its_private_cards_group(style: str) -> None:
    read = 0
    for key, shown in _observations("leduc_poker", style):
        card = "JQK"[int(PRIVATE.search(key).group(1)) // 2]
        got = policy_state_of("leduc_poker", shown)
        # The full style's first turn holds the rules: clipped, its card can be cut away.
        assert got == f"card {card}" or (style == "full" and got is None), (key, shown)
        read += got is not None
    assert read > 0.95 * len(information_states(get_game("leduc_poker")))


def test_other_games_and_unreadable_texts_have_no_policy_row() -> None:
    assert policy_state_of("tic_tac_toe", "card K; bets: none yet") is None
    assert policy_state_of("kuhn_poker", "a reply") is None
    assert policy_state_of(None, "") is None


def test_a_state_title_names_the_heatmaps_row() -> None:
    rows = {row.state: row.label for row in _kuhn_rows()}
    assert {title: policy_row_label("kuhn_poker", title) for title in rows} == rows
    assert policy_row_label("leduc_poker", "card J") == "card J"


def _entry(name: str, kind: str, started: str | None, ended: str | None) -> RunEntry:
    return RunEntry(name, Path(name), kind, None, started, ended, "completed", 1, {})


def test_the_default_run_is_the_last_opened_else_the_longest_running_train_run() -> None:
    now = datetime(2026, 11, 29, 12, tzinfo=UTC)
    runs = [  # newest first, as the scan lists them
        _entry("experiment/part", "train", "2026-11-29T11:00:00+00:00", "2026-11-29T11:03:00"),
        _entry("arena", "arena", "2026-11-29T09:00:00+00:00", "2026-11-29T11:00:00+00:00"),
        _entry("demo/train", "train", "2026-11-28T08:00:00+00:00", "2026-11-28T09:00:00+00:00"),
        _entry("running", "train", "2026-11-29T11:30:00+00:00", None),  # 30 minutes so far
        _entry("broken", "train", "not a time", None),
    ]
    assert defaults.default_index(runs, [], now) == 2  # one hour, the longest train run
    assert defaults.default_index(runs, ["gone", "running", "arena"], now) == 3
    assert defaults.default_index(runs[1:2], [], now) == 0  # no train run: the first
    assert defaults.running_seconds(runs[3], now) == 30 * 60
    assert defaults.running_seconds(runs[4], now) == 0.0


def test_the_state_file_keeps_the_runs_opened_last_per_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "cache" / "last-opened.json"
    first, second = tmp_path / "a", tmp_path / "b"
    assert defaults.recent_runs(first, state) == []
    for name in ("x", "y", "x"):
        defaults.remember(first, name, state)
    defaults.remember(second, "z", state)
    assert defaults.recent_runs(first, state) == ["x", "y"]
    assert defaults.recent_runs(second, state) == ["z"]
    for index in range(defaults.KEEP_RUNS + 3):
        defaults.remember(first, f"run-{index}", state)
    assert len(defaults.recent_runs(first, state)) == defaults.KEEP_RUNS
    written = state.stat().st_mtime_ns
    defaults.remember(first, f"run-{defaults.KEEP_RUNS + 2}", state)  # first already: no write
    assert state.stat().st_mtime_ns == written
    state.write_text("{not json")
    assert defaults.recent_runs(first, state) == []  # a broken file decides nothing
    defaults.remember(first, "x", state)
    assert json.loads(state.read_text()) == {str(first.resolve()): ["x"]}
    env = {defaults.STATE_ENV: str(state)}
    assert defaults.state_path(env) == state
    monkeypatch.setenv("MARS_CACHE_DIR", str(tmp_path))
    assert defaults.state_path({}) == tmp_path / "dashboard" / "last-opened.json"


def test_the_scan_is_keyed_on_the_folders_it_walks(tmp_path: Path) -> None:
    from core.runstore import RunDir

    before = cache.folder_stamps(tmp_path)
    run = RunDir.resolve(out=None, run_dir=tmp_path / "exp" / "part", kind="train", slug="t")
    run.start(command=["mars", "train"], config={}, model="tiny")
    added = cache.folder_stamps(tmp_path)
    assert added != before
    (run.path / "records.jsonl").write_text("")  # a file beside run.json: the scan is the same
    assert cache.folder_stamps(tmp_path) == cache.folder_stamps(tmp_path)
    stamped = dict(cache.folder_stamps(tmp_path))
    run.finish()  # run.json replaced in one rename: its folder's time moves
    assert dict(cache.folder_stamps(tmp_path))[str(run.path)] >= stamped[str(run.path)]
    (tmp_path / "exp" / "checkpoints").mkdir()  # never walked
    (tmp_path / ".hidden").mkdir()
    folders = {folder for folder, _ in cache.folder_stamps(tmp_path)}
    assert str(tmp_path / "exp" / "checkpoints") not in folders
    assert str(tmp_path / ".hidden") not in folders
    assert str(run.path) in folders


def test_the_app_imports_only_the_page_it_shows() -> None:
    app = (REPO / "dashboard" / "app.py").read_text(encoding="utf-8")
    imported = {
        node.module
        for node in ast.walk(ast.parse(app))
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert not any(module.startswith("dashboard.views") for module in imported)
    # Every page the sidebar offers is a module with a `render`, imported when it is shown.
    pages = re.search(r"PAGES = \{(.*?)\n\}", app, re.S)
    assert pages is not None
    modules = re.findall(r'": "(\w+)"', pages.group(1))
    assert len(modules) == 8
    code = (
        "import sys, importlib; "
        f"[importlib.import_module('dashboard.views.' + m).render for m in {modules!r}]; "
        "print('ok')"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert done.stdout.strip() == "ok", done.stderr
    # The server warms the first page's view (and no other page's) while it starts.
    warmed = [m for m in serve.FIRST_PAGE_MODULES if m.startswith("dashboard.views.")]
    assert warmed == ["dashboard.views.runs"]
    serve._warm_charts()  # the first page's chart builds outside a page (raises if it cannot)


def test_the_component_scan_is_skipped() -> None:
    from streamlit.components.v2 import manifest_scanner

    real = manifest_scanner.scan_component_manifests
    try:
        serve.skip_component_scan()
        assert manifest_scanner.scan_component_manifests() == []
    finally:
        manifest_scanner.scan_component_manifests = real
