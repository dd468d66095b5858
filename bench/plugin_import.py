"""What the verl plugin costs each process that imports verl (issue 26).

verl imports `train_backend.verl.plugin` in every process it starts (driver, task runner,
workers, agent-loop workers). Side by side in one run, each in a fresh interpreter, alternating:

- `bare`: `import verl` with plugins off (`VERL_USE_EXTERNAL_PLUGINS=none`);
- `lazy`: `import verl` with the plugin as shipped (it registers when verl's registries load);
- `eager`: the plugin plus every module it registers (what the plugin imported before: the
  trainer, the estimators and both agent loops, with verl's stacks behind them).

The figure is the plugin's extra import time over `bare`, lazy against eager (medians).

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
IMPORTS = {
    "bare": ["verl"],
    "lazy": ["verl"],
    "eager": ["verl", *EAGER],
}
TARGET = 0.1  # the lazy plugin's extra time, as a share of the eager one's
PLUGINS = "verl.plugins"  # the entry-point group verl loads its plugins from
PLUGIN = "train_backend.verl.plugin"


def import_command(variant: str) -> list[str]:
    timed = "; ".join(f"import {module}" for module in IMPORTS[variant])
    code = f"import time; t = time.perf_counter(); {timed}; print(time.perf_counter() - t)"
    return [sys.executable, "-c", code]


def import_seconds(variant: str) -> float:
    env = dict(os.environ, VERL_USE_EXTERNAL_PLUGINS="none" if variant == "bare" else "auto")
    env.pop("VERL_USE_EXTERNAL_MODULES", None)
    result = subprocess.run(
        import_command(variant), capture_output=True, text=True, env=env, check=True
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
        print(f"{variant:<6} median {median[variant]:.2f} s  ({each})")
    lazy_extra = median["lazy"] - median["bare"]
    eager_extra = median["eager"] - median["bare"]
    report(
        "plugin_extra_import_lazy_over_eager",
        lazy_extra / eager_extra,
        TARGET,
        lazy_extra_s=round(lazy_extra, 3),
        eager_extra_s=round(eager_extra, 3),
        bare_s=round(median["bare"], 3),
        repeats=args.repeats,
    )


if __name__ == "__main__":
    main()
