"""core.checkpoints: a folder is a checkpoint when it is `step_N/` with checkpoint.json."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.checkpoints import (
    CHECKPOINT_FILE,
    complete_checkpoints,
    read_checkpoint,
    step_dir_name,
    step_of,
)
from core.errors import MarsError
from mars.orchestration.loop import checkpoints_folder
from mars.orchestration.loop import complete_checkpoints as loop_checkpoints
from train_backend.local.checkpoint import list_checkpoints


def test_only_whole_step_folders_are_checkpoints(tmp_path: Path) -> None:
    root = tmp_path / "run" / "checkpoints"
    for name in ("step_10", "step_2", ".step_40.tmp-7", "step_x", "step_5", "global_step_3"):
        (root / name).mkdir(parents=True)
    for name in ("step_10", "step_2", ".step_40.tmp-7", "step_x", "global_step_3"):
        (root / name / CHECKPOINT_FILE).write_text('{"step": 1}')
    # step_5 has no checkpoint.json yet: a save under way, not a checkpoint
    expected = [(2, root / "step_2"), (10, root / "step_10")]
    assert complete_checkpoints(root) == expected
    assert list_checkpoints(tmp_path / "run") == expected
    assert checkpoints_folder(tmp_path / "run") == root
    assert [(c.step, c.path) for c in loop_checkpoints(root)] == expected
    assert complete_checkpoints(tmp_path / "missing") == []
    assert step_of(step_dir_name(7)) == 7 and step_of("step_07x") is None


def test_an_unreadable_checkpoint_file_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / CHECKPOINT_FILE).write_text("[1, 2]")
    with pytest.raises(MarsError, match="not a JSON object"):
        read_checkpoint(tmp_path)
    (tmp_path / CHECKPOINT_FILE).write_text('{"step": 3}')
    assert read_checkpoint(tmp_path) == {"step": 3}
