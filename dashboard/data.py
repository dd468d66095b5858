"""Loading and aggregation for the dashboard: plain functions over run directories, no Streamlit.

Everything here reads files under the runs root (see `dashboard.paths`) and tolerates what a
half-written or older run leaves behind: malformed JSON lines are skipped and counted, missing
fields become None (shown as "-"), unknown fields are ignored.
"""

from __future__ import annotations

import csv
import json
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from dashboard.paths import PathRefused, inside_root, relative_name
from harness import files
from harness.failures import FAILURES_FILE, summarize_failures
from harness.files import JsonlData
from harness.mast import CATEGORIES, FAILURE_MODES
from harness.runstore import RECORDS_FILE, SUMMARY_FILE
from harness.runstore import scan_runs as runstore_scan
from harness.stats import clustered_wilson_ci, wilson_ci

METRICS_FILE = "metrics.jsonl"
# `mars loop` writes both; its CSV is the curated table (figures per evaluation and seat), its
# JSONL the full rows (settings, training metrics, nested evaluations).
CURVE_FILES = ("learning_curve.csv", "learning_curve.jsonl")
SEATS = ("first", "second")


# ---------------------------------------------------------------- files


def file_stamp(path: Path) -> tuple[str, int, int] | None:
    """(path, mtime in ns, size): the cache key of a file's content; None if it is missing."""
    try:
        stat = Path(path).stat()
    except OSError:
        return None
    return (str(path), stat.st_mtime_ns, stat.st_size)


def read_jsonl(path: Path) -> JsonlData:
    """Every JSON object line of `path`; other lines (broken, cut short, not objects) counted.
    A file the dashboard cannot read shows as empty."""
    try:
        return files.read_jsonl(path)
    except OSError:
        return JsonlData()


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def read_csv_rows(path: Path) -> JsonlData:
    data = JsonlData()
    try:
        with Path(path).open(encoding="utf-8", errors="replace", newline="") as handle:
            for row in csv.DictReader(handle):
                if None in row:  # more cells than header columns
                    data.malformed += 1
                    continue
                data.rows.append({k: _number_or_text(v) for k, v in row.items()})
    except (OSError, csv.Error):
        return data
    return data


def _number_or_text(value: str | None) -> Any:
    if value is None or value == "":
        return None
    try:
        number = float(value)
    except ValueError:
        return value
    return int(number) if number.is_integer() and "." not in value else number


# ---------------------------------------------------------------- runs


@dataclass
class RunEntry:
    name: str  # path relative to the runs root
    path: Path
    kind: str
    model: str | None
    started_at: str | None
    ended_at: str | None
    status: str
    attempts: int
    config: dict[str, Any]

    @property
    def mas(self) -> str:
        return str(self.config.get("mas") or "-")

    @property
    def has_records(self) -> bool:
        return (self.path / RECORDS_FILE).is_file()

    @property
    def has_failures(self) -> bool:
        return (self.path / FAILURES_FILE).is_file()

    @property
    def has_metrics(self) -> bool:
        return (self.path / METRICS_FILE).is_file()

    @property
    def curve_file(self) -> Path | None:
        for name in CURVE_FILES:
            if (self.path / name).is_file():
                return self.path / name
        return None

    @property
    def model_label(self) -> str:
        """The model name, shortened to its last path part (served folders are full paths)."""
        if not self.model:
            return "-"
        return Path(self.model).name if "/" in self.model else self.model


@dataclass
class RunScan:
    entries: list[RunEntry] = field(default_factory=list)
    unreadable: list[tuple[str, str]] = field(default_factory=list)  # (name, why), never hidden


def scan_runs(root: Path) -> RunScan:
    """Every run directory under the root (`harness.runstore.scan_runs`), newest first, and the
    ones that could not be read (a broken run.json, a path that leaves the root), with why.
    """
    root = Path(root).resolve()
    scan = RunScan()
    found, broken = runstore_scan(root)
    for item in broken:
        scan.unreadable.append((_name_of(root, item.path), " ".join(item.reason.split())))
    for run in found:
        try:
            path = inside_root(root, run.path)
            info = run.info()
        except PathRefused:
            scan.unreadable.append((_name_of(root, run.path), "leaves the runs root"))
            continue
        except Exception as exc:  # a run.json that broke after listing
            scan.unreadable.append((_name_of(root, run.path), " ".join(str(exc).split())))
            continue
        scan.entries.append(
            RunEntry(
                name=relative_name(root, path),
                path=path,
                kind=info.kind,
                model=info.model,
                started_at=info.started_at,
                ended_at=info.ended_at,
                status=info.status,
                attempts=info.attempts,
                config=info.config or {},
            )
        )
    scan.entries.sort(key=lambda e: (e.started_at or "", e.name), reverse=True)
    scan.unreadable.sort()
    return scan


