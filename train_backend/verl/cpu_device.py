"""A CPU device for verl 0.9.1: its own trainer, FSDP2 on gloo, and a transformers rollout.

Loaded only with `mars train --trainer verl --device cpu` (`verl: {device: cpu}`): the launcher
puts this module first in `VERL_USE_EXTERNAL_MODULES` and sets `VERL_PLATFORM=cpu`, so every verl
process imports it before anything asks verl for its platform. What it adds:

- a `cpu` platform (verl's public `PlatformRegistry`): torch's CPU, gloo, and Ray's logical
  "GPU" resource as the device (verl's resource pools always ask for GPUs; the launcher gives
  the local Ray cluster as many logical GPUs as `n_gpus_per_node`);
- verl's FSDP/FSDP2 language-model engine registered for the `cpu` device (public
  `EngineRegistry`);
- a rollout named `mars_cpu` (public `RolloutReplicaRegistry`), which lives in cpu_rollout.py:
  one Ray actor per replica holds the model with transformers and serves verl's agent loop.

verl has no public hook for three things (and its engine table is read to register only once);
each hook below names the verl file it depends on, which is why the CPU device needs verl
exactly 0.9.1 (`names.VERL_VERSION`: it refuses to load on another release, and a test checks).

Importing this module registers the platform at once and nothing else: each of the rest is added
when its verl module first loads in a process (import_hooks.py). Most of verl's processes (its
storage units, load balancers, agent-loop workers, the rollout servers) never load the training
engine, which cost each of them about 3.3 s here when it was imported eagerly
(`bench/plugin_import.py`).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import types
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import torch
import torch.distributed
from verl.plugin.platform import PlatformBase, PlatformRegistry

from train_backend.verl import names
from train_backend.verl.import_hooks import Hook, after_import

PLATFORM = "cpu"
GLOO = "cpu:gloo"
ROLLOUT_MODULE = "train_backend.verl.cpu_rollout"  # imported only where verl reaches a rollout


def _no_op(*_: Any, **__: Any) -> None:
    return None


def _zero(*_: Any, **__: Any) -> int:
    return 0


def _memory_info(*_: Any, **__: Any) -> tuple[int, int]:
    pages, page_size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    free = os.sysconf("SC_AVPHYS_PAGES") * page_size
    return free, pages * page_size


def _device_module() -> types.SimpleNamespace:
    """`torch.cpu` plus the accelerator calls verl makes on its device module (no-ops here)."""
    cpu = torch.cpu
    return types.SimpleNamespace(
        is_available=lambda: True,
        device_count=lambda: 1,
        current_device=lambda: PLATFORM,
        set_device=_no_op,
        synchronize=_no_op,
        current_stream=cpu.current_stream,
        stream=cpu.stream,
        Stream=cpu.Stream,
        Event=cpu.Event,
        empty_cache=_no_op,
        ipc_collect=_no_op,
        memory_allocated=_zero,
        memory_reserved=_zero,
        max_memory_allocated=_zero,
        max_memory_reserved=_zero,
        reset_peak_memory_stats=_no_op,
        mem_get_info=_memory_info,
        set_per_process_memory_fraction=_no_op,
        get_rng_state=lambda *_: torch.get_rng_state(),
        set_rng_state=lambda state, *_: torch.set_rng_state(state),
        manual_seed=torch.manual_seed,
        manual_seed_all=torch.manual_seed,
        get_device_name=lambda *_: PLATFORM,
    )


@PlatformRegistry.register(platform=PLATFORM)
class PlatformCPU(PlatformBase):
    """torch's CPU as verl's device; Ray's "GPU" resource stands for a device slot."""

    _module = _device_module()

    @property
    def device_name(self) -> str:
        return PLATFORM

    @property
    def vendor_name(self) -> str:
        return PLATFORM

    @property
    def device_module(self) -> types.ModuleType:
        return self._module  # type: ignore[return-value]

    def is_available(self) -> bool:
        return True

    def current_device(self) -> str:  # type: ignore[override]
        # verl moves tensors with `.to(get_device_id())`; an index would mean cuda:N.
        return PLATFORM

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: int | None = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    @contextlib.contextmanager
    def nvtx_range(self, msg: str) -> Iterator[None]:
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        # verl's resource pools hard-code use_gpu=True and count "GPU"s
        # (verl/single_controller/ray/base.py, ResourcePoolManager.create_resource_pool).
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None


