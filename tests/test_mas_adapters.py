"""One policy per role at a cluster's cost, on the CPU trainer: LoRA adapters on one base, frozen
partners, alternating updates and per-role generation settings (docs/mas_training.md)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from workflow_testkit import PER_ROLE, tiny_workflow_config, train_tiny_workflow

from core import branch_log
from core.causal_lm import load_policy, resolve_model_path
from core.checkpoints import ADAPTER_CONFIG_FILE, ADAPTER_WEIGHTS_FILE, adapter_info
from core.errors import MarsError
from core.fingerprints import model_fingerprint
from core.runstore import RunDir
from train_backend.local.adapters import BaseModel, load_merged
from train_backend.local.checkpoint import list_checkpoints
from train_backend.mas import trainer as workflow_trainer
from train_backend.mas.config import RoleSampling, WorkflowTrainConfig
from train_backend.mas.role_models import cut_at_stop, role_generation
from train_backend.mas.trainer import WorkflowTrainer


def _lora_state(model: Any) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if ".lora_" in n}


def _changed_adapters(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor]) -> set:
    """The adapters (names) whose LoRA weights differ between two snapshots."""
    moved = [name for name in before if not torch.equal(before[name], after[name])]
    return {name.split(".lora_")[1].split(".")[1] for name in moved}


def _metrics(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "metrics.jsonl").open()]


def test_lora_per_role_trains_each_adapter_on_one_base_and_saves_only_the_adapters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    updates: list[tuple[str, set, Any]] = []
    real_update = workflow_trainer.update_policy

    def spying_update(config, policy, reference, optimizer, samples, advantages, step):
        before = _lora_state(policy.model)
        stats = real_update(config, policy, reference, optimizer, samples, advantages, step)
        changed = _changed_adapters(before, _lora_state(policy.model))
        updates.append((policy.adapter, changed, reference))
        return stats

    monkeypatch.setattr(workflow_trainer, "update_policy", spying_update)
    config = tiny_workflow_config(policies=PER_ROLE, adapter="lora", kl_coef=0.05)
    run = tmp_path / "run"
    summary = train_tiny_workflow(run, config)

    # Each update changed its own adapter and no other; the reference is the bare base.
    assert {adapter for adapter, _, _ in updates} == {"coder", "thinker"}
    for adapter, changed, reference in updates:
        assert changed == {adapter}
        assert isinstance(reference, BaseModel)
    base_path = resolve_model_path(None)
    base = load_policy(base_path)
    prompt = torch.tensor([base.encode_chat([{"role": "user", "content": "What is 2 + 3?"}])])
    bare = base.model(input_ids=prompt).logits
    reference = updates[-1][2]
    assert torch.allclose(reference(input_ids=prompt).logits, bare, atol=1e-5)

    # Only adapters are saved, each naming the base and its fingerprint, and they differ.
    merged = {}
    for name in ("coder", "thinker"):
        ((step, folder),) = list_checkpoints(run / "policies" / name)
        assert step == 2
        assert (folder / ADAPTER_CONFIG_FILE).is_file() and (
            folder / ADAPTER_WEIGHTS_FILE
        ).is_file()
        assert not (folder / "model.safetensors").exists()
        info = adapter_info(folder)
        assert info is not None and info.name == name
        assert Path(info.base) == Path(base_path).resolve()
        assert info.base_fingerprint == model_fingerprint(info.base)
        merged[name] = load_merged(folder).model(input_ids=prompt).logits
        assert not torch.allclose(merged[name], bare, atol=1e-4)
    assert not torch.allclose(merged["coder"], merged["thinker"], atol=1e-4)
    full = sum(p.numel() for p in base.model.parameters())
    assert 0 < summary["trainable_parameters"]["coder"] < full / 2

    # Resume: both adapters continue from their step-2 checkpoints.
    train_tiny_workflow(run, config.model_copy(update={"steps": 3}))
    for name in ("coder", "thinker"):
        assert [s for s, _ in list_checkpoints(run / "policies" / name)] == [2, 3]
    assert [m["step"] for m in _metrics(run)] == [1, 2, 3]


def test_a_frozen_partner_plays_but_gets_no_samples_no_advantage_and_no_update(
    tmp_path: Path,
) -> None:
    config = tiny_workflow_config(policies=PER_ROLE, frozen_policies=["thinker"])
    run_dir = RunDir.resolve(out=None, run_dir=tmp_path / "run", kind="train", slug="mas")
    trainer = WorkflowTrainer(config, run_dir, log=lambda _: None)
    trainer.load()
    frozen = trainer.slots["thinker"]
    before = [p.detach().clone() for p in frozen.policy.model.parameters()]
    trainer.train()

    assert frozen.frozen and frozen.optimizer is None
    assert all(
        torch.equal(a, b) for a, b in zip(before, frozen.policy.model.parameters(), strict=True)
    )
    for step in (1, 2):
        lines = branch_log.read_step(tmp_path / "run", step)
        assert lines and {line["role"] for line in lines} == {"tool"}
    records = [json.loads(line) for line in (tmp_path / "run" / "records.jsonl").open()]
    calls = [m for r in records for m in r["transcript"]["messages"] if m.get("agent")]
    assert {m["agent"] for m in calls} == {"tool", "reasoner"}  # the partner did play
    for metrics in _metrics(tmp_path / "run"):
        assert metrics["policy/coder/samples"] > 0
        assert not any(key.startswith("policy/thinker/") for key in metrics)
    assert list_checkpoints(tmp_path / "run" / "policies" / "thinker") == []
    assert [s for s, _ in list_checkpoints(tmp_path / "run" / "policies" / "coder")] == [2]


def test_phase_alternate_steps_updates_the_policies_in_turn(tmp_path: Path) -> None:
    config = tiny_workflow_config(policies=PER_ROLE, phase_alternate_steps=1, steps=3)
    train_tiny_workflow(tmp_path / "run", config)
    updated = [
        {key.split("/")[1] for key in m if key.startswith("policy/")}
        for m in _metrics(tmp_path / "run")
    ]
    assert updated == [{"coder"}, {"thinker"}, {"coder"}]
    roles = [{line["role"] for line in branch_log.read_step(tmp_path / "run", s)} for s in (1, 2)]
    assert roles == [{"tool"}, {"reasoner"}]
    # every policy saves at a save step, updated there or not, so a resume finds one step
    for name in ("coder", "thinker"):
        assert [s for s, _ in list_checkpoints(tmp_path / "run" / "policies" / name)] == [2, 3]


def test_per_role_generation_settings_in_training_and_apart_in_evaluation(tmp_path: Path) -> None:
    config = tiny_workflow_config(
        role_sampling={"reasoner": RoleSampling(max_new_tokens=2, temperature=0.5)},
        eval_role_sampling={"reasoner": RoleSampling(temperature=0.0)},
        max_new_tokens=6,
    )
    train = role_generation(config, "reasoner")
    assert (train.sampling.temperature, train.max_new_tokens) == (0.5, 2)
    assert role_generation(config, "tool").sampling.temperature == 1.0
    evaluation = role_generation(config, "reasoner", evaluation=True)
    assert (evaluation.sampling.temperature, evaluation.max_new_tokens) == (0.0, 6)

    train_tiny_workflow(tmp_path / "run", config.model_copy(update={"steps": 1}))
    lines = branch_log.read_step(tmp_path / "run", 1)
    reasoner = [line for line in lines if line["role"] == "reasoner"]
    tool = [line for line in lines if line["role"] == "tool"]
    policy = load_policy(resolve_model_path(None))
    assert reasoner and all(len(policy.tokenizer(l["reply"])["input_ids"]) <= 3 for l in reasoner)  # noqa: E741
    assert any(len(policy.tokenizer(line["reply"])["input_ids"]) > 3 for line in tool)


def test_a_stop_string_cuts_the_reply_after_it() -> None:
    policy = load_policy(resolve_model_path(None))
    ids = policy.tokenizer("answer = 7\nprint(answer)\nmore", add_special_tokens=False)["input_ids"]
    cut = cut_at_stop(policy, ids, ["print("])
    assert policy.decode(cut).endswith("print(") or "print(" in policy.decode(cut)
    assert "more" not in policy.decode(cut)
    assert cut_at_stop(policy, ids, ["absent"]) == ids


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"adapter": "lorax"}, "unknown adapter 'lorax' (did you mean 'lora'?)"),
        ({"policies": PER_ROLE, "frozen_policies": ["coder", "thinker"]}, "nothing would train"),
        ({"policies": PER_ROLE, "frozen_policies": ["critic"]}, "unknown policies: critic"),
        (
            {"policies": PER_ROLE, "adapter": "lora", "policy_models": {"coder": "/m"}},
            "every adapter sits on the one base",
        ),
    ],
)
def test_impossible_adapter_and_frozen_settings_are_refused(settings: dict, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        WorkflowTrainConfig(**settings)


def test_role_sampling_for_a_role_the_workflow_lacks_is_refused() -> None:
    config = tiny_workflow_config(role_sampling={"judge": RoleSampling(temperature=0.1)})
    with pytest.raises(MarsError, match="role_sampling: workflow reasoner_tool has no role judge"):
        config.role_policies(("tool", "reasoner"))
