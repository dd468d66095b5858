"""Tree-sampled rollouts of a MAS workflow (AT-GRPO inside the workflow), on the evaluation's code.

The workflow is the registered MAS function itself (`mas.get_mas`): what is trained is what
`mars eval --mas` runs. It talks to models through `Models`; here every role's endpoint is a
`_RunEndpoint` that renders the chat with the role's policy, generates through that policy's
batcher and records the call's token ids. A workflow is deterministic given its replies, so a run
can be restarted from any point by replaying recorded replies (`prefix`) and sampling after them.

Tree sampling, per problem (docs/mas_training.md): at call i of the main line, K runs replay the
main line's first i calls and each samples its own call i and everything after it, to the end of
the workflow (Monte Carlo continuation with the current policies). Each run's call i is a branch:
its return is the sum of that agent's rewards from that call to the end of its run. The main line
then continues with one branch (`greedy`: the best return, the paper's default; `random`), and
the next call is branched the same way. Group key = (problem, role, the role's call index), as
at_grpo's (episode, seat, turn).

A replay must reproduce the main line: a replayed call that renders another prompt than the one
recorded, or K runs of one prefix of which some end before the next call, stop the step in one
line. A run that fails (a model call raises) stops the step too; on verl the agent loop drops
that problem. No branch is ever scored 0 for a run that did not finish.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import numpy as np

from core.endpoint import Completion, Endpoint, GenerationConfig, Message, Usage
from core.errors import MarsError
from harness.sandbox import (
    SandboxLimits,
    SandboxResult,
    TestCase,
    TestsResult,
    run_python_async,
    run_tests_async,
)
from mas.base import MASFunction, Models, Task, Transcript, get_mas
from train_backend.local.rollout import StepRollout, TurnSample
from train_backend.local.tree import state_key
from train_backend.mas.data import Problem
from train_backend.mas.rewards import ROLES, reward_function, succeeded

Continuation = Literal["greedy", "random"]
# Where a generated call sits in a problem's tree: (the tree point whose K runs include its run,
# the run's index among them, the call's position in the run). Unique within a tree and the same
# whatever order the replies arrive in, so a rollout can seed each call's sampling by it.
CallPlace = tuple[int, ...]


@dataclass(frozen=True)
class Call:
    """One model call of a run: which agent, its how-many-th call (from 0), the tokens."""

    agent: str
    index: int
    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    text: str


def cached_sandbox() -> Callable[..., Awaitable[SandboxResult]]:
    """A `code_runner` for the workflow that runs each distinct program once: the replays of a
    tree re-run the same programs, and a program's run depends only on its text, limits and
    stdin."""
    runs: dict[tuple[str, SandboxLimits, str | None], asyncio.Future[SandboxResult]] = {}

    async def run(code: str, limits: SandboxLimits, *, stdin: str | None = None) -> SandboxResult:
        key = (code, limits, stdin)
        if key not in runs:
            runs[key] = asyncio.ensure_future(run_python_async(code, limits, stdin=stdin))
        return await asyncio.shield(runs[key])

    return run


TestsRunner = Callable[..., Awaitable[TestsResult]]


def cached_tests() -> TestsRunner:
    """A `tests_runner` for `code_tester` that runs each distinct (program, tests) batch once."""
    runs: dict[tuple[Any, ...], asyncio.Future[TestsResult]] = {}

    async def run(
        code: str, tests: Sequence[TestCase], limits: SandboxLimits, *, per_test_seconds: float
    ) -> TestsResult:
        key = (code, tuple(tests), limits, per_test_seconds)
        if key not in runs:
            runs[key] = asyncio.ensure_future(
                run_tests_async(code, tests, limits, per_test_seconds=per_test_seconds)
            )
        return await asyncio.shield(runs[key])

    return run


def workflow_runners() -> dict[str, Any]:
    """The sandbox runners a trainer gives a workflow: each distinct program (and each batch of
    tests) of a step runs once, however many replays reach it."""
    return {"code_runner": cached_sandbox(), "tests_runner": cached_tests()}


def task_of(problem: Problem) -> Task:
    """The task a workflow is given for a training problem: a math question answers in
    `\\boxed{}`; a puzzle's question is its suite's prompt and its level rides in the metadata;
    a code problem carries its tests and reference solution there."""
    if problem.kind == "math":
        prompt = f"{problem.question}\nPut the final answer in \\boxed{{}}."
    else:
        prompt = problem.question
    return Task(
        prompt=prompt, sample_id=problem.id, kind=problem.kind, metadata=dict(problem.metadata)
    )


class RoleModel:
    """What a role's calls need from its policy: chat -> prompt ids, generation, ids -> text.
    `generate(prompt_ids, place)` is told the call's place in its tree (`CallPlace`)."""

    def __init__(
        self,
        name: str,
        encode: Callable[[list[Message]], list[int]],
        generate: Callable[[list[int], CallPlace], Awaitable[list[int]]],
        decode: Callable[[list[int]], str],
    ) -> None:
        self.name = name  # the policy's name (one policy may serve several roles)
        self.encode = encode
        self.generate = generate
        self.decode = decode


