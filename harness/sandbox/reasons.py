"""Name why a sandboxed run failed, from how it ended and the last line of its traceback."""

from __future__ import annotations

import re
import signal

SIGNAL_REASONS = {
    signal.SIGXCPU: "cpu",
    signal.SIGXFSZ: "disk",
    signal.SIGKILL: "killed",
    signal.SIGSEGV: "crash",
    signal.SIGBUS: "crash",
    signal.SIGABRT: "crash",
    signal.SIGILL: "crash",
    signal.SIGFPE: "crash",
}

EXCEPTION_REASONS = {
    "MemoryError": "memory",
    "RecursionError": "recursion",
    "socket.gaierror": "network",
    "gaierror": "network",
}

ERRNO_REASONS = {
    11: "processes",  # EAGAIN from fork under RLIMIT_NPROC
    101: "network",  # ENETUNREACH: the namespace has no interface up
    99: "network",  # EADDRNOTAVAIL
    97: "network",  # EAFNOSUPPORT
    13: "filesystem",  # EACCES
    30: "filesystem",  # EROFS
    1: "permission",  # EPERM: e.g. signalling another user's process, setuid
    27: "disk",  # EFBIG under RLIMIT_FSIZE
    28: "disk",  # ENOSPC on the working folder's tmpfs
    122: "disk",  # EDQUOT
    24: "files",  # EMFILE
}

# A traceback's final line: "package.SomethingError: message" (or just the name). The lines of
# several processes writing tracebacks at once can interleave, so the last such line is taken.
EXCEPTION_LINE = re.compile(
    r"^(?P<name>(?:[A-Za-z_]\w*\.)*\w*(?:Error|Exception|Exit|Interrupt|gaierror))"
    r"(?::\s?(?P<message>.*))?$"
)
ERRNO = re.compile(r"\[Errno (?P<errno>-?\d+)\]")


def last_exception(stderr_tail: str) -> tuple[str, str] | None:
    """(name, message) of the last exception line, when stderr holds a traceback."""
    if "Traceback (most recent call last)" not in stderr_tail:
        return None
    for line in reversed(stderr_tail.splitlines()):
        match = EXCEPTION_LINE.match(line.rstrip())
        if match is not None:
            return match["name"], match["message"] or ""
    return None


def reason_from_exception(name: str, message: str) -> str:
    if message.startswith("sandbox: network"):
        return "network"
    if message.startswith("sandbox: new programs"):
        return "processes"
    if message.startswith("sandbox: ctypes"):
        return "permission"
    if name in EXCEPTION_REASONS:
        return EXCEPTION_REASONS[name]
    if name == "RuntimeError" and "can't start new thread" in message:
        return "processes"
    errno = ERRNO.search(message)
    if errno is not None:
        return ERRNO_REASONS.get(int(errno["errno"]), "error")
    return "error"


def classify(stopped_for: str | None, returncode: int, stderr_tail: str, ready: bool) -> str | None:
    """None for a clean run; otherwise one of `limits.REASONS`. `stopped_for` is the limit the
    parent saw end the run ("output", "timeout", "cpu"), None when the run ended by itself."""
    if stopped_for is not None:
        return stopped_for
    if not ready:
        return "sandbox"
    if returncode == 0:
        return None
    if returncode < 0:
        return SIGNAL_REASONS.get(-returncode, "killed")
    exception = last_exception(stderr_tail)
    if exception is None:
        return "error"
    return reason_from_exception(*exception)
