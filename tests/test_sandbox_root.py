"""The sandbox's hidden root (harness/sandbox/rootfs.py): a program walks / from inside and
tries to open everything; what it opens must be on the allow-list (the interpreter, its standard
library, the shared libraries, a few devices, its own /proc and working folder), and the host's
project checkout, virtualenv, data sets, MARS cache and home are not there at all."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from core.files import mars_cache_dir
from harness.sandbox import SandboxLimits, TestCase, run_python, run_tests, sandbox_python
from harness.sandbox.rootfs import root_entries, visible_paths

ROOT = Path(__file__).resolve().parents[1]
IS_ROOT = os.geteuid() == 0
root_only = pytest.mark.skipif(not IS_ROOT, reason="the hidden root is checked as root")
LIMITS = SandboxLimits(cpu_seconds=30, wall_seconds=60, output_bytes=16 << 20)

WALK = """
import json, os, stat
opened, listed = [], []
for top, folders, files in os.walk("/"):
    for name in files + [f for f in folders if os.path.islink(os.path.join(top, f))]:
        path = os.path.join(top, name)
        try:  # non-blocking: /proc/self/fd/0 may be a pipe no one writes to
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            continue
        is_folder = stat.S_ISDIR(os.fstat(fd).st_mode)
        os.close(fd)
        if not is_folder:
            opened.append(os.path.realpath(path))
    listed.append(top)
probes = {path: os.path.exists(path) for path in PROBES}
print(json.dumps({"opened": opened, "listed": listed, "probes": probes, "pid": os.getpid(),
                  "cwd": os.getcwd()}))
"""


def host_secrets() -> list[str]:
    """Places a grader's answer key or a user's files live on this host."""
    places = [
        str(ROOT),
        str(ROOT / "tests" / "data" / "code" / "apps" / "test.jsonl"),
        sys.prefix,
        str(mars_cache_dir()),
        str(Path.home()),
        "/etc/passwd",
        "/etc/hostname",
        "/sys",
        "/var",
        "/usr/lib/python3/dist-packages",
    ]
    shared = ROOT.parent / "shared"
    if shared.is_dir():
        places.append(str(shared))
    return places


def allowed(path: str, workdir: str, own_pids: set[str]) -> bool:
    visible = visible_paths(sandbox_python())
    if any(path == v or path.startswith(v.rstrip("/") + "/") for v in visible):
        return True
    if path.startswith(workdir + "/"):
        return True
    parts = path.split("/")
    return parts[1] == "proc" and (parts[2] in ("self", "thread-self") or parts[2] in own_pids)


def walk_result(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


@root_only
def test_a_program_opens_nothing_outside_the_allow_list():
    program = WALK.replace("PROBES", repr(host_secrets()))
    result = run_python(program, LIMITS)
    assert result.ok, result.stderr_tail
    assert result.isolation.filesystem == "hidden"
    seen = walk_result(result.stdout)
    own = {str(seen["pid"])}
    outside = [p for p in seen["opened"] if not allowed(p, seen["cwd"], own)]
    assert outside == []
    assert not any(seen["probes"].values()), seen["probes"]
    # What it can open includes what it needs: the standard library and its working folder.
    assert any(p.endswith("/os.py") for p in seen["opened"])
    assert f"{seen['cwd']}/main.py" in seen["opened"]
    # /proc lists the run's own processes only.
    pids = {p.split("/")[2] for p in seen["listed"] if p.startswith("/proc/")}
    assert pids <= own | {"self", "thread-self"}


@root_only
def test_a_batch_case_sees_the_same_root():
    program = WALK.replace("PROBES", repr(host_secrets()))
    result = run_tests(program, [TestCase("", "")], LIMITS, per_test_seconds=30)
    outcome = result.outcomes[0]
    assert result.isolation.filesystem == "hidden"
    assert outcome.reason == "wrong", outcome.stderr_tail  # it printed, the test expects nothing
    seen = walk_result(outcome.actual)
    outside = [p for p in seen["opened"] if not allowed(p, seen["cwd"], {str(seen["pid"])})]
    assert outside == [] and not any(seen["probes"].values())


def test_the_allow_list_is_the_interpreter_its_library_and_devices():
    python = sandbox_python()
    kinds = {path: kind for path, kind, _ in root_entries(python)}
    visible = visible_paths(python)
    assert os.path.realpath(python) in visible or any(
        os.path.realpath(python).startswith(v + "/") for v in visible
    )
    assert kinds["/proc"] == "proc" and "/dev/null" in visible
    for secret in host_secrets():
        assert not any(secret == v or secret.startswith(v + "/") for v in visible), secret
    assert not any("site-packages" in v or "dist-packages" in v for v in visible)