def endpoint_role_model(
    name: str,
    render: Callable[[list[Message]], list[int]],
    endpoint: Endpoint,
    gen: GenerationConfig,
    tokenize: Callable[[str], list[int]],
) -> RoleModel:
    """A frozen partner's role model: its replies come from an OpenAI-compatible server.

    The workflow's replay check compares rendered prompt ids, so the chat is rendered as for a
    trained role (`render`); the server is sent the messages themselves, and the reply's text is
    kept with the ids it is recorded under, so decoding gives back exactly what the server said.
    """
    chats: dict[tuple[int, ...], list[Message]] = {}
    texts: dict[tuple[int, ...], str] = {}

    def encode(messages: list[Message]) -> list[int]:
        ids = list(render(messages))
        chats[tuple(ids)] = list(messages)
        return ids

    async def generate(prompt_ids: list[int], _place: CallPlace) -> list[int]:
        completion = await endpoint.complete(chats[tuple(prompt_ids)], role=name, gen=gen)
        ids = list(tokenize(completion.text)) or [0]
        texts[tuple(ids)] = completion.text
        return ids

    def decode(ids: list[int]) -> str:
        return texts.get(tuple(ids), "")

    return RoleModel(name, encode, generate, decode)


@dataclass
class Run:
    """One run of the workflow: the calls it made (replayed ones included) and its outcome."""

    calls: list[Call] = field(default_factory=list)
    transcript: Transcript | None = None
    rewards: dict[tuple[str, int], float] = field(default_factory=dict)
    correct: bool = False
    key: tuple[int, ...] = ()  # (tree point, index among its K runs); () outside a tree

    def return_from(self, call: Call) -> float:
        return sum(
            reward
            for (agent, index), reward in self.rewards.items()
            if agent == call.agent and index >= call.index
        )


class _RunEndpoint:
    """The endpoint of one role in one run: replays the run's prefix, then generates."""

    def __init__(self, run: Run, prefix: Sequence[Call], model: RoleModel, counts: dict) -> None:
        self.run = run
        self.prefix = prefix
        self.model = model
        self.counts = counts  # calls so far per agent, shared by the run's endpoints

    async def complete(
        self,
        messages: list[Message],
        *,
        role: str = "default",
        gen: GenerationConfig | None = None,
        epoch: int = 0,
    ) -> Completion:
        position = len(self.run.calls)
        index = self.counts.get(role, 0)
        self.counts[role] = index + 1
        prompt_ids = self.model.encode(messages)
        if position < len(self.prefix):
            replayed = self.prefix[position]
            if replayed.agent != role or list(replayed.prompt_ids) != prompt_ids:
                raise MarsError(
                    f"workflow replay diverged at call {position} ({role}): the workflow must be "
                    "deterministic given its replies"
                )
            completion_ids = list(replayed.completion_ids)
        else:
            completion_ids = await self.model.generate(prompt_ids, (*self.run.key, position))
        text = self.model.decode(completion_ids)
        call = Call(role, index, tuple(prompt_ids), tuple(completion_ids), text)
        self.run.calls.append(call)
        return Completion(
            text=text,
            finish_reason="stop",
            usage=Usage(prompt_tokens=len(prompt_ids), completion_tokens=len(completion_ids)),
        )


class _UnmappedRole:
    async def complete(self, messages: list[Message], *, role: str = "default", **_: Any) -> Any:
        raise MarsError(f"the workflow called agent {role!r}, which has no policy")


@functools.cache
def _workflow_function(name: str) -> MASFunction:
    """`get_mas` once per workflow: it scans the MAS package on every call."""
    return get_mas(name)


async def run_workflow(
    workflow: str,
    problem: Problem,
    roles: Mapping[str, RoleModel],
    config: Mapping[str, Any],
    prefix: Sequence[Call] = (),
    key: tuple[int, ...] = (),
) -> Run:
    """Run the workflow once on `problem`, replaying `prefix` first; score it per role. `key`
    names the run within its tree (`Run.key`)."""
    run = Run(key=key)
    counts: dict[str, int] = {}
    endpoints = {role: _RunEndpoint(run, prefix, model, counts) for role, model in roles.items()}
    models = Models(
        default=cast(Endpoint, _UnmappedRole()), by_role=cast(dict[str, Endpoint], endpoints)
    )
    task = task_of(problem)
    transcript = await _workflow_function(workflow)(task, models, dict(config))
    run.transcript = transcript
    run.rewards = reward_function(workflow)(transcript, problem.answer, task)
    run.correct = succeeded(transcript, problem.answer, task)
    return run


@dataclass
class Branch:
    problem: int  # index of the problem in the step
    call: Call
    ret: float
    branch: int = 0  # its index among the K branches of its call
    chosen: bool = False  # the branch the main line went on with


