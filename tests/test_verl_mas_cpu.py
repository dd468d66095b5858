"""Training inside a MAS workflow on verl's own trainer, for real, on this machine's CPU.

`mars train-mas --trainer verl --device cpu`: reasoner_tool problems tree-sampled by the workflow
agent loop (K = 4 branches at every call, the tool agent's programs in the sandbox), at_grpo with
each branch's verl `uid` set to its (problem, role, call) group. One LoRA adapter per role on one
base: two alternating phases, each training its adapter against the other's served adapter and
publishing the adapter alone, which `mars eval --trained` reads; then a rerun to step 2 with the
thinker frozen, where only the coder trains, resuming its adapter from its own verl checkpoint
of step 1. (One shared policy on verl was a launch of its own here until CI's 15 minutes ran
short: its workflow loop and trainer are the phases' own, both roles branched in one run is
tested in process, and a whole-model publication on a game run in test_verl_train_cpu.)
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from pathlib import Path

import pytest
import torch

pytest.importorskip("verl", reason="verl is not installed (make setup-verl)")

from conftest import run_mars
from model_testkit import mas_model
from verl_testkit import step_turns

from core import branch_log
from core.checkpoints import ADAPTER_CONFIG_FILE, ADAPTER_WEIGHTS_FILE, CHECKPOINT_FILE
from core.fingerprints import model_fingerprint
from train_backend.advantage import compute_advantages
from train_backend.local.adapters import load_merged
from train_backend.mas.trained import trained_mas
from train_backend.verl.names import ROLLOUT_ADAPTER_LOG as ADAPTER_LOG
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


POLICIES = ("--policies", "tool=coder,reasoner=thinker")
PHASE_PROBLEMS = 1  # each phase is a verl launch of its own: one problem a step keeps it short
ADAPTER_FILES = {ADAPTER_CONFIG_FILE, ADAPTER_WEIGHTS_FILE, CHECKPOINT_FILE}


def adapter_tensors(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(folder / ADAPTER_WEIGHTS_FILE)


def lora_b(folder: Path) -> dict[str, torch.Tensor]:
    return {k: t for k, t in adapter_tensors(folder).items() if "lora_B" in k}


def had_signal(*steps: list[dict]) -> bool:
    """Whether some branch of these steps carried a non-zero advantage (with one problem a step
    every branch may earn the same return: a flat step has no gradient)."""
    return any(turn["advantage"] != 0 for turns in steps for turn in turns)


def assert_published_adapter(folder: Path, name: str, *, moved: bool) -> None:
    """`folder` holds only the adapter (the contract's files, no model), on the one base, and
    LoRA's B (zero when the adapter is made) has moved exactly when an update had a signal."""
    files = {path.name for path in folder.iterdir()}
    assert files >= ADAPTER_FILES and "tokenizer.json" in files
    assert not {"model.safetensors", "config.json"} & files
    recorded = json.loads((folder / CHECKPOINT_FILE).read_text())["adapter"]
    base = str(mas_model())
    assert recorded == {
        "kind": "lora", "name": name, "base": base, "base_fingerprint": model_fingerprint(base),
    }  # fmt: skip
    assert any(t.abs().sum() > 0 for t in lora_b(folder).values()) == moved


@pytest.fixture(scope="module")
def phases_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    root = tmp_path_factory.mktemp("verl-mas-phases")
    config = root / "mas.yaml"
    phases = CONFIG.replace("problems_per_step: 2", f"problems_per_step: {PHASE_PROBLEMS}")
    # constant: each phase is a verl run whose cosine would end at lr 0, and a resumed run
    # starts from the optimizer's saved lr (see the frozen rerun below)
    config.write_text(phases + "phase_alternate_steps: 1\nadapter: lora\nlr_schedule: constant\n")
    run = root / "run"
    started = time.perf_counter()
    result = run_mars(*train_args(run, config, 1), *POLICIES, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:] + result.stdout[-3000:]
    print(f"two LoRA phases in {time.perf_counter() - started:.0f} s")
    return run, config, result.stdout


def test_one_adapter_per_role_trains_in_phases_against_the_others_served_adapter(phases_run):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    run, _, stdout = phases_run
    assert "phase 0: coder to step 1" in stdout
    assert "phase 1: thinker to step 1" in stdout
    policies = run / "policies"
    # Each phase trained its own adapter on its own role's calls only: the partner's calls were
    # answered by a served model, not branched, not samples. A row whose partner call failed
    # is dropped, so a full count also says the partner answered every problem.
    for name, seat in (("coder", 0), ("thinker", 1)):
        turns = step_turns(policies / name, 1)
        assert {turn["seat"] for turn in turns} == {seat}
        assert len(turns) == PHASE_PROBLEMS * BRANCHES  # one call of the role a problem
        step_1 = policies / name / "checkpoints" / "step_1"
        assert_published_adapter(step_1, name, moved=had_signal(turns))
        # the rollout ran the adapter verl synced: the fresh one, then step 1's
        log = (policies / name / "logs" / "verl.log").read_text()
        assert f"{ADAPTER_LOG} of step 0" in log and f"{ADAPTER_LOG} of step 1" in log
    coder_step = policies / "coder" / "checkpoints" / "step_1"
    loaded = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(mas_model()), coder_step
    )
    assert loaded.peft_config["default"].r == 16
    assert load_merged(coder_step).source == str(coder_step)
    # The thinker's phase ran against the coder's adapter of the phase before, served on the
    # base; the coder's against the starting model.
    thinker = json.loads((policies / "thinker" / "run.json").read_text())["config"]
    partner = thinker["frozen_partners"]["tool"]
    assert partner["model_identity"] == model_fingerprint(str(coder_step.resolve()))
    served = "".join(log.read_text() for log in (policies / "thinker" / "logs").rglob("*.log"))
    assert f"coder={coder_step}" in served or f"coder={coder_step.resolve()}" in served
    coder = json.loads((policies / "coder" / "run.json").read_text())["config"]
    assert coder["frozen_partners"]["reasoner"]["model_identity"] == model_fingerprint(
        str(mas_model())
    )
    trained = trained_mas(run)
    assert trained.role_models == {
        "tool": coder_step,
        "reasoner": policies / "thinker" / "checkpoints" / "step_1",
    }