def _name_of(root: Path, path: Path) -> str:
    try:
        return str(Path(path).relative_to(root))
    except ValueError:
        return str(path)


def discover_runs(root: Path) -> list[RunEntry]:
    """The readable runs of `scan_runs`, newest first (a run reached through a symlink that
    leaves the root is not one of them)."""
    return scan_runs(root).entries


def runs_table(entries: Sequence[RunEntry], record_counts: dict[str, int]) -> pd.DataFrame:
    rows = [
        {
            "run": e.name,
            "kind": e.kind,
            "model": e.model_label,
            "mas": e.mas if e.kind == "eval" else "-",
            "started": (e.started_at or "-").replace("T", " ")[:19],
            "status": e.status,
            "attempts": e.attempts,
            "lines": record_counts.get(e.name, 0),
        }
        for e in entries
    ]
    columns = ["run", "kind", "model", "mas", "started", "status", "attempts", "lines"]
    return pd.DataFrame(rows, columns=columns)


# ---------------------------------------------------------------- eval records


def _message_tokens(message: dict[str, Any]) -> tuple[int, int]:
    usage = message.get("usage") or {}
    return int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)


def _record_tokens(record: dict[str, Any], messages: list[dict[str, Any]]) -> int:
    per_agent = (record.get("metrics") or {}).get("tokens_per_agent")
    if isinstance(per_agent, dict) and per_agent:
        return sum(
            int(v.get("prompt_tokens") or 0) + int(v.get("completion_tokens") or 0)
            for v in per_agent.values()
            if isinstance(v, dict)
        )
    return sum(sum(_message_tokens(m)) for m in messages)


EVAL_COLUMNS = [
    "suite",
    "sample_id",
    "epoch",
    "correct",
    "extraction_failed",
    "has_error",
    "error",
    "extracted",
    "gold",
    "llm_calls",
    "tokens",
    "latency_s",
    "row",
    "search",
]


