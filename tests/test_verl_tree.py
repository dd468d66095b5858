"""at_grpo, information-state groups and bot opponents on verl, in process.

Games are played by the agent loop against a scripted rollout server; the batch is stored by
verl's own worker code into an in-memory TransferQueue, padded and reordered by verl's helpers,
and scored by the mars trainer's `_compute_advantage` (verl's code calling the registered
estimator). A real verl run's tree groups are checked on a workflow (test_verl_mas_cpu.py), whose
agent loop branches the same way; a game's tree on a real run is not launched in CI (one more verl
launch, about 80 s of CI's 15 minutes).
"""

from __future__ import annotations

import itertools
import json
import random
from collections import defaultdict
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("verl", reason="verl is not installed (make setup-verl)")

import torch
from conftest import run_mars
from tensordict import TensorDict
from test_verl_cli import dry_run, one_error_line
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.padding_utils import upsample_batch_to_divisible_size
from verl_testkit import (
    FakeTransferQueue,
    ScriptedServer,
    install_fake_transfer_queue,
    make_loop,
    scoring_trainer,
    store_like_verl,
)
from verl_testkit import tiny_tokenizer as tokenizer_of_tests

import train_backend.verl.plugin  # noqa: F401  (registers estimators, loop, trainer)

if TYPE_CHECKING:
    from train_backend.verl.workflow_loop import WorkflowAgentLoop
from core import branch_log
from core.errors import MarsError
from games.engine import EpisodeOptions, play_episode
from games.players import PlayerContext, make_player
from games.spec import get_game
from games.testing import scripted_player
from train_backend.advantage import compute_advantages
from train_backend.config import TrainConfig
from train_backend.group_filter import GroupFilter, kept_advantages, select_per_seat
from train_backend.local.opponents import policy_seat
from train_backend.verl import names
from train_backend.verl.overrides import ESTIMATOR_SWITCHES_ENV
from train_backend.verl.trainer import MarshalPPOTrainer
from train_backend.verl.tree_loop import group_key
from train_backend.verl.turns import TurnRows, bound_turn_rows

K = 3


def cycling(start: int = 0):
    """Legal moves in turn (a counter over all requests), with reasoning of varying length: the
    K replies at a state differ, and a rerun replays the same."""
    counter = itertools.count(start)

    def script(legal: list[str], seat: int, call: int) -> str:
        n = next(counter)
        return f"<think>{'y' * (n % 5)}</think><answer>{legal[n % len(legal)]}</answer>"

    return script


async def play_tree(game: str, seed: int, script, uid: str = "p0", session: int = 0, **tree):
    server = ScriptedServer(script)
    row = {"game": game, "seed": seed, "prompt_style": "full", "invalid": "penalty"}
    row |= {"branches": K, "continuation": "auto", **tree}
    outputs = await make_loop(server).run(
        {"temperature": 1.0}, uid=uid, session_id=session, sample_unit="turn", **row
    )
    return outputs, server, row


def groups_of(outputs) -> dict[str, list]:
    groups = defaultdict(list)
    for output in outputs:
        groups[output.extra_fields[names.TREE_GROUP]].append(output)
    return groups


@pytest.mark.parametrize("game", ["kuhn_poker", "tic_tac_toe"])
async def test_every_policy_turn_branches_k_ways_under_its_group_key(game):
    outputs, server, _ = await play_tree(game, 4, cycling())
    groups = groups_of(outputs)
    assert len(groups) >= 2 and {len(group) for group in groups.values()} == {K}
    seats = set()
    for key, group in groups.items():
        fields = [o.extra_fields for o in group]
        seat, turn = fields[0][names.SEAT], fields[0][names.TURN]
        seats.add(seat)
        assert key == group_key("p0_0", seat, turn)
        assert [f[names.BRANCH] for f in fields] == list(range(K))
        assert sum(f[names.CHOSEN] for f in fields) == 1  # one branch continued the main line
        assert len({tuple(o.prompt_ids) for o in group}) == 1  # K replies to one state
        assert len({f[names.STATE] for f in fields}) == 1
        assert len({tuple(o.response_ids) for o in group}) > 1  # different replies
        assert [o.reward_score for o in group] == [f[names.REWARD] for f in fields]
        for output in group:  # each reply is tokens a request returned, log-probs included
            assert output.response_mask == [1] * len(output.response_ids)
            assert output.response_logprobs == [-0.25] * len(output.response_ids)
    assert seats == {0, 1}  # self-play: both seats branch
    generated = {tuple(r["token_ids"]) for r in server.requests}
    assert all(tuple(o.response_ids) in generated for o in outputs)
    # K requests per policy turn of the main line, plus the replays of the other branches
    assert len(server.requests) > K * len(groups)


