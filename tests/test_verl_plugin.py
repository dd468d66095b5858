"""The verl plugin registers our pieces when verl's registries load, and imports nothing before.

Each check runs in a fresh interpreter: what a process has imported is the point.
"""

from __future__ import annotations

import json
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
