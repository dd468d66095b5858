"""Child side of a sandboxed run: isolate this process, limit it, drop privileges, exec Python.

Run as a script (`python -I -S boot.py CONFIG`, the config marshalled and hex-encoded by
runner.py) in the new process, before any model-written code exists in it; standard library
only. Steps, in order:

1. namespaces (when asked): a new network namespace (no interface up, so nothing is reachable,
   loopback included), a private mount namespace in which every mount is read-only and the
   working folder is a fresh tmpfs, and a new IPC namespace. As root this is plain `unshare`;
   otherwise inside a new user namespace. What failed falls back: sockets refused by an audit
   hook, files protected by permissions only.
2. resource limits (`setrlimit`): core 0, CPU, address space, file size, open files, processes.
3. as root: drop to the run's own unprivileged uid/gid with no supplementary groups.
4. `PR_SET_NO_NEW_PRIVS`, so set-uid programs cannot give privileges back, and a parent-death
   signal, so the process dies if the caller does.
5. one line on the report pipe saying what was put in place (`ready NETWORK FILESYSTEM`), then
   exec the interpreter on `main.py`.

A batch of tests (config mode "tests") does not exec: after step 4 this process also drops every
capability (checked), becomes non-dumpable and a child subreaper, reports, and runs
`batch_child.serve()` itself, which forks the program once per case (see batch_child.py). Its
interpreter is then the one the code may use (runner.py starts it so).

Any failure, the exec's included, is reported on stderr and on the report pipe (`failed`), and
exits 125 without running the code.
"""

from __future__ import annotations

import ctypes
import marshal
import os
import resource
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_BIND = 0x1000
MS_REC = 0x4000
MNT_DETACH = 0x2
O_PATH = 0o10000000
# pivot_root has no libc wrapper; its number differs between architectures (chroot elsewhere).
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41}
MS_PRIVATE = 1 << 18
MOUNT_ATTR_RDONLY = 0x1
MOUNT_ATTR_NOSUID = 0x2
AT_FDCWD = -100
AT_RECURSIVE = 0x8000
SYS_MOUNT_SETATTR = 442  # the same number on every architecture (new syscalls are unified)
PR_SET_NO_NEW_PRIVS = 38
PR_SET_PDEATHSIG = 1
SIGKILL = 9  # a number: importing `signal` (and `json`) costs every run milliseconds
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
LINUX_CAPABILITY_VERSION_3 = 0x20080522
SETUP_FAILED = 125

# Installed in the interpreter before the user's code when no network namespace could be made.
GUARD_HOOK = """
import sys
def _sandbox_guard(event, args):
    if event.startswith("socket."):
        raise PermissionError(f"sandbox: network is disabled ({event})")
    if event in ("ctypes.dlopen", "ctypes.dlsym"):  # raw syscalls would get around the hook
        raise PermissionError(f"sandbox: ctypes is disabled ({event})")
    if event in ("subprocess.Popen", "os.exec", "os.posix_spawn", "os.system", "os.spawn"):
        raise PermissionError(f"sandbox: new programs are disabled ({event})")
sys.addaudithook(_sandbox_guard)
del _sandbox_guard
"""
RUN_MAIN = """
sys.argv = sys.argv[1:]
__file__ = sys.argv[0]
with open(sys.argv[0], "rb") as _source:
    _code = compile(_source.read(), sys.argv[0], "exec")
del _source
exec(_code)
"""
NETWORK_GUARD = GUARD_HOOK + RUN_MAIN

LIBC = ctypes.CDLL(None, use_errno=True)


class MountAttr(ctypes.Structure):
    _fields_ = (
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    )


class CapHeader(ctypes.Structure):
    _fields_ = (("version", ctypes.c_uint32), ("pid", ctypes.c_int))


class CapData(ctypes.Structure):
    _fields_ = (
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    )


def check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def unshare(flags: int) -> bool:
    return LIBC.unshare(ctypes.c_int(flags)) == 0


def map_own_ids_in_user_namespace(uid: int, gid: int) -> None:
    """Map the caller's ids to themselves in a new user namespace (non-root path)."""
    with open("/proc/self/setgroups", "w") as f:
        f.write("deny")
    with open("/proc/self/uid_map", "w") as f:
        f.write(f"{uid} {uid} 1")
    with open("/proc/self/gid_map", "w") as f:
        f.write(f"{gid} {gid} 1")


def enter_namespaces() -> tuple[str, str]:
    """New network, mount and IPC namespaces (System V shared memory and queues made here die
    with the run); returns (network, mounts) as put in place."""
    all_three = CLONE_NEWNET | CLONE_NEWNS | CLONE_NEWIPC
    if os.geteuid() == 0:
        if unshare(all_three):
            return "namespace", "namespace"
        return ("namespace", "none") if unshare(CLONE_NEWNET) else ("guard", "none")
    uid, gid = os.getuid(), os.getgid()
    if unshare(CLONE_NEWUSER | all_three):
        map_own_ids_in_user_namespace(uid, gid)
        return "namespace", "namespace"
    return "guard", "none"


