"""Every parser of model replies on 1 MiB of hostile text, and the move-list parser it replaced.

The parsers and hostile texts are tests/test_parsers_linear.py's (each parser on the inputs that
could hurt it: unclosed brackets, fences, boxes, tags, runs of blanks or digits). Measured: the
best of three reads of 256 KiB and of 1 MiB for every case; the figure is the slowest 1 MiB read
(target 1 s) beside the growth from 256 KiB to 1 MiB (linear is 4, quadratic 16). For scale, the
move-list parser of 9d52ac1 (re-created here: each candidate list scanned up to 20,000
characters for its closing bracket) on the same lines of `[` (`lines opening a list`) at 4 and
16 KiB.

    flock /tmp/mars-bench.lock .venv/bin/python bench/parsers.py
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._common import DryRun, add_dry_run, report, run_dry  # noqa: E402

KIB = 1024
_OLD_MARKED = re.compile(r"^[ \t]*(?=\[)", re.M)


def linear_test() -> types.ModuleType:
    """tests/test_parsers_linear.py, by its path (a `tests` package elsewhere may shadow it)."""
    path = ROOT / "tests" / "test_parsers_linear.py"
    spec = importlib.util.spec_from_file_location("mars_parsers_linear", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def old_list_scan(text: str, limit: int = 20_000) -> int:
    """The replaced parser's cost: from every line that opens a list, a scan of up to `limit`
    characters for the bracket that closes it (what made it quadratic)."""
    found = 0
    for match in _OLD_MARKED.finditer(text):
        depth = 0
        for char in text[match.end() : match.end() + limit]:
            depth += (char == "[") - (char == "]")
            if depth == 0:
                found += 1
                break
    return found


def best_of(parse, text: str, tries: int = 3) -> float:
    best = float("inf")
    for _ in range(tries):
        started = time.perf_counter()
        parse(text)
        best = min(best, time.perf_counter() - started)
    return best


def dry_run(dry: DryRun) -> None:
    """The test's parsers and hostile texts load and build at a small size."""
    test = linear_test()
    for _name, (parse, inputs) in test.PARSERS.items():
        for hostile in inputs:
            parse(test.HOSTILE[hostile](4 * KIB))
    dry.count("case", len(test.CASES))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_dry_run(parser)
    args = parser.parse_args()
    if args.dry_run:
        run_dry(dry_run)
        return
    test = linear_test()
    worst = (0.0, "", "")
    growth = (0.0, "", "")
    for name, (parse, inputs) in test.PARSERS.items():
        for hostile in inputs:
            small, big = test.HOSTILE[hostile](256 * KIB), test.HOSTILE[hostile](1024 * KIB)
            parse(small[:1024])
            seconds_small, seconds_big = best_of(parse, small), best_of(parse, big)
            worst = max(worst, (seconds_big, name, hostile))
            if seconds_small >= 0.01:
                growth = max(growth, (seconds_big / seconds_small, name, hostile))
    unclosed = test.HOSTILE["lines opening a list"]
    old = {size: best_of(old_list_scan, unclosed(size * KIB), 1) for size in (4, 16)}
    print(f"slowest 1 MiB read: {worst[0]:.3f} s ({worst[1]} on {worst[2]!r})")
    print(f"largest growth 256 KiB -> 1 MiB: {growth[0]:.1f}x ({growth[1]} on {growth[2]!r})")
    print(f"the replaced move-list scan: 4 KiB {old[4]:.3f} s, 16 KiB {old[16]:.3f} s")
    report(
        "slowest_parse_of_1MiB_hostile_s",
        worst[0],
        1.0,
        largest_growth=round(growth[0], 2),
        cases=len(test.CASES),
        replaced_scan_4KiB_s=round(old[4], 3),
        replaced_scan_16KiB_s=round(old[16], 3),
    )


if __name__ == "__main__":
    main()
