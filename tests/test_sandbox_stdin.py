"""The sandbox with stdin, and many test cases in one sandbox start (harness.sandbox.batch).

The hostile programs of tests/test_sandbox.py run again through `run_tests`, all batches in
flight together (one event loop), each with the hostile behaviour in its first case and a
check in its second: the second case must still run, pass, and (as root) see no process of its
own uid but itself and the batch runner, so nothing of the first case survived it.
"""

from __future__ import annotations

import asyncio
import os
import socket
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import pytest

from harness.sandbox import (
    SandboxLimits,
    TestCase,
    TestsResult,
    normalise_output,
    outputs_match,
    run_python,
    run_python_async,
    run_tests,
    run_tests_async,
)

IS_ROOT = os.geteuid() == 0
root_only = pytest.mark.skipif(not IS_ROOT, reason="own uid and mount isolation need root")

LIMITS = SandboxLimits(
    cpu_seconds=2,
    wall_seconds=20,
    memory_bytes=256 * 1024 * 1024,
    output_bytes=4096,
    max_processes=8,
    file_bytes=1024 * 1024,
    disk_bytes=2 * 1024 * 1024,
)
PER_TEST = 1.5
SECRET = "mars-test-secret-4d1f"

# Runs in the second case of every hostile batch: "ok" when this process is the only live
# process of the uid but the batch runner, its parent (as root; elsewhere the uid is shared:
# "ok" always). Under the hidden root's /proc the runner is not even listed (not dumpable).
ALONE = """
def _alone():
    if os.getuid() == {caller_uid}:
        return True
    count = 0
    for name in filter(str.isdigit, os.listdir("/proc")):
        if int(name) == os.getppid():
            continue
        try:
            fields = open(f"/proc/{{name}}/status").read().split("\\n")
        except OSError:
            continue
        state = next((f for f in fields if f.startswith("State:")), "Z")
        uids = next((f for f in fields if f.startswith("Uid:")), "").split()[1:2]
        if uids == [str(os.getuid())] and "Z" not in state:
            count += 1
    return count == 1
"""


def batch_program(hostile: str) -> str:
    """First case (stdin "1"): `hostile`; second (stdin "2"): "ok" if nothing is left."""
    body = textwrap.indent(textwrap.dedent(hostile).strip(), "    ")
    preamble = ALONE.format(caller_uid=os.getuid())
    return (
        f"import os, sys\n{preamble}\nif input() == '1':\n{body}\n"
        "else:\n    print('ok' if _alone() else 'leftover')\n"
    )


# What reaching for the host's files ends with: "filesystem" where a path exists read-only
# (EROFS, EACCES), "error" (FileNotFoundError) where the hidden root does not have it at all.
HOST_HIDDEN = {"filesystem", "error"}

TWO_CASES = [TestCase("1\n", "ok\n"), TestCase("2\n", "ok\n")]


