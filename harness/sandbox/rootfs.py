"""The file system a sandboxed program sees: an allow-list, planned here, built by boot.py.

Inside the run's mount namespace, boot.py mounts a small tmpfs as the new root and puts in it,
read-only, only what the interpreter needs to run the standard library:

- the interpreter binary the code runs under;
- its standard library folders (the entries of its `sys.path` under `-I -S`), with any
  `site-packages` / `dist-packages` inside them masked by an empty folder;
- the shared libraries that the binary and the standard library's extension modules load (as
  `ldd` resolves them), the dynamic loader, and `/etc/ld.so.cache` when present;
- `/dev/null`, `/dev/zero`, `/dev/random`, `/dev/urandom`, and an empty read-only `/tmp`;
- a `/proc` of its own that lists only the run's own processes (`hidepid=invisible`, which a
  run's uid of its own makes exact) and nothing else of the kernel's (`subset=pid`);
- the run's own working folder (a fresh writable tmpfs, at the same path as on the host).

Nothing else exists there: not the project checkout, the virtualenv, data sets, home folders,
the MARS cache, other runs' folders, other processes or `/sys`. Symbolic links on the way to a path
(`/lib -> usr/lib` on merged-/usr systems) are recreated as links, so each path resolves as on
the host. The plan is made once per interpreter and process (about 0.3 s, mostly `ldd`).
"""

from __future__ import annotations

import functools
import marshal
import os
import re
import shutil
import subprocess
from pathlib import Path

DEVICES = ("/dev/null", "/dev/zero", "/dev/random", "/dev/urandom")
LOADER_CACHE = "/etc/ld.so.cache"
PACKAGE_FOLDERS = ("site-packages", "dist-packages")
EMPTY_FOLDERS = ("/tmp",)
# Loaded by glibc with dlopen (thread cancellation unwinds through it), so ldd never lists it.
DLOPENED = ("libgcc_s.so.1",)
MAX_LINKS = 40  # as the kernel's own bound on symbolic links followed in one lookup
_LDD_PATH = re.compile(r"(?:=>\s*)?(/\S+)\s+\(0x[0-9a-f]+\)")

# An entry: (path in the new root, kind, argument). Kinds: "dir" (an empty folder), "link"
# (a symbolic link, argument its target), "bind" (the host's file or folder at the same path,
# read-only), "mask" (an empty read-only folder over a bound folder's subfolder).
Entry = tuple[str, str, str]

_QUERY = (
    "import marshal, os, sys\n"
    "paths = [p for p in sys.path if p and os.path.exists(p)]\n"
    "sys.stdout.buffer.write(marshal.dumps(paths))\n"
)


class RootPlanError(RuntimeError):
    """The allow-list could not be worked out on this host (no ldd, an odd interpreter)."""


def _stdlib_paths(python: str) -> list[str]:
    done = subprocess.run(
        [python, "-I", "-S", "-c", _QUERY], capture_output=True, timeout=30, check=False
    )
    if done.returncode != 0:
        raise RootPlanError(f"{python} could not list its standard library")
    return [os.path.realpath(path) for path in marshal.loads(done.stdout)]


def _shared_libraries(binaries: list[str]) -> set[str]:
    ldd = shutil.which("ldd")
    if ldd is None:
        raise RootPlanError("ldd is not installed")
    done = subprocess.run([ldd, *binaries], capture_output=True, text=True, timeout=60, check=False)
    libraries = {match.group(1) for match in _LDD_PATH.finditer(done.stdout)}
    if not libraries:
        raise RootPlanError("ldd listed no shared library")
    folders = {os.path.dirname(path) for path in libraries if "/libc.so" in path}
    for folder in folders:
        for name in DLOPENED:
            if os.path.exists(os.path.join(folder, name)):
                libraries.add(os.path.join(folder, name))
    return libraries


def _extension_modules(folders: list[str]) -> list[str]:
    found = []
    for folder in folders:
        if os.path.isdir(folder) and os.path.basename(folder) == "lib-dynload":
            found += [str(path) for path in sorted(Path(folder).glob("*.so"))]
    return found


class _Plan:
    """Entries keyed by path; a path under a bound folder needs nothing of its own."""

    def __init__(self) -> None:
        self.entries: dict[str, Entry] = {}

    def _covered(self, path: str) -> bool:
        parent = os.path.dirname(path)
        while parent not in ("/", ""):
            entry = self.entries.get(parent)
            if entry is not None and entry[1] == "bind":
                return True
            parent = os.path.dirname(parent)
        return False

    def expose(self, path: str, kind: str = "bind") -> None:
        """`path` made visible as on the host: links on the way recreated, folders made."""
        for _ in range(MAX_LINKS):
            parts = Path(path).parts[1:]
            current = "/"
            for index, part in enumerate(parts):
                current = os.path.join(current, part)
                if os.path.islink(current):
                    target = os.readlink(current)
                    self.entries.setdefault(current, (current, "link", target))
                    base = os.path.dirname(current)
                    path = os.path.normpath(os.path.join(base, target, *parts[index + 1 :]))
                    break
                if index == len(parts) - 1:
                    self.entries[current] = (current, kind, current)
                elif current not in self.entries:
                    self.entries[current] = (current, "dir", "")
            else:
                return
        raise RootPlanError(f"too many symbolic links on the way to {path}")

    def sorted_entries(self) -> tuple[Entry, ...]:
        kept = [
            entry
            for path, entry in self.entries.items()
            if entry[1] in ("mask",) or not self._covered(path)
        ]
        return tuple(sorted(kept))


@functools.cache
def root_entries(python: str) -> tuple[Entry, ...]:
    """What the new root holds for code run by `python` (see the module's docstring)."""
    interpreter = os.path.realpath(python)
    stdlib = _stdlib_paths(interpreter)
    plan = _Plan()
    plan.expose(interpreter)
    for path in stdlib:
        plan.expose(path)
    for library in sorted(_shared_libraries([interpreter, *_extension_modules(stdlib)])):
        plan.expose(library)
    for path in stdlib:
        for name in PACKAGE_FOLDERS:
            packages = os.path.join(path, name)
            if os.path.isdir(packages):
                plan.entries[packages] = (packages, "mask", "")
    for device in DEVICES:
        if os.path.exists(device):
            plan.expose(device)
    if os.path.isfile(LOADER_CACHE):
        plan.expose(LOADER_CACHE)
    for folder in EMPTY_FOLDERS:
        plan.entries.setdefault(folder, (folder, "dir", ""))
    plan.entries["/proc"] = ("/proc", "proc", "")
    return plan.sorted_entries()


def visible_paths(python: str) -> list[str]:
    """The host paths a run can read (folders bound whole, files), for docs and tests."""
    return [path for path, kind, _ in root_entries(python) if kind == "bind"]