def read_only_tree(path: str) -> bool:
    """Read-only, nosuid and private propagation on every mount at and under `path`, at once
    (private first matters: nothing mounted here may reach the host's namespace)."""
    LIBC.syscall.restype = ctypes.c_long
    attr = MountAttr(MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID, 0, MS_PRIVATE, 0)
    result = LIBC.syscall(
        ctypes.c_long(SYS_MOUNT_SETATTR),
        ctypes.c_int(AT_FDCWD),
        path.encode(),
        ctypes.c_uint(AT_RECURSIVE),
        ctypes.byref(attr),
        ctypes.c_size_t(ctypes.sizeof(attr)),
    )
    return result == 0


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str = ""):
    encoded = [None if text is None else text.encode() for text in (source, target, fstype)]
    options = data.encode() if data else None
    check(LIBC.mount(*encoded, ctypes.c_ulong(flags), options), f"mount {target}")


def mount_working_folder(folder: str, code: bytes, disk_bytes: int, owner: tuple[int, int]):
    uid, gid = owner
    options = f"size={disk_bytes},mode=0700,uid={uid},gid={gid}"
    mount("tmpfs", folder, "tmpfs", MS_NOSUID | MS_NODEV, options)
    with open(os.path.join(folder, "main.py"), "wb") as f:
        f.write(code)


def make_mounts_read_only(workdir: str, code: bytes, disk_bytes: int, owner: tuple[int, int]):
    """Every mount read-only and private to this namespace; a fresh tmpfs as the working folder
    (the fallback when the hidden root below cannot be built)."""
    if not read_only_tree("/"):
        # Older kernels: at least stop propagation before mounting anything.
        check(LIBC.mount(None, b"/", None, ctypes.c_ulong(MS_REC | MS_PRIVATE), None), "mount")
        return "permissions"
    mount_working_folder(workdir, code, disk_bytes, owner)
    os.chdir(workdir)  # the old cwd is the folder under the new mount
    return "read-only"


def add_entry(root: str, path: str, kind: str, argument: str) -> None:
    """One entry of rootfs.py's plan, made under `root`."""
    target = root + path
    if kind == "dir":
        os.makedirs(target, exist_ok=True)
    elif kind == "link":
        os.symlink(argument, target)
    elif kind == "proc":
        # A procfs of its own that shows only the run's own processes (hidepid) and nothing
        # but them (subset=pid); skipped where the kernel refuses it.
        os.makedirs(target, exist_ok=True)
        options = b"hidepid=invisible,subset=pid"
        flags = ctypes.c_ulong(MS_NOSUID | MS_NODEV | MS_NOEXEC)
        LIBC.mount(b"proc", target.encode(), b"proc", flags, options)
    elif kind == "mask":
        mount("tmpfs", target, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "size=4k,mode=0555")
    elif kind == "bind":
        if os.path.isdir(argument):
            os.makedirs(target, exist_ok=True)
        else:
            os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o444))
        mount(argument, target, None, MS_BIND | MS_REC)
    else:
        raise ValueError(f"unknown root entry {kind!r}")


def enter_root(root: str) -> None:
    """`root` becomes / and the old tree is detached (pivot_root), or else chroot."""
    os.chdir(root)
    number = SYS_PIVOT_ROOT.get(os.uname().machine)
    if number is not None and LIBC.syscall(ctypes.c_long(number), b".", b".") == 0:
        check(LIBC.umount2(b".", ctypes.c_int(MNT_DETACH)), "umount2(old root)")
    else:
        os.chroot(".")
    os.chdir("/")


def hide_host(workdir: str, code: bytes, disk_bytes: int, owner, entries) -> str:
    """A new root holding only rootfs.py's allow-list, read-only, and the working folder."""
    if not read_only_tree("/"):
        check(LIBC.mount(None, b"/", None, ctypes.c_ulong(MS_REC | MS_PRIVATE), None), "mount")
        return "permissions"
    root = workdir  # the skeleton's tmpfs covers the host's working folder
    mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    for path, kind, argument in entries:
        add_entry(root, path, kind, argument)
    os.makedirs(root + workdir, exist_ok=True)
    if not read_only_tree(root):
        raise OSError("the new root could not be made read-only")
    mount_working_folder(root + workdir, code, disk_bytes, owner)
    enter_root(root)
    os.chdir(workdir)
    return "hidden"


def processes_of_user(uid: int) -> int:
    count = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}").st_uid == uid:
                    count += 1
            except OSError:
                pass
    return count


