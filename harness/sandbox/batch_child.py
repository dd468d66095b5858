"""Inside the sandbox: run one program once per test case, in one sandboxed process.

Standard library only. `boot.py` calls `serve()` in the sandboxed process itself (after the
namespaces, limits and uid are in place; see docs/sandbox.md), so the start of the sandbox is
paid once per batch. The program (`main.py` in the working folder) is compiled once; each case
then runs in a child forked from here, with the case's stdin on a pipe, its own stdout and
stderr pipes, its own process group, a CPU limit and a wall clock. After each case the child's
group and every process left under this one (it is a child subreaper) are killed and reaped, so
nothing of one case runs into the next.

The stream on our stdin, written by the caller: per case a CASE frame (index, wall seconds, CPU
seconds, output cap), DATA frames holding its stdin, an END frame. Per case we write one RESULT
frame on our stdout: how the child ended, its stdout (up to the cap) and the tail of its
stderr. Nothing of the program's can reach our stdout: the child keeps only fds 0-2, and this
process is not dumpable, so a child of the same uid can neither open `/proc/<us>/fd/1` nor
ptrace us. The same functions run outside any sandbox for `bench/sandbox_tests.py`'s baseline.
"""

from __future__ import annotations

import atexit
import builtins
import fcntl
import os
import resource
import select
import struct
import sys
import time
from collections.abc import Callable, Iterable, Iterator

FRAME = struct.Struct("<cI")  # frame type, payload length
CASE = struct.Struct("<IdII")  # index, wall seconds, CPU seconds, output cap in bytes
RESULT = struct.Struct("<IiiBddBII")  # index, exit code, signal, stopped, cpu, wall,
# stdout truncated, stdout length, stderr length
CASE_START, CASE_DATA, CASE_END, RESULT_FRAME = b"C", b"D", b"E", b"R"
STOPPED_FOR = (None, "timeout", "output")  # RESULT's `stopped`: what ended the case here
CHUNK = 1 << 16
PENDING_BYTES = 1 << 20  # stdin read ahead for the child, at most
PIPE_BYTES = 1 << 20  # pipe buffer asked for the child's stdin (fewer wake-ups for big inputs)
F_SETPIPE_SZ = 1031
SETUP_FAILED = 125
SIGKILL = 9  # the number, not the `signal` module: importing it costs each batch milliseconds
PROC_FD: int | None = None  # the host's /proc, set by boot.py (the new root has none)


def frame(kind: bytes, payload: bytes = b"") -> bytes:
    return FRAME.pack(kind, len(payload)) + payload


def case_frames(
    index: int, seconds: float, cpu: int, output_cap: int, stdin: Iterable[bytes]
) -> Iterator[bytes]:
    """The frames of one case, its stdin in the chunks given (never joined here)."""
    yield frame(CASE_START, CASE.pack(index, seconds, cpu, output_cap))
    for chunk in stdin:
        if chunk:
            yield frame(CASE_DATA, chunk)
    yield frame(CASE_END)


