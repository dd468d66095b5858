"""Lenient JSON for structured agent replies (the MAD moderator's and judge's verdicts).

Models wrap JSON in code fences, put prose around it, use single quotes, Python literals or
trailing commas. `parse_json_object` finds the object anyway, and returns None (never raises)
when there is none. Nothing is evaluated: the text is only re-tokenised into strict JSON. The
work is linear in the length of what is read, a reply's last `mas.answers.MAX_REPLY_CHARS`
characters (tests/test_parsers_linear.py).
"""

from __future__ import annotations

import json
import re
from typing import Any

from mas.answers import reply_tail

# The fence's head is read at once (a lookahead does not backtrack): backtracking into its blanks
# after a fence that is never closed would scan to the reply's end once per blank.
_FENCE = re.compile(
    r"```(?=(?P<head>[ \t]*(?:json|JSON|javascript|js)?[ \t]*\n?))(?P=head)(?P<body>.*?)```",
    re.DOTALL,
)
_PYTHON_LITERALS = {"True": "true", "False": "false", "None": "null"}
_BAREWORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# After a closing single quote only these may follow; an apostrophe inside a word ("side's") is
# followed by a letter, so it stays part of the string.
_AFTER_STRING = re.compile(r"\s*(?:[,:}\]]|$)")
_UNESCAPED_DOUBLE_QUOTE = re.compile(r'(?<!\\)"')
_TRAILING_COMMA = re.compile(r",\s*[}\]]")
_UNICODE_ESCAPE = re.compile(r"u[0-9a-fA-F]{4}")
_BACKSLASH_RUN = re.compile(r"\\(\\|u[0-9a-fA-F]{4}|[A-Za-z]+|.)", re.DOTALL)
# LaTeX commands that begin like the JSON escapes \n, \r, \t: inside a verdict's answer they are
# far likelier than a newline followed by letters.
_LATEX_NRT_WORDS = (
    "ne neq nabla nu not ni nmid neg nleq ngeq times theta tan tanh tau text textbf textit "
    "textrm tfrac to top therefore tilde triangle right rightarrow rho rangle rfloor rceil rm "
    "rbrace rvert"
)
_LATEX_NRT = frozenset(_LATEX_NRT_WORDS.split())


def parse_json_object(text: str) -> dict[str, Any] | None:
    """The last JSON object in `text` (fenced blocks first), repaired if needed, or None. Only
    the text's last MAX_REPLY_CHARS characters are read (a verdict stands at the end; a reply
    of many brace pairs that are not JSON would cost a failed decoding each)."""
    if not text:
        return None
    text = reply_tail(text)
    for block in reversed([match.group("body") for match in _FENCE.finditer(text)]):
        found = _last_object(block)
        if found is not None:
            return found
    return _last_object(text)


def _last_object(text: str) -> dict[str, Any] | None:
    for candidate in reversed(_balanced_objects(text)):
        parsed = _loads_lenient(candidate)
        if parsed is not None:
            return parsed
    return None


def _balanced_objects(text: str) -> list[str]:
    """Every outermost `{...}` span, with braces inside quoted strings ignored."""
    spans: list[str] = []
    depth = 0
    start = -1
    quote: str | None = None
    index = 0
    while index < len(text):
        char = text[index]
        if quote is not None:
            if char == "\\":
                index += 2
                continue
            if char == quote and (quote == '"' or _AFTER_STRING.match(text, index + 1)):
                quote = None
        elif char in "\"'" and depth > 0:
            quote = char
        elif char == "{":
            if depth == 0:
                start = index
            depth += 1
        elif char == "}" and depth > 0:
            depth -= 1
            if depth == 0:
                spans.append(text[start : index + 1])
        index += 1
    return spans


def _loads_lenient(candidate: str) -> dict[str, Any] | None:
    for attempt in (candidate, _to_strict_json(candidate)):
        if attempt is None:
            continue
        try:
            value = json.loads(_repair_escapes(attempt))
        except (ValueError, RecursionError):
            continue
        if isinstance(value, dict):
            return value
    return None


def _to_strict_json(text: str) -> str | None:
    """Rewrite single-quoted strings, Python literals, bare words and trailing commas as JSON."""
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char in "\"'":
            end = _string_end(text, index)
            if end is None:
                return None
            body = text[index + 1 : end]
            if char == "'":
                body = _UNESCAPED_DOUBLE_QUOTE.sub('\\"', body.replace("\\'", "'"))
            out.append(f'"{body}"')
            index = end + 1
            continue
        if char == "," and _TRAILING_COMMA.match(text, index):
            index += 1
            continue
        word = _BAREWORD.match(text, index)
        if word:
            token = word.group(0)
            if token in _PYTHON_LITERALS:
                out.append(_PYTHON_LITERALS[token])
            elif token in {"true", "false", "null"}:
                out.append(token)
            else:
                out.append(json.dumps(token))  # a bare key or word: {side: negative}
            index = word.end()
            continue
        out.append(char)
        index += 1
    return "".join(out)


def _repair_escapes(text: str) -> str:
    """Double the backslash of LaTeX commands (`\\frac`, `\\boxed`, `\\sqrt`) that JSON would
    reject or silently read as a form feed or backspace."""

    def fix(match: re.Match[str]) -> str:
        escape = match.group(1)
        head = escape[0]
        if escape == "\\" or head in '"/' or _UNICODE_ESCAPE.fullmatch(escape):
            return match.group(0)
        if head in "nrt" and escape not in _LATEX_NRT:
            return match.group(0)
        return "\\" + match.group(0)

    return _BACKSLASH_RUN.sub(fix, text)


def _string_end(text: str, start: int) -> int | None:
    quote = text[start]
    index = start + 1
    while index < len(text):
        char = text[index]
        if char == "\\":
            index += 2
            continue
        if char == quote and (quote == '"' or _AFTER_STRING.match(text, index + 1)):
            return index
        index += 1
    return None


def normalised_keys(value: dict[str, Any]) -> dict[str, Any]:
    """Keys lower-cased with everything but letters and digits removed ("Supported Side" ->
    "supportedside"), so the prompt's key names need not be reproduced exactly."""
    return {re.sub(r"[^a-z0-9]", "", str(key).lower()): item for key, item in value.items()}
