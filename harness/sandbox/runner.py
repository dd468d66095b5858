"""Parent side of a sandboxed run: start it, read its output with a cap, stop it, clean up.

One `_Run` holds a started run (process, pipes, pidfd, collected output, what is left to write
on its stdin); `run_python` drives it with a selector, `run_python_async` with the event loop's
readers and writer, so both behave the same. A batch of tests (`harness.sandbox.batch`) is a
`_Run` in "tests" mode: its stdin carries the cases and its stdout the results.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import itertools
import marshal
import math
import os
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from harness.sandbox.limits import Isolation, SandboxLimits, SandboxResult
from harness.sandbox.pipes import Feed, Output, read_nonblocking, stdin_chunks
from harness.sandbox.reasons import classify
from harness.sandbox.rootfs import Entry, RootPlanError, root_entries
from harness.sandbox.sweep import kill_user_processes

BOOT_SCRIPT = Path(__file__).with_name("boot.py")
# Each run as root gets a uid of its own from this range: pid-derived, so runs in different
# processes (e.g. trainer workers) do not share one, and a counter within a process.
SANDBOX_UID_BASE = 1_000_000_000
_run_numbers = itertools.count()
# Interpreters tried for the code when the caller's own is out of an unprivileged user's reach
# (e.g. a pyenv Python under /root, which is mode 700).
SYSTEM_PYTHONS = ("/usr/bin/python3", "/usr/local/bin/python3")
STDIN_PIPE_BYTES = 1 << 20


@dataclass(frozen=True)
class _Plan:
    python: str
    uid: int | None
    gid: int | None
    namespaces: bool


def _reachable_by_anyone(path: str) -> bool:
    """Every folder on the way searchable and the file executable by 'others'."""
    real = Path(os.path.realpath(path))
    try:
        if not real.stat().st_mode & stat.S_IXOTH:
            return False
        return all(parent.stat().st_mode & stat.S_IXOTH for parent in real.parents)
    except OSError:
        return False


def sandbox_python() -> str:
    """The interpreter the code runs under: the caller's own when the sandbox user can run it."""
    own = os.path.realpath(sys.executable)
    if os.geteuid() != 0 or _reachable_by_anyone(own):
        return own
    for candidate in SYSTEM_PYTHONS:
        if _reachable_by_anyone(candidate):
            return os.path.realpath(candidate)
    raise RuntimeError(
        f"no Python an unprivileged user can run: {own} is not reachable and none of "
        f"{', '.join(SYSTEM_PYTHONS)} is"
    )


def _new_sandbox_uid() -> int:
    return SANDBOX_UID_BASE + (os.getpid() % 1_000_000) * 1000 + next(_run_numbers) % 1000


def _plan(namespaces: bool) -> _Plan:
    uid = _new_sandbox_uid() if os.geteuid() == 0 else None
    return _Plan(python=sandbox_python(), uid=uid, gid=uid, namespaces=namespaces)


def _make_workdir(code: str, plan: _Plan) -> Path:
    # The parent's pid in the name: a leftover folder says which process made it.
    workdir = Path(tempfile.mkdtemp(prefix=f"mars-sandbox-{os.getpid()}-"))
    script = workdir / "main.py"
    script.write_text(code, encoding="utf-8")
    script.chmod(0o644)
    if plan.uid is not None:
        os.chown(workdir, plan.uid, plan.gid)
    return workdir


