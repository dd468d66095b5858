"""Mistakes a newcomer makes in the first hour, each through the real `mars` entry point: a
non-zero exit, one line that says what to do (no traceback), and nothing already recorded lost.

The commands run in this test's process (`mars.main._run`, what `python -m mars` runs), not as
subprocesses: fifty interpreter starts would cost a minute of CI. Servers are real, on 127.0.0.1.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from conftest import DATA_DIR, run_mars_in_process

from core.errors import ExitCode
from core.runstore import RunDir
from harness.testing.scripted_server import Reply, ScriptedServer


class _V1OnlyHandler(BaseHTTPRequestHandler):
    """A server as vLLM and transformers serve are: the API under /v1 only, pinned to one
    model, FastAPI-style error bodies."""

    pinned = "local/tiny-format"

    def log_message(self, *_args: Any) -> None:
        pass

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": self.pinned}]})
        else:
            self._send(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        body = json.loads(self.rfile.read(length) or b"{}")
        requested = body.get("model")
        self._send(400, {"detail": f"Server is pinned to {self.pinned!r}; requested {requested!r}"})


def _serve(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """`handler` on a loopback port for the module's tests: its http://127.0.0.1:PORT."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="module")
def v1_server() -> Iterator[str]:
    yield from _serve(_V1OnlyHandler)


class _HtmlHandler(BaseHTTPRequestHandler):
    """A web page where a model server was expected (a dashboard, a proxy's login page)."""

    def log_message(self, *_args: Any) -> None:
        pass

    def do_GET(self) -> None:
        data = b"<html><body>Welcome</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture(scope="module")
def html_server() -> Iterator[str]:
    for root in _serve(_HtmlHandler):
        yield f"{root}/v1"


@pytest.fixture(scope="module")
def scripted() -> Iterator[str]:
    with ScriptedServer(lambda _req: Reply(text="The answer is \\boxed{3}.")) as server:
        yield server.base_url


