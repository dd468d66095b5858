"""Training inside a MAS workflow on verl's own trainer, for real, on this machine's CPU.

`mars train-mas --trainer verl --device cpu`: one step of reasoner_tool problems tree-sampled by
the workflow agent loop (K = 4 branches at every call, the tool agent's programs in the sandbox),
one shared policy, at_grpo with each branch's verl `uid` set to its (problem, role, call) group, and
`mars eval --trained` reads what it published. One policy per role: two alternating phases, each
training its policy against the other's served checkpoint. (A rerun that resumes a policy from
its own verl checkpoint is not run here: one more verl launch does not fit CI's 15 minutes; the
resume itself is verl's, tested on a game run in test_verl_train_cpu.)
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from pathlib import Path

import pytest

pytest.importorskip("verl", reason="verl is not installed (make setup-verl)")

from conftest import run_mars
from model_testkit import mas_model
from verl_testkit import step_turns

from core import branch_log
from core.servers import model_fingerprint
from train_backend.advantage import compute_advantages
from train_backend.mas.trained import trained_mas
from train_backend.verl.tree_loop import group_key

BRANCHES = 4
# Temperature 1.3: the test model (120 steps of format training, no copying yet) then breaks
# the program format in some branches and not others, so a call's K branches earn different
# returns in 85% of tool calls (sampled: 34 of 40; at 1.0, 21 of 40, and a 2-step run could end
# with every group flat).
CONFIG = f"""\
workflow_options: {{rounds: 1, code_seconds: 2.0}}
problems_per_step: 2
branches: {BRANCHES}
max_new_tokens: 32
learning_rate: 0.001
warmup_steps: 0
kl_coef: 0.0
temperature: 1.3
save_every: 1
prompt_style: compact
"""


def train_args(run: Path, config: Path, steps: int) -> list[str]:
    return [
        "train-mas", "--trainer", "verl", "--device", "cpu", "--model", str(mas_model()),
        "--config", str(config), "--steps", str(steps), "--run-dir", str(run),
    ]  # fmt: skip


SHARED_PROBLEMS = 3  # one step of three problems: some call had a better branch (~99.7%)


@pytest.fixture(scope="module")
def mas_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, float]:
    root = tmp_path_factory.mktemp("verl-mas")
    config = root / "mas.yaml"
    config.write_text(
        CONFIG.replace("problems_per_step: 2", f"problems_per_step: {SHARED_PROBLEMS}")
    )
    run = root / "run"
    started = time.perf_counter()
    result = run_mars(*train_args(run, config, 1), timeout=900)
    assert result.returncode == 0, result.stderr[-3000:] + result.stdout[-3000:]
    return run, config, time.perf_counter() - started


def test_each_branch_of_a_workflow_call_is_scored_in_its_group(mas_run):
    run, _, seconds = mas_run
    print(f"a reasoner_tool CPU verl step in {seconds:.0f} s")
    assert json.loads((run / "run.json").read_text())["status"] == "completed"
    turns = step_turns(run, 1)
    groups: dict[str, list[dict]] = defaultdict(list)
    for turn in turns:
        assert turn["game"] == "reasoner_tool"
        # verl's uid of every sample is its tree group: (problem, role, the role's call)
        assert turn["uid"] == group_key(turn["episode"], turn["seat"], turn["turn"])
        groups[turn["uid"]].append(turn)
    assert len({turn["episode"] for turn in turns}) == SHARED_PROBLEMS
    assert {len(group) for group in groups.values()} == {BRANCHES}
    assert {turn["seat"] for turn in turns} == {0, 1}  # tool agent and reasoner both branch
    table = {c: [t[c] for t in turns] for c in ("game", "episode", "seat", "turn", "reward")}
    expected = compute_advantages(table, "at_grpo")
    assert [turn["advantage"] for turn in turns] == pytest.approx(expected, abs=1e-5)
    for group in groups.values():
        assert sum(turn["advantage"] for turn in group) == pytest.approx(0.0, abs=1e-5)
    assert any(turn["advantage"] != 0 for turn in turns)  # some call had a better branch
    # The run's branch log holds the same branches: the role and reply of each, one main line.
    lines = branch_log.read_step(run, 1)
    assert len(lines) == len(turns) and {line["role"] for line in lines} == {"tool", "reasoner"}
    assert sorted(line["advantage"] for line in lines) == pytest.approx(
        sorted(turn["advantage"] for turn in turns), abs=1e-5
    )
    for group in branch_log.groups_of(lines).values():
        assert len(group) == BRANCHES and sum(line["chosen"] for line in group) == 1
    # rewards are the workflow's: a tool branch -1/0/+1 plus the reasoner's [correct], a
    # reasoner branch 2 x [correct] (one round)
    assert {turn["reward"] for turn in turns if turn["seat"] == 1} <= {0.0, 2.0}
    assert {turn["reward"] for turn in turns if turn["seat"] == 0} <= {-1.0, 0.0, 1.0, 2.0}


def test_eval_reads_the_checkpoints_that_the_run_published(mas_run):
    run, _, _ = mas_run
    trained = trained_mas(run)
    assert trained.step == 1 and trained.workflow == "reasoner_tool"
    assert trained.role_models == {
        "tool": run / "checkpoints" / "step_1",
        "reasoner": run / "checkpoints" / "step_1",
    }
    assert trained_mas(run, step=1).role_models["tool"] == run / "checkpoints" / "step_1"
    assert (run / "checkpoints" / "step_1" / "model.safetensors").is_file()


POLICIES = ("--policies", "tool=coder,reasoner=thinker")
PHASE_PROBLEMS = 1  # each phase is a verl launch of its own: one problem a step keeps it short


@pytest.fixture(scope="module")
def phases_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    root = tmp_path_factory.mktemp("verl-mas-phases")
    config = root / "mas.yaml"
    phases = CONFIG.replace("problems_per_step: 2", f"problems_per_step: {PHASE_PROBLEMS}")
    config.write_text(phases + "phase_steps: 1\n")
    run = root / "run"
    result = run_mars(*train_args(run, config, 1), *POLICIES, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:] + result.stdout[-3000:]
    return run, config, result.stdout


def test_one_policy_per_role_trains_in_phases_against_the_others_served_checkpoints(phases_run):
    run, _, stdout = phases_run
    assert "phase 0: coder to step 1" in stdout
    assert "phase 1: thinker to step 1" in stdout
    policies = run / "policies"
    # Each phase trained its own policy on its own role's calls only: the partner's calls were
    # answered by a served model, not branched, not samples.
    for name, seat in (("coder", 0), ("thinker", 1)):
        turns = step_turns(policies / name, 1)
        assert {turn["seat"] for turn in turns} == {seat}
        assert len(turns) == PHASE_PROBLEMS * BRANCHES  # one call of the role a problem
        assert (policies / name / "checkpoints" / "step_1" / "model.safetensors").is_file()
    # The thinker's phase ran against the coder's checkpoint of the phase before, served.
    thinker = json.loads((policies / "thinker" / "run.json").read_text())["config"]
    partner = thinker["frozen_partners"]["tool"]
    coder_step = policies / "coder" / "checkpoints" / "step_1"
    assert partner["model_identity"] == model_fingerprint(str(coder_step.resolve()))
    coder = json.loads((policies / "coder" / "run.json").read_text())["config"]
    assert coder["frozen_partners"]["reasoner"]["model_identity"] == model_fingerprint(
        str(mas_model())
    )
    served = (policies / "thinker" / "logs" / "partner-coder").glob("*.log")
    posts = sum(log.read_text().count("POST /v1/chat/completions") for log in served)
    assert posts >= PHASE_PROBLEMS  # the partner's call of each problem (one round)
    trained = trained_mas(run)
    assert trained.role_models == {
        "tool": coder_step,
        "reasoner": policies / "thinker" / "checkpoints" / "step_1",
    }
