"""Scheduler state that Tune does not save: PBT's scores and held checkpoints, ASHA's rungs."""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from pathlib import Path

from ray.train import Checkpoint
from ray.tune.schedulers.pbt import _PBTTrialState

from workbench.schedulers import SchedulerState, WorkbenchASHA, WorkbenchFIFO, WorkbenchPBT


@dataclass(frozen=True)
class FakeTrial:
    trial_id: str
    experiment_tag: str = ""


def _pbt() -> WorkbenchPBT:
    return WorkbenchPBT(
        time_attr="training_iteration",
        metric="score",
        mode="max",
        perturbation_interval=2,
        hyperparam_mutations={"lr": [1e-3, 1e-2]},
        require_attrs=False,
    )


def test_pbt_state_survives_a_new_driver_keyed_by_trial_id(tmp_path: Path) -> None:
    before = _pbt()
    for i, score in enumerate([3.0, 7.0]):
        trial = FakeTrial(f"t_{i:05d}", f"{i}_lr=0.001")
        state = _PBTTrialState(trial)  # type: ignore[arg-type]
        state.last_score = score
        state.last_checkpoint = Checkpoint(str(tmp_path / f"ckpt{i}"))
        state.last_perturbation_time = 4
        state.last_train_time = 5
        state.last_result = {"training_iteration": 5, "score": score}
        before._trial_state[trial] = state
    before._num_perturbations = 3
    # What Tune stores with each experiment snapshot (pickled), then a new process.
    saved = pickle.loads(pickle.dumps(SchedulerState(before).get_state()))

    after = _pbt()
    restored = [FakeTrial("t_00000"), FakeTrial("t_00001")]  # new Trial objects, same ids
    for trial in restored:
        after._trial_state[trial] = _PBTTrialState(trial)  # type: ignore[arg-type]
    SchedulerState(after).set_state(saved)
    scores = [after._trial_state[t].last_score for t in restored]
    assert scores == [3.0, 7.0]
    held = after._trial_state[restored[1]].last_checkpoint
    assert isinstance(held, Checkpoint) and held.path == str(tmp_path / "ckpt1")
    assert after._trial_state[restored[0]].last_perturbation_time == 4
    assert after._num_perturbations == 3


def test_a_trial_added_after_the_restore_gets_its_state_too() -> None:
    before = _pbt()
    trial = FakeTrial("t_00000")
    state = _PBTTrialState(trial)  # type: ignore[arg-type]
    state.last_score = 9.0
    before._trial_state[trial] = state
    saved = SchedulerState(before).get_state()
    assert saved is not None

    after = _pbt()
    SchedulerState(after).set_state(saved)  # before Tune re-adds the trials
    again = FakeTrial("t_00000")
    after._trial_state[again] = _PBTTrialState(again)  # type: ignore[arg-type]
    after._apply_trial_state(again)
    assert after._trial_state[again].last_score == 9.0


def test_asha_rungs_survive() -> None:
    before = WorkbenchASHA(
        time_attr="training_iteration", metric="score", mode="max", max_t=9, grace_period=1
    )
    bracket = before._brackets[0]
    bracket._rungs[-1] = (bracket._rungs[-1][0], {"t_00000": 1.0, "t_00001": 2.0})
    before._trial_info["t_00000"] = bracket
    saved = pickle.loads(pickle.dumps(SchedulerState(before).get_state()))
    after = WorkbenchASHA(
        time_attr="training_iteration", metric="score", mode="max", max_t=9, grace_period=1
    )
    SchedulerState(after).set_state(saved)
    assert after._brackets[0]._rungs[-1][1] == {"t_00000": 1.0, "t_00001": 2.0}
    assert after._trial_info["t_00000"] is after._brackets[0]


def test_state_of_another_scheduler_kind_is_ignored() -> None:
    fifo = WorkbenchFIFO()
    assert SchedulerState(fifo).get_state() is None
    pbt = _pbt()
    SchedulerState(pbt).set_state({"scheduler": "WorkbenchASHA", "asha": {}})
    assert pbt._restored is None
