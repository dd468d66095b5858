"""An experiment file: the training runs, the evaluations of every checkpoint and the report.

A YAML mapping (docs/experiments.md):

    name: marshal-mini
    paper: marshal                 # whose reported numbers the report cites (or none)
    vars: {steps: 30}              # ${steps} anywhere below; `--set steps=40` overrides
    parts:                         # run in order; each one `mars COMMAND` in EXP/NAME
      - name: train-kuhn
        run: train
        args: {trainer: local, threads: 2}
        config: {model: "${model:tiny_selfplay}", games: [kuhn_poker], steps: "${steps}"}
      - name: eval-kuhn
        run: loop
        args: {watch: "${part:train-kuhn}", baseline: "${model:tiny_selfplay}", once: true}
        evals: [exploit:kuhn_poker:64, exploit:leduc_poker:4]
    report: {...}                  # what the report compares (report.py)
    logger: [tensorboard]          # trackers of the train, train-mas and loop parts (optional)

`${part:NAME}` is part NAME's run directory (an earlier part: that makes it a dependency),
`${model:KEY}` one of the built-in starting models (`MODELS`) or one the file declares under
`starts:` (the embedded tiny model format-pre-trained: `kind:` games (the default: any
`PretrainSettings` field), mas, plan or code (a workflow start's recipe), built into the MARS
cache on first use), `${exp}` the experiment folder.
A value that is exactly one `${var}` keeps the variable's type.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from core.errors import MarsError
from core.names import unknown_name
from core.settings_files import first_problem, yaml_error_line

RECIPES = Path(__file__).parent / "recipes"
# The `mars` commands a part may run, and whether each takes `--run-dir`.
COMMANDS: dict[str, bool] = {
    "train": True,
    "train-mas": True,
    "loop": True,
    "arena": True,
    "exploitability": True,
    "eval": True,
    "selfplay": True,
    "failures": False,  # writes into the eval run it analyses (`target`)
}
PAPERS = ("marshal", "stronger_mas")
# ${model:KEY}: the tiny model and the built-in starts the CPU miniatures build on first use
# (train_backend.pretrain.starts.BUILT_IN).
MODELS = ("tiny", "tiny_selfplay", "tiny_mas", "tiny_mas_quick", "tiny_plan", "tiny_code")
_REFERENCE = re.compile(r"\$\{([A-Za-z0-9_.:-]+)\}")


class Part(BaseModel):
    """One `mars` command of the experiment, run in its own run directory EXP/NAME."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    run: str
    args: dict[str, Any] = Field(default_factory=dict)  # --key value (True: a flag)
    config: dict[str, Any] | None = None  # train / train-mas: written as the --config file
    evals: list[Any] | None = None  # loop: written as the --eval file
    target: str | None = None  # failures: the eval run directory it analyses
    retries: int = Field(1, ge=0, le=3)  # reruns after a failed attempt (the command resumes)
    timeout_s: float | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _fits_its_command(self) -> Part:
        if self.run not in COMMANDS:
            raise ValueError(unknown_name("command", self.run, COMMANDS))
        if self.config is not None and self.run not in ("train", "train-mas"):
            raise ValueError(f"part {self.name}: `config` is for train and train-mas parts")
        if self.evals is not None and self.run != "loop":
            raise ValueError(f"part {self.name}: `evals` is for loop parts")
        if (self.target is None) == (self.run == "failures"):
            raise ValueError(f"part {self.name}: a failures part (and only one) needs `target`")
        if "run_dir" in self.args or "run-dir" in self.args:
            raise ValueError(f"part {self.name}: the run directory is EXP/{self.name}; drop it")
        return self


class ArmRow(BaseModel):
    """A row of the ablation table: a loop part evaluating one training arm."""

    model_config = ConfigDict(extra="forbid")
    label: str
    part: str
    step: Literal["start", "last"] = "last"  # start: the loop's step 0 (the untrained arm)
    paper_arm: str | None = None  # Stronger-MAS's arm this row matches (papers.py)


class FailureRow(BaseModel):
    """MAST failure rates of one MAS before and after training: two failures parts."""

    model_config = ConfigDict(extra="forbid")
    label: str
    before: str
    after: str


class Point(BaseModel):
    """What an answer's figure is compared with: an evaluation of a loop part at a checkpoint."""

    model_config = ConfigDict(extra="forbid")
    part: str | None = None  # None: the answer's part
    eval: str | None = None  # None: the answer's evaluation
    step: Literal["start", "last"] = "start"


