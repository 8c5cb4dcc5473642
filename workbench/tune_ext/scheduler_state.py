"""Scheduler state that survives a resume: Tune does not save its scheduler, so the
workbench's schedulers snapshot what they need into the experiment state through a
callback, and take it back after `Tuner.restore`."""

from __future__ import annotations

import json
from typing import Any

from ray.tune import Callback
from ray.tune.execution.experiment_state import _find_newest_experiment_checkpoint
from ray.tune.schedulers import (
    TrialScheduler,
)

from workbench.tune_ext import snapshot_pace

TIME_ATTR = "training_iteration"


def controller_of(tune_controller: Any) -> Any:
    """The controller itself. Tune hands schedulers a ``TrialRunnerWrapper`` that logs
    "You are trying to access <name> interface of TrialRunner in TrialScheduler, which is
    being restricted" at the first attribute outside its list; the workbench reads two
    on purpose (the checkpoint manager below, the cached decisions in
    ``pbt_pauses.drop_stop_cached_by_pause``), through the controller it wraps."""
    return getattr(tune_controller, "_tune_controller", tune_controller)


def _plain(value: Any) -> bool:
    return value is None or isinstance(value, bool | int | float | str)


class ResumableScheduler:
    """Mixin for every workbench scheduler: its state survives `workbench resume`.

    Tune saves the searcher's state and the callbacks' with each experiment snapshot,
    but not the scheduler's: a restored PBT forgets every trial's score and last
    checkpoint, ASHA its rungs. `SchedulerState` (a callback) carries this state in
    the snapshot instead, keyed by trial id, and hands it back on restore.

    It also makes Tune snapshot the experiment after a trial checkpoint (Tune does that
    only with num_to_keep, which the workbench cannot use: see
    workbench.tune_ext.checkpoints), within `snapshot_pace.LAG_S` of it, so that a resume
    starts a trial from its last checkpoint but one made in the last moments before the
    driver stopped.

    And it keeps the hyperparameters PBT, PB2 and replay gave a trial: Tune's restore
    re-adds each trial with the config it was created with (``add_trial`` resolves the
    config's placeholders from the trial's original, unresolved copy, which
    ``Trial.set_config`` never updates), so without this a resumed trial would go on
    from its checkpoint with its pre-exploit values. On restore each trial's plain
    top-level values go back over the reset, read from the same experiment-state
    snapshot as the checkpoint Tune restores (the callback state keeps a copy for
    trials without storage).
    """

    _restored: dict[str, Any] | None = None
    # Trial ids that `workbench resume --restart-errored` starts again from scratch.
    restart_from_scratch: frozenset[str] | set[str] = frozenset()

    def on_trial_add(self, tune_controller: Any, trial: Any) -> None:
        if trial.trial_id in self.restart_from_scratch:
            # Resumed without a checkpoint to restore: Tune starts it afresh.
            trial.run_metadata.checkpoint_manager._latest_checkpoint_result = None
            trial._restore_checkpoint_result = None
        super().on_trial_add(tune_controller, trial)  # type: ignore[misc]
        self.__dict__.setdefault("_added", {})[trial.trial_id] = trial
        manager = getattr(controller_of(tune_controller), "_checkpoint_manager", None)
        if manager is not None:
            if not getattr(manager, "_sync_every_n_trial_checkpoints", 1):
                manager._sync_every_n_trial_checkpoints = 1
            snapshot_pace.pace(manager, snapshot_pace.LAG_S)
        if self._restored is not None:
            self._restore_config(trial)
            self._apply_trial_state(trial)

    def workbench_state(self) -> dict[str, Any]:
        trials: dict[str, Any] = self.__dict__.get("_added", {})
        configs = {
            trial_id: {k: v for k, v in trial.config.items() if _plain(v)}
            for trial_id, trial in trials.items()
        }
        return {"configs": configs} if configs else {}

    def _restore_config(self, trial: Any) -> None:
        """The trial's values as the snapshot Tune resumes it from holds them, beside the
        checkpoint it restores: Tune's trial JSON keeps ``trial.config`` as it was when
        that snapshot was written. The callback state's copy is only a fallback (a trial
        without storage): it is another file of the results folder, which a driver killed
        during a state sync can leave one save older or newer than the experiment state,
        so a resumed trial went on from one checkpoint with the values of another save
        (seen in the killed-driver drill: the resumed lr was not the snapshot's)."""
        if "_snapshot_configs" not in self.__dict__:
            self.__dict__["_snapshot_configs"] = snapshot_configs(trial)
        saved = self.__dict__["_snapshot_configs"].get(trial.trial_id)
        if saved is None:
            saved = (self._restored or {}).get("configs", {}).get(trial.trial_id)
        if saved:
            trial.config.update(saved)

    def restore_workbench_state(self, state: dict[str, Any]) -> None:
        self._restored = state

    def _apply_trial_state(self, trial: Any) -> None:
        pass


def snapshot_configs(trial: Any) -> dict[str, dict[str, Any]]:
    """Trial id -> the trial's plain top-level config values in the experiment-state
    snapshot Tune resumes from (the newest in ``trial``'s experiment folder, chosen as
    Tune's ``TuneController.resume`` chooses it); {} when there is none to read."""
    storage = getattr(trial, "storage", None)
    if storage is None:
        return {}
    try:
        newest = _find_newest_experiment_checkpoint(
            storage.experiment_fs_path, fs=storage.storage_filesystem
        )
        if newest is None:
            return {}
        with storage.storage_filesystem.open_input_stream(newest) as f:
            data = json.loads(f.readall())
        out: dict[str, dict[str, Any]] = {}
        for trial_json, _runtime in data["trial_data"]:
            saved = json.loads(trial_json)
            config = saved.get("config") or {}
            out[str(saved["trial_id"])] = {k: v for k, v in config.items() if _plain(v)}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return {}  # Tune read it a moment ago; the callback state's copy stands in
    return out


class SchedulerState(Callback):  # type: ignore[misc]
    """Carries the scheduler's state in Tune's experiment snapshots (see
    ResumableScheduler)."""

    def __init__(self, scheduler: TrialScheduler) -> None:
        self.scheduler = scheduler

    def get_state(self) -> dict[str, Any] | None:
        state: dict[str, Any] = getattr(self.scheduler, "workbench_state", dict)()
        return {"scheduler": type(self.scheduler).__name__, **state} if state else None

    def set_state(self, state: dict[str, Any]) -> None:
        if state.get("scheduler") == type(self.scheduler).__name__:
            restore = getattr(self.scheduler, "restore_workbench_state", None)
            if restore is not None:
                restore(state)
