"""One verl job for every policy (train_backend/verl/policies.py): what the launcher tells it,
which policy updates when, how it is sized and where each policy's checkpoints go. No verl run
here (the real one is in tests/test_verl_mas_cpu.py)."""

from __future__ import annotations

import json
import random
from contextlib import contextmanager
from pathlib import Path

import pytest

from core.checkpoints import CHECKPOINT_FILE
from core.endpoint import EndpointConfig
from core.runstore import RunDir
from train_backend.mas.config import WorkflowTrainConfig
from train_backend.verl.checkpoints import LATEST_FILE, CheckpointPublisher, PolicyPublishers
from train_backend.verl.mas_job import runs_in_one_job, train_job
from train_backend.verl.overrides import RunPaths, verl_settings
from train_backend.verl.policy_sizing import policies_row
from train_backend.verl.policy_spec import (
    POLICIES_ENV,
    POLICY_FIELD,
    PoliciesSpec,
    PolicySpec,
    actor_folder,
    job_spec,
    name_servers_by_policy,
)
from train_backend.verl.preflight_rows import REFUSED, UNCHECKED, Machine

ROLES = {"tool": "coder", "reasoner": "thinker"}


def job_config(**changes: object) -> WorkflowTrainConfig:
    base = {"model": "start", "policies": ROLES, "steps": 4, "job_policies": ROLES}
    return WorkflowTrainConfig(**(base | changes))


def test_the_job_names_each_policy_its_roles_and_start_model() -> None:
    config = job_config(policy_models={"thinker": "other"}, phase_alternate_steps=2)
    spec = job_spec(config)
    assert spec == PoliciesSpec(
        (PolicySpec("coder", ("tool",), "start"), PolicySpec("thinker", ("reasoner",), "other")),
        2,
    )
    assert PoliciesSpec.from_json(spec.to_json()) == spec
    assert spec.role_policies() == ROLES
    # the first policy is verl's own actor; the others are saved beside it in the step folder
    assert (
        actor_folder(spec, "coder") == "actor" and actor_folder(spec, "thinker") == "actor_thinker"
    )
    assert job_spec(job_config(job_policies={})) is None


def test_turns_inside_the_job_are_the_cpu_trainers_turns() -> None:
    rng = random.Random(7)
    for _ in range(50):
        names = [f"p{index}" for index in range(rng.randint(2, 4))]
        every = rng.randint(0, 3)
        spec = PoliciesSpec(tuple(PolicySpec(n, (f"r{n}",), "m") for n in names), every)
        config = WorkflowTrainConfig(model="m", phase_alternate_steps=every)
        for step in range(1, 13):
            expected = [n for n in names if config.updates_at(n, names, step)]
            assert spec.updating(step) == expected


def test_the_workers_get_the_policies_and_gpus_share_rollout_memory(tmp_path: Path) -> None:
    paths = RunPaths(tmp_path / "run")
    cpu = verl_settings(job_config(verl={"device": "cpu"}), paths)
    assert cpu["trainer.v1.trainer_mode"] == "mars_policies"
    env = cpu["+ray_kwargs.ray_init.runtime_env.env_vars"]
    assert PoliciesSpec.from_json(env[POLICIES_ENV]).names == ["coder", "thinker"]
    assert "actor_rollout_ref.actor.fsdp_config.param_offload" not in cpu
    gpu = verl_settings(job_config(verl={"gpu_memory_utilization": 0.6}), paths)
    assert gpu["actor_rollout_ref.rollout.gpu_memory_utilization"] == 0.3
    assert gpu["actor_rollout_ref.actor.fsdp_config.param_offload"] is True
    assert gpu["actor_rollout_ref.actor.fsdp_config.optimizer_offload"] is True
    single = verl_settings(job_config(job_policies={}), paths)
    assert single["trainer.v1.trainer_mode"] == "mars"
    assert POLICIES_ENV not in single["+ray_kwargs.ray_init.runtime_env.env_vars"]


class Composed:
    """The few keys of verl's composed config the policies row reads."""

    def __init__(self, model: str, share: float, lora_rank: int = 0) -> None:
        model_keys = {"path": model, "lora_rank": lora_rank, "target_modules": "all-linear"}
        self.actor_rollout_ref = type(
            "ActorRolloutRef",
            (),
            {
                "model": _Keys(model_keys),
                "rollout": _Keys({"gpu_memory_utilization": share}),
            },
        )()


class _Keys(dict):
    def __getattr__(self, name: str) -> object:
        return self[name]


def qwen_like(tmp_path: Path, billions: float) -> Path:
    """A model folder whose config.json says about `billions` of parameters."""
    folder = tmp_path / "model"
    folder.mkdir(exist_ok=True)
    hidden = 4096
    layers = round(billions * 1e9 / (12 * hidden * hidden))
    (folder / "config.json").write_text(
        json.dumps(
            {
                "model_type": "qwen3",
                "hidden_size": hidden,
                "num_hidden_layers": layers,
                "intermediate_size": 4 * hidden,
                "num_attention_heads": 32,
                "num_key_value_heads": 32,
                "vocab_size": 32000,
                "dtype": "bfloat16",
                "max_position_embeddings": 32768,
            }
        )
    )
    return folder


