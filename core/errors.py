"""Errors for the person at the terminal: the CLI prints them as one line, exits non-zero.

The exit codes every command uses (docs/run-format.md, "Exit codes"; a test keeps it true).
"""

from enum import IntEnum


class ExitCode(IntEnum):
    DONE = 0  # some samples may have failed: completed_with_errors, a rerun redoes them
    BAD_INPUT = 2  # bad input or a refused rerun: one line, nothing recorded is lost
    MODEL_FAILED = 3  # a model request failed for good outside the per-sample handling
    NO_SCORE = 4  # a figure the command exists for has no graded sample
    INTERRUPTED = 130  # Ctrl-C or SIGTERM


class MarsError(Exception):
    """A user-facing error: bad input, a missing file, a server that would not start."""

    exit_code = ExitCode.BAD_INPUT


class EndpointError(Exception):
    """A model request that failed for good: a non-retryable 4xx, or its retries exhausted."""

    def __init__(self, message: str, *, retries: int, status: int | None = None) -> None:
        super().__init__(message)
        self.retries = retries
        self.status = status
