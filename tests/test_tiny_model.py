"""The embedded tiny model: deterministic build, tokenizer, chat template, generation, CLI."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from core import tiny_model
from core.errors import MarsError
from core.files import LOCKS_DIR
from core.tiny_corpus import render_chat, synthetic_conversations

ACTION_STRINGS = [
    "<X(0,0)>",
    "<O(1,2)>",
    "<BET>",
    "<PASS>",
    "<CALL>",
    "<RAISE>",
    "<FOLD>",
    "<Play card 1>",
    "<Discard card 2>",
    "<Reveal player +1 color R>",
    "<Reveal player +1 rank 2>",
    "<answer><X(2,1)></answer>",
    "The answer is \\boxed{42}.",
    "(A) 12\n(B) 15\n(C) 17\n(D) 19\nAnswer: C",
    "Ünïcödé ✓ and émoji 🎲 survive byte-level BPE",
]


@pytest.fixture(scope="module")
def default_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One build with the default pre-training, shared by the tests that need real weights."""
    return tiny_model.build_tiny_model(tmp_path_factory.mktemp("default") / "tiny", seed=0)


def _load(folder: Path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoTokenizer.from_pretrained(folder), AutoModelForCausalLM.from_pretrained(folder)


def test_same_seed_gives_identical_files_and_other_seed_differs(tmp_path: Path) -> None:
    first = tiny_model.build_tiny_model(tmp_path / "a", seed=3, pretrain_steps=2)
    second = tiny_model.build_tiny_model(tmp_path / "b", seed=3, pretrain_steps=2)
    other = tiny_model.build_tiny_model(tmp_path / "c", seed=4, pretrain_steps=2)

    names = sorted(p.name for p in first.iterdir())
    assert names == sorted(p.name for p in second.iterdir())
    assert {"model.safetensors", "tokenizer.json", "config.json"} <= set(names)
    for name in names:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
    assert (first / "model.safetensors").read_bytes() != (other / "model.safetensors").read_bytes()
    # Nothing left behind by the staging folders.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "c"]


def test_tokenizer_round_trips_actions_and_chat_template(default_model: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(default_model)
    assert len(tokenizer) == tiny_model.VOCAB_SIZE
    assert tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.pad_token == "<|endoftext|>"

    for text in ACTION_STRINGS:
        ids = tokenizer.encode(text, add_special_tokens=False)
        assert tokenizer.decode(ids) == text

    for token in tiny_model.SPECIAL_TOKENS:
        assert len(tokenizer.encode(token, add_special_tokens=False)) == 1, token

    messages = [
        {"role": "system", "content": "You are playing Kuhn Poker."},
        {"role": "user", "content": "Legal actions: <PASS>, <BET>"},
        {"role": "assistant", "content": "<think>\nK is high\n</think>\n<answer><BET></answer>"},
        {"role": "user", "content": "Legal actions: <FOLD>, <CALL>"},
    ]
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert rendered == render_chat(messages, add_generation_prompt=True)
    assert rendered.endswith("<|im_end|>\n<|im_start|>assistant\n")
    assert rendered.startswith("<|im_start|>system\nYou are playing Kuhn Poker.<|im_end|>\n")
    no_prompt = tokenizer.apply_chat_template(messages, tokenize=False)
    assert no_prompt == rendered.removesuffix("<|im_start|>assistant\n")

    ids = tokenizer.encode(rendered, add_special_tokens=False)
    assert tokenizer.decode(ids) == rendered
    # Chat markers are dropped by skip_special_tokens; the think tags stay in the text.
    visible = tokenizer.decode(ids, skip_special_tokens=True)
    assert "<|im_start|>" not in visible and "<|im_end|>" not in visible
    assert "<think>\nK is high\n</think>" in visible


def test_model_shape_and_parameter_count(default_model: Path) -> None:
    _, model = _load(default_model)
    config = model.config
    assert config.model_type == "qwen3"
    assert (config.hidden_size, config.num_hidden_layers) == (128, 4)
    assert (config.num_attention_heads, config.num_key_value_heads, config.head_dim) == (4, 2, 32)
    assert config.tie_word_embeddings and config.max_position_embeddings == 4096
    parameters = sum(p.numel() for p in model.parameters())
    assert 700_000 <= parameters <= 1_300_000
    assert tiny_model.read_build_info(default_model)["parameters"] == parameters
    assert model.generation_config.eos_token_id[0] == 2  # <|im_end|> stops generation


def test_pretrained_model_replies_in_the_expected_format(default_model: Path) -> None:
    import torch

    tokenizer, model = _load(default_model)
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    held_out = synthetic_conversations(seed=987, count=12)
    formatted = 0
    stopped = 0
    for conversation in held_out:
        prompt = tokenizer.apply_chat_template(
            conversation[:-1], add_generation_prompt=True, return_tensors="pt", return_dict=True
        )
        with torch.no_grad():
            output = model.generate(**prompt, max_new_tokens=64, do_sample=False)
        new_tokens = output[0, prompt["input_ids"].shape[1] :].tolist()
        assert new_tokens, "greedy generation produced nothing"
        stopped += new_tokens[-1] == im_end
        reply = tokenizer.decode(new_tokens, skip_special_tokens=True)
        formatted += bool(re.search(r"<answer>.+</answer>|\\boxed\{.+\}|Answer: [A-D]", reply))
    # Random weights would never do this; the short pre-training gets most replies into shape.
    assert formatted >= 6, formatted
    assert stopped >= 6, stopped


def test_random_weights_differ_from_pretrained(tmp_path: Path, default_model: Path) -> None:
    raw = tiny_model.build_tiny_model(tmp_path / "raw", seed=0, pretrain_steps=0)
    assert tiny_model.read_build_info(raw)["pretrain_steps"] == 0
    assert (raw / "tokenizer.json").read_bytes() == (default_model / "tokenizer.json").read_bytes()
    raw_weights = (raw / "model.safetensors").read_bytes()
    assert raw_weights != (default_model / "model.safetensors").read_bytes()


def test_existing_folder_needs_overwrite_and_must_be_a_tiny_model(tmp_path: Path) -> None:
    target = tmp_path / "tiny"
    tiny_model.build_tiny_model(target, seed=1, pretrain_steps=0)
    before = (target / "model.safetensors").read_bytes()
    with pytest.raises(MarsError, match="already exists"):
        tiny_model.build_tiny_model(target, seed=2, pretrain_steps=0)
    assert (target / "model.safetensors").read_bytes() == before

    tiny_model.build_tiny_model(target, seed=2, pretrain_steps=0, overwrite=True)
    assert tiny_model.read_build_info(target)["seed"] == 2
    assert (target / "model.safetensors").read_bytes() != before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny"]

    someone_elses = tmp_path / "notes"
    someone_elses.mkdir()
    (someone_elses / "keep.txt").write_text("precious")
    with pytest.raises(MarsError, match="not a tiny model"):
        tiny_model.build_tiny_model(someone_elses, overwrite=True, pretrain_steps=0)
    assert (someone_elses / "keep.txt").read_text() == "precious"


def _built(cache: Path) -> list[str]:
    """What a cache folder holds besides the build locks: no staging folder left behind."""
    return [path.name for path in cache.iterdir() if path.name != LOCKS_DIR]


def test_ensure_builds_once_into_the_cache_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MARS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(tiny_model, "PRETRAIN_STEPS", 1)
    assert tiny_model.default_tiny_model_dir() == tmp_path / "cache" / "tiny-model-v1"

    folder = tiny_model.ensure_tiny_model()
    assert folder == tmp_path / "cache" / "tiny-model-v1"
    stamp = (folder / "model.safetensors").stat().st_mtime_ns
    assert tiny_model.ensure_tiny_model() == folder
    assert (folder / "model.safetensors").stat().st_mtime_ns == stamp
    assert _built(tmp_path / "cache") == ["tiny-model-v1"]

    # A changed recipe (here: more pre-training) makes the cached build stale: rebuilt in place.
    monkeypatch.setattr(tiny_model, "PRETRAIN_STEPS", 2)
    assert tiny_model.ensure_tiny_model() == folder
    assert tiny_model.read_build_info(folder)["pretrain_steps"] == 2
    assert _built(tmp_path / "cache") == ["tiny-model-v1"]


def test_ensure_refuses_a_foreign_folder_in_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MARS_CACHE_DIR", str(tmp_path))
    (tmp_path / "tiny-model-v1").mkdir()
    with pytest.raises(MarsError, match="not a built tiny model"):
        tiny_model.ensure_tiny_model()


def test_cli_build_prints_folder_and_parameters(tmp_path: Path) -> None:
    import mars.commands.tiny_model  # noqa: F401  (registers the sub-app on the main app)
    from mars.commands.app import app

    runner = CliRunner()
    target = tmp_path / "cli-model"
    args = ["tiny-model", "build", "--out", str(target), "--seed", "5", "--pretrain-steps", "0"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert lines[0] == str(target.resolve())
    count = int(lines[1].removeprefix("parameters: ").replace(",", ""))
    assert count == tiny_model.read_build_info(target)["parameters"]
    assert tiny_model.read_build_info(target)["seed"] == 5

    again = runner.invoke(app, args)
    assert isinstance(again.exception, MarsError)
    assert "--overwrite" in str(again.exception)
    assert runner.invoke(app, [*args, "--overwrite"]).exit_code == 0


def test_corpus_is_deterministic_and_covers_the_action_vocabulary() -> None:
    first = synthetic_conversations(seed=11, count=300)
    assert first == synthetic_conversations(seed=11, count=300)
    assert first != synthetic_conversations(seed=12, count=300)
    text = "".join(render_chat(c) for c in first)
    for needle in [
        "<X(",
        "<O(",
        "<BET>",
        "<PASS>",
        "<CALL>",
        "<RAISE>",
        "<FOLD>",
        "<Play card ",
        "<Discard card ",
        "<Reveal player +1 color ",
        "\\boxed{",
        "(A) ",
        "<answer>",
    ]:
        assert needle in text, needle
    # Every game reply names one of the legal actions listed in its prompt.
    for conversation in first:
        match = re.search(r"<answer>(.*)</answer>", conversation[-1]["content"])
        if match:
            legal = re.search(r"Legal actions: (.*)", conversation[-2]["content"]).group(1)
            assert match.group(1) in legal.split(", ")