def live_processes_of(uid: int) -> list[int]:
    pids = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            status = Path(f"/proc/{name}/status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if not fields["State"].strip().startswith("Z") and str(uid) in fields["Uid"].split()[:3]:
            pids.append(int(name))
    return pids


def batch_uid(result: TestsResult) -> int:
    assert result.isolation.user.startswith("uid "), result.isolation
    return int(result.isolation.user.split()[1])


@pytest.fixture(autouse=True)
def no_working_folder_left_behind():
    pattern = f"mars-sandbox-{os.getpid()}-*"
    before = set(Path(tempfile.gettempdir()).glob(pattern))
    yield
    assert set(Path(tempfile.gettempdir()).glob(pattern)) <= before


# ---------------------------------------------------------------------------------------------
# stdin, many tests in one start, per-case limits, comparison


def test_stdin_is_fed_to_a_single_run():
    echo = "import sys\ndata = sys.stdin.read()\nprint(len(data), data.upper().split())"
    result = run_python(echo, LIMITS, stdin="abc déf\nxyz\n")
    assert result.ok and result.stdout == "12 ['ABC', 'DÉF', 'XYZ']\n"
    result = run_python("print(input()[::-1])", LIMITS, stdin=b"olleh\n")
    assert result.ok and result.stdout == "hello\n"
    # A program that never reads its stdin ends normally; the rest of the input is dropped.
    result = run_python("print('done')", LIMITS, stdin="x" * 5_000_000)
    assert result.ok and result.stdout == "done\n"
    result = run_python("print(repr(input()))", LIMITS)  # no stdin given: /dev/null
    assert result.reason == "error" and "EOFError" in result.stderr_tail


async def test_stdin_is_fed_on_the_event_loop():
    results = await asyncio.gather(
        *(run_python_async("print(int(input()) * 2)", LIMITS, stdin=f"{n}\n") for n in range(3))
    )
    assert [r.stdout for r in results] == ["0\n", "2\n", "4\n"]


def test_many_tests_run_in_one_start():
    # Every case is a new process (its own pid) whose parent is the same batch runner: one
    # sandbox start served them all; each saw its own stdin.
    code = "import os, sys\nn = int(input())\nprint(n * n)\n"
    code += "print(os.getpid(), os.getppid(), file=sys.stderr)"
    tests = [TestCase(f"{n}\n", f"{n * n}\n") for n in range(6)]
    result = run_tests(code, tests, LIMITS, per_test_seconds=PER_TEST)
    assert result.ok and result.reason is None
    assert result.passed == 6 and result.pass_ratio == 1.0
    pids, parents = zip(*(map(int, o.stderr_tail.split()) for o in result.outcomes), strict=True)
    assert len(set(pids)) == 6 and len(set(parents)) == 1
    assert parents[0] not in pids
    if IS_ROOT:
        assert result.isolation.network == "namespace"
        assert result.isolation.filesystem == "hidden"
        assert live_processes_of(batch_uid(result)) == []


def test_a_case_over_its_time_does_not_stop_the_others():
    code = "import time\nn = input()\nif n == 'slow':\n    time.sleep(60)\nprint(n)"
    tests = [TestCase("a\n", "a\n"), TestCase("slow\n", "slow\n"), TestCase("b\n", "b\n")]
    result = run_tests(code, tests, LIMITS, per_test_seconds=0.5)
    assert result.ok
    assert [o.reason for o in result.outcomes] == [None, "timeout", None]
    assert 0.5 <= result.outcomes[1].wall_seconds < 30  # killed at its time, not the sleep's 60
    assert result.passed == 2 and result.pass_ratio == pytest.approx(2 / 3)


def test_whitespace_normalisation():
    assert normalise_output("1 2 \r\n3\t\n\n\n") == "1 2\n3"
    assert outputs_match("yes  \n\n", "yes")
    assert outputs_match("a\r\nb", "a\nb\n")
    assert not outputs_match(" yes", "yes")  # leading space counts
    assert not outputs_match("a\n\nb", "a\nb")  # an empty line inside counts
    assert not outputs_match("Yes", "yes")
    assert not outputs_match("1 2", "1  2")
    code = "print('3 ')\nprint()\nprint()"
    result = run_tests(code, [TestCase("", "3"), TestCase("", "3\n\n")], LIMITS)
    assert result.passed == 2


def test_a_wrong_answer_shows_actual_and_expected():
    code = "a, b = map(int, input().split())\nprint(a - b)"
    tests = [TestCase("5 3\n", "2\n"), TestCase("2 2\n", "4\n")]
    result = run_tests(code, tests, LIMITS, per_test_seconds=PER_TEST)
    right, wrong = result.outcomes
    assert right.passed and right.reason is None and right.actual == "2\n"
    assert not wrong.passed and wrong.reason == "wrong"
    assert (wrong.actual, wrong.expected, wrong.stdin) == ("0\n", "4\n", "2 2\n")
    assert result.ok and result.passed == 1 and result.pass_ratio == 0.5


def test_errors_and_exits_are_per_case():
    code = textwrap.dedent(
        """
        n = input()
        if n == "exit":
            print("fine")
            exit()
        if n == "code":
            print("fine")
            raise SystemExit(3)
        if n == "raise":
            raise ValueError("bad input")
        print("fine")
        """
    )
    cases = ["plain", "exit", "code", "raise"]
    result = run_tests(code, [TestCase(f"{c}\n", "fine\n") for c in cases], LIMITS)
    outcomes = dict(zip(cases, result.outcomes, strict=True))
    assert outcomes["plain"].passed and outcomes["exit"].passed
    assert outcomes["code"].reason == "error" and outcomes["code"].exit_code == 3
    raised = outcomes["raise"]
    assert raised.reason == "error" and raised.stderr_tail.endswith("ValueError: bad input\n")
    assert 'File "main.py", line 10' in raised.stderr_tail
    assert "batch_child" not in raised.stderr_tail  # the runner's own frame is not shown


def test_a_syntax_error_fails_every_case_with_its_message():
    result = run_tests("def broken(:\n", TWO_CASES, LIMITS)
    assert result.ok and result.passed == 0
    assert all(o.reason == "error" and "SyntaxError" in o.stderr_tail for o in result.outcomes)


def test_no_tests_start_nothing():
    result = run_tests("raise SystemExit(1)", [], LIMITS)
    assert result.ok and result.outcomes == [] and result.pass_ratio == 0.0


def test_a_batch_over_its_wall_clock_fails_the_unfinished_cases():
    code = "import time\ntime.sleep(float(input()))\nprint('ok')"
    tests = [TestCase("0\n", "ok\n"), TestCase("600\n", "ok\n"), TestCase("0\n", "ok\n")]
    limits = SandboxLimits(wall_seconds=3.0)  # room for the start and the first case on a busy box
    result = run_tests(code, tests, limits, per_test_seconds=900)
    assert not result.ok and result.reason == "timeout"
    assert [o.reason for o in result.outcomes] == [None, "timeout", "timeout"]
    assert result.pass_ratio == pytest.approx(1 / 3)


# ---------------------------------------------------------------------------------------------
# hostile programs, through run_tests


@pytest.fixture(scope="module")
def victim_dir():
    path = Path(tempfile.mkdtemp(prefix="sandbox-stdin-victim-"))
    path.chmod(0o777)
    (path / "keep.txt").write_text("parent's file")
    yield path
    for child in path.iterdir():
        child.unlink()
    path.rmdir()


@pytest.fixture(scope="module")
def loopback_server():
    server = socket.create_server(("127.0.0.1", 0))
    server.setblocking(False)
    yield server
    server.close()


def hostile_programs(victim: Path, port: int) -> dict[str, tuple[str, set[str | None]]]:
    """name -> (what the first case does, the reasons it may end with)."""
    outside = [
        "/tmp",
        "/var/tmp",
        "/dev/shm",
        str(Path(__file__).parent),
        str(victim),
    ]
    return {
        "infinite loop": ("while True: pass", {"timeout", "cpu"}),
        "ignores SIGXCPU": (
            "import signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\nwhile True: pass",
            {"timeout", "cpu"},
        ),
        "sleeps forever": ("import time\ntime.sleep(3600)", {"timeout"}),
        "memory blow-up": ("blob = bytearray(1 << 30)", {"memory"}),
        "fork bomb": ("while True:\n    os.fork()", {"processes"}),
        "fork bomb ignoring errors": (
            "while True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
            {"timeout", "cpu"},
        ),
        "thread bomb": (
            "import threading\nstop = threading.Event()\nfor _ in range(100):\n"
            "    threading.Thread(target=stop.wait, daemon=True).start()",
            {"processes"},
        ),
        "endless stdout": ("while True:\n    print('x' * 100)", {"output"}),
        "endless stderr": ("while True:\n    sys.stderr.write('x' * 100)", {"output"}),
        "writes outside": (
            f"for folder in {outside!r}:\n"
            "    try:\n        open(folder + '/sandbox-escape.txt', 'w')\n"
            "    except OSError as error:\n        last = error\n"
            "    else:\n        print('escaped', folder)\nraise last",
            HOST_HIDDEN,
        ),
        "deletes the parent's files": (f"os.remove({str(victim / 'keep.txt')!r})", HOST_HIDDEN),
        "connects to a loopback server": (
            f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)",
            {"network"},
        ),
        "resolves a name": ("import socket\nsocket.getaddrinfo('example.com', 80)", {"network"}),
        "daemon after double fork": (
            "import time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
            "        time.sleep(3600)\n    os._exit(0)\nprint('ok')",
            {None},
        ),
        "leaves a subprocess running": (
            "import subprocess\nsubprocess.Popen([sys.executable, '-c', "
            "'import time; time.sleep(3600)'])\nprint('ok')",
            {None},
        ),
        "recursion": ("def f(n):\n    return f(n + 1)\nf(0)", {"recursion"}),
        "deep C recursion": (
            "import json\nsys.setrecursionlimit(10**8)\nnested = []\nfor _ in range(10**6):\n"
            "    nested = [nested]\njson.dumps(nested)",
            {"crash"},
        ),
        "file over the size limit": ("open('big', 'wb').write(b'x' * (2 << 20))", {"disk"}),
        "too many open files": ("handles = [open('main.py') for _ in range(1000)]", {"files"}),
        "signals the caller": (f"os.kill({os.getpid()}, 9)", {"permission"}),
        "becomes root": ("os.setuid(0)", {"permission"}),
        "forges a result through /proc": (
            "fd = os.open(f'/proc/{os.getppid()}/fd/1', os.O_WRONLY)\nos.write(fd, b'R' * 64)",
            HOST_HIDDEN,
        ),
        "prints its environment": (
            f"print('ok' if {SECRET!r} not in repr(os.environ) else 'leak')",
            {None},
        ),
    }


