"""`mars eval --trained RUN`: the MAS a `mars train-mas` run trained, each role answered by its
own policy's checkpoint (each served by its own `transformers serve`), the run's workflow options.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import DATA_DIR, run_mars

from harness.errors import MarsError
from harness.runstore import RunDir
from harness.servers import model_fingerprint
from train_backend.mas import trainer as workflow_trainer
from train_backend.mas.config import WorkflowTrainConfig
from train_backend.mas.trained import trained_mas


@pytest.fixture(scope="module")
def per_role_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("trained") / "run"
    config = WorkflowTrainConfig(
        workflow_options={"rounds": 1, "code_seconds": 2.0},
        policies={"tool": "coder", "reasoner": "thinker"},
        problems_per_step=2,
        branches=2,
        steps=2,
        eval_every=0,
        save_every=1,
        learning_rate=1e-3,
        warmup_steps=0,
        entropy_coef=0.05,
        temperature=1.0,
        max_new_tokens=6,
        prompt_style="compact",
    )
    run = RunDir.resolve(out=None, run_dir=path, kind="train", slug="mas")
    workflow_trainer.train_workflow(config, run, command=["test"], log=lambda _: None)
    return path


def test_each_role_maps_to_its_own_policys_checkpoint_of_the_step(per_role_run: Path) -> None:
    last = trained_mas(per_role_run)
    assert last.workflow == "reasoner_tool" and last.step == 2
    assert last.workflow_options == {"rounds": 1, "code_seconds": 2.0}
    policies = per_role_run / "policies"
    assert last.role_models == {
        "tool": policies / "coder" / "checkpoints" / "step_2",
        "reasoner": policies / "thinker" / "checkpoints" / "step_2",
    }
    assert trained_mas(per_role_run, 1).role_models["tool"].name == "step_1"
    with pytest.raises(MarsError, match="steps: 1, 2"):
        trained_mas(per_role_run, 5)


def test_what_is_not_a_mas_training_run_is_refused_in_one_line(
    per_role_run: Path, tmp_path: Path
) -> None:
    with pytest.raises(MarsError, match=r"no run\.json"):
        trained_mas(tmp_path)
    game_run = tmp_path / "game"
    game_run.mkdir()
    (game_run / "run.json").write_text(json.dumps({"kind": "train", "config": {"games": ["x"]}}))
    with pytest.raises(MarsError, match="not a MAS training run"):
        trained_mas(game_run)
    result = run_mars("eval", "--suite", "gsm8k", "--trained", str(per_role_run), "--mas", "mad")
    assert result.returncode != 0
    assert "trained the MAS 'reasoner_tool', not 'mad'" in result.stderr
    assert "Traceback" not in result.stderr


def test_eval_serves_each_roles_checkpoint_and_records_which(
    per_role_run: Path, tmp_path: Path
) -> None:
    out = tmp_path / "eval"
    result = run_mars(
        "eval", "--suite", "gsm8k", "--limit", "2", "--data-dir", str(DATA_DIR),
        "--trained", str(per_role_run), "--trained-step", "1", "--max-tokens", "8",
        "--run-dir", str(out), "--quiet", timeout=600,
    )  # fmt: skip
    assert result.returncode in (0, 4), result.stderr[-3000:]  # 4: nothing scored right
    recorded = json.loads((out / "run.json").read_text())
    config = recorded["config"]
    assert config["mas"] == "reasoner_tool"
    assert config["mas_config"] == {"rounds": 1, "code_seconds": 2.0}
    assert config["trained"]["step"] == 1
    assert config["trained"]["policies"] == {"tool": "coder", "reasoner": "thinker"}
    checkpoints = per_role_run.resolve() / "policies"
    thinker = checkpoints / "thinker" / "checkpoints" / "step_1"
    coder = checkpoints / "coder" / "checkpoints" / "step_1"
    assert config["roles"] == {
        "reasoner": {"model": str(thinker), "fingerprint": model_fingerprint(str(thinker))}
    }
    assert recorded["endpoint"]["model_identity"] == model_fingerprint(str(coder))
    assert model_fingerprint(str(coder)) != model_fingerprint(str(thinker))
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert len(records) == 2
    for record in records:
        agents = [message["agent"] for message in record["transcript"]["messages"]]
        assert agents[:2] == ["tool", "reasoner"]
    usage = json.loads((out / "usage.json").read_text())
    # The reasoner's calls went to the thinker's server, the tool's to the default (the coder's).
    assert usage["role:reasoner"]["calls"] == 2
    assert usage["by_role"]["tool"]["calls"] == 2
    assert "reasoner" not in usage["by_role"]
