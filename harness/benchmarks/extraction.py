r"""Pulling the final answer out of a model's response.

Math: the content of the last complete `\boxed{...}` (or `\fbox{...}`); failing that, the last
explicit answer statement ("The final answer is ...", "Answer: ...", "#### ...").

Multiple choice, strictly: the last boxed letter; failing that, the last statement such as
"the answer is (C)"; failing that, a response that is nothing but a letter. A letter must be one
of the options on offer. Nothing is guessed from loose mentions of a letter in the reasoning, and
a hedge is no answer: when the deciding box or statement offers two options ("C or D", "either B
or C", "B/C", "\\boxed{C} or \\boxed{D}"), extraction fails rather than taking the first.

Each reading is linear in the response's length, whatever the response (it runs inline, in
grading and in the training rewards; tests/test_parsers_linear.py): no pattern here lets two
repeated character classes that share characters meet, and `strip_text_wrappers` makes a bounded
number of passes.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

_BOX_COMMANDS = re.compile(r"\\(?:boxed|fbox)\b")
_BOX_NAMES = ("\\boxed", "\\fbox")
_BRACES = re.compile(r"[{}]")
_SPACES = re.compile(r" *")
_BARE_ARGUMENT = re.compile(r"[^\s$]+")
_ANSWER_STATEMENT = re.compile(
    r"(?i:answer)\**\s*(?:(?i:is)\b|:|=)[:*\s]*(?P<value>[^\n]*)|^[^\S\n]*####\s*(?P<hashes>[^\n]*)",
    re.MULTILINE,
)
_CHOICE_STATEMENT = re.compile(
    r"(?i:answer|option|choice)\**\s*(?:(?i:is)\b|:)[:*\s]*"
    r"(?:(?i:option|choice)\s+)?[(\[]?(?P<letter>[A-Z])[)\]]?(?![A-Za-z0-9])"
)
_LONE_LETTER = re.compile(r"\s*[(\[]?(?P<letter>[A-Z])[)\].]?\s*")
# Two options offered as one answer: "C or D", "either B or C", "B/C", "(B) or (C)".
# In prose only "or" and slashes join options ("C, not D" commits to C); in a box, commas and
# "and" do too ("\\boxed{C, D}").
_OPTION = r"(?:(?i:option|choice)\s+)?[(\[]?[A-Z][)\]]?"
_ALTERNATIVE = r"\s*(?:\b(?i:or)\b|/|\|)\s*" + _OPTION + r"(?![A-Za-z0-9])"
_BOX_ALTERNATIVE = r"\s*(?:\b(?i:or|and)\b|/|\||,|&)\s*" + _OPTION + r"(?![A-Za-z0-9])"
_HEDGED_AFTER_LETTER = re.compile(r"[)\]]?" + _ALTERNATIVE)
_HEDGED_BOX = re.compile(
    r"\s*(?:(?i:either)\s+)?" + _OPTION + r"(?:" + _BOX_ALTERNATIVE + r")+\s*(?:\.\s*)?"
)
_BOX_THEN_OR = re.compile(r"\\(?:boxed|fbox)\s*\{[^{}]*\}\s*(?:\b(?i:or)\b|/)\s*$")
_EITHER_BEFORE = re.compile(r"\b(?i:either)\s+[(\[]?$")
_LETTER_WITH_TEXT = re.compile(r"[(\[]?(?P<letter>[A-Z])(?:[)\]]|[).:]\s.*)?", re.DOTALL)
_TEXT_WRAPPERS = re.compile(r"\\(?:text|textbf|mathrm|mathbf|textrm|mbox)\s*\{([^{}]*)\}")
WRAPPER_DEPTH = 8
_MATH_DELIMITERS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))


def last_boxed(text: str) -> str | None:
    r"""Content of the last complete `\boxed{...}`; a box cut off by truncation is passed over."""
    found = _last_box(text)
    return found[1] if found else None


def _last_box(text: str) -> tuple[int, str] | None:
    """Where the last complete box's command starts, and its content."""
    closing: dict[int, int] | None = None
    for start, end in _box_commands_from_end(text):
        position = _SPACES.match(text, end).end()
        if position >= len(text):
            continue
        if text[position] == "{":
            closing = _matching_braces(text) if closing is None else closing
            if position in closing:
                return start, text[position + 1 : closing[position]].strip()
            continue
        # "\boxed 5": the argument runs to the next space or dollar sign.
        bare = _BARE_ARGUMENT.match(text, position)
        if bare:
            return start, bare.group(0)
    return None


