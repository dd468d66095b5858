"""Registers the MARSHAL pieces with verl; verl imports this module in each of its processes.

Two routes bring it there, both without patching verl: the `verl.plugins` entry point in
pyproject.toml (verl loads that group when it is imported), and `VERL_USE_EXTERNAL_MODULES`,
which the launcher sets for the driver and, through Ray's runtime environment, for every worker.
The second fails loudly if this import fails; entry points that fail are only logged by verl.
"""

from train_backend.verl import agent_loop, estimators, trainer, workflow_loop

__all__ = ["agent_loop", "estimators", "trainer", "workflow_loop"]
