"""Experiments page: each `mars experiment` folder under the root, its parts' state and the
report it wrote, laid out like the paper's tables with the paper's numbers beside ours."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from dashboard import data
from dashboard.data.experiments import find_experiments, parts_table, report_text
from dashboard.views.common import empty_state, show_table


def render(root: Path, runs: list[data.RunEntry]) -> None:
    st.header("Experiments")
    found = find_experiments(root)
    if not found:
        empty_state("no experiment yet", "experiment")
        return
    names = [entry.name for entry in found]
    chosen = st.selectbox("experiment", names, key="experiment")
    entry = found[names.index(chosen)] if chosen in names else found[0]
    state = entry.state
    title = state.get("experiment", {}).get("title") or state.get("name") or entry.name
    st.subheader(str(title))
    wall = state.get("last_wall_s")
    if isinstance(wall, int | float):
        st.caption(f"last run: {wall / 60:.1f} min; folder `{entry.name}`")
    show_table(parts_table(state), hide_index=True, key="experiment_parts")
    report = report_text(root, entry)
    if report is None:
        st.info(f"no report yet: run `mars experiment {state.get('name', 'NAME')} --report`")
        return
    st.markdown(report)
