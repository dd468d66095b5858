"""Check an override list against verl's installed config files, the way main_ppo will read it.

`compose_verl_config` composes `ppo_trainer` from verl's own config directory with Hydra's compose
API (the same files and grammar `python -m verl.trainer.main_ppo` uses), then runs verl's own
`validate_config` on the result and checks what verl would only reject at its first update. Any
failure becomes one MarsError line naming the cause.
"""

from __future__ import annotations

import importlib.util
import math
import warnings
from pathlib import Path

from core.errors import MarsError

CONFIG_NAME = "ppo_trainer"


def verl_config_dir() -> Path:
    """verl's config files, found without importing verl (which takes seconds)."""
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        raise MarsError("verl is not installed: run `make setup-verl`")
    return Path(next(iter(spec.submodule_search_locations))).resolve() / "trainer" / "config"


def _one_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return " ".join(lines) or type(exc).__name__


def compose_verl_config(overrides: list[str], *, validate: bool = True):  # -> DictConfig
    """verl's `ppo_trainer` config with `overrides` applied, checked for what verl would reject
    at its first update, and (`validate`) validated as main_ppo validates it."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(verl_config_dir()), version_base=None):
            config = compose(config_name=CONFIG_NAME, overrides=overrides)
    except (HydraException, OmegaConfBaseException, ValueError) as exc:
        raise MarsError(f"verl rejects the overrides: {_one_line(exc)}") from exc
    finally:
        GlobalHydra.instance().clear()
    check_first_update(config)  # before importing verl, whose import is chatty on stderr
    if validate:
        _validate(config)
    return config


def _validate(config) -> None:  # config: omegaconf.DictConfig
    from omegaconf.errors import OmegaConfBaseException
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    try:
        with warnings.catch_warnings():
            # "Disabled critic as algorithm.adv_estimator != gae": intended, no critic here.
            warnings.simplefilter("ignore", UserWarning)
            validate_config(
                config=_without_vllm_lora_check(config),
                use_reference_policy=need_reference_policy(config),
                use_critic=need_critic(config),
            )
        omega_conf_to_dataclass(config.algorithm)
        omega_conf_to_dataclass(config.actor_rollout_ref.rollout)
    except ModuleNotFoundError as exc:
        # validate_config's last check, a LoRA rank against vLLM's, imports vLLM; a machine
        # without it (a CPU head node, a dry run here) leaves that check to the preflight.
        if not (exc.name or "").startswith("vllm"):
            raise MarsError(f"verl rejects the configuration: {_one_line(exc)}") from exc
    except (AssertionError, ValueError, TypeError, OmegaConfBaseException) as exc:
        raise MarsError(f"verl rejects the configuration: {_one_line(exc)}") from exc


def _without_vllm_lora_check(config):  # config: omegaconf.DictConfig
    """`config`, or where vLLM is not installed (a CPU head node, a dry run here) a copy without
    the LoRA rank: validate_config checks a LoRA rank against vLLM's allowed ranks by importing
    vLLM, which fails without it; the preflight's lora row checks the rank instead."""
    from omegaconf import OmegaConf

    model = config.actor_rollout_ref.model
    lora = int(model.get("lora_rank") or 0) or int((model.get("lora") or {}).get("rank") or 0)
    if not lora or importlib.util.find_spec("vllm") is not None:
        return config
    copy = OmegaConf.create(OmegaConf.to_container(config))
    copy.actor_rollout_ref.model.lora_rank = 0
    if "lora" in copy.actor_rollout_ref.model:
        copy.actor_rollout_ref.model.lora.rank = 0
    return copy


def check_first_update(config) -> None:  # config: omegaconf.DictConfig
    """What verl asserts only at its first actor update, after a whole rollout, checked now.

    - A PPO mini-batch is `ppo_mini_batch_size x rollout.n` rows (turns or conversations), and
      each must split evenly over the data-parallel ranks (verl/workers/engine_workers.py,
      `train_mini_batch`); `validate_config` does not check it.
    - With dynamic batching, a micro-batch's token budget must hold the longest sample
      (verl/utils/seqlen_balancing.py, `rearrange_micro_batches`).
    """
    actor = config.actor_rollout_ref.actor
    rollout = config.actor_rollout_ref.rollout
    gpus = int(config.trainer.n_gpus_per_node) * int(config.trainer.nnodes)
    ranks = max(1, gpus // int(actor.get("ulysses_sequence_parallel_size", 1) or 1))
    n = int(rollout.n)
    rows = int(actor.ppo_mini_batch_size) * n
    if rows % ranks:
        step = ranks // math.gcd(ranks, n)
        raise MarsError(
            f"verl would stop at its first update: a PPO mini-batch of {rows} rows "
            f"(actor.ppo_mini_batch_size {actor.ppo_mini_batch_size} x rollout.n {n}) does not "
            f"split over {ranks} data-parallel ranks; drop the ppo_mini_batch_size override "
            f"(mars sizes it from minibatch_turns) or make it a multiple of {step}"
        )
    longest = rollout.get("max_model_len")
    if not actor.use_dynamic_bsz or longest is None:
        return
    budgets = {
        "actor.ppo_max_token_len_per_gpu": actor.ppo_max_token_len_per_gpu,
        "rollout.log_prob_max_token_len_per_gpu": rollout.log_prob_max_token_len_per_gpu,
        "ref.log_prob_max_token_len_per_gpu": config.actor_rollout_ref.ref.get(
            "log_prob_max_token_len_per_gpu"
        ),
    }
    for key, budget in budgets.items():
        if budget is not None and int(budget) < int(longest):
            raise MarsError(
                f"verl would stop at its first update: {key} ({budget}) is shorter than the "
                f"longest sample ({longest} tokens: max_game_tokens + max_new_tokens); drop the "
                f"override or raise it to at least {longest}"
            )
