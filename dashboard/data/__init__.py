"""Loading and aggregation for the dashboard: plain functions over run directories, no Streamlit.

Everything here reads files under the runs root (see `dashboard.paths`) and tolerates what a
half-written or older run leaves behind: malformed JSON lines are skipped and counted, missing
fields become None (shown as "-"), unknown fields are ignored.

One module per view: `files` (reading a run's files), `values` (loosely typed fields), `runs`,
`evals` (samples and accuracy), `failures` (MAST rates), `arenas` (seats, episodes, replays),
`training` (metrics and curves), `families` (columns folded into one chart per figure),
`exploitability`, `compare` (two eval runs sample by sample),
`usage` (calls and tokens per role). The views use them as `data.NAME`.
"""

from dashboard.data.arenas import (
    SEAT_COLUMNS,
    TurnView,
    arena_outcomes,
    arena_summaries,
    episode_table,
    replay_turns,
    seat_table,
)
from dashboard.data.compare import (
    OUTCOMES,
    PairedCounts,
    mcnemar_exact_p,
    pair_samples,
    paired_counts,
)
from dashboard.data.evals import (
    CORRECTNESS,
    EVAL_COLUMNS,
    TRI_STATE,
    MessageView,
    accuracy_rows,
    accuracy_table,
    eval_frame,
    filter_samples,
    fmt_key,
    key_of,
    transcript_messages,
)
from dashboard.data.exploitability import (
    ACTION_SHARE_COLUMNS,
    EXPLOIT_COLUMNS,
    EXPLOIT_RUN_COLUMNS,
    TRAINING_PREFIXES,
    action_share_table,
    exploitability_runs_table,
    exploitability_table,
)
from dashboard.data.failures import (
    failure_rates,
    verdicts_showing,
)
from dashboard.data.families import (
    FamilyPlan,
    Series,
    family_frame,
    family_of,
    last_values,
    plan_families,
)
from dashboard.data.files import (
    CURVE_FILES,
    METRICS_FILE,
    SEATS,
    JsonlData,
    file_stamp,
    read_csv_rows,
    read_json,
    read_jsonl,
)
from dashboard.data.runs import (
    RunEntry,
    RunScan,
    discover_runs,
    runs_table,
    scan_runs,
)
from dashboard.data.training import (
    learning_curve,
    metrics_frame,
    numeric_columns,
    summary_of,
    win_rate_table,
)
from dashboard.data.usage import (
    USAGE_FILE,
    cost_row,
    overall_accuracy,
    role_table,
    role_usage,
)
from dashboard.data.values import (
    as_float,
    as_int,
    as_text,
    ci_bounds,
)

__all__ = [
    "ACTION_SHARE_COLUMNS",
    "CORRECTNESS",
    "CURVE_FILES",
    "EVAL_COLUMNS",
    "EXPLOIT_COLUMNS",
    "EXPLOIT_RUN_COLUMNS",
    "METRICS_FILE",
    "OUTCOMES",
    "SEATS",
    "SEAT_COLUMNS",
    "TRAINING_PREFIXES",
    "TRI_STATE",
    "USAGE_FILE",
    "FamilyPlan",
    "JsonlData",
    "MessageView",
    "PairedCounts",
    "RunEntry",
    "RunScan",
    "Series",
    "TurnView",
    "accuracy_rows",
    "accuracy_table",
    "action_share_table",
    "arena_outcomes",
    "arena_summaries",
    "as_float",
    "as_int",
    "as_text",
    "ci_bounds",
    "cost_row",
    "discover_runs",
    "episode_table",
    "eval_frame",
    "exploitability_runs_table",
    "exploitability_table",
    "failure_rates",
    "family_frame",
    "family_of",
    "file_stamp",
    "filter_samples",
    "fmt_key",
    "key_of",
    "last_values",
    "learning_curve",
    "mcnemar_exact_p",
    "metrics_frame",
    "numeric_columns",
    "overall_accuracy",
    "pair_samples",
    "paired_counts",
    "plan_families",
    "read_csv_rows",
    "read_json",
    "read_jsonl",
    "replay_turns",
    "role_table",
    "role_usage",
    "runs_table",
    "scan_runs",
    "seat_table",
    "summary_of",
    "transcript_messages",
    "verdicts_showing",
    "win_rate_table",
]
