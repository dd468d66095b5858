"""`mars --help` and the command modules import no heavy library: each command imports what it
uses inside its function, so a command that talks to a server starts in a fraction of a second.

Checked in a fresh interpreter: what a process has imported is the point.
"""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = (
    "torch",
    "transformers",
    "datasets",
    "pyspiel",
    "streamlit",
    "autogen_agentchat",
    "agent_framework",
    "verl",
    "ray",
    "pandas",
    "scipy",
)

PROBE = """
import json, sys
from harness.cli import main
main._register_commands()  # what `mars --help` imports: every command module
print(json.dumps(sorted(name for name in {heavy!r} if name in sys.modules)))
"""


def test_the_command_line_imports_no_heavy_library_before_a_command_runs() -> None:
    result = subprocess.run(
        [sys.executable, "-c", PROBE.format(heavy=HEAVY)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []


def test_mars_help_lists_the_commands_without_importing_them_heavily() -> None:
    code = (
        "import sys, runpy; sys.argv = ['mars', '--help']\n"
        "try:\n    runpy.run_module('harness', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        f"print('HEAVY', sorted(n for n in {HEAVY!r} if n in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert "eval" in result.stdout and "train" in result.stdout
    assert result.stdout.strip().splitlines()[-1] == "HEAVY []"
