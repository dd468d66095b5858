"""The embedded tiny model: a ~1M-parameter Qwen3 checkpoint the project builds itself.

No download: the byte-level BPE tokenizer is trained with `tokenizers` on synthetic text from
`core.tiny_corpus`, the weights are initialised from the seed and then pre-trained for a few
seconds on the same kind of text so the model already replies in the expected layout
(`<answer>...</answer>`, `\\boxed{N}`). The result is an ordinary Hugging Face folder that
`transformers serve` and `AutoModelForCausalLM.from_pretrained` load as is.

torch and transformers are imported inside the functions so that importing this module (and the
CLI) stays fast.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.errors import MarsError
from core.files import build_once, mars_cache_dir
from core.reply_tuning import Row, fine_tune_on_replies, model_loss, torch_threads
from core.tiny_corpus import (
    CORPUS_VERSION,
    END_OF_TEXT,
    IM_END,
    IM_START,
    THINK_CLOSE,
    THINK_OPEN,
    render_chat,
    synthetic_conversations,
    synthetic_documents,
)

if TYPE_CHECKING:
    from tokenizers import Tokenizer
    from transformers import PreTrainedModel, PreTrainedTokenizerFast

TINY_MODEL_VERSION = "tiny-model-v1"
VOCAB_SIZE = 1024
# Ids 0..4 in this order; `<think>` tags are not "special" so decoding keeps them in the text.
SPECIAL_TOKENS: tuple[str, ...] = (END_OF_TEXT, IM_START, IM_END, THINK_OPEN, THINK_CLOSE)
_SKIPPABLE = {END_OF_TEXT, IM_START, IM_END}

CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)

MODEL_SHAPE: dict[str, Any] = {
    "hidden_size": 128,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "intermediate_size": 384,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": True,
}

TOKENIZER_CORPUS_DOCS = 3000
# About ten seconds on one core. Measured on 40 held-out synthetic prompts (greedy): 32 replies
# carry an `<answer>`/`\\boxed{}`/`Answer:` and 14 name a legal action or the right answer;
# 200 steps (~30 s) reach 39 and 15.
PRETRAIN_STEPS = 80
PRETRAIN_BATCH = 8
PRETRAIN_LR = 5e-3
PRETRAIN_PROMPT_TAIL = 64

_MARKER_FILE = "mars_tiny_model.json"


def default_tiny_model_dir() -> Path:
    """`$MARS_CACHE_DIR/tiny-model-v1`, else `~/.cache/mars/tiny-model-v1`."""
    return mars_cache_dir() / TINY_MODEL_VERSION


def ensure_tiny_model() -> Path:
    """Return the default tiny model folder, building it there on first use.

    A folder built by an older recipe (other shape, corpus or pre-training) is rebuilt in place.
    """
    target = default_tiny_model_dir()

    def build() -> None:
        marker = target / _MARKER_FILE
        if not marker.is_file() and target.exists():
            # A folder without the marker is not ours to replace silently.
            raise MarsError(f"{target} exists but is not a built tiny model; remove it and retry")
        # The one long silent step of a first command (about 35 s on two cores): said to a
        # person at a terminal, on stderr (stdout may be a command's data).
        if sys.stderr.isatty():
            print(
                f"building the embedded tiny model in {target} (once; about half a minute)...",
                file=sys.stderr,
                flush=True,
            )
        # FileExistsError: a process without the lock (an older mars) finished first.
        with contextlib.suppress(FileExistsError):
            build_tiny_model(target, overwrite=marker.is_file(), pretrain_steps=PRETRAIN_STEPS)

    return build_once(target, lambda: _is_current(target), build)


def _is_current(folder: Path) -> bool:
    marker = folder / _MARKER_FILE
    if not marker.is_file():
        return False
    return json.loads(marker.read_text()).get("recipe") == build_recipe(PRETRAIN_STEPS)


def build_recipe(pretrain_steps: int) -> dict[str, Any]:
    """Everything besides the seed that decides the bytes of a build."""
    return {
        "version": TINY_MODEL_VERSION,
        "corpus": CORPUS_VERSION,
        "vocab_size": VOCAB_SIZE,
        "tokenizer_docs": TOKENIZER_CORPUS_DOCS,
        "shape": MODEL_SHAPE,
        "chat_template": CHAT_TEMPLATE,
        "pretrain": {
            "steps": pretrain_steps,
            "batch": PRETRAIN_BATCH,
            "lr": PRETRAIN_LR,
            "prompt_tail": PRETRAIN_PROMPT_TAIL,
        },
    }


def build_tiny_model(
    out_dir: Path,
    *,
    seed: int = 0,
    overwrite: bool = False,
    pretrain_steps: int = PRETRAIN_STEPS,
) -> Path:
    """Build the tokenizer and model into `out_dir` and return it.

    The folder appears whole or not at all: everything is written to a temporary sibling that is
    renamed into place at the end. The same seed gives byte-identical `model.safetensors` and
    `tokenizer.json`.
    """
    out_dir = Path(out_dir).expanduser().resolve()
    if out_dir.exists() and not overwrite:
        raise MarsError(f"{out_dir} already exists; pass --overwrite to replace it")
    if out_dir.exists() and not out_dir.is_dir():
        raise MarsError(f"{out_dir} is a file, not a folder")
    if out_dir.exists() and any(out_dir.iterdir()) and not (out_dir / _MARKER_FILE).is_file():
        # --overwrite replaces a tiny model or an empty folder, never someone's other files.
        raise MarsError(f"{out_dir} is not a tiny model folder; refusing to overwrite it")
    if pretrain_steps < 0:
        raise MarsError("pretrain_steps must be zero or more")
    out_dir.parent.mkdir(parents=True, exist_ok=True)

    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.building-", dir=out_dir.parent))
    staging.chmod(0o755)  # mkdtemp makes it private; the model folder is an ordinary one
    try:
        _build_into(staging, seed=seed, pretrain_steps=pretrain_steps)
        move_into_place(staging, out_dir, overwrite=overwrite)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out_dir


def move_into_place(staging: Path, out_dir: Path, *, overwrite: bool) -> None:
    """Rename a finished `staging` folder to `out_dir` (replacing it when `overwrite`); raise
    FileExistsError when another build put `out_dir` there first."""
    if overwrite and out_dir.exists():
        old = out_dir.with_name(f".{out_dir.name}.old-{os.getpid()}")
        out_dir.rename(old)
        staging.rename(out_dir)
        shutil.rmtree(old, ignore_errors=True)
        return
    try:
        staging.rename(out_dir)
    except OSError as exc:  # appeared meanwhile (a concurrent build)
        if out_dir.exists():
            raise FileExistsError(str(out_dir)) from exc
        raise


def _build_into(folder: Path, *, seed: int, pretrain_steps: int) -> None:
    from transformers.utils import logging as hf_logging

    tokenizer = train_tokenizer(seed)
    hf_tokenizer = wrap_tokenizer(tokenizer)
    model = init_model(hf_tokenizer, seed)
    if pretrain_steps:
        pretrain(model, hf_tokenizer, seed=seed, steps=pretrain_steps)
    bars_were_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        model.save_pretrained(folder, safe_serialization=True)
    finally:
        if bars_were_on:
            hf_logging.enable_progress_bar()
    hf_tokenizer.save_pretrained(folder)
    _portable_tokenizer_config(folder)
    _write_generation_config(folder, hf_tokenizer)
    info = {
        "version": TINY_MODEL_VERSION,
        "seed": seed,
        "pretrain_steps": pretrain_steps,
        "parameters": count_parameters(model),
        "recipe": build_recipe(pretrain_steps),
    }
    (folder / _MARKER_FILE).write_text(json.dumps(info, indent=2) + "\n")
    for path in folder.iterdir():
        path.chmod(0o644)  # safetensors are written private; these are ordinary shared files


def read_build_info(folder: Path) -> dict[str, Any]:
    """What `build_tiny_model` recorded: version, seed, pretrain_steps, parameters."""
    marker = Path(folder) / _MARKER_FILE
    if not marker.is_file():
        raise MarsError(f"{folder} is not a tiny model folder (no {_MARKER_FILE})")
    return json.loads(marker.read_text())


def _portable_tokenizer_config(folder: Path) -> None:
    """Name the tokenizer class that transformers 4.x knows too (5.x writes its new name)."""
    path = folder / "tokenizer_config.json"
    config = json.loads(path.read_text())
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def train_tokenizer(seed: int) -> Tokenizer:
    """A byte-level BPE tokenizer with `VOCAB_SIZE` entries, trained on the synthetic corpus."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(synthetic_documents(seed, TOKENIZER_CORPUS_DOCS), trainer)
    # The trainer marks every reserved token special; Qwen keeps the think tags as plain text.
    state = json.loads(tokenizer.to_str())
    for added in state["added_tokens"]:
        added["special"] = added["content"] in _SKIPPABLE
    return Tokenizer.from_str(json.dumps(state))


