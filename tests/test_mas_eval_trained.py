"""`mars eval --trained RUN`: the MAS a `mars train-mas` run trained, each role answered by its
own policy's checkpoint (each served by its own `transformers serve`), the run's workflow options.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import DATA_DIR, run_mars
from workflow_testkit import PER_ROLE, tiny_workflow_config, train_tiny_workflow

from core.causal_lm import resolve_model_path
from core.errors import MarsError
from core.fingerprints import model_fingerprint
from train_backend.mas.trained import trained_mas


@pytest.fixture(scope="module")
def per_role_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("trained") / "run"
    train_tiny_workflow(path, tiny_workflow_config(policies=PER_ROLE, eval_every=0, save_every=1))
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
    # The run's identity knows the reasoner's weights, not only their folder: retrained weights
    # at the same path are another model.
    assert recorded["identity"]["roles"] == {"reasoner": model_fingerprint(str(thinker))}
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


def test_the_loop_follows_every_policys_steps_and_keeps_per_role_curves(
    per_role_run: Path, tmp_path: Path
) -> None:
    loop = tmp_path / "loop"
    result = run_mars(
        "loop", "--watch", str(per_role_run), "--eval", "eval:gsm8k:reasoner_tool:2", "--once",
        "--baseline", str(resolve_model_path(None)),
        "--data-dir", str(DATA_DIR), "--max-tokens", "8", "--run-dir", str(loop), timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [json.loads(line) for line in (loop / "learning_curve.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [0, 1, 2]
    # Step 0: the starting model in every role, through the workflow as it was trained.
    start = rows[0]
    assert start["baseline"] is True and start["error"] is None, start["error"]
    entry = start["evals"]["eval-gsm8k-reasoner_tool"]
    sub_run = json.loads((loop / entry["run_dir"] / "run.json").read_text())
    assert sub_run["config"]["mas"] == "reasoner_tool" and "trained" not in sub_run["config"]
    assert sub_run["config"]["mas_config"] == {"rounds": 1, "code_seconds": 2.0}
    policies = per_role_run.resolve() / "policies"
    for row in rows[1:]:
        assert row["error"] is None, row["error"]
        step = f"step_{row['step']}"
        assert row["roles"] == {
            "tool": str(policies / "coder" / "checkpoints" / step),
            "reasoner": str(policies / "thinker" / "checkpoints" / step),
        }
        entry = row["evals"]["eval-gsm8k-reasoner_tool"]
        assert entry["n"] == 2 and 0.0 <= entry["accuracy"] <= 1.0
        sub_run = json.loads((loop / entry["run_dir"] / "run.json").read_text())
        assert sub_run["config"]["trained"]["step"] == row["step"]
    with (loop / "learning_curve.csv").open() as handle:
        header = handle.readline().strip().split(",")
    for column in ("train/return_mean/tool", "train/return_mean/reasoner"):
        assert column in header
    assert "train/policy/coder/loss" in header and "train/policy/thinker/loss" in header


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("arena:kuhn_poker:random:2", "evaluate it with eval:SUITE:reasoner_tool:N items"),
        ("eval:gsm8k:mad:2", "trained the MAS 'reasoner_tool': the eval item"),
    ],
)
def test_the_loop_refuses_what_a_mas_run_cannot_be_evaluated_with(
    per_role_run: Path, tmp_path: Path, item: str, message: str
) -> None:
    result = run_mars(
        "loop", "--watch", str(per_role_run), "--eval", item, "--once",
        "--run-dir", str(tmp_path / "loop"),
    )  # fmt: skip
    assert result.returncode != 0
    assert message in result.stderr and "Traceback" not in result.stderr


def test_a_run_with_a_frozen_partner_maps_its_roles_to_the_model_it_played_with(
    tmp_path: Path,
) -> None:
    run, partner = tmp_path / "run", tmp_path / "thinker-start"
    partner.mkdir()
    config = {
        "workflow": "reasoner_tool",
        "policies": {"tool": "coder", "reasoner": "thinker"},
        "frozen_policies": ["thinker"],
        "policy_models": {"thinker": str(partner)},
    }
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"kind": "train", "config": config}))
    for step in (1, 2):
        folder = run / "policies" / "coder" / "checkpoints" / f"step_{step}"
        folder.mkdir(parents=True)
        (folder / "checkpoint.json").write_text(json.dumps({"step": step}))
    trained = trained_mas(run)
    assert trained.step == 2
    assert trained.role_models == {
        "tool": run / "policies" / "coder" / "checkpoints" / "step_2",
        "reasoner": partner,  # the frozen partner answers from the model it played with
    }
    assert trained_mas(run, 1).role_models["reasoner"] == partner
