"""Registers the MARSHAL pieces with verl; verl imports this module in each of its processes.

Two routes bring it there, both without patching verl: the `verl.plugins` entry point in
pyproject.toml (verl loads that group when it is imported), and `VERL_USE_EXTERNAL_MODULES`,
which the launcher sets for the driver and, through Ray's runtime environment, for every worker.
The second fails loudly if this import fails; entry points that fail are only logged by verl.

Importing this module costs nothing: each piece registers when verl's own registry module is
first imported in a process (import_hooks.py: a hook that runs right after that module's code),
so a process that never looks up a trainer, an estimator or an agent loop never imports ours.
Importing them all eagerly pulled verl's trainer and agent-loop stacks into every process (about
2.3 s each on a quiet machine; `bench/plugin_import.py`). The trainer registry needs the class
itself, so the trainer module is imported when `verl.trainer.ppo.v1` is; the agent-loop registry
holds only a `_target_` string, so the loops are registered by name and imported where verl
builds one.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

from train_backend.verl import names
from train_backend.verl.import_hooks import Hook, after_import
from train_backend.verl.policy_spec import POLICIES_ENV, name_servers_by_policy


def _register_trainer(_: ModuleType) -> None:
    importlib.import_module("train_backend.verl.trainer")  # @register_trainer on import
    if os.environ.get(POLICIES_ENV):  # a job with several policies (policies.py)
        importlib.import_module("train_backend.verl.policies")


def _register_estimators(_: ModuleType) -> None:
    importlib.import_module("train_backend.verl.estimators")  # registers on import


def _register_agent_loops(module: ModuleType) -> None:
    registry = module._agent_loop_registry  # what verl's @register fills: name -> {_target_}
    for name, target in names.AGENT_LOOP_TARGETS.items():
        registry.setdefault(name, {"_target_": target})


def _vllm_servers_by_policy(module: ModuleType) -> None:
    for name in ("ServerAdapter", "vLLMReplica"):  # the worker side, the replica side
        if hasattr(module, name):
            name_servers_by_policy(getattr(module, name))


# verl's registry module -> what registers our pieces in it; vLLM's rollout modules -> server
# names that tell policies apart (policy_spec.name_servers_by_policy)
HOOKS: dict[str, Hook] = {
    "verl.trainer.ppo.v1": _register_trainer,
    "verl.trainer.ppo.core_algos": _register_estimators,
    "verl.experimental.agent_loop.agent_loop": _register_agent_loops,
    "verl.workers.rollout.vllm_rollout.vllm_rollout": _vllm_servers_by_policy,
    "verl.workers.rollout.vllm_rollout.vllm_async_server": _vllm_servers_by_policy,
}


def install() -> None:
    """Hook the registry modules not imported yet; register at once in those already here."""
    for module_name, hook in HOOKS.items():
        after_import(module_name, hook)


install()