def _minimal_env(workdir: Path) -> dict[str, str]:
    """The whole environment of the code: nothing of the caller's (keys, tokens) is passed."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(workdir),
        "TMPDIR": str(workdir),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
    }


def _root_plan(plan: _Plan) -> tuple[Entry, ...] | None:
    """The hidden root's allow-list for this interpreter, or None where it cannot be worked out
    (then every mount is made read-only instead: `filesystem="read-only"`)."""
    if not plan.namespaces:
        return None
    try:
        return root_entries(plan.python)
    except (RootPlanError, OSError, subprocess.SubprocessError, ValueError, EOFError):
        return None


def _boot_config(
    plan: _Plan, workdir: Path, limits: SandboxLimits, report_fd: int, tests: bool
) -> str:
    rlimits = {
        "cpu_seconds": max(1, math.ceil(limits.cpu_seconds)),
        "memory_bytes": limits.memory_bytes,
        "file_bytes": limits.file_bytes,
        "open_files": limits.open_files,
        "max_processes": limits.max_processes,
    }
    config = {
        "workdir": str(workdir),
        "python": plan.python,
        "uid": plan.uid,
        "gid": plan.gid,
        "namespaces": plan.namespaces,
        "disk_bytes": limits.disk_bytes,
        "limits": rlimits,
        "report_fd": report_fd,
        "env": _minimal_env(workdir),
        "parent_pid": os.getpid(),
        "mode": "tests" if tests else "program",
        "stderr_tail_bytes": limits.stderr_tail_bytes,
        "root": _root_plan(plan),
    }
    # marshal (format 4, read by every Python since 3.4) rather than JSON: the json module
    # costs the booting interpreter milliseconds to import, on every run.
    return marshal.dumps(config, 4).hex()


class _Run:
    """One started sandbox run. `stdin`: what to write on its stdin (else /dev/null); `tests`:
    a batch (batch_child.py runs `code` per case; `output` then takes the result frames)."""

    def __init__(
        self,
        code: str,
        limits: SandboxLimits,
        namespaces: bool,
        *,
        stdin: Iterable[bytes] | None = None,
        tests: bool = False,
        output: Output | None = None,
    ) -> None:
        self.limits = limits
        self.tests = tests
        self.plan = _plan(namespaces)
        self.workdir = _make_workdir(code, self.plan)
        self.output = output or Output(limits)
        self.feed = Feed(stdin) if stdin is not None else None
        self.stdin_fd: int | None = None
        self.exited = False
        self.process: subprocess.Popen[bytes] | None = None
        self.report_fd: int | None = None
        self.pidfd: int | None = None
        try:
            self._start()
        except BaseException:
            self.close()
            raise

    def _start(self) -> None:
        self.report_fd, report_write = os.pipe()
        try:
            config = _boot_config(self.plan, self.workdir, self.limits, report_write, self.tests)
            # A batch runs its cases in the booted interpreter itself (no exec), so that one
            # must be the interpreter the code may use.
            python = self.plan.python if self.tests else sys.executable
            self.started = time.monotonic()
            self.process = subprocess.Popen(
                [python, "-I", "-S", str(BOOT_SCRIPT), config],
                stdin=subprocess.DEVNULL if self.feed is None else subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=self.workdir,
                env=_minimal_env(self.workdir),
                start_new_session=True,
                pass_fds=(report_write,),
            )
        finally:
            os.close(report_write)
        self.deadline = self.started + self.limits.wall_seconds
        self.pidfd = os.pidfd_open(self.process.pid)
        for pipe in (self.process.stdout, self.process.stderr):
            os.set_blocking(pipe.fileno(), False)
        os.set_blocking(self.report_fd, False)
        if self.process.stdin is not None:
            self.stdin_fd = self.process.stdin.fileno()
            os.set_blocking(self.stdin_fd, False)
            with contextlib.suppress(OSError):  # fewer wake-ups for a big stdin
                fcntl.fcntl(self.stdin_fd, fcntl.F_SETPIPE_SZ, STDIN_PIPE_BYTES)

    @property
    def stdout_fd(self) -> int:
        return self.process.stdout.fileno()

    @property
    def stderr_fd(self) -> int:
        return self.process.stderr.fileno()

    def watched_fds(self) -> tuple[int, int, int]:
        return self.stdout_fd, self.stderr_fd, self.pidfd

    def on_readable(self, fd: int) -> bool:
        """Handle a ready fd; False when that fd needs no more watching."""
        if fd == self.pidfd:
            self.exited = True
            return False
        data = read_nonblocking(fd)
        if data is None:
            return True
        self._keep(fd, data)
        return bool(data)

    def on_writable(self) -> bool:
        """Write more of stdin; False once there is nothing more to write (then the driver
        stops watching the fd and calls `close_stdin`)."""
        fd = self.stdin_fd
        return self.feed is not None and fd is not None and self.feed.write_some(fd)

    def close_stdin(self) -> None:
        if self.process is not None and self.process.stdin is not None:
            with contextlib.suppress(OSError):
                self.process.stdin.close()
        self.stdin_fd = None

    def _keep(self, fd: int, data: bytes) -> None:
        if fd == self.stdout_fd:
            self.output.add_stdout(data)
        else:
            self.output.add_stderr(data)

    @property
    def should_stop(self) -> bool:
        return self.exited or self.output.over_limit

    def _stopped_by_us(self, cpu_seconds: float, returncode: int) -> str | None:
        """The limit that ended the run as the parent saw it ("output", "timeout" or "cpu"),
        else None (the exit status and stderr tell; see `classify`)."""
        if self.output.over_limit:
            return "output"
        if not self.exited:
            return "timeout"
        if returncode == -signal.SIGKILL and cpu_seconds >= self.limits.cpu_seconds:
            return "cpu"  # the hard CPU limit, reached by code that ignored SIGXCPU
        return None

    def _kill_everything(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        if self.plan.uid is not None:
            kill_user_processes(self.plan.uid)

    def _drain(self) -> None:
        """Read what is left in the pipes once no writer is alive (bounded by pipe buffers)."""
        for fd in (self.stdout_fd, self.stderr_fd):
            while (data := read_nonblocking(fd)) and not self.output.over_limit:
                self._keep(fd, data)

    def _isolation(self) -> tuple[bool, Isolation]:
        report = b""
        while chunk := read_nonblocking(self.report_fd):
            report += chunk
        # boot.py's line: "ready NETWORK FILESYSTEM", or "failed".
        lines = report.decode(errors="replace").strip().splitlines()
        words = lines[-1].split() if lines else []
        applied = dict(zip(("ready", "network", "filesystem"), words, strict=False))
        applied["ready"] = words[:1] == ["ready"] and len(words) == 3
        user = f"uid {self.plan.uid}" if self.plan.uid is not None else "same"
        isolation = Isolation(
            network=applied.get("network", "unknown"),
            filesystem=applied.get("filesystem", "unknown"),
            user=user,
            cleanup="uid" if self.plan.uid is not None else "group",
        )
        return bool(applied.get("ready")), isolation

    def finish(self) -> SandboxResult:
        """Kill whatever is left (descendants included), reap, collect the result."""
        self._kill_everything()
        returncode, cpu_seconds = self._reap()
        wall = time.monotonic() - self.started
        self._drain()
        ready, isolation = self._isolation()
        stderr_tail = self.output.stderr_tail.decode("utf-8", errors="replace")
        stopped_for = self._stopped_by_us(cpu_seconds, returncode)
        reason = classify(stopped_for, returncode, stderr_tail, ready)
        return SandboxResult(
            ok=reason is None,
            reason=reason,
            stdout=self.output.stdout.decode("utf-8", errors="replace"),
            stderr_tail=stderr_tail,
            exit_code=returncode if returncode >= 0 else None,
            signal=-returncode if returncode < 0 else None,
            wall_seconds=wall,
            cpu_seconds=cpu_seconds,
            stdout_truncated=self.output.stdout_truncated,
            isolation=isolation,
        )

    def _reap(self) -> tuple[int, float]:
        """Wait for the process (already killed or exited): its return code, CPU seconds used."""
        try:
            _, status, usage = os.wait4(self.process.pid, 0)
        except ChildProcessError:  # reaped by someone else's waitpid(-1): status unknown
            self.process.returncode = -signal.SIGKILL
            return self.process.returncode, 0.0
        self.process.returncode = os.waitstatus_to_exitcode(status)
        return self.process.returncode, usage.ru_utime + usage.ru_stime

    def close(self) -> None:
        """Release fds and remove the working folder; safe to call more than once."""
        if self.process is not None and self.process.returncode is None:
            # Not finished (an exception or a cancelled task): its descendants may outlive it.
            self._kill_everything()
            self.process.wait()
        self.close_stdin()
        if self.process is not None:
            for pipe in (self.process.stdout, self.process.stderr):
                pipe.close()
        for fd in (self.pidfd, self.report_fd):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.pidfd = self.report_fd = None
        shutil.rmtree(self.workdir, ignore_errors=True)


def run_python(
    code: str,
    limits: SandboxLimits | None = None,
    *,
    stdin: str | bytes | None = None,
    namespaces: bool = True,
) -> SandboxResult:
    """Run `code` as a Python program in the sandbox and wait for it (blocking). `stdin` is
    written on its standard input (streamed as it reads; the rest is dropped if it exits or
    closes it first); without it the program reads /dev/null.

    `namespaces=False` skips the network and mount namespaces even where they are available
    (the audit-hook network guard and plain permissions apply instead); for tests of the
    fallback.
    """
    limits = limits or SandboxLimits()
    chunks = None if stdin is None else stdin_chunks(stdin)
    return drive(_Run(code, limits, namespaces, stdin=chunks))


async def run_python_async(
    code: str,
    limits: SandboxLimits | None = None,
    *,
    stdin: str | bytes | None = None,
    namespaces: bool = True,
) -> SandboxResult:
    """`run_python` on the running event loop: the pipes and the exit are watched by the loop's
    readers (and stdin by its writer), so many runs can be in flight at once without threads."""
    limits = limits or SandboxLimits()
    chunks = None if stdin is None else stdin_chunks(stdin)
    return await drive_async(_Run(code, limits, namespaces, stdin=chunks))


def drive(run: _Run) -> SandboxResult:
    """Watch a started run with a selector until it stops; its result (the run is closed)."""
    try:
        with selectors.DefaultSelector() as selector:
            for fd in run.watched_fds():
                selector.register(fd, selectors.EVENT_READ)
            if run.stdin_fd is not None:
                selector.register(run.stdin_fd, selectors.EVENT_WRITE)
            while not run.should_stop and (remaining := run.deadline - time.monotonic()) > 0:
                for key, _ in selector.select(remaining):
                    if key.events & selectors.EVENT_WRITE:
                        if not run.on_writable():
                            selector.unregister(key.fd)
                            run.close_stdin()
                    elif not run.on_readable(key.fd):
                        selector.unregister(key.fd)
        return run.finish()
    finally:
        run.close()


async def drive_async(run: _Run) -> SandboxResult:
    """`drive` on the running event loop."""
    loop = asyncio.get_running_loop()
    stopped = loop.create_future()
    stdin_fd = run.stdin_fd
    writing = [stdin_fd is not None]

    def on_ready(fd: int) -> None:
        if not run.on_readable(fd):
            loop.remove_reader(fd)
        if run.should_stop and not stopped.done():
            stopped.set_result(None)

    def on_writable() -> None:
        if not run.on_writable():
            loop.remove_writer(stdin_fd)
            writing[0] = False
            run.close_stdin()

    watched = run.watched_fds()
    try:
        for fd in watched:
            loop.add_reader(fd, on_ready, fd)
        if stdin_fd is not None:
            loop.add_writer(stdin_fd, on_writable)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stopped, max(0.0, run.deadline - time.monotonic()))
        return run.finish()
    finally:
        for fd in watched:
            loop.remove_reader(fd)
        if writing[0]:
            loop.remove_writer(stdin_fd)
        run.close()
