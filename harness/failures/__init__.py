"""MAST failure-mode analysis of eval transcripts with an LLM judge (`mars failures`).

For each selected record of an eval run (by default the graded-wrong ones: `correct` false and no
`error`) the judge reads the question, the gold and handed-in answers and the multi-agent
transcript, and names the MAST failure modes present (`taxonomy`) with a short quote as
evidence. One verdict per transcript is appended to `failures.jsonl` beside the run's records;
`failures_summary.json` holds the per-category and per-mode rates with Wilson 95% intervals.

Truncation (so a long debate fits the judge's context, deterministically):
1. the question keeps its first `question_chars` characters (head and tail, see `clip`);
2. inside each message, the chain of thought keeps `reasoning_chars` and the message text
   `message_chars`: the first two thirds and the last third of the budget, with a marker saying
   how many characters were cut;
3. if the clipped messages still exceed `transcript_chars`, whole messages are dropped from the
   middle of the conversation (messages are kept alternately from the start and the end) and a
   marker says how many were omitted.
The verdict records whether its transcript was truncated.

The judge's reply is parsed leniently (a JSON object, fenced or not, with text around it; mode
ids such as "FM-2.3", "fm 2.3" or "2.3"); a reply with no usable JSON is recorded as a parse
failure, never an exception. A rerun skips every transcript already judged (parse failures
included, unless asked to retry them) and redoes only the ones whose judge call failed.

Rooms: `transcript` (which records, and what the judge reads), `verdict` (the reply parsed),
`store` (failures.jsonl and the analysis's identity), `judge` (the model calls), `rates`
(summaries and the comparison of two runs), `taxonomy` (the 14 MAST modes).
"""

from harness.failures.judge import (
    FailureJudgeSettings,
    judge_records,
    verdict_record,
)
from harness.failures.rates import (
    category_name,
    compare_failures,
    judged_verdicts,
    load_failures,
    summarize_failures,
    unpaired_bootstrap_diff,
)
from harness.failures.store import (
    FAILURES_FILE,
    FAILURES_RUN_FILE,
    FAILURES_SUMMARY_FILE,
    SCHEMA_VERSION,
    FailuresFile,
    check_failures_identity,
    failures_identity,
    has_key,
    is_judged,
    write_failures_identity,
)
from harness.failures.transcript import (
    Key,
    TruncationLimits,
    clip,
    failure_judge_messages,
    record_key,
    render_transcript,
    select_records,
)
from harness.failures.verdict import (
    Verdict,
    parse_failure_verdict,
)

__all__ = [
    "FAILURES_FILE",
    "FAILURES_RUN_FILE",
    "FAILURES_SUMMARY_FILE",
    "SCHEMA_VERSION",
    "FailureJudgeSettings",
    "FailuresFile",
    "Key",
    "TruncationLimits",
    "Verdict",
    "category_name",
    "check_failures_identity",
    "clip",
    "compare_failures",
    "failure_judge_messages",
    "failures_identity",
    "has_key",
    "is_judged",
    "judge_records",
    "judged_verdicts",
    "load_failures",
    "parse_failure_verdict",
    "record_key",
    "render_transcript",
    "select_records",
    "summarize_failures",
    "unpaired_bootstrap_diff",
    "verdict_record",
    "write_failures_identity",
]
