"""GPU memory of one policy per role on one 80 GB GPU, from the models' configs: a LoRA adapter
per role on one base against a full copy per role, for Qwen3-4B and Qwen3-8B with 2 and 3 roles.

Nothing is loaded or run: parameter counts come from each model's config.json fields (held below,
the hub is not reachable from every machine), checked against the sizes Qwen publishes and,
unless `--no-meta`, against transformers' own model built on the `meta` device (no weights), with
the adapters counted by peft on that model through the project's own adapter config
(`train_backend.local.adapters.lora_config`: rank 16, alpha 32, every linear layer of the blocks).

The accounting (verl's FSDP actor with its default fp32 weights, bf16 compute; vLLM rollout):
- a trained parameter costs 16 bytes: fp32 weight 4 + fp32 gradient 4 + AdamW's two fp32
  moments 8 (full fine-tuning: every parameter; LoRA: the adapters' A and B);
- a frozen weight (the LoRA base inside the actor, the KL reference) costs 2 bytes (bf16;
  `--frozen-dtype fp32` for verl's default `model_dtype: fp32`, which loads them in fp32);
- the rollout engine (vLLM) holds its own bf16 copy: a whole model per policy for full copies,
  one base plus every role's adapter for LoRA (vLLM multi-LoRA, `max_loras` = roles);
- the reference: one per policy for full copies (the project keeps one per policy today); none
  for LoRA, whose reference is the base with the adapters switched off (verl: `ref_in_actor`);
- nothing is offloaded to the CPU. Left out, and what the room left on the GPU is for:
  activations, logits, vLLM's KV cache, FSDP's transient bf16 gathers, CUDA context and
  allocator slack. A scheme "fits" when at least `--headroom-gib` (20) GiB are left for them.

Target (issue 39): LoRA per role costs at most 1.2x the memory of one shared (full) policy,
for Qwen3-8B with 3 roles, and every LoRA-per-role setting fits.

Run: .venv/bin/python bench/lora_memory.py [--frozen-dtype bf16] [--gpu-gib 80] [--no-meta]
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import DryRun, add_dry_run, int_list, run_dry
from core.errors import MarsError
from train_backend.mas.config import LoraSettings

# config.json of Qwen/Qwen3-4B and Qwen/Qwen3-8B on the Hugging Face hub (the fields that decide
# the parameter count; both have attention_bias false and qk-norm of head_dim per layer).
QWEN3_CONFIGS: dict[str, dict[str, Any]] = {
    "Qwen3-4B": {
        "hidden_size": 2560,
        "intermediate_size": 9728,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
    },
    "Qwen3-8B": {
        "hidden_size": 4096,
        "intermediate_size": 12288,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 151936,
        "tie_word_embeddings": False,
    },
}
# The model cards' "Number of Parameters" and "(Non-Embedding)", in billions, as written there:
# a count must round to them.
PUBLISHED: dict[str, tuple[str, str]] = {"Qwen3-4B": ("4.0", "3.6"), "Qwen3-8B": ("8.2", "6.95")}

BLOCK_LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
TRAINED_BYTES = 16  # fp32 weight + fp32 gradient + AdamW exp_avg + exp_avg_sq (fp32)
FROZEN_BYTES = {"bf16": 2, "fp32": 4}
ROLLOUT_BYTES = 2  # vLLM's bf16 copy
GIB = 2**30
TARGET_RATIO = 1.2  # LoRA per role over one shared policy (issue 39)
DEFAULT_HEADROOM_GIB = 20.0
SHARED, FULL, LORA = "one shared policy (full)", "full copy per role", "LoRA per role, one base"


@dataclasses.dataclass(frozen=True)
class Counts:
    total: int
    embedding: int  # input embedding, plus the output layer when it is not tied

    @property
    def non_embedding(self) -> int:
        return self.total - self.embedding


def block_linears(config: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """(in, out) features of each linear layer of one transformer block (no biases in Qwen3)."""
    hidden, inner = config["hidden_size"], config["intermediate_size"]
    q = config["num_attention_heads"] * config["head_dim"]
    kv = config["num_key_value_heads"] * config["head_dim"]
    return {
        "q_proj": (hidden, q),
        "k_proj": (hidden, kv),
        "v_proj": (hidden, kv),
        "o_proj": (q, hidden),
        "gate_proj": (hidden, inner),
        "up_proj": (hidden, inner),
        "down_proj": (inner, hidden),
    }


def parameter_counts(config: dict[str, Any]) -> Counts:
    """A Qwen3 causal LM's parameters from its config: per block the seven projections, two
    RMSNorms of hidden_size and the q/k norms of head_dim; the embedding, the final norm, and
    the output layer unless tied to the embedding."""
    hidden = config["hidden_size"]
    block = sum(i * o for i, o in block_linears(config).values())
    block += 2 * hidden + 2 * config["head_dim"]
    embedding = config["vocab_size"] * hidden
    if not config["tie_word_embeddings"]:
        embedding *= 2
    return Counts(config["num_hidden_layers"] * block + hidden + embedding, embedding)


def lora_parameters(
    config: dict[str, Any], rank: int, modules: Sequence[str] = BLOCK_LINEARS
) -> int:
    """One LoRA adapter's parameters: A (rank x in) and B (out x rank) on each adapted layer."""
    shapes = block_linears(config)
    return config["num_hidden_layers"] * sum(rank * sum(shapes[name]) for name in modules)