def eval_frame(records: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """One row per eval record with the fields the tables filter on; `row` indexes `records`.

    `search` is the lowercased question, final answer and every message's text and reasoning.
    """
    rows: list[tuple[Any, ...]] = []
    for index, record in enumerate(records):
        transcript = record.get("transcript") if isinstance(record.get("transcript"), dict) else {}
        messages = [m for m in (transcript.get("messages") or []) if isinstance(m, dict)]
        pieces = [str(record.get("question") or ""), str(record.get("final_answer") or "")]
        for message in messages:
            pieces.append(str(message.get("text") or ""))
            pieces.append(str(message.get("reasoning") or ""))
        error = record.get("error")
        rows.append(
            (
                str(record.get("suite") or "-"),
                str(record.get("sample_id", "-")),
                _as_int(record.get("epoch"), 0),
                bool(record.get("correct")),
                bool(record.get("extraction_failed")),
                bool(error),
                str(error) if error else None,
                _as_text(record.get("extracted")),
                _as_text(record.get("gold")),
                int((record.get("metrics") or {}).get("llm_calls") or len(messages)),
                _record_tokens(record, messages),
                _as_float(record.get("latency_s")),
                index,
                "\n".join(pieces).lower(),
            )
        )
    return pd.DataFrame.from_records(rows, columns=EVAL_COLUMNS)


def _as_int(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _as_float(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _as_text(value: Any) -> str | None:
    return None if value is None else str(value)


def accuracy_rows(frame: pd.DataFrame, *, run: str, mas: str, model: str) -> list[dict[str, Any]]:
    """Per suite of one run: accuracy over graded attempts with its 95% interval (Wilson, clustered
    by question when questions have several epochs: `harness.stats.clustered_wilson_ci`).

    Errored attempts are counted apart and not scored as wrong, as in `mars eval`'s summary; a
    suite without a graded attempt has no score (accuracy and interval None, never 0).
    """
    out: list[dict[str, Any]] = []
    if frame.empty:
        return out
    for suite, rows in frame.groupby("suite", sort=True):
        graded = rows[~rows["has_error"]]
        n = len(graded)
        correct = int(graded["correct"].sum())
        per_question = graded.groupby("sample_id")["correct"].agg(["sum", "count"])
        interval = clustered_wilson_ci(
            per_question["sum"].astype(int).tolist(), per_question["count"].astype(int).tolist()
        )
        out.append(
            {
                "suite": suite,
                "mas": mas,
                "model": model,
                "run": run,
                "n": n,
                "correct": correct,
                "accuracy": correct / n if n else None,
                "ci_low": interval.low if interval else None,
                "ci_high": interval.high if interval else None,
                "errors": int(rows["has_error"].sum()),
                "extraction_failures": int(graded["extraction_failed"].sum()),
            }
        )
    return out


def accuracy_table(rows: Iterable[dict[str, Any]]) -> pd.DataFrame:
    columns = ["suite", "mas", "model", "run", "n", "correct", "accuracy", "ci_low", "ci_high"]
    columns += ["errors", "extraction_failures"]
    table = pd.DataFrame(list(rows), columns=columns)
    return table.sort_values(["suite", "mas", "model", "run"], kind="stable").reset_index(drop=True)


CORRECTNESS = ("all", "correct", "wrong")
TRI_STATE = ("all", "only", "none")


def filter_samples(
    frame: pd.DataFrame,
    *,
    suites: Sequence[str] = (),
    correctness: str = "all",
    extraction: str = "all",
    errors: str = "all",
    text: str = "",
) -> pd.DataFrame:
    """The eval rows matching every filter; `text` is a case-insensitive substring search."""
    mask = pd.Series(True, index=frame.index)
    if suites:
        mask &= frame["suite"].isin(list(suites))
    if correctness == "correct":
        mask &= frame["correct"] & ~frame["has_error"]
    elif correctness == "wrong":
        mask &= ~frame["correct"] & ~frame["has_error"]
    for column, choice in (("extraction_failed", extraction), ("has_error", errors)):
        if choice == "only":
            mask &= frame[column]
        elif choice == "none":
            mask &= ~frame[column]
    needle = text.strip().lower()
    if needle:
        mask &= frame["search"].str.contains(needle, regex=False)
    return frame[mask]


@dataclass
class MessageView:
    index: int
    agent: str
    round: int | None
    reasoning: str
    text: str
    prompt_tokens: int | None
    completion_tokens: int | None
    reasoning_tokens: int | None
    latency_s: float | None
    finish_reason: str | None
    retries: int


def transcript_messages(record: dict[str, Any]) -> list[MessageView]:
    transcript = record.get("transcript") if isinstance(record.get("transcript"), dict) else {}
    views: list[MessageView] = []
    for index, message in enumerate(transcript.get("messages") or [], start=1):
        if not isinstance(message, dict):
            continue
        usage = message.get("usage") if isinstance(message.get("usage"), dict) else {}
        views.append(
            MessageView(
                index=index,
                agent=str(message.get("agent") or message.get("role") or "-"),
                round=message.get("round") if isinstance(message.get("round"), int) else None,
                reasoning=str(message.get("reasoning") or ""),
                text=str(message.get("text") or ""),
                prompt_tokens=usage.get("prompt_tokens"),
                completion_tokens=usage.get("completion_tokens"),
                reasoning_tokens=usage.get("reasoning_tokens"),
                latency_s=_as_float(message.get("latency_s")),
                finish_reason=message.get("finish_reason"),
                retries=_as_int(message.get("retries"), 0),
            )
        )
    return views


def key_of(record: dict[str, Any]) -> tuple[str, str, int]:
    return (str(record.get("suite")), str(record.get("sample_id")), _as_int(record.get("epoch"), 0))


def fmt_key(record: dict[str, Any]) -> str:
    suite, sample_id, epoch = key_of(record)
    return f"{suite} / {sample_id} / epoch {epoch}"


# ---------------------------------------------------------------- failure modes


def failure_rates(verdicts_by_run: dict[str, list[dict[str, Any]]]) -> pd.DataFrame:
    """Long table: run x (category | mode) with rate, Wilson interval, count and n."""
    rows: list[dict[str, Any]] = []
    for run, verdicts in verdicts_by_run.items():
        summary = summarize_failures(verdicts)
        for category in CATEGORIES:
            cell = summary["categories"][category.key]
            rows.append(_rate_row(run, "category", category.id, category.name, category.key, cell))
        for mode in FAILURE_MODES:
            cell = summary["modes"][mode.id]
            rows.append(_rate_row(run, "mode", mode.id, mode.name, mode.category, cell))
        rows.append(_rate_row(run, "any", "any", "any failure mode", "any", summary["any_failure"]))
    columns = ["run", "level", "id", "name", "category", "rate", "ci_low", "ci_high"]
    columns += ["count", "n"]
    return pd.DataFrame(rows, columns=columns)


def _rate_row(
    run: str, level: str, ident: str, name: str, category: str, cell: dict[str, Any]
) -> dict[str, Any]:
    return {
        "run": run,
        "level": level,
        "id": ident,
        "name": name,
        "category": category,
        "rate": cell["rate"],
        "ci_low": cell["ci95"][0],
        "ci_high": cell["ci95"][1],
        "count": cell["count"],
        "n": cell["n"],
    }


def verdicts_showing(verdicts: Iterable[dict[str, Any]], target: str) -> list[dict[str, Any]]:
    """Parsed verdicts that show a mode id ("FM-2.5"), a category key ("misalignment") or any."""
    out = []
    for verdict in verdicts:
        if verdict.get("error") or not verdict.get("parsed"):
            continue
        modes = verdict.get("modes") or []
        categories = verdict.get("categories") or []
        if (target == "any" and modes) or target in modes or target in categories:
            out.append(verdict)
    return out


# ---------------------------------------------------------------- arenas


def arena_summaries(summary: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Arena summaries in a summary.json: one at top level, or a list / map of them."""
    if not isinstance(summary, dict):
        return []
    if isinstance(summary.get("seats"), dict):
        return [summary]
    for key in ("arenas", "matchups", "results", "games"):
        value = summary.get(key)
        if isinstance(value, list):
            return [s for s in value if isinstance(s, dict) and isinstance(s.get("seats"), dict)]
        if isinstance(value, dict):
            found = []
            for name, item in value.items():
                if isinstance(item, dict) and isinstance(item.get("seats"), dict):
                    found.append({"game": name, **item})
            if found:
                return found
    return []


SEAT_COLUMNS = ["run", "game", "player", "opponent", "seat", "n", "win", "draw", "loss"]
SEAT_COLUMNS += ["mean_return", "normalized_return", "invalid_rate"]


def seat_table(summaries_by_run: dict[str, list[dict[str, Any]]]) -> pd.DataFrame:
    rows = []
    for run, summaries in summaries_by_run.items():
        for summary in summaries:
            for seat, cell in (summary.get("seats") or {}).items():
                if not isinstance(cell, dict):
                    continue
                rows.append(
                    {
                        "run": run,
                        "game": summary.get("game"),
                        "player": summary.get("player"),
                        "opponent": summary.get("opponent"),
                        "seat": seat,
                        **{k: cell.get(k) for k in SEAT_COLUMNS[5:]},
                    }
                )
    return pd.DataFrame(rows, columns=SEAT_COLUMNS)


def _seat_index(record: dict[str, Any]) -> int | None:
    seat = record.get("seat")
    if seat in SEATS:
        return SEATS.index(seat)
    if isinstance(seat, int) and seat in (0, 1):
        return seat
    return None


def _pick(values: Any, index: int) -> Any:
    if isinstance(values, list) and 0 <= index < len(values):
        return values[index]
    return None


def arena_outcomes(records: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """From episode records: per game, opponent and seat of the player, the outcome rates."""
    tallies: dict[tuple[str, str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for record in records:
        seat = _seat_index(record)
        if seat is None:
            continue
        key = (str(record.get("game", "-")), str(record.get("opponent", "-")), SEATS[seat])
        tally = tallies[key]
        if record.get("error"):
            tally["errors"] += 1
            continue
        tally["n"] += 1
        outcome = _pick(record.get("outcomes"), seat)
        if outcome in ("win", "draw", "loss"):
            tally[outcome] += 1
        value = _as_float(_pick(record.get("returns"), seat))
        if value is not None:
            tally["return_sum"] += value
            tally["returns"] += 1
        tally["model_turns"] += _as_float(_pick(record.get("model_turns"), seat)) or 0
        tally["invalid_turns"] += _as_float(_pick(record.get("invalid_turns"), seat)) or 0
    rows = []
    for (game, opponent, seat), t in sorted(tallies.items()):
        n = int(t["n"])
        row: dict[str, Any] = {"game": game, "opponent": opponent, "seat": seat, "n": n}
        for outcome in ("win", "draw", "loss"):
            row[outcome] = t[outcome] / n if n else None
        low, high = wilson_ci(int(t["win"]), n)
        row["win_ci_low"], row["win_ci_high"] = (low, high) if n else (None, None)
        row["mean_return"] = t["return_sum"] / t["returns"] if t["returns"] else None
        row["invalid_rate"] = t["invalid_turns"] / t["model_turns"] if t["model_turns"] else None
        row["errors"] = int(t["errors"])
        rows.append(row)
    columns = ["game", "opponent", "seat", "n", "win", "draw", "loss", "win_ci_low"]
    columns += ["win_ci_high", "mean_return", "invalid_rate", "errors"]
    return pd.DataFrame(rows, columns=columns)


def episode_table(records: Sequence[dict[str, Any]]) -> pd.DataFrame:
    rows = []
    for index, record in enumerate(records):
        seat = _seat_index(record)
        rows.append(
            {
                "game": str(record.get("game", "-")),
                "seed": record.get("seed"),
                "seat": SEATS[seat] if seat is not None else "-",
                "opponent": str(record.get("opponent", "-")),
                "outcome": _pick(record.get("outcomes"), seat) if seat is not None else None,
                "return": _pick(record.get("returns"), seat) if seat is not None else None,
                "turns": len(record.get("turns") or []),
                "invalid": bool(record.get("invalid")),
                "error": record.get("error"),
                "row": index,
            }
        )
    columns = ["game", "seed", "seat", "opponent", "outcome", "return", "turns", "invalid"]
    return pd.DataFrame(rows, columns=[*columns, "error", "row"])


@dataclass
class TurnView:
    index: int
    seat: int | None
    seat_label: str
    turn: int | None
    state: str  # what the seat was shown this turn (the last user message of its prompt)
    prompt: list[dict[str, str]]
    reasoning: str
    reply: str
    action: str | None
    legal: bool | None
    reward: float | None
    usage: dict[str, Any]
    error: str | None
    is_model: bool


def _prompt_messages(prompt: Any) -> list[dict[str, str]]:
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    if isinstance(prompt, list):
        return [
            {"role": str(m.get("role", "-")), "content": str(m.get("content", ""))}
            for m in prompt
            if isinstance(m, dict)
        ]
    return []


def replay_turns(record: dict[str, Any]) -> list[TurnView]:
    """The turns of an arena episode in order, with each seat named by who sat there."""
    players = record.get("players") if isinstance(record.get("players"), list) else []
    player_seat = _seat_index(record)
    views = []
    for index, turn in enumerate(record.get("turns") or []):
        if not isinstance(turn, dict):
            continue
        seat = turn.get("seat") if isinstance(turn.get("seat"), int) else None
        label = SEATS[seat] if seat in (0, 1) else "-"
        if seat is not None and seat < len(players):
            label += f" ({players[seat]})"
        if seat is not None and seat == player_seat:
            label += " [player]"
        prompt = _prompt_messages(turn.get("prompt"))
        users = [m["content"] for m in prompt if m["role"] == "user"]
        views.append(
            TurnView(
                index=index,
                seat=seat,
                seat_label=label,
                turn=turn.get("turn") if isinstance(turn.get("turn"), int) else None,
                state=users[-1] if users else "",
                prompt=prompt,
                reasoning=str(turn.get("reasoning") or ""),
                reply=str(turn.get("reply") or ""),
                action=_as_text(turn.get("action")),
                legal=turn.get("legal") if isinstance(turn.get("legal"), bool) else None,
                reward=_as_float(turn.get("reward")),
                usage=turn.get("usage") if isinstance(turn.get("usage"), dict) else {},
                error=_as_text(turn.get("error")),
                is_model="usage" in turn or "reply" in turn,
            )
        )
    return views


# ---------------------------------------------------------------- training


def _flatten(row: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in row.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, name + "/"))
        else:
            flat[name] = value
    return flat


def metrics_frame(rows: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """metrics.jsonl rows flattened ("eval": {"mcts": ...} -> "eval/mcts/..."), by step."""
    flat = [_flatten(r) for r in rows]
    frame = pd.DataFrame(flat)
    if frame.empty:
        return frame
    if "step" not in frame.columns:
        frame.insert(0, "step", range(len(frame)))
    frame["step"] = pd.to_numeric(frame["step"], errors="coerce")
    return frame.dropna(subset=["step"]).sort_values("step", kind="stable").reset_index(drop=True)


def numeric_columns(frame: pd.DataFrame, exclude: Iterable[str] = ("step",)) -> list[str]:
    skip = set(exclude)
    out = []
    for column in frame.columns:
        if column in skip:
            continue
        values = pd.to_numeric(frame[column], errors="coerce")
        if values.notna().any() and frame[column].map(_is_scalar_number).all():
            out.append(column)
    return out


def _is_scalar_number(value: Any) -> bool:
    if value is None or isinstance(value, bool):
        return value is None
    return isinstance(value, (int, float))


def _ci_bounds(value: Any) -> tuple[float | None, float | None]:
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return _as_float(value[0]), _as_float(value[1])
    return None, None


def _win_interval(row: pd.Series, prefix: str) -> tuple[float | None, float | None]:
    """A win rate's 95% interval: `<prefix>/ci95` as [low, high], `<prefix>/ci95_low` and
    `/ci95_high` (as `mars train` writes them), or `/win_ci_low` and `/win_ci_high`."""
    low, high = _ci_bounds(row.get(f"{prefix}/ci95"))
    for low_name, high_name in (("ci95_low", "ci95_high"), ("win_ci_low", "win_ci_high")):
        if low is None:
            low = _as_float(row.get(f"{prefix}/{low_name}"))
            high = _as_float(row.get(f"{prefix}/{high_name}"))
    return low, high


def win_rate_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Every in-training win rate with its interval: `eval/<game>/<opponent>/<seat>/win` (the CPU
    trainer's metrics) or `eval/<opponent>/<seat>/win` (game "-")."""
    rows = []
    columns = ["step", "game", "opponent", "seat", "win", "ci_low", "ci_high"]
    if frame.empty:
        return pd.DataFrame(rows, columns=columns)
    for column in frame.columns:
        parts = column.split("/")
        if len(parts) not in (4, 5) or parts[0] != "eval" or parts[-1] != "win":
            continue
        game = parts[1] if len(parts) == 5 else "-"
        prefix = "/".join(parts[:-1])
        for _, row in frame.iterrows():
            win = _as_float(row[column])
            if win is None:
                continue
            low, high = _win_interval(row, prefix)
            rows.append(
                {
                    "step": row["step"],
                    "game": game,
                    "opponent": parts[-3],
                    "seat": parts[-2],
                    "win": win,
                    "ci_low": low,
                    "ci_high": high,
                }
            )
    return pd.DataFrame(rows, columns=columns)


def learning_curve(path: Path) -> JsonlData:
    """A loop's learning curve; nested JSON objects flattened with "/" as in the CSV."""
    if path.suffix == ".csv":
        return read_csv_rows(path)
    loaded = read_jsonl(path)
    return JsonlData(rows=[_flatten(row) for row in loaded.rows], malformed=loaded.malformed)


def summary_of(path: Path) -> dict[str, Any] | None:
    return read_json(Path(path) / SUMMARY_FILE)


# ---------------------------------------------------------------- exploitability

EXPLOIT_COLUMNS = ["x", "series", "exploitability", "ci_low", "ci_high", "nash_conv"]


def _exploit_series(columns: Iterable[str]) -> list[tuple[str, str, str, str, str]]:
    """(series label, value column, interval prefix, interval kind, NashConv column) for every
    exploitability column: `exploitability/<game>` (metrics.jsonl, interval in
    `exploitability/<game>/ci95_low|high`) or `<item>/exploitability` (a loop's curve, interval
    in `<item>/exploitability_ci95_low|high`, or `<item>/ci95` as [low, high] in its JSONL)."""
    found = []
    for column in columns:
        parts = column.split("/")
        if len(parts) == 2 and parts[0] == "exploitability":
            game = parts[1]
            found.append((game, column, column, "metrics", f"nash_conv/{game}"))
        elif len(parts) == 2 and parts[0] == "exploitability_avg":  # no interval, no NashConv
            found.append((f"{parts[1]} (average policy)", column, column, "metrics", ""))
        elif len(parts) >= 2 and parts[-1] == "exploitability":
            item = "/".join(parts[:-1])
            label = parts[-2]
            found.append((label, column, item, "curve", f"{item}/nash_conv"))
    return found


def _exploit_interval(row: pd.Series, prefix: str, kind: str) -> tuple[float | None, float | None]:
    if kind == "metrics":
        return _as_float(row.get(f"{prefix}/ci95_low")), _as_float(row.get(f"{prefix}/ci95_high"))
    low, high = _ci_bounds(row.get(f"{prefix}/ci95"))
    if low is None:
        low = _as_float(row.get(f"{prefix}/exploitability_ci95_low"))
        high = _as_float(row.get(f"{prefix}/exploitability_ci95_high"))
    return low, high


def exploitability_table(frame: pd.DataFrame, x: str = "step") -> pd.DataFrame:
    """Every exploitability figure of a metrics frame or a learning curve, one row per (x,
    series), with its 95% interval and NashConv (None where missing)."""
    rows = []
    if frame.empty or x not in frame.columns:
        return pd.DataFrame(rows, columns=EXPLOIT_COLUMNS)
    for label, column, prefix, kind, nash_column in _exploit_series(frame.columns):
        for _, row in frame.iterrows():
            value = _as_float(row[column])
            if value is None:
                continue
            low, high = _exploit_interval(row, prefix, kind)
            rows.append(
                {
                    "x": row[x],
                    "series": label,
                    "exploitability": value,
                    "ci_low": low,
                    "ci_high": high,
                    "nash_conv": _as_float(row.get(nash_column)),
                }
            )
    return pd.DataFrame(rows, columns=EXPLOIT_COLUMNS)


ACTION_SHARE_COLUMNS = ["x", "game", "state", "action", "share"]
# A loop's columns of the watched run's training figures (CSV, JSONL): a MAS run's
# `train/policy/<name>/loss` is a policy's update, not an action share.
TRAINING_PREFIXES = ("train", "train_metrics")


def action_share_table(frame: pd.DataFrame, x: str = "step") -> pd.DataFrame:
    """P(action | information state) of the trainer's exploitability evaluations, one row per
    (x, game, state, action), from the `policy/<game>/<state>/<action>` columns of metrics.jsonl
    (or `<item>/policy/<state>/<action>` of a loop's curve):
    a card-blind policy shows as equal shares across a game's cards."""
    rows = []
    if frame.empty or x not in frame.columns:
        return pd.DataFrame(rows, columns=ACTION_SHARE_COLUMNS)
    for column in frame.columns:
        parts = column.split("/")
        if len(parts) == 4 and parts[0] == "policy":  # metrics.jsonl
            series = parts[1]
        elif len(parts) >= 4 and parts[-3] == "policy" and parts[0] not in TRAINING_PREFIXES:
            series = "/".join(parts[:-3])  # a loop's curve: <item>/policy/<state>/<action>
        else:
            continue
        for _, row in frame.iterrows():
            share = _as_float(row[column])
            if share is not None:
                rows.append(
                    {
                        "x": row[x],
                        "game": series,
                        "state": parts[2],
                        "action": parts[3],
                        "share": share,
                    }
                )
    return pd.DataFrame(rows, columns=ACTION_SHARE_COLUMNS)


EXPLOIT_RUN_COLUMNS = [
    "run",
    "game",
    "player",
    "model",
    "samples",
    "temperature",
    "exploitability",
    "ci_low",
    "ci_high",
    "nash_conv",
    "invalid_rate",
    "states",
]


def exploitability_runs_table(summaries: dict[str, dict[str, Any] | None]) -> pd.DataFrame:
    """One row per `mars exploitability` run (its summary.json; '-' where missing)."""
    rows = []
    for name, summary in summaries.items():
        summary = summary if isinstance(summary, dict) else {}
        low, high = _ci_bounds(summary.get("ci95"))
        model = summary.get("model")
        rows.append(
            {
                "run": name,
                "game": summary.get("game"),
                "player": summary.get("player"),
                "model": Path(model).name if isinstance(model, str) and "/" in model else model,
                "samples": "exact" if summary.get("exact") else summary.get("samples"),
                "temperature": summary.get("temperature"),
                "exploitability": _as_float(summary.get("exploitability")),
                "ci_low": low,
                "ci_high": high,
                "nash_conv": _as_float(summary.get("nash_conv")),
                "invalid_rate": _as_float(summary.get("invalid_rate")),
                "states": summary.get("states"),
            }
        )
    return pd.DataFrame(rows, columns=EXPLOIT_RUN_COLUMNS)
