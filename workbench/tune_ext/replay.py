"""The scheduler that replays a schedule: each trial's config set to the schedule's
values for its next iteration (see `workbench.analysis.schedule` for the export)."""

from __future__ import annotations

from typing import Any

from ray.tune.schedulers import FIFOScheduler, TrialScheduler

from workbench.experiment.schema import ReplaySection
from workbench.tune_ext.scheduler_state import TIME_ATTR, ResumableScheduler


class ReplayScheduler(ResumableScheduler, FIFOScheduler):
    """Sets each trial's config to the schedule's values for its next iteration.

    A new trial starts with the values of iteration 1 (of the iteration after its
    checkpoint, when Tune restores it). When the values for the next iteration differ,
    the trial takes the new config and pauses: Tune saves a checkpoint, stops the actor
    and restarts the trial from that checkpoint in a new actor with the new config, as
    after a PBT exploit onto its own weights. (Tune's own replay pauses without a
    registered checkpoint, and the trial's result.json then loses the rows since the
    last sync.) The values for an iteration are a function of the iteration: nothing to
    carry across a resume.
    """

    def __init__(self, steps: list[tuple[int, dict[str, Any]]]) -> None:
        """`steps`: (first iteration, values by Tune's param_space keys), increasing."""
        super().__init__()  # type: ignore[no-untyped-call]
        self.steps = steps
        self.changes = 0

    def values_at(self, iteration: int) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for first, step in self.steps:
            if first > iteration:
                break
            values.update(step)
        return values

    def on_trial_add(self, tune_controller: Any, trial: Any) -> None:
        super().on_trial_add(tune_controller, trial)
        restored = trial.latest_checkpoint_result
        done = int((restored.metrics or {}).get(TIME_ATTR, 0)) if restored is not None else 0
        trial.set_config({**trial.config, **self.values_at(done + 1)})

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> str:
        wanted = self.values_at(int(result.get(TIME_ATTR, 0)) + 1)
        if all(_same(trial.config.get(key), value) for key, value in wanted.items()):
            return TrialScheduler.CONTINUE
        trial.set_config({**trial.config, **wanted})
        self.changes += 1
        return TrialScheduler.PAUSE

    def debug_string(self) -> str:
        return f"Schedule replay: {len(self.steps)} steps, {self.changes} changes applied"


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:
        return False


def replay_scheduler(section: ReplaySection, keys: dict[str, str]) -> ReplayScheduler:
    """The scheduler of a replay ``section`` (its schedule's values by public name;
    ``keys``: public name -> Tune's key)."""
    return ReplayScheduler(
        [
            (step.iteration, {keys[name]: value for name, value in step.values.items()})
            for step in section.schedule
        ]
    )