@pytest.mark.parametrize("game", ["kuhn_poker", "tic_tac_toe"])
async def test_the_continuing_branch_returns_what_its_seat_got_from_there_in_the_main_line(game):
    outputs, _, _ = await play_tree(game, 3, cycling(1), continuation="random")
    chosen = [o for o in outputs if o.extra_fields[names.CHOSEN]]  # the main line, call by call
    decode = tokenizer_of_tests().decode
    replies = iter(decode(o.response_ids, skip_special_tokens=True) for o in chosen)
    main = scripted_player(lambda legal, seat, call: next(replies))
    arena = await play_episode(get_game(game), [main, main], 3, EpisodeOptions("full"))
    assert len(arena.turns) == len(chosen)
    for turn, output in zip(arena.turns, chosen, strict=True):
        fields = output.extra_fields
        assert (fields[names.SEAT], fields[names.TURN]) == (turn["seat"], turn["turn"])
        later = [t["reward"] for t in arena.turns if t["seat"] == turn["seat"]][turn["turn"] :]
        assert fields[names.REWARD] == pytest.approx(sum(later))


async def test_all_actions_puts_both_kuhn_moves_among_the_branches():
    def always_first(legal: list[str], seat: int, call: int) -> str:
        return f"<think>sure</think><answer>{legal[0]}</answer>"

    outputs, _, _ = await play_tree("kuhn_poker", 0, always_first, all_actions=True)
    tokenizer = tokenizer_of_tests()
    for group in groups_of(outputs).values():
        answers = {tokenizer.decode(o.response_ids, skip_special_tokens=True) for o in group}
        assert len(answers) == 2  # a saturated policy still gets a return for the other move
        assert any(o.extra_fields[names.FORCED] for o in group)
    # a forced reply was never sampled: with all_actions no sample claims rollout log-probs
    assert all(o.response_logprobs is None for o in outputs)


@pytest.mark.parametrize(("game", "seeds"), [("tic_tac_toe", (0, 1)), ("kuhn_poker", (0, 6))])
async def test_against_a_bot_only_the_policys_seat_is_played_and_it_alternates(game, seeds):
    spec = get_game(game)
    script = cycling()
    seats = []
    for seed in seeds:
        server = ScriptedServer(script)
        row = {"game": game, "seed": seed, "prompt_style": "full", "invalid": "penalty"}
        outputs = await make_loop(server).run(
            {"temperature": 1.0},
            uid="q",
            session_id=0,
            sample_unit="turn",
            opponent="random",
            **row,
        )
        seat = policy_seat(spec, seed)
        seats.append(seat)
        assert {o.extra_fields[names.SEAT] for o in outputs} == {seat}
        # the same game in the arena: the same replies in the policy's seat, the bot opposite
        replies = iter(
            tokenizer_of_tests().decode(r["token_ids"], skip_special_tokens=True)
            for r in server.requests
        )
        policy = scripted_player(lambda legal, s, c, replies=replies: next(replies))
        bot = make_player("random", PlayerContext(spec=spec))
        players = [policy, bot] if seat == 0 else [bot, policy]
        arena = await play_episode(spec, players, seed, EpisodeOptions("full"))
        mine = [t for t in arena.turns if t["seat"] == seat]
        assert [o.extra_fields[names.ACTION] for o in outputs] == [t["action"] for t in mine]
        rewards = [o.extra_fields[names.REWARD] for o in outputs]
        assert rewards == pytest.approx([t["reward"] for t in mine])
    assert sorted(seats) == [0, 1]


