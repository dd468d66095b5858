"""Action vocabulary: OpenSpiel action ids <-> the labels a model reads and writes.

Labels come from OpenSpiel's own `action_to_string` through the spec's `label` function and are
fixed per (seat, action) for every built-in game, so the table is built once per game and a turn
costs one list lookup. Parsing lives in `games.parsing`.
"""

from __future__ import annotations

import functools

import pyspiel

from games.spec import GameSpec


def normalize_label(text: str) -> str:
    """The form labels are compared in: no whitespace, lower case, one outer <...> removed."""
    squeezed = "".join(text.split()).lower()
    if len(squeezed) >= 2 and squeezed[0] == "<" and squeezed[-1] == ">":
        squeezed = squeezed[1:-1]
    return squeezed


class ActionVocabulary:
    def __init__(self, spec: GameSpec) -> None:
        game = spec.game
        state = game.new_initial_state()
        self.spec = spec
        self.labels: list[list[str]] = []
        self._inverse: list[dict[str, int]] = []
        for seat in range(game.num_players()):
            labels = [
                spec.label(state.action_to_string(seat, action), seat, action)
                for action in range(game.num_distinct_actions())
            ]
            inverse = {normalize_label(label): action for action, label in enumerate(labels)}
            if len(inverse) != len(labels):
                raise ValueError(f"{spec.name}: action labels of seat {seat} are not unique")
            self.labels.append(labels)
            self._inverse.append(inverse)

    def label(self, seat: int, action: int) -> str:
        return self.labels[seat][action]

    def action(self, seat: int, label: str) -> int | None:
        """The action id a label names for `seat` (None if it names none)."""
        return self._inverse[seat].get(normalize_label(label))

    def legal_labels(self, state: pyspiel.State, seat: int) -> list[str]:
        row = self.labels[seat]
        return [row[action] for action in state.legal_actions(seat)]


@functools.cache
def vocabulary(spec: GameSpec) -> ActionVocabulary:
    return ActionVocabulary(spec)
