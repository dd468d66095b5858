"""The Hydra overrides that turn verl's `ppo_trainer` config into a MARSHAL self-play run.

`verl_overrides(config, paths)` maps each TrainConfig field to verl's key; the user's
`verl.extra_overrides` come last, so they win. Nothing here imports verl: `compose.py` checks the
result against verl's own config files.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import MarsError
from core.trackers import tracker_environment
from games.engine import retries_allowed
from train_backend.advantage import TREE_ESTIMATORS
from train_backend.config import TrainConfig
from train_backend.group_filter import GroupFilter
from train_backend.mas.config import LoraSettings, WorkflowTrainConfig
from train_backend.verl import names
from train_backend.verl.data import prompts_per_step, sample_unit
from train_backend.verl.policy_spec import POLICIES_ENV, PoliciesSpec, job_spec
from train_backend.verl.policy_spec import TRAINER_NAME as POLICIES_TRAINER

# verl's dual clip bound must be > 1; a bound no ratio reaches turns it off.
NO_DUAL_CLIP = 1.0e9
SUPPORTED_OPTIONS = ("gamma", "scale", "turn_level", "agent_specific", "state_weight")
# The code's ablation switches of marshal_reference and the information-state weight reach
# verl's estimator through the workers' environment (verl's algorithm config has no field for
# them).
ESTIMATOR_SWITCHES_ENV = "MARS_ESTIMATOR_SWITCHES"
CPU_RAY_CPUS = 16  # logical: TransferQueue and verl's helper actors each ask for one
# verl deletes older actor checkpoints beyond this; the CPU device keeps them all (a rehearsal
# saves every step, faster than the merge of a step two saves back may finish).
MAX_ACTOR_CHECKPOINTS = 2


@dataclass(frozen=True)
class RunPaths:
    """Where a verl run keeps its files inside the run directory."""

    root: Path

    @property
    def verl_dir(self) -> Path:
        return self.root / "verl"

    @property
    def dataset(self) -> Path:
        return self.verl_dir / "data" / "games.parquet"

    @property
    def verl_checkpoints(self) -> Path:
        return self.verl_dir / "checkpoints"

    @property
    def verl_metrics(self) -> Path:
        return self.verl_dir / "metrics.jsonl"

    @property
    def command_file(self) -> Path:
        return self.verl_dir / "command.sh"

    @property
    def turns(self) -> Path:
        return self.verl_dir / "turns"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"


_BARE = re.compile(r"^[A-Za-z0-9_./:@+-]+$")


def hydra_value(value: Any) -> str:
    """A value in Hydra's override grammar; strings that need it are single-quoted."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ",".join(hydra_value(item) for item in value) + "]"
    text = str(value)
    if _BARE.match(text) and text not in ("null", "true", "false"):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def worker_environment(
    paths: RunPaths,
    device: str = "cuda",
    switches: dict[str, Any] | None = None,
    group_filter: dict[str, Any] | None = None,
    loggers: list[str] | tuple[str, ...] = (),
    policies: PoliciesSpec | None = None,
) -> dict[str, str]:
    """Variables every verl process needs: the modules to import, where metrics and turns go,
    the estimator switches and group filtering verl's config has no field for, and where the
    chosen trackers write (`core.trackers.tracker_environment`: inside the run directory).

    With the CPU device its module comes first, so its platform is registered before anything
    asks verl for one, and `VERL_PLATFORM` selects it.
    """
    modules = [names.PLUGIN_MODULE]
    env = {}
    if device == "cpu":
        modules.insert(0, names.CPU_DEVICE_MODULE)
        env["VERL_PLATFORM"] = "cpu"
    env.update(
        {
            "VERL_USE_EXTERNAL_MODULES": ",".join(modules),
            "VERL_FILE_LOGGER_PATH": str(paths.verl_metrics.resolve()),
            names.TURNS_DIR_ENV: str(paths.turns.resolve()),
            names.BRANCHES_RUN_ENV: str(paths.root.resolve()),
        }
    )
    if switches:
        env[ESTIMATOR_SWITCHES_ENV] = json.dumps(switches, sort_keys=True)
    if group_filter:
        env[names.GROUP_FILTER_ENV] = json.dumps(group_filter, sort_keys=True)
    if policies is not None:
        env[POLICIES_ENV] = policies.to_json()
    env.update(tracker_environment(paths.root, loggers))
    return env


