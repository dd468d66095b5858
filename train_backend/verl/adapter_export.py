"""A LoRA run's published checkpoint: the adapter alone, out of verl's sharded actor save.

With `adapter` set verl trains the policy as a PEFT LoRA adapter on the base `model` and saves
only the adapter and its optimizer state (`checkpoint.save_lora_only`, overrides.py) as
`global_step_N/actor/model_world_size_W_rank_R.pt`, one shard of every tensor per rank. verl's
own merger wants a whole model (it would write the base again, in bf16, with the adapter in a
`lora_adapter/` folder beside it), so the adapter is gathered here instead: every rank's shard
joined along its FSDP placement, in the adapter's training dtype, under PEFT's saved names, and
written as the checkpoint contract's adapter (core/checkpoints.py): `adapter_config.json`,
`adapter_model.safetensors` and the tokenizer files verl saved beside the shards.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.checkpoints import ADAPTER_CONFIG_FILE, ADAPTER_WEIGHTS_FILE, AdapterInfo
from core.errors import MarsError
from train_backend.mas.config import SHARED_POLICY, WorkflowTrainConfig

# verl's save names a LoRA tensor with PEFT's adapter name ("...q_proj.lora_A.default.weight");
# PEFT's saved files leave it out ("...q_proj.lora_A.weight").
_ADAPTER_NAME = re.compile(r"\.(lora_[A-Za-z_]+)\.default\.")
# What verl writes into actor/huggingface/ besides the tokenizer: the base's own files.
_NOT_TOKENIZER = {"config.json", "generation_config.json"}


@dataclass(frozen=True)
class AdapterTarget:
    """Which adapter a verl run publishes, over which base."""

    name: str
    base: str

    def info(self) -> AdapterInfo:
        from core.fingerprints import model_fingerprint

        fingerprint = model_fingerprint(self.base)
        return AdapterInfo(name=self.name, base=self.base, base_fingerprint=fingerprint)


def adapter_target(config: Any) -> AdapterTarget | None:
    """The adapter a run trains: the policy of the roles not answered by frozen partners."""
    from train_backend.mas.rewards import ROLES

    if not isinstance(config, WorkflowTrainConfig) or config.adapter is None:
        return None
    if config.model is None:
        raise MarsError("adapter: the verl backend needs --model, the base every adapter sits on")
    role_policy = config.role_policies(ROLES[config.workflow])
    trained = {name for role, name in role_policy.items() if role not in config.frozen_partners}
    name = trained.pop() if len(trained) == 1 else SHARED_POLICY
    return AdapterTarget(name=name, base=config.model)


def _world_size(actor_dir: Path) -> int:
    try:
        size = json.loads((actor_dir / "fsdp_config.json").read_text())["world_size"]
    except (OSError, ValueError, KeyError) as exc:
        raise MarsError(f"{actor_dir}: no world size in fsdp_config.json ({exc})") from exc
    return int(size)


def gathered_adapter(actor_dir: Path) -> dict[str, Any]:
    """The LoRA tensors of a verl FSDP save, whole, under PEFT's saved names."""
    import torch
    from torch.distributed.tensor import DTensor

    world = _world_size(actor_dir)
    shards = [
        torch.load(
            actor_dir / f"model_world_size_{world}_rank_{rank}.pt",
            map_location="cpu",
            weights_only=False,
        )
        for rank in range(world)
    ]
    tensors = {}
    for key in sorted(shards[0]):
        if "lora_" not in key:
            continue
        first = shards[0][key]
        if isinstance(first, DTensor):
            # FSDP shards along the last mesh dimension; an outer (replicated) one is dropped,
            # as verl's own merger does (verl/model_merger/fsdp_model_merger.py).
            placement = first.placements[-1]
            count = int(first.device_mesh.mesh.shape[-1])
            parts = [shard[key]._local_tensor for shard in shards[:count]]
            whole = torch.cat(parts, dim=placement.dim) if placement.is_shard() else parts[0]
        else:
            whole = first
        tensors[_ADAPTER_NAME.sub(r".\1.", key)] = whole.detach().contiguous()
    if not tensors:
        raise MarsError(f"{actor_dir} holds no LoRA tensor (was the run trained with adapter?)")
    return tensors


def lora_meta(actor_dir: Path) -> dict[str, Any]:
    """Rank and alpha as verl recorded them (lora_train_meta.json)."""
    try:
        meta = json.loads((actor_dir / "lora_train_meta.json").read_text())
    except (OSError, ValueError) as exc:
        raise MarsError(f"{actor_dir}: cannot read lora_train_meta.json ({exc})") from exc
    return {"r": int(meta["r"]), "lora_alpha": int(meta["lora_alpha"])}


def adapter_config(tensors: dict[str, Any], meta: dict[str, Any], base: str) -> dict[str, Any]:
    """PEFT's adapter_config.json for these tensors: the modules they adapt, verl's rank and
    alpha, the base they sit on."""
    from peft import LoraConfig

    modules = sorted({key.split(".")[-3] for key in tensors if ".lora_A." in key})
    config = LoraConfig(target_modules=modules, task_type="CAUSAL_LM", **meta).to_dict()
    config.update(base_model_name_or_path=base, inference_mode=True)
    for key, value in config.items():  # enums and sets, as PEFT's save_pretrained writes them
        if hasattr(value, "value"):
            config[key] = value.value
        elif isinstance(value, set):
            config[key] = sorted(value)
    return config


def export_adapter(actor_dir: Path, target_dir: Path, base: str) -> None:
    """Write `actor_dir`'s adapter and tokenizer into `target_dir` (the contract's files)."""
    from safetensors.torch import save_file

    tensors = gathered_adapter(actor_dir)
    config = adapter_config(tensors, lora_meta(actor_dir), base)
    target_dir.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(target_dir / ADAPTER_WEIGHTS_FILE), metadata={"format": "pt"})
    (target_dir / ADAPTER_CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
    tokenizer = actor_dir / "huggingface"
    for path in sorted(tokenizer.iterdir()) if tokenizer.is_dir() else []:
        if path.is_file() and path.name not in _NOT_TOKENIZER:
            shutil.copy2(path, target_dir / path.name)
