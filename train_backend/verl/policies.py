"""Every role's policy updated in every step, in one verl job (trainer mode `mars_policies`).

verl's trainer owns one actor: its worker group, its rollout replicas and the checkpoint engine
that syncs the two. This trainer owns one of each per policy (policy_spec.py), built from verl's
own pieces as verl builds its one:

- verl's setup builds the first policy from the config as launched; each further policy gets a
  copy of that config with its own model and the rollout named after it (`rollout.custom`), a
  `RayWorkerGroup` of verl's actor-rollout worker on the same resource pool (colocated: every
  policy is a process of its own on each GPU; offload between updates is verl's `param_offload`
  and `optimizer_offload`), an `LLMServerManager` for its rollout replicas and a
  `CheckpointEngineManager`. Each has its own optimiser and learning-rate schedule, since each
  worker group builds its own.
- The agent loop reaches every policy's replicas through one client (`PolicyRouter`): a call
  names its role's policy and goes to that policy's replicas, as they are at this step.
- A step samples the batch once (every role's branches), then gives each policy its own rows:
  balanced over its ranks, log-probs and the update on its own worker group. Advantages are
  computed over the whole batch: a tree group is one (problem, role, call), never two policies.
  With `phase_alternate_steps` N > 0 only one policy updates, N steps in turn; the others' rows
  are dropped from the update and their weights stay as they are, in the same job.
- After the step every policy's weights go to its own rollout, and a save writes every other
  policy's actor under `global_step_N/actor_<name>/` before verl's own save writes the first's
  and the tracker file: a step is resumable only once every policy of it is saved.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import transfer_queue as tq
from omegaconf import DictConfig, open_dict
from transfer_queue import KVBatchMeta
from verl.checkpoint_engine import CheckpointEngineManager
from verl.single_controller.ray import RayClassWithInitArgs, RayWorkerGroup
from verl.single_controller.ray.base import create_colocated_worker_cls
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.utils.config import omega_conf_to_dataclass
from verl.utils.debug import marked_timer
from verl.workers.rollout.llm_server import LLMServerClient, LLMServerManager

from core.errors import MarsError
from train_backend.verl import names
from train_backend.verl.policy_spec import (
    POLICY_FIELD,
    TRAINER_NAME,
    PoliciesSpec,
    PolicySpec,
    actor_folder,
)
from train_backend.verl.trainer import MarshalPPOTrainer, row_fields


class PolicyRouter(LLMServerClient):
    """One client over every policy's rollout: `generate(..., policy=NAME)` goes to that
    policy's replicas (through its own load balancer); without a name, to the first policy."""

    def __init__(self, config: DictConfig, clients: dict[str, LLMServerClient]) -> None:
        super().__init__(config=config, load_balancer_handle=None)
        self.clients = clients
        self.first = next(iter(clients))

    async def generate(self, request_id: str, *, policy: str | None = None, **kwargs: Any) -> Any:
        client = self.clients.get(policy or self.first)
        if client is None:
            raise MarsError(f"no rollout for policy {policy!r}: the job has {sorted(self.clients)}")
        return await client.generate(request_id, **kwargs)


@dataclass
class PolicySlot:
    name: str
    worker_group: Any
    servers: Any  # LLMServerManager
    checkpoints: Any  # CheckpointEngineManager


def policy_config(config: DictConfig, policy: PolicySpec) -> DictConfig:
    """The job's config for one policy: its own start model, its rollout named after it."""
    own = copy.deepcopy(config)
    with open_dict(own):
        model = own.actor_rollout_ref.model
        model.path = policy.model
        if model.get("local_path") is not None:
            model.local_path = policy.model
        own.actor_rollout_ref.rollout.custom = {POLICY_FIELD: policy.name}
    return own


def role_of_rows(batch: KVBatchMeta) -> list[str | None]:
    return [fields.get(names.ROLE) for fields in row_fields(batch)]


