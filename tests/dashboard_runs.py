"""Run directories for the dashboard tests, made by the real commands.

`build_runs(root)` runs, as subprocesses of `python -m mars`:
- `mars eval` twice (a "base" and a "trained" run of the `debate` MAS, 2 agents answering and then
  revising once, on gsm8k and aqua) against a `ScriptedServer` whose answer key decides which
  samples are right, wrong, unreadable (extraction failure) or refused (HTTP 400: an error);
- `mars failures` on both eval runs against a scripted judge (one reply is not JSON);
- `mars arena`: an `llm` player (the scripted server, one invalid reply) vs `random` at
  tic-tac-toe;
- `mars train --trainer local` on the embedded tiny model: 2 steps of 2 games, eval every step,
  with Kuhn exploitability from 4 replies per information state at each evaluation (replies of 8
  tokens are all invalid, so each state is played uniformly: the Training page's policy against
  equilibrium has all 12 states, about 1 s added), tree-sampled (AT-GRPO, 2 branches a turn), so
  it writes the branch log the Training inspector reads.

Then it appends one malformed line to each of the files the pages read, as a killed writer would
leave it. The tests compare what the pages show with the commands' own summaries.

`browser_runs(runs, root)` copies them under another root and adds what only the browser test
opens, so that the Training page shows two train runs at once and every page has something:
- `train-leduc`: a Leduc run in the trainer's metrics format whose evaluations at steps 0 and 4
  hold the per-card action shares (`policy/leduc_poker/card K/RAISE`, from the games layer's
  `action_shares` over exact policies) and no exploitability (OpenSpiel's NashConv of Leduc
  takes a second; a real Leduc evaluation of the tiny model, half a minute): Leduc's policy
  panel, and a run without exploitability beside one with it, the case that once made the step
  axis a row of categories;
- `experiments/dash-mini`: `mars experiment` over a one-part file (an arena of two random
  players), its experiment.json and report.md: the Experiments page.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conftest import DATA_DIR, REPO, mars_env, run_mars

from harness.benchmarks import get_suite
from harness.testing.scripted_server import Reply, ScriptedServer

SUITES = ("gsm8k", "aqua")
LIMIT = 6  # samples per suite
# What the scripted model answers per (suite, position): right, wrong, unreadable, or refused.
BASE_PLAN = {
    "gsm8k": ["right", "right", "wrong", "wrong", "unreadable", "refused"],
    "aqua": ["right", "right", "wrong", "wrong", "right", "right"],
}
TRAINED_PLAN = {
    "gsm8k": ["right", "right", "right", "right", "wrong", "right"],
    "aqua": ["right", "right", "right", "wrong", "right", "right"],
}
# The judge's reply per (suite, position) of a failed transcript; anything else: no failure.
JUDGE_BASE = {
    ("gsm8k", 2): '```json\n{"failure_modes": [{"id": "FM-2.5", "evidence": "ignored agent_2"},'
    ' {"id": "FM-3.2", "evidence": "nobody checked"}]}\n```',
    ("gsm8k", 3): 'Verdict: {"failure_modes": ["FM-1.3"], "summary": "went in circles"}',
    ("gsm8k", 4): "The agents derailed, I believe.",  # no JSON: a parse failure
    ("aqua", 2): '{"failure_modes": []}',
    ("aqua", 3): '{"FM-2.3": true, "FM-3.1": "stopped early", "FM-1.1": false}',
}
JUDGE_TRAINED = {
    ("gsm8k", 4): '{"failure_modes": [{"id": "FM-2.5", "evidence": "talked past each other"}]}',
    ("aqua", 3): '{"failure_modes": []}',
}
KUHN_SAMPLES = 4  # replies per Kuhn information state in the training run's evaluations
MALFORMED = '{"suite": "gsm8k", "sample_id": "cut sh'  # a line a kill cut short


@dataclass
class RealRuns:
    root: Path
    eval_base: Path
    eval_trained: Path
    arena: Path
    train: Path
    samples: dict[str, list[Any]]  # suite -> the benchmark samples, in order
    timings: dict[str, float]


def _samples() -> dict[str, list[Any]]:
    return {
        suite: get_suite(suite).load(data_dir=DATA_DIR, limit=LIMIT).samples for suite in SUITES
    }


def _wrong(sample: Any) -> str:
    if sample.choices:
        return "A" if sample.gold != "A" else "B"
    return str(int(float(sample.gold)) + 1)


def _locate(samples: dict[str, list[Any]], request: dict[str, Any]) -> tuple[str, int]:
    text = "\n".join(str(m.get("content") or "") for m in request["messages"])
    for suite, items in samples.items():
        for position, sample in enumerate(items):
            if sample.question[:80] in text:
                return suite, position
    raise AssertionError(f"no benchmark question in the request: {text[:200]!r}")


def model_script(samples: dict[str, list[Any]], plan: dict[str, list[str]]) -> Any:
    def script(request: dict[str, Any]) -> Reply:
        suite, position = _locate(samples, request)
        sample = samples[suite][position]
        what = plan[suite][position]
        thought = f"thinking about {suite} question {position}: try a few cases"
        if what == "refused":
            return Reply(status=400, text="refused by the scripted server")
        if what == "unreadable":
            return Reply(text="I am not sure what the answer is.", reasoning=thought)
        answer = sample.gold if what == "right" else _wrong(sample)
        return Reply(text=f"Step by step.\nThe answer is \\boxed{{{answer}}}.", reasoning=thought)

    return script


def judge_script(samples: dict[str, list[Any]], replies: dict[tuple[str, int], str]) -> Any:
    def script(request: dict[str, Any]) -> Reply:
        return Reply(text=replies.get(_locate(samples, request), '{"failure_modes": []}'))

    return script


def game_script() -> Any:
    """The first legal action with a line of reasoning; the fifth request gets an illegal one."""
    from games.prompts import legal_actions_in

    count = {"n": 0}
    lock = threading.Lock()

    def script(request: dict[str, Any]) -> Reply:
        with lock:
            count["n"] += 1
            n = count["n"]
        legal = legal_actions_in(request["messages"][-1]["content"])
        if n == 5 or not legal:
            return Reply(text="<answer><X(9,9)></answer>", reasoning="a bold move")
        return Reply(text=f"<answer>{legal[0]}</answer>", reasoning=f"I take {legal[0]}")

    return script


def _mars(*args: str, timeout: float = 600) -> str:
    result = run_mars(*args, timeout=timeout)
    assert result.returncode == 0, f"mars {' '.join(args)}\n{result.stdout}\n{result.stderr}"
    return result.stdout


@dataclass
class _Started:
    process: subprocess.Popen[bytes]
    log: Path  # its output


def _mars_started(log: Path, *args: str) -> _Started:
    """`mars ARGS` started in the background (`_mars_finished` waits for it), so that a long
    command runs while the short ones do; its output goes to `log` (a pipe nobody reads
    meanwhile could fill and stop it)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "mars", *args],
            stdout=output,
            stderr=subprocess.STDOUT,
            env=mars_env(),
            cwd=REPO,
        )
    return _Started(process, log)


