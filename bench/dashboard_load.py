"""Dashboard load time for an eval run of 10,000 records (three agents per transcript).

Measured side by side in one process:
- functions, cold: parse records.jsonl, build the sample table, per-suite accuracy with CIs, a text
  search over every message, and the (suite, sample, epoch) index - the work of the Runs and
  Samples pages on a file not seen before;
- functions, warm: the same calls again, served by the (path, mtime, size)-keyed cache;
- the same warm path if the records were cached with `st.cache_data` (copied by pickle on every
  hit) instead of `st.cache_resource`, to show why the dashboard holds them as a resource;
- page: the Samples page rendered by Streamlit's AppTest on the new file, then rerun (the cost
  of each widget interaction).
Target: the cold page load under 3 s.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import DryRun, add_dry_run, dashboard_pages, has_names, report, run_dry

RECORDS = 10_000
TARGET_S = 3.0
APP = str(Path(__file__).resolve().parents[1] / "dashboard" / "app.py")


def write_run(root: Path) -> Path:
    from dashboard import synthetic

    suites = ("gsm8k", "math500", "aqua", "gpqa_diamond")
    records = [
        synthetic.eval_record(i, suite=suites[i % 4], correct=i % 3 != 0, text_chars=400)
        for i in range(RECORDS)
    ]
    return synthetic.write_eval_run(root / "eval-10k", records).path


def load_and_aggregate(root: Path, run: Path) -> int:
    from dashboard import cache, data

    records_path = run / "records.jsonl"
    loaded, frame = cache.eval_data(root, records_path)
    rows = data.accuracy_rows(frame, run=run.name, mas="mad", model="m")
    found = data.filter_samples(frame, correctness="wrong", text="sample 4242>")
    _, index = cache.record_lookup(root, records_path)
    assert len(loaded.rows) == RECORDS and len(rows) == 4 and len(index) == RECORDS
    assert len(found) >= 1
    return len(found)


def timed(function: object, *args: object) -> float:
    started = time.perf_counter()
    function(*args)  # type: ignore[operator]
    return time.perf_counter() - started


def cache_data_warm_hit(run: Path) -> float:
    """A warm hit if the parsed records were kept with st.cache_data (pickled copy per hit)."""
    import streamlit as st

    from dashboard import data

    @st.cache_data(show_spinner=False)
    def parse(path: str, mtime_ns: int, size: int) -> data.JsonlData:
        return data.read_jsonl(Path(path))

    stamp = data.file_stamp(run / "records.jsonl")
    assert stamp is not None
    parse(*stamp)
    return timed(parse, *stamp)


def page_times(root: Path, expect_records: bool = True) -> tuple[float, float]:
    """The Samples page: a new session's first render, then a rerun of the same session (what
    every widget interaction costs). The first includes AppTest's own per-session set-up."""
    from streamlit.testing.v1 import AppTest

    os.environ["MARS_RUNS_ROOT"] = str(root)
    test = AppTest.from_file(APP, default_timeout=120)
    test.query_params["page"] = "samples"
    first = timed(test.run)
    again = timed(test.run)
    assert not test.exception, [e.value for e in test.exception]
    if expect_records:
        shown = {m.label: m.value for m in test.metric}
        assert shown.get("matching samples") == str(RECORDS), shown
    return first, again


def dry_run(dry: DryRun) -> None:
    """The app file and the page AppTest opens, and every function of the dashboard the bench
    calls by name (its run writer, caches and tables)."""
    import importlib.util

    from streamlit import logger

    from core.errors import MarsError

    logger.set_log_level("error")  # as main: "no runtime found" notes from caches out of a server
    from dashboard import cache, data, synthetic

    if not Path(APP).is_file() or importlib.util.find_spec("streamlit.testing.v1") is None:
        raise MarsError(f"AppTest cannot open {APP}")
    dashboard_pages(dry, ["samples"])
    has_names(dry, synthetic, ["eval_record", "write_eval_run"], "function")
    has_names(dry, cache, ["eval_data", "record_lookup"], "function")
    has_names(
        dry, data, ["accuracy_rows", "filter_samples", "read_jsonl", "file_stamp"], "function"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_dry_run(parser)
    if parser.parse_args().dry_run:
        run_dry(dry_run)
        return

    import streamlit as st
    from streamlit import logger

    logger.set_log_level("error")  # "no runtime found" notes from caches used outside a server

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "empty").mkdir()
        # Imports and Streamlit start-up first: they are not part of loading a run.
        page_times(root / "empty", expect_records=False)
        run = write_run(root)
        size_mb = (run / "records.jsonl").stat().st_size / 1e6
        st.cache_resource.clear()
        cold = timed(load_and_aggregate, root, run)
        warm = timed(load_and_aggregate, root, run)
        pickled_warm = cache_data_warm_hit(run)
        st.cache_resource.clear()
        page_cold, page_warm = page_times(root)
    print(
        f"{RECORDS} records ({size_mb:.1f} MB): functions cold {cold:.2f}s, warm {warm:.3f}s; "
        f"st.cache_data warm hit {pickled_warm:.3f}s; page cold {page_cold:.2f}s, "
        f"warm {page_warm:.2f}s"
    )
    report(
        "dashboard_cold_page_load_s",
        page_cold,
        TARGET_S,
        records=RECORDS,
        file_mb=round(size_mb, 1),
        functions_cold_s=round(cold, 3),
        functions_warm_s=round(warm, 3),
        cache_data_warm_hit_s=round(pickled_warm, 3),
        page_warm_s=round(page_warm, 3),
        warm_over_cold=round(warm / cold, 3),
    )


if __name__ == "__main__":
    main()
