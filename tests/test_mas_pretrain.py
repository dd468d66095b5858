"""The MAS miniature's format data: the workflows' own prompts, copying at the set rates."""

from __future__ import annotations

import re

import pytest

from mas.reasoner_tool import TOOL_SYSTEM, code_of, printed_answer, tool_prompt
from train_backend.mas.arithmetic import arithmetic_problems
from train_backend.mas.rollout import task_of
from train_backend.pretrain.mas_start import WorkflowPretrainSettings, workflow_examples


def test_examples_use_the_workflow_prompts_and_copy_at_the_set_rates() -> None:
    settings = WorkflowPretrainSettings(examples=600, tool_right=0.5, reasoner_right=0.8)
    examples = workflow_examples(settings)
    problems = arithmetic_problems(600, settings.seed)
    tools = [e for e in examples if e.kind == "tool"]
    reasoners = [e for e in examples if e.kind == "reasoner"]
    assert len(tools) == len(reasoners) == len(problems) == 600
    first = task_of(problems[1])
    assert tools[1].messages == (
        {"role": "system", "content": TOOL_SYSTEM},
        {"role": "user", "content": tool_prompt(first, None)},
    )
    faithful = 0
    for example, problem in zip(tools, problems, strict=True):
        code = code_of(example.reply)
        assert code is not None and code.startswith("answer = ")
        expression, printing = code.removeprefix("answer = ").splitlines()
        assert printing == "print(answer)"
        faithful += str(eval(expression, {"__builtins__": {}})) == problem.answer
    assert 0.42 < faithful / 600 < 0.62  # changed numbers can still give the right value
    copied = 0
    for example in reasoners:
        printed = printed_answer(example.messages[-1]["content"].rsplit(":\n", 1)[1])
        copied += re.fullmatch(r"\\boxed\{(-?\d+)\}", example.reply).group(1) == printed
    assert copied / 600 == pytest.approx(0.8, abs=0.05)
