"""Writing episode records to a run directory's records.jsonl, fast enough for bot arenas.

The lines are the same as `RunDir.append_many` writes (one JSON object per line, each batch
flushed), but a 20,000-game bot arena spends most of its time encoding JSON, so this writer reuses
one encoder and memoises the parts that repeat:
- each distinct bot move (seat, turn, action, reward) is encoded once: a bot record's turns are
  cached move fragments (model turns, and moves whose numbers are not plain ints and a non-zero
  float, are encoded in full every time);
- the record header (every field but `turns`) is encoded once per distinct header apart from
  `seed`, which is spliced in. The memo key is the field names with `marshal.dumps` of the values:
  marshal is exact about types (1, 1.0 and True differ, so do 0.0 and -0.0), so equal keys mean
  equal JSON; a value marshal cannot write (say a Path) is encoded without the memo.
"""

from __future__ import annotations

import json
import marshal
from collections.abc import Callable
from json import encoder as json_encoder
from typing import Any

from core.runstore import RunDir

_BOT_TURN_KEYS = 5  # a bot's move has exactly: seat, turn, action, legal, reward
_CACHE_LIMIT = 100_000  # cached move fragments (small strings)
_HEAD_CACHE_LIMIT = 4_096  # cached headers (a few hundred bytes each)
_SPLICED = "seed"  # the header field that differs in every record, kept out of the memo key
_MISSING = object()

Encoder = Callable[[Any], str]


def _fast_encoder() -> Encoder:
    """json.dumps(obj, ensure_ascii=False, default=str) without rebuilding the encoder per call."""
    plain = json.JSONEncoder(ensure_ascii=False, default=str)
    make = json_encoder.c_make_encoder
    if make is None:  # no C accelerator: the standard encoder
        return plain.encode
    iterencode = make(
        None, str, json_encoder.encode_basestring, None, ": ", ", ", False, False, True
    )

    def encode(obj: Any) -> str:
        if isinstance(obj, str):
            return plain.encode(obj)
        return "".join(iterencode(obj, 0))

    return encode


def _split_object(encode: Encoder, head: dict[str, Any], name: str) -> tuple[str, str]:
    """(prefix, suffix) with prefix + JSON(head[name]) + suffix == JSON(head), keys in order."""
    keys = list(head)
    at = keys.index(name)
    before = encode({k: head[k] for k in keys[:at]})
    after = encode({k: head[k] for k in keys[at + 1 :]})
    prefix = (before[:-1] + ", " if at else "{") + encode(name) + ": "
    suffix = ", " + after[1:] if len(after) > 2 else "}"
    return prefix, suffix


def _exact_move(key: tuple[Any, ...]) -> bool:
    """Whether equal keys mean equal JSON: 0 == False == 0.0 == -0.0 as dict keys, not as JSON."""
    seat, turn, _, legal, reward = key
    return (
        type(seat) is int
        and type(turn) is int
        and type(legal) is bool
        and type(reward) is float
        and reward != 0.0
    )


class RecordWriter:
    """A sink for `run_arena`: encodes records and appends them to the run's records.jsonl
    through the run's own append handle (kept open between batches)."""

    def __init__(self, run: RunDir) -> None:
        self.run = run
        self._encode = _fast_encoder()
        self._fragments: dict[tuple[Any, ...], str] = {}
        self._heads: dict[tuple[tuple[str, ...], bytes], tuple[str, str]] = {}

    def encode(self, record: dict[str, Any]) -> str:
        """One record as one line of JSON (no newline); `turns` comes last."""
        turns = record.get("turns")
        if turns is None:
            return self._encode(record)
        head_fields = record.copy()
        del head_fields["turns"]
        head = self._encode_head(head_fields)
        try:  # a bot episode's moves are shared `BotMove`s that carry their JSON
            body = ", ".join([turn.json for turn in turns])  # type: ignore[attr-defined]
        except AttributeError:
            body = ", ".join(self._encode_turns(turns))
        joiner = ', "turns": [' if head != "{}" else '"turns": ['
        return head[:-1] + joiner + body + "]}"

    def _encode_turns(self, turns: list[dict[str, Any]]) -> list[str]:
        parts = []
        fragments = self._fragments
        for turn in turns:
            if len(turn) != _BOT_TURN_KEYS:
                parts.append(self._encode(turn))
                continue
            key = (turn["seat"], turn["turn"], turn["action"], turn["legal"], turn["reward"])
            if not _exact_move(key):
                parts.append(self._encode(turn))
                continue
            fragment = fragments.get(key)
            if fragment is None:
                if len(fragments) >= _CACHE_LIMIT:
                    fragments.clear()
                fragment = fragments[key] = self._encode(turn)
            parts.append(fragment)
        return parts

    def _encode_head(self, head: dict[str, Any]) -> str:
        """JSON of the header, through the memo when its values can be marshalled."""
        names = tuple(head)
        values = list(head.values())
        spliced = values.pop(names.index(_SPLICED)) if _SPLICED in head else _MISSING
        try:
            key = (names, marshal.dumps(values, 2))
        except ValueError:  # a value marshal cannot write: no memo for this header
            return self._encode(head)
        parts = self._heads.get(key)
        if parts is None:
            parts = self._remember(key, head, spliced is not _MISSING)
        prefix, suffix = parts
        if spliced is _MISSING:
            return prefix
        # JSON writes an int (not a bool) as int.__repr__ does.
        text = int.__repr__(spliced) if type(spliced) is int else self._encode(spliced)
        return prefix + text + suffix

    def _remember(
        self, key: tuple[tuple[str, ...], bytes], head: dict[str, Any], spliced: bool
    ) -> tuple[str, str]:
        if len(self._heads) >= _HEAD_CACHE_LIMIT:
            self._heads.clear()
        parts = _split_object(self._encode, head, _SPLICED) if spliced else (self._encode(head), "")
        self._heads[key] = parts
        return parts

    def __call__(self, records: list[dict[str, Any]]) -> None:
        if not records:
            return
        encode = self.encode
        self.run.append_lines("".join([encode(record) + "\n" for record in records]))
