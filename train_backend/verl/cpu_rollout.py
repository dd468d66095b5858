"""The CPU device's rollout (`mars_cpu`): one Ray actor per replica holds the model with
transformers and serves verl's agent loop token-in/token-out.

Imported only where verl builds or reaches a rollout (the CPU device registers these classes by
name, cpu_device.py), so verl's other processes never load it. The trainer's weights reach the
server after every step through verl's "naive" weight sync: the whole model, or with LoRA the
adapter alone, which the server puts on its base with PEFT (rollout_weights.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import Iterable
from typing import Any

import ray
import torch
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica, TokenOutput

from train_backend.verl import names
from train_backend.verl.policy_spec import policy_of

SERVER_PREFIX = "mars_cpu_rollout_"
MAX_BATCH = 64
BATCH_WINDOW_S = 0.02  # how long the server waits for more requests before decoding a batch


def server_name(replica_rank: int, rollout_config: Any = None) -> str:
    """The Ray name of a replica's server; in a job with several policies (policies.py) each
    policy's rollout config names its policy, so their servers of one rank stay apart."""
    policy = policy_of(rollout_config) if rollout_config is not None else None
    return f"{SERVER_PREFIX}{policy + '_' if policy else ''}{replica_rank}"


@ray.remote(num_cpus=0)
class CPURolloutServer:
    """The model with transformers, serving verl's agent loop token-in/token-out.

    Concurrent `generate` calls are gathered for `BATCH_WINDOW_S` and decoded as one batch (the
    project's `generate_batch`: KV cache, seeded sampling, per-request token limits) in a worker
    thread; the log-probs returned are those of the sampled tokens under the temperature-scaled
    distribution (verl's actor computes its own with the same scaling).

    A request with its own `seed` (vLLM's per-request seed; the workflow loop's under
    `full_determinism`) is decoded alone with a generator of that seed: a batch's padding moves
    the logits (4e-6 on the tiny model), so only alone is its reply the same whatever waited.
    """

    def __init__(self, config: Any, model_path: str, replica_rank: int) -> None:
        from core.causal_lm import load_policy

        torch.set_num_threads(1)
        self.config = config
        self.policy = load_policy(model_path)
        self.replica_rank = replica_rank
        self.name = server_name(replica_rank, config)
        self.global_steps: int | None = None
        self.generator = torch.Generator().manual_seed(int(config.seed) + replica_rank)
        self.pending: list[tuple[dict[str, Any], asyncio.Future[Any]]] = []
        self.drainer: asyncio.Task[None] | None = None

    async def generate(
        self,
        request_id: str,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        **_: Any,
    ) -> TokenOutput:
        request = {
            "prompt_ids": [int(t) for t in prompt_ids],
            **self._limits(prompt_ids, sampling_params),
        }
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.pending.append((request, future))
        if self.drainer is None or self.drainer.done():
            self.drainer = asyncio.create_task(self._drain())
        token_ids, log_probs = await future
        return TokenOutput(
            token_ids=token_ids,
            log_probs=log_probs if sampling_params.get("logprobs") else None,
            stop_reason="completed",
            extra_fields={"global_steps": self.global_steps},
        )

    def _limits(self, prompt_ids: list[int], params: dict[str, Any]) -> dict[str, Any]:
        # The same defaults as verl's vLLM server (vllm_async_server.py, generate).
        config = self.config
        room = int(config.max_model_len) - len(prompt_ids)
        if room < 1:
            raise ValueError(
                f"prompt of {len(prompt_ids)} tokens leaves no room within max_model_len "
                f"{config.max_model_len}"
            )
        wanted = params.get("max_tokens", params.get("max_new_tokens"))
        if wanted is None:
            wanted = min(
                int(config.response_length),
                int(config.prompt_length) + int(config.response_length) - len(prompt_ids),
            )
        top_k = int(params.get("top_k", -1))
        return {
            "seed": None if params.get("seed") is None else int(params["seed"]),
            "max_new_tokens": max(1, min(int(wanted), room)),
            "sampling": (
                float(params.get("temperature", 1.0)),
                float(params.get("top_p", 1.0)),
                top_k if top_k > 0 else 0,
            ),
        }

    async def _drain(self) -> None:
        await asyncio.sleep(BATCH_WINDOW_S)
        while self.pending:
            batch, self.pending = self.pending[:MAX_BATCH], self.pending[MAX_BATCH:]
            groups: dict[tuple[Any, ...], list[int]] = {}
            for index, (request, _) in enumerate(batch):
                alone = () if request["seed"] is None else (index,)
                groups.setdefault((request["sampling"], *alone), []).append(index)
            for key, indices in groups.items():
                requests = [batch[i][0] for i in indices]
                seed = requests[0]["seed"]
                generator = self.generator if seed is None else torch.Generator().manual_seed(seed)
                try:
                    results = await asyncio.to_thread(self._decode, requests, key[0], generator)
                except Exception as exc:  # every waiting request gets the error
                    for i in indices:
                        if not batch[i][1].done():
                            batch[i][1].set_exception(exc)
                    continue
                for i, result in zip(indices, results, strict=True):
                    if not batch[i][1].done():
                        batch[i][1].set_result(result)

    def _decode(
        self,
        requests: list[dict[str, Any]],
        sampling: tuple[float, float, int],
        generator: torch.Generator,
    ) -> list[tuple[list[int], list[float]]]:
        from core.batcher import Request, Sampling, generate_batch

        temperature, top_p, top_k = sampling
        outputs = generate_batch(
            self.policy,
            [Request(r["prompt_ids"], r["max_new_tokens"]) for r in requests],
            Sampling(temperature=temperature, top_p=top_p, top_k=top_k),
            generator,
        )
        completions = [out.completion_ids for out in outputs]
        log_probs = self._log_probs([r["prompt_ids"] for r in requests], completions, temperature)
        return list(zip(completions, log_probs, strict=True))

    def _log_probs(
        self, prompts: list[list[int]], completions: list[list[int]], temperature: float
    ) -> list[list[float]]:
        """Log-probs of each completion's tokens, one teacher-forced pass over the batch."""
        rows = [p + c for p, c in zip(prompts, completions, strict=True)]
        width = max(len(row) for row in rows)
        ids = torch.full((len(rows), width), self.policy.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            ids[i, : len(row)] = torch.tensor(row)
            mask[i, : len(row)] = 1
        with torch.inference_mode():
            logits = self.policy.model(input_ids=ids, attention_mask=mask).logits.float()
        scale = temperature if temperature > 0 else 1.0
        log_softmax = torch.log_softmax(logits / scale, dim=-1)
        result = []
        for i, (prompt, completion) in enumerate(zip(prompts, completions, strict=True)):
            if not completion:
                result.append([])
                continue
            positions = torch.arange(len(prompt) - 1, len(prompt) + len(completion) - 1)
            picked = log_softmax[i, positions, torch.tensor(completion)]
            result.append([float(v) for v in picked])
        return result

    def update_weights(
        self,
        weights: dict[str, torch.Tensor],
        global_steps: int | None,
        peft_config: dict[str, Any] | None = None,
        base_sync_done: bool = True,
    ) -> int:
        """Take the trainer's weights: the whole model, or with LoRA (verl's `peft_config`) its
        adapter alone once the base is in place (`base_sync_done`), else the base's weights."""
        from train_backend.verl.rollout_weights import load_adapter_weights, load_base_weights

        if peft_config and base_sync_done:
            model = load_adapter_weights(self.policy.model, weights, peft_config)
            self.policy = dataclasses.replace(self.policy, model=model)
            # in verl's log: what the tests (and a rehearsal's reader) check the rollout ran
            print(
                f"{names.ROLLOUT_ADAPTER_LOG} of step {global_steps}: {len(weights)} tensors "
                f"on {self.name}",
                flush=True,
            )
        else:
            load_base_weights(self.policy.model, weights)
        self.global_steps = global_steps
        return len(weights)

    def parameter(self, name: str) -> torch.Tensor:
        return self.policy.model.state_dict()[name].detach().clone()

    # The control calls verl makes on every rollout server: nothing to free or resume on a CPU.
    def wake_up(self) -> None: ...
    def sleep(self) -> None: ...
    def clear_kv_cache(self) -> None: ...
    def release_kv_cache(self) -> None: ...
    def resume_kv_cache(self) -> None: ...
    def abort_all_requests(self, reject_request: bool = False) -> None: ...
    def resume_generation(self) -> None: ...
    def start_profile(self, **_: Any) -> None: ...
    def stop_profile(self) -> None: ...


class CPURolloutReplica(RolloutReplica):
    """One rollout server per replica, started next to verl's hybrid workers."""

    async def launch_servers(self) -> None:
        name = server_name(self.replica_rank, self.config)
        server = CPURolloutServer.options(name=name, max_concurrency=1000).remote(
            self.config,
            str(self.model_config.get("local_path") or self.model_config.path),
            self.replica_rank,
        )
        self.servers = [server]
        self._server_handle = server
        self._server_address = name  # no HTTP: the agent loop calls the actor handle
        await server.wake_up.remote()


class CPURolloutAdapter(BaseRollout):
    """The rollout inside verl's actor worker: forwards the trained weights to its server."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any, **kwargs: Any) -> None:
        super().__init__(config, model_config, device_mesh)
        rank = int(os.environ.get("RANK", "0"))
        world = (
            self.config.tensor_model_parallel_size
            * self.config.data_parallel_size
            * self.config.pipeline_model_parallel_size
        )
        self.replica_rank = rank // world
        self.is_leader_rank = rank % world == 0
        self.server: Any = None

    async def resume(self, tags: list[str]) -> None:
        return None

    async def release(self) -> None:
        return None

    async def update_weights(
        self,
        weights: Iterable[tuple[str, torch.Tensor]],
        wire_format: str = "named_tensors",
        **kwargs: Any,
    ) -> None:
        if wire_format != "named_tensors":
            raise NotImplementedError(f"the CPU rollout takes full tensors, not {wire_format}")
        # Every rank walks the generator: FSDP gathers each full tensor collectively.
        state = {name: tensor.detach().to("cpu").clone() for name, tensor in weights}
        if not self.is_leader_rank:
            return
        if self.server is None:
            self.server = ray.get_actor(server_name(self.replica_rank, self.config))
        await self.server.update_weights.remote(
            state,
            kwargs.get("global_steps"),
            kwargs.get("peft_config"),
            bool(kwargs.get("base_sync_done", True)),
        )