async def test_a_tree_against_a_bot_branches_the_policys_turns_only():
    outputs, _, _ = await play_tree("tic_tac_toe", 1, cycling(), opponent="random")
    seat = policy_seat(get_game("tic_tac_toe"), 1)
    assert {o.extra_fields[names.SEAT] for o in outputs} == {seat}
    assert {len(group) for group in groups_of(outputs).values()} == {K}


# ---- the trainer: verl's uid is the tree group, the advantages are compute_advantages -------


@pytest.fixture
def fake_tq(monkeypatch: pytest.MonkeyPatch) -> FakeTransferQueue:
    return install_fake_transfer_queue(monkeypatch)


def trainer_for(config: TrainConfig, tmp_path) -> MarshalPPOTrainer:
    trainer = scoring_trainer(config, tmp_path)
    trainer.global_steps = 1
    return trainer


async def store_games(fake_tq: FakeTransferQueue, tree: bool, unit: str = "turn") -> list[dict]:
    """Four games (Kuhn and tic-tac-toe) stored as verl stores them; one row per turn sample
    (or per conversation turn) with its key, span and the fields the estimators read."""
    table = []
    for index, game in enumerate(["kuhn_poker", "tic_tac_toe"] * 2):
        uid, seed = f"prompt{index}", 10 + index
        server = ScriptedServer(cycling(index))
        row = {"game": game, "seed": seed, "prompt_style": "full", "invalid": "penalty"}
        if tree:
            row |= {"branches": K, "continuation": "random"}
        outputs = await make_loop(server).run(
            {"temperature": 1.0}, uid=uid, session_id=0, sample_unit=unit, **row
        )
        await store_like_verl(fake_tq, outputs, uid=uid, session_id=0, global_steps=1, **row)
        for i, output in enumerate(outputs):
            fields = output.extra_fields
            turns, rewards, states = fields[names.TURN], fields[names.REWARD], fields[names.STATE]
            spans = fields.get(names.SPANS, [(0, len(output.response_ids))])
            if not isinstance(turns, list):
                turns, rewards, states = [turns], [rewards], [states]
            for turn, reward, state, span in zip(turns, rewards, states, spans, strict=True):
                table.append(
                    {
                        "key": f"{uid}_0_{i}",
                        "span": tuple(span),
                        "episode": f"{uid}_0",
                        "game": game,
                        "seat": fields[names.SEAT],
                        "turn": turn,
                        "reward": reward,
                        "state": state,
                        "uid": fields.get(names.TREE_GROUP, uid),
                    }
                )
    return table


def score(
    fake_tq: FakeTransferQueue,
    trainer: MarshalPPOTrainer,
    tmp_path,
    monkeypatch,
    metrics: dict | None = None,
):
    """verl's steps before the advantage (pad, reorder, old log-probs), then the trainer's."""
    batch = upsample_batch_to_divisible_size(fake_tq.batch(), 16, tokenizer_of_tests().eos_token_id)
    order = list(range(len(batch)))
    random.Random(5).shuffle(order)
    batch.reorder(order)
    rollout = fake_tq.kv_batch_get(batch.keys, "train", ["rollout_log_probs"])
    old = TensorDict({"old_log_probs": rollout.get("rollout_log_probs")}, batch_size=len(batch))
    fake_tq.kv_batch_put(batch.keys, "train", fields=old)
    monkeypatch.setenv(names.TURNS_DIR_ENV, str(tmp_path / "turns"))
    monkeypatch.setenv(names.BRANCHES_RUN_ENV, str(tmp_path))
    trainer._compute_advantage(batch, metrics=metrics if metrics is not None else {})
    return batch


def stored_advantage_per_key(fake_tq, batch, table) -> dict[str, float]:
    stored = fake_tq.kv_batch_get(batch.keys, "train", ["advantages", "response_mask"])
    per_key = {}
    for key, advantages, mask in zip(
        batch.keys, stored["advantages"].unbind(), stored["response_mask"].unbind(), strict=True
    ):
        values = advantages[mask.bool()]
        if values.numel():
            assert torch.allclose(values, values[0].expand_as(values))
            per_key[key] = float(values[0])
    return per_key


