"""One message for every unknown name (suite, MAS, game, player, option, ...): what was asked,
the closest known names, and the full list."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def closest(name: str, known: Iterable[str], n: int = 3) -> list[str]:
    """Known names that look like `name` (case ignored), best first."""
    by_lower = {candidate.lower(): candidate for candidate in known}
    wanted = name.strip().lower()
    # A name the user shortened ("kuhn" for kuhn_poker) first, then spelling neighbours.
    contained = [c for c in by_lower if wanted and len(wanted) >= 3 and wanted in c]
    similar = difflib.get_close_matches(wanted, list(by_lower), n=n, cutoff=0.6)
    matches = list(dict.fromkeys([*sorted(contained, key=len), *similar]))[:n]
    return [by_lower[match] for match in matches]


def unknown_name(kind: str, name: str, known: Iterable[str]) -> str:
    """E.g. "unknown suite 'gsm8' (did you mean 'gsm8k'?); known: aime24, gsm8k, ..."."""
    names = sorted(set(known))
    guesses = closest(name, names)
    hint = f" (did you mean {' or '.join(repr(g) for g in guesses)}?)" if guesses else ""
    listed = ", ".join(names) if names else f"none (no {kind} is defined)"
    return f"unknown {kind} {name!r}{hint}; known: {listed}"


def a_run_of(kind: str) -> str:
    """ "an 'eval' run", "a 'train' run"."""
    article = "an" if kind[:1].lower() in "aeiou" else "a"
    return f"{article} '{kind}' run"


def counted(number: int, noun: str, plural: str | None = None) -> str:
    """ "1 checkpoint", "2 checkpoints", "0 replies" (with `plural` for irregular nouns)."""
    return f"{number} {noun if number == 1 else plural or noun + 's'}"


def comma_list(text: str, flag: str) -> list[str]:
    """`a,b,c` -> ["a", "b", "c"] (spaces and empty items dropped); a name given twice is
    refused in one line, since it would run its work twice and count it twice."""
    from core.errors import MarsError

    names = [name.strip() for name in text.split(",") if name.strip()]
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise MarsError(f"{flag} names {name!r} twice; give each once")
        seen.add(name)
    return names
