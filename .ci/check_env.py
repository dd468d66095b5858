"""Is the environment `make test` built consistent? One line per problem, exit 1 if any.

- `pip check` finds nothing, except what verl 0.9.1 declares and is installed without on purpose
  (`pip install --no-deps`: its pins would replace torch): two loggers and a build helper this
  project never uses, and its transformers ceiling, below the project's transformers (the verl
  tests run against that one; docs/verl.md).
- torch is still the version `make setup` installed (argument 1), and verl is 0.9.1.
"""

from __future__ import annotations

import subprocess
import sys

VERL = "0.9.1"
WAIVED = (
    f"verl {VERL} requires pybind11,",
    f"verl {VERL} requires tensorboard,",
    f"verl {VERL} requires wandb,",
    f"verl {VERL} has requirement transformers",
)


def problems(torch_version: str) -> list[str]:
    check = subprocess.run(
        [sys.executable, "-m", "pip", "check"], capture_output=True, text=True, check=False
    )
    found = [
        line
        for line in check.stdout.splitlines()
        if line.strip() and not line.startswith(WAIVED) and "No broken requirements" not in line
    ]
    import torch

    if not torch.__version__.startswith(torch_version):
        found.append(f"torch {torch.__version__} replaced torch {torch_version}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        if version("verl") != VERL:
            found.append(f"verl {version('verl')} is installed, the verl backend needs {VERL}")
    except PackageNotFoundError:
        found.append(f"verl is not installed (pip install --no-deps verl=={VERL})")
    return found


if __name__ == "__main__":
    lines = problems(sys.argv[1])
    for line in lines:
        print(f"environment: {line}", file=sys.stderr)
    sys.exit(1 if lines else 0)
