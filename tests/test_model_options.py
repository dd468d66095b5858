"""The model and sampling options are declared once (core.model_options) and are the same options,
with documented defaults, in every command that talks to a model; `mars loop` builds the command
lines it runs from the same objects."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import typer
from conftest import REPO

from core.model_options import ModelOptions, SamplingOptions, as_argv
from mars.main import app, register_commands
from mars.orchestration.loop.checkpoints import Checkpoint
from mars.orchestration.loop.commands import resolve_settings, sub_command
from mars.orchestration.loop.spec import parse_spec

MODEL_COMMANDS = ("eval", "arena", "selfplay", "exploitability", "failures")
SAMPLING_COMMANDS = ("eval", "arena", "selfplay", "exploitability")


@pytest.fixture(scope="module")
def commands() -> dict:
    register_commands()
    return typer.main.get_command(app).commands


def panel(command, name: str) -> dict[str, object]:
    return {p.name: p for p in command.params if getattr(p, "rich_help_panel", None) == name}


def test_every_command_that_talks_to_a_model_has_every_model_and_sampling_option(
    commands,
) -> None:
    fields = {spec.name for spec in dataclasses.fields(ModelOptions)}
    for name in MODEL_COMMANDS:
        assert set(panel(commands[name], "Model")) == fields, name
    for name in SAMPLING_COMMANDS:
        assert set(panel(commands[name], "Sampling")) == {
            spec.name for spec in dataclasses.fields(SamplingOptions)
        }
    flags = {p.opts[0] for p in panel(commands["failures"], "Model").values()}
    assert "--judge-model" in flags and "--model" not in flags  # the one renamed flag


def _documented_defaults() -> dict[str, dict[str, str]]:
    text = (REPO / "docs" / "run-format.md").read_text(encoding="utf-8")
    section = text.split("## Model and sampling options", 1)[1]
    rows = [line for line in section.splitlines() if line.startswith("| `--")]
    header = next(line for line in section.splitlines() if line.startswith("| option |"))
    columns = [cell.strip() for cell in header.strip("|").split("|")][1:]
    table: dict[str, dict[str, str]] = {column: {} for column in columns}
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        flag = re.fullmatch(r"`(--[a-z-]+)`", cells[0]).group(1)
        for column, cell in zip(columns, cells[1:], strict=True):
            table[column][flag] = cell
    return table


def test_each_commands_defaults_are_the_documented_ones(commands) -> None:
    documented = _documented_defaults()
    for name in MODEL_COMMANDS:
        params = {**panel(commands[name], "Model"), **panel(commands[name], "Sampling")}
        for flag, cell in documented[name].items():
            param = params.get(flag.removeprefix("--").replace("-", "_"))
            shown = "-" if param is None else str(param.default)
            assert shown == cell, (name, flag)
    loop = parse_spec("eval:gsm8k:single:1")
    model, sampling = ModelOptions(), SamplingOptions()
    actual_loop = {
        "--temperature": str(loop.temperature),
        "--top-p": str(loop.top_p),
        "--max-tokens": "the checkpoint's" if loop.max_tokens is None else str(loop.max_tokens),
        "--seed": str(sampling.seed),
        "--concurrency": str(loop.concurrency),
        "--timeout": str(model.timeout),
        "--max-retries": str(model.max_retries),
        "--backend": next(p.default for p in commands["loop"].params if p.name == "backend"),
    }
    assert documented["loop"] == actual_loop


def _received(command, argv: list[str]) -> tuple[ModelOptions, SamplingOptions]:
    """What the command's own parser makes of `argv`: its option groups."""
    context = command.make_context(command.name, list(argv), resilient_parsing=False)
    values = context.params
    model = ModelOptions(**{f.name: values[f.name] for f in dataclasses.fields(ModelOptions)})
    sampling = SamplingOptions(
        **{f.name: values[f.name] for f in dataclasses.fields(SamplingOptions)}
    )
    return model, sampling


def test_options_turned_into_flags_come_back_as_the_same_options(commands) -> None:
    model = ModelOptions(
        model="m", base_url="http://127.0.0.1:1/v1", concurrency=3, timeout=2.5, cache=Path("c")
    )
    sampling = SamplingOptions(temperature=0.7, top_p=0.9, max_tokens=17, seed=5)
    argv = ["--suite", "gsm8k", *as_argv(model), *as_argv(sampling)]
    assert _received(commands["eval"], argv) == (model, sampling)


@pytest.mark.parametrize(
    ("item", "command"),
    [("eval:gsm8k:single:2", "eval"), ("arena:kuhn_poker:random:4", "arena"),
     ("exploit:kuhn_poker:2", "exploitability")],
)  # fmt: skip
def test_the_loop_builds_each_command_line_from_the_same_option_objects(
    commands, tmp_path: Path, item: str, command: str
) -> None:
    spec = parse_spec(item, temperature=0.3, max_tokens=40, concurrency=5)
    checkpoint = Checkpoint(step=1, path=tmp_path)
    settings = resolve_settings(spec, checkpoint)
    built = sub_command(
        spec.evals[0], spec, settings, base_url="http://127.0.0.1:1/v1", model="ckpt",
        run_dir=tmp_path / "run",
    )  # fmt: skip
    argv = built.argv[built.argv.index(command) + 1 :]
    model, sampling = _received(commands[command], argv)
    assert (model.model, model.base_url, model.concurrency) == ("ckpt", "http://127.0.0.1:1/v1", 5)
    assert (sampling.temperature, sampling.max_tokens, sampling.top_p) == (0.3, 40, 1.0)