class Answer(BaseModel):
    """A figure that answers a report question: evaluation `eval` (the loop item's key: its
    `name`, else e.g. `exploit-leduc_poker`, `arena-connect_four-random`) of loop part `part`
    at its last checkpoint (or `step: start`), against `against` (by default the same
    evaluation at the start): the change, with its 95% interval."""

    model_config = ConfigDict(extra="forbid")
    part: str
    eval: str
    step: Literal["start", "last"] = "last"
    seat: Literal["first", "second"] | None = None  # an arena's seat; None: each seat
    figure: Literal["normalized_return", "win"] | None = None  # an arena's; default the return
    against: Point = Field(default_factory=Point)

    @model_validator(mode="after")
    def _two_figures(self) -> Answer:
        other = (self.against.part or self.part, self.against.eval or self.eval)
        if other == (self.part, self.eval) and self.against.step == self.step:
            raise ValueError(f"the answer from {self.part} {self.eval} compares it with itself")
        return self


class Question(BaseModel):
    """A question the experiment asks, and the figures that answer it."""

    model_config = ConfigDict(extra="forbid")
    question: str = Field(min_length=1)
    answers: list[Answer] = Field(default_factory=list)


class NotAttempted(BaseModel):
    """A headline question of the paper this experiment does not attempt, and why."""

    model_config = ConfigDict(extra="forbid")
    question: str = Field(min_length=1)
    why: str = Field(min_length=1)


class ReportSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ablations: list[ArmRow] = Field(default_factory=list)
    failures: list[FailureRow] = Field(default_factory=list)
    # what the experiment asks: each a question and what answers it (a bare string: unanswered)
    questions: list[Question] = Field(default_factory=list)
    not_attempted: list[NotAttempted] = Field(default_factory=list)

    @field_validator("questions", mode="before")
    @classmethod
    def _bare_questions(cls, questions: Any) -> Any:
        if not isinstance(questions, list):
            return questions
        return [{"question": q} if isinstance(q, str) else q for q in questions]

    def answer_parts(self) -> list[str]:
        """Every part an answer reads."""
        return [
            name
            for question in self.questions
            for answer in question.answers
            for name in (answer.part, answer.against.part)
            if name
        ]


class Experiment(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    title: str = ""
    paper: Literal["marshal", "stronger_mas"] | None = None
    scale: Literal["paper", "mini"] = "mini"
    description: str = ""
    vars: dict[str, Any] = Field(default_factory=dict)
    # ${model:NAME}: format pre-trainings of the embedded tiny model this experiment starts from,
    # each `kind:` (games by default) plus its recipe
    starts: dict[str, dict[str, Any]] = Field(default_factory=dict)
    parts: list[Part] = Field(min_length=1)
    report: ReportSpec = Field(default_factory=ReportSpec)
    notes: list[str] = Field(default_factory=list)  # what this scale cannot show
    # Trackers for the train, train-mas and loop parts (`--logger` in their command lines, unless
    # a part's args give their own): console, wandb, tensorboard, mlflow (core.trackers).
    logger: list[str] = Field(default_factory=list)

    @field_validator("logger", mode="before")
    @classmethod
    def _known_loggers(cls, names: Any) -> Any:
        """Known names whose packages are installed (one line otherwise); `a,b` works too."""
        from core.trackers import logger_setting

        return logger_setting(names)

    @model_validator(mode="after")
    def _parts_named_once_and_in_order(self) -> Experiment:
        for name in self.starts:
            check_start(name, self.start_recipe(name))
        seen: set[str] = set()
        for part in self.parts:
            if part.name in seen:
                raise ValueError(f"two parts are named {part.name!r}")
            for name in part_references(part):
                if name not in seen:
                    raise ValueError(
                        f"part {part.name} refers to ${{part:{name}}}, which is not an earlier part"
                    )
            seen.add(part.name)
        named = [row.part for row in self.report.ablations]
        named += [n for row in self.report.failures for n in (row.before, row.after)]
        named += self.report.answer_parts()
        for name in named:
            if name not in seen:
                raise ValueError(f"the report names part {name!r}, which the experiment lacks")
        for name in self.report.answer_parts():
            if self.part(name).run != "loop":
                raise ValueError(f"a question's answer reads part {name!r}, which is not a loop")
        return self

    def start_recipe(self, name: str) -> dict[str, Any]:
        """A `starts:` recipe with its `${var}`s filled in (a start reads variables only)."""

        def resolve(ref: str) -> Any:
            if ref in self.vars:
                return self.vars[ref]
            raise ValueError(f"starts.{name}: ${{{ref}}} is not a variable of this experiment")

        return substitute(self.starts[name], resolve)

    def part(self, name: str) -> Part:
        for part in self.parts:
            if part.name == name:
                return part
        raise MarsError(unknown_name("part", name, [p.name for p in self.parts]))


def check_start(name: str, recipe: dict[str, Any]) -> None:
    """A `starts:` entry: a name of its own, a known `kind` and a valid recipe of that kind."""
    if name in MODELS:
        raise ValueError(f"starts: {name!r} is a built-in model; give the start another name")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]*", name):
        raise ValueError(f"starts: {name!r} is not a usable name (letters, digits, _ and -)")
    start_settings(name, recipe)