def wrap_tokenizer(tokenizer: Tokenizer) -> PreTrainedTokenizerFast:
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=IM_END,
        pad_token=END_OF_TEXT,
        bos_token=None,
        unk_token=None,
        model_max_length=MODEL_SHAPE["max_position_embeddings"],
        chat_template=CHAT_TEMPLATE,
        clean_up_tokenization_spaces=False,
        padding_side="left",
    )


def init_model(tokenizer: PreTrainedTokenizerFast, seed: int) -> PreTrainedModel:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.convert_tokens_to_ids(END_OF_TEXT),
        eos_token_id=tokenizer.convert_tokens_to_ids(IM_END),
        pad_token_id=tokenizer.convert_tokens_to_ids(END_OF_TEXT),
        dtype="float32",
        **MODEL_SHAPE,
    )
    with torch.random.fork_rng(devices=[]):  # leave the caller's global RNG as it was
        torch.manual_seed(seed)
        model = Qwen3ForCausalLM(config)
    model.eval()
    return model


def count_parameters(model: PreTrainedModel) -> int:
    """Distinct parameters (the tied embedding counts once)."""
    return sum(p.numel() for p in model.parameters())


def pretrain(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast, *, seed: int, steps: int
) -> list[float]:
    """A few seconds of supervised training on synthetic chats; returns the losses.

    Only the assistant replies carry loss (`core.reply_tuning`), so the little capacity goes into
    the reply format rather than into memorising the prompts. One pass over the examples in a
    seeded order, on one thread: the same bytes on any machine (reduction order depends on the
    thread count), and no slowdown from threads spinning on a busy two-core box.
    """
    import torch

    examples = _reply_examples(tokenizer, seed=seed + 1, count=steps * PRETRAIN_BATCH)
    pad_id = tokenizer.convert_tokens_to_ids(END_OF_TEXT)
    generator = torch.Generator().manual_seed(seed)
    warmup = max(1, steps // 10)
    order = torch.randperm(len(examples), generator=generator).tolist()
    batches = (order[step * PRETRAIN_BATCH : (step + 1) * PRETRAIN_BATCH] for step in range(steps))
    with torch_threads(1):
        return fine_tune_on_replies(
            model,
            examples,
            batches,
            steps=steps,
            learning_rate=PRETRAIN_LR,
            weight_decay=0.01,
            lr_factor=lambda step: min(1.0, (step + 1) / warmup) * max(0.1, 1 - step / steps),
            pad_id=pad_id,
            loss=model_loss,
        )


def _reply_examples(tokenizer: PreTrainedTokenizerFast, *, seed: int, count: int) -> list[Row]:
    """(token ids, prompt length) per synthetic chat; the prompt ends with the generation prompt."""
    conversations = synthetic_conversations(seed, count)
    prompts = [render_chat(c[:-1], add_generation_prompt=True) for c in conversations]
    replies = [c[-1]["content"] + IM_END + "\n" for c in conversations]
    prompt_ids = tokenizer(prompts, add_special_tokens=False)["input_ids"]
    reply_ids = tokenizer(replies, add_special_tokens=False)["input_ids"]
    # Only the end of the prompt (legal actions, the question) is kept: it is what the reply
    # depends on, and shorter rows make each step several times cheaper.
    kept = [p[-PRETRAIN_PROMPT_TAIL:] for p in prompt_ids]
    return [(p + r, len(p)) for p, r in zip(kept, reply_ids, strict=True)]


def _write_generation_config(folder: Path, tokenizer: PreTrainedTokenizerFast) -> None:
    from transformers import GenerationConfig

    im_end = tokenizer.convert_tokens_to_ids(IM_END)
    end_of_text = tokenizer.convert_tokens_to_ids(END_OF_TEXT)
    # Sampling on by default, as in Qwen's own files: `transformers serve` only ever turns sampling
    # off (temperature 0), so with do_sample=False a request's temperature would be ignored.
    GenerationConfig(
        bos_token_id=end_of_text,
        eos_token_id=[im_end, end_of_text],
        pad_token_id=end_of_text,
        do_sample=True,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
    ).save_pretrained(folder)
