"""From the rows of the code data sets (APPS, CodeContests, LiveCodeBench) to stdin/stdout tests.

Each reader takes a row in its source's own column layout (hub and local files alike) and gives
the statement and the tests, or raises MalformedRow (the row is skipped and counted). Tests are
kept as `{"stdin": ..., "expected": ...}` dicts in `Sample.metadata["tests"]`.

LiveCodeBench packs most private tests as base64(zlib(pickle(JSON text))). Unpickling untrusted
data can run code, so the pickle is never given to `pickle`: `pickled_text` reads the one kind
of pickle these hold, a single string, byte by byte, and refuses any other opcode. Packed tests
stay packed in the sample (`packed_tests`) and are unpacked only when that sample is graded
(`unpacked_tests`), so loading the suite does not hold every private test in memory at once.
"""

from __future__ import annotations

import base64
import binascii
import json
import struct
import zlib
from typing import Any

from harness.benchmarks.registry import MalformedRow, required_text
from harness.benchmarks.sources import Row

Test = dict[str, str]
MAX_UNPACKED_BYTES = 1 << 30  # a packed test list larger than this once unpacked is refused

# Pickle opcodes of a pickled str (protocols 2 to 5); nothing else is accepted.
_PROTO, _FRAME, _STOP = 0x80, 0x95, 0x2E
_MEMOIZE, _BINPUT, _LONG_BINPUT = 0x94, 0x71, 0x72
_TEXT_LENGTHS = {0x8C: "<B", 0x58: "<I", 0x8D: "<Q"}  # SHORT_BINUNICODE, BINUNICODE, BINUNICODE8
_SKIP = {_PROTO: 1, _FRAME: 8, _MEMOIZE: 0, _BINPUT: 1, _LONG_BINPUT: 4}


def pickled_text(data: bytes) -> str:
    """The string in a pickle that holds exactly one string, read by the format alone: no object
    is built and nothing is called. Anything else raises ValueError."""
    position, text = 0, None
    while position < len(data):
        opcode = data[position]
        position += 1
        if opcode == _STOP:
            if text is None or position != len(data):
                raise ValueError("not a pickled string")
            return text
        if opcode in _SKIP:
            position += _SKIP[opcode]
        elif opcode in _TEXT_LENGTHS and text is None:
            layout = _TEXT_LENGTHS[opcode]
            (length,) = struct.unpack_from(layout, data, position)
            position += struct.calcsize(layout)
            if position + length > len(data):
                raise ValueError("truncated pickle")
            text = data[position : position + length].decode("utf-8", "surrogatepass")
            position += length
        else:
            raise ValueError(f"pickle opcode {opcode:#x} is not allowed")
    raise ValueError("pickle without STOP")


def _bounded_inflate(data: bytes) -> bytes:
    inflater = zlib.decompressobj()
    out = inflater.decompress(data, MAX_UNPACKED_BYTES)
    if inflater.unconsumed_tail:
        raise ValueError(f"packed tests over {MAX_UNPACKED_BYTES} bytes")
    return out


def unpack_lcb_tests(packed: str) -> list[Test]:
    """LiveCodeBench's private tests: plain JSON, or base64(zlib(pickle(JSON)))."""
    text = packed.strip()
    if not text.startswith("["):
        try:
            raw = base64.b64decode(text.encode("ascii"), validate=True)
            text = pickled_text(_bounded_inflate(raw))
        except (ValueError, binascii.Error, zlib.error, struct.error) as error:
            raise MalformedRow(f"private tests cannot be unpacked: {error}") from None
    return lcb_tests(json.loads(text))


def lcb_tests(cases: Any) -> list[Test]:
    """LiveCodeBench test cases ({input, output, testtype}); only stdin tests are supported."""
    if not isinstance(cases, list):
        raise MalformedRow("test cases are not a list")
    tests = []
    for case in cases:
        if not isinstance(case, dict) or case.get("testtype", "stdin") != "stdin":
            raise MalformedRow("functional (LeetCode) tests are not supported")
        tests.append(test_of(case.get("input"), case.get("output")))
    return tests


def test_of(stdin: Any, expected: Any) -> Test:
    """One test from an input and an output: strings, or lists of lines (APPS)."""
    return {"stdin": _text(stdin), "expected": _text(expected)}


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(line, str) for line in value):
        return "\n".join(value)
    raise MalformedRow(f"a test input or output is a {type(value).__name__}, not text")


def _json_field(row: Row, key: str) -> Any:
    value = row.get(key)
    if isinstance(value, str):
        if not value.strip():
            raise MalformedRow(f"empty {key}")
        try:
            return json.loads(value)
        except ValueError:
            raise MalformedRow(f"{key} is not JSON") from None
    return value


def apps_tests(row: Row) -> list[Test]:
    """APPS `input_output`: a JSON string {"inputs": [...], "outputs": [...]}, with `fn_name`
    when the tests call a function instead (not supported: skipped)."""
    io = _json_field(row, "input_output")
    if not isinstance(io, dict):
        raise MalformedRow("input_output is not an object")
    if io.get("fn_name"):
        raise MalformedRow("call-based tests (fn_name) are not supported")
    return paired_tests(io.get("inputs"), io.get("outputs"), none="no tests")


def codecontests_tests(row: Row) -> list[Test]:
    """CodeContests `public_tests`: {"input": [...], "output": [...]} (the reference's choice for
    the test split; `private_tests` and `generated_tests` are not used)."""
    if row.get("input_file") or row.get("output_file"):
        raise MalformedRow("reads or writes a named file instead of stdin/stdout")
    public = row.get("public_tests")
    if not isinstance(public, dict):
        raise MalformedRow("public_tests is not an object")
    return paired_tests(public.get("input"), public.get("output"), none="no public tests")


def paired_tests(inputs: object, outputs: object, *, none: str) -> list[Test]:
    """One test per (input, output) of two equally long lists; MalformedRow (`none` when there
    is no test at all) otherwise."""
    if not isinstance(inputs, list) or not isinstance(outputs, list) or not inputs:
        raise MalformedRow(none)
    if len(inputs) != len(outputs):
        raise MalformedRow("inputs and outputs differ in number")
    return [test_of(stdin, expected) for stdin, expected in zip(inputs, outputs, strict=True)]


def livecodebench_tests(row: Row) -> tuple[list[Test], str | None]:
    """Public tests (a JSON string) unpacked now; the private ones as they come (JSON or
    packed), to be unpacked when graded. Rows with functional tests are skipped."""
    public = lcb_tests(_json_field(row, "public_test_cases"))
    private = row.get("private_test_cases")
    if isinstance(private, str) and private.strip():
        if private.lstrip().startswith("["):
            return public + lcb_tests(json.loads(private)), None
        return public, private
    if not public:
        raise MalformedRow("no tests")
    return public, None


def livecodebench_question(row: Row) -> str:
    if str(row.get("starter_code") or "").strip():
        raise MalformedRow("starter code (a LeetCode function) is not supported")
    title = str(row.get("question_title") or "").strip()
    content = required_text(row, "question_content").strip()
    return f"{title}\n\n{content}" if title else content
