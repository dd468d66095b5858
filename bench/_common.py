"""Helpers shared by the bench scripts: a scripted server in its own process, JSON result lines,
and the `--dry-run` every bench has (its commands and configs checked, nothing run)."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import shlex
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from core.errors import MarsError
from core.names import counted

T = TypeVar("T")
SCRIPTED_SERVER = "harness.testing.scripted_server"
GSM8K_FILE = Path("gsm8k") / "test.jsonl"


def local_gsm8k() -> Path:
    """GSM8K's test file in the first local data root that holds it (`$MARS_DATA_DIR`, then the
    cache: `mars data list`); the benches that ask scripted servers questions read it."""
    from harness.benchmarks.sources import candidate_roots

    for _, root in candidate_roots(None):
        if (root / GSM8K_FILE).is_file():
            return root / GSM8K_FILE
    raise MarsError(
        "no local GSM8K test file: set MARS_DATA_DIR to a folder of the test sets, or run "
        "`mars data fetch` on a machine with internet (the benches download nothing)"
    )


def scripted_server_command(
    delay_s: float,
    text: str | None = None,
    timeline: Path | None = None,
    slots: int | None = None,
) -> list[str]:
    """The scripted OpenAI-compatible server's command line; it prints its port first."""
    command = [sys.executable, "-m", SCRIPTED_SERVER, "--delay", str(delay_s)]
    if text is not None:
        command += ["--text", text]
    if timeline is not None:
        command += ["--timeline", str(timeline)]
    if slots is not None:
        command += ["--slots", str(slots)]
    return command


@contextlib.contextmanager
def scripted_server_process(delay_s: float, text: str | None = None) -> Iterator[str]:
    """Start the scripted server as a separate process (so its CPU is not counted as ours)."""
    process = subprocess.Popen(
        scripted_server_command(delay_s, text), stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline())
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        process.terminate()
        process.wait(10)


def eval_command(
    base_url: str, run_dir: Path, questions: int, concurrency: int, *extra: str
) -> list[str]:
    """`mars eval` of the first GSM8K questions against a scripted server, quiet."""
    return [sys.executable, "-m", "mars", "eval", "--suite", "gsm8k", "--limit", str(questions),
            *extra, "--concurrency", str(concurrency), "--base-url", base_url,
            "--model", "scripted", "--run-dir", str(run_dir), "--quiet",
            "--data-dir", str(local_gsm8k().parents[1])]  # fmt: skip


def train_mas_command(config_file: Path, run_dir: Path, *extra: str, threads: int = 1) -> list[str]:
    """`mars train-mas` on a config file, quiet, as the training benches launch it."""
    return [sys.executable, "-m", "mars", "train-mas", "--config", str(config_file),
            "--run-dir", str(run_dir), "--threads", str(threads), "--quiet", *extra]  # fmt: skip


def report(
    metric: str, value: float, target: float, *, lower_is_better: bool = True, **extra: object
) -> None:
    met = value <= target if lower_is_better else value >= target
    print(
        json.dumps(
            {"metric": metric, "value": round(value, 4), "target": target, "met": met, **extra}
        )
    )


# --- the dry run -------------------------------------------------------------------------------

# Placeholders for the port and URL of a server a dry run does not start.
DRY_RUN_PORT = 8000
DRY_RUN_URL = f"http://127.0.0.1:{DRY_RUN_PORT}/v1"


def add_dry_run(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="check every command line and config the bench would run; run nothing",
    )


class DryRun:
    """What a bench's `--dry-run` checked, counted by kind for its one summary line. Every check
    goes through the code the real run goes through (mars's own parser, pydantic, the MAS option
    probe, the game and suite registries); a refusal is a MarsError."""

    def __init__(self) -> None:
        self.checked: Counter[str] = Counter()
        self.notes: list[str] = []

    def count(self, kind: str, n: int = 1) -> None:
        self.checked[kind] += n

    def note(self, text: str) -> None:
        """Something the real run needs that is not a refusal (an optional peer tool missing)."""
        self.notes.append(text)

    def config(self, build: Callable[[], T], kind: str = "config") -> T:
        """`build()`, a config object (its validation a one-line refusal), counted."""
        from pydantic import ValidationError

        from core.settings_files import settings_error

        try:
            built = build()
        except ValidationError as exc:
            raise settings_error(exc, kind) from None
        self.count(kind)
        return built

    def mars(self, command: Sequence[str]) -> None:
        """A `mars ...` command line (or `python -m mars ...`) through mars's own parser."""
        from mars.command_check import check_command_line

        words = list(command)
        if words[1:3] == ["-m", "mars"]:
            words = words[3:]
        check_command_line(words)
        self.count("command")

    def module(self, command: Sequence[str]) -> None:
        """A `python -m MODULE ...` command line: the module must be importable."""
        import importlib.util

        name = command[2]
        if importlib.util.find_spec(name) is None:
            raise MarsError(f"{shlex_join(command)}: no module {name}")
        self.count("command")

    def script(self, command: Sequence[str], parser: argparse.ArgumentParser) -> None:
        """A `python SCRIPT ...` command line: the script exists and `parser` (the script's own)
        accepts its arguments."""
        script = Path(command[1])
        if not script.is_file():
            raise MarsError(f"{shlex_join(command)}: no script {script}")
        errors = io.StringIO()
        try:
            with contextlib.redirect_stderr(errors):
                parser.parse_args(list(command[2:]))
        except SystemExit:
            lines = errors.getvalue().strip().splitlines() or ["refused"]
            raise MarsError(f"{shlex_join(command)}: {lines[-1]}") from None
        self.count("command")

    def program(self, command: Sequence[str]) -> None:
        """Another program's command line: the program must be found."""
        if shutil.which(command[0]) is None:
            raise MarsError(f"{shlex_join(command)}: no program {command[0]}")
        self.count("command")

    def summary(self) -> str:
        kinds = [counted(n, kind) for kind, n in self.checked.items()]
        listed = ", ".join(kinds[:-1]) + " and " + kinds[-1] if len(kinds) > 1 else "".join(kinds)
        line = f"dry run: {listed or 'nothing'} checked"
        return line + "".join(f"; {note}" for note in self.notes)


