"""What the preflight reads about a model without the network: its config.json and weight index.

A model is a local folder or a hub id; a hub id is looked up in the Hugging Face hub cache only
(`HF_HUB_CACHE`, else `HF_HOME/hub`, else `~/.cache/huggingface/hub`, read at each call). When
nothing is found the caller says so; nothing here downloads.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Bytes per element of the dtypes a config.json or a safetensors header names.
DTYPE_BYTES = {
    "float32": 4, "F32": 4, "float16": 2, "F16": 2, "bfloat16": 2, "BF16": 2,
    "float64": 8, "F64": 8, "int64": 8, "I64": 8, "int32": 4, "I32": 4, "int16": 2, "I16": 2,
    "int8": 1, "I8": 1, "uint8": 1, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1,
}  # fmt: skip
# vLLM derives a model's longest context from the smallest of these config keys.
LENGTH_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length")


def hub_cache_dir() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser()
    return cache / "huggingface" / "hub"


def model_file(model: str, filename: str) -> Path | None:
    """`filename` of a local model folder, or of a hub id's cached `main` snapshot."""
    folder = Path(model).expanduser()
    if folder.is_dir():
        path = folder / filename
        return path if path.is_file() else None
    if model.count("/") != 1:
        return None
    repo = hub_cache_dir() / ("models--" + model.replace("/", "--"))
    try:
        revision = (repo / "refs" / "main").read_text().strip()
    except OSError:
        return None
    path = repo / "snapshots" / revision / filename
    return path if path.is_file() else None


def where_looked(model: str) -> str:
    folder = Path(model).expanduser()
    if folder.is_dir():
        return f"the folder {folder}"
    return f"a local folder or the hub cache ({hub_cache_dir()})"


@dataclass(frozen=True)
class ModelConfig:
    path: Path
    values: dict[str, Any]

    @property
    def text(self) -> dict[str, Any]:
        """The language model's settings (a multimodal config nests them in text_config)."""
        nested = self.values.get("text_config")
        if isinstance(nested, dict) and not any(k in self.values for k in LENGTH_KEYS):
            return nested
        return self.values


def read_model_config(model: str) -> ModelConfig | None:
    path = model_file(model, "config.json")
    if path is None:
        return None
    try:
        values = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return ModelConfig(path, values) if isinstance(values, dict) else None


def max_context(config: ModelConfig) -> int | None:
    """The longest context vLLM derives: the smallest length key, times a RoPE scaling factor
    (YaRN scales `original_max_position_embeddings`)."""
    text = config.text
    lengths = [int(text[k]) for k in LENGTH_KEYS if isinstance(text.get(k), int)]
    if not lengths:
        return None
    longest = min(lengths)
    scaling = text.get("rope_scaling") or text.get("rope_parameters")
    if not isinstance(scaling, dict):
        return longest
    kind, factor = scaling.get("rope_type") or scaling.get("type"), scaling.get("factor")
    if kind in ("yarn", "linear", "dynamic") and isinstance(factor, int | float) and factor > 1:
        if kind == "yarn":
            longest = int(scaling.get("original_max_position_embeddings") or longest)
        longest = int(longest * factor)
    return longest


@dataclass(frozen=True)
class ParameterCount:
    count: int
    how: str  # where the number comes from


def safetensors_elements(path: Path) -> int:
    """Elements in a .safetensors file, from its JSON header (the tensors are not read)."""
    with path.open("rb") as handle:
        (size,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(size))
    total = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        elements = 1
        for dim in entry["shape"]:
            elements *= int(dim)
        total += elements
    return total


def parameter_count(model: str, config: ModelConfig | None) -> ParameterCount | None:
    """Exact from the weights' headers or index when present, else estimated from config.json."""
    single = model_file(model, "model.safetensors")
    if single is not None:
        try:
            return ParameterCount(safetensors_elements(single), f"{single.name} header")
        except (OSError, ValueError, KeyError, struct.error):
            pass
    index = model_file(model, "model.safetensors.index.json")
    dtype = str((config.values.get("dtype") or config.values.get("torch_dtype")) if config else "")
    if index is not None and dtype.removeprefix("torch.") in DTYPE_BYTES:
        try:
            total = int(json.loads(index.read_text())["metadata"]["total_size"])
            return ParameterCount(total // DTYPE_BYTES[dtype.removeprefix("torch.")], index.name)
        except (OSError, ValueError, KeyError, TypeError):
            pass
    if config is not None and (estimate := decoder_parameters(config.text)) is not None:
        return ParameterCount(estimate, "estimated from config.json")
    return None


def decoder_parameters(text: dict[str, Any]) -> int | None:
    """A dense decoder's parameters (Llama/Qwen layout: attention, gated MLP, two norms a layer;
    biases and per-head norms are left out, well under 1%)."""
    keys = ("vocab_size", "hidden_size", "num_hidden_layers", "intermediate_size")
    if not all(isinstance(text.get(k), int) for k in keys) or text.get("num_experts"):
        return None
    vocab, hidden, layers, inner = (int(text[k]) for k in keys)
    heads = int(text.get("num_attention_heads") or 1)
    kv_heads = int(text.get("num_key_value_heads") or heads)
    head_dim = int(text.get("head_dim") or hidden // heads)
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
    layer = attention + 3 * hidden * inner + 2 * hidden
    embeddings = vocab * hidden * (1 if text.get("tie_word_embeddings", False) else 2)
    return embeddings + layers * layer + hidden


# The linear layers of a dense decoder block: (name, inputs, outputs) as functions of
# (hidden, inner, heads x head_dim, kv heads x head_dim). PEFT's "all-linear" adapts all of them.
_DECODER_LINEARS = (
    ("q_proj", lambda h, i, q, kv: (h, q)),
    ("k_proj", lambda h, i, q, kv: (h, kv)),
    ("v_proj", lambda h, i, q, kv: (h, kv)),
    ("o_proj", lambda h, i, q, kv: (q, h)),
    ("gate_proj", lambda h, i, q, kv: (h, i)),
    ("up_proj", lambda h, i, q, kv: (h, i)),
    ("down_proj", lambda h, i, q, kv: (i, h)),
)


def lora_parameters(text: dict[str, Any], rank: int, target_modules: Any) -> int | None:
    """A LoRA adapter's parameters on a dense decoder: rank x (inputs + outputs) for every
    adapted linear layer of every block (None when the config is not a dense decoder's)."""
    keys = ("hidden_size", "num_hidden_layers", "intermediate_size")
    if not all(isinstance(text.get(k), int) for k in keys) or text.get("num_experts"):
        return None
    hidden, layers, inner = (int(text[k]) for k in keys)
    heads = int(text.get("num_attention_heads") or 1)
    head_dim = int(text.get("head_dim") or hidden // heads)
    kv = int(text.get("num_key_value_heads") or heads) * head_dim
    wanted = None if target_modules in (None, "all-linear") else set(target_modules)
    if isinstance(target_modules, str) and wanted is not None:
        wanted = {target_modules}
    per_layer = sum(
        rank * sum(shape(hidden, inner, heads * head_dim, kv))
        for name, shape in _DECODER_LINEARS
        if wanted is None or name in wanted
    )
    return layers * per_layer
