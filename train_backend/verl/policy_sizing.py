"""The preflight's `policies` row: a verl job of several policies (policies.py), sized."""

from __future__ import annotations

from typing import Any

from train_backend.config import TrainConfig
from train_backend.verl.model_files import lora_parameters, parameter_count, read_model_config
from train_backend.verl.policy_spec import job_spec
from train_backend.verl.preflight_rows import OK, REFUSED, UNCHECKED, Machine, Row, gb

# Rollout memory a policy's engine needs beyond its weights (KV cache for a few sequences,
# activations, CUDA graphs), as a share of its weights: the floor under which vLLM cannot start.
ROLLOUT_HEADROOM = 0.25
# The updating actor's state on the GPUs: fp32 weights, gradients and AdamW's two moments.
TRAIN_BYTES_PER_PARAMETER = 16


def policies_row(config: TrainConfig, composed: Any, machine: Machine) -> Row | None:
    """A job of several policies (policies.py), sized: each GPU holds one actor process and
    one rollout engine per policy. Refused (when this machine's GPU memory is known) when one
    policy's share of rollout memory cannot hold its weights, or when the updating actor's
    state does not fit beside the rollouts."""
    spec = job_spec(config)
    if spec is None:
        return None
    count = len(spec.policies)
    cluster = config.verl
    gpus = cluster.n_gpus_per_node * cluster.nnodes
    found = (
        f"{count} policies ({', '.join(spec.names)}) in one job, colocated on one pool of "
        f"{gpus} GPU(s): one actor and one rollout per policy on each"
    )
    model = composed.actor_rollout_ref.model
    rank = int(model.get("lora_rank") or 0)
    if rank:
        found += f"; LoRA: each actor holds the base and its adapter (rank {rank})"
    if cluster.device == "cpu":
        return Row("policies", found, OK)
    share = float(composed.actor_rollout_ref.rollout.gpu_memory_utilization)
    found += (
        f"; each rollout {share:.2f} of a GPU ({cluster.gpu_memory_utilization} / {count}), "
        "actors offloaded between updates"
    )
    memory = machine.gpu_memory()
    config_json = read_model_config(str(model.path))
    params = parameter_count(str(model.path), config_json)
    if memory is None or params is None:
        why = "no GPU on this machine" if memory is None else "model size unknown"
        return Row("policies", found, UNCHECKED, f"memory not checked: {why}")
    found += f"; {gb(memory)} a GPU"
    weights = 2 * params.count / cluster.tensor_parallel_size  # bf16 in the rollout
    if share * memory < weights * (1 + ROLLOUT_HEADROOM):
        return Row(
            "policies",
            found,
            REFUSED,
            f"each of {count} policies' rollouts gets {gb(share * memory)} of a GPU, less than "
            f"its {gb(weights)} of weights and room to generate: raise "
            "verl.gpu_memory_utilization, raise verl.tensor_parallel_size, or train fewer "
            "policies at once (phase_alternate_steps with verl.one_job: false)",
        )
    adapter = (
        lora_parameters(config_json.text, rank, model.get("target_modules"))
        if rank and config_json
        else None
    )
    trained = adapter or params.count
    state = TRAIN_BYTES_PER_PARAMETER * trained / gpus + (weights if rank else 0)
    room = (1 - cluster.gpu_memory_utilization) * memory
    if state > room:
        return Row(
            "policies",
            found,
            REFUSED,
            f"the updating policy's weights and optimiser state need {gb(state)} a GPU, "
            f"beside the rollouts' {cluster.gpu_memory_utilization} there is {gb(room)}: "
            "lower verl.gpu_memory_utilization or use more GPUs",
        )
    return Row("policies", found, OK)
