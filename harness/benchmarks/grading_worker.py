"""Rule-based grading off the event loop: worker processes with a time limit per answer.

A slow grade must not stall the requests in flight, and a thread cannot promise that:
math-verify on an answer such as `9^{9^{9^9}}` spends seconds inside sympy's big-integer code
holding the GIL, which freezes the asyncio loop (measured: a 10 s `asyncio.wait_for` around an
`asyncio.to_thread` grade did not return within 30 s). So each answer is graded in one of a few
worker processes. A worker that does not answer within `timeout_s` is killed and replaced; the
caller gets `GradingError`, which the eval runner records as that sample's error.

Most answers never need math-verify: a plain number against a plain number, a letter against a
letter, identical text. Those are graded on the spot (`grade_inline`: the same rules, which
raise instead of calling math-verify; replies up to `INLINE_LIMIT_CHARS`, whose extraction takes
well under 10 ms even for adversarial text), saving the worker round trip (about 0.2 ms of
client CPU per answer). The verdict is the same either way.

Workers are forked from the running process (they inherit the imported suites, so starting one
takes milliseconds; a spawned one would import for about a second, during which the runner's
workers would wait). The child replaces its stdout/stderr at once, because another thread of the
parent (a progress bar) may have held their locks at the moment of the fork. In a worker the
grader runs on the process's main thread, so math-verify's own SIGALRM timeouts are on as well.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import multiprocessing
import os
import signal
import sys
import threading
from collections import deque
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from harness.benchmarks.types import Verdict

GRADING_TIMEOUT_S = 30.0
DEFAULT_WORKERS = 2
INLINE_LIMIT_CHARS = 4000


class GradingError(Exception):
    """One answer could not be graded (the grader raised, timed out, or its worker died)."""


Job = tuple[str, str, str, list[str] | None]


def _worker_main(conn: Connection) -> None:
    # Keep only the job pipe: inherited sockets (the parent's HTTP connections, a test's
    # listening socket) must close when the parent closes them, not when this worker exits; and
    # with no other copy of the parent's end, the worker sees EOF and exits when the parent dies.
    keep = conn.fileno()
    os.closerange(3, keep)
    os.closerange(keep + 1, 1 << 16)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    sys.stdout = sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the worker
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    from harness.benchmarks import get_suite

    while True:
        try:
            suite_name, response, gold, choices = conn.recv()
        except (EOFError, OSError):
            return
        try:
            verdict = get_suite(suite_name).grade(response, gold, choices)
            conn.send(("ok", verdict.model_dump()))
        except Exception as exc:  # any failure is this answer's grading error
            conn.send(("error", f"{type(exc).__name__}: {exc}"))


def _start_method() -> str:
    return "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"


class _Worker:
    def __init__(self) -> None:
        context = multiprocessing.get_context(_start_method())
        self.conn, child = context.Pipe()
        self.process: BaseProcess = context.Process(
            target=_worker_main, args=(child,), name="mars-grader", daemon=True
        )
        self.process.start()
        child.close()

    def kill(self) -> None:
        with contextlib.suppress(Exception):
            self.process.kill()
            self.process.join(5)
        with contextlib.suppress(Exception):
            self.conn.close()


class GradingPool:
    """Up to `workers` grading processes, started on first use; `grade` is safe to await from
    any number of tasks (callers queue for a free worker; the time limit runs from the moment a
    worker takes the answer)."""

    def __init__(self, workers: int = DEFAULT_WORKERS, timeout_s: float = GRADING_TIMEOUT_S):
        if workers < 1 or timeout_s <= 0:
            raise ValueError("a grading pool needs at least one worker and a positive time limit")
        self.workers, self.timeout_s = workers, timeout_s
        self._idle: list[_Worker] = []
        self._started = 0
        self._waiters: deque[asyncio.Future[_Worker]] = deque()
        self._lock = threading.Lock()
        self.killed = 0  # workers killed for running over the time limit

    async def grade(
        self, suite: str, response: str, gold: str, choices: list[str] | None = None
    ) -> Verdict:
        worker = await self._acquire()
        healthy = False
        try:
            status, payload = await self._run(worker, (suite, response, gold, choices))
            healthy = True
        finally:
            self._release(worker, healthy)
        if status != "ok":
            raise GradingError(payload)
        return Verdict(**payload)

    async def _run(self, worker: _Worker, job: Job) -> tuple[str, Any]:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[tuple[str, Any]] = loop.create_future()

        def on_readable() -> None:
            if done.done():
                return
            try:
                done.set_result(worker.conn.recv())
            except (EOFError, OSError) as exc:
                done.set_exception(GradingError(f"the grading worker died ({exc or 'EOF'})"))

        try:
            worker.conn.send(job)
        except (OSError, ValueError) as exc:
            raise GradingError(f"the grading worker died ({exc})") from exc
        loop.add_reader(worker.conn.fileno(), on_readable)
        try:
            return await asyncio.wait_for(done, self.timeout_s)
        except asyncio.TimeoutError:
            raise GradingError(f"grading timed out after {self.timeout_s:g}s") from None
        finally:
            loop.remove_reader(worker.conn.fileno())

    async def _acquire(self) -> _Worker:
        with self._lock:
            if self._idle:
                return self._idle.pop()
            if self._started < self.workers:
                self._started += 1
                start = True
            else:
                start = False
                waiter: asyncio.Future[_Worker] = asyncio.get_running_loop().create_future()
                self._waiters.append(waiter)
        if start:
            try:
                return _Worker()
            except Exception:
                with self._lock:
                    self._started -= 1
                raise
        try:
            return await waiter
        except asyncio.CancelledError:
            # Handed a worker just as we were cancelled: give it back.
            if waiter.done() and not waiter.cancelled():
                self._release(waiter.result(), True)
            raise

    def _release(self, worker: _Worker, healthy: bool) -> None:
        if not healthy:  # over time, or dead: it may still be computing, so it is replaced
            worker.kill()
            self.killed += 1
            try:
                worker = _Worker()
            except Exception:
                with self._lock:
                    self._started -= 1
                return
        with self._lock:
            while self._waiters:
                waiter = self._waiters.popleft()
                if not waiter.done():
                    waiter.set_result(worker)
                    return
            self._idle.append(worker)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
            self._started -= len(idle)
        for worker in idle:
            worker.kill()


_shared: GradingPool | None = None


def shared_pool() -> GradingPool:
    """The process's grading pool (closed at exit)."""
    global _shared
    if _shared is None:
        _shared = GradingPool()
        atexit.register(_shared.close)
    return _shared


def grade_inline(
    suite: str, response: str, gold: str, choices: list[str] | None = None
) -> Verdict | None:
    """The suite's verdict when its plain rules decide it (no math-verify) on a reply of at
    most `INLINE_LIMIT_CHARS`; None when a worker must grade it. GradingError if the grader
    raises, as in a worker."""
    if len(response) > INLINE_LIMIT_CHARS:
        return None
    from harness.benchmarks import get_suite
    from harness.benchmarks.grading import SymbolicCheckNeeded, rules_only

    try:
        with rules_only():
            return get_suite(suite).grade(response, gold, choices)
    except SymbolicCheckNeeded:
        return None
    except Exception as exc:  # as a worker reports it
        raise GradingError(f"{type(exc).__name__}: {exc}") from None


async def grade_off_loop(
    suite: str, response: str, gold: str, choices: list[str] | None = None
) -> Verdict:
    """`get_suite(suite).grade(response, gold, choices)`: on the spot when the plain rules
    decide it, else in the shared pool; GradingError if the grader raises, runs over
    `GRADING_TIMEOUT_S` or its worker dies."""
    verdict = grade_inline(suite, response, gold, choices)
    if verdict is not None:
        return verdict
    return await shared_pool().grade(suite, response, gold, choices)