def set_limits(limits: dict[str, int], dropping_to_new_user: bool) -> None:
    cpu = limits["cpu_seconds"]
    nproc = limits["max_processes"]
    if not dropping_to_new_user:
        # RLIMIT_NPROC counts every process of the real uid, the caller's own included.
        nproc += processes_of_user(os.getuid())
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_AS, (limits["memory_bytes"],) * 2)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits["file_bytes"],) * 2)
    resource.setrlimit(resource.RLIMIT_NOFILE, (limits["open_files"],) * 2)
    resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))


def drop_privileges(uid: int, gid: int) -> None:
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    if os.getuid() == 0 or os.geteuid() == 0:
        raise OSError("could not drop root privileges")


def drop_capabilities(proc_fd: int) -> None:
    """No capability left, checked. Needed where no exec follows: a process that made a user
    namespace holds every capability in it (an exec as a non-root uid would clear them)."""
    header = CapHeader(LINUX_CAPABILITY_VERSION_3, 0)
    check(LIBC.capset(ctypes.byref(header), (CapData * 2)()), "capset")
    with open(os.open("self/status", os.O_RDONLY, dir_fd=proc_fd)) as status:
        held = [line for line in status if line.startswith(("CapEff:", "CapPrm:", "CapAmb:"))]
    if any(int(line.split()[1], 16) for line in held):
        raise OSError("capabilities are still held")


def become_batch_runner(proc_fd: int) -> None:
    """For a batch of tests run here without an exec (batch_child.py): no capabilities; not
    dumpable, so the program's children (same uid) cannot open our fds through /proc or
    ptrace us; and a subreaper, so what a case leaves running comes back to us to kill."""
    drop_capabilities(proc_fd)
    check(LIBC.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), "prctl(DUMPABLE)")
    check(LIBC.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "prctl(CHILD_SUBREAPER)")


def load_batch_runner():
    """batch_child.py beside this file, imported while its folder is still readable."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "batch_child.py")
    spec = importlib.util.spec_from_file_location("batch_child", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def boot(config: dict):
    """Set the process up; exec the code, or (a batch of tests) return the module that runs
    them here."""
    tests = config.get("mode") == "tests"
    batch_runner = load_batch_runner() if tests else None
    workdir = config["workdir"]
    uid, gid = config["uid"], config["gid"]
    new_user = uid is not None
    owner = (uid, gid) if new_user else (os.getuid(), os.getgid())
    with open(os.path.join(workdir, "main.py"), "rb") as f:
        code = f.read()
    network, mounts = enter_namespaces() if config["namespaces"] else ("guard", "none")
    # The host's /proc, for the batch runner only (its cases keep fds 0-2 and nothing else):
    # the new root has no /proc.
    proc_fd = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC) if tests else -1
    filesystem = "permissions"
    if mounts == "namespace" and config.get("root"):
        filesystem = hide_host(workdir, code, config["disk_bytes"], owner, config["root"])
    elif mounts == "namespace":
        filesystem = make_mounts_read_only(workdir, code, config["disk_bytes"], owner)
    set_limits(config["limits"], new_user)
    if new_user:
        drop_privileges(uid, gid)
    check(LIBC.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")
    # Die with the caller (set after the uid change, which clears it); not inherited by forks.
    check(LIBC.prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0), "prctl(PDEATHSIG)")
    if os.getppid() != config["parent_pid"]:
        raise OSError("the caller exited before the code started")
    if tests:
        become_batch_runner(proc_fd)
        batch_runner.PROC_FD = proc_fd
    report = f"ready {network} {filesystem}\n"
    # The line says what is in place; the pipe closes at the exec (close-on-exec), and a failed
    # exec appends a line that says so (see main).
    os.write(config["report_fd"], report.encode())
    os.set_inheritable(config["report_fd"], False)
    if tests:
        os.close(config["report_fd"])
        if network == "guard":
            exec(GUARD_HOOK, {})  # our own constant
        return batch_runner
    python = config["python"]
    if network == "guard":
        argv = [python, "-I", "-S", "-c", NETWORK_GUARD, "main.py"]
    else:
        argv = [python, "-I", "-S", "main.py"]
    os.execve(python, argv, config["env"])


def main() -> None:
    config = marshal.loads(bytes.fromhex(sys.argv[1]))  # written by runner.py, ours
    try:
        batch_runner = boot(config)
    except BaseException as error:  # anything here means the code never ran
        sys.stderr.write(f"sandbox setup failed: {type(error).__name__}: {error}\n")
        sys.stderr.flush()
        os.write(config["report_fd"], b"failed\n")
        os._exit(SETUP_FAILED)
    batch_runner.serve(config["stderr_tail_bytes"])
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
