"""The workflow trainer on the embedded tiny model: one policy per role or one shared, each
policy updated on its own roles' samples only, with its own checkpoints; resume from them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from workflow_testkit import tiny_workflow_config, train_tiny_workflow

from core import branch_log
from core.causal_lm import load_policy, resolve_model_path
from core.errors import MarsError
from train_backend.local.checkpoint import list_checkpoints
from train_backend.mas import trainer as workflow_trainer
from train_backend.mas.config import WorkflowTrainConfig


def _config(**overrides: Any) -> WorkflowTrainConfig:
    return tiny_workflow_config(**overrides)


def _train(config: WorkflowTrainConfig, path: Path) -> dict[str, Any]:
    return train_tiny_workflow(path, config)


def _parameters(folder: Path) -> torch.Tensor:
    model = load_policy(folder).model
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_each_policy_learns_only_from_its_roles_and_keeps_its_own_checkpoints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[int, set[int]] = {}
    real_update = workflow_trainer.update_policy

    def spying_update(config, policy, reference, optimizer, samples, advantages, step):
        seen.setdefault(id(policy), set()).update(sample.seat for sample in samples)
        return real_update(config, policy, reference, optimizer, samples, advantages, step)

    monkeypatch.setattr(workflow_trainer, "update_policy", spying_update)
    config = _config(policies={"tool": "coder", "reasoner": "thinker"})
    summary = _train(config, tmp_path / "run")

    assert sorted(seen.values(), key=min) == [{0}, {1}]  # tool = seat 0, reasoner = seat 1
    assert summary["policies"] == {"coder": ["tool"], "thinker": ["reasoner"]}
    start = _parameters(resolve_model_path(None))
    trained = {}
    for name in ("coder", "thinker"):
        found = list_checkpoints(tmp_path / "run" / "policies" / name)
        assert [step for step, _ in found] == [2]
        trained[name] = _parameters(found[0][1])
        assert not torch.equal(trained[name], start)
    assert not torch.equal(trained["coder"], trained["thinker"])
    assert not (tmp_path / "run" / "checkpoints").exists()
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert [m["step"] for m in metrics] == [1, 2]
    assert metrics[0]["policy/coder/samples"] > 0 and metrics[0]["policy/thinker/samples"] > 0
    assert 0.0 <= metrics[-1]["eval/accuracy"] <= 1.0 and metrics[-1]["eval/n"] == 2
    records = [json.loads(line) for line in (tmp_path / "run" / "records.jsonl").open()]
    assert len(records) == 4 and {r["workflow"] for r in records} == {"reasoner_tool"}

    # Resume to step 3: both policies continue from their own step-2 checkpoints.
    _train(config.model_copy(update={"steps": 3}), tmp_path / "run")
    for name in ("coder", "thinker"):
        steps = [step for step, _ in list_checkpoints(tmp_path / "run" / "policies" / name)]
        assert steps == [2, 3]
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert [m["step"] for m in metrics] == [1, 2, 3]


def test_one_shared_policy_uses_the_game_trainers_checkpoint_layout(tmp_path: Path) -> None:
    summary = _train(_config(steps=1, eval_every=0, save_every=1), tmp_path / "run")
    assert summary["policies"] == {"policy": ["tool", "reasoner"]}
    assert [step for step, _ in list_checkpoints(tmp_path / "run")] == [1]

    # The step's branches: K per (problem, role, call), one of them the main line's.
    lines = branch_log.read_step(tmp_path / "run", 1)
    groups = branch_log.groups_of(lines)
    assert groups and {line["role"] for line in lines} == {"tool", "reasoner"}
    for group in groups.values():
        assert len(group) == 2 and sum(bool(line["chosen"]) for line in group) == 1
        assert len({line["state"] for line in group}) == 1
        assert all(line["trained"] for line in group)  # an entropy term: every reply trains
        assert sum(line["advantage"] for line in group) == pytest.approx(0.0, abs=1e-9)
    (metrics,) = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert metrics["branches/groups"] == len(groups)


def test_a_role_the_workflow_lacks_or_a_missing_role_is_refused() -> None:
    with pytest.raises(MarsError, match="has no role judge"):
        _config(policies={"judge": "a"}).role_policies(("tool", "reasoner"))
    with pytest.raises(MarsError, match="no policy for role"):
        _config(policies={"tool": "a"}).role_policies(("tool", "reasoner"))


def _mars(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mars", *args], capture_output=True, text=True, check=False
    )


def test_the_command_resolves_one_policy_per_role_and_refuses_a_bad_map_in_one_line() -> None:
    done = _mars("train-mas", "--policies", "tool=coder,reasoner=thinker", "--steps", "3",
                 "--dry-run")  # fmt: skip
    assert done.returncode == 0, done.stderr
    config = json.loads(done.stdout)
    assert config["policies"] == {"tool": "coder", "reasoner": "thinker"}
    assert config["steps"] == 3 and config["workflow"] == "reasoner_tool"
    bad = _mars("train-mas", "--policies", "tool", "--dry-run")
    assert bad.returncode != 0
    assert "expected ROLE=NAME" in bad.stderr and "Traceback" not in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


def test_workflow_options_the_workflow_never_reads_are_refused_in_one_line(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("workflow_options:\n  rounds: 2\n  code_seconds: 5\n")
    good = _mars("train-mas", "--config", str(config), "--dry-run")
    assert good.returncode == 0, good.stderr
    assert json.loads(good.stdout)["workflow_options"] == {"rounds": 2, "code_seconds": 5}
    config.write_text("workflow_options:\n  rounds: 2\n  code_secs: 5\n")
    bad = _mars("train-mas", "--config", str(config), "--dry-run")
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "error: MAS 'reasoner_tool' has no option 'code_secs' (did you mean 'code_seconds'?); "
        "it reads code_runner, "
        "code_seconds, rounds"
    ]
