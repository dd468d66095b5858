"""Writing episode records to a run directory's records.jsonl, fast enough for bot arenas.

The lines are the same as `RunDir.append_many` writes (one JSON object per line, each batch
flushed), but a 20,000-game bot arena spends most of its time encoding JSON, so this writer reuses
one encoder and encodes each distinct bot move (seat, turn, action, reward) once: a bot record is
its header plus cached move fragments. Model turns are encoded in full every time.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from json import encoder as json_encoder
from pathlib import Path
from typing import Any

_BOT_TURN_KEYS = 5  # a bot's move has exactly: seat, turn, action, legal, reward
_CACHE_LIMIT = 100_000


def _fast_encoder() -> Callable[[Any], str]:
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


class RecordWriter:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._encode = _fast_encoder()
        self._fragments: dict[tuple[Any, ...], str] = {}

    def encode(self, record: dict[str, Any]) -> str:
        """One record as one line of JSON (no newline); `turns` comes last."""
        turns = record.get("turns")
        if turns is None:
            return self._encode(record)
        head_fields = record.copy()
        del head_fields["turns"]
        head = self._encode(head_fields)
        parts = []
        fragments = self._fragments
        for turn in turns:
            if len(turn) != _BOT_TURN_KEYS:
                parts.append(self._encode(turn))
                continue
            key = (turn["seat"], turn["turn"], turn["action"], turn["legal"], turn["reward"])
            fragment = fragments.get(key)
            if fragment is None:
                if len(fragments) >= _CACHE_LIMIT:
                    fragments.clear()
                fragment = fragments[key] = self._encode(turn)
            parts.append(fragment)
        joiner = ', "turns": [' if head != "{}" else '"turns": ['
        return head[:-1] + joiner + ", ".join(parts) + "]}"

    def __call__(self, records: list[dict[str, Any]]) -> None:
        if not records:
            return
        encode = self.encode
        text = "".join([encode(record) + "\n" for record in records])
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
