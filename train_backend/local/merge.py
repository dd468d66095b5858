"""An adapter checkpoint merged into its base: one whole Hugging Face model folder
(`mars export CHECKPOINT --merge -o DIR`), for whoever wants one plain model per role.

The folder holds config.json, the safetensors weights, the generation config and the tokenizer,
so `AutoModelForCausalLM.from_pretrained`, `transformers serve` and `vllm serve` load it like any
model; `merged_from.json` says which adapter and base it came from. The weights are saved in the
base's own dtype (the merge runs in float32). It is built under a hidden name beside DIR and
renamed into place, so DIR is never seen half written.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from core.checkpoints import CHECKPOINTS_DIR, checked_adapter, complete_checkpoints, is_adapter
from core.errors import MarsError
from core.fingerprints import model_fingerprint

MERGED_FROM_FILE = "merged_from.json"


def adapter_checkpoints_under(folder: Path) -> list[Path]:
    """The adapter checkpoints of a run: `checkpoints/step_N` and `policies/*/checkpoints/...`,
    the last step of each."""
    roots = [folder / CHECKPOINTS_DIR, *sorted(folder.glob(f"policies/*/{CHECKPOINTS_DIR}"))]
    found = []
    for root in roots:
        steps = complete_checkpoints(root)
        if steps and is_adapter(steps[-1][1]):
            found.append(steps[-1][1])
    return found


def check_merge_source(folder: Path) -> None:
    """One line when `folder` is not an adapter checkpoint (naming the ones under it, if any)."""
    if not folder.is_dir():
        raise MarsError(f"{folder}: no such folder")
    if is_adapter(folder):
        return
    under = adapter_checkpoints_under(folder)
    hint = f"; its adapters: {', '.join(map(str, under))}" if under else ""
    raise MarsError(
        f"{folder} is not a LoRA adapter checkpoint (no adapter_config.json): --merge takes "
        f"one, e.g. RUN/policies/NAME/checkpoints/step_N{hint}"
    )


def check_merge_target(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise MarsError(f"-o {out} exists and is not empty: give a new folder")


def write_merged(adapter: Path, out: Path) -> Path:
    """Merge `adapter` into its base and write the whole model to `out` (absent or empty)."""
    import torch
    from transformers import AutoConfig

    from train_backend.local.adapters import load_merged
    from train_backend.local.checkpoint import keep_tokenizer_class

    check_merge_source(adapter)
    check_merge_target(out)
    info = checked_adapter(adapter)  # a missing or changed base: refused in one line
    policy = load_merged(adapter)
    dtype = getattr(AutoConfig.from_pretrained(info.base), "dtype", None)
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype, None)
    if isinstance(dtype, torch.dtype) and dtype.is_floating_point and dtype != torch.float32:
        policy.model.to(dtype)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        policy.model.save_pretrained(staging, safe_serialization=True)
        policy.tokenizer.save_pretrained(staging)
        if Path(info.base).is_dir():
            keep_tokenizer_class(Path(info.base), staging)
        record = {
            "adapter": str(adapter.resolve()),
            "adapter_fingerprint": model_fingerprint(str(adapter)),
            **info.as_json(),  # kind, name, base, base_fingerprint
        }
        (staging / MERGED_FROM_FILE).write_text(json.dumps(record, indent=2) + "\n")
        if out.exists():
            out.rmdir()  # empty, checked above
        staging.rename(out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out
