"""The code sandbox (harness.sandbox): a well-behaved program, then hostile ones, each contained
with the expected reason while this process lives on and nothing outside the sandbox changes.

Root-only guarantees (own uid, read-only mounts, uid-wide cleanup) are asserted as root, which is
how this project's tests run; `namespaces=False` tests the fallback used where namespaces are
not available.
"""

from __future__ import annotations

import asyncio
import os
import socket
import tempfile
import textwrap
import uuid
from pathlib import Path

import pytest

from harness.sandbox import (
    REASONS,
    SandboxLimits,
    SandboxResult,
    run_python,
    run_python_async,
    runner,
)
from harness.sandbox.reasons import classify

IS_ROOT = os.geteuid() == 0
root_only = pytest.mark.skipif(not IS_ROOT, reason="own uid and mount isolation need root")

# Small limits keep hostile runs short; the wall clock is generous for a loaded machine.
LIMITS = SandboxLimits(
    cpu_seconds=1,
    wall_seconds=10,
    memory_bytes=256 * 1024 * 1024,
    output_bytes=4096,
    max_processes=8,
    file_bytes=1024 * 1024,
    disk_bytes=2 * 1024 * 1024,
)


def run(code: str, limits: SandboxLimits = LIMITS, **options: bool) -> SandboxResult:
    return run_python(textwrap.dedent(code), limits, **options)


def sandbox_uid(result: SandboxResult) -> int:
    assert result.isolation.user.startswith("uid "), result.isolation
    return int(result.isolation.user.split()[1])


