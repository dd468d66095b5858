"""LoRA adapters on one base model: one per policy, switched per role (docs/mas_training.md).

One base model sits in memory; each policy is a named PEFT adapter on it. Whoever uses a policy
(generation, the update, its log-probs) activates its adapter first (`core.causal_lm.activate`).
The KL reference is the base with every adapter switched off (`BaseModel`), so no second model
is loaded. A checkpoint holds only the adapter (core.checkpoints: `adapter_config.json`,
`adapter_model.safetensors`, and the base named in `checkpoint.json`).
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.causal_lm import Policy, load_policy
from core.checkpoints import (
    ADAPTER_CONFIG_FILE,
    ADAPTER_WEIGHTS_FILE,
    AdapterInfo,
    checked_adapter,
)
from core.errors import MarsError
from core.fingerprints import model_fingerprint

if TYPE_CHECKING:
    from train_backend.mas.config import LoraSettings


def lora_config(settings: LoraSettings) -> Any:
    from peft import LoraConfig

    return LoraConfig(
        r=settings.rank,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=settings.target_modules,
        task_type="CAUSAL_LM",
    )


def adapter_policies(
    base: Policy,
    names: Sequence[str],
    settings: LoraSettings,
    saved: dict[str, Path] | None = None,
) -> dict[str, Policy]:
    """One policy per name, all sharing `base`'s weights: a fresh adapter each (LoRA's B is
    zero, so step 0 generates with the base), or the one saved in `saved[name]` (resume)."""
    from peft import PeftModel, get_peft_model

    saved = saved or {}
    model: Any = base.model
    with warnings.catch_warnings():  # transformers' deprecation notes on what PEFT calls
        warnings.simplefilter("ignore", FutureWarning)
        for index, name in enumerate(names):
            folder = saved.get(name)
            if index == 0:
                model = (
                    PeftModel.from_pretrained(
                        model, str(folder), adapter_name=name, is_trainable=True
                    )
                    if folder is not None
                    else get_peft_model(model, lora_config(settings), adapter_name=name)
                )
            elif folder is not None:
                model.load_adapter(str(folder), adapter_name=name, is_trainable=True)
            else:
                model.add_adapter(name, lora_config(settings))
    model.eval()
    return {name: dataclasses.replace(base, model=model, adapter=name) for name in names}


def adapter_parameters(policy: Policy) -> list[Any]:
    """The trainable tensors of `policy`'s own adapter (what its optimiser updates)."""
    marker = f".{policy.adapter}."
    return [param for name, param in policy.model.named_parameters() if marker in name]


class BaseModel:
    """The shared model with every adapter off: the KL reference, without a second copy."""

    def __init__(self, peft_model: Any) -> None:
        self.peft_model = peft_model

    def get_base_model(self) -> Any:  # read by batcher.cache_keyword
        return self.peft_model.get_base_model()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with self.peft_model.disable_adapter():
            return self.peft_model(*args, **kwargs)


def save_adapter(policy: Policy, folder: Path, *, base: str) -> AdapterInfo:
    """Write `policy`'s adapter (PEFT's files at the top of `folder`) and its tokenizer; return
    what checkpoint.json must record about it."""
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file

    name = policy.adapter
    if name is None:
        raise MarsError("save_adapter: the policy is a whole model, not an adapter")
    state = get_peft_model_state_dict(policy.model, adapter_name=name)
    save_file(
        {key: value.contiguous() for key, value in state.items()}, folder / ADAPTER_WEIGHTS_FILE
    )
    config = policy.model.peft_config[name].to_dict()
    config["base_model_name_or_path"] = base
    config["inference_mode"] = True
    (folder / ADAPTER_CONFIG_FILE).write_text(json.dumps(config, indent=2, default=list) + "\n")
    policy.tokenizer.save_pretrained(folder)
    return AdapterInfo(name=name, base=base, base_fingerprint=model_fingerprint(base))


def load_merged(folder: Path) -> Policy:
    """A whole-model policy from an adapter checkpoint: its base with the adapter merged in."""
    from peft import PeftModel

    info = checked_adapter(folder)
    base = load_policy(info.base, tokenizer_from=folder)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        merged = PeftModel.from_pretrained(base.model, str(folder)).merge_and_unload()
    merged.eval()
    return dataclasses.replace(base, model=merged, source=str(folder))


def load_any(folder: str | Path) -> Policy:
    """A policy from a whole-model folder, or from an adapter checkpoint (merged)."""
    from core.checkpoints import is_adapter

    return load_merged(Path(folder)) if is_adapter(Path(folder)) else load_policy(folder)