@pytest.mark.parametrize(
    ("billions", "gpu_gb", "utilization", "verdict", "words"),
    [
        (1.7, 80, 0.6, "ok", "2 policies"),
        (8.0, 24, 0.6, REFUSED, "rollouts gets"),  # 7.2 GB each for 16 GB of weights
        (1.7, 80, 0.95, REFUSED, "optimiser state"),  # no room beside the rollouts
    ],
)
def test_the_preflight_sizes_the_policies_on_each_gpu(
    tmp_path: Path, billions: float, gpu_gb: int, utilization: float, verdict: str, words: str
) -> None:
    model = qwen_like(tmp_path, billions)
    config = job_config(model=str(model), verl={"gpu_memory_utilization": utilization})
    share = utilization / 2
    machine = Machine(gpu_memory=lambda: gpu_gb * 10**9)
    row = policies_row(config, Composed(str(model), share), machine)
    assert row is not None and row.verdict == verdict
    assert words in (row.note if verdict == REFUSED else row.found)
    # without a GPU here the sizes are shown, the memory not judged
    blind = policies_row(config, Composed(str(model), share), Machine(gpu_memory=lambda: None))
    assert blind is not None and blind.verdict == UNCHECKED and "not checked" in blind.note


def test_frozen_policies_are_served_beside_the_one_job(tmp_path: Path) -> None:
    config = WorkflowTrainConfig(
        model="start",
        workflow="ensemble_judge",
        policies={"reasoner": "r", "tool": "t", "judge": "j"},
        frozen_policies=["j"],
        policy_models={"j": "judge-model"},
    )
    assert runs_in_one_job(config)
    run = RunDir.resolve(out=None, run_dir=tmp_path / "run", kind="train", slug="mas")
    launched: list[WorkflowTrainConfig] = []
    served: list[str] = []

    @contextmanager
    def serve(*, model: str, **_: object):
        served.append(model)
        yield EndpointConfig(base_url="http://127.0.0.1:1/v1", model=model)

    train_job(
        config,
        run,
        dry_run=False,
        run_verl=lambda job, _run, dry_run: launched.append(job),
        serve=serve,
        log=lambda _: None,
    )
    assert served == ["judge-model"]
    (job,) = launched
    assert job.job_policies == {"reasoner": "r", "tool": "t"}
    assert set(job.frozen_partners) == {"judge"}
    apart = config.model_copy(update={"verl": config.verl.model_copy(update={"one_job": False})})
    assert not runs_in_one_job(apart)
    assert not runs_in_one_job(config.model_copy(update={"frozen_policies": ["j", "t"]}))


def test_each_policy_is_published_from_its_own_folder_of_each_step(tmp_path: Path) -> None:
    spec = job_spec(job_config())
    verl_checkpoints = tmp_path / "verl"
    for step in (1, 2):
        for name in spec.names:
            (verl_checkpoints / f"global_step_{step}" / actor_folder(spec, name)).mkdir(
                parents=True
            )
    (verl_checkpoints / LATEST_FILE).write_text("1")  # step 2 not whole yet
    merged: list[str] = []

    def runner(command: list[str], log: Path, env: dict[str, str]) -> int:
        actor, target = Path(command[command.index("--local_dir") + 1]), Path(command[-1])
        merged.append(f"{actor.parent.name}/{actor.name}")
        target.mkdir(parents=True)
        (target / "config.json").write_text("{}")
        return 0

    publishers = PolicyPublishers(
        {
            name: CheckpointPublisher(
                run_dir=tmp_path,
                verl_checkpoints=verl_checkpoints,
                checkpoints=tmp_path / "policies" / name / "checkpoints",
                logs=tmp_path / "logs" / name,
                runner=runner,
                actor=actor_folder(spec, name),
                details={"policy": name},
            )
            for name in spec.names
        }
    )
    assert publishers.publish_new() == [1]
    assert merged == ["global_step_1/actor", "global_step_1/actor_thinker"]
    for name in spec.names:
        record = tmp_path / "policies" / name / "checkpoints" / "step_1" / CHECKPOINT_FILE
        assert json.loads(record.read_text())["policy"] == name
    assert not publishers.failures and publishers.failure_report() == ""


def test_each_policys_rollout_servers_are_named_apart_on_both_sides() -> None:
    class Replica:  # the side that starts a server (verl's vLLMReplica)
        def __init__(self, custom: dict | None) -> None:
            self.config = type("RolloutConfig", (), {"custom": custom})()

        def _get_server_name_prefix(self) -> str:
            return "vllm_"

        def server(self, replica: int, node: int) -> str:
            return f"{self._get_server_name_prefix()}server_{replica}_{node}"

    class Worker(Replica):  # the side that finds it (verl's ServerAdapter): a dict config
        def __init__(self, custom: dict | None) -> None:
            self.config = {"name": "vllm", "custom": custom}

    for cls in (Replica, Worker):
        name_servers_by_policy(cls)
        name_servers_by_policy(cls)  # hooked once however often the module loads
    coder, thinker = {POLICY_FIELD: "coder"}, {POLICY_FIELD: "thinker"}
    assert Replica(coder).server(0, 0) == Worker(coder).server(0, 0) == "vllm_coder_server_0_0"
    assert Replica(thinker).server(0, 0) == "vllm_thinker_server_0_0"
    assert Replica(None).server(1, 0) == Worker(None).server(1, 0) == "vllm_server_1_0"
