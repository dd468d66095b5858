"""One policy per role on verl: which policy trains in which phase, against which partners, and
what a rerun skips (the phase runner with a recording launcher; the real verl run is in
tests/test_verl_mas_cpu.py)."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import pytest

from core.checkpoints import CHECKPOINT_FILE
from core.endpoint import EndpointConfig
from core.errors import MarsError
from core.runstore import RunDir
from train_backend.mas.config import WorkflowTrainConfig
from train_backend.verl.mas_phases import Phase, phase_plan, train_phases


def test_policies_alternate_in_phases_until_each_made_its_steps() -> None:
    assert phase_plan(["coder", "thinker"], 5, 2) == [
        Phase(0, "coder", 2), Phase(1, "thinker", 2), Phase(2, "coder", 4),
        Phase(3, "thinker", 4), Phase(4, "coder", 5), Phase(5, "thinker", 5),
    ]  # fmt: skip
    assert phase_plan(["a", "b"], 3, 0) == [Phase(0, "a", 3), Phase(1, "b", 3)]


def _publish(folder: Path) -> None:
    folder.mkdir(parents=True)
    (folder / CHECKPOINT_FILE).write_text("{}")


def test_each_phase_serves_the_other_policys_latest_checkpoint_and_a_rerun_skips_done_phases(
    tmp_path: Path,
) -> None:
    config = WorkflowTrainConfig(
        model="start",
        policies={"tool": "coder", "reasoner": "thinker"},
        steps=2,
        phase_steps=1,
        lr_schedule="constant",
    )
    run = RunDir.resolve(out=None, run_dir=tmp_path / "run", kind="train", slug="mas")
    launched: list[tuple[str, int, dict]] = []
    served: list[str] = []

    def run_verl(phase_config: WorkflowTrainConfig, sub_run: RunDir, *, dry_run: bool) -> None:
        launched.append((sub_run.path.name, phase_config.steps, phase_config.frozen_partners))
        _publish(sub_run.path / "checkpoints" / f"step_{phase_config.steps}")

    @contextmanager
    def serve(*, model: str, **_: object):
        served.append(model)
        yield EndpointConfig(base_url=f"http://127.0.0.1:1/v1/{len(served)}", model=model)

    policies = run.path / "policies"
    _publish(policies / "coder" / "checkpoints" / "step_1")  # phase 0 done in an earlier run
    ran = train_phases(
        config, run, dry_run=False, run_verl=run_verl, serve=serve, log=lambda _: None
    )
    assert [(phase.policy, phase.target) for phase in ran] == [
        ("thinker", 1), ("coder", 2), ("thinker", 2),
    ]  # fmt: skip
    # Each phase's partner is the other policy's newest checkpoint at that moment.
    assert served == [
        str(policies / "coder" / "checkpoints" / "step_1"),
        str(policies / "thinker" / "checkpoints" / "step_1"),
        str(policies / "coder" / "checkpoints" / "step_2"),
    ]
    assert launched[1][2]["reasoner"]["model"] == str(
        policies / "thinker" / "checkpoints" / "step_1"
    )
    assert set(launched[0][2]) == {"tool"} and set(launched[1][2]) == {"reasoner"}


def test_a_policy_left_alone_trains_in_one_phase() -> None:
    # only one policy trains (the others frozen): its turns follow each other, one launch
    assert phase_plan(["coder"], 3, 1) == [Phase(0, "coder", 3)]
    assert phase_plan(["a", "b"], 3, 2) == [
        Phase(0, "a", 2), Phase(1, "b", 2), Phase(2, "a", 3), Phase(3, "b", 3),
    ]  # fmt: skip


def test_a_frozen_policy_never_trains_and_is_served_from_its_start_model(tmp_path: Path) -> None:
    from core.endpoint import GenerationConfig

    config = WorkflowTrainConfig(
        model="base",
        policies={"tool": "coder", "reasoner": "thinker"},
        policy_models={"thinker": "thinker-start"},
        frozen_policies=["thinker"],
        role_sampling={"reasoner": {"temperature": 0.2, "max_new_tokens": 64}},
        steps=2,
        phase_alternate_steps=1,  # the old name, phase_steps, reads the same
    )
    assert config.phase_steps == 1
    run = RunDir.resolve(out=None, run_dir=tmp_path / "run", kind="train", slug="mas")
    # a checkpoint of the thinker's own (an earlier run trained it): frozen, it is not served
    _publish(run.path / "policies" / "thinker" / "checkpoints" / "step_1")
    launched: list[tuple[str, int, dict]] = []
    served: list[tuple[str, GenerationConfig]] = []

    def run_verl(phase_config: WorkflowTrainConfig, sub_run: RunDir, *, dry_run: bool) -> None:
        launched.append((sub_run.path.name, phase_config.steps, phase_config.frozen_partners))
        _publish(sub_run.path / "checkpoints" / f"step_{phase_config.steps}")

    @contextmanager
    def serve(*, model: str, gen: GenerationConfig, **_: object):
        served.append((model, gen))
        yield EndpointConfig(base_url="http://127.0.0.1:1/v1", model=model)

    ran = train_phases(
        config, run, dry_run=False, run_verl=run_verl, serve=serve, log=lambda _: None
    )
    assert [(phase.policy, phase.target) for phase in ran] == [("coder", 2)]
    assert [(name, steps) for name, steps, _ in launched] == [("coder", 2)]
    assert set(launched[0][2]) == {"reasoner"}
    # served from policy_models, at the reasoner's own sampling settings
    assert served == [
        ("thinker-start", GenerationConfig(temperature=0.2, top_p=config.top_p, max_tokens=64))
    ]
    assert not (run.path / "policies" / "thinker" / "checkpoints" / "step_2").exists()


def test_a_schedule_that_would_restart_in_every_phase_is_refused(tmp_path: Path) -> None:
    config = WorkflowTrainConfig(
        model="start", policies={"tool": "coder", "reasoner": "thinker"}, steps=4, phase_steps=2
    )
    run = RunDir.resolve(out=None, run_dir=tmp_path / "run", kind="train", slug="mas")
    launched: list[str] = []
    with pytest.raises(MarsError, match="policy coder trains in 2 verl phases, and a cosine"):
        train_phases(
            config,
            run,
            dry_run=True,
            run_verl=lambda *_, **__: launched.append("launch"),
            serve=lambda **_: None,
            log=lambda _: None,
        )
    assert launched == []
    # one phase per policy: nothing restarts, any schedule goes
    whole = config.model_copy(update={"phase_alternate_steps": 0})
    ran = train_phases(
        whole, run, dry_run=True, run_verl=lambda *_, **__: None, serve=None, log=lambda _: None
    )
    assert [phase.policy for phase in ran] == ["coder"]  # a dry run shows the first phase
