"""The MAST failure taxonomy (Cemri et al. 2025, "Why Do Multi-Agent LLM Systems Fail?").

Fourteen failure modes in three categories. The ids and names follow the paper; the definitions
are this project's own wording, written for an LLM judge reading one transcript of a multi-agent
system (debaters, a moderator, a team of assistants, ...) that answered a reasoning question.
This module is the one place the definitions live: the judge prompt, `mars failures` and the
dashboard all read them from here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Category:
    id: str  # "FC1" .. "FC3"
    key: str  # short machine name used in summaries
    name: str


@dataclass(frozen=True)
class FailureMode:
    id: str  # "FM-1.1" .. "FM-3.3"
    name: str
    category: str  # a Category.key
    definition: str


CATEGORIES: tuple[Category, ...] = (
    Category("FC1", "specification", "Specification and system design"),
    Category("FC2", "misalignment", "Inter-agent misalignment"),
    Category("FC3", "verification", "Task verification and termination"),
)

FAILURE_MODES: tuple[FailureMode, ...] = (
    FailureMode(
        "FM-1.1",
        "Disobey task specification",
        "specification",
        "An agent does not do what the task asked, or breaks one of its stated constraints: it "
        "answers a different question, ignores a required output format (for example a boxed "
        "answer or a single choice letter), drops a condition given in the problem, or hands in "
        "something other than the requested kind of answer.",
    ),
    FailureMode(
        "FM-1.2",
        "Disobey role specification",
        "specification",
        "An agent steps outside the role it was given: a moderator who starts solving instead of "
        "judging, a debater who argues the other side or simply agrees instead of defending its "
        "assigned position, a critic who rewrites the solution instead of reviewing it.",
    ),
    FailureMode(
        "FM-1.3",
        "Step repetition",
        "specification",
        "The system repeats work it has already done without adding anything: the same "
        "calculation, argument or message comes back round after round, so turns are spent "
        "without progress toward the answer.",
    ),
    FailureMode(
        "FM-1.4",
        "Loss of conversation history",
        "specification",
        "An agent behaves as if earlier parts of the conversation never happened: it forgets "
        "results, agreements or corrections already established and falls back to an earlier, "
        "superseded state of the work.",
    ),
    FailureMode(
        "FM-1.5",
        "Unaware of termination conditions",
        "specification",
        "Agents do not recognise when the task is finished or when they must stop: they go on "
        "after a final answer was reached, never emit the agreed stop signal, or stop for a "
        "reason unrelated to the stopping rule they were given.",
    ),
    FailureMode(
        "FM-2.1",
        "Conversation reset",
        "misalignment",
        "The exchange restarts without cause: an agent begins the problem again from scratch as "
        "if no discussion had taken place, discarding the shared context and the progress made "
        "by the other agents.",
    ),
    FailureMode(
        "FM-2.2",
        "Fail to ask for clarification",
        "misalignment",
        "An agent meets something ambiguous, missing or contradictory (in the question or in "
        "another agent's message) and goes ahead on a guess instead of asking for or stating the "
        "needed clarification, and the guess leads the work astray.",
    ),
    FailureMode(
        "FM-2.3",
        "Task derailment",
        "misalignment",
        "The conversation drifts away from the goal: agents pursue a side question, a different "
        "problem or an irrelevant detail, and the original task is answered poorly or not at all.",
    ),
    FailureMode(
        "FM-2.4",
        "Information withholding",
        "misalignment",
        "An agent has a fact, intermediate result or doubt that would change the outcome and "
        "does not pass it on: it is present in its own reasoning but missing from what it tells "
        "the other agents.",
    ),
    FailureMode(
        "FM-2.5",
        "Ignored other agent's input",
        "misalignment",
        "An agent disregards what another agent said: a valid objection, correction or "
        "alternative answer is neither taken up nor rebutted, and the final answer stands as if "
        "it had never been raised.",
    ),
    FailureMode(
        "FM-2.6",
        "Reasoning-action mismatch",
        "misalignment",
        "What an agent concludes in its reasoning and what it then says or does disagree: the "
        "chain of thought reaches one answer while the message states another, or an agent "
        "announces one step and takes a different one.",
    ),
    FailureMode(
        "FM-3.1",
        "Premature termination",
        "verification",
        "The system stops before the task is done or before enough was checked: an answer is "
        "handed in while open objections, missing steps or unresolved disagreement remain, or "
        "the discussion ends after too few exchanges to settle the question.",
    ),
    FailureMode(
        "FM-3.2",
        "No or incomplete verification",
        "verification",
        "Nobody checks the answer, or the check is superficial: the result is not re-derived, "
        "substituted back or compared against the constraints, so an error that a real check "
        "would have caught goes through.",
    ),
    FailureMode(
        "FM-3.3",
        "Incorrect verification",
        "verification",
        "A check is performed but is itself wrong: an agent confirms a faulty answer, accepts a "
        "flawed derivation as correct, or rejects a correct answer on mistaken grounds.",
    ),
)

MODES_BY_ID: dict[str, FailureMode] = {mode.id: mode for mode in FAILURE_MODES}
CATEGORY_KEYS: tuple[str, ...] = tuple(c.key for c in CATEGORIES)
CATEGORIES_BY_KEY: dict[str, Category] = {c.key: c for c in CATEGORIES}

# Read on the stripped text: a space is one of `\s`, so `[-_ ]` between two `\s*` would let a
# failed match try every split of a run of spaces (cubic in its length).
_ID_PATTERN = re.compile(r"(?:FM|F)?\s*(?:[-_]\s*)?([123])\s*[.\-_]\s*(\d)", re.IGNORECASE)


def normalize_mode_id(raw: object) -> str | None:
    """Spellings such as "fm 2.3", "FM2.3" or "2.3" -> "FM-2.3"; anything else -> None."""
    if not isinstance(raw, str):
        return None
    match = _ID_PATTERN.fullmatch(raw.strip())
    if match is None:
        lowered = raw.strip().lower()
        for mode in FAILURE_MODES:
            if mode.name.lower() == lowered:
                return mode.id
        # A label such as "FM-2.3 Task derailment" or "FM-2.3: ...".
        head = raw.strip().split(" ", 1)[0].rstrip(":")
        return normalize_mode_id(head) if head != raw.strip() else None
    mode_id = f"FM-{match.group(1)}.{match.group(2)}"
    return mode_id if mode_id in MODES_BY_ID else None


def modes_in_category(category_key: str) -> list[FailureMode]:
    return [mode for mode in FAILURE_MODES if mode.category == category_key]


def taxonomy_text() -> str:
    """The taxonomy as the judge reads it: categories, then each mode's id, name and definition."""
    lines: list[str] = []
    for category in CATEGORIES:
        lines.append(f"{category.id} {category.name}:")
        for mode in modes_in_category(category.key):
            lines.append(f"- {mode.id} {mode.name}: {mode.definition}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"
