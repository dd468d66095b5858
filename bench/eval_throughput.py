"""Eval runner throughput: 1,000 GSM8K samples x 2 epochs (2,000 requests), single agent,
concurrency 64, against a scripted server answering after 100 ms.

Runs the real `mars eval` command and reads the runner's own wall time from summary.json (the
run phase, not interpreter start-up). Prints wall time over the ideal (2,000 x 0.1 s / 64) and
records written per second. Target: ratio <= 1.2.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    DRY_RUN_URL,
    DryRun,
    add_dry_run,
    eval_command,
    gsm8k_file,
    report,
    run_dry,
    scripted_server_command,
    scripted_server_process,
)

SAMPLES, EPOCHS, CONCURRENCY, DELAY_S = 1000, 2, 64, 0.1


def command(base_url: str, run_dir: Path) -> list[str]:
    return eval_command(base_url, run_dir, SAMPLES, CONCURRENCY, "--epochs", str(EPOCHS))


def dry_run(dry: DryRun) -> None:
    """The scripted server's and `mars eval`'s command lines, and the GSM8K file it reads."""
    gsm8k_file(dry)
    dry.module(scripted_server_command(DELAY_S))
    dry.mars(command(DRY_RUN_URL, Path(tempfile.gettempdir()) / "run"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_dry_run(parser)
    if parser.parse_args().dry_run:
        run_dry(dry_run)
        return
    with scripted_server_process(DELAY_S) as base_url, tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        subprocess.run(command(base_url, run_dir), check=True, stdout=subprocess.DEVNULL)
        summary = json.loads((run_dir / "summary.json").read_text())
        records = sum(1 for _ in (run_dir / "records.jsonl").open())
    wall, cpu = summary["wall_s"], summary["client_cpu_s"]
    ideal = SAMPLES * EPOCHS * DELAY_S / CONCURRENCY
    print(f"{records} records in {wall:.2f}s (ideal {ideal:.2f}s), {records / wall:.0f} records/s")
    print(f"client CPU {1000 * cpu / records:.2f} ms per record")
    report(
        "wall_over_ideal",
        wall / ideal,
        1.2,
        records_per_s=round(records / wall, 1),
        client_cpu_ms_per_record=round(1000 * cpu / records, 3),
        records=records,
        concurrency=CONCURRENCY,
    )


if __name__ == "__main__":
    main()
