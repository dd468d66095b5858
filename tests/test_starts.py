"""Start models by name (`mars tiny-model start`, an experiment's `starts:` and `--starts`): the
recipe and cache folder each resolves to, a built folder found and not rebuilt, a half-built
one never counted as built, and one tiny real build end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import run_mars_in_process

from core.errors import MarsError
from mars.orchestration.experiments import load_experiment
from mars.orchestration.experiments.api import ExperimentPlan, experiment
from mars.orchestration.experiments.parts import resolve_parts
from train_backend.pretrain.mas_start import RECIPE_FILE, WorkflowPretrainSettings
from train_backend.pretrain.starts import built_in, start_with


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MARS_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _record(folder: Path, settings: WorkflowPretrainSettings, base: Path) -> None:
    """A finished workflow build's recipe record, as build_start writes it last."""
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"weights")
    record = {"recipe": settings.model_dump(), "base": str(base)}
    (folder / RECIPE_FILE).write_text(json.dumps(record))


def test_a_start_is_built_only_when_its_folder_records_its_recipe(cache: Path) -> None:
    start = built_in("tiny_mas")
    assert start.folder == cache / "tiny-model-v1-format-mas"
    assert not start.is_built()
    start.folder.mkdir(parents=True)
    (start.folder / "model.safetensors").write_bytes(b"half")  # weights, no recipe: half built
    assert not start.is_built()
    (start.folder / "model.safetensors").unlink()
    start.folder.rmdir()
    _record(start.folder, WorkflowPretrainSettings(steps=7), cache / "tiny-model-v1")
    assert not start.is_built()  # another recipe
    start.folder.joinpath(RECIPE_FILE).unlink()
    start.folder.joinpath("model.safetensors").unlink()
    start.folder.rmdir()
    _record(start.folder, WorkflowPretrainSettings(), cache / "tiny-model-v1")
    assert start.is_built()


def test_a_changed_recipe_gets_a_folder_of_its_own(cache: Path) -> None:
    quick = built_in("tiny_mas_quick")
    assert quick.folder.name == "tiny-model-v1-format-test-mas-format"  # the tests' own build
    assert quick.settings.model_dump()["copy_steps"] == 0
    changed = start_with(built_in("tiny_mas"), {"steps": 3})
    assert changed.settings.model_dump()["steps"] == 3
    assert changed.folder.name.startswith("tiny-model-v1-format-mas-")
    assert changed.folder != built_in("tiny_mas").folder
    assert start_with(built_in("tiny_mas"), {"steps": 3}).folder == changed.folder  # stable
    assert start_with(built_in("tiny_mas"), {}).folder == built_in("tiny_mas").folder
    named = start_with(built_in("tiny_mas"), {"steps": 3}, "mine")
    assert named.folder.name == "tiny-model-v1-format-mine"
    with pytest.raises(MarsError, match="unknown mas start setting 'stepz'"):
        start_with(built_in("tiny_mas"), {"stepz": 3})
    with pytest.raises(MarsError, match="a folder name"):
        start_with(built_in("tiny_mas"), {}, "../elsewhere")
    with pytest.raises(MarsError, match="did you mean 'tiny_mas'"):
        built_in("tiny_mass")