def _mars_finished(started: _Started, timeout: float = 600) -> None:
    code = started.process.wait(timeout=timeout)
    output = started.log.read_text(errors="replace")
    assert code == 0, f"mars {' '.join(map(str, started.process.args[3:]))}\n{output}"


def _eval(server: ScriptedServer, run_dir: Path) -> None:
    _mars(
        "eval", "--suite", ",".join(SUITES), "--limit", str(LIMIT),
        "--mas", "debate", "--mas-option", "agents=2", "--mas-option", "rounds=1",
        "--base-url", server.base_url, "--model", "scripted", "--data-dir", str(DATA_DIR),
        "--run-dir", str(run_dir), "--timeout", "5", "--max-retries", "0", "--quiet",
    )  # fmt: skip


def build_runs(root: Path) -> RealRuns:
    samples = _samples()
    timings: dict[str, float] = {}
    runs = RealRuns(
        root=root,
        eval_base=root / "eval-base",
        eval_trained=root / "eval-trained",
        arena=root / "arena-ttt",
        train=root / "train-ttt",
        samples=samples,
        timings=timings,
    )
    # The training run, the longest, goes on while the others are made (one thread each).
    train_started = time.perf_counter()
    train = _mars_started(root.parent / "train.log", *_train_args(root, runs.train))

    start = time.perf_counter()
    for run_dir, plan in ((runs.eval_base, BASE_PLAN), (runs.eval_trained, TRAINED_PLAN)):
        with ScriptedServer(model_script(samples, plan)) as server:
            _eval(server, run_dir)
    timings["mars eval x2"] = time.perf_counter() - start

    start = time.perf_counter()
    for run_dir, replies in ((runs.eval_base, JUDGE_BASE), (runs.eval_trained, JUDGE_TRAINED)):
        with ScriptedServer(judge_script(samples, replies), model="judge") as server:
            _mars(
                "failures", str(run_dir), "--base-url", server.base_url,
                "--judge-model", "judge", "--quiet",
            )  # fmt: skip
    timings["mars failures x2"] = time.perf_counter() - start

    start = time.perf_counter()
    with ScriptedServer(game_script()) as server:
        _mars(
            "arena", "--game", "tic_tac_toe", "--player", "llm", "--opponent", "random",
            "--episodes", "3", "--prompt-style", "compact", "--base-url", server.base_url,
            "--model", "scripted", "--run-dir", str(runs.arena), "--quiet",
        )  # fmt: skip
    timings["mars arena"] = time.perf_counter() - start

    _mars_finished(train)
    timings["mars train (beside the others)"] = time.perf_counter() - train_started

    for path in (
        runs.eval_base / "records.jsonl",
        runs.eval_base / "failures.jsonl",
        runs.arena / "records.jsonl",
        runs.train / "metrics.jsonl",
    ):
        with path.open("a") as handle:
            handle.write(MALFORMED + "\n")
    return runs