@pytest.mark.parametrize("state_weight", [0.0, 0.5])
async def test_verl_scores_each_branch_within_its_tree_group(
    state_weight, fake_tq, tmp_path, monkeypatch
):
    table = await store_games(fake_tq, tree=True)
    options = {"state_weight": state_weight} if state_weight else {}
    config = TrainConfig(
        model="m", estimator="at_grpo", estimator_options=options, games=["kuhn_poker"]
    )
    if state_weight:
        monkeypatch.setenv(ESTIMATOR_SWITCHES_ENV, json.dumps(options))
    batch = score(fake_tq, trainer_for(config, tmp_path), tmp_path, monkeypatch)

    uids = fake_tq.kv_batch_get(batch.keys, "train", ["uid"]).get("uid").tolist()
    expected_uid = {row["key"]: row["uid"] for row in table}
    for key, tag, uid in zip(batch.keys, batch.tags, uids, strict=True):
        if not tag.get("is_padding"):
            assert uid == expected_uid[key]  # verl's uid is the branch's tree group
    frame = pd.DataFrame(table)
    assert frame.groupby("uid").size().eq(K).all()
    expected = compute_advantages(frame, "at_grpo", **options)
    assert len(set(np.round(expected, 6))) > 2  # the batch has signal
    per_key = stored_advantage_per_key(fake_tq, batch, table)
    assert [per_key[row["key"]] for row in table] == pytest.approx(list(expected), abs=1e-6)
    if not state_weight:  # inside a group the advantages sum to zero
        sums = pd.Series(expected).groupby(frame["uid"]).sum()
        assert np.allclose(sums, 0.0, atol=1e-9)
    dumped = [json.loads(line) for line in (tmp_path / "turns/step_1.jsonl").open()]
    assert sorted(d["uid"] for d in dumped) == sorted(frame["uid"])

    # The branch log: every branch once, with the advantage verl stored and its reply's action.
    lines = branch_log.read_step(tmp_path, 1)
    assert len(lines) == len(table)
    by_episode = {(line["episode"], line["seat"], line["turn"], line["branch"]) for line in lines}
    assert len(by_episode) == len(lines)
    stored = sorted(round(v, 6) for v in per_key.values())
    assert sorted(round(line["advantage"], 6) for line in lines) == stored
    assert sum(line["action"] is not None for line in lines) > len(lines) / 2
    for group in branch_log.groups_of(lines).values():
        assert len(group) == K and sum(line["chosen"] for line in group) == 1
        for line in group:
            assert line["reply"] and line["legal"] is not None
            assert line["action"] is None or line["action"] in line["reply"]


async def test_information_state_groups_on_conversation_samples(fake_tq, tmp_path, monkeypatch):
    table = await store_games(fake_tq, tree=False, unit="conversation")
    options = {"state_weight": 1.0}
    monkeypatch.setenv(ESTIMATOR_SWITCHES_ENV, json.dumps(options))
    config = TrainConfig(model="m", estimator="marshal", estimator_options=options)
    batch = score(fake_tq, trainer_for(config, tmp_path), tmp_path, monkeypatch)
    frame = pd.DataFrame(table)
    expected = compute_advantages(frame, "marshal", **options)
    assert not np.allclose(expected, compute_advantages(frame, "marshal"))  # the groups count
    dumped = [json.loads(line) for line in (tmp_path / "turns/step_1.jsonl").open()]
    by_turn = {(d["episode"], d["seat"], d["turn"]): d["advantage"] for d in dumped}
    got = [by_turn[(row["episode"], row["seat"], row["turn"])] for row in table]
    assert got == pytest.approx(list(expected), abs=1e-5)
    assert len(batch.keys) < len(table)  # conversations: several turns per sample


