"""Names shared by the verl adapter's processes: registry keys and per-sample field names.

Nothing here imports verl, so the launcher can build overrides without loading it.
"""

from __future__ import annotations

# The CPU device hooks into private verl names (cpu_device.py): it needs exactly this release.
VERL_VERSION = "0.9.1"

# verl registries (agent loops, trainers, advantage estimators) are keyed by these names.
AGENT_LOOP_NAME = "mars_selfplay"
WORKFLOW_LOOP_NAME = "mars_workflow"  # training inside a MAS workflow (workflow_loop.py)
TRAINER_NAME = "mars"
# What verl's @register stores for each agent loop (its class's module and qualified name); the
# plugin registers these strings without importing the loops.
AGENT_LOOP_TARGETS: dict[str, str] = {
    AGENT_LOOP_NAME: "train_backend.verl.agent_loop.SelfPlayAgentLoop",
    WORKFLOW_LOOP_NAME: "train_backend.verl.workflow_loop.WorkflowAgentLoop",
}
PLUGIN_MODULE = "train_backend.verl.plugin"
CPU_DEVICE_MODULE = "train_backend.verl.cpu_device"  # loaded first, only with verl.device: cpu
CPU_ROLLOUT = "mars_cpu"  # the CPU device's rollout (rollout.name)
TURNS_DIR_ENV = "MARS_VERL_TURNS_DIR"  # where the trainer writes each step's turns
BRANCHES_RUN_ENV = "MARS_VERL_BRANCHES_RUN"  # the run whose branches/ gets each tree step's log
# The run's group filtering (train_backend.group_filter.GroupFilter as JSON), read by the trainer;
# set only when the run filters
GROUP_FILTER_ENV = "MARS_GROUP_FILTER"

# Our estimator name -> the name it is registered under in verl. verl already has a "grpo"
# (one return per prompt group over the final output of each session), so ours gets a prefix.
VERL_ESTIMATOR_NAMES: dict[str, str] = {
    "marshal": "marshal",
    "marshal_reference": "marshal_reference",
    "no_turn_level": "no_turn_level",
    "no_agent_norm": "no_agent_norm",
    "grpo": "mars_grpo",
    "at_grpo": "at_grpo",
}

# Keys the agent loop writes into each output's `extra_fields` (one output per sample).
GAME = "mars_game"
SEED = "mars_seed"
EPISODE = "mars_episode"  # unique per played game: the prompt uid and the rollout session
GROUP = "mars_group"  # games replaying the same seed (the prompt uid): GRPO's group
SEAT = "mars_seat"
# A turn sample holds one value each; a conversation sample (one seat's whole chat) holds a list,
# one entry per turn, and SPANS.
TURN = "mars_turn"  # index among the seat's own turns, from 0
REWARD = "mars_reward"  # the turn's own shaped reward (verl's reward_score is overwritten)
LEGAL = "mars_legal"
ACTION = "mars_action"
SPANS = "mars_spans"  # [start, end) of each reply in the sample's response tokens
STATE = "mars_state"  # key of the prompt tokens a reply was sampled from (information state)
# Tree samples (at_grpo): one sample per branch. TREE_GROUP is the group key (episode, seat,
# turn) the trainer writes into verl's `uid` before scoring, so verl's grouping is the tree's.
TREE_GROUP = "mars_tree_group"
BRANCH = "mars_branch"
CHOSEN = "mars_chosen"  # the branch that continued the main line
FORCED = "mars_forced"  # an all-actions / counterfactual branch: a reply with its answer rewritten
# A branch of a group one of whose replays could not finish: the trainer leaves the group out
REPLAY_FAILED = "mars_replay_failed"
# For the branch log (core.branch_log) only: a branch's reply (clipped) and its role
REPLY = "mars_reply"
OBSERVATION = "mars_observation"  # the last user message the seat was shown (clipped)
ROLE = "mars_role"
# "row seed:session:index" of a sample among its row's outputs: the trainer puts a step's samples
# in this order (rows finish in an order that varies from run to run)
ORDER = "mars_order"
# What the CPU rollout prints (into verl's log) when it takes a LoRA adapter from the trainer.
ROLLOUT_ADAPTER_LOG = "mars_cpu rollout: LoRA adapter"