def verl_loggers(config: TrainConfig) -> list[str]:
    """verl's `trainer.logger`: console and file (RUN/verl/metrics.jsonl, which mars reads)
    always, then the run's trackers (`logger`)."""
    return ["console", "file", *(name for name in config.logger if name not in ("console", "file"))]


def group_filter_setting(config: TrainConfig) -> dict[str, Any] | None:
    """The run's group filtering for the trainer (`names.GROUP_FILTER_ENV`), None when off."""
    settings = GroupFilter.of(config)
    return settings.as_dict() if settings.active else None


def data_parallel_size(config: TrainConfig) -> int:
    return config.verl.n_gpus_per_node * config.verl.nnodes


def mini_batch_prompts(config: TrainConfig) -> int:
    """verl's `ppo_mini_batch_size`, sized so that a mini-batch's rows divide over the ranks.

    verl counts this setting in prompts and multiplies it by `rollout.n`, but it splits the
    step's batch by rows (turns, or seat conversations), and at the first update asserts that a
    mini-batch of rows divides evenly over the data-parallel ranks
    (verl/workers/engine_workers.py, `train_mini_batch`). So the rows of a mini-batch are
    `minibatch_turns` rounded down to a multiple of that, never more than a step surely holds
    (verl pads a batch up to whole mini-batches) and never less than one row per rank.
    """
    ranks, n = data_parallel_size(config), config.group_size
    step = ranks // math.gcd(ranks, n)  # prompts whose n rows each split over the ranks
    wanted = min(prompts_per_step(config) * samples_per_game(config), config.minibatch_turns // n)
    return max(step, wanted // step * step)


def samples_per_game(config: TrainConfig) -> int:
    """The training samples a game surely yields: one per seat as conversations (both seats of
    these two-player games in self-play, the policy's against an opponent), K branches of at
    least one turn when tree-sampled, else at least one turn."""
    if config.estimator in TREE_ESTIMATORS:
        return config.tree.branches
    conversation = sample_unit(config) == "conversation" and config.prompt_style == "full"
    if not conversation:
        return 1
    return 1 if config.opponent else 2


def sequence_lengths(config: TrainConfig) -> dict[str, int]:
    """verl's length settings for a sample: a turn's, or a seat's whole conversation.

    Every turn's context stays within `max_game_tokens` (the agent loop drops a game whose chat
    outgrows it) and its reply within `max_new_tokens`, so no sample is longer than their sum.
    A conversation's response is everything after its first prompt.
    """
    reply = longest_reply(config)
    budget = config.max_game_tokens + reply
    response = reply if sample_unit(config) == "turn" else budget
    return {"prompt": config.max_game_tokens, "response": response, "sequence": budget}


def cpu_device_settings(config: TrainConfig) -> dict[str, Any]:
    """What the CPU device (cpu_device.py) needs in verl's config.

    FSDP2 in fp32 (FSDP1 wants a device to sync module states; bf16 hides small updates),
    eager attention without padding removal or torch.compile, the `mars_cpu` rollout, one agent
    loop worker, one TransferQueue storage unit, and, unless attaching to a Ray cluster, a local
    Ray whose logical resources are what verl's pools ask for: a "GPU" per rank and more CPUs
    than TransferQueue's one-CPU actors need.
    """
    actor, ref = "actor_rollout_ref.actor", "actor_rollout_ref.ref"
    fp32 = {"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"}
    settings: dict[str, Any] = {
        "trainer.device": "cpu",
        f"{actor}.strategy": "fsdp2",
        f"{actor}.fsdp_config.strategy": "fsdp2",
        f"{ref}.fsdp_config.strategy": "fsdp2",
        f"{actor}.use_torch_compile": False,
        f"{actor}.fsdp_config.use_torch_compile": False,
        f"{ref}.use_torch_compile": False,
        f"{ref}.fsdp_config.use_torch_compile": False,
        f"+{actor}.fsdp_config.mixed_precision": fp32,
        f"+{ref}.fsdp_config.mixed_precision": fp32,
        "actor_rollout_ref.model.use_remove_padding": False,
        "+actor_rollout_ref.model.override_config.attn_implementation": "eager",
        "actor_rollout_ref.rollout.name": names.CPU_ROLLOUT,
        "actor_rollout_ref.rollout.agent.num_workers": 1,
        "transfer_queue.backend.SimpleStorage.num_data_storage_units": 1,
        "data.dataloader_num_workers": 0,
    }
    if not config.verl.ray_address:
        settings.update(
            {
                "ray_kwargs.ray_init.num_cpus": CPU_RAY_CPUS,
                "+ray_kwargs.ray_init.num_gpus": data_parallel_size(config),
                "+ray_kwargs.ray_init.include_dashboard": False,
            }
        )
    return settings


def adapter_of(config: TrainConfig) -> LoraSettings | None:
    return config.adapter if isinstance(config, WorkflowTrainConfig) else None


def lora_settings(config: TrainConfig) -> dict[str, Any]:
    """verl's own LoRA settings for a run whose policy is an adapter (`adapter: lora`); {} else.

    The FSDP engine wraps the actor with PEFT from `model.lora_rank`, `lora_alpha` and
    `target_modules` (verl/workers/engine/fsdp/transformer_impl.py, `_build_lora_module`: no
    dropout is passed, hence refused here), computes the KL reference as the actor with its
    adapter off (no second model), and after each step sends the rollout the adapter alone once
    the rollout holds the base: `rollout.load_format=safetensors` makes the rollout load the base
    from the model's files (with `dummy` verl would first send every base weight), which
    `layered_summon` (gathering the adapter one FSDP unit at a time) requires. verl's checkpoints
    keep only the adapter and its optimizer state (`save_lora_only`): that is all a resume
    needs, the base being the model's files.
    """
    lora = adapter_of(config)
    if lora is None:
        return {}
    if lora.dropout:
        raise MarsError(
            f"adapter.dropout {lora.dropout} on verl: verl 0.9.1 builds the LoRA adapter without "
            "dropout (set adapter.dropout: 0, or train with --trainer local)"
        )
    if lora.alpha != int(lora.alpha):
        raise MarsError(
            f"adapter.alpha {lora.alpha} on verl: verl 0.9.1 takes an integer lora_alpha "
            f"(e.g. {round(lora.alpha)})"
        )
    model, rollout = "actor_rollout_ref.model", "actor_rollout_ref.rollout"
    return {
        f"{model}.lora_rank": lora.rank,
        f"{model}.lora_alpha": int(lora.alpha),
        f"{model}.target_modules": lora.target_modules,
        f"{rollout}.load_format": "safetensors",
        f"{rollout}.layered_summon": config.verl.device != "cpu",
        "+actor_rollout_ref.actor.checkpoint.save_lora_only": True,
    }


def role_sampling_checked(config: TrainConfig) -> None:
    """Per-role sampling reaches verl's rollout per request (workflow_loop.py), except `stop`:
    the rollout is token-in/token-out and a reply cut at a stop string would not be the tokens
    sampled."""
    if not isinstance(config, WorkflowTrainConfig):
        return
    stops = sorted(role for role, sampling in config.role_sampling.items() if sampling.stop)
    if stops:
        raise MarsError(
            f"role_sampling: stop ({', '.join(stops)}) is not supported on verl (its rollout is "
            "token-in/token-out); drop it or train with --trainer local"
        )


def longest_reply(config: TrainConfig) -> int:
    """max_new_tokens, or a role's own when larger (role_sampling)."""
    if not isinstance(config, WorkflowTrainConfig):
        return config.max_new_tokens
    own = [s.max_new_tokens for s in config.role_sampling.values() if s.max_new_tokens]
    return max([config.max_new_tokens, *own])


def cluster_memory_settings() -> dict[str, Any]:
    """Memory and disk defaults for long games on GPUs (docs/verl.md has the arithmetic).

    - Entropy from the logits in chunks of 2,048 tokens: verl computes it on every old-log-prob
      pass, and unchunked it makes full-vocabulary copies of a 36,864-token micro-batch's logits.
    - The reference model's parameters offloaded to the CPU (verl 0.9.1's engine already does it
      for a forward-only model; set here so it stays so).
    - At most two actor checkpoints kept (fp32 weights + AdamW state: 12 bytes a parameter).
    """
    return {
        "actor_rollout_ref.actor.entropy_from_logits_with_chunking": True,
        "actor_rollout_ref.ref.fsdp_config.param_offload": True,
        "trainer.max_actor_ckpt_to_keep": MAX_ACTOR_CHECKPOINTS,
    }


def policies_settings(config: TrainConfig) -> dict[str, Any]:
    """A job of several policies (policies.py), colocated on the job's GPUs: verl's trainer
    for it and, on GPUs, each policy's rollout engine given its share of the memory the run
    gives rollouts (`gpu_memory_utilization` / policies: every policy's engine is awake during
    a step's rollout) and each actor's weights and optimiser state offloaded to the CPU
    between its updates (only the updating policy's stay on the GPUs)."""
    spec = job_spec(config)
    if spec is None:
        return {}
    settings: dict[str, Any] = {"trainer.v1.trainer_mode": POLICIES_TRAINER}
    if config.verl.device != "cpu":
        share = config.verl.gpu_memory_utilization / len(spec.policies)
        actor = "actor_rollout_ref.actor.fsdp_config"
        settings.update(
            {
                "actor_rollout_ref.rollout.gpu_memory_utilization": round(share, 4),
                f"{actor}.param_offload": True,
                f"{actor}.optimizer_offload": True,
            }
        )
    return settings


def estimator_switches(config: TrainConfig) -> dict[str, Any]:
    """The estimator options verl's config cannot carry (sent in `ESTIMATOR_SWITCHES_ENV`)."""
    options = config.estimator_options
    carried = ("turn_level", "agent_specific", "state_weight")
    return {name: options[name] for name in carried if name in options}


def estimator_settings(config: TrainConfig) -> dict[str, Any]:
    if config.estimator not in names.VERL_ESTIMATOR_NAMES:
        raise MarsError(
            f"unknown estimator {config.estimator!r} for the verl backend; choose one of: "
            f"{', '.join(names.VERL_ESTIMATOR_NAMES)}"
        )
    options = dict(config.estimator_options)
    unsupported = sorted(set(options) - set(SUPPORTED_OPTIONS))
    if unsupported:
        raise MarsError(
            f"estimator option(s) {', '.join(unsupported)} cannot be passed through verl; "
            f"the verl backend takes {', '.join(SUPPORTED_OPTIONS)}"
        )
    scale = options.get("scale", "mean_std")
    if scale not in ("mean_std", "mean"):
        raise MarsError(
            f"scale {scale!r} on verl: verl takes mean_std or mean (state_std runs on "
            "--trainer local only for now)"
        )
    weight = options.get("state_weight", 0.0)
    if isinstance(weight, bool) or not isinstance(weight, int | float) or weight < 0:
        raise MarsError(f"state_weight must be a number >= 0, got {weight!r}")
    return {
        "algorithm.adv_estimator": names.VERL_ESTIMATOR_NAMES[config.estimator],
        "algorithm.gamma": float(options.get("gamma", 1.0)),
        "algorithm.norm_adv_by_std_in_grpo": scale == "mean_std",
        "algorithm.use_kl_in_reward": False,
    }


def rollout_log_probs_kept(config: TrainConfig) -> bool:
    """Whether every sample carries the log-probs the rollout server reported. Not so for a
    tree's forced branches (all_actions, counterfactual: replies never sampled) nor for a
    workflow's branches (a call replayed into another run has no log-probs of its own)."""
    if isinstance(config, WorkflowTrainConfig):
        return False
    forced = config.tree.all_actions or config.tree.counterfactual
    return not (config.estimator in TREE_ESTIMATORS and forced)


def verl_settings(config: TrainConfig, paths: RunPaths) -> dict[str, Any]:
    """Every key we set on verl's config, in a stable order (user extras excluded)."""
    if config.model is None:
        raise MarsError(
            "the verl backend needs --model: a Hugging Face model folder or hub id "
            "(the embedded tiny model is for the CPU trainer)"
        )
    retries_allowed(config.invalid)  # a bad --invalid fails here, not in a Ray worker
    role_sampling_checked(config)
    cluster = config.verl
    prompts = prompts_per_step(config)
    lengths = sequence_lengths(config)
    dataset = str(paths.dataset.resolve())
    rollout = "actor_rollout_ref.rollout"
    actor = "actor_rollout_ref.actor"
    settings: dict[str, Any] = {
        **estimator_settings(config),
        "data.train_files": dataset,
        "data.val_files": dataset,
        "data.train_batch_size": prompts,
        "data.max_prompt_length": lengths["prompt"],
        "data.max_response_length": lengths["response"],
        "data.shuffle": False,
        "data.seed": config.seed,
        "actor_rollout_ref.model.path": config.model,
        f"{actor}.optim.lr": config.learning_rate,
        f"{actor}.optim.lr_warmup_steps": config.warmup_steps,
        f"{actor}.optim.lr_scheduler_type": config.lr_schedule,
        f"{actor}.optim.weight_decay": config.weight_decay,
        f"{actor}.optim.betas": list(config.adam_betas),
        f"{actor}.optim.min_lr_ratio": config.min_lr_ratio,
        f"{actor}.optim.clip_grad": config.grad_clip,
        f"{actor}.grad_clip": config.grad_clip,
        f"{actor}.clip_ratio": config.clip_ratio,
        f"{actor}.clip_ratio_low": config.clip_ratio,
        f"{actor}.clip_ratio_high": config.clip_ratio,
        f"{actor}.clip_ratio_c": config.dual_clip if config.dual_clip is not None else NO_DUAL_CLIP,
        f"{actor}.use_kl_loss": config.kl_coef > 0,
        f"{actor}.kl_loss_coef": config.kl_coef,
        f"{actor}.kl_loss_type": "low_var_kl",  # k3, as in the paper
        f"{actor}.entropy_coeff": 0.0,
        f"{actor}.loss_agg_mode": "seq-mean-token-mean",
        f"{actor}.ppo_epochs": config.ppo_epochs,
        f"{actor}.ppo_mini_batch_size": mini_batch_prompts(config),
        f"{actor}.use_dynamic_bsz": True,
        f"{actor}.ppo_max_token_len_per_gpu": lengths["sequence"],
        f"{rollout}.name": cluster.rollout_engine,
        f"{rollout}.n": config.group_size,
        f"{rollout}.temperature": config.temperature,
        f"{rollout}.top_p": config.top_p,
        f"{rollout}.top_k": config.top_k if config.top_k > 0 else -1,
        f"{rollout}.tensor_model_parallel_size": cluster.tensor_parallel_size,
        f"{rollout}.gpu_memory_utilization": cluster.gpu_memory_utilization,
        f"{rollout}.max_model_len": lengths["sequence"],
        f"{rollout}.seed": config.seed,
        f"{rollout}.agent.default_agent_loop": names.AGENT_LOOP_NAME,
        # Samples without the server's log-probs (see rollout_log_probs_kept): verl must not
        # compare them with the actor's.
        f"{rollout}.calculate_log_probs": rollout_log_probs_kept(config),
        # The agent loop scores every turn itself; verl's reward workers are never asked.
        "reward.num_workers": 0,  # no worker process to start (each imports verl: ~6 CPU-s)
        "trainer.use_v1": True,
        "trainer.v1.trainer_mode": names.TRAINER_NAME,
        "trainer.total_epochs": 1,
        "trainer.total_training_steps": config.steps,
        "trainer.save_freq": config.save_every,
        "trainer.test_freq": -1,
        "trainer.val_before_train": False,
        "trainer.n_gpus_per_node": cluster.n_gpus_per_node,
        "trainer.nnodes": cluster.nnodes,
        "trainer.default_local_dir": str(paths.verl_checkpoints.resolve()),
        "trainer.project_name": "mars",
        "trainer.experiment_name": paths.root.resolve().name,
        "trainer.logger": verl_loggers(config),
        "+ray_kwargs.ray_init.runtime_env.env_vars": worker_environment(
            paths,
            cluster.device,
            estimator_switches(config),
            group_filter_setting(config),
            config.logger,
            job_spec(config),
        ),
    }
    settings.update(policies_settings(config))
    if cluster.deterministic:
        for part in (f"{actor}.fsdp_config", "actor_rollout_ref.ref.fsdp_config", rollout):
            settings[f"{part}.full_determinism"] = True
    if cluster.ray_address:
        settings["+ray_kwargs.ray_init.address"] = cluster.ray_address
    if cluster.device == "cpu":
        settings.update(cpu_device_settings(config))
    else:
        settings.update(cluster_memory_settings())
    settings.update(lora_settings(config))
    return settings


def verl_overrides(config: TrainConfig, paths: RunPaths) -> list[str]:
    """The override list for `python -m verl.trainer.main_ppo`, user extras last."""
    overrides = []
    for key, value in verl_settings(config, paths).items():
        if isinstance(value, dict):
            inner = ",".join(f"{k}:{hydra_value(v)}" for k, v in value.items())
            overrides.append(f"{key}={{{inner}}}")
        else:
            overrides.append(f"{key}={hydra_value(value)}")
    return overrides + list(config.verl.extra_overrides)
