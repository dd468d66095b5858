"""The trained weights verl hands a rollout, loaded into the CPU rollout's transformers model.

verl's actor worker (verl/workers/engine_workers.py, `update_weights`) sends either the whole
model (named tensors), or with LoRA (`model.lora_rank` > 0, not merged) PEFT's adapter tensors
and `peft_config` once the rollout holds the base (`base_sync_done`), before which it sends the
base's weights under the names a LoRA-wrapped model gives them (`...q_proj.base_layer.weight`,
verl/utils/fsdp_utils.py `replace_lora_wrapper`). No verl import here: the CPU device calls
these, and the tests call them without Ray.
"""

from __future__ import annotations

from typing import Any

import torch


def load_base_weights(model: Any, weights: dict[str, torch.Tensor]) -> None:
    """Copy whole-model weights into `model` (or into the base under its adapter)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    # state_dict, not named_parameters: tied weights (lm_head) are listed under both names.
    params = {
        name.replace(".base_layer", ""): tensor
        for name, tensor in base.state_dict().items()
        if "lora_" not in name
    }
    incoming = {name.replace(".base_layer", ""): tensor for name, tensor in weights.items()}
    unknown = sorted(set(incoming) - set(params))
    if unknown:
        raise KeyError(f"rollout model has no parameter(s) {', '.join(unknown[:5])}")
    with torch.no_grad():
        for name, tensor in incoming.items():
            params[name].copy_(tensor)


def load_adapter_weights(
    model: Any, weights: dict[str, torch.Tensor], peft_config: dict[str, Any]
) -> Any:
    """The actor's LoRA tensors onto the same adapter in `model`, wrapping it with PEFT the
    first time; returns the (wrapped) model. The rollout then runs base + adapter unmerged, as
    the actor computes its log-probs."""
    from peft import PeftConfig, get_peft_model, set_peft_model_state_dict

    if not hasattr(model, "peft_config"):
        config = PeftConfig.from_peft_type(**peft_config)
        config.inference_mode = True
        model = get_peft_model(model, config)
        model.eval()
    result = set_peft_model_state_dict(model, weights)
    unexpected = list(getattr(result, "unexpected_keys", None) or [])
    if unexpected:
        raise KeyError(f"rollout adapter has no parameter(s) {', '.join(unexpected[:5])}")
    return model
