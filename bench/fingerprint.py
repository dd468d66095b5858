"""What a checkpoint's identity costs (issue 49): the first fingerprint of a model folder reads
every byte of its weights; a second one of the unchanged folder reads none.

A folder like a model's (config.json, tokenizer.json and one `--size-mib` model.safetensors of
random bytes) in a temporary folder with a MARS cache of its own. The weights are left to settle
past the racy window (`core.file_hashes.RACY_WINDOW_NS`: a file changed less than 2 s before its
hash began is not remembered), then fingerprinted three times: first (everything read: hashing
throughput, from the page cache, or from the disk with `--cold`), second in the same process
(the in-process memo), and third in a fresh process on the same cache (the sqlite store). Bytes
read are /proc/self/io's `rchar` around each call (every read(2), the store's pages included).

Target: the second call reads no weight bytes (under 64 KiB in all) and takes under 1% of the
first's time.

Run: .venv/bin/python bench/fingerprint.py [--size-mib 512] [--cold] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import DryRun, add_dry_run, has_names, report, run_dry
from core.errors import MarsError

TIME_TARGET = 0.01  # the second call's time over the first's
BYTES_TARGET = 64 << 10  # what the second call may read in all: /proc and the store, no weights
MIB = 1 << 20
PROC_IO = Path("/proc/self/io")

FRESH_PROCESS = """
import json, sys, time
from core.fingerprints import model_fingerprint

def rchar():
    for line in open("/proc/self/io"):
        if line.startswith("rchar:"):
            return int(line.split()[1])

before, started = rchar(), time.perf_counter()
fingerprint = model_fingerprint(sys.argv[1])
seconds, read = time.perf_counter() - started, rchar() - before
print(json.dumps({"fingerprint": fingerprint, "seconds": seconds, "read": read}))
"""


def bytes_read() -> int:
    for line in PROC_IO.read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise MarsError(f"{PROC_IO} has no rchar line")


def make_model(folder: Path, size_mib: int) -> Path:
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen3", "hidden_size": 8}))
    (folder / "tokenizer.json").write_text(json.dumps({"model": {"vocab": {"a": 0}}}))
    with (folder / "model.safetensors").open("wb") as handle:
        for _ in range(size_mib):
            handle.write(os.urandom(MIB))
        handle.flush()
        os.fsync(handle.fileno())
    return folder


def evict(path: Path) -> None:
    """Drop the file's pages from the page cache (its own only), so the next read is the disk's."""
    with path.open("rb") as handle:
        os.posix_fadvise(handle.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def dry_run(dry: DryRun, args: argparse.Namespace) -> None:
    """The functions the bench calls, /proc/self/io's counter, and room for the weights."""
    from core import file_hashes, fingerprints

    has_names(dry, fingerprints, ["model_fingerprint"], "function")
    has_names(dry, file_hashes, ["RACY_WINDOW_NS", "STORE_FILE", "forget_in_process"], "name")
    if args.size_mib < 1:
        raise MarsError(f"--size-mib {args.size_mib}: give at least 1")
    bytes_read()
    dry.count("counter")
    folder = Path(args.dir or tempfile.gettempdir())
    if not folder.is_dir():
        raise MarsError(f"--dir {folder}: no such folder")
    free = shutil.disk_usage(folder).free
    if free < (args.size_mib + 16) * MIB:
        raise MarsError(f"--dir {folder}: {free // MIB} MiB free, the weights take {args.size_mib}")
    dry.count("folder")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size-mib", type=int, default=512, help="the weight file's size")
    parser.add_argument("--cold", action="store_true", help="the first read from the disk")
    parser.add_argument("--dir", default=None, help="where the folder is written (default: /tmp)")
    add_dry_run(parser)
    args = parser.parse_args()
    if args.dry_run:
        run_dry(lambda dry: dry_run(dry, args))
        return

    with tempfile.TemporaryDirectory(dir=args.dir, prefix="mars-fingerprint-") as tmp:
        os.environ["MARS_CACHE_DIR"] = str(Path(tmp) / "cache")
        from core import file_hashes
        from core.fingerprints import model_fingerprint

        file_hashes.forget_in_process()
        model = make_model(Path(tmp) / "model", args.size_mib)
        time.sleep(file_hashes.RACY_WINDOW_NS / 1e9 + 0.2)  # settled: its hash is remembered
        if args.cold:
            evict(model / "model.safetensors")

        def timed() -> tuple[str, float, int]:
            before, started = bytes_read(), time.perf_counter()
            fingerprint = model_fingerprint(str(model))
            return fingerprint, time.perf_counter() - started, bytes_read() - before

        first, first_s, first_read = timed()
        second, second_s, second_read = timed()
        result = subprocess.run(
            [sys.executable, "-c", FRESH_PROCESS, str(model)],
            capture_output=True, text=True, check=True,
            cwd=Path(__file__).resolve().parents[1], env=dict(os.environ),
        )  # fmt: skip
        fresh = json.loads(result.stdout)
    if not first == second == fresh["fingerprint"]:
        raise SystemExit(f"fingerprints differ: {first}, {second}, {fresh['fingerprint']}")
    throughput = first_read / MIB / first_s
    fraction = second_s / first_s
    print(
        f"{args.size_mib} MiB weights ({'disk' if args.cold else 'page cache'}): first "
        f"{first_s:.3f} s ({throughput:.0f} MiB/s, {first_read / MIB:.1f} MiB read); second "
        f"{1000 * second_s:.3f} ms ({second_read} bytes read); fresh process "
        f"{1000 * fresh['seconds']:.3f} ms ({fresh['read']} bytes read, the store)"
    )
    report(
        "fingerprint_second_call_time_fraction",
        fraction,
        TIME_TARGET,
        bytes_read_second=second_read,
        bytes_target=BYTES_TARGET,
        bytes_met=second_read < BYTES_TARGET,
        first_seconds=round(first_s, 4),
        first_mib_per_s=round(throughput, 1),
        second_seconds=round(second_s, 6),
        fresh_process_seconds=round(fresh["seconds"], 6),
        fresh_process_bytes_read=fresh["read"],
        fresh_process_bytes_met=fresh["read"] < BYTES_TARGET,
        weight_mib=args.size_mib,
        cold=args.cold,
    )


if __name__ == "__main__":
    main()
