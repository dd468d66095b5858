"""The multi-agent-system interface: a MAS is one async function of (task, models, config).

It returns a `Transcript`: every LLM message in order (agent, reasoning, final text, usage,
latency) and the final answer text the suite grades. Agents talk to models only through
`Models.call`, which routes each agent to its endpoint (roles can map to different models) and
records the message, so transcripts, call counts and usage per agent come for free.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import importlib.util
import re
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from core.endpoint import Completion, Endpoint, GenerationConfig, Message, Usage
from core.errors import MarsError
from core.names import closest, unknown_name


class Task(BaseModel):
    """One question as a MAS sees it: the suite's prompt plus what identifies the attempt."""

    prompt: str
    sample_id: str = ""
    suite: str = ""
    epoch: int = 0
    kind: str = "math"  # "math", "choice", "puzzle" or "code": how the final answer looks
    # What a workflow's environment needs beyond the prompt, never the answer: a puzzle's level
    # (`environment`: harness.puzzles ref); in training, a code problem's tests and solution.
    metadata: dict[str, Any] = Field(default_factory=dict)


class AgentMessage(BaseModel):
    agent: str
    role: str = "assistant"
    round: int | None = None
    reasoning: str = ""
    text: str = ""
    finish_reason: str | None = None
    usage: Usage = Field(default_factory=Usage)
    latency_s: float = 0.0
    retries: int = 0
    cached: bool = False


class Transcript(BaseModel):
    messages: list[AgentMessage] = Field(default_factory=list)
    final_answer: str = ""
    rounds: int = 0
    ended_early: bool = False
    stop_reason: str = ""
    extra: dict[str, Any] = Field(default_factory=dict)

    @property
    def llm_calls(self) -> int:
        return len(self.messages)

    def tokens_per_agent(self) -> dict[str, dict[str, int]]:
        totals: dict[str, Counter[str]] = {}
        for message in self.messages:
            counter = totals.setdefault(message.agent, Counter())
            counter["calls"] += 1
            counter["prompt_tokens"] += message.usage.prompt_tokens
            counter["completion_tokens"] += message.usage.completion_tokens
            counter["reasoning_tokens"] += message.usage.reasoning_tokens or 0
        return {agent: dict(counter) for agent, counter in totals.items()}

    def metrics(self) -> dict[str, Any]:
        return {
            "llm_calls": self.llm_calls,
            "rounds": self.rounds,
            "ended_early": self.ended_early,
            "stop_reason": self.stop_reason,
            "tokens_per_agent": self.tokens_per_agent(),
        }


@dataclass
class Models:
    """Endpoints by role; every role not mapped uses `default`. Likewise the generation settings:
    a role's own (`gen_by_role`, e.g. `mars eval --role-sampling`), else `gen`."""

    default: Endpoint
    by_role: dict[str, Endpoint] = field(default_factory=dict)
    gen: GenerationConfig = field(default_factory=GenerationConfig)
    gen_by_role: dict[str, GenerationConfig] = field(default_factory=dict)

    def for_role(self, role: str) -> Endpoint:
        return self.by_role.get(role, self.default)

    def gen_for(self, role: str) -> GenerationConfig:
        return self.gen_by_role.get(role, self.gen)


class Conversation:
    """Records every call one sample makes, in the order the calls finish."""

    def __init__(self, models: Models, task: Task) -> None:
        self.models = models
        self.task = task
        self.transcript = Transcript()

    async def call(
        self,
        agent: str,
        messages: list[Message],
        *,
        model_role: str | None = None,
        round: int | None = None,
        gen: GenerationConfig | None = None,
    ) -> Completion:
        """Ask `agent` (whose model is chosen by `model_role`, default the agent's name)."""
        endpoint = self.models.for_role(model_role or agent)
        started = time.perf_counter()
        completion = await endpoint.complete(
            messages,
            role=agent,
            gen=gen or self.models.gen_for(agent),
            epoch=self.task.epoch,
        )
        self.transcript.messages.append(
            AgentMessage(
                agent=agent,
                round=round,
                reasoning=completion.reasoning,
                text=completion.text,
                finish_reason=completion.finish_reason,
                usage=completion.usage,
                latency_s=completion.latency_s or time.perf_counter() - started,
                retries=completion.retries,
                cached=completion.cached,
            )
        )
        return completion

    async def ask(
        self, agent: str, system: str, prompt: str, *, round: int | None = None
    ) -> Completion:
        """A call on a fresh chat: `system` as the system message, `prompt` as the user's."""
        messages = [{"role": "system", "content": system}, {"role": "user", "content": prompt}]
        return await self.call(agent, messages, round=round)


