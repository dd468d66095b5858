"""LoRA adapters on verl without a launch: the overrides composed with verl's own config, what
is refused before Ray starts, the preflight's LoRA rows, the weights the CPU rollout takes, and
the adapter published from a verl save (the real CPU runs are in tests/test_verl_mas_cpu.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from model_testkit import QWEN3_4B

from core.checkpoints import ADAPTER_CONFIG_FILE, ADAPTER_WEIGHTS_FILE
from core.errors import MarsError
from train_backend.config import VerlSettings
from train_backend.mas.config import WorkflowTrainConfig
from train_backend.verl.adapter_export import adapter_target, export_adapter
from train_backend.verl.model_files import lora_parameters
from train_backend.verl.overrides import RunPaths, verl_overrides, verl_settings
from train_backend.verl.preflight_rows import Machine
from train_backend.verl.rollout_weights import load_adapter_weights, load_base_weights

pytest.importorskip("verl", reason="verl is not installed (make setup-verl)")

NO_CUDA = Machine(cuda=lambda: False, disk_free=lambda _: 10**15)


def workflow_config(**changes: object) -> WorkflowTrainConfig:
    values: dict[str, object] = {
        "model": "Qwen/Qwen3-4B",
        "adapter": "lora",
        "problems_per_step": 8,
        "max_new_tokens": 1024,
        "max_game_tokens": 4096,
        "verl": VerlSettings(n_gpus_per_node=8),
    }
    return WorkflowTrainConfig(**(values | changes))


def composed(config: WorkflowTrainConfig, tmp_path: Path):
    from train_backend.verl.compose import compose_verl_config

    return compose_verl_config(verl_overrides(config, RunPaths(tmp_path)))


# ---- overrides ------------------------------------------------------------------------------


def test_an_adapter_run_sets_verls_lora_and_the_rollout_gets_the_adapter_alone(tmp_path):
    config = composed(workflow_config(adapter={"rank": 32, "alpha": 64}), tmp_path)
    model, rollout = config.actor_rollout_ref.model, config.actor_rollout_ref.rollout
    assert (model.lora_rank, model.lora_alpha, model.target_modules) == (32, 64, "all-linear")
    # the rollout loads the base from the model's files, so only the adapter is synced, one
    # FSDP unit at a time; verl's saves keep the adapter and its optimizer state alone
    assert (rollout.load_format, rollout.layered_summon) == ("safetensors", True)
    assert config.actor_rollout_ref.actor.checkpoint.save_lora_only is True
    whole = composed(workflow_config(adapter=None), tmp_path)
    assert whole.actor_rollout_ref.model.lora_rank == 0
    assert whole.actor_rollout_ref.rollout.load_format == "dummy"
    assert "save_lora_only" not in whole.actor_rollout_ref.actor.checkpoint


def test_the_cpu_device_does_not_summon_layer_by_layer_and_lists_modules_pass_through(tmp_path):
    settings = verl_settings(
        workflow_config(
            adapter={"target_modules": ["q_proj", "v_proj"]}, verl=VerlSettings(device="cpu")
        ),
        RunPaths(tmp_path),
    )
    assert settings["actor_rollout_ref.rollout.layered_summon"] is False
    assert settings["actor_rollout_ref.model.target_modules"] == ["q_proj", "v_proj"]
    assert "actor_rollout_ref.model.target_modules=[q_proj,v_proj]" in verl_overrides(
        workflow_config(adapter={"target_modules": ["q_proj", "v_proj"]}), RunPaths(tmp_path)
    )


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"adapter": {"dropout": 0.05}}, r"adapter\.dropout 0\.05 on verl: .*without dropout"),
        ({"adapter": {"alpha": 16.5}}, r"adapter\.alpha 16\.5 on verl: .*integer lora_alpha"),
        (
            {"role_sampling": {"tool": {"stop": ["```"]}}},
            r"role_sampling: stop \(tool\) is not supported on verl",
        ),
    ],
)
def test_what_verl_cannot_run_is_refused_in_one_line(tmp_path, changes, expected):
    with pytest.raises(MarsError, match=expected) as refused:
        verl_settings(workflow_config(**changes), RunPaths(tmp_path))
    assert "\n" not in str(refused.value)


def test_a_roles_own_sampling_reaches_its_requests_and_sizes_verls_sequences(tmp_path):
    from train_backend.verl.data import workflow_rows
    from train_backend.verl.workflow_loop import role_params

    config = workflow_config(
        role_sampling={"reasoner": {"max_new_tokens": 3000, "top_k": 20, "temperature": 0.6}},
        estimator="at_grpo",  # as train-mas sets it: every sample is a branch, a turn
        steps=1,
    )
    settings = verl_settings(config, RunPaths(tmp_path))
    assert settings["data.max_response_length"] == 3000  # a turn sample: the longest reply
    assert settings["actor_rollout_ref.rollout.max_model_len"] == 4096 + 3000
    # each row carries the roles' own settings; the loop puts them in that role's requests
    own = json.loads(workflow_rows(config)[0]["role_sampling"])
    assert own == {"reasoner": {"max_new_tokens": 3000, "top_k": 20, "temperature": 0.6}}
    run = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_tokens": 1024, "logprobs": False}
    assert role_params(run, own["reasoner"]) == run | {
        "max_tokens": 3000, "top_k": 20, "temperature": 0.6,
    }  # fmt: skip
    assert role_params(run, own.get("tool")) == run
    assert role_params(run, {"top_k": 0})["top_k"] == -1  # ours: 0 = off; verl's servers: -1


# ---- the preflight ---------------------------------------------------------------------------


def test_the_preflight_shows_vllms_lora_rank_and_refuses_what_vllm_or_verl_would(tmp_path):
    from train_backend.verl import launch

    table = launch.preflight(workflow_config(), dry_run=True, machine=NO_CUDA).table()
    assert "lora" in table and "rank 16, alpha 32" in table and "vLLM max_lora_rank 16" in table
    with pytest.raises(MarsError, match=r"adapter\.rank 1024 is above vLLM's largest .*512"):
        launch.preflight(workflow_config(adapter={"rank": 1024}), dry_run=True, machine=NO_CUDA)
    dummy = VerlSettings(
        n_gpus_per_node=8, extra_overrides=["actor_rollout_ref.rollout.load_format=dummy"]
    )
    with pytest.raises(MarsError, match=r"layered_summon needs the base model loaded"):
        launch.preflight(workflow_config(verl=dummy), dry_run=True, machine=NO_CUDA)


def test_an_adapter_save_is_counted_from_the_models_config(tmp_path):
    from train_backend.verl.model_files import read_model_config
    from train_backend.verl.preflight import lora_disk_row

    # Qwen3-4B, rank 16 on every linear layer of its 36 blocks (PEFT prints the same count)
    assert lora_parameters(QWEN3_4B, 16, "all-linear") == 33_030_144
    assert lora_parameters(QWEN3_4B, 16, ["q_proj"]) == 36 * 16 * (2560 + 4096)
    folder = tmp_path / "qwen3-4b"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(QWEN3_4B))
    settings = {"lora_rank": 16, "target_modules": "all-linear"}

    class Lora(dict):
        lora_rank = 16

    small = Machine(cuda=lambda: False, disk_free=lambda _: 10**9)  # 1 GB: two saves need 1.06
    row = lora_disk_row(
        str(folder), read_model_config(str(folder)), Lora(settings), tmp_path, small
    )
    assert row.verdict == "refused" and "528.5 MB" in row.found


# ---- the CPU rollout's weights -----------------------------------------------------------------


def tiny_lora_pair():
    """A base model and a LoRA-wrapped copy whose adapter is not zero."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from core.tiny_model import ensure_tiny_model

    folder = ensure_tiny_model()
    trained = get_peft_model(
        AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32),
        LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", task_type="CAUSAL_LM"),
    )
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in trained.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.5)
    trained.eval()
    base = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    return folder, base, trained