async def tree_sample(
    workflow: str,
    problem: Problem,
    problem_index: int,
    roles: Mapping[str, RoleModel],
    config: Mapping[str, Any],
    *,
    branches: int,
    continuation: Continuation,
    rng: np.random.Generator,
    max_calls: int = 64,
    branch_roles: Collection[str] | None = None,
) -> tuple[list[Branch], Run]:
    """Every call of the main line branched `branches` ways; returns the branches and the main
    line's last run (the episode as it was played). With `branch_roles`, only those roles' calls
    are branched (the others' belong to frozen partners: one run continues through them)."""
    prefix: list[Call] = []
    found: list[Branch] = []
    main: Run | None = None

    async def sample(point: int, runs: int, first: int = 0) -> list[Run]:
        return list(
            await asyncio.gather(
                *(
                    run_workflow(workflow, problem, roles, config, prefix, key=(point, first + i))
                    for i in range(runs)
                )
            )
        )

    carried: Run | None = None  # a run that replayed the prefix and sampled after it
    for point in range(max_calls):
        if branch_roles is None:
            runs = await sample(point, branches)
        else:
            first = carried or (await sample(point, 1))[0]
            carried = None
            if len(first.calls) > point and first.calls[point].agent not in branch_roles:
                # A partner's call: no branches. The main line goes through it, and the same run,
                # sampled past it, is the first of the next call's K runs.
                main = carried = first
                prefix = main.calls[: point + 1]
                continue
            runs = [first, *await sample(point, branches - 1, first=1)]
        live = [run for run in runs if len(run.calls) > point]
        if not live:
            break
        if len(live) != len(runs):  # the same replayed calls must lead to the same next call
            raise MarsError(
                f"workflow replay diverged at call {point} on problem {problem.id}: "
                f"{len(runs) - len(live)} of {len(runs)} runs ended before it; the workflow "
                "must be deterministic given its replies"
            )
        returns = [run.return_from(run.calls[point]) for run in live]
        if continuation == "greedy":
            chosen = int(np.argmax(returns))  # the lowest index among equal bests
        else:
            chosen = int(rng.integers(len(live)))
        found.extend(
            Branch(problem_index, run.calls[point], ret, branch, branch == chosen)
            for branch, (run, ret) in enumerate(zip(live, returns, strict=True))
        )
        main = live[chosen]
        prefix = main.calls[: point + 1]
    else:
        raise MarsError(f"workflow {workflow} made more than {max_calls} calls on one problem")
    if main is None:
        raise MarsError(f"workflow {workflow} made no model call on problem {problem.id}")
    return found, main


async def play_workflow_step(
    workflow: str,
    problems: Sequence[Problem],
    roles: Mapping[str, RoleModel],
    config: Mapping[str, Any],
    *,
    branches: int,
    continuation: Continuation,
    seed: int,
    branch_roles: Collection[str] | None = None,
) -> StepRollout:
    """One step: every problem tree-sampled at once (their calls batch together). Rows are the
    branches (game = workflow, episode = problem index, seat = role's index, turn = the role's
    call index, reward = branch return, state = prompt key, policy = the role's policy). With
    `branch_roles`, the other roles' calls are played once and give no rows (frozen partners)."""
    started = time.perf_counter()
    role_names = ROLES[workflow]
    rng = np.random.default_rng(seed)
    seeds = rng.integers(0, 2**31, size=len(problems))
    trees = [
        tree_sample(
            workflow,
            problem,
            index,
            roles,
            config,
            branches=branches,
            continuation=continuation,
            rng=np.random.default_rng(int(seeds[index])),
            branch_roles=branch_roles,
        )
        for index, problem in enumerate(problems)
    ]
    results = await asyncio.gather(*trees)
    rows: list[dict[str, Any]] = []
    samples: list[TurnSample] = []
    replies: list[dict[str, Any]] = []
    records: list[dict[str, Any]] = []
    for index, (found, main) in enumerate(results):
        for branch in found:
            seat = role_names.index(branch.call.agent)
            rows.append(
                {
                    "game": workflow,
                    "episode": index,
                    "seat": seat,
                    "turn": branch.call.index,
                    "reward": branch.ret,
                    "state": state_key(branch.call.prompt_ids),
                    "policy": roles[branch.call.agent].name,
                    "role": branch.call.agent,
                    "branch": branch.branch,
                    "chosen": branch.chosen,
                }
            )
            call = branch.call
            sample = TurnSample(
                workflow, index, seat, call.index, list(call.prompt_ids), list(call.completion_ids)
            )
            samples.append(sample)
            replies.append({"reply": call.text})
        records.append(workflow_record(workflow, problems[index], main))
    generated = sum(len(s.completion_ids) for s in samples)
    return StepRollout(
        records=records,
        rows=rows,
        samples=samples,
        generated_tokens=generated,
        seconds=time.perf_counter() - started,
        generate_calls=0,
        replies=replies,
    )


def workflow_record(workflow: str, problem: Problem, run: Run) -> dict[str, Any]:
    """The main line of one problem, as the run's records.jsonl keeps it."""
    assert run.transcript is not None
    return {
        "kind": "workflow",
        "workflow": workflow,
        "problem_id": problem.id,
        "reference": problem.answer,
        "correct": run.correct,
        "rewards": {f"{agent}/{index}": value for (agent, index), value in run.rewards.items()},
        "transcript": run.transcript.model_dump(mode="json"),
    }
