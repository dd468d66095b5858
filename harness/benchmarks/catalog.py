"""What `mars data` lists, checks and fetches (docs/benchmarks.md, "Where the data comes from").

For each suite: its source (a hub dataset with its local file's path under a data root, or
generated levels, or a package's own file), the local copy the loader would read on this machine
(which root, how many rows, its sha256), the checksum recorded in the repository
(`harness.benchmarks.checksums`), and the copies `mars data fetch` wrote into the cache's data
folder, recorded in `fetched.json` beside them (a hub copy is not byte-identical to the reference
file, so it is checked against what was fetched).
"""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
import io
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import MarsError
from core.files import jsonl_text, write_atomic, write_json_atomic
from harness.benchmarks import sources
from harness.benchmarks.checksums import RECORDED_FILES, recorded_file
from harness.benchmarks.registry import Suite, get_suite, list_suites
from harness.benchmarks.sources import (
    CACHE_LABEL,
    DATA_DIR_ENV,
    DATA_DIR_LABEL,
    HubSource,
    LocalSource,
    Row,
    cache_data_root,
    candidate_roots,
    check_data_dir,
    read_local,
)

FETCH_RECORD = "fetched.json"  # in the cache's data folder: what `mars data fetch` wrote
NOT_HERE = "not available here"


@dataclass(frozen=True)
class LocalCopy:
    root: str  # "--data-dir", "$MARS_DATA_DIR" or "cache"
    root_path: Path
    path: Path
    sha256: str
    rows: int


@dataclass(frozen=True)
class SuiteData:
    suite: str
    source: str  # hub:ID[CONFIG]:SPLIT, procedural:..., package:...
    local_file: str | None  # the file's path under a data root; None: the suite reads no file
    rows: int | None  # in the local copy, or the generated / packaged samples; None: no copy
    copy: LocalCopy | None

    @property
    def where(self) -> str:
        if self.local_file is None:
            return "built in"
        if self.copy is None:
            return NOT_HERE
        return f"{self.copy.root_path} ({self.copy.root})"

    def as_json(self) -> dict[str, Any]:
        copy = self.copy
        return {
            "suite": self.suite,
            "source": self.source,
            "local_file": self.local_file,
            "rows": self.rows,
            "sha256": copy.sha256 if copy else None,
            "path": str(copy.path) if copy else None,
            "root": copy.root if copy else None,
            "available": self.local_file is None or copy is not None,
        }


def file_sources(suite: Suite) -> tuple[HubSource, LocalSource] | None:
    """The hub dataset and local file a suite reads; None for one that reads no data file."""
    if suite.builtin_source() is not None:
        return None
    return suite.hub, suite.local


def suite_names(values: list[str] | None, default: list[str]) -> list[str]:
    """Names given as arguments (each may be comma-separated), checked; `default` when none."""
    names = [n.strip() for value in values or [] for n in value.split(",") if n.strip()]
    for name in names:
        get_suite(name)  # one line, "did you mean" included, for an unknown name
    unique = list(dict.fromkeys(n.lower() for n in names))
    if len(unique) < len(names):  # listing or fetching a suite twice is once: said, not refused
        print(f"note: each suite once: {', '.join(unique)}", file=sys.stderr)
    return unique or default


def recorded_suites() -> list[str]:
    return [f.suite for f in RECORDED_FILES]


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def find_copy(local: LocalSource, data_dir: Path | None) -> LocalCopy | None:
    """The copy the loader would read: the first root that holds the file."""
    for label, root in candidate_roots(data_dir):
        path = root / local.relative_path
        if path.is_file():
            rows = len(read_local(path, local.format))
            return LocalCopy(label, root, path, sha256_of(path), rows)
    return None


def describe(name: str, data_dir: Path | None) -> SuiteData:
    suite = get_suite(name)
    builtin = suite.builtin_source()
    if builtin is not None:
        source, rows = builtin
        return SuiteData(suite.name, source, None, rows, None)
    copy = find_copy(suite.local, data_dir)
    return SuiteData(
        suite.name,
        suite.hub.describe(),
        suite.local.relative_path,
        copy.rows if copy else None,
        copy,
    )


def data_overview(names: list[str] | None, data_dir: Path | None) -> list[SuiteData]:
    if data_dir is not None:
        check_data_dir(data_dir)
    return [describe(name, data_dir) for name in names or list_suites()]


def roots_line(data_dir: Path | None) -> str:
    """The roots in lookup order, each with whether it exists here, then the hub."""
    parts = [
        f"{label} {root}" + ("" if root.is_dir() else " (missing)")
        for label, root in candidate_roots(data_dir)
    ]
    if data_dir is None:
        parts.append("then the hub")
    return "looked up in order: " + "; ".join(parts)


# --- verify -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Check:
    suite: str
    ok: bool
    line: str


def fetch_records() -> dict[str, dict[str, Any]]:
    """relative path -> what `mars data fetch` wrote there (source, sha256, rows, when)."""
    path = cache_data_root() / FETCH_RECORD
    try:
        records = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return records if isinstance(records, dict) else {}


