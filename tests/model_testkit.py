"""Small models the tests build for themselves, so no test depends on what the MARS cache holds.

Each is built on first use beside the tiny model (under `$MARS_CACHE_DIR`, else ~/.cache/mars)
with fixed seeds, in a folder whose name is a digest of everything that decides its weights: a
cold cache builds it within the test session, a warm one reuses it, and a changed recipe (ours or
the tiny model's) gets a new folder instead of a stale model.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path

from core.files import build_once
from core.tiny_model import ensure_tiny_model, read_build_info
from train_backend.pretrain.build import REPORT_FILE, PretrainSettings, pretrain_tiny_model

# Kuhn poker's format only, half the examples in each prompt style (the verl CPU training test
# plays `full` prompts, the agent-loop and exploitability tests `compact` ones), no strategy
# beyond the teachers' (random plus CFR): about fifteen seconds on one core. Measured on all 12
# Kuhn positions, 16 samples each: 2-4% invalid replies at temperature 1 in either style, none at
# 0.6 (the base tiny model's are nearly all invalid). Batches of 16 take twice as long for the
# same rates; 16 steps leave two thirds of the full-style replies invalid.
KUHN_FORMAT = PretrainSettings(
    games=["kuhn_poker"],
    examples=160,
    steps=30,
    batch_size=8,
    warmup_steps=3,
    full_share=0.5,
    arithmetic_share=0.0,
    eval_positions=0,
    eval_full_positions=0,
    seed=0,
)

# Qwen3-4B's config.json (docs/references.md §12.9), for tests that size it without weights
QWEN3_4B = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "dtype": "bfloat16",
    "vocab_size": 151936, "hidden_size": 2560, "num_hidden_layers": 36,
    "intermediate_size": 9728, "num_attention_heads": 32, "num_key_value_heads": 8,
    "head_dim": 128, "tie_word_embeddings": True, "max_position_embeddings": 40960,
}  # fmt: skip


def format_model(settings: PretrainSettings, name: str) -> Path:
    """The tiny model format-pre-trained with `settings`, built once per recipe."""
    base = ensure_tiny_model()
    recipe = [read_build_info(base).get("recipe"), settings.recipe()]
    digest = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]
    folder = base.parent / f"test-{name}-{digest}"
    return build_once(  # the other xdist worker waits for this build instead of its own
        folder,
        lambda: (folder / REPORT_FILE).is_file(),
        lambda: pretrain_tiny_model(base, folder, settings=settings),
    )


@functools.cache
def kuhn_model() -> Path:
    """The tiny model after a few seconds of format pre-training on Kuhn poker prompts, full and
    compact: it answers them with a legal move, so games reach real outcomes (the base tiny
    model's replies are almost never legal moves)."""
    return format_model(KUHN_FORMAT, "kuhn-format")


@functools.cache
def mas_model() -> Path:
    """The tiny model taught the reasoner_tool roles' reply formats for about a minute (120 steps,
    one stage, no copying stage: it writes programs of the right shape that rarely copy the
    numbers). Its branches of one call still earn different returns, from broken formats and
    chance answers: 21 of 40 tool calls at temperature 1, 34 of 40 at 1.3 (K = 4, sampled)."""
    from train_backend.pretrain.mas_start import (
        QUICK_START_NAME,
        QUICK_WORKFLOW_START,
        ensure_workflow_start,
    )

    # the built-in start `tiny_mas_quick` (`mars tiny-model start tiny_mas_quick`)
    return ensure_workflow_start(QUICK_WORKFLOW_START, name=QUICK_START_NAME)
