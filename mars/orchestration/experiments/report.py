"""The experiment's report, in markdown, laid out like the papers' tables.

Every loop part that evaluated its training run's start (step 0, `--baseline`) and a trained
checkpoint gives before/after rows: arenas (normalised return and win rate, paired over the same
episodes), exploitability (exact, each with its bootstrap interval), suites through a MAS
(accuracy, paired over questions). Then original vs obfuscated variants, MAST failure
categories (report_tables), the ablation arms, whether play was valid and varied (play_checks),
the paper's headline questions not attempted and what this scale cannot show. Each question of
the file comes first, with the figures that answer it (answers). A change marked * has a 95%
interval that excludes 0.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.errors import MarsError
from mars.orchestration.experiments import papers
from mars.orchestration.experiments.answers import answered_questions
from mars.orchestration.experiments.figures import (
    arena_change,
    curve,
    interval_change,
    start_and_last,
    suite_change,
)
from mars.orchestration.experiments.play_checks import (
    DISTINCT_TARGET,
    distinct_table,
    invalid_table,
)
from mars.orchestration.experiments.report_tables import ablation_table, failure_table, run_config
from mars.orchestration.experiments.report_text import INVALID_TARGET, md_table, value_text
from mars.orchestration.experiments.runner import read_state
from mars.orchestration.experiments.spec import Experiment

REPORT_FILE = "report.md"
PAPER_NAMES = {"marshal": "MARSHAL paper", "stronger_mas": "Stronger-MAS paper", "": "paper"}
INVALID_FLAG = 0.5  # a share of invalid replies above which a figure is flagged


def _game_info(name: str) -> tuple[bool, str | None]:
    """(held out, the original's name for a variant)."""
    from games.spec import get_game

    spec = get_game(name)
    return spec.split == "heldout", spec.variant_of


class Report:
    def __init__(self, experiment: Experiment, root: Path) -> None:
        self.experiment, self.root = experiment, root
        self.limits: list[str] = list(experiment.notes)
        self.games: list[list[str]] = []
        self.exploit: list[list[str]] = []
        self.suites: list[list[str]] = []
        # (training part, base game, measure) -> {game: text} for original vs variants
        self.variants: dict[tuple[str, str, str], dict[str, str]] = {}

    # -- per loop part ---------------------------------------------------------------------
    def loops(self) -> list[tuple[str, Path, dict | None, dict | None]]:
        out = []
        for part in self.experiment.parts:
            if part.run != "loop":
                continue
            rows = curve(self.root / part.name)
            start, last = start_and_last(rows)
            out.append((part.name, self.root / part.name, start, last))
        return out

    def collect(self) -> None:
        for name, loop_dir, start, last in self.loops():
            if start is None or last is None:
                continue
            for key, before in start["evals"].items():
                after = last["evals"].get(key)
                if not after or before.get("error") or after.get("error"):
                    continue
                where = (
                    name,
                    last["step"],
                    loop_dir / before["run_dir"],
                    loop_dir / after["run_dir"],
                )
                if before["kind"] == "arena":
                    self._arena(where, before, after)
                elif before["kind"] == "exploit":
                    self._exploit(where, before, after)
                elif before["kind"] == "eval":
                    self._suite(where, before, after)

    def _arena(self, where: tuple, before: dict, after: dict) -> None:
        name, step, dir_a, dir_b = where
        game, opponent = before["game"], before["opponent"]
        held_out, variant_of = _game_info(game)
        for seat, stats in before["seats"].items():
            trained = after["seats"].get(seat) or {}
            if stats.get("normalized_return") is None or trained.get("normalized_return") is None:
                continue
            norm = arena_change(dir_a, dir_b, seat, "norm")
            win = arena_change(dir_a, dir_b, seat, "win")
            paper = papers.marshal_game(variant_of or game, opponent, seat)
            cite = (
                f"{paper.text()} ({paper.source})"
                if paper and self.experiment.paper == "marshal"
                else ""
            )
            change = f"{norm.text()} (n={norm.n})" if norm else ""
            self.games.append([
                name, game, "yes" if held_out else "", opponent, seat,
                value_text(stats["normalized_return"], stats.get("normalized_return_ci")),
                value_text(trained["normalized_return"], trained.get("normalized_return_ci"))
                + f" (step {step})",
                change,
                f"{100 * stats['win']:.0f} → {100 * trained['win']:.0f}"
                + (f" ({win.text(100, 0)})" if win else ""),
                f"{100 * (trained.get('invalid_rate') or 0):.0f}%",
                cite,
            ])  # fmt: skip
            if seat == "first":
                base = variant_of or game
                self.variants.setdefault((name, base, f"arena vs {opponent}, first seat"), {})[
                    game
                ] = f"{stats['normalized_return']:.1f} → {trained['normalized_return']:.1f}" + (
                    f" ({norm.text()})" if norm else ""
                )
            self._flag_invalid(
                f"{name}: {game} against {opponent} ({seat} seat)",
                {"start": stats.get("invalid_rate"), "trained": trained.get("invalid_rate")},
            )

    def _exploit(self, where: tuple, before: dict, after: dict) -> None:
        name, step, _, _ = where
        game = before["game"]
        held_out, variant_of = _game_info(game)
        change = interval_change(
            before["exploitability"], before["ci95"], after["exploitability"], after["ci95"]
        )
        self.exploit.append([
            name, game, "yes" if held_out else "",
            value_text(before["exploitability"], before["ci95"], 3),
            value_text(after["exploitability"], after["ci95"], 3) + f" (step {step})",
            change.text(digits=3),
            f"{100 * (before.get('invalid_rate') or 0):.0f}%"
            f" → {100 * (after.get('invalid_rate') or 0):.0f}%",
            str(after.get("samples", "")),
        ])  # fmt: skip
        self._flag_invalid(
            f"{name}: exploitability on {game}",
            {"start": before.get("invalid_rate"), "trained": after.get("invalid_rate")},
        )
        base = variant_of or game
        self.variants.setdefault((name, base, "exploitability"), {})[game] = (
            f"{before['exploitability']:.3f} → {after['exploitability']:.3f}"
            f" ({change.text(digits=3)})"
        )

    def _suite(self, where: tuple, before: dict, after: dict) -> None:
        name, step, dir_a, dir_b = where
        suite, mas = before["suite"], before["mas"]
        change, _cells = suite_change(dir_a, dir_b, suite)
        paper = (
            papers.MARSHAL_SUITES.get((suite, mas)) if self.experiment.paper == "marshal" else None
        )
        acc_a, acc_b = before.get("accuracy"), after.get("accuracy")
        if acc_a is None or acc_b is None:
            return
        self.suites.append([
            name, suite, mas, str(after.get("n", "")),
            value_text(acc_a, before.get("ci95"), scale=100),
            value_text(acc_b, after.get("ci95"), scale=100) + f" (step {step})",
            change.text(100) + f" (n={change.n})" if change else "",
            f"{paper.text()} ({paper.source})" if paper else "",
        ])  # fmt: skip
        if max(acc_a, acc_b) < 0.05:
            self.limits.append(
                f"{name}: {suite} through {mas} scores {100 * acc_a:.0f}% → {100 * acc_b:.0f}%: "
                "the model cannot solve this suite, so no change in reasoning can show here."
            )

    # -- the other tables ------------------------------------------------------------------
    def standalone(self) -> list[str]:
        """Arena and exploitability parts outside a loop: their headline figures (an eval part
        is a compute-matched baseline, in the compute section)."""
        import json

        rows = []
        for part in self.experiment.parts:
            path = self.root / part.name / "summary.json"
            if part.run not in ("arena", "exploitability") or not path.is_file():
                continue
            summary = json.loads(path.read_text())
            if part.run == "exploitability" and summary.get("exploitability") is not None:
                figure = "exploitability " + value_text(
                    summary["exploitability"], summary.get("ci95"), 3
                )
            else:
                seats = summary.get("seats", {})
                figure = "normalised return " + ", ".join(
                    f"{seat} " + value_text(s["normalized_return"], s.get("normalized_return_ci"))
                    for seat, s in seats.items()
                    if s.get("normalized_return") is not None
                )
            rows.append([part.name, f"`mars {part.run}`", figure])
            rates = {"": summary.get("invalid_rate")}
            for seat, figures in summary.get("seats", {}).items():
                rates[f"{seat} seat"] = figures.get("invalid_rate")
            self._flag_invalid(f"{part.name} (`mars {part.run}`)", rates)
        return md_table(["part", "command", "figures"], rows)

    def _flag_invalid(self, what: str, rates: dict[str, float | None]) -> None:
        """Under "what this run cannot show": a figure made mostly of invalid replies."""
        high = {label: rate for label, rate in rates.items() if (rate or 0) > INVALID_FLAG}
        if not high:
            return
        shares = ", ".join(
            f"{100 * rate:.0f}%" + (f" ({label})" if label else "") for label, rate in high.items()
        )
        self.limits.append(
            f"{what}: {shares} of the model's replies were invalid, so the figure measures the "
            "reply format more than the play."
        )

    def compute(self) -> list[str]:
        """Each compute-matched single agent (an `eval` part with `match_compute`) beside the
        MAS run it matches: accuracy, tokens and calls per question, per role, the match."""
        from harness.report import build_report as compare_runs
        from harness.report import to_markdown

        out: list[str] = []
        for part in self.experiment.parts:
            if part.run != "eval" or not (self.root / part.name / "summary.json").is_file():
                continue
            match = run_config(self.root / part.name).get("compute_match") or {}
            runs = [Path(match["run"])] if match.get("run") else []
            try:
                compared = compare_runs([*runs, self.root / part.name])
            except MarsError as exc:
                self.limits.append(f"{part.name}: not reported ({exc})")
                continue
            against = f" against `{runs[0].name}`" if runs else ""
            out += [f"**{part.name}**{against}:", ""]
            out += [*to_markdown(compared).strip().splitlines(), ""]
        return out

    # -- the document ----------------------------------------------------------------------
    def build(self) -> str:
        e = self.experiment
        self.collect()
        state = read_state(self.root)
        out = [f"# Experiment `{e.name}`" + (f": {e.title}" if e.title else ""), ""]
        if e.description:
            out += [e.description.strip(), ""]
        out += self._parts_summary(state)
        if e.report.questions:
            out += [*answered_questions(e, self.root), ""]
        out += ["A change marked * has a 95% interval that excludes 0.", ""]
        if e.paper:
            out += [
                "The paper column is the paper's own figure (its model, its scale) where this "
                "experiment evaluates the same game and kind of opponent, or suite and MAS; "
                + ("this run's configuration is the paper's." if e.scale == "paper" else
                   "this run is a miniature, so compare the direction of a change, not its size."),
                "",
            ]  # fmt: skip
        failures, unjudged = failure_table(e, self.root)
        self.limits += unjudged
        sections = [
            ("Games: against fixed opponents (normalised return 0-100, both seats)",
             md_table(["training run", "game", "held out", "opponent", "seat", "start", "trained",
                     "change [95%]", "win % start → trained", "invalid", "paper"], self.games)),
            ("Exploitability (exact best response; lower is better)",
             md_table(["training run", "game", "held out", "start", "trained", "change [95%]",
                     "invalid replies", "samples per state"], self.exploit)),
            ("Original vs obfuscated variants", self._variants_table()),
            ("Reasoning suites through MAS (accuracy %)",
             md_table(["training run", "suite", "MAS", "n", "start", "trained",
                     "change, pp [95%]", "paper"], self.suites)),
            ("Compute per question: each MAS and its compute-matched single agent",
             self.compute()),
            ("MAST failure categories (failed transcripts)", failures),
            ("Ablations and arms (last checkpoint of each)", ablation_table(e, self.root)),
            (f"Valid play: invalid replies per game evaluation (target: at most "
             f"{INVALID_TARGET:.0%}, at the start and after training)",
             invalid_table(e, self.root)),
        ]  # fmt: skip
        distinct, flags = distinct_table(e, self.root)
        self.limits += flags
        if any(p.run == "train" for p in e.parts):
            sections.append((
                f"Self-play: distinct games per step (target: at least {DISTINCT_TARGET:.0%} of "
                "each step's games)", distinct,
            ))  # fmt: skip
        if any(p.run in ("arena", "exploitability") for p in e.parts):
            sections.append(("Other evaluations", self.standalone()))
        for title, table in sections:
            out += (
                [f"## {title}", ""] + (table or ["(no finished runs for this section yet)"]) + [""]
            )
        if e.report.not_attempted:
            out += [f"## Headline questions of the {PAPER_NAMES[e.paper or '']} not attempted", ""]
            out += [f"- **{row.question}** {row.why}" for row in e.report.not_attempted] + [""]
        out += ["## What this run cannot show", ""]
        out += [f"- {line}" for line in dict.fromkeys(self.limits)] or ["- (nothing noted)"]
        out += [
            "",
            "Intervals: arena changes are paired bootstrap intervals over the episodes both "
            "checkpoints played (same seed, same seat); suite changes are paired over questions "
            "(harness.report); exploitability changes combine the two bootstrap intervals as "
            "independent normal estimates; failure-rate changes come from harness.failures "
            "(paired when both runs judged the same transcripts, else unpaired). A question's "
            "answer compares two evaluations the same way (paired when they share episodes or "
            "questions).",
        ]
        return "\n".join(out) + "\n"

    def _parts_summary(self, state: dict[str, Any]) -> list[str]:
        parts = state.get("parts", {})
        if not parts:
            return ["(no part has run yet)", ""]
        done = [p for p in parts.values() if p["status"] in ("completed", "unscored", "done")]
        wall = sum(p.get("wall_s") or 0 for p in parts.values())
        failed = [n for n, p in parts.items() if p["status"] in ("failed", "blocked")]
        total = len(self.experiment.parts)
        text = f"{len(done)} of {total} parts finished, {wall / 60:.1f} min of runs"
        if failed:
            text += f"; failed or blocked: {', '.join(failed)}"
        return [text + f" (folder `{self.root}`).", ""]

    def _variants_table(self) -> list[str]:
        rows = []
        for (name, base, measure), by_game in sorted(self.variants.items()):
            variants = sorted(g for g in by_game if g != base)
            if not variants or base not in by_game:
                continue
            rows.append(
                [
                    name,
                    measure,
                    f"{base}: {by_game[base]}",
                    "; ".join(f"{g}: {by_game[g]}" for g in variants),
                ]
            )
        return md_table(["training run", "measure", "original, start → trained", "variants"], rows)


def build_report(experiment: Experiment, root: Path) -> str:
    if not root.is_dir():
        raise MarsError(
            f"no experiment folder {root}: run `mars experiment {experiment.name}` first"
        )
    return Report(experiment, root).build()


def write_report(experiment: Experiment, root: Path) -> Path:
    from core.files import write_atomic

    path = root / REPORT_FILE
    write_atomic(path, build_report(experiment, root))
    return path


def report_folder(path: Path) -> str | None:
    """The report of an experiment folder (one holding experiment.json), else None: the hook
    `mars report PATH` calls before reading PATH as an eval run."""
    from pydantic import ValidationError

    from mars.orchestration.experiments.runner import STATE_FILE

    path = Path(path)
    if not (path / STATE_FILE).is_file():
        return None
    stored = read_state(path).get("experiment")
    try:
        experiment = Experiment.model_validate(stored)
    except ValidationError as exc:
        raise MarsError(f"{path / STATE_FILE} holds no readable experiment") from exc
    return build_report(experiment, path)
