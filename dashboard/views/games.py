"""Games page: outcome tables per opponent and seat, and a turn-by-turn replay of one episode with
the board drawn at every turn (dashboard/boards.py) beside the model's reply and reasoning.

`?page=games&run=NAME&step=N&seed=E&seat_turn=S:T` opens a training run's step, the episode of
seed E and the turn of seat S's T-th move (the Inspector links its groups so); `?turn=N` opens the
replay at its N-th turn.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from core.runstore import RECORDS_FILE
from dashboard import boards, cache, data, defaults
from dashboard.views.common import empty_state, fmt, malformed_note, pct, show_table
from dashboard.views.runs import ARENA_KINDS

MAX_OPTIONS = 1000
OPEN_REASONING_CHARS = 2000  # a longer chain of thought starts collapsed


def render(root: Path, runs: list[data.RunEntry]) -> None:
    st.header("Games")
    arena_runs = [r for r in runs if r.kind in ARENA_KINDS or is_game_training(r)]
    if not arena_runs:
        empty_state("no arena runs yet", "arena")
        return
    run = defaults.pick_run("arena or training run", arena_runs, root, key="games_run")
    loaded = cache.jsonl(root, run.path / RECORDS_FILE)
    malformed_note(loaded.malformed, f"{run.name}/{RECORDS_FILE}")
    records = loaded.rows
    if not records:
        empty_state(f"{run.name} has no episodes yet", "arena")
        return

    st.subheader("Outcomes per opponent and seat")
    outcomes = data.arena_outcomes(records)
    shown = outcomes.copy()
    for column in ("win", "draw", "loss", "invalid_rate"):
        shown[column + " %"] = shown[column].map(pct)
    shown["win 95% CI"] = [
        "-" if lo is None or pd.isna(lo) else f"[{100 * lo:.1f}, {100 * hi:.1f}]"
        for lo, hi in zip(shown["win_ci_low"], shown["win_ci_high"], strict=True)
    ]
    columns = ["game", "opponent", "seat", "n", "win %", "win 95% CI", "draw %", "loss %"]
    columns += ["mean_return", "invalid_rate %", "errors"]
    show_table(shown[columns], hide_index=True, key="games_outcomes")
    summaries = data.arena_summaries(cache.summary(root, run.path))
    if summaries:
        seats = data.seat_table({run.name: summaries})
        st.caption("normalised return per seat, 0-100 (from summary.json)")
        show_table(
            seats[["game", "opponent", "seat", "n", "normalized_return", "mean_return"]],
            hide_index=True,
            key="games_normalized",
        )

    st.subheader("Replay")
    episodes = data.episode_table(records)
    wanted = _requested_episode(episodes)
    steps = sorted(episodes["step"].dropna().unique())
    left, middle, right, last = st.columns(4)
    games = sorted(episodes["game"].unique())
    game = left.selectbox("game", games, index=_index(games, wanted, "game"), key="games_game")
    seat = middle.selectbox("player's seat", ["any", *data.SEATS], key="games_seat")
    outcome = right.selectbox("outcome", ["any", "win", "draw", "loss"], key="games_outcome")
    subset = episodes[episodes["game"] == game]
    if steps:  # a training run's self-play: one step's episodes at a time, the last by default
        newest_first = steps[::-1]
        asked = {"step": _number(st.query_params.get("step"))} if wanted is None else wanted
        step = last.selectbox(
            "training step",
            newest_first,
            index=_index(newest_first, asked, "step"),
            key="games_step",
        )
        subset = subset[subset["step"] == step]
    if seat != "any":
        subset = subset[subset["seat"] == seat]
    if outcome != "any":
        subset = subset[subset["outcome"] == outcome]
    if subset.empty:
        st.info("no episode matches")
        return
    offered = subset.head(MAX_OPTIONS)
    labels = {int(e["row"]): _episode_label(e, records) for e in offered.to_dict("records")}
    rows = list(labels)
    picked = st.selectbox(
        "episode",
        rows,
        index=_index(rows, wanted, "row"),
        format_func=labels.__getitem__,
        key="games_ep",
    )
    _replay(records[picked], run.config.get("rules"))


def _requested_episode(episodes: pd.DataFrame) -> dict[str, Any] | None:
    """The episode `?seed=E` (and `?step=N`, a training run's) names: its row of the episode
    table, None when the URL names none or none matches."""
    seed = _number(st.query_params.get("seed"))
    if seed is None:
        return None
    found = episodes[pd.to_numeric(episodes["seed"], errors="coerce") == seed]
    step = _number(st.query_params.get("step"))
    if step is not None:
        found = found[pd.to_numeric(found["step"], errors="coerce") == step]
    return None if found.empty else found.iloc[0].to_dict()


def _number(text: Any) -> int | None:
    try:
        return int(str(text))
    except ValueError:
        return None


def _index(options: list[Any], wanted: dict[str, Any] | None, column: str) -> int:
    """Where the requested episode's `column` sits among a select box's options (else 0)."""
    if wanted is None:
        return 0
    for index, option in enumerate(options):
        if option == wanted[column]:
            return index
    return 0


def _episode_label(episode: dict[str, Any], records: list[dict[str, Any]]) -> str:
    if episode["seat"] == "-":  # self-play: the policy sat in every seat
        returns = records[int(episode["row"])].get("returns") or []
        shown = " / ".join(fmt(value, 2) for value in returns)
        return f"seed {episode['seed']} · self-play · returns {shown or '-'}"
    return (
        f"seed {episode['seed']} · {episode['seat']} seat vs {episode['opponent']} · "
        f"{fmt(episode['outcome'])} ({fmt(episode['return'], 2)})"
    )


def is_game_training(run: data.RunEntry) -> bool:
    """A `mars train` run: its self-play episodes are arena records (a MAS run's are not)."""
    return run.kind == "train" and bool(run.config.get("games")) and not run.config.get("workflow")


def _replay(record: dict[str, Any], rules: Any = None) -> None:
    players, returns, outcomes, rewards = (
        _listed(record.get(name)) for name in ("players", "returns", "outcomes", "rewards")
    )
    result = pd.DataFrame(
        [
            {
                "seat": name,
                "who": players[i] if i < len(players) else "-",
                "outcome": outcomes[i] if i < len(outcomes) else "-",
                "return": returns[i] if i < len(returns) else None,
                "reward": rewards[i] if i < len(rewards) else None,
            }
            for i, name in enumerate(data.SEATS)
        ]
    )
    show_table(result, hide_index=True, key="games_result")
    flags = []
    if record.get("invalid"):
        flags.append(f"ended by an invalid move of seat {fmt(record.get('invalid_seat'))}")
    if record.get("truncated"):
        flags.append("stopped at the action cap")
    if record.get("error"):
        flags.append(f"error: {record['error']}")
    if flags:
        st.warning("; ".join(flags))
    turns = data.replay_turns(record)
    if not turns:
        st.info("this episode has no recorded turns")
        return
    show_table(
        pd.DataFrame(
            [
                {
                    "#": t.index,
                    "seat": t.seat_label,
                    "turn": t.turn,
                    "action": t.action if t.action is not None else "-",
                    "legal": t.legal,
                    "reward": t.reward,
                    "tokens": (t.usage or {}).get("completion_tokens"),
                }
                for t in turns
            ]
        ),
        hide_index=True,
        key="games_turns",
    )
    position = 0
    if len(turns) > 1:
        start = _requested_turn(turns)
        position = st.slider("turn", 0, len(turns) - 1, start, key="games_turn")
    drawn, why = boards.positions_for(record, rules if isinstance(rules, dict) else None)
    players = [str(p) for p in _listed(record.get("players"))]
    board = boards.board_html(drawn[position], players) if drawn else None
    _turn(turns[position], board, why)
    if drawn:
        with st.expander("final position"):
            st.html(boards.board_html(drawn[-1], players))


def _requested_turn(turns: list[data.TurnView]) -> int:
    """The replay's first turn: `?seat_turn=S:T` (seat S's T-th move, as a branch log names a
    turn), else `?turn=N` (clamped), else turn 0."""
    seat, _, turn = str(st.query_params.get("seat_turn") or "").partition(":")
    for view in turns:
        if f"{view.seat}" == seat and f"{view.turn}" == turn:
            return view.index
    text = str(st.query_params.get("turn") or "")
    return min(int(text), len(turns) - 1) if text.isdigit() else 0


def _listed(value: Any) -> list[Any]:
    """A per-seat field as a list ([] when a damaged record has something else there)."""
    return value if isinstance(value, list) else []


def _turn(turn: data.TurnView, board: str | None, why: str) -> None:
    st.markdown(f"**turn {turn.index}: {turn.seat_label}**")
    cols = st.columns(3)
    cols[0].metric("action", turn.action if turn.action is not None else "-")
    cols[1].metric("legal", fmt(turn.legal))
    cols[2].metric("reward", fmt(turn.reward))
    left, right = st.columns([3, 2])
    with left:
        st.markdown("position (the move this turn makes highlighted)")
        if board is not None:
            st.html(board)
        else:
            st.caption(f"no board: {why}")
    with right:
        _model_side(turn)


def _model_side(turn: data.TurnView) -> None:
    if not turn.is_model:
        st.caption("a bot's move: no prompt or reasoning recorded")
        return
    st.markdown("state as the seat saw it")
    # Wrapped: a prompt's first line (the rules) is longer than the column and was cut.
    st.code(turn.state or "-", language=None, wrap_lines=True)
    if len(turn.prompt) > 1:
        with st.expander(f"all {len(turn.prompt)} messages this turn added"):
            for message in turn.prompt:
                st.markdown(f"*{message['role']}*")
                st.text(message["content"])
    if turn.reasoning:
        short = len(turn.reasoning) <= OPEN_REASONING_CHARS  # open beside the board
        with st.expander(f"reasoning ({len(turn.reasoning)} chars)", expanded=short):
            st.text(turn.reasoning)
    st.markdown("reply")
    st.code(turn.reply or "-", language=None, wrap_lines=True)
    if turn.error:
        st.error(f"invalid: {turn.error}")
    usage = turn.usage or {}
    st.caption(
        f"tokens in {fmt(usage.get('prompt_tokens'))} / out {fmt(usage.get('completion_tokens'))}"
    )