def start_settings(name: str, recipe: dict[str, Any]) -> tuple[str, Any]:
    """A `starts:` entry's kind and recipe settings (ValueError naming the bad field)."""
    from train_backend.pretrain.starts import KINDS, recipe_settings

    fields = dict(recipe)
    kind = fields.pop("kind", "games")
    if kind not in KINDS:
        raise ValueError(unknown_name(f"kind of start (starts.{name}.kind)", str(kind), KINDS))
    try:
        return kind, recipe_settings(kind, fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        message = str(first["msg"]).removeprefix("Value error, ")
        raise ValueError(f"starts.{name}.{where}: {message}") from None


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list | tuple):
        return [s for v in value for s in _strings(v)]
    return []


def part_references(part: Part) -> list[str]:
    """The parts this part reads (its dependencies), in the order named."""
    fields = [part.args, part.config, part.evals, part.target]
    names = [
        m[5:] for s in _strings(fields) for m in _REFERENCE.findall(s) if m.startswith("part:")
    ]
    return list(dict.fromkeys(names))


def recipe_names() -> list[str]:
    return sorted(path.stem for path in RECIPES.glob("*.yaml"))


def experiment_path(name_or_file: str) -> Path:
    """A shipped experiment's file (`marshal-mini`) or a YAML file of one's own."""
    path = Path(name_or_file).expanduser()
    if path.suffix.lower() in (".yaml", ".yml") or path.is_file():
        if not path.is_file():
            raise MarsError(f"no experiment file {path}")
        return path
    shipped = RECIPES / f"{name_or_file}.yaml"
    if not shipped.is_file():
        raise MarsError(unknown_name("experiment", name_or_file, recipe_names()))
    return shipped


def load_experiment(name_or_file: str, overrides: dict[str, Any] | None = None) -> Experiment:
    """The experiment, its `vars` updated by `overrides` (`--set KEY=VALUE`); one line if bad."""
    path = experiment_path(name_or_file)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise MarsError(f"cannot read the experiment {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise MarsError(yaml_error_line(exc, "the experiment", path)) from exc
    if not isinstance(data, dict):
        raise MarsError(f"the experiment {path} must be a YAML mapping")
    known = dict(data.get("vars") or {})
    for key in overrides or {}:
        if key not in known:
            raise MarsError(unknown_name(f"variable of {path.stem}", key, known))
    data["vars"] = {**known, **(overrides or {})}
    try:
        return Experiment.model_validate(data)
    except ValidationError as exc:
        where, message = first_problem(exc)
        raise MarsError(
            f"experiment {path.name}: {where + ': ' if where else ''}{message}"
        ) from exc


def parse_sets(items: list[str]) -> dict[str, Any]:
    """`--set KEY=VALUE` (the value read as YAML: numbers stay numbers)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise MarsError(f"--set {item!r}: write KEY=VALUE")
        out[key.strip()] = yaml.safe_load(value) if value else ""
    return out


def substitute(value: Any, resolve: Any) -> Any:
    """`value` with every `${ref}` replaced by `resolve(ref)`; recursive over lists and dicts."""
    if isinstance(value, dict):
        return {k: substitute(v, resolve) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(v, resolve) for v in value]
    if not isinstance(value, str):
        return value
    whole = _REFERENCE.fullmatch(value)
    if whole:
        return substitute(resolve(whole.group(1)), resolve)
    return _REFERENCE.sub(lambda m: str(substitute(resolve(m.group(1)), resolve)), value)
