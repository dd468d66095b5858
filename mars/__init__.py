"""mars-harness as a library: `import mars; result = mars.evaluate(suites="gsm8k", ...)`.

Each function takes one typed plan, or the keyword arguments that build it, runs it as the
command of the same name would, and returns its result (docs/python-api.md). Names are imported
on first use, so `import mars` (and the `mars` command's start) stays light.
"""

from __future__ import annotations

import importlib
from typing import Any

# name -> the module that defines it
_API: dict[str, str] = {
    "evaluate": "mars.api.evaluate",
    "EvalPlan": "mars.api.evaluate",
    "arena": "mars.api.arena",
    "ArenaPlan": "mars.api.arena",
    "selfplay": "mars.api.selfplay",
    "SelfplayPlan": "mars.api.selfplay",
    "exploitability": "mars.api.exploitability",
    "ExploitabilityPlan": "mars.api.exploitability",
    "train": "mars.api.train",
    "TrainPlan": "mars.api.train",
    "train_mas": "mars.api.train_mas",
    "TrainMasPlan": "mars.api.train_mas",
    "report": "mars.api.report",
    "failures": "mars.api.failures",
    "FailuresPlan": "mars.api.failures",
    "compare_failures": "mars.api.failures",
    "ratings": "mars.api.ratings",
    "loop": "mars.orchestration.loop.api",
    "LoopPlan": "mars.orchestration.loop.api",
    "experiment": "mars.orchestration.experiments.api",
    "ExperimentPlan": "mars.orchestration.experiments.api",
    "open_run": "mars.api.results",
    "RunResult": "mars.api.results",
    "Figure": "mars.api.results",
    "MarsError": "core.errors",
}

__all__ = sorted(_API)


def __getattr__(name: str) -> Any:
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'mars' has no attribute {name!r}")
    if name == "report":  # an experiment folder's report is registered by the experiments
        importlib.import_module("mars.orchestration.experiments")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_API])