class _Frames:
    """Frames from a non-blocking fd, read only when asked (so the writer is held back)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buffer = bytearray()
        self.eof = False

    def next(self) -> tuple[bytes, bytes] | None:
        if len(self.buffer) < FRAME.size:
            return None
        kind, size = FRAME.unpack_from(self.buffer)
        end = FRAME.size + size
        if len(self.buffer) < end:
            return None
        payload = bytes(self.buffer[FRAME.size : end])
        del self.buffer[:end]
        return kind, payload

    def fill(self) -> None:
        try:
            data = os.read(self.fd, PENDING_BYTES)
        except BlockingIOError:
            return
        if not data:
            self.eof = True
        self.buffer += data

    def wait(self) -> tuple[bytes, bytes] | None:
        """The next frame, waiting for it; None at the end of the stream."""
        while (found := self.next()) is None:
            if self.eof:
                return None
            select.select([self.fd], [], [])
            self.fill()
        return found


def _quietly(function: Callable[..., object], *args: object) -> None:
    """`function(*args)`, any failure ignored (contextlib costs every batch an import)."""
    try:  # noqa: SIM105
        function(*args)
    except BaseException:
        pass


def _exit_status(error: SystemExit) -> int:
    code = error.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _run_program(code: object) -> int:
    """In the child: what `python main.py` would do with the compiled program."""
    sys.stdin = sys.__stdin__ = open(0, closefd=False)  # noqa: SIM115
    sys.stdout = sys.__stdout__ = open(1, "w", closefd=False)  # noqa: SIM115
    sys.stderr = sys.__stderr__ = open(  # noqa: SIM115
        2, "w", buffering=1, errors="backslashreplace", closefd=False
    )
    module = type(sys)("__main__")
    module.__file__ = "main.py"
    module.__builtins__ = builtins
    sys.modules["__main__"] = module
    sys.argv = ["main.py"]
    try:
        exec(code, module.__dict__)  # inside the sandbox, in a forked child
        status = 0
    except SystemExit as error:
        status = _exit_status(error)
    except BaseException as error:
        _print_uncaught(error, error.__traceback__.tb_next)  # without our own frame
        status = 1
    return _shut_down(status)


def _print_uncaught(error: BaseException, trace: object) -> None:
    """As the interpreter reports an uncaught exception: `sys.excepthook`, by default C code
    that imports nothing (importing `traceback` can itself fail, e.g. with the address space
    taken by thread stacks)."""
    try:
        error.__traceback__ = trace
        sys.excepthook(type(error), error, trace)
    except BaseException:
        line = f"Traceback (most recent call last):\n{type(error).__name__}: {error}\n"
        _quietly(os.write, 2, line.encode("utf-8", "backslashreplace"))


def _shut_down(status: int) -> int:
    """atexit handlers, non-daemon threads, then flush: as the interpreter does at exit."""
    try:
        if "threading" in sys.modules:
            sys.modules["threading"]._shutdown()
        atexit._run_exitfuncs()
    except BaseException as error:
        _print_uncaught(error, error.__traceback__)
    try:
        sys.stdout.flush()
    except BaseException:
        status = 120  # the interpreter's code when flushing stdout fails at exit
    _quietly(sys.stderr.flush)
    return status


def _child(code: object, pipes: tuple[int, int, int], cpu_seconds: int) -> None:
    try:
        os.setpgid(0, 0)
        for target, fd in enumerate(pipes):
            os.dup2(fd, target)
        os.closerange(3, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
        wanted = (cpu_seconds, cpu_seconds + 1)
        if hard != resource.RLIM_INFINITY:
            wanted = (min(wanted[0], hard), min(wanted[1], hard))
        resource.setrlimit(resource.RLIMIT_CPU, wanted)
    except BaseException:
        os._exit(SETUP_FAILED)
    status = 1
    try:
        status = _run_program(code)
    finally:
        os._exit(status)


class _Case:
    """One case in flight: the child, its pipes and what came back so far."""

    def __init__(self, index: int, seconds: float, output_cap: int, tail_bytes: int) -> None:
        self.index, self.output_cap, self.tail_bytes = index, output_cap, tail_bytes
        self.stdout = bytearray()
        self.stderr = bytearray()
        self.total = 0
        self.truncated = False
        self.stopped = 0
        self.exited = False
        self.pending = bytearray()  # stdin read from the caller, not yet taken by the child
        self.stdin_done = False  # the case's END frame was read
        self.started = time.monotonic()
        self.deadline = self.started + seconds

    def keep(self, fd_is_stdout: bool, data: bytes) -> None:
        self.total += len(data)
        if fd_is_stdout:
            room = max(0, self.output_cap - len(self.stdout))
            self.stdout += data[:room]
            self.truncated = self.truncated or len(data) > room
        else:
            self.stderr += data
            del self.stderr[: max(0, len(self.stderr) - self.tail_bytes)]
        if self.total > self.output_cap:
            self.stopped = 2


def _read(fd: int) -> bytes | None:
    try:
        return os.read(fd, CHUNK)
    except BlockingIOError:
        return None


def _proc_fd() -> int:
    """The host's /proc: boot.py opens it before the new root (which has none) hides it."""
    global PROC_FD
    if PROC_FD is None:
        PROC_FD = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    return PROC_FD


