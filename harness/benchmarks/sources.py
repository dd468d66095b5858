"""Where benchmark rows come from: local files first, then the Hugging Face hub.

The lookup (docs/benchmarks.md, "Where the data comes from"): `--data-dir` alone when it is
given; otherwise `$MARS_DATA_DIR`, then the cache's data folder (`mars data fetch` fills it),
then the hub. The hub route goes through `datasets`; local files are read line by line with the
standard library (importing `datasets` costs about a second of start-up), so one bad row is
skipped and counted instead of sinking the whole file. On every intact file the two readers give
the same rows (`tests/test_benchmarks_golds.py`).
"""

from __future__ import annotations

import csv
import functools
import os
import socket
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlparse

from core.errors import MarsError
from core.files import jsonl_slots, mars_cache_dir

DATA_DIR_ENV = "MARS_DATA_DIR"
DATA_DIR_LABEL = "--data-dir"
CACHE_LABEL = "cache"
HUB_CHECK_TIMEOUT_S = 2.0
_OFFLINE_ENV_VARS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
_TRUTHY = {"1", "true", "yes", "on"}

Row = dict[str, Any]
LocalFormat = Literal["jsonl", "csv"]


@dataclass(frozen=True)
class HubSource:
    dataset_id: str
    split: str
    config: str | None = None
    keep: Callable[[Row], bool] | None = None  # filter applied to hub rows (e.g. MMLU subjects)
    # One JSON Lines file of the dataset's repository, read with the `json` builder (whose one
    # split is "train"): for repositories that ship a loading script, which datasets 4+ refuses.
    data_file: str | None = None

    def describe(self) -> str:
        if self.data_file:
            return f"hub:{self.dataset_id}/{self.data_file}"
        config = f"[{self.config}]" if self.config else ""
        return f"hub:{self.dataset_id}{config}:{self.split}"


@dataclass(frozen=True)
class LocalSource:
    relative_path: str  # inside a benchmarks data root, e.g. "gsm8k/test.jsonl"
    format: LocalFormat


@dataclass
class RawRows:
    """Rows as read. `None` stands for a row that could not be read at all; it keeps its place so
    that ids derived from the row index stay stable."""

    rows: list[Row | None]
    route: Literal["hub", "local"]
    source: str
    notes: list[str]
    root: str | None = None  # a local file's root: "--data-dir", "$MARS_DATA_DIR" or "cache"


def cache_data_root() -> Path:
    """The cache's data folder, where `mars data fetch` writes the test sets: `data/` under
    `$MARS_CACHE_DIR` (default ~/.cache/mars)."""
    return mars_cache_dir() / "data"


def check_data_dir(data_dir: Path) -> Path:
    """A `--data-dir` that is missing, not a folder or empty is a mistake (a typo, an unmounted
    disk), never a reason to read another root instead."""
    path = Path(data_dir).expanduser()
    if not path.exists():
        raise MarsError(f"{DATA_DIR_LABEL} {path} does not exist")
    if not path.is_dir():
        raise MarsError(f"{DATA_DIR_LABEL} {path} is not a folder")
    if not any(path.iterdir()):
        raise MarsError(f"{DATA_DIR_LABEL} {path} is empty: it should hold e.g. gsm8k/test.jsonl")
    return path


def candidate_roots(data_dir: Path | None) -> list[tuple[str, Path]]:
    """Local data roots in lookup order, each with a label saying where it came from:
    `--data-dir` alone when given, else `$MARS_DATA_DIR` (when set) and the cache's data
    folder."""
    if data_dir is not None:
        return [(DATA_DIR_LABEL, Path(data_dir).expanduser())]
    roots: list[tuple[str, Path]] = []
    env_value = os.environ.get(DATA_DIR_ENV, "").strip()
    if env_value:
        roots.append((f"${DATA_DIR_ENV}", Path(env_value).expanduser()))
    roots.append((CACHE_LABEL, cache_data_root()))
    return roots


def hub_unavailable_reason() -> str | None:
    """Why the hub should not be tried, or None when it looks reachable."""
    for var in _OFFLINE_ENV_VARS:
        if os.environ.get(var, "").strip().lower() in _TRUTHY:
            return f"{var}={os.environ[var]}"
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    parsed = urlparse(endpoint)
    host = parsed.hostname or "huggingface.co"
    port = parsed.port or (80 if parsed.scheme == "http" else 443)
    if not _can_connect(host, port):
        return f"{host}:{port} not reachable within {HUB_CHECK_TIMEOUT_S:g} s"
    return None


