"""The state of the workbench's PBT and PB2 that survives a resume: scores, the
checkpoints held for exploits and the perturbation times, by trial id (``ResumablePBT``).

Mixed into the schedulers of ``workbench.tune_ext.pbt``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ray.train import Checkpoint

from workbench.tune_ext.scheduler_state import ResumableScheduler

_PBT_TRIAL_FIELDS = (
    "last_score",
    "last_checkpoint",
    "last_perturbation_time",
    "last_train_time",
    "last_result",
    "workbench_start",  # FreshExploits: the iteration of the trial's last restart
)


class ResumablePBT(ResumableScheduler):
    """PBT/PB2 state by trial id: scores, the checkpoints held for exploits, the times of
    the last perturbation, and PB2's data for its Gaussian process."""

    _trial_state: dict[Any, Any]
    _GLOBAL_FIELDS: tuple[str, ...] = (
        "_num_checkpoints",
        "_num_perturbations",
        "_next_perturbation_sync",
        "_ranked",  # exploit_test's figures: each trial's last ranked mean, std and count
        "_ranked_before",  # spare_improving: each trial's figures at its last decision
    )

    def workbench_state(self) -> dict[str, Any]:

        trials = {}
        for trial, state in self._trial_state.items():
            fields = {f: getattr(state, f, None) for f in _PBT_TRIAL_FIELDS}
            if not isinstance(fields["last_checkpoint"], Checkpoint):
                fields["last_checkpoint"] = None  # a save still in flight
            trials[trial.trial_id] = fields
        out: dict[str, Any] = {
            **super().workbench_state(),
            "trials": trials,
            "global": {f: getattr(self, f) for f in self._GLOBAL_FIELDS if hasattr(self, f)},
        }
        return out

    def restore_workbench_state(self, state: dict[str, Any]) -> None:
        super().restore_workbench_state(state)
        for name, value in state.get("global", {}).items():
            setattr(self, name, value)
        for trial in list(self._trial_state):
            self._apply_trial_state(trial)

    def _apply_trial_state(self, trial: Any) -> None:
        saved = (self._restored or {}).get("trials", {}).get(trial.trial_id)
        state: Any = self._trial_state.get(trial)
        if saved is None or state is None:
            return
        for name, value in saved.items():
            if name == "last_checkpoint":
                value = _where_it_lies(value, trial)
            setattr(state, name, value)


def _where_it_lies(checkpoint: Any, trial: Any) -> Any:
    """A checkpoint from the snapshot of a folder since copied or moved: the same
    checkpoint of the trial's folder where it lies now (Tune does this for the
    checkpoints it tracks, not for those PBT holds)."""
    here = getattr(trial, "path", None)
    if not isinstance(checkpoint, Checkpoint) or not isinstance(here, str):
        return checkpoint
    saved = Path(checkpoint.path)
    if saved.parent.name != Path(here).name or saved.parent == Path(here):
        return checkpoint
    return Checkpoint(path=str(Path(here) / saved.name), filesystem=checkpoint.filesystem)
