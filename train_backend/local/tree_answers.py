"""Branches with a rewritten answer, for a tree-sampled turn (train_backend.local.tree).

`all_actions` (`cover_actions`): a branch whose action is duplicated (or invalid, unless
`keep_invalid`) is replaced by a sampled legal reply with its answer rewritten to a legal action
no branch took, so every action of the turn is among the branches when K allows.
`counterfactual` (`counterfactual_branches`): the first sampled reply naming a legal move, then
that same reply with its answer rewritten to each other legal move. A rewritten reply is
`forced`; its token ids are the rewritten text's, ending with the policy's stop token.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from core.reasoning import split_reasoning
from train_backend.local.tree_nodes import Reply

if TYPE_CHECKING:
    from core.causal_lm import Policy

_OPEN, _CLOSE = "<answer>", "</answer>"


def last_answer_tag(text: str) -> tuple[int, int] | None:
    """Where the last `<answer>...</answer>` of a reply starts and ends (the last match of
    `<answer>(.*?)</answer>`, DOTALL), or None: found with `str.find`, in time linear in the
    reply's length, where that pattern is quadratic on a reply of many unclosed tags."""
    found = None
    position = 0
    while (start := text.find(_OPEN, position)) >= 0:
        close = text.find(_CLOSE, start + len(_OPEN))
        if close < 0:
            break
        found = (start, close + len(_CLOSE))
        position = found[1]
    return found


def forced_reply(policy: Policy, template: Reply | None, label: str) -> Reply:
    """A reply choosing `label`: `template` (a sampled legal reply) with its answer rewritten,
    else the bare canonical answer."""
    stop = policy.stop_ids[0]
    if template is None:
        raw = f"<answer>{label}</answer>"
    else:
        raw = policy.decode(list(template.completion_ids))
        start, end = last_answer_tag(raw) or (len(raw), len(raw))  # the template has one
        raw = raw[:start] + f"<answer>{label}</answer>" + raw[end:]
    ids = [*policy.tokenizer(raw, add_special_tokens=False)["input_ids"], stop]
    text, reasoning = split_reasoning(raw)
    return Reply(text, reasoning, tuple(ids), True, forced=True)


def cover_actions(
    policy: Policy,
    replies: Sequence[Reply],
    actions: Sequence[str | None],
    legal: Sequence[str],
    keep_invalid: bool,
) -> list[Reply]:
    """Rewrite duplicated or invalid branches so every legal action appears (K allowing).
    `actions`: each reply's parsed legal action (None: invalid)."""
    actions = list(actions)
    template = next(
        (r for r, a in zip(replies, actions, strict=True) if a and last_answer_tag(r.text)),
        None,
    )
    replies = list(replies)
    for label in legal:
        if label in actions:
            continue
        spare = [
            i
            for i, a in enumerate(actions)
            if (a is None and not keep_invalid) or (a is not None and actions.count(a) > 1)
        ]
        if not spare:
            break
        index = spare[-1]
        replies[index] = forced_reply(policy, template, label)
        actions[index] = label
    return replies


def counterfactual_branches(
    policy: Policy,
    replies: Sequence[Reply],
    actions: Sequence[str | None],
    legal: Sequence[str],
) -> list[Reply]:
    """The first sampled reply that names a legal move, then the same reply with its answer
    rewritten to each other legal move: a group differs only in its answer. The samples stay as
    they are when none is legal."""
    found = next(
        (i for i, a in enumerate(actions) if a is not None and last_answer_tag(replies[i].text)),
        None,
    )
    if found is None:
        return list(replies)
    template = replies[found]
    return [
        template if label == actions[found] else forced_reply(policy, template, label)
        for label in legal
    ]
