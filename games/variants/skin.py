"""A variant is its original spec seen through a `Skin`: new names, rules and symbols on top of
the original's own label and view functions, the OpenSpiel game and reward rules untouched."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import pyspiel

from games.spec import GameSpec, SeatView


@dataclass(frozen=True)
class Skin:
    title: str
    rules: str
    compact_rules: str
    seat_names: tuple[str, str]
    relabel: Callable[[str], str]  # the original's action label -> the variant's
    reskin: Callable[[SeatView], SeatView]  # the original's seat view -> the variant's


def derive(spec: GameSpec, name: str, number: int, skin: Skin) -> GameSpec:
    """The variant spec: same game, parameters, split, rewards and deals; new surface."""
    original_label, original_view = spec.label, spec.view

    def label(text: str, seat: int, action: int) -> str:
        return skin.relabel(original_label(text, seat, action))

    def view(state: pyspiel.State, seat: int) -> SeatView:
        return skin.reskin(original_view(state, seat))

    return dataclasses.replace(
        spec,
        name=name,
        title=skin.title,
        rules=skin.rules,
        compact_rules=skin.compact_rules,
        seat_names=skin.seat_names,
        label=label,
        view=view,
        variant_of=spec.name,
        extra={**spec.extra, "variant": number},
    )


def each_view(change: Callable[[str], str]) -> Callable[[SeatView], SeatView]:
    """A reskin that rewrites both texts of a view with the same function."""

    def reskin(view: SeatView) -> SeatView:
        return SeatView(state=change(view.state), compact=change(view.compact))

    return reskin
