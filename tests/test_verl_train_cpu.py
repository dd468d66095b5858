"""verl's own trainer, for real, on this machine's CPU: `mars train --trainer verl --device cpu`.

One run of three steps (tic-tac-toe and Kuhn poker, the KL reference, `marshal`), then the same
run directory again with five steps (the one setting a resume may change): it resumes at the
saved step 3, trains step 4, and is stopped with SIGTERM during step 5. Real components
throughout: verl's `main_ppo` with Ray, FSDP2 on gloo, the CPU rollout serving the agent loop,
the merger, and the project's tiny model after a few seconds of format training on Kuhn (so Kuhn
games reach real outcomes; the tic-tac-toe replies are mostly invalid and get re-asked once).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

pytest.importorskip("verl", reason="verl is not installed (make setup-verl)")

from conftest import REPO, mars_env, run_mars
from model_testkit import kuhn_model
from verl_testkit import TAG, step_turns, tagged_processes

from train_backend.advantage import compute_advantages
from train_backend.verl import names

CONFIG = """\
prompt_style: full
invalid: retry:1
games_per_step: 6
max_new_tokens: 20
learning_rate: 0.001
warmup_steps: 0
kl_coef: 0.2
temperature: 1.0
save_every: 2
"""
TABLE = ("game", "episode", "seat", "turn", "reward", "tokens")


def train_args(run: Path, config: Path, steps: int, estimator: str) -> list[str]:
    return [
        "train", "--trainer", "verl", "--device", "cpu", "--model", str(kuhn_model()),
        "--games", "tic_tac_toe,kuhn_poker", "--steps", str(steps), "--estimator", estimator,
        "--config", str(config), "--run-dir", str(run),
    ]  # fmt: skip


def finished_kuhn_games(turns: list[dict]) -> int:
    """Kuhn games that ended at a fold or showdown, not at an invalid reply (-ante - 10)."""
    kuhn = [turn for turn in turns if turn["game"] == "kuhn_poker"]
    forfeited = {turn["episode"] for turn in kuhn if turn["reward"] <= -10}
    return len({turn["episode"] for turn in kuhn} - forfeited)


def check_applied_advantages(turns: list[dict], estimator: str) -> None:
    """The advantages verl stored for the update are `compute_advantages` of the step's turns."""
    table = {column: [turn[column] for turn in turns] for column in TABLE}
    expected = compute_advantages(table, estimator)
    assert [turn["advantage"] for turn in turns] == pytest.approx(expected, abs=1e-5)


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, float]:
    root = tmp_path_factory.mktemp("verl-cpu")
    config = root / "cpu.yaml"
    config.write_text(CONFIG)
    run = root / "run"
    started = time.perf_counter()
    result = run_mars(*train_args(run, config, 3, "marshal"), timeout=600)
    assert result.returncode == 0, result.stderr[-3000:] + result.stdout[-3000:]
    assert result.stdout.strip().splitlines()[-1] == f"run dir: {run}"
    return run, config, time.perf_counter() - started