def check_published(name: str, counts: Counts) -> None:
    """The counts round to the model card's figures, at the card's own precision."""
    for label, count, text in (
        ("parameters", counts.total, PUBLISHED[name][0]),
        ("non-embedding parameters", counts.non_embedding, PUBLISHED[name][1]),
    ):
        decimals = len(text.partition(".")[2])
        if abs(count / 1e9 - float(text)) > 0.5 * 10**-decimals:
            raise MarsError(
                f"{name}: {count:,} {label} from its config, but the model card says {text}B"
            )


def meta_counts(config: dict[str, Any], settings: LoraSettings) -> tuple[int, int, set[str]]:
    """transformers' Qwen3 built on the meta device from `config` (no weights): its parameter
    count, and the trainable parameters and adapted layer names of the project's LoRA adapter
    (peft) on it."""
    import warnings

    import torch
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM, Qwen3Config

    from train_backend.local.adapters import lora_config

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(Qwen3Config(**config))
    total = sum(p.numel() for p in model.parameters())  # tied weights counted once
    with warnings.catch_warnings():  # transformers' deprecation notices that peft triggers
        warnings.simplefilter("ignore", FutureWarning)
        adapted = get_peft_model(model, lora_config(settings))
    trained = [(n, p) for n, p in adapted.named_parameters() if p.requires_grad]
    names = {n.split(".lora_")[0].rsplit(".", 1)[-1] for n, _ in trained}
    return total, sum(p.numel() for _, p in trained), names


@dataclasses.dataclass(frozen=True)
class Row:
    model: str
    roles: int | None  # None: one policy acts for every role
    scheme: str
    trainable: int
    actor: int  # bytes: weights, gradients, AdamW state
    reference: int
    rollout: int

    @property
    def total(self) -> int:
        return self.actor + self.reference + self.rollout


def memory_rows(
    name: str, counts: Counts, adapter: int, roles: Sequence[int], frozen: int
) -> list[Row]:
    """One shared full policy, then for each number of roles a full copy and a LoRA adapter
    per role, with the bytes each keeps on the GPU (the module docstring's accounting)."""
    p = counts.total
    rows = [Row(name, None, SHARED, p, p * TRAINED_BYTES, p * frozen, p * ROLLOUT_BYTES)]
    for n in roles:
        full = n * p
        rows.append(Row(name, n, FULL, full, full * TRAINED_BYTES, full * frozen,
                        full * ROLLOUT_BYTES))  # fmt: skip
        adapters = n * adapter
        rows.append(Row(name, n, LORA, adapters, p * frozen + adapters * TRAINED_BYTES, 0,
                        (p + adapters) * ROLLOUT_BYTES))  # fmt: skip
    return rows


def _params(n: int) -> str:
    return f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:.1f} M"


def _gib(n: int) -> str:
    return f"{n / GIB:.1f}"


def table(rows: Sequence[Row], gpu_gib: float, headroom_gib: float) -> str:
    header = [
        "model", "roles", "scheme", "trainable params", "actor: weights + grads + AdamW (GiB)",
        "reference (GiB)", "rollout, vLLM (GiB)", "total (GiB)",
        f"left of {gpu_gib:g} GiB", f"fits, >= {headroom_gib:g} GiB left?",
    ]  # fmt: skip
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        left = gpu_gib - row.total / GIB
        cells = [
            row.model, "any" if row.roles is None else str(row.roles), row.scheme,
            _params(row.trainable), _gib(row.actor), _gib(row.reference), _gib(row.rollout),
            _gib(row.total), f"{left:.1f}", "yes" if left >= headroom_gib else "no",
        ]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def checked_args(args: argparse.Namespace) -> list[int]:
    roles = int_list(args.roles, "--roles")
    if min(roles) < 1 or args.rank < 1 or args.gpu_gib <= 0 or args.headroom_gib < 0:
        raise MarsError(
            "--roles and --rank must be at least 1, --gpu-gib above 0, --headroom-gib not negative"
        )
    return roles


def dry_run(dry: DryRun, args: argparse.Namespace) -> None:
    """Each config as transformers' Qwen3Config accepts it, its counts against the model card,
    and the adapter settings as the project validates them."""
    from transformers import Qwen3Config

    checked_args(args)
    dry.config(lambda: LoraSettings(rank=args.rank, alpha=args.alpha), "adapter setting")
    for name, config in QWEN3_CONFIGS.items():
        dry.config(lambda config=config: Qwen3Config(**config), "model config")
        check_published(name, parameter_counts(config))
        dry.count("published size")
    if not args.no_meta and importlib.util.find_spec("peft") is None:
        dry.note("peft is not installed: the meta-device check needs it (or --no-meta)")