def add_turn(chat: list[Message], role: str, content: str) -> None:
    """Append one turn to `chat`; a user turn right after another user turn is merged into it
    (a blank line between), since some chat templates insist on alternating roles."""
    if chat and role == "user" and chat[-1]["role"] == "user":
        chat[-1] = {"role": "user", "content": f"{chat[-1]['content']}\n\n{content}"}
    else:
        chat.append({"role": role, "content": content})


MASFunction = Callable[[Task, Models, dict[str, Any]], Awaitable[Transcript]]
# A workflow's training rewards: (transcript, reference answer, task) -> {(agent, k): reward}, the
# reward of the agent's k-th call (train_backend/mas/rewards.py, docs/mas_training.md).
RewardFn = Callable[[Transcript, str, Task], dict[tuple[str, int], float]]
_REGISTRY: dict[str, MASFunction] = {}
# The task the options check runs a MAS on, for a MAS that needs more than a question (a
# puzzle workflow needs a level); the others get a one-line math question.
_PROBE_TASKS: dict[str, Callable[[], Task]] = {}
# The task kinds a MAS can run on, for a MAS that needs one kind (a puzzle, stdin/stdout code).
_TASK_KINDS: dict[str, tuple[str, ...]] = {}
# What makes a MAS a training workflow: its roles in seat order, and (optionally) its rewards.
_ROLES: dict[str, tuple[str, ...]] = {}
_REWARDS: dict[str, RewardFn] = {}


def mas(
    name: str,
    *,
    probe_task: Callable[[], Task] | None = None,
    kinds: tuple[str, ...] | None = None,
    roles: tuple[str, ...] | None = None,
    rewards: RewardFn | None = None,
) -> Callable[[MASFunction], MASFunction]:
    """Register a MAS under `name` (chosen on the CLI with `--mas NAME`); `kinds`: the only task
    kinds it can run on (default: any). For training (`mars train-mas --workflow NAME`): `roles`,
    its agents in seat order (a role's index is its seat in the turn table), and `rewards`, its
    reward per call (else the built-in table in train_backend/mas/rewards.py has them)."""

    def register(function: MASFunction) -> MASFunction:
        _REGISTRY[name] = function
        if probe_task is not None:
            _PROBE_TASKS[name] = probe_task
        if kinds is not None:
            _TASK_KINDS[name] = kinds
        if roles is not None:
            _ROLES[name] = tuple(roles)
        if rewards is not None:
            _REWARDS[name] = rewards
        return function

    return register


# The registry of the built-in systems: the modules that define them, each registering its
# systems with `@mas("name", ...)` when imported. A new system is one file in mas/ and its line
# here (docs/mas.md, "Adding a system"; tests/test_extension_points.py).
SYSTEM_MODULES = (
    "mas.agent_framework_chat",
    "mas.autogen_team",
    "mas.code_tester",
    "mas.debate",
    "mas.ensemble_judge",
    "mas.mad",
    "mas.plan_tool",
    "mas.reasoner_tool",
    "mas.single",
)
_DECORATOR = re.compile(r"""^@mas\(\s*["']([^"']+)["']""", re.MULTILINE)


@functools.cache
def builtin_systems() -> dict[str, str]:
    """Which module defines each built-in system, read from the `@mas("name"` lines of the
    registered modules without importing them: `get_mas` imports only that module, so a run of
    `single` does not import the debates or the AutoGen and Agent Framework teams. (A name this
    cannot read, e.g. one built at run time, is still found: `get_mas` then imports them all.)"""
    found: dict[str, str] = {}
    for module in SYSTEM_MODULES:
        spec = importlib.util.find_spec(module)
        origin = Path(spec.origin) if spec is not None and spec.origin else None
        if origin is None or origin.suffix != ".py":
            continue
        for name in _DECORATOR.findall(origin.read_text(encoding="utf-8")):
            found.setdefault(name, module)
    return found