def test_at_grpo_refuses_a_uid_that_is_not_the_tree_group():
    fields = {
        names.GAME: "kuhn_poker",
        names.EPISODE: "e",
        names.SEAT: 0,
        names.TURN: 0,
        names.REWARD: 1.0,
        names.TREE_GROUP: group_key("e", 0, 0),
    }
    rows = TurnRows.from_extra_fields([fields, fields], [False, False])
    estimator = core_algos.get_adv_estimator_fn("at_grpo")
    rewards, mask = torch.zeros(2, 3), torch.ones(2, 3)
    with bound_turn_rows(rows), pytest.raises(MarsError, match="is not its tree group"):
        estimator(token_level_rewards=rewards, response_mask=mask, index=np.array(["p", "p"]))
    plain = {key: value for key, value in fields.items() if key != names.TREE_GROUP}
    rows = TurnRows.from_extra_fields([plain, plain], [False, False])
    with bound_turn_rows(rows), pytest.raises(MarsError, match="not a tree branch"):
        estimator(token_level_rewards=rewards, response_mask=mask, index=np.array(["p", "p"]))


# ---- the CLI --------------------------------------------------------------------------------


def test_a_dry_run_of_at_grpo_against_a_bot_writes_tree_rows(tmp_path):
    settings, _ = dry_run(
        tmp_path / "r", "--device", "cpu", "--model", "m", "--games", "kuhn_poker",
        "--estimator", "at_grpo", "--opponent", "random",
    )  # fmt: skip
    assert settings["algorithm.adv_estimator"] == "at_grpo"
    rows = pd.read_parquet(tmp_path / "r/verl/data/games.parquet")
    assert set(rows["opponent"]) == {"random"}
    assert set(rows["branches"]) == {4} and set(rows["sample_unit"]) == {"turn"}


def test_a_model_opponent_on_verl_is_one_error_line(tmp_path):
    result = run_mars(
        "train", "--trainer", "verl", "--model", "m", "--opponent", "pool", "--dry-run",
        "--out", str(tmp_path),
    )  # fmt: skip
    assert "plays bots only" in one_error_line(result)
    assert not any(tmp_path.iterdir())


# ---- group filtering and failed replays: left out of verl's update ---------------------------