def _train_args(root: Path, run_dir: Path) -> list[str]:
    """`mars train`'s arguments for the training run, its config written beside the root."""
    config = root.parent / "train.yaml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(
        json.dumps(
            {
                "eval_episodes": 2,
                "eval_opponents": {"tic_tac_toe": ["random"]},
                "eval_exploitability": {"kuhn_poker": KUHN_SAMPLES},
                # Tree sampling, 2 branches a turn: the run writes its branch log.
                "estimator": "at_grpo",
                "tree": {"branches": 2},
            }
        )
    )
    return [
        "train", "--trainer", "local", "--config", str(config), "--games", "tic_tac_toe",
        "--steps", "2", "--games-per-step", "2", "--max-tokens", "8", "--eval-every", "1",
        "--save-every", "2", "--run-dir", str(run_dir), "--quiet",
    ]  # fmt: skip


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The well-formed lines (the tests' own reading, independent of the dashboard's)."""
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return rows


_BUILT: dict[str, RealRuns] = {}


def shared_runs(tmp_path_factory: Any) -> RealRuns:
    """The runs, built once per test session (the AppTest and the browser tests share them).

    Tests must not change them; a test that corrupts files works on a copy.
    """
    if "runs" not in _BUILT:
        _BUILT["runs"] = build_runs(tmp_path_factory.mktemp("dashboard-real") / "runs")
    return _BUILT["runs"]


@dataclass
class BrowserRuns:
    root: Path
    runs: RealRuns  # the shared runs, as they are under their own root
    train_runs: tuple[str, ...]  # every train run under `root`
    experiment: Path


LEDUC_STEPS = 4
EXPERIMENT_DIR = "experiments/dash-mini"
EXPERIMENT = """name: dash-mini
title: A miniature for the dashboard
parts:
  - name: arena
    run: arena
    args: {game: tic_tac_toe, player: random, opponent: random, episodes: 2, quiet: true}
