"""Errors for the person at the terminal: the CLI prints them as one line, exits non-zero."""


class MarsError(Exception):
    """A user-facing error: bad input, a missing file, a server that would not start."""

    exit_code = 2


class EndpointError(Exception):
    """A model request that failed for good: a non-retryable 4xx, or its retries exhausted."""

    def __init__(self, message: str, *, retries: int, status: int | None = None) -> None:
        super().__init__(message)
        self.retries = retries
        self.status = status
