"""failures.jsonl beside an eval run's records: one verdict per transcript, resumable, with the
analysis's identity written before judging."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.errors import MarsError
from core.files import read_jsonl, write_json_atomic, write_jsonl_atomic
from core.runstore import canonical, refuse_changed_identity
from harness.failures.transcript import Key, record_key

if TYPE_CHECKING:
    from harness.failures.judge import FailureJudgeSettings

SCHEMA_VERSION = 1
FAILURES_FILE = "failures.jsonl"
FAILURES_SUMMARY_FILE = "failures_summary.json"
FAILURES_RUN_FILE = "failures_run.json"  # the analysis's identity, written before judging


class FailuresFile:
    """failures.jsonl: one verdict per judged transcript; malformed lines skipped and counted."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        # Malformed lines met by this command: those `prepare_resume` dropped from the file
        # (e.g. a line cut short by a kill) plus those the latest `records()` skipped.
        self.malformed_lines = 0
        self._dropped_malformed = 0

    def records(self) -> list[dict[str, Any]]:
        read = read_jsonl(self.path)
        out = [value for value in read.rows if has_key(value)]
        self.malformed_lines = self._dropped_malformed + read.malformed + len(read.rows) - len(out)
        return out

    def append(self, verdict: dict[str, Any]) -> None:
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(verdict, ensure_ascii=False, default=str) + "\n")
            handle.flush()

    def prepare_resume(self, keep: Callable[[dict[str, Any]], bool]) -> dict[Key, dict[str, Any]]:
        """Rewrite the file keeping the first verdict per key that `keep` accepts; return them."""
        kept: dict[Key, dict[str, Any]] = {}
        for verdict in self.records():
            if keep(verdict):
                kept.setdefault(record_key(verdict), verdict)
        self._dropped_malformed = self.malformed_lines
        if self.path.exists():
            write_jsonl_atomic(self.path, kept.values())
        return kept


def failures_identity(judge_model: str | None, settings: FailureJudgeSettings) -> dict[str, Any]:
    """What a verdict means: the judge (a model name, or a served checkpoint's fingerprint),
    its generation settings and the truncation limits. The selection (`--all`, `--limit`) is
    not part of it: a rerun may judge more transcripts with the same judge."""
    return canonical(
        {
            "kind": "failures",
            "judge_model": judge_model,
            "generation": settings.gen.model_dump(),
            "limits": asdict(settings.limits),
        }
    )


def check_failures_identity(run_path: Path, identity: dict[str, Any]) -> None:
    """Refuse to resume an analysis judged with other settings (before any file changes).

    An analysis from before identities were stored adopts this one (a note is printed)."""
    path = Path(run_path) / FAILURES_RUN_FILE
    if path.is_file():
        try:
            stored = json.loads(path.read_text()).get("identity")
        except (OSError, ValueError, AttributeError) as exc:
            raise MarsError(f"cannot read {path}: {exc}") from exc
    elif (Path(run_path) / FAILURES_FILE).is_file():
        stored = None  # verdicts without a stored identity: an older analysis
    else:
        return
    note = refuse_changed_identity(
        Path(run_path) / FAILURES_FILE,
        stored,
        identity,
        way_out="give --fresh to discard the analysis and start over",
    )
    if note:
        print(note)


def write_failures_identity(run_path: Path, identity: dict[str, Any]) -> None:
    payload = {"schema_version": SCHEMA_VERSION, "identity": identity}
    write_json_atomic(Path(run_path) / FAILURES_RUN_FILE, payload)


def has_key(value: dict[str, Any]) -> bool:
    try:
        record_key(value)
    except (KeyError, TypeError, ValueError):
        return False
    return True


def is_judged(verdict: dict[str, Any], *, retry_unparsed: bool = False) -> bool:
    """A verdict that a rerun keeps: the judge answered (and parsed, if asked)."""
    if verdict.get("error"):
        return False
    return bool(verdict.get("parsed")) or not retry_unparsed
