"""What our verl modules cost each process that imports verl (issue 26; the CPU device since).

verl imports `train_backend.verl.plugin` in every process it starts (driver, task runner,
workers, agent-loop workers), and with `--device cpu` `train_backend.verl.cpu_device` before it.
Side by side in one run, each in a fresh interpreter, alternating:

- `bare`: `import verl` with plugins off (`VERL_USE_EXTERNAL_PLUGINS=none`);
- `lazy`: `import verl` with the plugin as shipped (it registers when verl's registries load);
- `eager`: the plugin plus every module it registers (what the plugin imported before: the
  trainer, the estimators and both agent loops, with verl's stacks behind them);
- `cpu_lazy`: `import verl` as a `--device cpu` job's processes do (`VERL_USE_EXTERNAL_MODULES`
  naming the CPU device and the plugin, `VERL_PLATFORM=cpu`);
- `cpu_eager`: that plus what the CPU device imported before its hooks waited for their
  modules: verl's engines and engine workers, and the rollout.

The figures are the extra import time over `bare`, lazy against eager (medians), for the plugin
and for the CPU device; the headline is the larger of the two ratios.

Run: .venv/bin/python bench/plugin_import.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import DryRun, add_dry_run, report, run_dry

EAGER = (
    "train_backend.verl.trainer",
    "train_backend.verl.estimators",
    "train_backend.verl.agent_loop",
    "train_backend.verl.workflow_loop",
)
CPU_EAGER = (
    "verl.workers.engine",
    "verl.workers.engine_workers",
    "train_backend.verl.cpu_rollout",
)
IMPORTS = {
    "bare": ["verl"],
    "lazy": ["verl"],
    "eager": ["verl", *EAGER],
    "cpu_lazy": ["verl"],
    "cpu_eager": ["verl", *CPU_EAGER],
}
TARGET = 0.1  # the lazy modules' extra time, as a share of the eager ones'
PLUGINS = "verl.plugins"  # the entry-point group verl loads its plugins from
PLUGIN = "train_backend.verl.plugin"
CPU_DEVICE = "train_backend.verl.cpu_device"


def import_command(variant: str) -> list[str]:
    timed = "; ".join(f"import {module}" for module in IMPORTS[variant])
    code = f"import time; t = time.perf_counter(); {timed}; print(time.perf_counter() - t)"
    return [sys.executable, "-c", code]


def variant_env(variant: str) -> dict[str, str]:
    env = dict(os.environ, VERL_USE_EXTERNAL_PLUGINS="none" if variant == "bare" else "auto")
    env.pop("VERL_USE_EXTERNAL_MODULES", None)
    env.pop("VERL_PLATFORM", None)
    if variant.startswith("cpu_"):  # as the launcher sets them (train_backend/verl/launch.py)
        env.update(VERL_USE_EXTERNAL_MODULES=f"{CPU_DEVICE},{PLUGIN}", VERL_PLATFORM="cpu")
    return env


def import_seconds(variant: str) -> float:
    result = subprocess.run(
        import_command(variant),
        capture_output=True,
        text=True,
        env=variant_env(variant),
        check=True,
    )
    return float(result.stdout.strip().splitlines()[-1])


def dry_run(dry: DryRun) -> None:
    """Every module a variant imports is there (none imported: verl's own import is what is
    timed), and verl finds the plugin in its entry-point group (the lazy variant's)."""
    import importlib.util
    from importlib.metadata import entry_points

    from core.errors import MarsError

    for variant, modules in IMPORTS.items():
        for module in modules:
            if importlib.util.find_spec(module) is None:
                raise MarsError(f"{variant}: no module {module} (make setup-verl installs verl)")
        compile(import_command(variant)[2], variant, "exec")
        dry.count("command")
    if PLUGIN not in [point.value for point in entry_points(group=PLUGINS)]:
        raise MarsError(f"{PLUGIN} is not in the {PLUGINS} entry points (pip install -e .)")
    dry.count("entry point")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    add_dry_run(parser)
    args = parser.parse_args()
    if args.dry_run:
        run_dry(dry_run)
        return
    times: dict[str, list[float]] = {variant: [] for variant in IMPORTS}
    for _ in range(args.repeats):
        for variant in IMPORTS:
            times[variant].append(import_seconds(variant))
    median = {variant: statistics.median(values) for variant, values in times.items()}
    for variant, values in times.items():
        each = ", ".join(f"{value:.2f}" for value in values)
        print(f"{variant:<9} median {median[variant]:.2f} s  ({each})")
    extra = {variant: median[variant] - median["bare"] for variant in IMPORTS}
    plugin_ratio = extra["lazy"] / extra["eager"]
    device_ratio = extra["cpu_lazy"] / extra["cpu_eager"]
    report(
        "verl_modules_extra_import_lazy_over_eager",
        max(plugin_ratio, device_ratio),
        TARGET,
        plugin_ratio=round(plugin_ratio, 3),
        cpu_device_ratio=round(device_ratio, 3),
        **{
            f"{variant}_extra_s": round(extra[variant], 3)
            for variant in IMPORTS
            if variant != "bare"
        },
        bare_s=round(median["bare"], 3),
        repeats=args.repeats,
    )


if __name__ == "__main__":
    main()
