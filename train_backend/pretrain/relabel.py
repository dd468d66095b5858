"""Relabelled positions: a compact game prompt and its reply with the words and labels renamed.

A start taught only a game's own words answers with those words: the tiny model learns
`<answer><PASS></answer>` as a phrase, not as "copy a label from the `Legal:` line", so an
obfuscated variant (renamed moves, reworded rules) gets replies that are 100% invalid
(experiments.md). A recipe's `relabel_share` replaces that share of each game's compact examples
with a relabelled copy: the same position and the same move, with

- each distinct word of the rules, seat, history and state renamed to an invented word (with
  probability `WORD_SHARE`, consistently within the example, case kept, one letter for one
  letter), a board row mark by mark so that it keeps its shape, and half the time the board's
  empty-cell dot to another symbol;
- half the time every legal label replaced whole by an invented one, in one of three shapes
  (distinct words, one word and a number, one word and a cell code), wherever the label's text
  appears.

The format's own words stay (`You are`, `Other player:`, `State:`, `Legal:`, the answer tag and
`I choose`), so the only way to a valid reply is to read the move off the `Legal:` line. An
invented word is 2 to 7 letters drawn uniformly: words built from syllables let the model guess
their shape, and it learnt to invent such words instead of copying (`<petupen b1>` for
`<occupy u3>`, pretraining.md). No invented word is a word of any obfuscated variant's title,
seats or rules (games/variants): the evaluated variants stay out of the training data.
Everything is drawn from the `rng` given.
"""

from __future__ import annotations

import functools
import random
import re
from collections.abc import Callable
from dataclasses import replace

from train_backend.pretrain.format_data import Example, game_reply

WORD_SHARE = 0.7  # of the distinct words, renamed
WHOLE_LABEL_SHARE = 0.5  # of the examples, every legal label replaced whole
# 2: invented words of uniform letters (1: of syllables); in the recipe of a relabelling build only
RELABEL_VERSION = 2
WORD_LETTERS = (2, 7)  # an invented word's length, drawn uniformly
LETTERS = "abcdefghijklmnopqrstuvwxyz"
DOT_SYMBOLS = "-_~=+:*"
SCAFFOLD_PREFIXES = ("You are ", "Other player: ", "Legal: ")
SCAFFOLD_LINES = ("State:", "Reply <answer>ACTION</answer>.", "Reply <answer>NUMBER</answer>.")
ANSWER = "\n<answer>"
CHOOSE = "I choose "
_WORD = r"[A-Za-z]+"


class _Names:
    """One example's renaming: each word decided once (whatever its case: the board's `x` and
    the label's `X` stay one mark), no two alike."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.table: dict[str, str] = {}
        self.used: set[str] = set()

    def _fresh(self, make: Callable[[], str]) -> str:
        candidate = make()
        for _ in range(50):  # bounded: an invented word is almost never taken already
            if candidate not in self.used:
                break
            candidate = make()
        else:  # e.g. every letter taken: a word no other can be
            candidate = f"{self.invented_word()}{len(self.used)}"
        self.used.add(candidate)
        return candidate

    def invented_word(self) -> str:
        reserved = variant_words()
        for _ in range(50):  # bounded: a draw is a variant's word about once in 10,000
            word = "".join(self.rng.choices(LETTERS, k=self.rng.randint(*WORD_LETTERS)))
            if word not in reserved:
                return word
        return word + "q"  # no variant word ends in q after such a draw: checked by the test

    def word(self, word: str) -> str:
        key = word.lower()
        if key not in self.table:
            if self.rng.random() >= WORD_SHARE:
                self.table[key] = key
                self.used.add(key)
            elif len(word) == 1:
                self.table[key] = self._fresh(lambda: self.rng.choice(LETTERS))
            else:
                self.table[key] = self._fresh(self.invented_word)
        return _same_case(word, self.table[key])

    def labels(self, inner: list[str]) -> dict[str, str]:
        """New texts for the legal labels' inner texts, in one of three shapes."""
        shape = self.rng.randrange(3)
        stem = self.invented_word()
        if self.rng.random() < 0.5:
            stem = stem.upper()
        numbers = list(range(1, len(inner) + 1))
        if self.rng.random() < 0.5:
            self.rng.shuffle(numbers)
        new: dict[str, str] = {}
        for index, text in enumerate(inner):
            if shape == 0:
                new[text] = _same_case(stem, self._fresh(self.invented_word))
            elif shape == 1:
                new[text] = f"{stem} {numbers[index]}"
            else:
                column = "abcdefgh"[index % 8]
                new[text] = f"{stem} {column}{index // 8 + 1}"
        return new