def shlex_join(command: Sequence[str]) -> str:
    return shlex.join(str(word) for word in command)


def run_dry(check: Callable[[DryRun], None]) -> None:
    """Run a bench's dry-run `check`; print what it checked, or exit non-zero with one line."""
    dry = DryRun()
    try:
        check(dry)
    except MarsError as exc:
        raise SystemExit("dry run refused: " + " ".join(str(exc).split("\n"))) from None
    print(dry.summary())


def gsm8k_file(dry: DryRun) -> Path:
    """The local GSM8K test file the scripted-server benches ask questions from."""
    path = local_gsm8k()
    dry.count("data file")
    return path


def suite(dry: DryRun, name: str) -> Any:
    """The suite registry's `name`; a note when no local root holds its data (the real run
    then reads the hub)."""
    from harness.benchmarks import get_suite
    from harness.benchmarks.sources import candidate_roots

    found = get_suite(name)
    roots = [root for _, root in candidate_roots(None)]
    if not any((root / found.local.relative_path).is_file() for root in roots):
        dry.note(f"no local {name} data: the real run reads it from the hub")
    dry.count("suite")
    return found


def tree_rollout(dry: DryRun, game: str, args: argparse.Namespace) -> None:
    """A tree-sampled rollout bench's settings (`--model`, `--games`, `--branches`; compact
    prompts, all-actions branches), checked as the CPU trainer checks the same settings of a
    training config (its tree settings among them), its episode options built from them."""
    from train_backend.config import TrainConfig
    from train_backend.local.trainer import check_config, episode_options
    from train_backend.pretrain.build import SELFPLAY_START_NAME

    settings = {
        "model": start_model(dry, SELFPLAY_START_NAME, args.model),
        "games": [game],
        "estimator": "at_grpo",
        "prompt_style": "compact",
        "games_per_step": args.games,
        "tree": {"branches": args.branches, "all_actions": True},
    }
    config = dry.config(lambda: TrainConfig.for_local(**settings), "rollout config")
    dry.count("game", len(check_config(config)))
    episode_options(config)


def has_names(dry: DryRun, owner: Any, names: Sequence[str], kind: str) -> None:
    """`owner` (a module or class) has every attribute the bench calls or patches by name."""
    missing = [name for name in names if not hasattr(owner, name)]
    if missing:
        label = getattr(owner, "__name__", str(owner))
        raise MarsError(f"{label} has no {', '.join(missing)}: the bench uses it")
    dry.count(kind, len(names))


def dashboard_pages(dry: DryRun, pages: Sequence[str]) -> None:
    """Each `?page=` slug the bench opens is a page of the dashboard (dashboard/views)."""
    import importlib.util

    for page in pages:
        if importlib.util.find_spec(f"dashboard.views.{page}") is None:
            raise MarsError(f"the dashboard has no page {page!r}")
    dry.count("page", len(pages))


def int_list(text: str, flag: str) -> list[int]:
    """`0,1,2` -> [0, 1, 2]; one line for anything else."""
    try:
        return [int(item) for item in text.split(",")]
    except ValueError:
        raise MarsError(f"{flag}: expected comma-separated integers, got {text!r}") from None


def game_specs(dry: DryRun, names: Sequence[str]) -> list[Any]:
    """The game registry's specs of `names` (an unknown name refused)."""
    from games.spec import get_game

    specs = [get_game(name) for name in names]
    dry.count("game", len(specs))
    return specs


def workflow_config(dry: DryRun, data: dict[str, Any]) -> Any:
    """A `mars train-mas --config` file's settings (a YAML round trip) as that command checks
    them before training (`mars.api.train_mas.checked_config`)."""
    import yaml

    from mars.api.train_mas import checked_config

    config = checked_config(yaml.safe_load(yaml.safe_dump(data)))
    dry.count("workflow config")
    return config


def start_model(dry: DryRun, name: str, given: str | None = None) -> str:
    """The model a bench starts from: `given` (a `--model` folder), else where the start model
    of cache name `name` lies (`ensure_*(name=name)`; a dry run builds none)."""
    from train_backend.pretrain.build import default_pretrained_dir

    if given is not None:
        if not Path(given).is_dir():
            raise MarsError(f"--model {given}: no model folder there")
        return given
    folder = default_pretrained_dir(name)
    if not folder.is_dir():
        dry.note(f"the start model {folder.name} is built on first use (minutes)")
    return str(folder)