"""


def _train_run(path: Path, rows: list[dict[str, Any]], config: dict[str, Any]) -> None:
    from core.runstore import RunDir

    run = RunDir.resolve(out=None, run_dir=path, kind="train", slug="train")
    run.start(command=["mars", "train", "--run-dir", str(path)], config=config, model="tiny")
    with (run.path / "metrics.jsonl").open("w") as handle:
        handle.writelines(json.dumps(row) + "\n" for row in rows)
    run.finish()


def _leduc_shares(raise_by_card: dict[str, float] | None) -> dict[str, float]:
    """The trainer's `policy/leduc_poker/card <C>/<ACTION>` fields (as `metrics_of` names them)
    of an exact policy, from the games layer's `action_shares`: uniform, or raising (where it
    may) with the given probability per private card and calling otherwise."""
    from games.exploitability import StateTally, action_shares, legal_labels
    from games.infostates import information_states
    from games.spec import get_game

    spec = get_game("leduc_poker")

    def policy(state: Any, labels: list[str]) -> tuple[float, ...]:
        if raise_by_card is None or "<RAISE>" not in labels:
            return tuple(1 / len(labels) for _ in labels)
        private = int(re.findall(r"\[Private: (\d+)\]", state.key)[0])
        raised = raise_by_card["JQK"[private // 2]]  # two suits of each rank
        calls = "<CALL>" in labels
        return tuple(
            raised if label == "<RAISE>" else (1 - raised) * (label == "<CALL>" or not calls)
            for label in labels
        )

    tallies = []
    for state in information_states(spec):
        labels = legal_labels(spec, state)
        tallies.append(StateTally(state, labels, [0] * len(labels), exact=policy(state, labels)))
    return {
        f"policy/{spec.name}/{state}/{label}": share
        for state, shares in action_shares(spec, tallies).items()
        for label, share in shares.items()
    }


def _leduc_rows() -> list[dict[str, Any]]:
    evaluations = {
        0: _leduc_shares(None),
        LEDUC_STEPS: _leduc_shares({"J": 0.1, "Q": 0.4, "K": 0.9}),
    }
    rows = []
    for step in range(LEDUC_STEPS + 1):
        row: dict[str, Any] = {"step": step, "loss": 0.5 / (step + 1), "kl": 0.01 * step}
        row |= {"reward_mean": -1 + 0.3 * step, "invalid_rate": 0.5 / (step + 1)}
        row |= {"reward_mean/leduc_poker/first": -1 + 0.4 * step}
        row |= {"reward_mean/leduc_poker/second": -1 + 0.2 * step}
        rows.append(row | evaluations.get(step, {}))
    return rows


def browser_runs_started(root: Path) -> _Started:
    """The part of `browser_runs` that needs none of the shared runs, under `root` (created):
    the Leduc run written, and `mars experiment` started, which `browser_runs` waits for."""
    root.mkdir(parents=True, exist_ok=True)
    _train_run(root / "train-leduc", _leduc_rows(), {"games": ["leduc_poker"]})
    spec = root.parent / "dash-mini.yaml"
    spec.write_text(EXPERIMENT)
    log = root.parent / "dash-mini.log"
    return _mars_started(log, "experiment", str(spec), "--run-dir", str(root / EXPERIMENT_DIR))


def browser_runs(runs: RealRuns, root: Path, started: _Started | None = None) -> BrowserRuns:
    """The shared runs copied under `root` (left as they are), a Leduc train run and an
    experiment (see the module's docstring); `started` is `browser_runs_started(root)` when
    the caller began with it."""
    started = started or browser_runs_started(root)
    shutil.copytree(runs.root, root, dirs_exist_ok=True)
    _mars_finished(started)
    return BrowserRuns(root, runs, ("train-ttt", "train-leduc"), root / EXPERIMENT_DIR)