def test_three_cpu_steps_train_the_model_and_publish_checkpoints(first_run):
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    run, _, seconds = first_run
    print(f"3 CPU verl steps in {seconds:.0f} s")
    metrics = [json.loads(line) for line in (run / "verl/metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2, 3]
    for m in metrics:  # the rollout generated with the actor's weights of that step
        assert abs(m["data"]["training/rollout_probs_diff_mean"]) < 1e-4
        assert m["data"]["actor/kl_coef"] == pytest.approx(0.2)
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_2", "step_3"]
    base = load_file(kuhn_model() / "model.safetensors")
    for step in (2, 3):
        folder = run / "checkpoints" / f"step_{step}"
        record = json.loads((folder / "checkpoint.json").read_text())
        assert record["step"] == step and record["source"] == "verl"
        model = AutoModelForCausalLM.from_pretrained(folder)
        AutoTokenizer.from_pretrained(folder)
        assert {p.dtype for p in model.parameters()} == {torch.float32}  # the model's own dtype
        assert json.loads((folder / "config.json").read_text())["dtype"] == "float32"
    trained = load_file(run / "checkpoints/step_3/model.safetensors")
    # verl's merger rounds to bf16: had nothing been learnt, every weight would be the base's,
    # rounded the same way
    rounded = {k: v.to(torch.bfloat16).float() for k, v in base.items()}
    moved = [k for k in rounded if not torch.equal(trained[k], rounded[k])]
    assert len(moved) > len(rounded) // 2, f"only {moved} changed"


def test_the_advantages_verl_applied_are_compute_advantages_on_conversation_samples(first_run):
    run, _, _ = first_run
    advantages = []
    finished = 0
    for step in (1, 2, 3):
        turns = step_turns(run, step)
        finished += finished_kuhn_games(turns)
        check_applied_advantages(turns, "marshal")
        advantages += [turn["advantage"] for turn in turns]
        # one sample per seat and game, holding all of that seat's turns
        samples = {(turn["game"], turn["episode"], turn["seat"]) for turn in turns}
        assert len({turn["row"] for turn in turns}) == len(samples)
        assert len(turns) > len(samples)
        assert {turn["weights_step"] for turn in turns} == {step - 1}  # synced every step
    assert sum(a != 0 for a in advantages) >= 4  # the games differed: there was a signal
    assert finished > 0, (
        "every Kuhn game ended at an invalid reply: the format-trained model "
        "(model_testkit.KUHN_FORMAT) no longer answers full-style Kuhn prompts legally"
    )


def test_the_loop_evaluates_while_a_rerun_resumes_and_sigterm_leaves_no_process(
    first_run, tmp_path
):
    run, config, _ = first_run
    before = {step: step_turns(run, step) for step in (1, 2, 3)}
    tag = uuid.uuid4().hex
    process = subprocess.Popen(
        [sys.executable, "-m", "mars", *train_args(run, config, 5, "marshal")],
        cwd=REPO,
        env=mars_env(**{TAG: tag}),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    step_4 = run / "verl/turns/step_4.jsonl"
    try:
        # While verl starts up again, `mars loop` evaluates what the first run published.
        loop = tmp_path / "loop"
        result = run_mars(
            "loop", "--watch", str(run), "--eval", "arena:kuhn_poker:random:2", "--once",
            "--max-tokens", "20", "--run-dir", str(loop), timeout=300,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr[-3000:]
        curve = (loop / "learning_curve.jsonl").read_text().splitlines()
        rows = [json.loads(line) for line in curve]
        assert [row["step"] for row in rows] == [2, 3]
        assert all(not row.get("error") for row in rows)

        deadline = time.monotonic() + 300
        while not step_4.is_file():
            assert process.poll() is None, process.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, "step 4 never came"
            time.sleep(0.5)
        running = tagged_processes(tag)
        assert any("verl.trainer.main_ppo" in cmd for cmd in running)
        assert any(cmd.startswith("ray::") for cmd in running)  # Ray's workers
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=120) == 130
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert tagged_processes(tag) == []
    assert json.loads((run / "run.json").read_text())["status"] == "interrupted"

    # It resumed from the checkpoint of step 3: steps 1-3 were not trained again, and step 4
    # was played with the weights saved at step 3, scored by the run's estimator.
    assert {step: step_turns(run, step) for step in (1, 2, 3)} == before
    assert "setting global step to 3" in (run / "logs/verl.log").read_text()
    turns = step_turns(run, 4)
    assert {turn["weights_step"] for turn in turns} == {3}
    check_applied_advantages(turns, "marshal")
    assert turns  # (one step's advantages may all be 0: the signal is checked over steps 1-3)


def test_the_cpu_device_needs_exactly_the_verl_it_hooks_into():
    import verl

    assert verl.__version__ == names.VERL_VERSION, (
        f"train_backend/verl/cpu_device.py hooks into private names of verl "
        f"{names.VERL_VERSION}; verl {verl.__version__} is installed: check each hook against "
        "the new release before changing names.VERL_VERSION (or run `make setup-verl`)"
    )
