"""What would stop or waste a verl run on GPUs, refused in one line before Ray starts.

Each check is a `Row` of the table a dry run and a launch print; a refused row carries the
fix, and all refusals of a run end it as one `MarsError` line:

- stack: torch, transformers and the rollout engine within what verl 0.9.1 runs (`stack.py`),
  and flash-attn importable when the attention needs it. Enforced on a machine with CUDA, and
  for versions in any real launch on `cuda`; a dry run elsewhere shows what a GPU node refuses.
- attention: an `attn_implementation` other than flash attention only without padding removal
  (packed rows need variable-length kernels), and sequence parallelism only with it.
- context: `rollout.max_model_len` within the model's positions (its config.json, read from a
  local folder or the hub cache; said so when it cannot be read).
- resume: a resumed run's ranks equal to those that saved its checkpoint (verl names shards by
  world size and cannot load them on another).
- disk: room for two saves where verl writes its checkpoints.
- policies (policy_sizing.py): a job of several policies (policies.py) sized on each GPU: each
  policy's share of rollout memory must hold its weights, and the updating actor's state what
  the rollouts leave.

The facts are read where they live (package metadata on sys.path, config.json, checkpoint
folders); CUDA, free disk and GPU memory come from `Machine` (preflight_rows.py, with `Row`
and `Report`), which tests replace.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import re
from pathlib import Path
from typing import Any

from train_backend.config import TrainConfig
from train_backend.verl.checkpoints import LATEST_FILE
from train_backend.verl.model_files import (
    DTYPE_BYTES,
    ModelConfig,
    lora_parameters,
    max_context,
    parameter_count,
    read_model_config,
    where_looked,
)
from train_backend.verl.names import VERL_VERSION
from train_backend.verl.policy_sizing import policies_row
from train_backend.verl.preflight_rows import (
    OK,
    REFUSED,
    UNCHECKED,
    WARNING,
    Machine,
    Report,
    Row,
    gb,
)
from train_backend.verl.stack import PINS, SUPPORTED

# The module each flash attention implementation imports, and the package that brings it.
ATTENTION_MODULES = {"flash_attention_2": "flash_attn", "flash_attention_3": "flash_attn_interface"}
ATTENTION_PACKAGES = {"flash_attn": "flash-attn", "flash_attn_interface": "flash-attn-3"}
VERL_DEFAULT_ATTENTION = "flash_attention_2"  # verl/workers/config/model.py
# A save: the actor's fp32 weights plus AdamW's two fp32 moments (verl's FSDP shards), and the
# published Hugging Face copy in the model's dtype (bytes per parameter).
SAVE_BYTES_PER_PARAMETER = 12
MIN_SAVES = 2
# vLLM's allowed max_lora_rank values (vllm.config.lora.MaxLoRARanks; verl's fallback list in
# verl/workers/rollout/vllm_rollout/utils.py, get_vllm_max_lora_rank).
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
_SHARD = re.compile(r"^model_world_size_(\d+)_rank_\d+\.pt$")


def _one_line(exc: BaseException) -> str:
    text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def installed_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def import_problem(module: str) -> str | None:
    """None if `module` imports; else why not, in one line."""
    try:
        importlib.import_module(module)
    except Exception as exc:  # a broken CUDA build fails in many ways: report any of them
        return _one_line(exc)
    return None


def _in_range(name: str, version: str) -> bool:
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    try:
        return Version(version) in SpecifierSet(SUPPORTED[name].specifier)
    except InvalidVersion:
        return False


def version_row(name: str, *, enforce: bool) -> Row:
    found = installed_version(name)
    supported = SUPPORTED[name]
    pin = f", pin {PINS[name]}" if name in PINS else ""
    want = f"wants {supported.specifier}{pin}"
    if found is not None and _in_range(name, found):
        return Row(name, found, OK, want=want)
    if not enforce:
        return Row(name, found or "not installed", WARNING, "a GPU node refuses it", want)
    install = (
        f"`make setup-verl-gpu` installs {name}=={PINS[name]}"
        if name in PINS
        else f"install {name}{supported.specifier}"
    )
    have = f"{name} {found}" if found else f"{name} is not installed"
    note = (
        f"{have}, verl {VERL_VERSION} runs {name}{supported.specifier} ({supported.source}): "
        f"{install}"
    )
    return Row(name, found or "not installed", REFUSED, note, want)


def attention_module_row(module: str, implementation: str, *, cuda_here: bool) -> Row:
    package = ATTENTION_PACKAGES[module]
    found = installed_version(package)
    label = found or "not installed"
    if not cuda_here:
        return Row(package, label, UNCHECKED, "no CUDA on this machine; a GPU node imports it")
    problem = import_problem(module)
    if problem is None and (found is None or package not in SUPPORTED or _in_range(package, found)):
        return Row(package, label, OK)
    why = problem or f"{package} {found} is outside {SUPPORTED[package].specifier}"
    return Row(
        package,
        label,
        REFUSED,
        f"{module} does not import on this CUDA node ({why}) and verl builds the actor with "
        f"attn_implementation={implementation}: run `make setup-verl-gpu`, or choose the "
        "attention explicitly (verl.extra_overrides: "
        "+actor_rollout_ref.model.override_config.attn_implementation=sdpa and "
        "actor_rollout_ref.model.use_remove_padding=false; docs/verl.md)",
    )


def attention_settings(composed: Any) -> tuple[str, bool, int]:
    """(attn_implementation, use_remove_padding, ulysses size) verl will build the actor with."""
    model = composed.actor_rollout_ref.model
    override = model.get("override_config") or {}
    implementation = str(override.get("attn_implementation") or VERL_DEFAULT_ATTENTION)
    remove_padding = bool(model.get("use_remove_padding", True))
    ulysses = int(composed.actor_rollout_ref.actor.get("ulysses_sequence_parallel_size") or 1)
    return implementation, remove_padding, ulysses


def attention_row(implementation: str, remove_padding: bool, ulysses: int) -> Row:
    found = (
        f"{implementation}, padding removal {'on' if remove_padding else 'off'}, "
        f"sequence parallel {ulysses}"
    )
    if ulysses > 1 and not remove_padding:
        return Row(
            "attention",
            found,
            REFUSED,
            f"ulysses_sequence_parallel_size {ulysses} needs use_remove_padding=true (verl "
            "asserts it when its engine starts): drop the use_remove_padding=false override",
        )
    if remove_padding and implementation not in ATTENTION_MODULES:
        return Row(
            "attention",
            found,
            REFUSED,
            f"attn_implementation={implementation} with use_remove_padding=true: padding removal "
            "packs several samples into one row, which mars runs only on flash attention's "
            "variable-length kernels; add actor_rollout_ref.model.use_remove_padding=false to "
            "verl.extra_overrides, or use flash_attention_2 (flash-attn: make setup-verl-gpu)",
        )
    return Row("attention", found, OK)


def context_row(
    model: str, config: ModelConfig | None, max_model_len: int, engine: str, *, enforce: bool
) -> Row:
    found = f"max_model_len {max_model_len}"
    if config is None:
        return Row(
            "context",
            found,
            UNCHECKED,
            f"no config.json for {model} in {where_looked(model)}, so its "
            "max_position_embeddings cannot be read here (the hub is not asked)",
        )
    longest = max_context(config)
    if longest is None:
        return Row("context", found, UNCHECKED, f"{config.path} names no max_position_embeddings")
    found += f" of {longest} positions"
    if max_model_len <= longest:
        return Row("context", found, OK)
    note = (
        f"rollout.max_model_len {max_model_len} (max_game_tokens + max_new_tokens) is more than "
        f"the {longest} positions of {model} ({config.path}), which {engine} refuses at start-up: "
        f"lower max_game_tokens or max_new_tokens so they sum to at most {longest}"
    )
    return Row("context", found, REFUSED if enforce else WARNING, note)


def saved_world_size(actor_dir: Path) -> int | None:
    """The ranks that wrote a verl FSDP checkpoint: fsdp_config.json, else the shard names."""
    try:
        size = json.loads((actor_dir / "fsdp_config.json").read_text()).get("world_size")
        if isinstance(size, int):
            return size
    except (OSError, ValueError, AttributeError):
        pass
    sizes = {int(m.group(1)) for p in actor_dir.glob("*.pt") if (m := _SHARD.match(p.name))}
    return sizes.pop() if len(sizes) == 1 else None


def resume_folder(trainer: Any) -> Path | None:
    """The global_step_N folder verl would resume from (trainer.resume_mode), if any."""
    mode = str(trainer.get("resume_mode") or "auto")
    if mode == "disable":
        return None
    if mode == "resume_path":
        path = trainer.get("resume_from_path")
        return Path(str(path)) if path else None
    root = Path(str(trainer.default_local_dir))
    try:
        step = (root / LATEST_FILE).read_text().strip()
    except OSError:
        return None
    folder = root / f"global_step_{step}"
    return folder if step.isdigit() and folder.is_dir() else None


def resume_row(composed: Any) -> Row:
    trainer = composed.trainer
    gpus, nodes = int(trainer.n_gpus_per_node), int(trainer.nnodes)
    folder = resume_folder(trainer)
    if folder is None:
        return Row("resume", "no checkpoint to resume: starts at step 0", OK)
    actor = folder / "actor"
    saved = saved_world_size(actor)
    if saved is None:
        return Row("resume", str(actor), UNCHECKED, "no fsdp_config.json or shard files there")
    found = f"{folder.name} saved by {saved} ranks, this run has {gpus * nodes}"
    if saved == gpus * nodes:
        return Row("resume", found, OK)
    return Row(
        "resume",
        found,
        REFUSED,
        f"{actor} was saved by {saved} ranks (shards model_world_size_{saved}_rank_*.pt) and this "
        f"run has {gpus * nodes} (n_gpus_per_node {gpus} x nnodes {nodes}); verl loads a "
        f"checkpoint only on the world size that saved it: resume with {saved} GPUs in all, or "
        "start a new run directory from the published weights (--model RUN/checkpoints/step_N)",
    )


def existing_ancestor(path: Path) -> Path:
    path = path.resolve()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def lora_disk_row(
    model: str, config: ModelConfig | None, lora: Any, checkpoints: Path, machine: Machine
) -> Row:
    """A LoRA save: the adapter's fp32 weights and AdamW moments (verl's save_lora_only) plus
    the published adapter, the base never saved."""
    rank = int(lora.lora_rank)
    count = lora_parameters(config.text, rank, lora.get("target_modules")) if config else None
    if count is None:
        return Row("disk", "adapter size unknown", UNCHECKED, f"no decoder config.json for {model}")
    per_save = count * (SAVE_BYTES_PER_PARAMETER + DTYPE_BYTES["float32"])
    where = existing_ancestor(checkpoints)
    free = machine.disk_free(where)
    found = (
        f"{gb(free)} free at {where}; a save is {per_save / 1e6:.1f} MB "
        f"(a {count / 1e6:.1f}M-parameter adapter)"
    )
    if free >= MIN_SAVES * per_save:
        return Row("disk", found, OK)
    return Row(
        "disk",
        found,
        REFUSED,
        f"{where} has {gb(free)} free, less than {MIN_SAVES} adapter saves need "
        f"({gb(MIN_SAVES * per_save)}): free space or put the run on a larger disk",
    )


def disk_row(model: str, config: ModelConfig | None, checkpoints: Path, machine: Machine) -> Row:
    count = parameter_count(model, config)
    if count is None:
        return Row(
            "disk",
            "model size unknown",
            UNCHECKED,
            f"no weights index or config.json for {model} in {where_looked(model)}",
        )
    values = config.values if config else {}
    dtype = str(values.get("dtype") or values.get("torch_dtype") or "").removeprefix("torch.")
    published = DTYPE_BYTES.get(dtype, 2)  # bf16 unless the config says otherwise
    per_save = count.count * (SAVE_BYTES_PER_PARAMETER + published)
    need = MIN_SAVES * per_save
    where = existing_ancestor(checkpoints)
    free = machine.disk_free(where)
    found = (
        f"{gb(free)} free at {where}; a save is {gb(per_save)} "
        f"({count.count / 1e9:.2f}B parameters, {count.how}: "
        f"{SAVE_BYTES_PER_PARAMETER} + {published} bytes each)"
    )
    if free >= need:
        return Row("disk", found, OK)
    return Row(
        "disk",
        found,
        REFUSED,
        f"{where} has {gb(free)} free, less than {MIN_SAVES} saves of {model} need "
        f"({gb(need)}: fp32 weights and AdamW moments, {SAVE_BYTES_PER_PARAMETER} bytes a "
        f"parameter, plus the published copy, {published}): free space or put the run on a "
        "larger disk (--out / --run-dir)",
    )


def lora_row(composed: Any, *, cpu: bool) -> Row | None:
    """A LoRA run's settings as verl reads them (None without LoRA).

    Refused: a rank above vLLM's largest `max_lora_rank` (verl rounds the rank up to one of
    vLLM's allowed values, `get_vllm_max_lora_rank`, and raises past the last), and
    `layered_summon` with a `dummy` load format (verl raises at its first weight sync, after
    every worker and the rollout started: the summon needs the base already in the rollout).
    """
    model = composed.actor_rollout_ref.model
    rollout = composed.actor_rollout_ref.rollout
    rank = int(model.get("lora_rank") or 0)
    if rank <= 0:
        return None
    load_format = str(rollout.get("load_format") or "")
    layered = bool(rollout.get("layered_summon", False))
    found = (
        f"rank {rank}, alpha {model.get('lora_alpha')}, {model.get('target_modules')}; "
        f"rollout load_format {load_format}, layered_summon {'on' if layered else 'off'}"
    )
    if cpu:
        return Row("lora", found + "; the CPU rollout runs base + adapter", OK)
    if layered and "dummy" in load_format:
        return Row(
            "lora",
            found,
            REFUSED,
            "rollout.layered_summon needs the base model loaded by the rollout, not dummy "
            "weights (verl raises at its first weight sync): drop the load_format=dummy "
            "override, or set actor_rollout_ref.rollout.layered_summon=false",
        )
    if str(rollout.name) == "vllm":
        if rank > VLLM_LORA_RANKS[-1]:
            return Row(
                "lora",
                found,
                REFUSED,
                f"adapter.rank {rank} is above vLLM's largest max_lora_rank "
                f"({VLLM_LORA_RANKS[-1]}); choose a rank of at most {VLLM_LORA_RANKS[-1]}",
            )
        served = next(size for size in VLLM_LORA_RANKS if size >= rank)
        found += f"; vLLM max_lora_rank {served}"
    return Row("lora", found, OK)


def config_rows(
    config: TrainConfig, composed: Any, *, dry_run: bool, machine: Machine
) -> list[Row]:
    """Stack, attention, context, LoRA and the policies of one job: what needs no run
    directory."""
    model = str(composed.actor_rollout_ref.model.path)
    max_model_len = int(composed.actor_rollout_ref.rollout.max_model_len)
    model_config = read_model_config(model)
    lora = lora_row(composed, cpu=config.verl.device == "cpu")
    policies = policies_row(config, composed, machine)
    extra = [row for row in (lora, policies) if row is not None]
    if config.verl.device == "cpu":
        return [
            Row("stack", "the CPU device: verl's trainer, eager attention, no vLLM", OK),
            context_row(model, model_config, max_model_len, "vLLM", enforce=False),
            *extra,
        ]
    engine = str(composed.actor_rollout_ref.rollout.name)
    cuda_here = machine.cuda()
    enforce_versions = cuda_here or not dry_run
    rows = [version_row(name, enforce=enforce_versions) for name in ("torch", "transformers")]
    if engine in SUPPORTED:
        rows.append(version_row(engine, enforce=enforce_versions))
    implementation, remove_padding, ulysses = attention_settings(composed)
    if implementation in ATTENTION_MODULES:
        module = ATTENTION_MODULES[implementation]
        rows.append(attention_module_row(module, implementation, cuda_here=cuda_here))
    rows.append(attention_row(implementation, remove_padding, ulysses))
    rows.append(context_row(model, model_config, max_model_len, engine, enforce=True))
    return rows + extra


def run_dir_rows(composed: Any, machine: Machine) -> list[Row]:
    """Resume and disk: what the run directory (verl's checkpoint folder) decides."""
    model = str(composed.actor_rollout_ref.model.path)
    checkpoints = Path(str(composed.trainer.default_local_dir))
    model_config = read_model_config(model)
    lora = composed.actor_rollout_ref.model
    if int(lora.get("lora_rank") or 0) > 0:
        disk = lora_disk_row(model, model_config, lora, checkpoints, machine)
    else:
        disk = disk_row(model, model_config, checkpoints, machine)
    return [resume_row(composed), disk]


def check_installed_stack(machine: Machine | None = None) -> str:
    """`python -m train_backend.verl.stack check`: this machine's GPU stack as a GPU run sees it."""
    machine = machine or Machine()
    cuda_here = machine.cuda()
    rows = [version_row(name, enforce=True) for name in ("torch", "transformers", "vllm")]
    rows.append(attention_module_row("flash_attn", VERL_DEFAULT_ATTENTION, cuda_here=cuda_here))
    report = Report(rows)
    report.refuse()
    return report.table()
