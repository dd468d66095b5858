"""Every `mars ...` line of README.md, docs/*.md and the commands' help parses with the real
command's parser (nothing runs): a renamed option or a refused value in an example fails here.

A line in a code block is checked whole (required options included) unless it shows placeholders
(`N`, `<folder>`, `[--opt X]`, `a|b`, `...`); a `mars ...` span inside a sentence, and a line
with placeholders, must name an existing command and existing options.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import REPO

from core.errors import MarsError
from mars.command_check import check_command_line, mars_group

PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*(?:[./][A-Za-z0-9_./]*)?$")  # N, URL, FILE.yaml
INLINE = re.compile(r"`(mars(?: [^`]*)?)`")


def _documents() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def _block_lines(text: str) -> list[str]:
    """`mars` lines of the fenced code blocks, `$ ` prompts dropped, `\\` continuations joined."""
    found, inside, pending = [], False, ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("```"):
            inside, pending = not inside, ""
            continue
        if not inside:
            continue
        if pending:
            pending += " " + line.removesuffix("\\").strip()
            if not line.endswith("\\"):
                found.append(pending)
                pending = ""
            continue
        line = re.sub(r"^\$\s+", "", line)
        if re.match(r"mars(?: [a-z-]+\b(?! =)| -|$)", line):  # not `mars = module:attr`
            if line.endswith("\\"):
                pending = line.removesuffix("\\").strip()
            else:
                found.append(line)
    return found


def _inline_spans(text: str) -> list[str]:
    outside = re.sub(r"```.*?```", "", text, flags=re.S)
    return [match.group(1) for match in INLINE.finditer(outside)]


def _command_only(line: str) -> str:
    """The `mars` command of a shell line: no comment, pipe, redirection or second command."""
    for separator in (" #", " | ", " && ", " > ", " 2>", " & ", "; "):
        line = line.split(separator)[0]
    return line.strip()


def _as_fragment(line: str) -> tuple[str, bool]:
    """(the line with synopsis markers resolved, whether it had any)."""
    had = bool(re.search(r"[\[\]|<>]|\.\.\.", line))
    line = re.sub(r"<[^>]*>", "X", line)  # <Hugging Face folder>
    line = line.replace("[", " ").replace("]", " ").replace("...", " ")
    line = re.sub(r"\S*\|\S*", lambda m: m.group(0).split("|")[0], line)  # a|b|c: a
    words = line.split()
    had = had or any(PLACEHOLDER.match(word) for word in words[1:])
    return " ".join(words), had


def _examples() -> list[tuple[str, str, bool]]:
    """(where, line, whole) for every example."""
    examples = []
    for document in _documents():
        text = document.read_text()
        name = document.relative_to(REPO).as_posix()
        for line in _block_lines(text):
            fragment, placeholders = _as_fragment(_command_only(line))
            examples.append((name, fragment, not placeholders))
        for span in _inline_spans(text):
            examples.append((name, _as_fragment(_command_only(span))[0], False))
    for path, help_text in _help_texts():
        for span in INLINE.findall(help_text):
            examples.append((f"mars {' '.join(path)} --help", _as_fragment(span)[0], False))
    return examples


def _help_texts() -> list[tuple[list[str], str]]:
    texts = []

    def walk(command, path: list[str]) -> None:
        texts.append((path, command.help or ""))
        texts.extend((path, getattr(param, "help", None) or "") for param in command.params)
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, [*path, name])

    walk(mars_group(), [])
    return texts


def test_every_mars_line_of_the_docs_and_help_parses(capsys: pytest.CaptureFixture[str]) -> None:
    examples = _examples()
    failures = []
    for where, line, whole in examples:
        try:
            check_command_line(line, complete=whole)
        except MarsError as exc:
            failures.append(f"{where}: {exc}")
    with capsys.disabled():
        whole = sum(1 for _, _, w in examples if w)
        print(f"\n{len(examples)} `mars` lines checked ({whole} whole, the rest as fragments)")
    assert not failures, "\n".join(failures)
    readme_commands = {
        line.split()[1] for where, line, _ in examples if where == "README.md" and " " in line
    }
    every_command = set(mars_group().commands)
    assert every_command <= readme_commands | {"grade", "tiny-model"}, (
        f"README shows no example of {sorted(every_command - readme_commands)}"
    )


@pytest.mark.parametrize(
    ("line", "whole", "message"),
    [
        ("mars eval --suite gsm8k --limt 3", True, "No such option: --limt"),
        ("mars eval --suite gsm8k --limit many", True, "Invalid value for '--limit'"),
        ("mars loop --top-k 9", False, "no such option: --top-k"),
        ("mars evaluate --suite gsm8k", False, "no such command 'evaluate'"),
        ("mars eval --limit 3", True, "Missing option '--suite'"),
    ],
)
def test_the_checker_refuses_what_the_command_would(line: str, whole: bool, message: str) -> None:
    with pytest.raises(MarsError, match=re.escape(message)):
        check_command_line(line, complete=whole)


def test_help_is_printed_as_written_without_emoji_or_markup() -> None:
    from typer.testing import CliRunner

    from mars.commands.app import app

    result = CliRunner().invoke(app, ["loop", "--help"], terminal_width=200)
    assert result.exit_code == 0
    assert "mcts:100:20" in result.output and "\U0001f4af" not in result.output


def test_command_lists_show_whole_phrases() -> None:
    """`mars --help` and each group's help list every command with a phrase that is not cut."""
    from typer.testing import CliRunner

    from mars.commands.app import app

    groups = [[], *([name] for name, c in mars_group().commands.items() if hasattr(c, "commands"))]
    for group in groups:
        result = CliRunner().invoke(app, [*group, "--help"], terminal_width=80)
        listed = result.output.split("Commands:", 1)[1].splitlines()
        cut = [line for line in listed if line.rstrip().endswith("...")]
        assert not cut, f"mars {' '.join(group)} --help: {cut}"
