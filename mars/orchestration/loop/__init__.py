"""The train -> evaluate loop: every new checkpoint is served, evaluated, and added to a curve.

Contract with the trainers (the CPU trainer and the verl adapter both write it):

    CHECKPOINT_DIR/step_N/            N an integer (the number of updates made; core.checkpoints)
        config.json, model.safetensors, tokenizer files ...   a Hugging Face model folder
        checkpoint.json               written last: the folder is complete once it exists

For each complete checkpoint not yet evaluated, `run_loop` serves the folder once
(`core.model_access.model_endpoint`: `transformers serve` on a CPU, vLLM on a GPU), runs every
evaluation of the spec as the real command in a subprocess against that server
(`python -m mars arena|eval|exploitability ... --base-url URL --model NAME --run-dir ...`, so
each sub-run is
an ordinary run directory), stops the server, and appends one row to the loop's run directory.
A checkpoint that cannot be served gives an error row; the loop goes on.

The loop's run directory:

    run.json                 the loop's command, spec and watch folder
    records.jsonl            one row per checkpoint, appended as each finishes (resume reads it)
    learning_curve.jsonl     the same rows, one per step, sorted by step (rewritten each time)
    learning_curve.csv       one line per step, the figures flattened into columns
    step_N-<eval name>/      each evaluation's own run directory
    logs/step_N/             the server's log and each sub-command's output

A `mars train-mas` run (`--watch RUN`) has a checkpoint per policy and step
(`RUN/policies/<name>/checkpoints/step_N/` with several policies): a step is complete once every
policy saved it, and its suite items run `mars eval --trained RUN --trained-step N`, which serves
each role its own policy's checkpoint.

Resume is by checkpoint step: a rerun into the same `--run-dir` skips steps that have a good row
and retries steps whose row has an error (as every `mars` command redoes errored records).

Rooms: `spec` (what runs on every checkpoint), `checkpoints` (what the loop watches), `commands`
(each evaluation as the `mars` command that runs it), `figures` (what a row keeps of each
sub-run), `curve` (the learning curve files), `runner` (serve, evaluate, append, wait).
"""

from mars.orchestration.loop.checkpoints import (
    Checkpoint,
    checkpoints_folder,
    complete_checkpoints,
    training_finished,
)
from mars.orchestration.loop.commands import SubCommand, resolve_settings, sub_command
from mars.orchestration.loop.curve import CURVE_CSV, CURVE_JSONL, flatten_row, write_curve
from mars.orchestration.loop.figures import exploit_figures, rating_opponents
from mars.orchestration.loop.runner import LoopOutcome, run_item, run_loop
from mars.orchestration.loop.spec import (
    ArenaItem,
    ExploitItem,
    LoopSpec,
    RatingItem,
    SuiteItem,
    check_spec,
    parse_spec,
)

__all__ = [
    "CURVE_CSV",
    "CURVE_JSONL",
    "ArenaItem",
    "Checkpoint",
    "ExploitItem",
    "LoopOutcome",
    "LoopSpec",
    "RatingItem",
    "SubCommand",
    "SuiteItem",
    "check_spec",
    "checkpoints_folder",
    "complete_checkpoints",
    "exploit_figures",
    "flatten_row",
    "parse_spec",
    "rating_opponents",
    "resolve_settings",
    "run_item",
    "run_loop",
    "sub_command",
    "training_finished",
    "write_curve",
]
