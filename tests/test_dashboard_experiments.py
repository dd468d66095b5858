"""The Experiments page: each `mars experiment` folder under the root, its parts' state and the
report it wrote."""

from __future__ import annotations

import json
from pathlib import Path

from dashboard_apptest import page_opener

from dashboard.data.experiments import find_experiments, parts_table, report_text

REPORT = "# MARSHAL in miniature\n\n| game | start | trained | change |\n|---|---|---|---|\n"


def _experiment(folder: Path, *, report: bool) -> None:
    folder.mkdir(parents=True)
    parts = {
        "train-kuhn": {"name": "train-kuhn", "status": "completed", "wall_s": 503.0,
                       "attempts": 1, "exit_code": 0},
        "eval-kuhn": {"name": "eval-kuhn", "status": "failed", "wall_s": 61.0, "attempts": 2,
                      "exit_code": 1},
    }  # fmt: skip
    state = {"name": "marshal-mini", "experiment": {"title": "MARSHAL in miniature"}}
    (folder / "experiment.json").write_text(json.dumps({**state, "parts": parts}))
    if report:
        (folder / "report.md").write_text(REPORT + "| Kuhn | 0.46 | 0.14 | -0.32* |\n")


def test_experiments_are_found_with_their_parts_and_report(tmp_path: Path) -> None:
    _experiment(tmp_path / "experiments" / "marshal-mini", report=True)
    _experiment(tmp_path / "experiments" / "other", report=False)
    (tmp_path / "experiments" / "marshal-mini" / "eval-kuhn").mkdir()  # a part: not searched
    found = find_experiments(tmp_path)
    assert [entry.name for entry in found] == ["experiments/marshal-mini", "experiments/other"]
    table = parts_table(found[0].state)
    assert table.to_dict("records") == [
        {"part": "train-kuhn", "status": "completed", "attempts": 1, "minutes": 8.4,
         "exit code": 0},
        {"part": "eval-kuhn", "status": "failed", "attempts": 2, "minutes": 1.0, "exit code": 1},
    ]  # fmt: skip
    assert "| Kuhn | 0.46 | 0.14 | -0.32* |" in (report_text(tmp_path, found[0]) or "")
    assert report_text(tmp_path, found[1]) is None


def test_the_page_shows_the_parts_and_the_report(tmp_path: Path) -> None:
    _experiment(tmp_path / "experiments" / "marshal-mini", report=True)
    with page_opener(tmp_path) as open_page:
        page = open_page("Experiments", via="url")
        assert [s.value for s in page.subheader] == ["MARSHAL in miniature"]
        (frame,) = [table.value for table in page.dataframe]
        assert list(frame["part"]) == ["train-kuhn", "eval-kuhn"]
        assert any("| Kuhn | 0.46 | 0.14 | -0.32* |" in m.value for m in page.markdown)
        empty = open_page("Experiments", runs_root=tmp_path / "nothing-here")
        assert any("no experiment yet" in info.value for info in empty.info)
