"""Inside the sandbox: call a function on given inputs and print its results as plain data.

Standard library only, and every top-level name starts with `_mars_`: this file's text is
appended to the graded program (`prompt + completion + this + the call below`), so it shares
that program's globals. `function_grading.py` (the parent) reads the results; it imports the
decoder from here, but the copy inside the sandbox is only ever the program's: nothing it does
to that copy can change a verdict, which the parent decides on the values alone.

Plain data: None, bool, int, float, str, and lists, tuples, dicts, sets, frozensets, bytes and
complex numbers of plain data, of exactly those types (a subclass, e.g. an int with its own
`__eq__`, is not plain data). Encoded as JSON with tags: a list is a JSON array; every other
container is a one-key object: {"t": [...]} a tuple, {"d": [[k, v], ...]} a dict, {"s": [...]}
a set, {"f": [...]} a frozenset, {"b": "hex"} bytes, {"c": [re, im]} a complex number.
"""

import json as _mars_json
import os as _mars_os
import sys as _mars_sys

_MARS_MAX_DEPTH = 100
_MARS_TAGS = {"t": tuple, "s": set, "f": frozenset}


def _mars_encode(value, depth=0):
    """Tagged JSON-ready data; TypeError for anything that is not plain data."""
    if depth > _MARS_MAX_DEPTH:
        raise TypeError("nested too deep")
    kind = type(value)
    if value is None or kind in (bool, int, float, str):
        return value
    if kind is list:
        return [_mars_encode(item, depth + 1) for item in value]
    if kind is tuple:
        return {"t": [_mars_encode(item, depth + 1) for item in value]}
    if kind is set or kind is frozenset:
        tag = "s" if kind is set else "f"
        return {tag: [_mars_encode(item, depth + 1) for item in value]}
    if kind is dict:
        pairs = value.items()
        return {"d": [[_mars_encode(k, depth + 1), _mars_encode(v, depth + 1)] for k, v in pairs]}
    if kind is bytes:
        return {"b": value.hex()}
    if kind is complex:
        return {"c": [value.real, value.imag]}
    raise TypeError(f"{kind.__name__} is not plain data")


def _mars_decode(data, depth=0):
    """The value `_mars_encode` gave `data` for; ValueError for anything else."""
    if depth > _MARS_MAX_DEPTH:
        raise ValueError("nested too deep")
    if data is None or type(data) in (bool, int, float, str):
        return data
    if type(data) is list:
        return [_mars_decode(item, depth + 1) for item in data]
    if type(data) is not dict or len(data) != 1:
        raise ValueError("not a tagged value")
    ((tag, body),) = data.items()
    if tag in _MARS_TAGS and type(body) is list:
        try:
            return _MARS_TAGS[tag](_mars_decode(item, depth + 1) for item in body)
        except TypeError as error:  # an unhashable member of a set
            raise ValueError(str(error)) from None
    if tag == "d" and type(body) is list:
        pairs = [_mars_decode(pair, depth + 1) for pair in body]
        if not all(type(pair) is list and len(pair) == 2 for pair in pairs):
            raise ValueError("a dict entry is not a pair")
        try:
            return {key: value for key, value in pairs}
        except TypeError as error:
            raise ValueError(str(error)) from None
    if tag == "b" and type(body) is str:
        return bytes.fromhex(body)
    if tag == "c" and type(body) is list and len(body) == 2:
        real, imag = body
        if type(real) is float and type(imag) is float:
            return complex(real, imag)
    raise ValueError(f"unknown tag {tag!r}")


def _mars_outcome(function, call):
    """{"v": result} or {"e": exception name} or {"x": type name} (not plain data)."""
    args = _mars_decode(call)
    try:
        result = function(*args)
    except BaseException as error:  # SystemExit from inside the function included
        return {"e": type(error).__name__}
    try:
        return {"v": _mars_encode(result)}
    except (TypeError, ValueError, RecursionError):
        return {"x": type(result).__name__}


def _mars_call(entry_point):
    """Read the calls (one JSON line on stdin), call `entry_point` on each, print the results
    as the last line of stdout. What the function prints goes nowhere."""
    calls = _mars_json.loads(_mars_sys.stdin.readline())
    function = globals()[entry_point]
    real_stdout = _mars_sys.stdout
    _mars_sys.stdout = open(_mars_os.devnull, "w")  # noqa: SIM115 - the run ends soon after
    outcomes = [_mars_outcome(function, call) for call in calls]
    _mars_sys.stdout = real_stdout
    line = _mars_json.dumps({"outcomes": outcomes}, separators=(",", ":"))
    real_stdout.write("\n" + line + "\n")
    real_stdout.flush()


def _mars_record(problems_line):
    """For each problem (prompt + canonical solution + test, entry point): run its `check` on
    a wrapper of the canonical function that notes the arguments of every call from outside
    it (the check's calls, and the test's calls by the function's global name, which the
    benchmark binds to the candidate too; not the function's calls of itself), with the
    `random` module seeded as the parent's replay seeds it. One JSON line per problem."""
    import random as _random

    for problem in _mars_json.loads(problems_line):
        namespace = {"__name__": "__mars_problem__"}
        calls = []
        try:
            exec(problem["source"], namespace)
            namespace[problem["entry_point"]] = _mars_recorder(
                namespace[problem["entry_point"]], calls
            )
            _random.seed(problem["seed"])
            namespace["check"](namespace[problem["entry_point"]])
            reply = {"id": problem["id"], "calls": calls}
        except BaseException as error:
            reply = {"id": problem["id"], "error": f"{type(error).__name__}: {error}"}
        _mars_sys.stdout.write(_mars_json.dumps(reply, separators=(",", ":")) + "\n")
    _mars_sys.stdout.flush()


def _mars_recorder(function, calls):
    depth = [0]

    def recorder(*args):
        if depth[0]:
            return function(*args)  # the canonical solution calling itself
        calls.append(_mars_encode(list(args)))
        depth[0] += 1
        try:
            return function(*args)
        finally:
            depth[0] -= 1

    return recorder