async def test_verl_leaves_failed_and_filtered_groups_out_of_the_update(
    fake_tq, tmp_path, monkeypatch
):
    """A group one of whose replays failed is dropped whatever the filter; `mean` then drops half
    of the rest. Dropped rows get response mask 0 (verl's loss skips them) and the estimator
    scores the kept rows among themselves."""
    table = await store_games(fake_tq, tree=True)
    frame = pd.DataFrame(table)
    failed_group = frame["uid"].iloc[0]
    for row in table:
        if row["uid"] == failed_group:
            fake_tq.store[("train", row["key"])]["extra_fields"][names.REPLAY_FAILED] = True
    settings = GroupFilter("mean", 0.5)
    monkeypatch.setenv(names.GROUP_FILTER_ENV, json.dumps(settings.as_dict()))
    config = TrainConfig(model="m", estimator="at_grpo", games=["kuhn_poker"])
    metrics: dict = {}
    batch = score(fake_tq, trainer_for(config, tmp_path), tmp_path, monkeypatch, metrics)

    columns = ["game", "episode", "seat", "turn", "reward"]
    failed = (frame["uid"] == failed_group).to_numpy()
    selection = select_per_seat(frame[columns], settings, failed)
    keep = selection.keep
    assert failed.any() and (keep | failed).any() and not keep[failed].any()
    assert 0 < keep.sum() < len(keep) - failed.sum()  # the filter dropped groups of its own
    assert metrics["group_filter/dropped_groups/replay_failed"] == 1
    # ranked within each seat: half of each seat's groups still in (the failed one is out)
    per_seat = frame[~failed].groupby("seat")["uid"].nunique()
    assert metrics["group_filter/dropped_groups/mean"] == sum(n // 2 for n in per_seat) > 0
    masks = fake_tq.kv_batch_get([row["key"] for row in table], "train", ["response_mask"])
    for row, kept, mask in zip(table, keep, masks["response_mask"].unbind(), strict=True):
        assert bool(mask.any()) == kept, row  # dropped: mask 0, so no loss, KL or entropy
    per_key = stored_advantage_per_key(fake_tq, batch, table)
    expected = kept_advantages(frame[columns].to_dict("list"), keep, "at_grpo")
    assert [per_key[row["key"]] for row in table if row["key"] in per_key] == pytest.approx(
        list(expected[keep]), abs=1e-6
    )
    dumped = [json.loads(line) for line in (tmp_path / "turns/step_1.jsonl").open()]
    kept_groups = {uid: bool(keep[(frame["uid"] == uid).to_numpy()].any()) for uid in frame["uid"]}
    assert sorted((d["uid"], d["kept"]) for d in dumped) == sorted(
        (uid, kept_groups[uid]) for uid in frame["uid"]
    )


def _workflow_loop(server_manager: object, tokenizer: object) -> WorkflowAgentLoop:
    """verl's workflow agent loop on `server_manager`'s replies, short lengths."""
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from train_backend.verl.workflow_loop import WorkflowAgentLoop

    config = OmegaConf.create(
        {
            "actor_rollout_ref": {"rollout": {"prompt_length": 4096, "response_length": 64}},
            "data": {},
        }
    )
    return WorkflowAgentLoop(
        trainer_config=DictConfigWrap(config), server_manager=server_manager,
        tokenizer=tokenizer, processor=None, dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(config.data), hf_model_type="qwen3",
    )  # fmt: skip


async def test_the_n_runs_of_a_workflow_row_are_trees_of_their_own():
    """verl plays a dataset row `rollout.n` times under one uid (sessions 0..n-1): each run's
    branches are grouped within that run, and the prompt group is the uid."""
    from verl.workers.rollout.replica import TokenOutput

    tokenizer = tokenizer_of_tests()

    class Answers:
        """Answers 0, 1, 2, 0, ... in \\boxed{}, whatever the prompt."""

        def __init__(self) -> None:
            self.count = itertools.count()

        async def generate(self, request_id: str, **_: object) -> TokenOutput:
            text = f"\\boxed{{{next(self.count) % 3}}}"
            ids = [*tokenizer.encode(text, add_special_tokens=False), tokenizer.eos_token_id]
            return TokenOutput(token_ids=ids, log_probs=None, stop_reason="completed")

    loop = _workflow_loop(Answers(), tokenizer)
    row = {"workflow": "single", "problem_id": "p7", "question": "What is 1 + 1?", "answer": "2"}
    row |= {"source": "test", "branches": 2, "continuation": "random", "seed": 3, "uid": "u1"}
    groups = {}
    for session in (0, 1):
        outputs = await loop.run({"temperature": 1.0}, session_id=session, **row)
        assert len(outputs) == 2  # one call, two branches
        groups[session] = {o.extra_fields[names.TREE_GROUP] for o in outputs}
        assert {o.extra_fields[names.GROUP] for o in outputs} == {"u1"}
        assert groups[session] == {group_key(f"u1_{session}", 0, 0)}
    assert groups[0].isdisjoint(groups[1])


async def test_a_workflow_row_without_partners_branches_every_role_in_one_tree():
    """One policy for every role (no partners): the tool agent's and the reasoner's calls are
    both branched K ways, each (problem, role, call) one group, in the same run."""
    from verl.workers.rollout.replica import TokenOutput

    tokenizer = tokenizer_of_tests()
    replies = itertools.count()

    class Answers:
        """A program printing 0, 1 or 2, or an answer of 0, 1 or 2, in turn."""

        async def generate(self, request_id: str, **_: object) -> TokenOutput:
            n = next(replies) % 3
            text = f"```python\nprint({n})\n```\n\\boxed{{{n}}}"
            ids = [*tokenizer.encode(text, add_special_tokens=False), tokenizer.eos_token_id]
            return TokenOutput(token_ids=ids, log_probs=None, stop_reason="completed")

    loop = _workflow_loop(Answers(), tokenizer)
    row = {"workflow": "reasoner_tool", "problem_id": "p1", "question": "What is 1 + 1?"}
    row |= {"answer": "2", "source": "test", "branches": 3, "continuation": "random", "seed": 5}
    row |= {"uid": "u1", "workflow_options": json.dumps({"rounds": 1, "code_seconds": 5.0})}
    outputs = await loop.run({"temperature": 1.0}, session_id=0, **row)
    groups: dict[str, int] = {}
    for output in outputs:
        group = output.extra_fields[names.TREE_GROUP]
        groups[group] = groups.get(group, 0) + 1
    assert groups == {group_key("u1_0", 0, 0): 3, group_key("u1_0", 1, 0): 3}