def live_processes_of(uids: int | range) -> list[int]:
    """Non-zombie processes whose real, effective or saved uid is `uids` (or in it)."""
    wanted = range(uids, uids + 1) if isinstance(uids, int) else uids
    pids = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            status = Path(f"/proc/{name}/status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if fields["State"].strip().startswith("Z"):
            continue
        if any(int(uid) in wanted for uid in fields["Uid"].split()[:3]):
            pids.append(int(name))
    return pids


def is_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text().split("State:")[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def assert_contained(result: SandboxResult, reason: str) -> None:
    """The expected reason, not ok, and (as root) no process of the run left anywhere. Under
    the hidden root a host path that is not there at all fails as "error" (FileNotFoundError)
    where a read-only one fails as "filesystem"."""
    assert reason in REASONS
    assert not result.ok
    if reason == "filesystem" and result.isolation.filesystem == "hidden":
        assert "FileNotFoundError" in result.stderr_tail, result.stderr_tail[-500:]
        reason = "error"
    assert result.reason == reason, (result.reason, result.stderr_tail[-500:])
    if IS_ROOT:
        assert live_processes_of(sandbox_uid(result)) == []


@pytest.fixture(autouse=True)
def no_working_folder_left_behind():
    # This process's folders only: another pytest worker may be running sandboxes meanwhile.
    pattern = f"mars-sandbox-{os.getpid()}-*"
    before = set(Path(tempfile.gettempdir()).glob(pattern))
    yield
    assert set(Path(tempfile.gettempdir()).glob(pattern)) <= before


@pytest.fixture
def world_writable_dir():
    """A folder anyone may write to, outside any sandbox: only the sandbox's mounts protect it."""
    path = Path(tempfile.mkdtemp(prefix="sandbox-victim-"))
    path.chmod(0o777)
    (path / "keep.txt").write_text("parent's file")
    yield path
    for child in path.iterdir():
        child.unlink()
    path.rmdir()


def test_a_well_behaved_program_returns_its_output():
    result = run(
        """
        import os
        print(sum(range(101)))
        open("scratch.txt", "w").write("in the working folder")
        print(open("scratch.txt").read(), os.getcwd())
        """
    )
    assert result.ok and result.reason is None and result.exit_code == 0
    first, second = result.stdout.splitlines()
    assert first == "5050"
    assert second.startswith("in the working folder /")
    assert not Path(second.split()[-1]).exists()  # the working folder is gone
    if IS_ROOT:
        assert result.isolation.network == "namespace"
        assert result.isolation.filesystem == "hidden"
        assert sandbox_uid(result) != 0 and result.isolation.cleanup == "uid"


async def test_async_runs_are_in_flight_together():
    # Each run prints when it started and when it woke; run together, every run starts before
    # any of them wakes (one after the other, each would start after the previous one woke).
    sleeper = "import time; started = time.time(); time.sleep(2); print(started, time.time())"
    results = await asyncio.gather(
        *(run_python_async(sleeper, LIMITS) for _ in range(4)),
        run_python_async("while True: print('x' * 100)", LIMITS),
    )
    spans = [tuple(map(float, r.stdout.split())) for r in results[:4]]
    assert len(spans) == 4 and all(len(span) == 2 for span in spans)
    assert max(start for start, _ in spans) < min(woke for _, woke in spans)
    assert_contained(results[4], "output")


@root_only
async def test_a_cancelled_run_leaves_no_process_behind():
    code = """
    import os, time
    if os.fork() == 0:
        os.setsid()
    time.sleep(3600)
    """
    task = asyncio.create_task(run_python_async(textwrap.dedent(code), LIMITS))
    await asyncio.sleep(0.5)  # both asleep, one of them out of the process group
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    first_uid = runner.SANDBOX_UID_BASE + (os.getpid() % 1_000_000) * 1000
    assert live_processes_of(range(first_uid, first_uid + 1000)) == []


def test_infinite_loop_stops_at_the_cpu_limit():
    result = run("while True: pass")
    assert_contained(result, "cpu")
    assert result.signal_name == "SIGXCPU"
    assert result.cpu_seconds >= 0.9  # CPU time is counted in ticks


def test_ignoring_sigxcpu_still_ends_at_the_hard_cpu_limit():
    result = run(
        """
        import signal
        signal.signal(signal.SIGXCPU, signal.SIG_IGN)
        while True:
            pass
        """
    )
    assert_contained(result, "cpu")
    assert result.signal_name == "SIGKILL"


def test_sleeping_forever_is_killed_at_the_wall_clock():
    result = run("import time; time.sleep(3600)", SandboxLimits(wall_seconds=1))
    assert_contained(result, "timeout")
    assert 1 <= result.wall_seconds < 60  # cut at the limit, not slept out (no speed figure)


def test_memory_blowup_fails_under_the_address_space_limit():
    result = run(
        """
        chunks = []
        while True:
            chunks.append(bytearray(10_000_000))
        """
    )
    assert_contained(result, "memory")
    assert "MemoryError" in result.stderr_tail


def test_process_limit_holds_for_a_bounded_number_of_forks():
    """Checked before any fork bomb: with max_processes=4, three children at most."""
    result = run(
        """
        import os, time
        children = []
        for _ in range(10):
            try:
                pid = os.fork()
            except OSError as error:
                print("refused", error.errno)
                break
            if pid == 0:
                time.sleep(0.5)
                os._exit(0)
            children.append(pid)
        for pid in children:
            os.waitpid(pid, 0)
        print("children", len(children))
        """,
        SandboxLimits(max_processes=4, wall_seconds=10),
    )
    assert result.ok, result.stderr_tail
    assert result.stdout.split() == ["refused", "11", "children", "3"]


def test_fork_bomb_is_refused_by_the_process_limit():
    result = run(
        """
        import os
        while True:
            os.fork()
        """
    )
    assert_contained(result, "processes")
    assert "Resource temporarily unavailable" in result.stderr_tail


def test_fork_bomb_that_ignores_errors_is_killed_whole_at_the_wall_clock():
    result = run(
        """
        import os, time
        while True:
            try:
                if os.fork() == 0:
                    time.sleep(3600)
            except OSError:
                time.sleep(0.01)
        """,
        SandboxLimits(wall_seconds=1.5, max_processes=8),
    )
    assert_contained(result, "timeout")


def test_thread_bomb_is_refused_by_the_process_limit():
    result = run(
        """
        import threading
        stop = threading.Event()
        for _ in range(100):
            threading.Thread(target=stop.wait, daemon=True).start()
        """
    )
    assert_contained(result, "processes")


def test_huge_output_is_cut_at_the_limit_and_the_run_killed():
    result = run("while True: print('y' * 1000)")
    assert_contained(result, "output")
    assert len(result.stdout) == LIMITS.output_bytes
    assert result.stdout_truncated


def test_output_over_the_limit_then_a_quick_exit_is_still_output():
    result = run("print('z' * 10_000)")
    assert_contained(result, "output")
    assert len(result.stdout) == LIMITS.output_bytes


def test_a_sandbox_that_cannot_start_says_so(monkeypatch):
    monkeypatch.setattr(runner, "sandbox_python", lambda: "/nonexistent/python3")
    result = run("print('never runs')")
    assert_contained(result, "sandbox")
    assert "sandbox setup failed" in result.stderr_tail


def test_endless_stderr_counts_against_the_output_limit():
    result = run("import sys\nwhile True: sys.stderr.write('e' * 1000)")
    assert_contained(result, "output")
    assert len(result.stderr_tail) <= LIMITS.stderr_tail_bytes


@root_only
def test_writing_outside_the_working_folder_fails(tmp_path, world_writable_dir):
    name = f"sandbox-escape-{uuid.uuid4().hex}"
    targets = [
        world_writable_dir / name,
        tmp_path / name,
        Path(tempfile.gettempdir()) / name,
        Path("/var/tmp") / name,
        Path("/dev/shm") / name,
        Path.cwd() / name,
    ]
    result = run(
        f"""
        targets = {[str(t) for t in targets]!r}
        for target in targets:
            try:
                open(target, "w").write("escaped")
                print("WROTE", target)
            except OSError as error:
                print("refused", error.errno)
        open(targets[0], "w").write("escaped")
        """
    )
    assert_contained(result, "filesystem")
    assert "WROTE" not in result.stdout
    assert result.stdout.count("refused") == len(targets)
    assert not any(target.exists() for target in targets)


@root_only
def test_deleting_files_in_the_parents_folder_fails(world_writable_dir, monkeypatch):
    monkeypatch.chdir(world_writable_dir)
    before = sorted(p.name for p in world_writable_dir.iterdir())
    result = run(
        f"""
        import os, shutil
        folder = {str(world_writable_dir)!r}
        for name in os.listdir(folder):
            try:
                os.remove(os.path.join(folder, name))
            except OSError as error:
                print("refused", error.errno)
        shutil.rmtree(folder)
        """
    )
    assert_contained(result, "filesystem")
    assert sorted(p.name for p in world_writable_dir.iterdir()) == before
    assert (world_writable_dir / "keep.txt").read_text() == "parent's file"


def test_environment_secrets_are_not_visible(monkeypatch):
    secret = f"sk-test-{uuid.uuid4().hex}"
    monkeypatch.setenv("MARS_SANDBOX_TEST_SECRET", secret)
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    result = run(
        """
        import os
        print(sorted(os.environ))
        print(open("/proc/self/environ").read())
        for pid in (os.getppid(), 1):
            try:
                print(open(f"/proc/{pid}/environ").read())
            except OSError as error:
                print("refused", error.errno)
        """
    )
    assert result.ok, result.stderr_tail
    assert secret not in result.stdout and secret not in result.stderr_tail
    assert result.stdout.splitlines()[0] == str(["HOME", "LANG", "LC_ALL", "PATH", "TMPDIR"])
    if IS_ROOT:  # other processes' /proc/PID: refused (13), or not even listed (2, hidden root)
        refused = result.stdout.count("refused 13") + result.stdout.count("refused 2")
        assert refused == 2


@pytest.fixture
def loopback_server():
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.5)
    yield server
    server.close()


def assert_no_connection_arrived(server: socket.socket) -> None:
    with pytest.raises(TimeoutError):
        connection, _ = server.accept()
        connection.close()


@pytest.mark.parametrize("namespaces", [True, False], ids=["namespace", "guard"])
def test_a_connection_to_a_loopback_server_never_arrives(loopback_server, namespaces):
    port = loopback_server.getsockname()[1]
    result = run(
        f"""
        import socket
        socket.create_connection(("127.0.0.1", {port}), timeout=2).sendall(b"leak")
        """,
        namespaces=namespaces,
    )
    assert_contained(result, "network")
    assert_no_connection_arrived(loopback_server)
    expected = "namespace" if namespaces else "guard"
    assert result.isolation.network == expected


def test_name_resolution_fails():
    result = run("import socket; socket.getaddrinfo('example.com', 443)")
    assert_contained(result, "network")


@root_only
def test_a_process_that_outlives_its_parent_is_killed():
    """A daemon (double fork, new session: out of the process group) still dies with the run."""
    result = run(
        """
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                print(os.getpid(), flush=True)
                time.sleep(3600)
            os._exit(0)
        time.sleep(0.5)
        """
    )
    assert result.ok, result.stderr_tail
    daemon = int(result.stdout.split()[0])
    assert not is_alive(daemon)
    assert live_processes_of(sandbox_uid(result)) == []


def test_a_subprocess_left_running_is_killed():
    result = run(
        """
        import subprocess, sys
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
        print(child.pid, flush=True)
        """
    )
    assert result.ok, result.stderr_tail
    assert not is_alive(int(result.stdout.split()[0]))


@root_only
def test_shared_memory_segments_do_not_outlive_the_run():
    before = Path("/proc/sysvipc/shm").read_text()
    result = run(
        """
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        segment = libc.shmget(0x5EED, 4096, 0o1000 | 0o666)  # IPC_CREAT
        print(segment, ctypes.get_errno())
        """
    )
    assert result.ok, result.stderr_tail
    assert int(result.stdout.split()[0]) >= 0  # created, inside the run's own IPC namespace
    assert Path("/proc/sysvipc/shm").read_text() == before


def test_unbounded_recursion_is_a_recursion_error():
    result = run("def f(n):\n    return f(n + 1)\nf(0)")
    assert_contained(result, "recursion")


def test_deep_c_recursion_crashes_only_the_sandbox():
    result = run(
        """
        import json, sys
        sys.setrecursionlimit(10**8)
        nested = []
        for _ in range(10**6):
            nested = [nested]
        json.dumps(nested)
        """
    )
    assert_contained(result, "crash")
    assert result.signal_name == "SIGSEGV"


def test_a_file_bigger_than_the_file_limit_fails():
    result = run("open('big.bin', 'wb').write(b'x' * (2 * 1024 * 1024))")
    assert_contained(result, "disk")


@root_only
def test_filling_the_working_folder_stops_at_the_disk_limit():
    result = run(
        """
        for i in range(100):
            open(f"part{i}.bin", "wb").write(b"x" * 512 * 1024)
        """
    )
    assert_contained(result, "disk")
    assert "No space left on device" in result.stderr_tail


def test_too_many_open_files_fails():
    result = run("handles = [open(f'f{i}', 'w') for i in range(1000)]")
    assert_contained(result, "files")


@root_only
def test_signalling_the_parent_or_becoming_root_is_refused():
    parent = os.getpid()
    attempts = (f"import os, signal; os.kill({parent}, signal.SIGKILL)", "import os; os.setuid(0)")
    for code in attempts:
        result = run(code)
        assert_contained(result, "permission")
    assert is_alive(parent)


def test_a_syntax_error_is_an_error():
    result = run("def broken(:\n")
    assert_contained(result, "error")
    assert "SyntaxError" in result.stderr_tail


def test_the_network_guard_also_refuses_new_programs_and_ctypes():
    result = run("import subprocess; subprocess.run(['true'])", namespaces=False)
    assert_contained(result, "processes")
    assert result.isolation.network == "guard"
    result = run("import ctypes; ctypes.CDLL(None)", namespaces=False)
    assert_contained(result, "permission")


TRACEBACK = "Traceback (most recent call last):"


@pytest.mark.parametrize(
    ("stopped_for", "returncode", "stderr", "ready", "reason"),
    [
        (None, 0, "", True, None),
        ("timeout", -9, "", True, "timeout"),
        (None, 0, "", False, "sandbox"),
        (None, -24, "", True, "cpu"),
        (None, -11, "", True, "crash"),
        (None, 1, f"{TRACEBACK}\nMemoryError", True, "memory"),
        (None, 1, f"{TRACEBACK}\nOSError: [Errno 28] No space", True, "disk"),
        (None, 1, f"{TRACEBACK}\nValueError: nope", True, "error"),
        (None, 3, "no traceback", True, "error"),
        (None, 1, f"{TRACEBACK}\nsocket.gaierror: [Errno -3] Temporary", True, "network"),
        # tracebacks of several processes interleaved: the last exception line counts
        (None, 1, f"{TRACEBACK}\nBlockingIOError: [Errno 11] x\n{TRACEBACK}\n", True, "processes"),
    ],
)
def test_classify(stopped_for, returncode, stderr, ready, reason):
    assert classify(stopped_for, returncode, stderr, ready) == reason