def main() -> None:
    defaults = LoraSettings()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--roles", default="2,3", help="numbers of roles, comma-separated")
    parser.add_argument("--rank", type=int, default=defaults.rank)
    parser.add_argument("--alpha", type=float, default=defaults.alpha, help="no effect on memory")
    parser.add_argument("--frozen-dtype", choices=sorted(FROZEN_BYTES), default="bf16",
                        help="LoRA base and reference dtype (verl's default: fp32)")  # fmt: skip
    parser.add_argument("--gpu-gib", type=float, default=80.0)
    parser.add_argument("--headroom-gib", type=float, default=DEFAULT_HEADROOM_GIB,
                        help="room left for activations and the KV cache")  # fmt: skip
    parser.add_argument("--no-meta", action="store_true", help="skip the meta-device check")
    add_dry_run(parser)
    args = parser.parse_args()
    if args.dry_run:
        run_dry(lambda dry: dry_run(dry, args))
        return
    try:
        roles = checked_args(args)
    except MarsError as exc:
        raise SystemExit(str(exc)) from None

    settings = LoraSettings(rank=args.rank, alpha=args.alpha)
    rows: list[Row] = []
    meta_checked = not args.no_meta
    for name, config in QWEN3_CONFIGS.items():
        counts = parameter_counts(config)
        adapter = lora_parameters(config, args.rank)
        try:
            check_published(name, counts)
        except MarsError as exc:
            raise SystemExit(str(exc)) from None
        line = (
            f"{name}: {counts.total:,} parameters ({counts.non_embedding:,} non-embedding; "
            f"card: {PUBLISHED[name][0]}B, {PUBLISHED[name][1]}B); LoRA rank {args.rank} on "
            f"{len(BLOCK_LINEARS)} linears x {config['num_hidden_layers']} blocks: {adapter:,}"
        )
        if meta_checked:
            total, trained, adapted = meta_counts(config, settings)
            if (total, trained, adapted) != (counts.total, adapter, set(BLOCK_LINEARS)):
                raise SystemExit(
                    f"{name}: the config formula says {counts.total:,} parameters and a "
                    f"{adapter:,}-parameter adapter on {sorted(BLOCK_LINEARS)}; transformers "
                    f"and peft on the meta device say {total:,} and {trained:,} on "
                    f"{sorted(adapted)}"
                )
            line += "; transformers + peft on the meta device agree"
        print(line)
        rows += memory_rows(name, counts, adapter, roles, FROZEN_BYTES[args.frozen_dtype])

    print(
        f"\nbytes per parameter: trained {TRAINED_BYTES} (fp32 weight, grad, 2 AdamW moments), "
        f"frozen {FROZEN_BYTES[args.frozen_dtype]} ({args.frozen_dtype}), rollout "
        f"{ROLLOUT_BYTES} (bf16); activations and KV cache excluded\n"
    )
    print(table(rows, args.gpu_gib, args.headroom_gib))

    def find(model: str, n: int | None, scheme: str) -> Row:
        return next(r for r in rows if (r.model, r.roles, r.scheme) == (model, n, scheme))

    def fits(row: Row) -> bool:
        return args.gpu_gib - row.total / GIB >= args.headroom_gib

    # The figure: the larger model with the most roles.
    model, n = list(QWEN3_CONFIGS)[-1], max(roles)
    lora, full, shared = find(model, n, LORA), find(model, n, FULL), find(model, None, SHARED)
    config, frozen = QWEN3_CONFIGS[model], FROZEN_BYTES[args.frozen_dtype]
    one_adapter = memory_rows(
        model, parameter_counts(config), lora_parameters(config, args.rank), [1], frozen
    )[-1]
    lora_fit = all(fits(row) for row in rows if row.scheme == LORA)
    ratio = lora.total / shared.total
    print(
        json.dumps(
            {
                "metric": f"lora_per_role_over_one_shared_policy_{model.lower().replace('-', '_')}"
                f"_{n}_roles",
                "value": round(ratio, 4),
                "target": TARGET_RATIO,
                "lora_per_role_gib": round(lora.total / GIB, 2),
                "one_shared_full_gib": round(shared.total / GIB, 2),
                "full_per_role_gib": round(full.total / GIB, 2),
                "lora_over_full_per_role": round(lora.total / full.total, 4),
                "lora_over_one_shared_lora": round(lora.total / one_adapter.total, 4),
                "every_lora_per_role_fits": lora_fit,
                "frozen_dtype": args.frozen_dtype,
                "gpu_gib": args.gpu_gib,
                "headroom_gib": args.headroom_gib,
                "meta_checked": meta_checked,
                "met": ratio <= TARGET_RATIO and lora_fit,
            }
        )
    )


if __name__ == "__main__":
    main()
