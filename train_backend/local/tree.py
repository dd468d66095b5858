"""Tree-sampled rollouts for AT-GRPO (Stronger-MAS) on the CPU trainer.

Each of a step's games has a *main line*, played through `games.engine.play_episode` like any
self-play game. At every policy turn of the main line, K replies are sampled from the same prompt
(K rows of one batched `generate`); each is a *branch*. A branch's reward is the return of
finishing the episode from it with the current policies (Monte Carlo): the episode is replayed
with the same seed, the main line's earlier replies fed back verbatim, the branch's reply at that
turn, and fresh policy samples after it. One branch continues the main line: a uniformly random
one of the policy's own samples (`random`; the main line stays on-policy, so its return estimates
what the replays' do), or the one with the best return (`greedy`, the paper's default; it waits
for every branch's return first, and the main line then follows the best branches). In a game
with hidden information a greedy pick by the realised outcome leaks the hidden cards into the main
line, so `auto` is greedy only in perfect-information games.

With `all_actions`, every legal action of the turn is among the branches whenever K allows: a
branch whose action is duplicated (or invalid) is replaced by a sampled reply with its answer
rewritten to the missing action, so each state gets a return estimate for each action (the
all-actions policy gradient, Srinivasan et al. 2018); a saturated policy otherwise never samples
the action that would teach it.

With `keep_invalid`, only duplicated branches are rewritten: an invalid sample stays a branch
and gets its penalty, so the group still teaches the policy not to make it. Without it, where a
state has more legal moves than K (Tic-Tac-Toe), every invalid sample is rewritten and the policy's
invalid replies are never trained against: measured on the generalist mix (`at_grpo_state_std`,
branch rate 0.25), the share of invalid
branch samples rose from 3% to 26% over 40 steps.

With `explore` = e > 0 (random continuation only), the main line continues with a uniformly
chosen branch, forced ones included, with probability e: it visits the states after moves the
policy rarely makes (in Kuhn, a King that checked and then faces a bet). A seat's own moves do
not change what its later information states say about the other hands (the other seat's
beliefs do), so the exploring seat's later turns stay unbiased samples of their states; the
other seat's later turns in that game are not trained, and a turn whose main line had an
exploratory move after it gets its continuing branch's return from a replay of the policy, like
the other branches, instead of the main line's outcome.

With `branch_rate` = p < 1, each policy turn of a main line is branched with probability p (a
seeded draw per turn) and otherwise answered by one policy sample that continues the line and is
not trained. A branched turn's replays run to the end of the game, so a game of T policy turns
costs about K * T^2 / 2 replies with every turn branched; in long games (Tic-Tac-Toe, Mini
Hanabi) p buys fewer, equally unbiased groups at a fraction of that cost.

With `counterfactual`, a turn's branches are one sampled reply (the first legal one of the K
samples) and that same reply with its answer rewritten to each other legal move: a group differs
in its answer only, so mean-centred advantages cancel on the shared reasoning tokens and the
gradient falls on the decision itself (the model's reasoning is then not trained by this
estimator; meant for games with a few moves and a model whose reply before the answer restates
the state).

A replay must reproduce its main line: each replayed model call is checked to see the chat its
main-line call saw (else the step stops with one line: the game is not deterministic given its
replies), and a replay that ends before its branch's call stops it the same way. A replay that
cannot finish because a model call failed (an `EndpointError`: on verl, a server error or a chat
over the prompt budget) leaves its branch without a return: the node is marked failed, its rows
`replay_failed`, and the trainers leave the whole group out of the update
(`train_backend.group_filter`); `tree_replay_failed_groups` counts them.

The samples of a step are the branches: one (prompt, reply) per branch, and one row per branch
whose (game, episode, seat, turn) is its tree group and whose `reward` is its return, optionally
mixed with the team's as `team_weight * team + local` (team = the mean over seats of their
returns from the branch point on). Replays do not change a record: records.jsonl holds the main
lines only.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from core.branch_log import observation_of
from core.reasoning import split_reasoning
from games.arena import run_episodes
from games.engine import EpisodeOptions, play_episode
from games.episode import EpisodeResult
from games.parsing import parse_move
from games.players.base import Player
from games.players.llm import FunctionPlayer
from games.prompts import legal_actions_in
from games.selfplay import selfplay_record
from games.spec import GameSpec, get_game
from train_backend.config import TreeSettings
from train_backend.group_ops import is_flat
from train_backend.local.opponents import policy_seat
from train_backend.local.rollout import (
    PolicyResponder,
    StepRollout,
    TurnSample,
    first_seed,
    games_for_step,
)
from train_backend.local.tree_answers import counterfactual_branches, cover_actions
from train_backend.local.tree_nodes import (
    MainLine,
    Node,
    Reply,
    Scripted,
    chat_key,
    check_replayed,
    sampled_branches,
    set_branch_return,
    state_key,
)

if TYPE_CHECKING:
    from core.causal_lm import Message
    from core.endpoint import Completion


class TreeRollout:
    """One step's tree-sampled games (see the module docstring)."""

    def __init__(
        self,
        responder: PolicyResponder,
        specs: Sequence[GameSpec],
        *,
        tree: TreeSettings,
        options: EpisodeOptions,
        step: int,
        run_seed: int,
        opponents: Mapping[str, Player] | None = None,
    ) -> None:
        self.responder = responder
        self.policy = responder.policy
        self.specs = specs
        self.tree = tree
        self.options = options
        self.step = step
        self.run_seed = run_seed
        self.opponents = opponents
        self.lines: dict[tuple[str, int], MainLine] = {}
        self.nodes: list[Node] = []
        self.pending: list[asyncio.Task[None]] = []
        self.generated_tokens = 0
        self.invalid_samples = 0  # sampled branch replies that named no legal move (all_actions)

    # -- generation -----------------------------------------------------------------------------

    async def _sample(self, prompt_ids: list[int], count: int) -> list[Reply]:
        room = min(
            self.responder.max_new_tokens, self.responder.max_context_tokens - len(prompt_ids)
        )
        outputs = await asyncio.gather(
            *(self.responder.batcher.submit(prompt_ids, max(0, room)) for _ in range(count))
        )
        replies = []
        for generated in outputs:
            ids = generated.completion_ids
            self.generated_tokens += len(ids)
            text, reasoning = split_reasoning(self.policy.decode(ids))
            replies.append(Reply(text, reasoning, tuple(ids), generated.stopped))
        return replies

    def _rewrite(self, replies: list[Reply], messages: list[Message]) -> list[Reply]:
        """The branches of `counterfactual` or `all_actions` (train_backend.local.tree_answers)."""
        legal = legal_actions_in(messages[-1]["content"])
        mode = self.options.rules.parse_mode
        numbered = self.options.prompt_style == "numbered"
        moves = [parse_move(r.text, legal, mode, numbered=numbered).label for r in replies]
        # what a reply writes in its answer tag for each legal move: the label, or its number
        answers = [str(n) for n in range(1, len(legal) + 1)] if numbered else legal
        actions = [None if m is None else answers[legal.index(m)] for m in moves]
        self.invalid_samples += actions.count(None)
        if self.tree.counterfactual:
            return counterfactual_branches(self.policy, replies, actions, answers)
        return cover_actions(self.policy, replies, actions, answers, self.tree.keep_invalid)

    # -- players --------------------------------------------------------------------------------

    def _main_player(self, spec: GameSpec) -> FunctionPlayer:
        async def respond(messages: list[Message], seat: int, seed: int) -> Completion:
            line = self.lines.setdefault((spec.name, seed), MainLine())
            call = len(line.replies)
            turn = line.seat_calls.get(seat, 0)
            line.seat_calls[seat] = turn + 1
            prompt_ids = self.policy.encode_chat(messages)
            prompt = chat_key(messages)
            if not self._branches_here(spec.name, seed, call):
                (reply,) = await self._sample(prompt_ids, 1)
                line.replies.append((reply, len(prompt_ids), prompt))
                return reply.completion(len(prompt_ids))
            replies = await self._sample(prompt_ids, self.tree.branches)
            if self.tree.counterfactual or self.tree.all_actions:
                replies = self._rewrite(replies, messages)
            node = Node(spec.name, seed, call, seat, turn, prompt_ids, replies, prompt)
            node.off_policy = any(other != seat for other, _ in line.explored)
            node.returns = [None] * len(replies)
            node.legal = [None] * len(replies)
            node.actions = [None] * len(replies)
            node.rewards = [None] * len(replies)
            prefix = list(line.replies)
            self.nodes.append(node)
            if self.tree.continuation_for(spec) == "greedy":
                await asyncio.gather(
                    *(self._score_branch(spec, node, b, prefix) for b in range(len(replies)))
                )
                # The best return among the branches whose replay finished (the lowest index
                # among equals); a failed replay's placeholder 0 must not win over real returns.
                finished = [b for b in range(len(replies)) if b not in node.failed_branches]
                node.chosen = max(finished or range(len(replies)), key=node.returns.__getitem__)
            else:
                rng = self._rng(spec.name, seed, call)
                if self.tree.explore > 0 and rng.random() < self.tree.explore:
                    node.chosen = rng.randrange(len(replies))
                    line.explored.append((seat, call))
                else:
                    node.chosen = rng.choice(sampled_branches(replies))
                for b in range(len(replies)):
                    if b != node.chosen and not node.off_policy:  # untrained: no returns needed
                        task = self._score_branch(spec, node, b, prefix)
                        self.pending.append(asyncio.ensure_future(task))
            reply = replies[node.chosen]
            line.replies.append((reply, len(prompt_ids), prompt))
            return reply.completion(len(prompt_ids))

        return FunctionPlayer(respond, name="policy")

    def _recording(self, spec: GameSpec, player: Player) -> Player:
        """A fixed model opponent whose main-line replies are recorded for the replays."""
        if not player.is_model:
            return player
        inner = player

        async def respond(messages: list[Message], seat: int, seed: int) -> Completion:
            agent = inner.agent(seat=seat, rng=random.Random(0), seed=seed)
            completion = await agent.respond(messages)  # type: ignore[union-attr]
            line = self.lines.setdefault((spec.name, seed), MainLine())
            ids = tuple(range(completion.usage.completion_tokens))  # only the count is replayed
            reply = Reply(completion.text, completion.reasoning, ids, True)
            line.replies.append((reply, completion.usage.prompt_tokens, chat_key(messages)))
            return completion

        return FunctionPlayer(respond, name=player.name)

    def _replay_players(
        self, spec: GameSpec, script: list[Scripted], seed: int
    ) -> tuple[Player, Player]:
        """The seats of a branch's replay: model calls (counted across both seats) answered from
        `script`, each checked to see the chat its main-line call saw, then fresh samples of the
        policy, or of a fixed model opponent in its seat; a bot opponent plays itself (its moves
        replay too: same seed, same positions)."""
        calls = {"n": 0}

        def seat_player(fixed: Player | None) -> FunctionPlayer:
            async def respond(messages: list[Message], seat: int, seed: int) -> Completion:
                index = calls["n"]
                calls["n"] += 1
                if index < len(script):
                    reply, prompt_tokens, prompt = script[index]
                    check_replayed(spec.name, seed, index, seat, prompt, chat_key(messages))
                    return reply.completion(prompt_tokens)
                if fixed is not None:
                    agent = fixed.agent(seat=seat, rng=random.Random(0), seed=seed)
                    return await agent.respond(messages)  # type: ignore[union-attr]
                prompt_ids = self.policy.encode_chat(messages)
                (reply,) = await self._sample(prompt_ids, 1)
                return reply.completion(len(prompt_ids))

            return FunctionPlayer(respond, name="replay")

        policy = seat_player(None)
        if self.opponents is None:
            return (policy, policy)
        opponent = self.opponents[spec.name]
        other = seat_player(opponent) if opponent.is_model else opponent
        return self._seats(spec, seed, policy, other)

    def _seats(
        self, spec: GameSpec, seed: int, policy: Player, other: Player
    ) -> tuple[Player, Player]:
        if self.opponents is None:
            return (policy, policy)
        return (policy, other) if policy_seat(spec, seed) == 0 else (other, policy)

    def _branches_here(self, game: str, seed: int, call: int) -> bool:
        rate = self.tree.branch_rate
        return rate >= 1 or self._rng(game, seed, call, stream="branch").random() < rate

    def _rng(self, game: str, seed: int, call: int, stream: str = "") -> random.Random:
        text = f"{self.run_seed}/{self.step}/{game}/{seed}/{call}{stream}"
        return random.Random(int(hashlib.sha256(text.encode()).hexdigest()[:16], 16))

    # -- returns --------------------------------------------------------------------------------

    async def _score_branch(
        self, spec: GameSpec, node: Node, branch: int, prefix: list[Scripted]
    ) -> None:
        script = [*prefix, (node.branches[branch], len(node.prompt_ids), node.prompt)]
        players = self._replay_players(spec, script, node.seed)
        result = await play_episode(spec, players, node.seed, self.options)
        set_branch_return(node, branch, result, self.tree.team_weight)

    async def _finish_returns(self, results: Mapping[tuple[str, int], EpisodeResult]) -> None:
        """Wait for every branch's return. The continuing branch's is its main line's outcome
        (`results`, by game and seed), unless an exploratory move came later in that line: then
        it is replayed with the policy, like the other branches."""
        specs = {spec.name: spec for spec in self.specs}
        for node in self.nodes:
            if node.off_policy or node.returns[node.chosen] is not None:
                continue
            line = self.lines[(node.game, node.seed)]
            if any(call > node.call for _, call in line.explored):
                prefix = line.replies[: node.call]
                task = self._score_branch(specs[node.game], node, node.chosen, prefix)
                self.pending.append(asyncio.ensure_future(task))
            elif (node.game, node.seed) in results:
                result = results[(node.game, node.seed)]
                set_branch_return(node, node.chosen, result, self.tree.team_weight)
        while self.pending:
            batch, self.pending = self.pending, []
            await asyncio.gather(*batch)

    # -- the step -------------------------------------------------------------------------------

    async def play(self, games_per_step: int) -> StepRollout:
        started = time.perf_counter()
        counts = games_for_step(self.specs, games_per_step)
        base = first_seed(self.run_seed, self.step, games_per_step)
        records: list[dict[str, Any]] = []
        results: dict[tuple[str, int], EpisodeResult] = {}

        async def play_game(spec: GameSpec) -> None:
            main = self._main_player(spec)
            other = self._recording(spec, self.opponents[spec.name]) if self.opponents else main

            def keep(result: EpisodeResult) -> dict[str, Any]:
                results[(spec.name, result.seed)] = result
                record = selfplay_record(result)
                record["step"] = self.step
                if self.opponents is not None:
                    record["policy_seat"] = policy_seat(get_game(record["game"]), record["seed"])
                return record

            seeds = range(base, base + counts[spec.name])
            jobs = [(seed, self._seats(spec, seed, main, other), keep) for seed in seeds]
            await run_episodes(
                spec,
                jobs,
                options=self.options,
                concurrency=max(1, len(jobs)),
                sink=None,
                on_record=records.append,
            )

        await asyncio.gather(*(play_game(spec) for spec in self.specs if counts[spec.name]))
        await self._finish_returns(results)
        order = {spec.name: index for index, spec in enumerate(self.specs)}
        records.sort(key=lambda r: (order[r["game"]], r["seed"]))
        self.nodes.sort(key=lambda n: (order[n.game], n.seed, n.call))
        rows, samples, replies = self._rows_and_samples()
        trained = [n for n in self.nodes if not n.off_policy and not n.failed]
        flat = sum(1 for n in trained if is_flat(n.returns))  # type: ignore[arg-type]
        return StepRollout(
            records=records,
            rows=rows,
            samples=samples,
            generated_tokens=self.generated_tokens,
            seconds=time.perf_counter() - started,
            generate_calls=self.responder.batcher.calls,
            replies=replies,
            extra={
                "tree_nodes": len(self.nodes),
                "tree_branches": len(rows),
                "tree_flat_group_share": flat / len(trained) if trained else 0.0,
                "tree_forced_branches": sum(r.forced for n in self.nodes for r in n.branches),
                # all_actions replaces invalid samples, so the records' invalid rate misses them
                "tree_invalid_sample_rate": self.invalid_samples / len(rows) if rows else 0.0,
                "tree_explored_games": sum(1 for line in self.lines.values() if line.explored),
                "tree_off_policy_turns": sum(n.off_policy for n in self.nodes),
                # groups whose replay failed: marked `replay_failed`, left out of the update
                "tree_replay_failed_groups": sum(n.failed for n in self.nodes),
            },
        )

    def _rows_and_samples(
        self,
    ) -> tuple[list[dict[str, Any]], list[TurnSample], list[dict[str, Any]]]:
        rows: list[dict[str, Any]] = []
        samples: list[TurnSample] = []
        replies: list[dict[str, Any]] = []
        for node in self.nodes:
            if node.off_policy:
                continue
            state = state_key(node.prompt_ids)
            observation = observation_of(node.prompt)
            for branch, reply in enumerate(node.branches):
                rows.append(
                    {
                        "episode": node.seed,
                        "game": node.game,
                        "seat": node.seat,
                        "turn": node.turn,
                        "reward": float(node.returns[branch] or 0.0),
                        "tokens": len(reply.completion_ids),
                        "legal": bool(node.legal[branch]),
                        "state": state,
                        "branch": branch,
                        "chosen": branch == node.chosen,
                        "forced": reply.forced,
                        "replay_failed": node.failed,
                    }
                )
                samples.append(
                    TurnSample(
                        node.game,
                        node.seed,
                        node.seat,
                        node.turn,
                        list(node.prompt_ids),
                        list(reply.completion_ids),
                    )
                )
                replies.append(
                    {
                        "reply": reply.text,
                        "reasoning": reply.reasoning,
                        "action": node.actions[branch] if node.actions else None,
                        "reward": node.rewards[branch] if node.rewards else None,
                        "observation": observation,
                    }
                )
        return rows, samples, replies


async def play_tree_step(
    responder: PolicyResponder,
    specs: Sequence[GameSpec],
    *,
    tree: TreeSettings,
    step: int,
    run_seed: int,
    games_per_step: int,
    options: EpisodeOptions,
    opponents: Mapping[str, Player] | None = None,
) -> StepRollout:
    rollout = TreeRollout(
        responder,
        specs,
        tree=tree,
        options=options,
        step=step,
        run_seed=run_seed,
        opponents=opponents,
    )
    return await rollout.play(games_per_step)
