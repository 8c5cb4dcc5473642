"""Scheduler state that Tune does not save: PBT's scores and held checkpoints, ASHA's rungs."""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from ray.train import Checkpoint
from ray.tune.schedulers.pbt import _PBTTrialState

from workbench.tune_ext.pbt import WorkbenchASHA, WorkbenchFIFO, WorkbenchPBT
from workbench.tune_ext.scheduler_state import SchedulerState


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


class _Controller:
    search_alg = None
    _checkpoint_manager = None


def test_a_restored_trial_keeps_the_values_pbt_gave_it() -> None:
    from ray.tune.experiment import Trial
    from ray.tune.impl.placeholder import create_resolvers_map, inject_placeholders

    # A config with an object in it (RLlib's configs hold classes): Tune swaps such
    # values for placeholders and keeps the trial's original copy to resolve them.
    resolvers = create_resolvers_map()
    config = inject_placeholders({"lr": 1e-3, "seed": 7, "runner": FakeTrial}, resolvers)
    from ray.tune.execution.placement_groups import PlacementGroupFactory

    trial = Trial(
        "trainable",
        config=config,
        trial_id="t_00000",
        stub=True,
        placement_group_factory=PlacementGroupFactory([{"CPU": 1}]),
    )
    trial.resolve_config_placeholders(resolvers)
    trial.create_placement_group_factory()  # as Tune's add_trial does
    before = _pbt()
    before.on_trial_add(_Controller(), trial)
    trial.set_config({**trial.config, "lr": 5e-4})  # an exploit, as PBT makes it
    saved = pickle.loads(pickle.dumps(SchedulerState(before).get_state()))
    snapshot = trial.get_json_state()[0]

    # Tune's restore: the trial from the snapshot, its placeholders resolved again.
    plain = Trial.from_json_state(snapshot, stub=True)
    assert plain.config["lr"] == 5e-4
    plain.resolve_config_placeholders(resolvers)
    assert plain.config["lr"] == 1e-3  # the fall: back to the value it was created with

    restored = Trial.from_json_state(snapshot, stub=True)
    restored.resolve_config_placeholders(resolvers)
    after = _pbt()
    SchedulerState(after).set_state(saved)
    after.on_trial_add(_Controller(), restored)
    assert restored.config["lr"] == 5e-4  # the fix
    assert restored.config["runner"] is FakeTrial and restored.config["seed"] == 7


def test_fifo_and_asha_carry_the_configs_too() -> None:
    for scheduler in (
        WorkbenchFIFO(),
        WorkbenchASHA(time_attr="training_iteration", metric="score", mode="max", max_t=9),
    ):
        trial = _ConfigTrial("t_00003", {"lr": 0.1, "model": {"x": 1}})
        scheduler.on_trial_add(_Controller(), trial)
        state = SchedulerState(scheduler).get_state()
        assert state is not None
        assert state["configs"] == {"t_00003": {"lr": 0.1}}


@dataclass
class _ConfigTrial:
    trial_id: str
    config: dict[str, object]


def test_a_nan_return_is_no_score_for_pbt() -> None:
    # RLlib reports NaN for an iteration in which no episode ended (long episodes:
    # often the best trial). Tune's PBT would store it as the trial's score.
    from ray.tune.execution.placement_groups import PlacementGroupFactory
    from ray.tune.experiment import Trial

    pbt = _pbt()
    trials = [
        Trial(
            "trainable",
            config={"lr": 1e-3},
            trial_id=f"t_{i:05d}",
            stub=True,
            placement_group_factory=PlacementGroupFactory([{"CPU": 1}]),
        )
        for i in range(2)
    ]
    controller = _Controller()
    controller.get_trials = lambda: trials  # type: ignore[attr-defined]
    for trial in trials:
        pbt.on_trial_add(controller, trial)
    # At its perturbation times (every 2 iterations) PBT records the trial's score.
    pbt.on_trial_result(controller, trials[0], {"training_iteration": 2, "score": 40.0})
    assert pbt._trial_state[trials[0]].last_score == 40.0
    decision = pbt.on_trial_result(
        controller, trials[0], {"training_iteration": 4, "score": float("nan")}
    )
    assert decision == "CONTINUE"
    assert pbt._trial_state[trials[0]].last_score == 40.0
    assert pbt._trial_state[trials[0]].last_perturbation_time == 2  # decided next time


def test_an_exploited_trial_that_was_saving_is_paused_not_stopped() -> None:
    # Tune caches STOP when PBT pauses (without a checkpoint) a trial that is saving; the
    # trial would end TERMINATED once the save resolves, and synchronous PBT wait for it.
    from types import SimpleNamespace

    from ray.tune.experiment import Trial
    from ray.tune.schedulers import TrialScheduler

    from workbench.tune_ext.pbt_pauses import drop_stop_cached_by_pause

    trial = SimpleNamespace(trial_id="t1", status=Trial.PAUSED)
    controller = SimpleNamespace(_cached_trial_decisions={"t1": TrialScheduler.STOP, "t2": "x"})
    assert drop_stop_cached_by_pause(controller, trial)
    assert controller._cached_trial_decisions == {"t2": "x"}
    # Anything else stays: another decision, or a trial that is not paused.
    controller._cached_trial_decisions["t1"] = TrialScheduler.PAUSE
    assert not drop_stop_cached_by_pause(controller, trial)
    running = SimpleNamespace(trial_id="t2", status=Trial.RUNNING)
    controller._cached_trial_decisions["t2"] = TrialScheduler.STOP
    assert not drop_stop_cached_by_pause(controller, running)
    assert controller._cached_trial_decisions == {"t1": TrialScheduler.PAUSE, "t2": "STOP"}


