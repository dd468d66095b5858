"""Keep a model's chain of thought apart from its final answer."""

from __future__ import annotations

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"


def split_reasoning(raw: str) -> tuple[str, str]:
    """Split `<think>...</think>` reasoning from the answer; returns (answer, reasoning).

    Qwen3's chat template may open the think block inside the prompt, so a reply can hold only the
    closing tag: everything before it is reasoning. A reply cut off inside an open think block is
    all reasoning and has no answer.
    """
    close = raw.rfind(THINK_CLOSE)
    if close >= 0:
        head, answer = raw[:close], raw[close + len(THINK_CLOSE) :]
        open_at = head.find(THINK_OPEN)
        reasoning = head[open_at + len(THINK_OPEN) :] if open_at >= 0 else head
        return answer.strip(), reasoning.strip()
    open_at = raw.find(THINK_OPEN)
    if open_at >= 0:
        return raw[:open_at].strip(), raw[open_at + len(THINK_OPEN) :].strip()
    return raw.strip(), ""
