"""TRL's GRPOTrainer for a few steps, timing each: the peer side of bench/train_step.py.

Run by that bench in an interpreter where `trl` is installed (it needs nothing of mars): reads
a JSON job (model folder, chat prompts with their answers, K, prompts per step, token budget,
learning rate, threads, steps), trains on CPU and prints one JSON line with every step's
seconds and the tokens it generated.

    python bench/trl_grpo_steps.py JOB.json
    python bench/trl_grpo_steps.py --dry-run [JOB.json]   (the job's fields checked; without a
        job, the one bench/train_step.py writes by default; mars needed for this alone)
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

# what the job gives: the trainer's settings, and each prompt's chat and answer
JOB_KEYS = ("model", "prompts", "branches", "prompts_per_step", "max_new_tokens",
            "learning_rate", "temperature", "kl_coef", "ppo_epochs", "threads", "steps", "seed",
            "output_dir")  # fmt: skip
PROMPT_KEYS = ("messages", "answer")


def check_job(job: dict[str, Any]) -> list[str]:
    """What is wrong with a job (nothing: [])."""
    problems = [f"no {key}" for key in JOB_KEYS if key not in job]
    prompts = job.get("prompts") or []
    if not prompts:
        problems.append("no prompts")
    problems += [
        f"prompt {index} has no {key}"
        for index, prompt in enumerate(prompts)
        for key in PROMPT_KEYS
        if key not in prompt
    ]
    return problems


def dry_run(job_file: str | None) -> None:
    """The job's fields and each prompt's, checked; one summary line (bench._common's: mars is
    needed for the dry run alone)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import importlib.util

    from bench._common import DryRun, run_dry
    from core.errors import MarsError

    def check(dry: DryRun) -> None:
        if job_file is None:
            from bench.train_step import default_job

            job = default_job()
        else:
            job = json.loads(Path(job_file).read_text(encoding="utf-8"))
        problems = check_job(job)
        if problems:
            raise MarsError(f"job {job_file or '(default)'}: {'; '.join(problems)}")
        dry.count("job")
        dry.count("prompt", len(job["prompts"]))
        if importlib.util.find_spec("trl") is None:
            dry.note("trl is not installed in this interpreter")

    run_dry(check)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("job", nargs="?", help="the JSON job (required but for --dry-run)")
    # Not bench._common's add_dry_run: this script runs where mars may not be installed.
    parser.add_argument("--dry-run", action="store_true", help="check the job; train nothing")
    return parser


def main() -> None:
    parser = build_parser()
    args = parser.parse_args()
    if args.dry_run:
        dry_run(args.job)
        return
    if args.job is None:
        parser.error("the following arguments are required: job")
    job = json.loads(Path(args.job).read_text(encoding="utf-8"))
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    torch.set_num_threads(job["threads"])
    torch.manual_seed(job["seed"])
    rows = [{"prompt": p["messages"], "answer": p["answer"]} for p in job["prompts"]]
    dataset = Dataset.from_list(rows)

    def boxed_reward(completions: list[Any], answer: list[str], **_: Any) -> list[float]:
        rewards = []
        for completion, gold in zip(completions, answer, strict=True):
            text = completion[-1]["content"] if isinstance(completion, list) else completion
            found = re.findall(r"\\boxed\{([^}]*)\}", text)
            rewards.append(2.0 if found and found[-1].strip() == gold else 0.0)
        return rewards

    step_seconds: list[float] = []
    tokens: list[int] = []

    class StepTimer(TrainerCallback):
        started = 0.0

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.started = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            step_seconds.append(time.perf_counter() - self.started)

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **_: Any) -> None:
            if logs and "completions/mean_length" in logs:
                tokens.append(logs["completions/mean_length"])

    k, per_step = job["branches"], job["prompts_per_step"]
    config = GRPOConfig(
        output_dir=job["output_dir"],
        num_generations=k,
        per_device_train_batch_size=k * per_step,
        gradient_accumulation_steps=1,
        max_completion_length=job["max_new_tokens"],
        learning_rate=job["learning_rate"],
        temperature=job["temperature"],
        beta=job["kl_coef"],
        num_iterations=job["ppo_epochs"],
        max_steps=job["steps"],
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        seed=job["seed"],
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    tokenizer = AutoTokenizer.from_pretrained(job["model"])
    trainer = GRPOTrainer(
        model=job["model"],
        reward_funcs=boxed_reward,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[StepTimer()],
    )
    trainer.train()
    print(json.dumps({"step_seconds": step_seconds, "mean_completion_tokens": tokens}))


if __name__ == "__main__":
    main()