def _kill_leftovers(child: int) -> tuple[int, object]:
    """Kill the case's group, reap the child, then kill and reap every process left under us
    (orphans of the case come to us: we are their subreaper)."""
    _quietly(os.killpg, child, SIGKILL)
    _quietly(os.kill, child, SIGKILL)
    _, status, usage = os.wait4(child, 0)
    children_file = f"self/task/{os.getpid()}/children"
    for _ in range(1000):  # bounded: each round reaps what the last kill left
        try:
            with open(os.open(children_file, os.O_RDONLY, dir_fd=_proc_fd())) as handle:
                pids = [int(pid) for pid in handle.read().split()]
        except OSError:
            break
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, SIGKILL)
                os.waitpid(pid, 0)
            except OSError:
                pass
    return status, usage


def _run_case(code: object, frames: _Frames, header: bytes, tail_bytes: int) -> bytes:
    index, seconds, cpu_seconds, output_cap = CASE.unpack(header)
    case = _Case(index, seconds, output_cap, tail_bytes)
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        child = os.fork()
    except OSError as error:  # e.g. EAGAIN at the process limit: this case fails, not the batch
        for fd in (in_r, in_w, out_r, out_w, err_r, err_w):
            os.close(fd)
        message = f"Traceback (most recent call last):\nOSError: [Errno {error.errno}] {error}\n"
        return _failed_case(index, frames, message.encode(), tail_bytes, case.stdin_done)
    if child == 0:
        _child(code, (in_r, out_w, err_w), cpu_seconds)
    for fd in (in_r, out_w, err_w):
        os.close(fd)
    _quietly(os.setpgid, child, child)  # fails when the child set it already, or is gone
    for fd in (in_w, out_r, err_r):
        os.set_blocking(fd, False)
    # Fails over /proc/sys/fs/pipe-max-size: the default size works too.
    _quietly(fcntl.fcntl, in_w, F_SETPIPE_SZ, PIPE_BYTES)
    pidfd = os.pidfd_open(child)
    stdin_fd: int | None = in_w
    try:
        stdin_fd = _watch(case, frames, stdin_fd, out_r, err_r, pidfd)
        status, usage = _kill_leftovers(child)
        for fd, is_stdout in ((out_r, True), (err_r, False)):
            while case.stopped == 0 and (data := _read(fd)):
                case.keep(is_stdout, data)
    finally:
        for fd in (stdin_fd, out_r, err_r, pidfd):
            if fd is not None:
                os.close(fd)
    wall = time.monotonic() - case.started
    if not case.stdin_done:
        _skip_stdin(frames)  # the rest of this case's stdin, unread by the child
    exit_code = os.waitstatus_to_exitcode(status)
    cpu = usage.ru_utime + usage.ru_stime
    result = RESULT.pack(
        index,
        max(exit_code, 0),
        max(-exit_code, 0),
        case.stopped,
        cpu,
        wall,
        case.truncated,
        len(case.stdout),
        len(case.stderr),
    )
    return frame(RESULT_FRAME, result + case.stdout + case.stderr)