def verify(names: list[str] | None, data_dir: Path | None) -> list[Check]:
    """Each suite's local copy against the checksum recorded in the repository (or, for a copy
    `mars data fetch` wrote, against its fetch record). Default: every suite with a recorded
    checksum, and any other suite whose file has a copy here."""
    if data_dir is not None:
        check_data_dir(data_dir)
    if names is None:
        names = [
            name
            for name in list_suites()
            if recorded_file(name) is not None or _has_copy(name, data_dir)
        ]
    return [_check(name, data_dir) for name in names]


def _has_copy(name: str, data_dir: Path | None) -> bool:
    files = file_sources(get_suite(name))
    return files is not None and any(
        (root / files[1].relative_path).is_file() for _, root in candidate_roots(data_dir)
    )


def _check(name: str, data_dir: Path | None) -> Check:
    suite = get_suite(name)
    builtin = suite.builtin_source()
    if builtin is not None:
        return Check(name, True, f"{name}: reads no data file ({builtin[0]})")
    local = suite.local
    copy = find_copy(local, data_dir)
    if copy is None:
        looked = ", ".join(f"{root} ({label})" for label, root in candidate_roots(data_dir))
        return Check(name, False, f"{name}: {local.relative_path} is missing (looked in {looked})")
    recorded = recorded_file(name)
    short = f"sha256 {copy.sha256[:12]}, {copy.rows} rows"
    if recorded is not None and copy.sha256 == recorded.sha256:
        return Check(name, True, f"{name}: ok {copy.path} ({short})")
    fetched = fetch_records().get(local.relative_path) if copy.root == CACHE_LABEL else None
    if fetched is not None:
        if copy.sha256 == fetched.get("sha256"):
            return Check(
                name,
                True,
                f"{name}: ok {copy.path} ({short}), as fetched from {fetched.get('source')} "
                f"on {fetched.get('fetched_at')}",
            )
        return Check(
            name,
            False,
            f"{name}: {copy.path} changed since it was fetched from {fetched.get('source')} "
            f"({short}; fetched: sha256 {str(fetched.get('sha256'))[:12]}, "
            f"{fetched.get('rows')} rows); `mars data fetch {name} --force` fetches it again",
        )
    if recorded is None:
        return Check(name, True, f"{name}: {copy.path} ({short}): no checksum recorded")
    return Check(
        name,
        False,
        f"{name}: {copy.path} does not match the recorded checksum ({short}; recorded: sha256 "
        f"{recorded.sha256[:12]}, {recorded.rows} rows, {recorded.size} bytes; the file has "
        f"{copy.path.stat().st_size})",
    )


# --- fetch --------------------------------------------------------------------------------------


def offline_line(reason: str, names: list[str]) -> str:
    """The one line `mars data fetch` prints when the hub cannot be reached."""
    return (
        f"cannot fetch {', '.join(names)}: the hub is not reachable here ({reason}). Point "
        f"{DATA_DIR_LABEL} or ${DATA_DIR_ENV} at a folder that holds the files, or run `mars "
        "data fetch` on a machine with internet and copy the folder it fills ($MARS_CACHE_DIR/"
        f"data, by default ~/.cache/mars/data) to {cache_data_root()} here (docs/benchmarks.md)"
    )


def fetch(names: list[str], *, force: bool) -> list[str]:
    """Fetch each suite's test set from the hub into the cache's data folder, in its local
    file's layout and format; one line per suite, in order. A suite already cached is left
    alone unless `force`."""
    notes: dict[str, str] = {}  # suites that need no download: why
    wanted: dict[str, tuple[HubSource, LocalSource]] = {}
    for name in names:
        suite = get_suite(name)
        files = file_sources(suite)
        builtin = suite.builtin_source()
        target = None if files is None else cache_data_root() / files[1].relative_path
        if files is None:
            notes[name] = f"{name}: nothing to fetch ({builtin[0] if builtin else 'no file'})"
        elif target is not None and target.is_file() and not force:
            notes[name] = f"{name}: already in the cache, {target} (--force fetches it again)"
        else:
            wanted[name] = files
    if wanted:
        reason = sources.hub_unavailable_reason()
        if reason is not None:
            raise MarsError(offline_line(reason, list(wanted)))
    return [notes[name] if name in notes else _fetch_one(name, *wanted[name]) for name in names]


def _fetch_one(name: str, hub: HubSource, local: LocalSource) -> str:
    try:
        raw = sources.read_hub(hub)
    except Exception as exc:  # no network, a gated dataset without a token, a renamed split
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise MarsError(
            f"cannot fetch {name} from {hub.describe()}: {type(exc).__name__}: {first}"
        ) from exc
    rows = [row for row in raw.rows if row is not None]
    target = cache_data_root() / local.relative_path
    target.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(target, jsonl_text(rows) if local.format == "jsonl" else _csv_text(rows))
    record = {
        "suite": name,
        "source": hub.describe(),
        "sha256": sha256_of(target),
        "rows": len(rows),
        "fetched_at": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    records = fetch_records()
    records[local.relative_path] = record
    write_json_atomic(cache_data_root() / FETCH_RECORD, records, sort_keys=True)
    return f"{name}: {len(rows)} rows from {hub.describe()} -> {target}"


def _csv_text(rows: list[Row]) -> str:
    columns: dict[str, None] = {}
    for row in rows:
        columns.update(dict.fromkeys(row))
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: "" if v is None else v for k, v in row.items()} for row in rows)
    return buffer.getvalue()