def logits(model, ids=((1, 5, 9, 13, 2),)) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=torch.tensor(ids)).logits


def test_the_cpu_rollout_runs_the_adapter_verl_sends_on_its_base():
    from peft import get_peft_model_state_dict

    _, base, trained = tiny_lora_pair()
    # what verl's FSDP engine sends (get_per_tensor_param, base_sync_done=True)
    weights = dict(get_peft_model_state_dict(trained))
    peft_config = trained.peft_config["default"].to_dict()
    assert not torch.allclose(logits(base), logits(trained))
    model = load_adapter_weights(base, weights, peft_config)
    assert torch.allclose(logits(model), logits(trained), atol=1e-5)
    # the next step's adapter replaces it in place: no second wrapping
    zeroed = {k: torch.zeros_like(v) if "lora_B" in k else v for k, v in weights.items()}
    again = load_adapter_weights(model, zeroed, peft_config)
    assert again is model
    with again.disable_adapter():
        plain = logits(again)
    assert torch.allclose(logits(again), plain, atol=1e-6)


def test_the_base_weights_reach_a_wrapped_rollout_under_verls_lora_names():
    from peft import get_peft_model_state_dict

    _, base, trained = tiny_lora_pair()
    model = load_adapter_weights(
        base, dict(get_peft_model_state_dict(trained)), trained.peft_config["default"].to_dict()
    )
    state = model.get_base_model().state_dict()
    wrapped = [n for n in state if "proj.base_layer" in n][:2]
    # verl's base sync names a LoRA target `...q_proj.base_layer.weight`; a merged sync, plain
    sent = {
        wrapped[0]: torch.zeros_like(state[wrapped[0]]),
        wrapped[1].replace(".base_layer", ""): torch.full_like(state[wrapped[1]], 0.5),
    }
    load_base_weights(model, sent)
    state = model.get_base_model().state_dict()
    assert state[wrapped[0]].abs().sum() == 0 and torch.all(state[wrapped[1]] == 0.5)
    with pytest.raises(KeyError, match="no parameter"):
        load_base_weights(model, {"model.no_such.weight": torch.zeros(1)})