@pytest.fixture(scope="module")
def hostile_results(victim_dir, loopback_server) -> dict[str, TestsResult]:
    programs = hostile_programs(victim_dir, loopback_server.getsockname()[1])
    os.environ["MARS_TEST_SECRET"] = SECRET  # in our environment, never in the sandbox's

    async def run_all() -> list[TestsResult]:
        batches = [
            run_tests_async(
                batch_program(code),
                TWO_CASES,
                LIMITS,
                # Programs that end by themselves get room on a loaded machine.
                per_test_seconds=PER_TEST if {"timeout", "cpu"} & reasons else 5,
            )
            for code, reasons in programs.values()
        ]
        return await asyncio.gather(*batches)

    try:
        results = asyncio.run(run_all())
    finally:
        del os.environ["MARS_TEST_SECRET"]
    return dict(zip(programs, results, strict=True))


@pytest.mark.parametrize("name", list(hostile_programs(Path("/x"), 1)))
def test_hostile_programs_are_contained_case_by_case(
    name, hostile_results, victim_dir, loopback_server
):
    result = hostile_results[name]
    expected = hostile_programs(victim_dir, 1)[name][1]
    first, second = result.outcomes
    assert result.ok, (result.reason, result.stderr_tail)
    assert first.reason in expected, (first.reason, first.actual[:200], first.stderr_tail[-300:])
    assert second.passed, (second.reason, second.actual, second.stderr_tail[-300:])
    if IS_ROOT:
        assert live_processes_of(batch_uid(result)) == []
    with pytest.raises(BlockingIOError):
        loopback_server.accept()  # no connection ever arrived
    assert [p.name for p in victim_dir.iterdir()] == ["keep.txt"]
    assert not Path("/tmp/sandbox-escape.txt").exists()
    assert not (Path(__file__).parent / "sandbox-escape.txt").exists()


