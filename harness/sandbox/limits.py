"""What a sandboxed run may use (`SandboxLimits`) and what came of it (`SandboxResult`)."""

from __future__ import annotations

import signal
from dataclasses import dataclass, field

KIB = 1024
MIB = 1024 * KIB

# The one-word reasons a run can end with when it did not finish cleanly.
REASONS = (
    "timeout",  # the wall-clock limit was reached; the whole run was killed
    "cpu",  # the CPU-time limit was reached (SIGXCPU, or SIGKILL at the hard limit)
    "memory",  # an allocation failed under the address-space limit (MemoryError)
    "output",  # stdout + stderr passed the output limit; the whole run was killed
    "processes",  # fork or a new thread was refused by the process limit
    "network",  # a network operation failed: no interface, no name resolution, or the guard
    "filesystem",  # a write outside the working folder was refused (read-only or no permission)
    "permission",  # an operation the sandbox user may not do (EPERM: kill others, setuid...)
    "disk",  # the file-size or disk limit was reached
    "files",  # the open-files limit was reached
    "recursion",  # RecursionError
    "crash",  # the interpreter died of a fatal signal (e.g. SIGSEGV from deep C recursion)
    "killed",  # killed by a signal the sandbox did not send (e.g. the kernel's OOM killer)
    "error",  # any other non-zero exit
    "sandbox",  # the sandbox itself could not be set up (the code never ran)
)


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one run; every field has a default that suits a short math script.

    cpu_seconds     RLIMIT_CPU per process, rounded up to whole seconds (SIGXCPU; SIGKILL one
                    second later at the hard limit)
    wall_seconds    wall clock from start to kill, for the whole run
    memory_bytes    RLIMIT_AS (virtual address space) per process
    output_bytes    stdout and stderr together; past it the run is killed
    max_processes   RLIMIT_NPROC: processes and threads of the sandbox user, the first included
    file_bytes      RLIMIT_FSIZE: the largest file a process may write
    disk_bytes      size of the private tmpfs that is the working folder (when mounts are
                    isolated; otherwise only file_bytes bounds what is written)
    open_files      RLIMIT_NOFILE
    stderr_tail_bytes  how much of the end of stderr the result keeps
    """

    cpu_seconds: float = 5.0
    wall_seconds: float = 10.0
    memory_bytes: int = 512 * MIB
    output_bytes: int = 64 * KIB
    max_processes: int = 16
    file_bytes: int = 16 * MIB
    disk_bytes: int = 64 * MIB
    open_files: int = 64
    stderr_tail_bytes: int = 4 * KIB

    def __post_init__(self) -> None:
        for name in ("cpu_seconds", "wall_seconds"):
            if getattr(self, name) <= 0:
                raise ValueError(f"SandboxLimits.{name} must be positive")
        for name in ("memory_bytes", "output_bytes", "file_bytes", "disk_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"SandboxLimits.{name} must be positive")
        if self.max_processes < 1 or self.open_files < 8:
            raise ValueError("SandboxLimits needs max_processes >= 1 and open_files >= 8")


@dataclass(frozen=True)
class Isolation:
    """What the sandbox could actually put in place for a run (it depends on the host).

    network     "namespace": a new, empty network namespace (no interface is up);
                "guard": an audit hook in the interpreter refuses sockets (see docs/sandbox.md)
    filesystem  "read-only": a private mount namespace where every mount is read-only and the
                working folder is a private tmpfs; "permissions": only file permissions
    user        "uid N": run as an unprivileged uid of its own; "same": as the caller
    cleanup     "uid": every process of that uid is killed at the end; "group": the process
                group is killed (a process that left the group can survive)
    """

    network: str = "unknown"
    filesystem: str = "unknown"
    user: str = "unknown"
    cleanup: str = "unknown"


@dataclass(frozen=True)
class SandboxResult:
    """The outcome of one run. `ok` is a clean exit (code 0, nothing killed); otherwise
    `reason` is one of `REASONS`."""

    ok: bool
    reason: str | None
    stdout: str
    stderr_tail: str
    exit_code: int | None
    signal: int | None
    wall_seconds: float
    cpu_seconds: float = 0.0
    stdout_truncated: bool = False
    isolation: Isolation = field(default_factory=Isolation)

    @property
    def signal_name(self) -> str | None:
        if self.signal is None:
            return None
        try:
            return signal.Signals(self.signal).name
        except ValueError:
            return str(self.signal)