def _stored_trial(tmp_path: Path, config: dict[str, object]) -> object:
    """A real Tune trial with its experiment folder under ``tmp_path``, as Tune adds it."""
    from ray.train._internal.storage import StorageContext
    from ray.tune.execution.placement_groups import PlacementGroupFactory
    from ray.tune.experiment import Trial

    storage = StorageContext(str(tmp_path), "pop", trial_dir_name="trainable_t_00000")
    trial = Trial(
        "trainable",
        config=config,
        trial_id="t_00000",
        stub=True,
        storage=storage,
        placement_group_factory=PlacementGroupFactory([{"CPU": 1}]),
    )
    trial.create_placement_group_factory()
    return trial


def _write_snapshot(tmp_path: Path, trial: object, session: str) -> None:
    import json

    folder = tmp_path / "pop"
    folder.mkdir(exist_ok=True)
    state = {"trial_data": [list(trial.get_json_state())]}  # type: ignore[attr-defined]
    (folder / f"experiment_state-{session}.json").write_text(json.dumps(state))


def test_a_restored_trial_takes_its_values_from_the_snapshot_it_restores_from(
    tmp_path: Path,
) -> None:
    # The results folder's callback state is another file than its experiment state; a
    # driver killed during a state sync can leave it from an earlier save. The values
    # must be the ones written beside the checkpoint Tune restores (the experiment state).
    from ray.tune.experiment import Trial

    trial = _stored_trial(tmp_path, {"lr": 1e-3, "seed": 7})
    before = _pbt()
    before.on_trial_add(_Controller(), trial)
    older = pickle.loads(pickle.dumps(SchedulerState(before).get_state()))  # lr 1e-3
    trial.set_config({**trial.config, "lr": 5e-4})  # an exploit, then the next snapshot
    _write_snapshot(tmp_path, trial, "2026-12-01_10-00-00")

    restored = Trial.from_json_state(trial.get_json_state()[0], stub=True)
    restored.set_storage(trial.storage)
    restored.config = {"lr": 1e-3, "seed": 7}  # Tune's add_trial: back to the original
    after = _pbt()
    SchedulerState(after).set_state(older)
    after.on_trial_add(_Controller(), restored)
    assert restored.config == {"lr": 5e-4, "seed": 7}


def test_without_a_snapshot_the_callback_states_values_stand(tmp_path: Path) -> None:
    trial = _stored_trial(tmp_path, {"lr": 1e-3})
    before = _pbt()
    before.on_trial_add(_Controller(), trial)
    trial.set_config({"lr": 5e-4})
    saved = SchedulerState(before).get_state()
    assert saved is not None
    trial.config = {"lr": 1e-3}
    after = _pbt()
    SchedulerState(after).set_state(saved)
    after.on_trial_add(_Controller(), trial)  # no experiment state in its folder
    assert trial.config == {"lr": 5e-4}


def test_an_exploited_trials_next_snapshot_names_the_donors_checkpoint(tmp_path: Path) -> None:
    import json

    from ray.train._internal.session import _TrainingResult

    from workbench.tune_ext.pbt_pauses import NoStopAfterSave

    target = _stored_trial(tmp_path, {"lr": 1e-3})
    own = Checkpoint(str(tmp_path / "own"))
    target.run_metadata.checkpoint_manager.register_checkpoint(  # type: ignore[attr-defined]
        _TrainingResult(checkpoint=own, metrics={"training_iteration": 4})
    )
    donors = Checkpoint(str(tmp_path / "donor"))

    class TunesPBT:
        """Ray 2.60's PopulationBasedTraining._exploit, the lines that move the trial."""

        def _exploit(self, tune_controller: object, trial: object, trial_to_clone: object) -> None:
            trial.set_config({"lr": 5e-4})  # type: ignore[attr-defined]
            trial.run_metadata.checkpoint_manager._latest_checkpoint_result = (  # type: ignore[attr-defined]
                _TrainingResult(checkpoint=donors, metrics={"training_iteration": 6})
            )

    def snapshot_checkpoint() -> str:
        runtime = json.loads(target.get_json_state()[1])  # type: ignore[attr-defined]
        manager = cloudpickle.loads(bytes.fromhex(runtime["checkpoint_manager"]["value"]))
        return str(manager._latest_checkpoint_result.checkpoint.path)

    import ray.cloudpickle as cloudpickle

    assert snapshot_checkpoint() == own.path  # a snapshot before the exploit caches it
    TunesPBT()._exploit(None, target, None)
    assert snapshot_checkpoint() == own.path  # the fall: the new values, the old checkpoint

    class Fixed(NoStopAfterSave, TunesPBT):
        pass

    Fixed()._exploit(SimpleNamespace(), target, None)
    assert snapshot_checkpoint() == donors.path
