"""A single-agent baseline at the compute of a MAS run (`mars eval --match-compute RUN`).

What is matched is a question's total tokens, prompt + completion, as the MAS run's records
count them (`mean_tokens` of its summary: per graded attempt). A debate's extra cost is mostly
prompt: every round re-reads the other agents' replies, so matching completion tokens alone
would let a MAS spend several times a baseline's compute and still call it equal. The
completion figures and the k that matching them would give are recorded beside it.

The baseline is the single agent with a majority vote over k samples of each question: its first
epoch measures the tokens of one sample, k is the whole number of samples whose tokens come
closest to the MAS's per question (at least 1, per suite), and the other k - 1 epochs follow.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import MarsError
from core.files import write_json_atomic
from core.names import a_run_of
from core.runstore import RunDir

MATCHED_ON = "tokens"  # prompt + completion tokens per question


@dataclass(frozen=True)
class MatchTarget:
    """The MAS eval run a baseline is matched to, and its compute per question per suite."""

    path: Path
    mas: str
    model: str | None
    suites: dict[str, dict[str, Any]]  # suite -> its summary figures (recomputed from records)
    versions: dict[str, Any]  # suite -> the data version its questions came from


def load_target(path: Path, *, suites: list[str], limit: int | None) -> MatchTarget:
    """The MAS run at `path`, refused in one line unless it is an eval run of the same suites
    and limit with a graded attempt in each suite."""
    from harness.evaluation import summarize

    where = f"--match-compute {path}"
    try:
        run = RunDir.open(path)
    except MarsError as exc:
        raise MarsError(f"{where}: {exc}") from exc
    if run.kind != "eval":
        raise MarsError(f"{where} is {a_run_of(run.kind)}; it needs a mars eval run")
    info = run.info()
    config = info.config
    theirs, ours = sorted(config.get("suites") or []), sorted(suites)
    if theirs != ours:
        raise MarsError(
            f"{where} ran the suites {','.join(theirs) or 'none'}, not {','.join(ours)}: "
            "a matched baseline answers the same questions"
        )
    if config.get("limit") != limit:
        raise MarsError(
            f"{where} ran --limit {_limit_text(config.get('limit'))}, not "
            f"{_limit_text(limit)}: a matched baseline answers the same questions"
        )
    figures = summarize(run.records())["suites"]
    unscored = sorted(s for s in suites if not (figures.get(s) or {}).get("n"))
    if unscored:
        raise MarsError(f"{where} has no graded attempt in {', '.join(unscored)}: nothing to match")
    data = config.get("data") or {}
    return MatchTarget(
        path=Path(path).resolve(),
        mas=str(config.get("mas") or "single"),
        model=info.model,
        suites={s: figures[s] for s in suites},
        versions={s: (data.get(s) or {}).get("version") for s in suites},
    )


def _limit_text(limit: int | None) -> str:
    return "none" if limit is None else str(limit)


def check_versions(target: MatchTarget, versions: dict[str, Any]) -> None:
    """Refuse when a suite's data version differs from the MAS run's (other questions)."""
    changed = [
        f"{suite} {target.versions[suite]} -> {version}"
        for suite, version in sorted(versions.items())
        if target.versions.get(suite) not in (None, version)
    ]
    if changed:
        raise MarsError(
            f"--match-compute {target.path} read other versions of the suites "
            f"({'; '.join(changed)}): a matched baseline answers the same questions"
        )


def choose_k(target_tokens: float, sample_tokens: float | None) -> int:
    """The number of samples whose tokens come closest to `target_tokens` (at least 1)."""
    if not sample_tokens or sample_tokens <= 0:
        return 1
    return max(1, math.floor(target_tokens / sample_tokens + 0.5))


def decide(target: MatchTarget, records: list[dict[str, Any]]) -> dict[str, Any]:
    """run.json's `compute_match`: per suite the MAS's compute per question, the single agent's
    tokens per sample (its first epoch's graded attempts) and the k chosen."""
    from harness.evaluation import summarize

    first = summarize([r for r in records if int(r.get("epoch", 0)) == 0])["suites"]
    suites: dict[str, Any] = {}
    for suite, mas in target.suites.items():
        own = first.get(suite) or {}
        sample, completion = own.get("mean_tokens"), own.get("mean_completion_tokens")
        suites[suite] = {
            "mas_tokens_per_question": mas["mean_tokens"],
            "mas_completion_tokens_per_question": mas["mean_completion_tokens"],
            "mas_calls_per_question": mas["mean_llm_calls"],
            "sample_tokens": sample,
            "k": choose_k(mas["mean_tokens"], sample),
            "k_if_completion_matched": choose_k(mas["mean_completion_tokens"], completion),
        }
    return {**base_config(target), "suites": suites}


def base_config(target: MatchTarget) -> dict[str, Any]:
    """What the run is matched to before k is chosen (part of the run's identity)."""
    return {"run": str(target.path), "mas": target.mas, "model": target.model}


def epochs_of(decision: dict[str, Any] | None, suites: list[str]) -> dict[str, int]:
    """Each suite's epochs: k once chosen, else the one epoch that measures a sample."""
    chosen = (decision or {}).get("suites") or {}
    return {suite: int((chosen.get(suite) or {}).get("k", 1)) for suite in suites}


def record_decision(run: RunDir, decision: dict[str, Any]) -> None:
    """Write the chosen k into run.json's config (with `epochs`, the largest k)."""
    info = run.info()
    config = {
        **info.config,
        "compute_match": decision,
        "epochs": max(s["k"] for s in decision["suites"].values()),
    }
    write_json_atomic(run.info_path, info.model_copy(update={"config": config}).model_dump())


def match_summary(decision: dict[str, Any], records: list[dict[str, Any]]) -> dict[str, Any]:
    """summary.json's `compute_match`: the decision with what the baseline spent per question
    (its graded attempts' tokens over its questions) and the ratio to the MAS's."""
    spent: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    questions: dict[str, set[str]] = defaultdict(set)
    for record in records:
        if record.get("error"):
            continue
        suite = record["suite"]
        questions[suite].add(str(record["sample_id"]))
        metrics = record.get("metrics") or {}
        for usage in (metrics.get("tokens_per_agent") or {}).values():
            completion = float(usage.get("completion_tokens", 0))
            spent[suite]["tokens"] += float(usage.get("prompt_tokens", 0)) + completion
            spent[suite]["completion"] += completion
        spent[suite]["calls"] += float(metrics.get("llm_calls", 0))
    suites: dict[str, Any] = {}
    for suite, chosen in (decision.get("suites") or {}).items():
        count = len(questions.get(suite, ()))
        own = {key: value / count for key, value in spent[suite].items()} if count else {}
        suites[suite] = {
            **chosen,
            "tokens_per_question": own.get("tokens"),
            "completion_tokens_per_question": own.get("completion"),
            "calls_per_question": own.get("calls"),
            "ratio": _ratio(own.get("tokens"), chosen["mas_tokens_per_question"]),
            "completion_ratio": _ratio(
                own.get("completion"), chosen["mas_completion_tokens_per_question"]
            ),
        }
    return {
        **{key: decision.get(key) for key in ("run", "mas", "model")},
        "matched_on": MATCHED_ON,
        "suites": suites,
    }


def _ratio(value: float | None, of: float | None) -> float | None:
    return None if value is None or not of else value / of


def match_lines(match: dict[str, Any], suites: dict[str, Any]) -> list[str]:
    """One line per suite: k, the majority vote's score, the tokens per question beside the
    MAS's."""
    lines = []
    for suite, figures in match.get("suites", {}).items():
        own = figures.get("tokens_per_question")
        spent = "no graded sample" if own is None else f"{own:.0f} tokens a question"
        ratio = figures.get("ratio")
        scored = suites.get(suite) or {}
        score = scored.get("maj_at_k", scored.get("accuracy"))  # one epoch: maj@1 = accuracy
        lines.append(
            f"compute match {suite}: k={figures['k']}, "
            + ("" if score is None else f"maj@k {100 * score:.1f}%, ")
            + f"{spent} vs {match.get('mas')}'s {figures['mas_tokens_per_question']:.0f}"
            + ("" if ratio is None else f" (ratio {ratio:.2f})")
        )
    return lines
