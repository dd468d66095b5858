"""`mars --help` and the command modules import no heavy library: each command imports what it
uses inside its function, so a command that talks to a server starts in a fraction of a second.

Checked in a fresh interpreter: what a process has imported is the point.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import DATA_DIR, mars_env

from harness.testing.scripted_server import Reply, ScriptedServer

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
from mars import main
main.register_commands()  # what `mars --help` imports: every command module
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
    # `mars` leaves through os._exit after running the atexit handlers: report from one.
    code = (
        "import atexit, sys, runpy; sys.argv = ['mars', '--help']\n"
        f"heavy = {HEAVY!r}\n"
        "atexit.register(lambda: print('HEAVY', sorted(n for n in heavy if n in sys.modules)))\n"
        "runpy.run_module('mars', run_name='__main__')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "eval" in result.stdout and "train" in result.stdout
    assert result.stdout.strip().splitlines()[-1] == "HEAVY []"


# What a plain-http eval of one suite with `--mas single` loads: no SDK (the lean HTTP path
# sends it), no `datasets` (the suite's local file is read line by line), no numpy (only a
# bootstrap needs it), no other MAS framework.
NOT_FOR_A_PLAIN_EVAL = (
    *HEAVY,
    "openai",
    "numpy",
    "autogen_core",
    "agent_framework",
    "huggingface_hub",
)

EVAL_PROBE = """
import atexit, json, runpy, sys
HEAVY = {heavy!r}
out = {out!r}
def record():
    with open(out, "w") as handle:
        json.dump(sorted(name for name in HEAVY if name in sys.modules), handle)
atexit.register(record)
sys.argv = ["mars", *{args!r}]
runpy.run_module("mars", run_name="__main__")
"""


def test_a_plain_http_eval_loads_only_what_it_uses(tmp_path: Path) -> None:
    out = tmp_path / "modules.json"
    with ScriptedServer(lambda req: Reply(text="The answer is \\boxed{18}.")) as server:
        args = [
            "eval", "--suite", "gsm8k", "--limit", "2", "--base-url", server.base_url,
            "--model", "scripted", "--run-dir", str(tmp_path / "run"), "--quiet",
            "--data-dir", str(DATA_DIR),
        ]  # fmt: skip
        code = EVAL_PROBE.format(heavy=NOT_FOR_A_PLAIN_EVAL, out=str(out), args=args)
        result = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=mars_env()
        )
        assert len(server.seen) == 2, result.stderr
    assert result.returncode == 0, result.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["suites"]["gsm8k"]["n"] == 2  # the fast exit kept what the run wrote
    assert json.loads(out.read_text()) == []


def test_each_builtin_system_is_found_in_the_module_named_for_it() -> None:
    from mas import base

    probe = (
        "import json, sys\nfrom mas.base import get_mas\nget_mas('single')\n"
        "print(json.dumps(sorted(m for m in ('mas.autogen_team', 'mas.agent_framework_chat',"
        " 'mas.mad') if m in sys.modules)))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert json.loads(result.stdout) == []
    # The index get_mas imports from is read off the registered modules' decorators: it names
    # every registered system, each in the module that defines it.
    assert set(base.list_mas()) == set(base.builtin_systems())
    for name, module in base.builtin_systems().items():
        assert base.get_mas(name).__module__ == module
    defining = {
        f"mas.{path.stem}"
        for path in Path(base.__file__).parent.glob("*.py")
        if "\n@mas(" in path.read_text(encoding="utf-8")
    }
    assert defining == set(base.SYSTEM_MODULES)  # no file in mas/ left out of the registry
