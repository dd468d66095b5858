"""Servers and fakes for the verl adapter's tests: a scripted rollout server, a rollout server
that generates with a real model in process, and an in-memory TransferQueue.

As in verl's own CPU tests, the server manager is a small object whose `generate` returns a
`TokenOutput`. Importing this module needs verl: test modules import it after
`pytest.importorskip("verl")`.
"""

from __future__ import annotations

import functools
import json
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from tensordict import TensorDict
from transfer_queue import KVBatchMeta
from verl.experimental.agent_loop.agent_loop import AgentLoopOutput, DictConfigWrap
from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ
from verl.utils.dataset.rl_dataset import RLHFDataset
from verl.utils.tensordict_utils import list_of_dict_to_tensordict
from verl.workers.rollout.replica import TokenOutput

from games.prompts import legal_actions_in
from train_backend.verl.agent_loop import SelfPlayAgentLoop

# script(legal labels in the prompt, seat, call number of that seat) -> reply text
Script = Callable[[list[str], int, int], str]
_SEAT = re.compile(r"\(player (\d+) of 2\)")


@functools.cache
def tiny_tokenizer() -> Any:
    from transformers import AutoTokenizer

    from core.tiny_model import ensure_tiny_model

    return AutoTokenizer.from_pretrained(ensure_tiny_model())


def first_legal(legal: list[str], seat: int, call: int) -> str:
    return f"<think>the first option is fine</think>\n<answer>{legal[0]}</answer>"


class ScriptedServer:
    """Replies with the tokens of `script(...)` plus EOS; sees only token ids, like a real one."""

    def __init__(self, script: Script, global_steps: int = 7) -> None:
        self.script = script
        self.global_steps = global_steps
        self.calls: dict[str, int] = {}
        self.requests: list[dict[str, Any]] = []

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **_: Any
    ) -> TokenOutput:
        tokenizer = tiny_tokenizer()
        prompt = tokenizer.decode(prompt_ids, skip_special_tokens=True)
        found = _SEAT.search(prompt)  # full prompts name the seat; the request id always does
        seat = int(found.group(1)) - 1 if found else int(request_id.rsplit("-seat", 1)[1])
        call = self.calls.get(request_id, 0)
        self.calls[request_id] = call + 1
        reply = self.script(legal_actions_in(prompt), seat, call)
        token_ids = [*tokenizer.encode(reply, add_special_tokens=False), tokenizer.eos_token_id]
        self.requests.append(
            {"request_id": request_id, "prompt_ids": list(prompt_ids), "token_ids": token_ids}
        )
        return TokenOutput(
            token_ids=token_ids,
            log_probs=[-0.25] * len(token_ids),
            stop_reason="completed",
            extra_fields={"global_steps": self.global_steps},
        )


@dataclass
class Generation:
    """One call to `ModelServer.generate`: what came in and what the model produced."""

    request_id: str
    prompt_ids: list[int]
    token_ids: list[int]
    log_probs: list[float]
    sampling_params: dict[str, Any]


class ModelServer:
    """A rollout server backed by a real causal LM in this process (`model.generate`, sampling).

    Seeded per request: the seed of a call is derived from `seed`, the request id and how many
    calls that request id made before, so a game replays exactly. Log-probs are those of the
    sampled tokens under the temperature-scaled distribution, as vLLM reports them.
    """

    def __init__(self, model_dir: Path, *, seed: int = 0, max_new_tokens: int = 48) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
        self.seed = seed
        self.max_new_tokens = max_new_tokens
        self.calls: dict[str, int] = {}
        self.generations: list[Generation] = []

    def call_seed(self, request_id: str, call: int) -> int:
        return zlib.crc32(f"{self.seed}/{request_id}/{call}".encode())

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **_: Any
    ) -> TokenOutput:
        call = self.calls.get(request_id, 0)
        self.calls[request_id] = call + 1
        temperature = float(sampling_params.get("temperature", 1.0))
        torch.manual_seed(self.call_seed(request_id, call))
        inputs = torch.tensor([prompt_ids])
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # a 1M-parameter model: more threads only contend
        try:
            out = self._generate(inputs, temperature, float(sampling_params.get("top_p", 1.0)))
        finally:
            torch.set_num_threads(threads)
        token_ids = out.sequences[0, len(prompt_ids) :].tolist()
        logits = torch.stack(out.logits, dim=1)[0].float() / temperature
        chosen = torch.tensor(token_ids).unsqueeze(1)
        log_probs = torch.log_softmax(logits, dim=-1).gather(1, chosen).squeeze(1).tolist()
        self.generations.append(
            Generation(request_id, list(prompt_ids), token_ids, log_probs, dict(sampling_params))
        )
        stop = "completed" if token_ids[-1] in _eos_ids(self.model) else "length"
        return TokenOutput(token_ids=token_ids, log_probs=log_probs, stop_reason=stop)

    def _generate(self, inputs: torch.Tensor, temperature: float, top_p: float) -> Any:
        with torch.no_grad():
            return self.model.generate(
                inputs,
                attention_mask=torch.ones_like(inputs),
                do_sample=True,
                temperature=temperature,
                top_k=0,
                top_p=top_p,
                max_new_tokens=self.max_new_tokens,
                output_logits=True,
                return_dict_in_generate=True,
                pad_token_id=self.tokenizer.pad_token_id,
            )


def _eos_ids(model: Any) -> set[int]:
    eos = model.generation_config.eos_token_id
    return set(eos) if isinstance(eos, list) else {eos}


