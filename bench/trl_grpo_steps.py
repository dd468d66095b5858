"""TRL's GRPOTrainer for a few steps, timing each: the peer side of bench/train_step.py.

Run by that bench in an interpreter where `trl` is installed (it needs nothing of mars): reads
a JSON job (model folder, chat prompts with their answers, K, prompts per step, token budget,
learning rate, threads, steps), trains on CPU and prints one JSON line with every step's
seconds and the tokens it generated.
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path
from typing import Any


def main() -> None:
    job = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
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