def _box_commands_from_end(text: str) -> Iterator[tuple[int, int]]:
    """(start, end) of every box command, the last first; each name is searched for backwards
    from where its previous search stopped, so the whole walk reads the text once per name."""
    found = {name: text.rfind(name, 0, len(text)) for name in _BOX_NAMES}
    while (start := max(found.values())) >= 0:
        name = next(name for name, at in found.items() if at == start)
        found[name] = text.rfind(name, 0, start)
        command = _BOX_COMMANDS.match(text, start)
        if command is not None:
            yield command.start(), command.end()


def _matching_braces(text: str) -> dict[int, int]:
    """Opening-brace position -> closing-brace position, in one pass (escaped braces ignored)."""
    pairs: dict[int, int] = {}
    open_positions: list[int] = []
    for brace in _BRACES.finditer(text):
        index = brace.start()
        if index > 0 and text[index - 1] == "\\":
            continue
        if brace.group() == "{":
            open_positions.append(index)
        elif open_positions:
            pairs[open_positions.pop()] = index
    return pairs


def last_answer_statement(text: str) -> str | None:
    """The value of the last "answer is/: ..." or "#### ..." statement, cleaned of markup."""
    value: str | None = None
    for match in _ANSWER_STATEMENT.finditer(text):
        candidate = _clean_statement(match.group("value") or match.group("hashes") or "")
        if candidate:
            value = candidate
    return value


def _clean_statement(value: str) -> str:
    value = value.strip().strip("*").strip().removesuffix(".").rstrip()
    for opening, closing in _MATH_DELIMITERS:
        if value.startswith(opening) and value.endswith(closing) and len(value) > 2 * len(opening):
            value = value[len(opening) : -len(closing)].strip()
            break
    return value.removesuffix(".").strip()


def extract_math_answer(response: str) -> str | None:
    boxed = last_boxed(response)
    if boxed:
        return boxed
    return last_answer_statement(response)


def strip_text_wrappers(value: str) -> str:
    r"""`\text{C}` -> `C`, repeatedly, for nested wrappers: up to `WRAPPER_DEPTH` levels of them
    (each level is one pass over the text, so a reply of wrappers nested thousands deep would
    cost a pass per level; no answer nests that deep, and a deeper nest is left as it is)."""
    for _ in range(WRAPPER_DEPTH):
        stripped = _TEXT_WRAPPERS.sub(r"\1", value)
        if stripped == value:
            break
        value = stripped
    return value


def _plain(content: str) -> str:
    """Boxed content without text wrappers, bold markers, dollars and LaTeX `\\ `, `\\quad`."""
    value = strip_text_wrappers(content).replace("*", "").replace("$", "")
    return re.sub(r"\\(?:quad|qquad|,|;| )", " ", value)


def _normalise_option_text(text: str) -> str:
    return re.sub(r"\s+", " ", strip_text_wrappers(text).replace("$", "")).strip().lower()


def letter_from_boxed(content: str, letters: str, choices: list[str] | None) -> str | None:
    value = strip_text_wrappers(content).replace("*", "").strip()
    match = _LETTER_WITH_TEXT.fullmatch(value)
    if match and match.group("letter") in letters:
        return match.group("letter")
    if choices:
        # The model boxed the option's text instead of its letter: accept an exact match only.
        wanted = _normalise_option_text(value)
        hits = [
            letters[index]
            for index, choice in enumerate(choices[: len(letters)])
            if _normalise_option_text(choice) == wanted
        ]
        if len(hits) == 1:
            return hits[0]
    return None


def extract_choice_letter(
    response: str, letters: str, choices: list[str] | None = None
) -> str | None:
    """The chosen letter (one of `letters`), or None when the response commits to none."""
    box = _last_box(response)
    if box and box[1]:
        start, boxed = box
        if _HEDGED_BOX.fullmatch(_plain(boxed)) or _BOX_THEN_OR.search(response, 0, start):
            return None
        letter = letter_from_boxed(boxed, letters, choices)
        if letter:
            return letter
    text = strip_text_wrappers(response)
    statement: re.Match[str] | None = None
    for match in _CHOICE_STATEMENT.finditer(text):
        if match.group("letter") in letters:
            statement = match
    if statement:
        hedged = _HEDGED_AFTER_LETTER.match(text, statement.end("letter")) or (
            _EITHER_BEFORE.search(text, 0, statement.start("letter"))
        )
        return None if hedged else statement.group("letter")
    lone = _LONE_LETTER.fullmatch(response)
    if lone and lone.group("letter") in letters:
        return lone.group("letter")
    return None