def test_the_command_says_where_a_start_is_and_whether_it_is_built(
    cache: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _record(cache / "tiny-model-v1-format-mas", WorkflowPretrainSettings(), cache / "tiny-model-v1")
    assert run_mars_in_process(["tiny-model", "start", "tiny_mas", "--dry-run"], monkeypatch) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "tiny_mas (mas): built"
    assert lines[-1] == str(cache / "tiny-model-v1-format-mas")
    args = ["tiny-model", "start", "tiny_mas", "--set", "steps=3", "--dry-run"]
    assert run_mars_in_process(args, monkeypatch) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "tiny_mas (mas): not built" and '"steps": 3' in lines[1]
    args = ["tiny-model", "start", "tiny_mas", "--set", "copy_steps=-1"]
    assert run_mars_in_process(args, monkeypatch) == 2
    error = capsys.readouterr().err.strip()
    assert "copy_steps" in error and "\n" not in error
    assert run_mars_in_process(["tiny-model", "start"], monkeypatch) == 0
    assert "tiny_mas_quick" in capsys.readouterr().out


def _experiment_file(tmp_path: Path, starts: dict) -> Path:
    path = tmp_path / "exp.yaml"
    config = {"model": "${model:arith}", "workflow": "reasoner_tool", "steps": 2}
    path.write_text(
        yaml.safe_dump(
            {
                "name": "exp",
                "starts": starts,
                "parts": [{"name": "train", "run": "train-mas", "config": config}],
            }
        )
    )
    return path


def test_an_experiment_declares_a_workflow_start_by_its_kind(cache: Path, tmp_path: Path) -> None:
    path = _experiment_file(tmp_path, {"arith": {"kind": "mas", "steps": 5, "copy_steps": 0}})
    (part,) = resolve_parts(load_experiment(str(path)), tmp_path / "run", build=False)
    assert part.config is not None
    assert part.config["model"] == str(cache / "tiny-model-v1-format-exp-arith")
    # The MAS miniature's own recipe is that start's folder: built once for both.
    path = _experiment_file(tmp_path, {"arith": {"kind": "mas"}})
    (part,) = resolve_parts(load_experiment(str(path)), tmp_path / "run", build=False)
    assert part.config is not None
    assert part.config["model"] == str(cache / "tiny-model-v1-format-mas")
    for starts, message in [
        ({"arith": {"kind": "maas"}}, r"kind of start \(starts\.arith\.kind\) 'maas'.*'mas'"),
        ({"arith": {"kind": "mas", "games": ["kuhn_poker"]}}, r"starts\.arith\.games"),
        ({"arith": {"kind": "mas", "steps": -1}}, r"starts\.arith\.steps"),
    ]:
        path = _experiment_file(tmp_path, starts)
        with pytest.raises(MarsError, match=message) as info:
            load_experiment(str(path))
        assert "\n" not in str(info.value)


def test_the_starts_option_lists_each_start_the_parts_use_without_building(
    cache: Path, tmp_path: Path
) -> None:
    path = _experiment_file(tmp_path, {"arith": {"kind": "mas", "steps": 5}})
    result = experiment(ExperimentPlan(name=str(path), starts=True, dry_run=True))
    assert result.starts == {"arith": cache / "tiny-model-v1-format-exp-arith"}
    assert not (cache / "tiny-model-v1-format-exp-arith").exists()  # nothing built
    result = experiment(ExperimentPlan(name="marshal-mini", starts=True, dry_run=True))
    assert set(result.starts) == set(load_experiment("marshal-mini").starts)
    assert not cache.joinpath("tiny-model-v1").exists()  # not even the tiny model


@pytest.fixture
def tiny_cache(cache: Path) -> Path:
    """The temporary cache with the real tiny model in it (linked, built first when missing)."""
    import os

    from core.tiny_model import ensure_tiny_model

    cache_env = os.environ.pop("MARS_CACHE_DIR")
    try:
        tiny = ensure_tiny_model()
    finally:
        os.environ["MARS_CACHE_DIR"] = cache_env
    cache.mkdir(parents=True, exist_ok=True)
    (cache / tiny.name).symlink_to(tiny)
    return cache


def test_a_tiny_build_from_the_command_line_is_found_the_second_time(
    tiny_cache: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["tiny-model", "start", "tiny_mas", "--name", "small", "--quiet"]
    args += ["--set", "examples=4", "--set", "copy_steps=1", "--set", "steps=1"]
    assert run_mars_in_process(args, monkeypatch) == 0
    folder = Path(capsys.readouterr().out.splitlines()[-1])
    assert folder == tiny_cache / "tiny-model-v1-format-small"
    assert json.loads((folder / RECIPE_FILE).read_text())["recipe"]["steps"] == 1
    weights = (folder / "model.safetensors").stat()
    assert run_mars_in_process([a for a in args if a != "--quiet"], monkeypatch) == 0
    assert "built already" in capsys.readouterr().out
    assert (folder / "model.safetensors").stat().st_mtime_ns == weights.st_mtime_ns
    assert not [p for p in tiny_cache.iterdir() if p.name.startswith(".tiny-model-v1-format")]


def test_an_interrupted_build_leaves_nothing_that_counts_as_built(
    tiny_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import core.tiny_model

    start = start_with(built_in("tiny_mas"), {"examples": 4, "copy_steps": 1, "steps": 1}, "cut")

    def interrupted(staging: Path, out_dir: Path, *, overwrite: bool) -> None:
        assert (staging / RECIPE_FILE).is_file()  # saved whole, about to be renamed into place
        raise KeyboardInterrupt

    monkeypatch.setattr(core.tiny_model, "move_into_place", interrupted)
    with pytest.raises(KeyboardInterrupt):
        start.build()
    assert not start.folder.exists() and not start.is_built()
    assert not [p for p in tiny_cache.iterdir() if p.name.startswith(".tiny-model-v1-format")]


def test_a_run_of_some_parts_builds_only_the_starts_they_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`mars experiment marshal-mini --only train-kuhn` builds the poker start alone: the board
    start (half an hour on this CPU) is not built for a part that does not run."""
    from mars.orchestration.experiments import parts
    from mars.orchestration.experiments.runner import run_experiment

    built: list[str] = []

    def start_path(experiment: object, name: str, *, build: bool) -> Path:
        if build:
            built.append(name)
        return tmp_path / "starts" / name

    monkeypatch.setattr(parts, "start_path", start_path)
    ran: list[list[str]] = []

    def runner(argv: list[str], log: Path, timeout: float | None) -> int:
        ran.append(argv)
        return 0

    loaded = load_experiment("marshal-mini")
    root = tmp_path / "exp"
    run_experiment(loaded, root, source=tmp_path, only=["train-kuhn"], runner=runner, log=print)
    assert built == ["poker"]
    assert len(ran) == 1 and str(tmp_path / "starts" / "poker") in (
        (root / "configs" / "train-kuhn.yaml").read_text()
    )


def test_two_unbuilt_starts_are_built_side_by_side_then_found(
    tiny_cache: Path, tmp_path: Path
) -> None:
    """`mars experiment` builds the starts its parts use in processes of their own, at once
    (two cores here): each ends built with its own recipe, and a second run builds nothing."""
    from mars.orchestration.experiments.parts import build_starts_side_by_side, experiment_start

    recipe = {"kind": "mas", "examples": 4, "copy_steps": 1}
    path = tmp_path / "exp.yaml"
    config = {"workflow": "reasoner_tool", "steps": 2}
    parts = [
        {"name": name, "run": "train-mas", "config": {**config, "model": f"${{model:{name}}}"}}
        for name in ("a", "b")
    ]
    starts = {"a": {**recipe, "steps": 1}, "b": {**recipe, "steps": 2}}
    path.write_text(yaml.safe_dump({"name": "exp", "starts": starts, "parts": parts}))
    loaded = load_experiment(str(path))
    assert build_starts_side_by_side(loaded, tmp_path / "run", only=["a"]) == []  # one: in line
    assert build_starts_side_by_side(loaded, tmp_path / "run") == ["a", "b"]
    for name, steps in (("a", 1), ("b", 2)):
        start = experiment_start(loaded, name)
        assert start.is_built()
        assert json.loads((start.folder / RECIPE_FILE).read_text())["recipe"]["steps"] == steps
    assert build_starts_side_by_side(loaded, tmp_path / "run") == []