def test_each_branch_of_a_workflow_call_is_scored_in_its_group(phases_run):
    """In each phase, verl's uid of every sample is its tree group (problem, role, the role's
    call), the advantages are at_grpo's over those groups, and the branch log holds the same
    branches with one main line per group."""
    run, _, _ = phases_run
    for name, seat in (("coder", 0), ("thinker", 1)):
        policy = run / "policies" / name
        assert json.loads((policy / "run.json").read_text())["status"] == "completed"
        turns = step_turns(policy, 1)
        groups: dict[str, list[dict]] = defaultdict(list)
        for turn in turns:
            assert turn["game"] == "reasoner_tool"
            assert turn["uid"] == group_key(turn["episode"], turn["seat"], turn["turn"])
            groups[turn["uid"]].append(turn)
        assert {len(group) for group in groups.values()} == {BRANCHES}
        table = {c: [t[c] for t in turns] for c in ("game", "episode", "seat", "turn", "reward")}
        expected = compute_advantages(table, "at_grpo")
        assert [turn["advantage"] for turn in turns] == pytest.approx(expected, abs=1e-5)
        for group in groups.values():
            assert sum(turn["advantage"] for turn in group) == pytest.approx(0.0, abs=1e-5)
        lines = branch_log.read_step(policy, 1)
        assert len(lines) == len(turns) and {line["role"] for line in lines} == {
            ("tool", "reasoner")[seat]
        }
        assert sorted(line["advantage"] for line in lines) == pytest.approx(
            sorted(turn["advantage"] for turn in turns), abs=1e-5
        )
        for group in branch_log.groups_of(lines).values():
            assert len(group) == BRANCHES and sum(line["chosen"] for line in group) == 1
        # rewards are the workflow's: a tool branch -1/0/+1 plus the reasoner's [correct], a
        # reasoner branch 2 x [correct] (one round)
        allowed = {0.0, 2.0} if seat == 1 else {-1.0, 0.0, 1.0, 2.0}
        assert {turn["reward"] for turn in turns} <= allowed


@pytest.fixture(scope="module")
def frozen_rerun(phases_run: tuple[Path, Path, str]) -> tuple[Path, str]:
    run, config, _ = phases_run
    config.write_text(config.read_text() + "frozen_policies: [thinker]\n")
    started = time.perf_counter()
    result = run_mars(*train_args(run, config, 2), *POLICIES, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:] + result.stdout[-3000:]
    print(f"the coder's resumed phase in {time.perf_counter() - started:.0f} s")
    return run, result.stdout


def test_a_frozen_policy_never_trains_and_the_other_resumes_its_own_adapter(frozen_rerun):
    run, stdout = frozen_rerun
    policies = run / "policies"
    # one phase: the coder from its step 1 to step 2; the frozen thinker is the starting model
    assert f"phase 0: coder to step 2; partners: thinker = {mas_model()}" in stdout
    assert "thinker to step" not in stdout
    coder = policies / "coder"
    step_2 = coder / "checkpoints" / "step_2"
    # Adam's moments come back with the resume: a signal at step 1 still moves B at step 2
    signal = had_signal(step_turns(coder, 1), step_turns(coder, 2))
    assert_published_adapter(step_2, "coder", moved=signal)
    before, after = lora_b(coder / "checkpoints" / "step_1"), lora_b(step_2)
    assert any(not torch.equal(before[k], after[k]) for k in before) == signal
    # verl resumed the coder's own save of step 1 (the adapter alone) and numbered the next
    # update 2; its rollout played step 2 with the resumed adapter
    rerun = (coder / "logs" / "verl.log").read_text().rsplit("\n$ ", 1)[-1]
    assert "global_step_1, setting global step to 1" in rerun
    assert "Loaded LoRA-only checkpoint" in rerun
    assert f"{ADAPTER_LOG} of step 1" in rerun and f"{ADAPTER_LOG} of step 2" in rerun
    assert [turn["seat"] for turn in step_turns(coder, 2)] == [0] * PHASE_PROBLEMS * BRANCHES
    assert not (policies / "thinker" / "checkpoints" / "step_2").exists()
    assert not (policies / "thinker" / "verl" / "turns" / "step_2.jsonl").exists()