def _watch(
    case: _Case, frames: _Frames, stdin_fd: int | None, out_r: int, err_r: int, pidfd: int
) -> int | None:
    """Feed stdin, collect output, until the child exits, passes the cap or runs out of time.
    Returns the child's stdin fd if still open."""
    open_outputs = {out_r, err_r}
    while not case.exited and case.stopped == 0:
        while not case.stdin_done and len(case.pending) < PENDING_BYTES:
            found = frames.next()
            if found is None:
                break
            if found[0] == CASE_END:
                case.stdin_done = True
            elif stdin_fd is not None:
                case.pending += found[1]
        if stdin_fd is not None and case.stdin_done and not case.pending:
            os.close(stdin_fd)
            stdin_fd = None
        remaining = case.deadline - time.monotonic()
        if remaining <= 0:
            case.stopped = 1
            break
        readable = [pidfd, *open_outputs]
        if not case.stdin_done and len(case.pending) < PENDING_BYTES and not frames.eof:
            readable.append(frames.fd)
        writable = [stdin_fd] if stdin_fd is not None and case.pending else []
        ready_read, ready_write, _ = select.select(readable, writable, [], remaining)
        if ready_write:
            try:
                written = os.write(stdin_fd, case.pending)
                del case.pending[:written]
            except BlockingIOError:
                pass
            except OSError:  # the child closed its stdin or exited: the rest is dropped
                os.close(stdin_fd)
                stdin_fd = None
                case.pending.clear()
        for fd in ready_read:
            if fd == pidfd:
                case.exited = True
            elif fd == frames.fd:
                frames.fill()
                if frames.eof and not case.stdin_done:
                    case.stdin_done = True  # the caller went away mid-case
            elif (data := _read(fd)) is not None:
                if data:
                    case.keep(fd == out_r, data)
                else:
                    open_outputs.discard(fd)
    return stdin_fd


def _compile_program() -> tuple[object | None, bytes]:
    """The program compiled once, or the error text a failed compile prints."""
    try:
        with open("main.py", "rb") as source:
            return compile(source.read(), "main.py", "exec"), b""
    except BaseException as error:  # a SyntaxError, or a compiler that ran out of memory
        try:
            import traceback

            text = "".join(traceback.format_exception_only(type(error), error))
        except BaseException:
            text = f"{type(error).__name__}: {error}\n"
        return None, text.encode("utf-8", "backslashreplace")


def _skip_stdin(frames: _Frames) -> None:
    while (found := frames.wait()) is not None and found[0] != CASE_END:
        pass


def _failed_case(
    index: int, frames: _Frames, error: bytes, tail_bytes: int, stdin_done: bool = False
) -> bytes:
    """The result of a case that never ran: exit code 1 and `error` as its stderr."""
    if not stdin_done:
        _skip_stdin(frames)
    error = error[-tail_bytes:]
    result = RESULT.pack(index, 1, 0, 0, 0.0, 0.0, False, 0, len(error))
    return frame(RESULT_FRAME, result + error)


def _quit(code: object = None) -> None:
    raise SystemExit(code)


def serve(stderr_tail_bytes: int = 4096, stdin_fd: int = 0, stdout_fd: int = 1) -> None:
    """Answer every case on `stdin_fd` with a RESULT frame on `stdout_fd`, until end of file."""
    # `exit()` and `quit()` come from `site`, which -S leaves out; contest programs use them.
    for name in ("exit", "quit"):
        if not hasattr(builtins, name):
            setattr(builtins, name, _quit)
    code, error = _compile_program()
    os.set_blocking(stdin_fd, False)
    frames = _Frames(stdin_fd)
    while (found := frames.wait()) is not None:
        kind, header = found
        if kind != CASE_START:
            raise ValueError(f"expected a case, got frame {kind!r}")
        if code is None:
            reply = _failed_case(CASE.unpack(header)[0], frames, error, stderr_tail_bytes)
        else:
            reply = _run_case(code, frames, header, stderr_tail_bytes)
        view = memoryview(reply)
        while view:
            try:
                view = view[os.write(stdout_fd, view) :]
            except BlockingIOError:
                select.select([], [stdout_fd], [])


if __name__ == "__main__":  # the uncontained baseline of bench/sandbox_tests.py
    serve()
