"""The run directory: one record of what happened, read by report, resume, loop and dashboard.

    run.json       what was asked (command, full config, model, endpoint, versions, git revision,
                   seeds, status, start/end): `RunInfo`
    records.jsonl  one JSON line per unit of work, appended and flushed as each finishes
    summary.json   aggregates with confidence intervals

A rerun with the same `--run-dir` resumes: `prepare_resume` rewrites records.jsonl keeping one
good record per key (dropping errored, duplicate and half-written lines), and the command redoes
what is missing. Before that, `check_identity` compares the run's identity (the settings that
decide what a record means: kind, suites or game, MAS and options, model, generation, grader,
prompt style) with the one stored at the first attempt, and refuses a rerun that changed any of
them, before anything on disk changes. The format is documented in docs/run-format.md.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from enum import Enum
from importlib import metadata
from pathlib import Path
from typing import Any, TextIO

from pydantic import BaseModel, Field, ValidationError

from core.errors import MarsError
from core.files import read_jsonl, write_json_atomic, write_jsonl_atomic
from core.names import a_run_of
from core.settings_files import validation_error_line

SCHEMA_VERSION = 1
RUN_FILE, RECORDS_FILE, SUMMARY_FILE = "run.json", "records.jsonl", "summary.json"
_TRACKED_PACKAGES = (
    "mars-harness",
    "openai",
    "transformers",
    "torch",
    "open-spiel",
    "math-verify",
    "autogen-agentchat",
    "datasets",
)


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def package_versions() -> dict[str, str]:
    versions = {"python": sys.version.split()[0]}
    for name in _TRACKED_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def git_revision() -> str | None:
    repo = Path(__file__).resolve().parents[1]
    try:
        out = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


class RunStatus(str, Enum):
    """How a run stands (`status` in run.json); equal to, and written as, its plain string."""

    RUNNING = "running"
    COMPLETED = "completed"
    COMPLETED_WITH_ERRORS = "completed_with_errors"  # some samples or episodes errored
    FAILED = "failed"  # nothing was scored
    INTERRUPTED = "interrupted"  # Ctrl-C or SIGTERM; a rerun resumes
    DRY_RUN = "dry_run"  # a configuration was resolved and nothing trained

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @classmethod
    def after(cls, errors: int) -> RunStatus:
        """A run that went to the end: completed, or completed with `errors` errors."""
        return cls.COMPLETED if errors == 0 else cls.COMPLETED_WITH_ERRORS


FINISHED_STATUSES = frozenset(status for status in RunStatus if status is not RunStatus.RUNNING)


class RunInfo(BaseModel):
    schema_version: int = SCHEMA_VERSION
    kind: str
    command: list[str] = Field(default_factory=list)
    config: dict[str, Any] = Field(default_factory=dict)
    model: str | None = None
    endpoint: dict[str, Any] | None = None
    versions: dict[str, str] = Field(default_factory=dict)
    git_revision: str | None = None
    seeds: dict[str, Any] = Field(default_factory=dict)
    status: str = RunStatus.RUNNING.value
    started_at: str = Field(default_factory=_now)
    ended_at: str | None = None
    attempts: int = 1
    # The settings a resume must not change (`check_identity`); None in runs of older versions.
    identity: dict[str, Any] | None = None


def canonical(value: Any) -> Any:
    """A value as it reads back from JSON (tuples become lists, keys become strings)."""
    return json.loads(json.dumps(value, default=str))


_MISSING = object()


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts as dotted keys; an empty dict adds no key (the same as an absent one)."""
    if isinstance(value, dict):
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat.update(_flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return flat
    return {prefix: value}


def _show(value: Any) -> str:
    if value is _MISSING:
        return "(unset)"
    return value if isinstance(value, str) else json.dumps(value)


def identity_changes(
    stored: dict[str, Any], current: dict[str, Any], *, complete: bool = True
) -> list[str]:
    """Each setting that differs, as `key old -> new` (nested keys joined by dots, sorted).

    With `complete=False` the current identity is partial: keys it lacks are not compared.
    """
    old, new = _flatten(canonical(stored)), _flatten(canonical(current))
    keys = sorted(set(old) | set(new)) if complete else sorted(new)
    return [
        f"{key} {_show(old.get(key, _MISSING))} -> {_show(new.get(key, _MISSING))}"
        for key in keys
        if old.get(key, _MISSING) != new.get(key, _MISSING)
    ]


def refuse_changed_identity(
    where: Path,
    stored: dict[str, Any] | None,
    current: dict[str, Any],
    *,
    complete: bool = True,
    way_out: str = "give a new --run-dir",
) -> str | None:
    """Raise a one-line MarsError naming every changed setting; return a note (or None).

    `stored` None means the run was written before identities were stored: it adopts the
    current identity, and the note says so.
    """
    if stored is None:
        return (
            f"note: {where} has no stored settings (an older run); "
            "resuming it with this command's settings"
        )
    changes = identity_changes(stored, current, complete=complete)
    if changes:
        raise MarsError(
            f"{where} was run with other settings ({'; '.join(changes)}); rerun with the same "
            f"settings to resume it, or {way_out}"
        )
    return None


def identity_of(
    kind: str, config: dict[str, Any], *, resumable: tuple[str, ...], **extra: Any
) -> dict[str, Any]:
    """A run's identity: its kind, its config without the `resumable` settings (how much or how
    fast: episodes, limits, concurrency), and `extra` entries (the model, ...)."""
    identity = {key: value for key, value in config.items() if key not in resumable}
    return {"kind": kind, **identity, **extra}


def model_identity(model: str | None, base_url: str | None) -> str | None:
    """The model part of a run's identity, known before any server starts.

    With --base-url: the model name sent (None when the name is not known yet). Otherwise the
    fingerprint of the checkpoint that will be served (the embedded tiny model by default), so a
    retrained folder at the same path is another model.
    """
    if base_url:
        return model
    from core.fingerprints import model_fingerprint
    from core.model_access import default_model

    return model_fingerprint(model or default_model())


def _slugify(text: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")
    return slug[:60] or "run"


# json.dumps(record, ensure_ascii=False, default=str), without building an encoder per call.
_encode_record = json.JSONEncoder(ensure_ascii=False, default=str).encode


class RunDir:
    def __init__(self, path: Path, kind: str) -> None:
        self.path = path
        self.kind = kind
        self.malformed_lines = 0
        self.duplicate_records = 0
        self._appender: TextIO | None = None  # records.jsonl, kept open between appends

    @classmethod
    def resolve(cls, *, out: Path | None, run_dir: Path | None, kind: str, slug: str) -> RunDir:
        """`--run-dir PATH` exactly (a rerun resumes it), else a new directory under `--out`."""
        if run_dir is not None:
            path = Path(run_dir)
            if path.exists() and not path.is_dir():
                raise MarsError(f"--run-dir {path} exists and is not a directory")
            info_file = path / RUN_FILE
            if info_file.exists():
                existing = cls.read_info(path)
                if existing.kind != kind:
                    raise MarsError(
                        f"{path} holds {a_run_of(existing.kind)}; it cannot resume as '{kind}'"
                    )
        else:
            root = Path(out) if out is not None else Path("runs")
            stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
            path = root / f"{kind}-{stamp}-{_slugify(slug)}"
            suffix = 1
            while path.exists():
                suffix += 1
                path = root / f"{kind}-{stamp}-{_slugify(slug)}-{suffix}"
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise MarsError(f"cannot create run directory {path}: {exc.strerror}") from exc
        return cls(path, kind)

    @classmethod
    def open(cls, path: Path) -> RunDir:
        """An existing run directory, for reading (report, dashboard, loop)."""
        path = Path(path)
        if not (path / RUN_FILE).is_file():
            raise MarsError(f"{path} is not a run directory (no {RUN_FILE})")
        return cls(path, cls.read_info(path).kind)

    @staticmethod
    def read_info(path: Path) -> RunInfo:
        file = Path(path) / RUN_FILE
        try:
            return RunInfo.model_validate_json(file.read_text())
        except ValidationError as exc:
            raise MarsError(f"cannot read {file}: {validation_error_line(exc)}") from None
        except (OSError, ValueError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise MarsError(f"cannot read {file}: {reason}") from None

    @property
    def info_path(self) -> Path:
        return self.path / RUN_FILE

    @property
    def records_path(self) -> Path:
        return self.path / RECORDS_FILE

    @property
    def summary_path(self) -> Path:
        return self.path / SUMMARY_FILE

    def info(self) -> RunInfo:
        return self.read_info(self.path)

    def check_identity(self, identity: dict[str, Any], *, complete: bool = True) -> None:
        """Refuse to resume this directory with other settings (one line naming each change).

        Called before anything in the directory is rewritten; a directory without run.json is
        new. A run from before identities were stored adopts `identity` (a note is printed).
        """
        if not self.info_path.exists():
            return
        note = refuse_changed_identity(self.path, self.info().identity, identity, complete=complete)
        if note and complete:
            print(note)

    def start(
        self,
        *,
        command: list[str],
        config: dict[str, Any],
        model: str | None = None,
        endpoint: dict[str, Any] | None = None,
        seeds: dict[str, Any] | None = None,
        identity: dict[str, Any] | None = None,
    ) -> None:
        attempts = 1
        started_at = _now()
        if self.info_path.exists():
            previous = self.info()
            attempts, started_at = previous.attempts + 1, previous.started_at
            identity = identity if identity is not None else previous.identity
        info = RunInfo(
            kind=self.kind,
            command=command,
            config=config,
            model=model,
            endpoint=endpoint,
            versions=package_versions(),
            git_revision=git_revision(),
            seeds=seeds or {},
            started_at=started_at,
            attempts=attempts,
            identity=canonical(identity) if identity is not None else None,
        )
        write_json_atomic(self.info_path, info.model_dump())

    def finish(self, status: RunStatus | str = RunStatus.COMPLETED) -> None:
        self.close()
        info = self.info().model_copy(
            update={"status": RunStatus(status).value, "ended_at": _now()}
        )
        write_json_atomic(self.info_path, info.model_dump())

    def append(self, record: dict[str, Any]) -> None:
        """Write one record; it is flushed to the file before this returns."""
        line = _encode_record(record)
        handle = self._append_handle()
        handle.write(line + "\n")
        handle.flush()

    def append_many(self, records: list[dict[str, Any]]) -> None:
        self.append_lines("".join(_encode_record(r) + "\n" for r in records))

    def append_lines(self, lines: str) -> None:
        """Write records already encoded (JSON lines, each ending in a newline), flushed."""
        if not lines:
            return
        handle = self._append_handle()
        handle.write(lines)
        handle.flush()

    def _append_handle(self) -> TextIO:
        """The append handle, opened on first use; `close` (done by `finish` and
        `prepare_resume`, which replaces the file) makes the next append reopen it. If the file
        was removed or replaced behind our back (another process, log rotation), the handle
        would keep writing to the old file, so a changed inode also reopens it."""
        handle = self._appender
        if handle is not None and not self._still_records_file(handle):
            self.close()
            handle = None
        if handle is None:
            handle = self._appender = self.records_path.open("a", encoding="utf-8")
        return handle

    def _still_records_file(self, handle: TextIO) -> bool:
        try:
            on_disk = os.stat(handle.name)  # the path it was opened with
        except FileNotFoundError:
            return False
        return on_disk.st_ino == os.fstat(handle.fileno()).st_ino

    def close(self) -> None:
        """Close the append handle (appending again reopens it)."""
        handle = getattr(self, "_appender", None)  # absent if __init__ never ran
        if handle is not None:
            handle.close()
            self._appender = None

    def __del__(self) -> None:
        self.close()

    def records(self) -> list[dict[str, Any]]:
        """Every well-formed record in file order; malformed lines are skipped and counted."""
        read = read_jsonl(self.records_path)
        self.malformed_lines = read.malformed
        return read.rows

    def unique_records(self, key: Callable[[dict[str, Any]], Hashable]) -> list[dict[str, Any]]:
        """The records with one per key (a good one before an errored one, else the first),
        in file order; records without a key are kept. Duplicates come only from two writers
        of a build before the writer lock: they are counted (`duplicate_records`) and warned
        about on stderr, each key counted once."""
        kept: dict[Hashable, dict[str, Any]] = {}
        keyless: list[tuple[int, dict[str, Any]]] = []
        position: dict[Hashable, int] = {}
        duplicates = 0
        for index, record in enumerate(self.records()):
            try:
                record_key = key(record)
            except (KeyError, TypeError, ValueError):
                keyless.append((index, record))
                continue
            if record_key not in kept:
                kept[record_key], position[record_key] = record, index
                continue
            duplicates += 1
            if kept[record_key].get("error") and not record.get("error"):
                kept[record_key] = record
        self.duplicate_records = duplicates
        if duplicates:
            print(
                f"warning: {self.path} holds {duplicates} duplicate record(s) (two writers at "
                "once, before mars locked run folders); each key is counted once",
                file=sys.stderr,
            )
        ordered = [(position[k], record) for k, record in kept.items()] + keyless
        return [record for _, record in sorted(ordered, key=lambda pair: pair[0])]

    def prepare_resume(self, key: Callable[[dict[str, Any]], Hashable]) -> set[Hashable]:
        """Keep one good record per key (the first), drop errored and broken lines; return the keys.

        Rewritten atomically, so a crash here loses nothing already recorded.
        """
        self.close()
        kept: dict[Hashable, dict[str, Any]] = {}
        for record in self.records():
            if record.get("error"):
                continue
            try:
                record_key = key(record)
            except (KeyError, TypeError):
                continue
            kept.setdefault(record_key, record)
        if self.records_path.exists():
            write_jsonl_atomic(self.records_path, kept.values())
        return set(kept)

    def write_summary(self, summary: dict[str, Any]) -> None:
        payload = {"schema_version": SCHEMA_VERSION, **summary}
        write_json_atomic(self.summary_path, payload)

    def summary(self) -> dict[str, Any] | None:
        if not self.summary_path.exists():
            return None
        try:
            return json.loads(self.summary_path.read_text())
        except (OSError, json.JSONDecodeError):
            return None

    def dataframe(self) -> Any:
        import pandas as pd

        return pd.json_normalize(self.records(), max_level=0)


@dataclass(frozen=True)
class UnreadableRun:
    path: Path
    reason: str


def scan_runs(root: Path) -> tuple[list[RunDir], list[UnreadableRun]]:
    """Every run directory directly under `root` (or nested one level, e.g. a loop's evals), and
    the directories with a run.json that could not be read (with why), so callers can say so."""
    root = Path(root)
    if not root.is_dir():
        return [], []
    found = sorted(
        {p.parent for p in root.glob(f"*/{RUN_FILE}")}
        | {p.parent for p in root.glob(f"*/*/{RUN_FILE}")}
    )
    runs: list[RunDir] = []
    unreadable: list[UnreadableRun] = []
    for path in found:
        try:
            runs.append(RunDir.open(path))
        except MarsError as exc:
            unreadable.append(UnreadableRun(path, str(exc)))
    return runs, unreadable


def list_runs(root: Path) -> list[RunDir]:
    """Every readable run directory under `root` (see `scan_runs`)."""
    return scan_runs(root)[0]