@functools.cache
def variant_words() -> frozenset[str]:
    """Every word (lower case, 2+ letters) of every obfuscated variant's title, seats, rules and
    compact rules, which hold its move and piece names."""
    from games.variants import list_variants

    words: set[str] = set()
    for spec in list_variants():
        for text in (spec.title, spec.rules, spec.compact_rules, *spec.seat_names):
            words.update(w.lower() for w in re.findall(_WORD, text) if len(w) > 1)
    return frozenset(words)


def _same_case(model: str, word: str) -> str:
    if model.isupper() and (len(model) > 1 or len(word) == 1):
        return word.upper()
    if model[:1].isupper():
        return word.capitalize()
    return word.lower()


def _renamer(names: _Names, phrases: dict[str, str], dot: str) -> Callable[[str, bool], str]:
    """A text -> text function: the label phrases, then the words, in one pass (linear)."""
    alternatives = [
        rf"(?<![A-Za-z]){re.escape(p)}(?![A-Za-z])" for p in sorted(phrases, key=len, reverse=True)
    ]
    pattern = re.compile("|".join([*alternatives, _WORD]))

    def rename(text: str, state: bool = False) -> str:
        if state and " " not in text:  # a board row: one mark for one letter, its shape kept
            return re.sub("[A-Za-z]", lambda m: names.word(m[0]), text).replace(".", dot)
        return pattern.sub(lambda m: phrases.get(m[0]) or names.word(m[0]), text)

    return rename


def relabelled(example: Example, rng: random.Random) -> Example:
    """`example` (a compact game position) with its words and labels renamed (module doc)."""
    names = _Names(rng)
    inner = [label[1:-1] for label in example.legal]
    phrases = names.labels(inner) if rng.random() < WHOLE_LABEL_SHARE else {}
    dot = rng.choice(DOT_SYMBOLS) if rng.random() < 0.5 else "."
    rename = _renamer(names, phrases, dot)

    def label(text: str) -> str:
        return f"<{rename(text[1:-1])}>"

    *earlier, last = example.messages
    lines = []
    in_state = False
    for line in last["content"].split("\n"):
        prefix = next((p for p in SCAFFOLD_PREFIXES if line.startswith(p)), "")
        if line in SCAFFOLD_LINES:
            in_state = line == "State:"
            lines.append(line)
        elif prefix:
            in_state = False
            lines.append(prefix + rename(line[len(prefix) :]))
        else:
            lines.append(rename(line, in_state))
    note = example.reply.partition(ANSWER)[0] if ANSWER in example.reply else ""
    move = label(example.move)
    legal = tuple(label(text) for text in example.legal)
    # a restated state is renamed as the state lines are, a board row (no space) mark by mark
    parts = [] if not note or note.startswith(CHOOSE) else note.split("; ")
    restated = "; ".join(rename(part, True) for part in parts)
    # a numbered reply answers the same number: the renamed list keeps its order
    reply = game_reply(move, restated, legal if example.style == "numbered" else None)
    return replace(
        example,
        messages=(*earlier, {**last, "content": "\n".join(lines)}),
        reply=reply,
        legal=legal,
        move=move,
    )