def get_mas(name: str) -> MASFunction:
    if name not in _REGISTRY:
        module = builtin_systems().get(name)
        if module is not None:
            importlib.import_module(module)
        if name not in _REGISTRY:
            _load_builtin_systems()
    if name not in _REGISTRY:
        raise MarsError(unknown_name("MAS", name, _REGISTRY))
    return _REGISTRY[name]


class _FirstModelCall(Exception):
    """Raised by the options check's endpoint: the MAS got as far as asking a model."""


class _OptionsProbeEndpoint:
    called = False

    async def complete(self, *args: Any, **kwargs: Any) -> Completion:
        self.called = True
        raise _FirstModelCall


class _ReadOptions(dict):  # type: ignore[type-arg]
    """The options a probe runs on: a dict that remembers which keys the MAS looked up."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        self.looked_up: set[str] = set()

    def get(self, key: str, default: Any = None) -> Any:
        self.looked_up.add(key)
        return super().get(key, default)

    def __getitem__(self, key: str) -> Any:
        self.looked_up.add(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        self.looked_up.add(str(key))
        return super().__contains__(key)


async def check_options(
    function: MASFunction, config: dict[str, Any], kind: str = "math", name: str = ""
) -> None:
    """Run `function` on a dummy task up to its first model call. Every MAS reads its options
    before it asks a model, and an option it cannot use raises MarsError there: once, before
    any sample runs, instead of once per sample. An option it never looked up by then is not
    one of its options (a typo, or another MAS's), and is refused too. Whatever else happens
    (the probe's own stop, or what a framework made of it) means the options were read."""
    probe = _OptionsProbeEndpoint()
    models = Models(default=probe)  # type: ignore[arg-type]
    if name in _PROBE_TASKS:
        task = _PROBE_TASKS[name]()
    else:
        task = Task(prompt="What is 1 + 1?", sample_id="options-check", suite="check", kind=kind)
    options = _ReadOptions(config)
    try:
        await asyncio.wait_for(function(task, models, options), timeout=30)
    except MarsError:
        raise
    except Exception:  # the probe stopped it (or a framework wrapped that): options passed
        pass
    unknown = sorted(set(config) - options.looked_up)
    if probe.called and unknown:
        which = f"MAS {name!r}" if name else "this MAS"
        guesses = [guess for key in unknown for guess in closest(key, options.looked_up, n=1)]
        hint = f" (did you mean {', '.join(repr(g) for g in guesses)}?)" if guesses else ""
        raise MarsError(
            f"{which} has no option {', '.join(repr(k) for k in unknown)}{hint}"
            + (f"; it reads {', '.join(sorted(options.looked_up))}" if options.looked_up else "")
        )


def task_kinds(name: str) -> tuple[str, ...] | None:
    """The only task kinds MAS `name` runs on, or None when it takes any."""
    get_mas(name)
    return _TASK_KINDS.get(name)


def check_task_kinds(name: str, suites: dict[str, str]) -> None:
    """One line when MAS `name` cannot run a suite's tasks (suite name -> its kind)."""
    kinds = task_kinds(name)
    wrong = sorted(suite for suite, kind in suites.items() if kinds and kind not in kinds)
    if wrong:
        raise MarsError(
            f"MAS {name!r} runs on {' or '.join(kinds or ())} suites; {', '.join(wrong)} "
            f"{'is' if len(wrong) == 1 else 'are'} not"
        )


def system_roles(name: str) -> tuple[str, ...] | None:
    """The roles MAS `name` declares (its agents, in seat order), or None."""
    get_mas(name)
    return _ROLES.get(name)


def system_rewards(name: str) -> RewardFn | None:
    """The training rewards MAS `name` declares, or None."""
    get_mas(name)
    return _REWARDS.get(name)


def list_mas() -> list[str]:
    _load_builtin_systems()
    return sorted(_REGISTRY)


def _load_builtin_systems() -> None:
    for module in SYSTEM_MODULES:
        importlib.import_module(module)
