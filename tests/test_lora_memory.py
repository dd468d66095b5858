"""bench/lora_memory.py's arithmetic: the parameter counts it derives from Qwen3's config fields
match the published sizes, and its LoRA count matches what peft builds with the project's own
adapter config (`train_backend.local.adapters.lora_config`) on a small Qwen3 made here."""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from core.errors import MarsError

BENCH_FILE = Path(__file__).resolve().parents[1] / "bench" / "lora_memory.py"


@functools.cache
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("lora_memory_bench", BENCH_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_the_qwen3_counts_are_the_published_sizes() -> None:
    """Exact counts (what transformers builds from these configs) and the model cards' figures:
    4.0B (3.6B non-embedding, tied embeddings) and 8.2B (6.95B, untied)."""
    counts = {name: bench().parameter_counts(c) for name, c in bench().QWEN3_CONFIGS.items()}
    assert counts["Qwen3-4B"].total == 4_022_468_096
    assert counts["Qwen3-8B"].total == 8_190_735_360
    for name, found in counts.items():
        bench().check_published(name, found)


def test_a_count_off_the_model_card_is_refused() -> None:
    config = dict(bench().QWEN3_CONFIGS["Qwen3-8B"], tie_word_embeddings=True)  # 0.62B fewer
    with pytest.raises(MarsError, match=r"model card says 8\.2B"):
        bench().check_published("Qwen3-8B", bench().parameter_counts(config))


# Every dimension different, so a swapped or misread field changes the count.
TINY: dict[str, Any] = {
    "hidden_size": 48,
    "intermediate_size": 80,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 20,
    "vocab_size": 100,
}


@pytest.mark.filterwarnings("ignore::FutureWarning")  # transformers deprecations peft calls
@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("rank", [4, 16])
def test_the_formulas_match_transformers_and_peft_on_a_small_qwen3(tied: bool, rank: int) -> None:
    import torch
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM, Qwen3Config

    from train_backend.local.adapters import lora_config
    from train_backend.mas.config import LoraSettings

    config = dict(TINY, tie_word_embeddings=tied)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(Qwen3Config(**config))
    assert sum(p.numel() for p in model.parameters()) == bench().parameter_counts(config).total

    adapted = get_peft_model(model, lora_config(LoraSettings(rank=rank)))
    trained = {n: p.numel() for n, p in adapted.named_parameters() if p.requires_grad}
    assert sum(trained.values()) == bench().lora_parameters(config, rank)
    layers = {name.split(".lora_")[0].rsplit(".", 1)[-1] for name in trained}
    assert layers == set(bench().BLOCK_LINEARS)  # "all-linear": the blocks' layers, no lm_head


def test_lora_per_role_adds_only_an_adapter_and_its_rollout_copy_per_role() -> None:
    b = bench()
    config = b.QWEN3_CONFIGS["Qwen3-8B"]
    counts, adapter = b.parameter_counts(config), b.lora_parameters(config, 16)
    rows = b.memory_rows("Qwen3-8B", counts, adapter, [1, 2, 3], b.FROZEN_BYTES["bf16"])
    lora = [row for row in rows if row.scheme == b.LORA]
    full = [row for row in rows if row.scheme == b.FULL]
    shared = rows[0]
    assert [row.reference for row in lora] == [0, 0, 0]  # the base with the adapters off
    step = adapter * (b.TRAINED_BYTES + b.ROLLOUT_BYTES)
    assert [row.total - lora[0].total for row in lora] == [0, step, 2 * step]
    assert [row.total for row in full] == [shared.total * n for n in (1, 2, 3)]
    assert shared.total == counts.total * (16 + 2 + 2)
    assert lora[-1].total <= b.TARGET_RATIO * shared.total
