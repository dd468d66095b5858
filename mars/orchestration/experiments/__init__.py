"""The papers' experiments as one command (`mars experiment`): an experiment file names the
training runs, the evaluations of every checkpoint and the report; each part is an ordinary run
directory made by its own `mars` command (docs/experiments.md).

    spec      the experiment file and its `${...}` references
    parts     a part as its command line; whether it finished
    runner    run the parts in order, skip the finished, resume the unfinished
    check     --dry-run: every part checked as its command would, nothing run
    figures   what the report reads from the runs (paired differences)
    papers    the papers' own numbers, with their sources
    report    the markdown report
"""

from mars.api.report import register_folder_report
from mars.orchestration.experiments.report import (
    REPORT_FILE,
    build_report,
    report_folder,
    write_report,
)
from mars.orchestration.experiments.runner import STATE_FILE, run_experiment
from mars.orchestration.experiments.spec import (
    Experiment,
    load_experiment,
    parse_sets,
    recipe_names,
)

__all__ = [
    "REPORT_FILE",
    "STATE_FILE",
    "Experiment",
    "build_report",
    "load_experiment",
    "parse_sets",
    "recipe_names",
    "run_experiment",
    "write_report",
]

# `mars report EXP` (and `mars.report`, once this package is imported): an experiment folder's
# paper-style report, read before the folder would be taken for an eval run.
register_folder_report(report_folder)