def loop_config(prompt_length: int = 4096, response_length: int = 128) -> DictConfig:
    return OmegaConf.create(
        {
            "actor_rollout_ref": {
                "rollout": {"prompt_length": prompt_length, "response_length": response_length}
            },
            "data": {},
        }
    )


def make_loop(
    server: ScriptedServer | ModelServer,
    config: DictConfig | None = None,
    tokenizer: Any = None,
) -> SelfPlayAgentLoop:
    config = config if config is not None else loop_config()
    return SelfPlayAgentLoop(
        trainer_config=DictConfigWrap(config),
        server_manager=server,
        tokenizer=tokenizer if tokenizer is not None else tiny_tokenizer(),
        processor=None,
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(config.data),
        hf_model_type="qwen3",
    )


class FakeTransferQueue:
    """The slice of `transfer_queue`'s key-value API that verl's v1 trainer and worker use."""

    def __init__(self) -> None:
        self.store: dict[tuple[str, str], dict[str, Any]] = {}
        self.tags: dict[tuple[str, str], dict[str, Any]] = {}

    def kv_batch_put(
        self,
        keys: list[str],
        partition_id: str,
        fields: TensorDict | None = None,
        tags: list[dict[str, Any]] | None = None,
    ) -> KVBatchMeta:
        for i, key in enumerate(keys):
            entry = self.store.setdefault((partition_id, key), {})
            if fields is not None:
                for name in fields.keys():  # noqa: SIM118 (iterating a TensorDict yields rows)
                    entry[name] = _item(fields, name, i)
            if tags is not None:
                self.tags[(partition_id, key)] = dict(tags[i])
        return KVBatchMeta(
            partition_id=partition_id,
            keys=list(keys),
            tags=[self.tags.get((partition_id, k), {}) for k in keys],
        )

    async def async_kv_batch_put(self, **kwargs: Any) -> KVBatchMeta:
        return self.kv_batch_put(**kwargs)

    def kv_batch_get(
        self, keys: list[str], partition_id: str, select_fields: list[str] | None = None
    ) -> TensorDict:
        rows = []
        for key in keys:
            entry = self.store[(partition_id, key)]
            wanted = select_fields if select_fields is not None else list(entry)
            rows.append({name: entry[name] for name in wanted if name in entry})
        return list_of_dict_to_tensordict(rows)

    def batch(self, partition_id: str = "train") -> KVBatchMeta:
        keys = [key for (partition, key) in self.store if partition == partition_id]
        return KVBatchMeta(
            partition_id=partition_id,
            keys=keys,
            tags=[self.tags.get((partition_id, k), {}) for k in keys],
        )


def _item(fields: TensorDict, name: str, index: int) -> Any:
    value = fields.get(name)
    if isinstance(value, torch.Tensor):
        return value[index].clone()
    item = value[index]
    return getattr(item, "data", item)


async def store_like_verl(
    fake_tq: FakeTransferQueue, outputs: list[AgentLoopOutput], **row: Any
) -> None:
    """Put one game's outputs into `fake_tq` with verl's own v1 worker code
    (`AgentLoopWorkerTQ._agent_loop_postprocess`): the score copying and the storage layout are
    verl's. `row` holds the dataset row and `uid`, `session_id`, `global_steps`."""
    import verl.trainer.ppo.v1.agent_loop_tq as agent_loop_tq

    worker = object.__new__(AgentLoopWorkerTQ.__ray_metadata__.modified_class)
    worker.reward_loop_worker_handles = None
    worker.distillation_enabled = False
    worker.processor = None
    worker.mm_processor_kwargs = {}
    previous, agent_loop_tq.tq = agent_loop_tq.tq, fake_tq
    try:
        await worker._agent_loop_postprocess(outputs, False, **row)
    finally:
        agent_loop_tq.tq = previous


def install_fake_transfer_queue(monkeypatch: Any) -> FakeTransferQueue:
    """A FakeTransferQueue in place of the `tq` client that verl's trainer and ours talk to."""
    import verl.trainer.ppo.padding_utils as padding_utils
    import verl.trainer.ppo.v1.trainer_base as trainer_base

    import train_backend.verl.trainer as mars_trainer

    fake = FakeTransferQueue()
    for module in (trainer_base, padding_utils, mars_trainer):
        monkeypatch.setattr(module, "tq", fake)
    return fake


def scoring_trainer(config: Any, root: Path) -> Any:
    """Our verl trainer with only its composed config: enough for `_compute_advantage`."""
    from train_backend.verl.compose import compose_verl_config
    from train_backend.verl.overrides import RunPaths, verl_overrides
    from train_backend.verl.trainer import MarshalPPOTrainer

    trainer = object.__new__(MarshalPPOTrainer)
    trainer.config = compose_verl_config(verl_overrides(config, RunPaths(root)))
    return trainer


def step_turns(run: Path, step: int) -> list[dict]:
    """The turns a verl run dumped for `step` (RUN/verl/turns/step_N.jsonl)."""
    path = run / "verl" / "turns" / f"step_{step}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


TAG = "MARS_VERL_TEST_TAG"


def tagged_processes(tag: str) -> list[str]:
    """Command lines of the processes that carry `tag` in their environment (inherited by
    verl's driver, Ray's daemons, every Ray worker and every model server a command starts)."""
    marker = f"{TAG}={tag}".encode()
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if marker not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            found.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            continue
    return found
