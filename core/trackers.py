"""Experiment trackers: what a run writes to metrics.jsonl (a loop: its learning-curve rows),
sent as well to Weights & Biases, TensorBoard or MLflow, with the run's config.

`--logger console,wandb,tensorboard,mlflow` (or `logger:` in a training config or an
experiment file) names them; `check_loggers` refuses an unknown name, or one whose package is
not installed, in one line before anything runs. `open_trackers(names, run_dir, config)` gives
a `Trackers`: `.log(metrics, step)` after each row, `.close()` at the end (or a `with` block,
which records a failed or interrupted run as such). Each library is imported only when chosen.

Where each one writes, with no network unless asked for:

    RUN/tensorboard/     TensorBoard event files (`tensorboard --logdir RUN/tensorboard`)
    RUN/wandb/           W&B's run folder: offline unless WANDB_MODE says otherwise
                         (`wandb sync RUN/wandb/offline-run-*` uploads it later)
    RUN/mlruns/          an MLflow file store, unless MLFLOW_TRACKING_URI names another (in a
                         file store a metric's `/` becomes `.`: `mlflow_metric_name`)

`console` logs nothing more here: every command prints its own progress lines (on verl it is
verl's console logger). A metric is every number of the row (nested objects flattened with
`/`, booleans as 0/1); strings, lists and nulls stay in metrics.jsonl only. Each attempt of a
resumed run is a run of its own in W&B and MLflow (the same name and group); TensorBoard drops
the events of steps the resumed run makes again.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from core.errors import MarsError
from core.names import unknown_name

LOGGERS = ("console", "wandb", "tensorboard", "mlflow")
NO_LOGGERS = ("none",)  # `--logger none`: none at all (e.g. to drop a resumed run's)
# logger -> (the module it needs, the mars-harness extra that installs it)
PACKAGES = {
    "wandb": ("wandb", "wandb"),
    "tensorboard": ("tensorboard", "tensorboard"),
    "mlflow": ("mlflow", "mlflow"),
}
TENSORBOARD_DIR, MLFLOW_DIR = "tensorboard", "mlruns"  # in the run folder (W&B: its wandb/)
# The W&B project and MLflow experiment, unless WANDB_PROJECT or MLFLOW_EXPERIMENT_NAME is set
DEFAULT_PROJECT = "mars"


def missing_package(name: str) -> tuple[str, str] | None:
    """(package, extra) when logger `name` needs a package that is not installed, else None."""
    if name not in PACKAGES:
        return None
    module, extra = PACKAGES[name]
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a module set to None in sys.modules, a broken parent
        found = False
    return None if found else (module, extra)


def check_loggers(names: Iterable[str], *, flag: str = "--logger") -> tuple[str, ...]:
    """The loggers named, each once, in order: an unknown name, or one whose package is missing,
    is refused in one line (`flag` starts the second: "--logger wandb needs ...")."""
    chosen = tuple(dict.fromkeys(str(name).strip().lower() for name in names if str(name).strip()))
    if chosen in ((), NO_LOGGERS):
        return ()
    for name in chosen:
        if name not in LOGGERS:
            raise MarsError(unknown_name("logger", name, LOGGERS))
    for name in chosen:
        missing = missing_package(name)
        if missing is not None:
            package, extra = missing
            lead = f"{flag} {name}" if flag else name
            raise MarsError(
                f"{lead} needs the {package} package: pip install 'mars-harness[{extra}]'"
            )
    return chosen


def scalars(row: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """The numbers of a metrics row, nested objects flattened with `/`; `step` left out."""
    out: dict[str, float] = {}
    for key, value in row.items():
        name = f"{prefix}{key}"
        if not prefix and key == "step":
            continue
        if isinstance(value, Mapping):
            out.update(scalars(value, f"{name}/"))
        elif isinstance(value, bool):
            out[name] = float(value)
        elif isinstance(value, int | float):
            out[name] = value
    return out


def flat_config(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """`config` as `a.b` -> text (lists and nulls as JSON), for trackers whose parameters are
    flat strings (MLflow)."""
    out: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flat_config(value, f"{name}."))
        elif isinstance(value, str):
            out[name] = value
        else:
            out[name] = json.dumps(value, default=str)
    return out


def tracker_environment(run_dir: Path, names: Sequence[str]) -> dict[str, str]:
    """The variables that send another program's trackers (verl's) where `open_trackers`
    writes: RUN/tensorboard, RUN/wandb (offline unless WANDB_MODE is set), RUN/mlruns (unless
    MLFLOW_TRACKING_URI is set)."""
    root = Path(run_dir).resolve()
    env: dict[str, str] = {}
    if "tensorboard" in names:
        env["TENSORBOARD_DIR"] = str(root / TENSORBOARD_DIR)
    if "wandb" in names:
        env["WANDB_DIR"] = str(root)
        env["WANDB_MODE"] = wandb_mode()
    if "mlflow" in names:
        uri = os.environ.get("MLFLOW_TRACKING_URI") or (root / MLFLOW_DIR).as_uri()
        env["MLFLOW_TRACKING_URI"] = uri
        if is_file_store(uri):  # MLflow 3 keeps its file store in maintenance mode, behind this
            env["MLFLOW_ALLOW_FILE_STORE"] = "true"
    return env


def wandb_mode() -> str:
    """W&B works offline unless WANDB_MODE says otherwise (online: with WANDB_API_KEY)."""
    return os.environ.get("WANDB_MODE") or "offline"


def _warn(line: str) -> None:
    print(f"warning: {line}", file=sys.stderr)


class _Backend:
    name = ""

    def log(self, metrics: dict[str, float], step: int) -> None:
        raise NotImplementedError

    def close(self, failed: bool) -> None:
        raise NotImplementedError


class _TensorBoard(_Backend):
    name = "tensorboard"

    def __init__(self, run_dir: Path, config: Mapping[str, Any], resume_step: int | None) -> None:
        from torch.utils.tensorboard import SummaryWriter

        # A run (re)starting after step N makes the steps after it again, and an attempt that
        # died before its first checkpoint left events of steps it will make again: they go.
        purge = None if resume_step is None else resume_step + 1
        self.writer = SummaryWriter(str(run_dir / TENSORBOARD_DIR), purge_step=purge)
        text = json.dumps(dict(config), indent=2, sort_keys=True, default=str)
        self.writer.add_text("config", f"```\n{text}\n```", global_step=resume_step or 0)
        self.writer.flush()

    def log(self, metrics: dict[str, float], step: int) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, global_step=step)
        self.writer.flush()

    def close(self, failed: bool) -> None:
        self.writer.close()


class _Wandb(_Backend):
    name = "wandb"

    def __init__(self, run_dir: Path, config: Mapping[str, Any], kind: str) -> None:
        import wandb

        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT") or DEFAULT_PROJECT,
            name=run_dir.name,
            group=run_dir.name,
            job_type=kind,
            dir=str(run_dir),
            mode=wandb_mode(),
            config=dict(config),
            reinit="create_new",
            settings=wandb.Settings(console="off", quiet=True),
        )
        # The run's own step is the x-axis: a resumed run logs its steps again without clashing
        # with W&B's internal counter.
        self.run.define_metric("step")
        self.run.define_metric("*", step_metric="step")

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.run.log({**metrics, "step": step})

    def close(self, failed: bool) -> None:
        self.run.finish(exit_code=1 if failed else 0)


# MLflow's metric and parameter names: letters, digits, _ - . / : and spaces.
_MLFLOW_UNSAFE = re.compile(r"[^\w\-./: ]")


def mlflow_metric_name(key: str, *, file_store: bool) -> str:
    """`key` as MLflow takes it. A file store keeps a metric in a file named after it, so
    `reward_mean` and `reward_mean/tic_tac_toe` would be a file and a folder of one name: there
    `/` becomes `.` (`reward_mean.tic_tac_toe`); other stores keep the `/`."""
    name = _MLFLOW_UNSAFE.sub("_", key)
    return name.replace("/", ".") if file_store else name


def is_file_store(uri: str) -> bool:
    return uri.startswith("file:") or "://" not in uri


class _Mlflow(_Backend):
    name = "mlflow"

    def __init__(self, run_dir: Path, config: Mapping[str, Any], kind: str) -> None:
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        env = tracker_environment(run_dir, ["mlflow"])
        if "MLFLOW_ALLOW_FILE_STORE" in env:  # MLflow 3 refuses a file store without it
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self.client = MlflowClient(tracking_uri=env["MLFLOW_TRACKING_URI"])
        self.file_store = is_file_store(env["MLFLOW_TRACKING_URI"])
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or DEFAULT_PROJECT
        found = self.client.get_experiment_by_name(name)
        experiment = found.experiment_id if found else self.client.create_experiment(name)
        tags = {"mars.run_dir": str(run_dir.resolve()), "mars.kind": kind}
        run = self.client.create_run(experiment, run_name=run_dir.name, tags=tags)
        self.run_id = run.info.run_id
        try:
            from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH as longest
        except ImportError:
            longest = 500
        params = [
            Param(_MLFLOW_UNSAFE.sub("_", key), value[:longest])
            for key, value in flat_config(config).items()
        ]
        for start in range(0, len(params), 100):  # MLflow takes 100 parameters a call
            self.client.log_batch(self.run_id, params=params[start : start + 100])
        self.client.log_dict(self.run_id, dict(config), "config.json")

    def log(self, metrics: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [
            Metric(mlflow_metric_name(key, file_store=self.file_store), float(value), now, step)
            for key, value in metrics.items()
        ]
        for start in range(0, len(batch), 1000):  # MLflow takes 1000 metrics a call
            self.client.log_batch(self.run_id, metrics=batch[start : start + 1000])

    def close(self, failed: bool) -> None:
        self.client.set_terminated(self.run_id, status="FAILED" if failed else "FINISHED")


class Trackers:
    """The run's trackers (none: every call does nothing). A tracker that fails while logging
    is dropped with one warning; the run and its metrics.jsonl go on."""

    def __init__(
        self, backends: Sequence[_Backend] = (), *, warn: Callable[[str], None] = _warn
    ) -> None:
        self.backends = list(backends)
        self.warn = warn

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(backend.name for backend in self.backends)

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        if not self.backends:
            return
        values = scalars(metrics)
        for backend in list(self.backends):
            try:
                backend.log(values, int(step))
            except Exception as exc:  # a tracker's trouble never stops the run
                self.backends.remove(backend)
                self.warn(f"{backend.name} logging failed ({exc}); it is off for this run")

    def close(self, *, failed: bool = False) -> None:
        backends, self.backends = self.backends, []
        for backend in backends:
            try:
                backend.close(failed)
            except Exception as exc:
                self.warn(f"{backend.name} could not close cleanly ({exc})")

    def __enter__(self) -> Trackers:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        self.close(failed=kind is not None)


def open_trackers(
    names: Iterable[str],
    run_dir: Path,
    config: Mapping[str, Any],
    *,
    kind: str = "train",
    resume_step: int | None = None,
    warn: Callable[[str], None] = _warn,
) -> Trackers:
    """The trackers `names` chose, started for the run in `run_dir` with its `config` logged.

    `kind`: the W&B job type and an MLflow tag (train, loop); `resume_step`: a trainer's step it
    starts after (0 when new: TensorBoard drops the events an earlier attempt wrote of later
    steps); None (a loop, which logs each row once) keeps every event. Nothing is imported
    without a name that needs it; a tracker that cannot start raises (the run has not begun).
    """
    chosen = check_loggers(names)
    run_dir = Path(run_dir)
    opened: list[_Backend] = []
    try:
        for name in chosen:
            if name == "tensorboard":
                opened.append(_TensorBoard(run_dir, config, resume_step))
            elif name == "wandb":
                opened.append(_Wandb(run_dir, config, kind))
            elif name == "mlflow":
                opened.append(_Mlflow(run_dir, config, kind))
    except Exception as exc:
        Trackers(opened, warn=warn).close(failed=True)
        if isinstance(exc, MarsError):
            raise
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise MarsError(f"--logger {name}: could not start ({first})") from exc
    return Trackers(opened, warn=warn)


def logger_setting(names: Any) -> Any:
    """A config file's `logger:` (a list, or `a,b`) as a pydantic "before" validator reads it:
    the checked names, or a ValueError with the one-line reason; anything else is left to
    pydantic's own type error."""
    if names is None:
        return []
    if isinstance(names, str):
        names = names.split(",")
    if not isinstance(names, list | tuple):
        return names
    try:
        return list(check_loggers(names, flag=""))
    except MarsError as exc:
        raise ValueError(str(exc)) from None