@functools.lru_cache(maxsize=8)
def _can_connect(host: str, port: int) -> bool:
    # Name resolution ignores socket timeouts, so the whole check runs in a daemon thread that
    # is abandoned if it takes too long.
    outcome: list[bool] = []

    def attempt() -> None:
        try:
            with socket.create_connection((host, port), timeout=HUB_CHECK_TIMEOUT_S):
                outcome.append(True)
        except OSError:
            outcome.append(False)

    worker = threading.Thread(target=attempt, daemon=True)
    worker.start()
    worker.join(HUB_CHECK_TIMEOUT_S + 0.5)
    return bool(outcome and outcome[0])


NO_DATA_HINT = f"Pass {DATA_DIR_LABEL} or set ${DATA_DIR_ENV}."


def fetch_rows(
    suite: str,
    hub: HubSource,
    local: LocalSource,
    data_dir: Path | None,
    *,
    hint: str = NO_DATA_HINT,
) -> RawRows:
    """`data_dir` alone when given (it must be a folder with files in it); else the first local
    root holding the file, then the hub. Raises MarsError naming every place that was tried, why
    the hub was not used, and `hint` (what to do)."""
    if data_dir is not None:
        root = check_data_dir(data_dir)
        path = root / local.relative_path
        if not path.is_file():
            raise MarsError(
                f"no data for suite {suite!r} in {DATA_DIR_LABEL} {root}: {path} is missing "
                f"(with {DATA_DIR_LABEL} no other root and not the hub is read)"
            )
        return _local_rows(path, local, DATA_DIR_LABEL)
    looked: list[str] = []
    for label, root in candidate_roots(None):
        path = root / local.relative_path
        looked.append(f"{path} ({label})")
        if path.is_file():
            return _local_rows(path, local, label)
    reason = hub_unavailable_reason()
    if reason is None:
        try:
            return read_hub(hub)
        except Exception as exc:  # any hub failure (no network, a gated dataset) is reported
            reason = f"failed: {type(exc).__name__}: {_first_line(exc)}"
    raise MarsError(
        f"no data for suite {suite!r}: looked in {'; '.join(looked)}; "
        f"{hub.describe()} not used ({reason}). {hint}"
    )


def _local_rows(path: Path, local: LocalSource, label: str) -> RawRows:
    rows = read_local(path, local.format)
    return RawRows(rows=rows, route="local", source=f"local:{path}", notes=[], root=label)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else ""


def _quiet_datasets() -> Any:
    import datasets

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    return datasets


def read_hub(hub: HubSource) -> RawRows:
    datasets = _quiet_datasets()
    if hub.data_file:
        url = f"hf://datasets/{hub.dataset_id}/{hub.data_file}"
        dataset = datasets.load_dataset("json", data_files=url, split=hub.split)
    else:
        dataset = datasets.load_dataset(hub.dataset_id, hub.config, split=hub.split)
    rows: list[Row | None] = [dict(row) for row in dataset]
    if hub.keep is not None:
        rows = [row for row in rows if row is not None and hub.keep(row)]
    return RawRows(rows=rows, route="hub", source=hub.describe(), notes=[])


def read_local(path: Path, fmt: LocalFormat) -> list[Row | None]:
    return jsonl_slots(path) if fmt == "jsonl" else read_csv_line_by_line(path)


def read_local_with_datasets(path: Path, fmt: LocalFormat) -> list[Row | None]:
    datasets = _quiet_datasets()
    # A throw-away cache: the files are small, and a shared cache would keep one Arrow copy of
    # every file ever loaded (temporary test files included).
    with tempfile.TemporaryDirectory(prefix="mars-datasets-") as cache_dir:
        if fmt == "jsonl":
            dataset = datasets.load_dataset(
                "json", data_files=str(path), split="train", cache_dir=cache_dir
            )
        else:
            # Every column as text: numeric-looking answers must keep their exact spelling.
            with path.open(newline="", encoding="utf-8") as handle:
                header = next(csv.reader(handle))
            features = datasets.Features({name: datasets.Value("string") for name in header})
            dataset = datasets.load_dataset(
                "csv",
                data_files=str(path),
                split="train",
                features=features,
                keep_default_na=False,
                cache_dir=cache_dir,
            )
        return [dict(row) for row in dataset]


def read_csv_line_by_line(path: Path) -> list[Row | None]:
    rows: list[Row | None] = []
    with path.open(newline="", encoding="utf-8", errors="replace") as handle:
        reader = csv.DictReader(handle)
        for record in reader:
            # DictReader files surplus fields under None and pads short rows with None.
            broken = None in record or any(value is None for value in record.values())
            rows.append(None if broken else dict(record))
    return rows