def _digest(folder: Path) -> dict[str, str]:
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A finished game-training run and a finished eval run (made as the commands make them)."""
    root = tmp_path_factory.mktemp("recorded")
    game = RunDir.resolve(out=None, run_dir=root / "game-train", kind="train", slug="x")
    game.start(command=["mars", "train"], config={"games": ["kuhn_poker"], "steps": 2})
    game.append_many([{"step": 1, "game": "kuhn_poker"}])
    game.close()
    evaluated = RunDir.resolve(out=None, run_dir=root / "eval-run", kind="eval", slug="x")
    evaluated.start(command=["mars", "eval"], config={"suites": ["gsm8k"]})
    evaluated.append_many([{"suite": "gsm8k", "sample_id": "1", "correct": True}])
    evaluated.close()
    empty = root / "empty"
    empty.mkdir()
    bad_yaml = root / "bad.yaml"
    bad_yaml.write_text("steps: [1, 2\n")
    not_a_mapping = root / "list.yaml"
    not_a_mapping.write_text("- 1\n- 2\n")
    corrupt = root / "corrupt-run"
    corrupt.mkdir()
    (corrupt / "run.json").write_text('{"kind": "eval", "config": {')
    no_vars = root / "no-vars.yaml"
    no_vars.write_text("name: x\nparts:\n  - {name: a, run: arena, args: {game: '${gamez}'}}\n")
    cases = root / "cases.jsonl"
    cases.write_text('{"suite": "gsm8k"}\n{"gold": "3"}\n')
    return {
        "corrupt": corrupt,
        "no_vars": no_vars,
        "cases": cases,
        "game": game.path,
        "eval": evaluated.path,
        "empty": empty,
        "bad_yaml": bad_yaml,
        "list_yaml": not_a_mapping,
    }


# (what the newcomer did, `mars` arguments with {fixture} fields, what the one line must say)
CASES: list[tuple[str, str, str]] = [
    ('option misspelt',
     'eval --suite gsm8k --limt 3',
     'No such option: --limt'),
    ('command misspelt',
     'evaluate',
     "Did you mean 'eval'?"),
    ('value of the wrong type',
     'eval --suite gsm8k --limit many',
     "Invalid value for '--limit'"),
    ('value out of range',
     'eval --suite gsm8k --temperature -1',
     '--temperature'),
    ("loop given eval's sampling options",
     'loop --watch x --eval arena:kuhn_poker:random:2 --top-p 0.9',
     '--top-p is not a mars loop option: the loop serves each checkpoint itself'),
    ('loop given a retry budget',
     'loop --watch x --eval arena:kuhn_poker:random:2 --max-retries 2',
     '--max-retries is not a mars loop option'),
    ('loop given a seed',
     'loop --watch x --eval arena:kuhn_poker:random:2 --seed 1',
     '--seed is not a mars loop option'),
    ('suite misspelt',
     'eval --suite gsm8 --data-dir {data}',
     "did you mean 'gsm8k'"),
    ('MAS misspelt',
     'eval --suite gsm8k --mas debat --base-url {scripted} --data-dir {data}',
     "did you mean 'debate'"),
    ('MAS option misspelt',
     'eval --suite gsm8k --mas debate --mas-option roundz=2 --base-url {scripted} '
     '--data-dir {data}',
     "did you mean 'rounds'"),
    ('game shortened',
     'arena --game kuhn --player random --opponent random',
     "did you mean 'kuhn_poker'"),
    ('player misspelt',
     'arena --game kuhn_poker --player random --opponent randm',
     "did you mean 'random'"),
    ('preset misspelt',
     'train --preset marshall --dry-run',
     "did you mean 'marshal'"),
    ('training set shortened',
     'train-mas --train-set arith --dry-run',
     "did you mean 'arithmetic'"),
    ('a MAS with no training rewards',
     'train-mas --workflow debate --dry-run',
     "unknown training workflow 'debate'"),
    ('workflow misspelt',
     'train-mas --workflow plan_tol --dry-run',
     "did you mean 'plan_tool'"),
    ('role map without =',
     'train-mas --policies tool --dry-run',
     'expected ROLE=NAME'),
    ('a role the workflow lacks',
     'train-mas --policies tool=a,planner=b --dry-run',
     'has no role planner'),
    ('--device without verl',
     'train-mas --device cpu --dry-run',
     '--device is for --trainer verl'),
    ('game unknown to training',
     'train --games chess --dry-run',
     "unknown game 'chess'"),
    ('config file missing',
     'train --config missing.yaml --dry-run',
     'missing.yaml'),
    ('config file not YAML',
     'train --config {bad_yaml} --dry-run',
     'bad.yaml'),
    ('config file not a mapping',
     'train --config {list_yaml} --dry-run',
     'list.yaml'),
    ('base URL without /v1',
     'eval --suite gsm8k --base-url {v1} --data-dir {data}',
     '/v1 is: pass --base-url'),
    ('arena at a base URL without /v1',
     'arena --game kuhn_poker --opponent random --base-url {v1}',
     '/v1 is: pass --base-url'),
    ('base URL without a scheme',
     'eval --suite gsm8k --base-url 127.0.0.1:8000/v1 --data-dir {data}',
     'is not a URL like http://HOST:PORT/v1'),
    ('nothing listens at the URL',
     'eval --suite gsm8k --base-url http://127.0.0.1:9/v1 --data-dir {data}',
     'cannot reach http://127.0.0.1:9/v1'),
    ('a model name the server does not serve',
     'eval --suite gsm8k --limit 1 --base-url {v1}/v1 --model wrong-name --data-dir {data} '
     '--out {tmp}',
     "Server is pinned to 'local/tiny-format'; requested 'wrong-name'"),
    ('a model folder that does not exist',
     'arena --game kuhn_poker --opponent random --model /nonexistent/model',
     '/nonexistent/model'),
    ('a bot measured with --model',
     'exploitability --game kuhn_poker --player random --model x',
     'drop --model/--base-url'),
    ('train-mas into a game-training run',
     'train-mas --run-dir {game} --dry-run',
     'is a game-training run (mars train)'),
    ('train into an eval run',
     'train --run-dir {eval} --dry-run',
     "holds an 'eval' run"),
    ('report on a training run',
     'report {game}',
     "is a 'train' run; mars report compares eval runs"),
    ('failures of a training run',
     'failures {game}',
     'mars failures reads eval runs'),
    ('export of a training run',
     'export {game} --output {tmp}/inspect',
     'only eval runs export to Inspect'),
    ('report on a folder that is not there',
     'report /nonexistent/run',
     '/nonexistent/run'),
    ('--data-dir at an empty folder',
     'eval --suite gsm8k --data-dir {empty} --base-url {scripted}',
     'empty'),
    ('a pre-training game unknown',
     'tiny-model pretrain --games chess --out {tmp}/pt',
     'unknown game'),
    ('an advantage option misspelt',
     'train --estimator marshal --config {gama_yaml} --dry-run',
     'gama'),
    ('a loop item misspelt',
     'loop --watch {game} --eval arena:kuhn:random:2 --once',
     "did you mean 'kuhn_poker'"),
    ('grading with an unknown suite',
     'grade --suite gsm9k --gold 3 --response 3',
     "did you mean 'gsm8k'"),
    ('ratings of an empty folder',
     'ratings {empty}',
     'empty'),
    ('serve a folder that is not a model',
     'serve {empty}',
     'empty'),
    # Issue 50: lists that would double work, and the last tracebacks.
    ('a suite given twice',
     'eval --suite gsm8k,gsm8k --base-url {scripted} --data-dir {data}',
     "--suite names 'gsm8k' twice"),
    ('a game given twice to self-play',
     'selfplay --games kuhn_poker,kuhn_poker',
     "--games names 'kuhn_poker' twice"),
    ('a game given twice to training',
     'train --games kuhn_poker,kuhn_poker --dry-run',
     "--games names 'kuhn_poker' twice"),
    ('a role given twice to --policies',
     'train-mas --policies tool=a,tool=b --dry-run',
     "--policies gives the role 'tool' twice"),
    ('a role given twice to --role',
     'eval --suite gsm8k --role judge=a@http://h/v1 --role judge=b@http://h/v1 '
     '--base-url {scripted} --data-dir {data}',
     "--role gives the role 'judge' twice"),
    ('a frozen policy given twice',
     'train-mas --policies reasoner=a,tool=b --frozen a,a --dry-run',
     "--frozen names 'a' twice"),
    ('an experiment part given twice',
     'experiment marshal-mini --only a,a --dry-run',
     "--only names 'a' twice"),
    ('a port out of range',
     'serve --port 70000',
     '--port 70000 is not a port'),
    ('a run.json cut short',
     'report {corrupt}',
     'not valid JSON'),
    ('a cases file with no gradable case',
     'grade --file {cases}',
     'no case of'),
    ('the same run reported twice',
     'report {eval} {eval}',
     'is given twice'),
    ('a report saved over a file',
     'report {eval} --save {eval}/run.json',
     'is a file; give a folder'),
    ('a response cache at a folder',
     'eval --suite gsm8k --cache {tmp} --base-url {scripted} --data-dir {data}',
     'is a folder; give a file'),
    ('a loop watching an eval run',
     'loop --watch {eval} --eval arena:kuhn_poker:random:2 --once',
     'writes no checkpoints'),
    ('a web page given as the base URL',
     'arena --game kuhn_poker --opponent random --base-url {html}',
     'does not answer as an OpenAI-compatible API'),
    ('an experiment variable that no file defines',
     'experiment {no_vars} --dry-run',
     "unknown experiment variable 'gamez'; known: none"),
    # Files where folders are expected, and folders where files are.
    ('an eval run folder that is a file',
     'eval --suite gsm8k --run-dir {cases} --base-url {scripted} --data-dir {data}',
     'exists and is not a directory'),
    ('a training run folder that is a file',
     'train --run-dir {cases} --dry-run',
     'exists and is not a directory'),
    ('a MAS-training run folder that is a file',
     'train-mas --run-dir {cases} --dry-run',
     'exists and is not a directory'),
    ('an arena run folder that is a file',
     'arena --game kuhn_poker --player random --opponent random --run-dir {cases}',
     'exists and is not a directory'),
    ('a self-play run folder that is a file',
     'selfplay --games kuhn_poker --run-dir {cases}',
     'exists and is not a directory'),
    ('an exploitability run folder that is a file',
     'exploitability --game kuhn_poker --player random --run-dir {cases}',
     'exists and is not a directory'),
    ('a report of a file',
     'report {cases}',
     'is not a run directory'),
    ('the dashboard over a file',
     'dashboard --runs {cases}',
     'is not a directory'),
    ('a loop watching a file',
     'loop --watch {cases} --eval arena:kuhn_poker:random:2 --once',
     'is not a folder'),
    ('failures of a file',
     'failures {cases}',
     'is not a run directory'),
    ('a data folder that is a file',
     'eval --suite gsm8k --data-dir {cases} --base-url {scripted}',
     'is not a folder'),
    ('a config that is a folder',
     'train --config {empty} --dry-run',
     'Is a directory'),
    ('a pre-training output that is a file',
     'tiny-model pretrain --out {cases}',
     'is a file, not a folder'),
    ('a cases file that is a folder',
     'grade --file {empty}',
     'no such cases file'),
    ('ratings of a file',
     'ratings {cases}',
     'is not a run directory'),
    ('an empty suite list',
     'eval --suite , --base-url {scripted} --data-dir {data}',
     'needs at least one suite name'),
    ('an empty game list',
     'selfplay --games ,',
     'needs at least one game name'),
    ('an experiment file that is not YAML',
     'experiment {bad_yaml} --dry-run',
     'bad.yaml is not valid YAML (line 2'),
    ('an eval spec file that is not YAML',
     'loop --watch {game} --eval {bad_yaml} --once',
     'bad.yaml is not valid YAML (line 2'),
    ('the same loop evaluation given twice',
     'loop --watch {game} --eval arena:kuhn_poker:random:2,arena:kuhn_poker:random:2 --once',
     "two evaluations share the name 'arena-kuhn_poker-random'"),
    ('a role sampling setting given twice',
     'eval --suite gsm8k --role-sampling judge:temperature=0.5 '
     '--role-sampling judge:temperature=0.7 --base-url {scripted} --data-dir {data}',
     "--role-sampling gives judge's temperature twice"),
    ('every policy frozen',
     'train-mas --policies reasoner=a,tool=b --frozen a,b --dry-run',
     'bad training setting: frozen_policies freezes every policy'),
    ('a MAS option without a value',
     'eval --suite gsm8k --mas debate --mas-option rounds --base-url {scripted} '
     '--data-dir {data}',
     'expects KEY=VALUE'),
]  # fmt: skip


@pytest.mark.parametrize(("what", "arguments", "says"), CASES, ids=[c[0] for c in CASES])
def test_a_mistake_gets_one_line_that_says_what_to_do(
    what: str,
    arguments: str,
    says: str,
    runs: dict[str, Path],
    v1_server: str,
    html_server: str,
    scripted: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    gama = tmp_path / "gama.yaml"
    gama.write_text("estimator_options: {gama: 0.9}\n")
    fixtures = {
        **runs, "v1": v1_server, "html": html_server, "scripted": scripted, "tmp": tmp_path,
        "gama_yaml": gama,
        "data": DATA_DIR,
    }  # fmt: skip
    before = {name: _digest(runs[name]) for name in ("game", "eval")}
    monkeypatch.chdir(tmp_path)

    code = run_mars_in_process(arguments.format(**fixtures).split(), monkeypatch)

    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code not in (0, None), f"{what}: exit 0; stderr: {err}"
    assert "Traceback" not in err
    assert len(lines) == 1, f"{what}: {len(lines)} lines: {err}"
    assert says in lines[0], f"{what}: {lines[0]}"
    assert {name: _digest(runs[name]) for name in ("game", "eval")} == before


# (what the newcomer did, the variable, its value with {fixture} fields, `mars` arguments, says)
ENVIRONMENT_CASES: list[tuple[str, str, str, str, str]] = [
    ('the cache is a file, then serve', 'MARS_CACHE_DIR', '{cases}', 'serve --port 8765',
     'is a file, not a folder'),
    ('the cache is a file, then arena', 'MARS_CACHE_DIR', '{cases}',
     'arena --game kuhn_poker --player random --opponent random --episodes 2', 'not a folder'),
    ('the data folder is a file', 'MARS_DATA_DIR', '{cases}',
     'eval --suite gsm8k --base-url {scripted}', 'is a file, not a folder'),
    ('the data folder does not exist', 'MARS_DATA_DIR', '{tmp}/nowhere',
     'eval --suite gsm8k --base-url {scripted}', 'nowhere does not exist'),
]  # fmt: skip


@pytest.mark.parametrize(
    ("what", "variable", "value", "arguments", "says"),
    ENVIRONMENT_CASES,
    ids=[c[0] for c in ENVIRONMENT_CASES],
)
def test_an_environment_variable_pointing_nowhere_gets_one_line(
    what: str,
    variable: str,
    value: str,
    arguments: str,
    says: str,
    runs: dict[str, Path],
    scripted: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fixtures = {**runs, "scripted": scripted, "tmp": tmp_path}
    monkeypatch.setenv(variable, value.format(**fixtures))
    monkeypatch.chdir(tmp_path)
    code = run_mars_in_process(arguments.format(**fixtures).split(), monkeypatch)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code not in (0, None) and "Traceback" not in err, f"{what}: {code} {err}"
    assert len(lines) == 1 and says in lines[0], f"{what}: {err}"
    assert not any(tmp_path.glob("runs/*")), f"{what}: left a run folder"


def test_every_mistake_case_is_distinct_and_there_are_forty() -> None:
    assert len({what for what, _, _ in CASES}) == len(CASES) >= 40
    assert ExitCode.BAD_INPUT != 0


def test_base_url_alone_is_enough_for_the_game_commands_as_the_readme_says(
    scripted: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's promise: with --base-url, no --model; the server's one model is used."""
    run = tmp_path / "arena"
    code = run_mars_in_process(
        ["arena", "--game", "kuhn_poker", "--opponent", "random", "--episodes", "1",
         "--base-url", scripted, "--run-dir", str(run), "--quiet"],
        monkeypatch,
    )  # fmt: skip
    assert code == 0
    info = json.loads((run / "run.json").read_text())
    assert info["endpoint"]["model"] == "scripted"  # the name the scripted server lists
    records = [json.loads(line) for line in (run / "records.jsonl").read_text().splitlines()]
    assert len(records) == 2  # one episode from each seat
