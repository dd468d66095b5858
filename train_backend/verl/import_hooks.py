"""Run code right after a verl module's own code, in whichever process first imports it.

verl imports our modules (the plugin, the CPU device) in every process it starts: its driver,
task runner, trainer workers, rollout servers, load balancers, storage units and agent-loop
workers. Most of those never build an engine, look up an estimator or run an agent loop, so what
we register in those registries waits for the registry's own module: a hook added here runs once
that module has been imported (at once if it already has been), and a process that never
imports the module never pays for ours.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable, Sequence
from types import ModuleType

Hook = Callable[[ModuleType], None]

_HOOKS: dict[str, list[Hook]] = {}


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds a hooked module with the finders after it and runs its hooks once its code has
    run."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _HOOKS:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                _run_hooks_after(spec.loader, fullname)
                return spec
        return None


def _run_hooks_after(loader: importlib.abc.Loader, fullname: str) -> None:
    run = loader.exec_module

    def exec_module(module: ModuleType) -> None:
        run(module)
        for hook in _HOOKS.get(fullname, ()):
            hook(module)

    loader.exec_module = exec_module  # type: ignore[method-assign]


def after_import(module_name: str, hook: Hook) -> None:
    """Run `hook(module)` once `module_name` has been imported: now if it is already, else right
    after its code runs. A hook must be safe to run twice (a module imported again after being
    dropped from `sys.modules` runs its hooks again)."""
    if not any(isinstance(finder, _AfterImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport())
    hooks = _HOOKS.setdefault(module_name, [])
    if hook not in hooks:
        hooks.append(hook)
    module = sys.modules.get(module_name)
    if module is not None:
        hook(module)