def test_a_program_that_kills_the_batch_runner_only_ends_its_own_batch():
    code = batch_program("os.kill(os.getppid(), 9)")
    result = run_tests(code, TWO_CASES, LIMITS, per_test_seconds=PER_TEST)
    assert not result.ok and result.reason == "killed"
    assert [o.reason for o in result.outcomes] == ["killed", "killed"]
    if IS_ROOT:
        assert live_processes_of(batch_uid(result)) == []


def test_output_flood_in_every_case_and_forks_and_sleeps_in_every_case():
    flood = run_tests("while True:\n    print('y' * 1000)", TWO_CASES * 2, LIMITS)
    assert flood.ok and [o.reason for o in flood.outcomes] == ["output"] * 4
    assert all(o.actual_truncated and len(o.actual) <= LIMITS.output_bytes for o in flood.outcomes)
    # Each case leaves a sleeping child in its own session and then sleeps past its time.
    sleeper = batch_program(
        "import time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(3600)\ntime.sleep(3600)"
    )
    tests = [TestCase("1\n", "ok\n"), TestCase("2\n", "ok\n")] * 2
    started = time.monotonic()
    result = run_tests(sleeper, tests, LIMITS, per_test_seconds=0.5)
    assert result.ok and [o.reason for o in result.outcomes] == ["timeout", None] * 2
    assert time.monotonic() - started < 60  # the sleeps were an hour each
    if IS_ROOT:
        assert live_processes_of(batch_uid(result)) == []


def _resident_bytes() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_a_100_mb_test_case_is_streamed():
    big = "7" * (100 * 1024 * 1024)
    code = "import sys\ndata = sys.stdin.read()\nprint(len(data), data[:3])"
    tests = [TestCase(big, f"{len(big)} 777\n"), TestCase("12345", "5 123\n")]
    baseline = _resident_bytes()
    peak = [baseline]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _resident_bytes())
            time.sleep(0.002)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        result = run_tests(code, tests, LIMITS, per_test_seconds=10)
    finally:
        done.set()
        sampler.join()
    assert result.ok
    # The program gets all of it, or runs out of its own memory; the next case runs either way.
    assert result.outcomes[0].reason in (None, "memory"), result.outcomes[0].stderr_tail
    assert result.outcomes[1].passed
    assert peak[0] - baseline < 32 * 1024 * 1024  # never a copy of the input here


def test_the_audit_hook_guard_holds_in_every_case():
    code = batch_program("import socket\nsocket.create_connection(('127.0.0.1', 9), timeout=1)")
    result = run_tests(code, TWO_CASES, LIMITS, per_test_seconds=PER_TEST, namespaces=False)
    assert result.isolation.network == "guard"
    assert [o.reason for o in result.outcomes] == ["network", None]