@register_trainer(TRAINER_NAME)
class MultiPolicyTrainer(MarshalPPOTrainer):
    """verl's sync trainer over several policies (see the module docstring)."""

    def _setup(self) -> None:
        spec = PoliciesSpec.from_environment()
        if spec is None or len(spec.policies) < 2:
            raise MarsError(f"trainer {TRAINER_NAME} needs two policies or more in its workers")
        self.spec = spec
        self.role_policy = spec.role_policies()
        self.parts: dict[str, list[str]] = {}
        first = spec.policies[0]
        with open_dict(self.config):
            self.config.actor_rollout_ref.rollout.custom = {POLICY_FIELD: first.name}
        super()._setup()  # verl's own setup: the first policy, the data, the tracker's step
        self.slots = {
            first.name: PolicySlot(
                first.name, self.actor_rollout_wg, self.llm_server_manager, self.checkpoint_manager
            )
        }
        for policy in spec.policies[1:]:
            self.slots[policy.name] = self._build_slot(policy)

    def _init_resource_pool_mgr(self) -> None:
        super()._init_resource_pool_mgr()
        # one process per policy on every GPU of the pool, as verl colocates actor and critic
        manager = self.resource_pool_manager
        manager.max_colocate_count = max(manager.max_colocate_count, len(self.spec.policies) + 1)

    def _actor_role(self) -> Any:
        return next(iter(self.role_worker_mapping))

    def _build_slot(self, policy: PolicySpec) -> PolicySlot:
        config = policy_config(self.config, policy)
        role = self._actor_role()
        pool = self.resource_pool_manager.get_resource_pool(role)
        worker = RayClassWithInitArgs(
            cls=self.role_worker_mapping[role],
            config=config.actor_rollout_ref,
            distillation_config=None,
            role=str(role),
        )
        group = RayWorkerGroup(
            resource_pool=pool,
            ray_cls_with_init=create_colocated_worker_cls(class_dict={str(role): worker}),
            device_name=self.config.trainer.device,
        )
        worker_group = group.spawn(prefix_set={str(role)})[str(role)]
        worker_group.init_model()
        servers = LLMServerManager.create(
            config=config, worker_group=worker_group, rollout_resource_pool=pool
        )
        engine = omega_conf_to_dataclass(config.actor_rollout_ref.rollout.checkpoint_engine)
        engine.backend = "naive"
        checkpoints = CheckpointEngineManager(
            config=engine, actor_wg=worker_group, replicas=servers.get_replicas()
        )
        checkpoints.sleep_replicas()
        if self.global_steps > 0:  # resumed: this policy's actor of the same step
            folder = os.path.join(
                self.config.trainer.default_local_dir, f"global_step_{self.global_steps}"
            )
            worker_group.load_checkpoint(
                local_path=os.path.join(folder, actor_folder(self.spec, policy.name)),
                del_local_after_load=self.config.trainer.del_local_ckpt_after_load,
            )
        return PolicySlot(policy.name, worker_group, servers, checkpoints)

    def get_llm_client(self) -> LLMServerClient:
        clients = {name: slot.servers.get_client() for name, slot in self.slots.items()}
        return PolicyRouter(self.config, clients)

    # --- every policy's rollout -----------------------------------------------------------

    def on_init_end(self) -> None:
        for slot in self.slots.values():
            slot.checkpoints.update_weights(self.global_steps)

    def on_step_end(self) -> None:
        with marked_timer("update_weights", self.timing_raw, color="red"):
            for slot in self.slots.values():
                slot.checkpoints.update_weights(self.global_steps)

    def on_sample_end(self) -> None:
        for slot in self.slots.values():
            slot.checkpoints.sleep_replicas()
        if self.curr_step_profile:
            self._stop_rollout_profiling()

    # --- each policy's own rows -----------------------------------------------------------

    @contextmanager
    def _as_policy(self, name: str) -> Iterator[None]:
        """verl's stages run on `self.actor_rollout_wg`: bound to one policy's for a while."""
        kept = self.actor_rollout_wg, getattr(self, "ref_policy_wg", None)
        group = self.slots[name].worker_group
        # the reference is the actor's own worker (LoRA: the base without the adapter; a whole
        # model with a KL term: verl's actor-rollout-ref worker), or there is none
        self.actor_rollout_wg = self.ref_policy_wg = group
        try:
            yield
        finally:
            self.actor_rollout_wg, self.ref_policy_wg = kept

    def _policy_parts(self, batch: KVBatchMeta) -> dict[str, KVBatchMeta]:
        return {
            name: batch.select_keys(keys)
            for name, keys in self.parts.items()
            if keys and set(keys) <= set(batch.keys)
        }

    def _balance_batch(
        self, batch: KVBatchMeta, metrics: dict, logging_prefix: str = "global_seqlen", **kw: Any
    ) -> KVBatchMeta:
        """The rows split by policy, each policy's balanced (and padded) over its own ranks;
        rows of a policy that does not update at this step leave the batch."""
        updating = set(self.spec.updating(int(self.global_steps)))
        rows: dict[str, list[str]] = {name: [] for name in self.slots}
        dropped = []
        for key, role in zip(batch.keys, role_of_rows(batch), strict=True):
            name = self.role_policy.get(str(role))
            if name is None:
                raise MarsError(f"a sample of role {role!r}, which no policy of this job plays")
            (rows[name] if name in updating else dropped).append(key)
        if dropped:
            tq.kv_clear(keys=dropped, partition_id=batch.partition_id)
        self.parts = {}
        keys: list[str] = []
        tags: list[dict] = []
        for name, own in rows.items():
            if not own:
                continue
            with self._as_policy(name):
                part = super()._balance_batch(
                    batch.select_keys(own), metrics, f"{logging_prefix}/{name}", **kw
                )
            self.parts[name] = list(part.keys)
            keys += part.keys
            tags += part.tags
            metrics[f"policy/{name}/samples"] = len(own)
        return KVBatchMeta(
            keys=keys, tags=tags, partition_id=batch.partition_id, extra_info=batch.extra_info
        )

    def _per_policy(self, stage: Any, batch: KVBatchMeta, metrics: dict) -> KVBatchMeta:
        for name, part in self._policy_parts(batch).items():
            own: dict[str, Any] = {}
            with self._as_policy(name):
                stage(part, own)
            metrics.update({f"{name}/{key}": value for key, value in own.items()})
        return batch

    def _compute_old_log_prob(self, batch: KVBatchMeta, metrics: dict) -> KVBatchMeta:
        return self._per_policy(super()._compute_old_log_prob, batch, metrics)

    def _compute_ref_log_prob(self, batch: KVBatchMeta, metrics: dict) -> KVBatchMeta:
        return self._per_policy(super()._compute_ref_log_prob, batch, metrics)

    def _update_actor(self, batch: KVBatchMeta, metrics: dict) -> KVBatchMeta:
        return self._per_policy(super()._update_actor, batch, metrics)

    # --- checkpoints ----------------------------------------------------------------------

    def _save_checkpoint(self) -> None:
        folder = os.path.join(
            self.config.trainer.default_local_dir, f"global_step_{self.global_steps}"
        )
        keep = self.config.trainer.get("max_actor_ckpt_to_keep", None)
        for name, slot in self.slots.items():
            if name == self.spec.policies[0].name:
                continue  # verl's own save below, which writes the tracker file last
            slot.worker_group.save_checkpoint(
                os.path.join(folder, actor_folder(self.spec, name)),
                None,
                self.global_steps,
                max_ckpt_to_keep=keep,
            )
        super()._save_checkpoint()
