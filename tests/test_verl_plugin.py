"""The verl plugin and the CPU device register our pieces when verl's modules load, and import
nothing before.

Each check runs in a fresh interpreter: what a process has imported is the point.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("verl", reason="verl backend not installed: make setup-verl")

PROBE = """
import json, sys
import verl  # verl loads the plugin through its entry point
ours = ("trainer", "estimators", "agent_loop", "workflow_loop")
def loaded():
    return [m for m in ours if f"train_backend.verl.{m}" in sys.modules]
report = {"plugin": "train_backend.verl.plugin" in sys.modules, "after_verl": loaded()}
from verl.experimental.agent_loop import agent_loop
from train_backend.verl import names
report["loops"] = {n: agent_loop._agent_loop_registry.get(n) for n in names.AGENT_LOOP_TARGETS}
report["after_agent_loop_registry"] = loaded()
from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY
ours_registered = set(names.VERL_ESTIMATOR_NAMES.values()) & set(ADV_ESTIMATOR_REGISTRY)
report["estimators"] = sorted(ours_registered)
from verl.trainer.ppo.v1 import get_trainer_cls
report["trainer"] = get_trainer_cls(names.TRAINER_NAME).__name__
from train_backend.verl.agent_loop import SelfPlayAgentLoop
from train_backend.verl.workflow_loop import WorkflowAgentLoop
report["classes"] = {
    names.AGENT_LOOP_NAME: f"{SelfPlayAgentLoop.__module__}.{SelfPlayAgentLoop.__qualname__}",
    names.WORKFLOW_LOOP_NAME: f"{WorkflowAgentLoop.__module__}.{WorkflowAgentLoop.__qualname__}",
}
print(json.dumps(report))
"""


def test_the_plugin_registers_each_piece_when_its_verl_registry_loads() -> None:
    from train_backend.verl import names

    result = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True
    )
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["plugin"] and report["after_verl"] == []  # loaded, and nothing of ours yet
    # The agent loops are registered by name: their modules load only where verl builds one.
    assert not {"agent_loop", "workflow_loop"} & set(report["after_agent_loop_registry"])
    expected_loops = {name: {"_target_": target} for name, target in report["classes"].items()}
    assert report["loops"] == expected_loops
    assert report["estimators"] == sorted(set(names.VERL_ESTIMATOR_NAMES.values()))
    assert report["trainer"] == "MarshalPPOTrainer"


CPU_PROBE = """
import json, sys
import verl  # verl imports the CPU device and the plugin from VERL_USE_EXTERNAL_MODULES
heavy = ("verl.workers.engine", "verl.workers.engine_workers", "train_backend.verl.cpu_rollout")
report = {"device": "train_backend.verl.cpu_device" in sys.modules}
report["after_verl"] = [m for m in heavy if m in sys.modules]
from verl.plugin.platform import get_platform
report["platform"] = get_platform().device_name
from verl.workers.engine import EngineRegistry
report["engine_devices"] = sorted(EngineRegistry._engines["language_model"]["fsdp2"])
import verl.workers.engine_workers as engine_workers
report["gloo"] = getattr(engine_workers.initialize_global_process_group_ray, "_mars_cpu", False)
from verl.workers.engine.fsdp import transformer_impl
report["offload"] = transformer_impl.CPUOffloadPolicy.__name__
from verl.workers.rollout.base import get_rollout_class
from verl.workers.rollout.replica import RolloutReplicaRegistry
report["rollout"] = get_rollout_class("mars_cpu", "async").__qualname__
report["replica"] = RolloutReplicaRegistry.get("mars_cpu").__qualname__
print(json.dumps(report))
"""


def test_the_cpu_device_adds_each_piece_when_its_verl_module_loads() -> None:
    """A `--device cpu` process that never builds an engine or a rollout (verl's storage units,
    load balancers, agent-loop workers) imports neither; one that does finds the CPU's."""
    env = dict(
        os.environ,
        VERL_PLATFORM="cpu",
        VERL_USE_EXTERNAL_MODULES="train_backend.verl.cpu_device,train_backend.verl.plugin",
    )
    result = subprocess.run(
        [sys.executable, "-c", CPU_PROBE], capture_output=True, text=True, env=env, check=True
    )
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["device"] and report["after_verl"] == []
    assert report["platform"] == "cpu"
    assert "cpu" in report["engine_devices"]
    assert report["gloo"] is True and report["offload"] == "UnpinnedCPUOffloadPolicy"
    assert (report["rollout"], report["replica"]) == ("CPURolloutAdapter", "CPURolloutReplica")