# ---- the published adapter ----------------------------------------------------------------------


def test_a_verl_lora_save_is_published_as_an_adapter_peft_and_mars_load(tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from core.checkpoints import CHECKPOINT_FILE
    from train_backend.local.adapters import load_merged

    folder, _, trained = tiny_lora_pair()
    actor = tmp_path / "global_step_1" / "actor"
    (actor / "huggingface").mkdir(parents=True)
    # verl's save_lora_only shard (world size 1: whole tensors) and its metadata
    lora = {k: v.clone() for k, v in trained.state_dict().items() if "lora_" in k}
    assert all(".default." in k for k in lora)
    torch.save(lora, actor / "model_world_size_1_rank_0.pt")
    (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": 1}))
    (actor / "lora_train_meta.json").write_text(json.dumps({"r": 4, "lora_alpha": 8}))
    for name in ("tokenizer.json", "tokenizer_config.json", "config.json"):
        (actor / "huggingface" / name).write_bytes((folder / name).read_bytes())
    template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    (actor / "huggingface" / "chat_template.jinja").write_text(template)
    target = tmp_path / "step_1"
    export_adapter(actor, target, str(folder))
    assert (target / ADAPTER_WEIGHTS_FILE).is_file() and (target / "tokenizer.json").is_file()
    assert not (target / "config.json").exists()  # not a whole model
    config = json.loads((target / ADAPTER_CONFIG_FILE).read_text())
    assert (config["r"], config["lora_alpha"], config["base_model_name_or_path"]) == (
        4, 8, str(folder),
    )  # fmt: skip
    loaded = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(folder), str(target))
    assert torch.allclose(logits(loaded.eval()), logits(trained), atol=1e-5)
    (target / CHECKPOINT_FILE).write_text(
        json.dumps({"adapter": {"name": "p", "base": str(folder)}})
    )
    assert torch.allclose(logits(load_merged(target).model), logits(trained), atol=1e-4)


def test_the_adapter_is_named_after_the_policy_the_run_trains():
    shared = workflow_config()
    assert adapter_target(shared).name == "policy"
    phase = workflow_config(
        policies={"tool": "coder", "reasoner": "thinker"},
        frozen_partners={"reasoner": {"base_url": "http://127.0.0.1:1/v1", "model": "m"}},
    )
    target = adapter_target(phase)
    assert (target.name, target.base) == ("coder", "Qwen/Qwen3-4B")
    assert adapter_target(workflow_config(adapter=None)) is None