def _register_engine(engine_package: ModuleType) -> None:
    """verl's FSDP/FSDP2 language-model engine for the `cpu` device, once `verl.workers.engine`
    (which imports the FSDP engine after asking for the platform registered above) has loaded."""
    if not torch.distributed.is_available():
        return
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead

    registry = engine_package.EngineRegistry
    # A second import must not register twice (verl asserts); the registry's table is private
    # (verl/workers/engine/base.py, EngineRegistry._engines).
    backends = registry._engines.get("language_model", {})
    if PLATFORM not in backends.get("fsdp2", {}):
        registry.register(model_type="language_model", backend=["fsdp", "fsdp2"], device=PLATFORM)(
            FSDPEngineWithLMHead
        )


# The three places verl 0.9.1 has no public extension point for a CPU device, each patched once
# its module has loaded.


def _gloo_process_group(engine_workers: ModuleType) -> None:
    """verl/workers/engine_workers.py (TrainingWorker.__init__) calls
    verl/utils/distributed.py:initialize_global_process_group_ray() with no backend, which builds
    "cpu:gloo,<device>:<backend>" = "cpu:gloo,cpu:gloo" here: torch rejects a device named twice.
    The module-level name is replaced; an explicit backend is kept."""
    original_init = engine_workers.initialize_global_process_group_ray
    if getattr(original_init, "_mars_cpu", False):
        return

    def init_process_group(timeout_second: Any = None, backend: str | None = None) -> None:
        original_init(timeout_second=timeout_second, backend=backend or GLOO)

    init_process_group._mars_cpu = True  # type: ignore[attr-defined]
    engine_workers.initialize_global_process_group_ray = init_process_group


def _unpinned_offload(fsdp_impl: ModuleType) -> None:
    """verl/workers/engine/fsdp/transformer_impl.py (FSDPEngine._build_fsdp_module) gives a
    forward-only FSDP2 model (the KL reference) CPUOffloadPolicy(pin_memory=True); pinning needs
    an accelerator. The name it looks up is replaced by a subclass that never pins."""
    policy = fsdp_impl.CPUOffloadPolicy
    if policy is None or getattr(policy, "_mars_cpu", False):
        return

    class UnpinnedCPUOffloadPolicy(policy):  # type: ignore[misc, valid-type]
        _mars_cpu = True

        def __init__(self, pin_memory: bool = False, **kwargs: Any) -> None:
            super().__init__(pin_memory=False, **kwargs)

    fsdp_impl.CPUOffloadPolicy = UnpinnedCPUOffloadPolicy


def _worker_rollout(rollout_base: ModuleType) -> None:
    """verl/workers/rollout/base.py: the worker-side rollout is looked up in the private
    `_ROLLOUT_REGISTRY` (rollout name, mode) -> class path, which has no register function."""
    rollout_base._ROLLOUT_REGISTRY[(names.CPU_ROLLOUT, "async")] = (
        f"{ROLLOUT_MODULE}.CPURolloutAdapter"
    )


def _replica_class() -> type:
    return importlib.import_module(ROLLOUT_MODULE).CPURolloutReplica


def _register_replica(replica: ModuleType) -> None:
    replica.RolloutReplicaRegistry.register(names.CPU_ROLLOUT, _replica_class)


# verl's module -> what the CPU device adds to it once it has loaded
HOOKS: dict[str, Hook] = {
    "verl.workers.engine": _register_engine,
    "verl.workers.engine_workers": _gloo_process_group,
    "verl.workers.engine.fsdp.transformer_impl": _unpinned_offload,
    "verl.workers.rollout.base": _worker_rollout,
    "verl.workers.rollout.replica": _register_replica,
}


def register() -> None:
    import verl

    if verl.__version__ != names.VERL_VERSION:
        raise ImportError(
            f"the CPU device hooks into verl {names.VERL_VERSION} internals, but verl "
            f"{verl.__version__} is installed: run `make setup-verl`"
        )
    for module_name, hook in HOOKS.items():
        after_import(module_name, hook)


register()
