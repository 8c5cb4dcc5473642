"""How the workbench's PBT and PB2 pause and restart trials through Tune's controller:
an exploited trial is paused, never stopped, and keeps its process; no fair-share pause
when every trial runs at once.

Mixed into the schedulers of ``workbench.tune_ext.pbt``.
"""

from __future__ import annotations

from typing import Any

from ray.tune.experiment import Trial
from ray.tune.schedulers import TrialScheduler

from workbench.tune_ext.scheduler_state import controller_of


class NoStopAfterSave:
    """Mixin for PBT and PB2: an exploited trial is paused, never ended, and its next
    snapshot names the donor's checkpoint.

    PBT pauses the trial it exploits without a checkpoint (``pause_trial(...,
    should_checkpoint=False)``). When that trial is still saving its own periodic
    checkpoint, Tune's ``_schedule_trial_stop`` caches a STOP decision to run once the
    save resolves (Ray 2.60, TuneController): the trial then ends TERMINATED far from
    its stop rule, with its new values, and synchronous PBT waits for it forever (seen
    in CI: three trials PAUSED at the sync point, one TERMINATED at iteration 3). Slower
    saves (checkpoint manifests, a loaded machine) make the race likelier. The cached
    STOP is dropped: the trial stays PAUSED, to restart from the donor's checkpoint.
    """

    def _exploit(self, tune_controller: Any, trial: Any, trial_to_clone: Any) -> None:
        super()._exploit(tune_controller, trial, trial_to_clone)  # type: ignore[misc]
        drop_stop_cached_by_pause(tune_controller, trial)
        # PBT hands the trial the donor's checkpoint by setting an attribute of its
        # checkpoint manager, which leaves the trial's cached snapshot JSON as it was: a
        # trial exploited at a synchronous sync point (not the one reporting, whose new
        # result clears the cache) would be snapshotted with its new values and its own
        # old checkpoint, and a resume would pair them.
        invalidate = getattr(getattr(trial, "run_metadata", None), "invalidate_cache", None)
        if invalidate is not None:
            invalidate()


def drop_stop_cached_by_pause(tune_controller: Any, trial: Any) -> bool:
    """Drops a STOP that pausing ``trial`` cached while it was saving; True if one was."""
    decisions = getattr(controller_of(tune_controller), "_cached_trial_decisions", None)
    if (
        isinstance(decisions, dict)
        and decisions.get(trial.trial_id) == TrialScheduler.STOP
        and trial.status == Trial.PAUSED
    ):
        del decisions[trial.trial_id]
        return True
    return False


class KeepExploitedActor:
    """Mixin for PBT and PB2: an exploited trial restarts in its own process.

    PBT pauses the trial it exploits and Tune restarts it from the donor's checkpoint.
    Tune keeps a paused trial's actor for reuse only while trials are staged or the
    search may still create some (TuneController._maybe_cache_trial_actor, Ray 2.60):
    once every trial of the population exists, the actor is killed and the restart
    builds a new process, the algorithm and its env runners (4-9 s on 2 CPUs, dozens of
    the lean learner's iterations). The trial is staged here, before PBT pauses it, as
    Tune stages the trial it chooses to run next, so its actor is cached; and it is the
    first trial this scheduler chooses to run, so Tune's next scheduling step hands that
    actor back to it (through ``reset_config``) before any other trial could take it.
    If Tune did not cache the actor after all (it had not started, or failed), the
    staging is undone and the trial is started afresh, as before.
    """

    def _exploit(self, tune_controller: Any, trial: Any, trial_to_clone: Any) -> None:
        controller = controller_of(tune_controller)
        staged = stage_for_reuse(controller, trial)
        cached = controller._actor_cache.num_cached_objects if staged else 0
        super()._exploit(tune_controller, trial, trial_to_clone)  # type: ignore[misc]
        if not staged:
            return
        if controller._actor_cache.num_cached_objects > cached:
            self.__dict__.setdefault("_reuse_first", []).append(trial)
        else:
            unstage(controller, trial)

    def choose_trial_to_run(self, tune_controller: Any) -> Any:
        waiting: list[Any] = self.__dict__.get("_reuse_first", [])
        controller = controller_of(tune_controller)
        while waiting:
            trial = waiting[0]
            if trial.status == Trial.PAUSED and trial not in controller._trial_to_actor:
                return trial  # staged: Tune reuses the cached actor for it
            waiting.pop(0)  # restarted (or stopped) since
        return super().choose_trial_to_run(tune_controller)  # type: ignore[misc]


def stage_for_reuse(controller: Any, trial: Any) -> bool:
    """Stages a running ``trial`` Tune is about to pause, so that its actor is cached
    (True if staged here)."""
    staged = getattr(controller, "_staged_trials", None)
    cache = getattr(controller, "_actor_cache", None)
    if (
        not getattr(controller, "_reuse_actors", False)
        or not isinstance(staged, set)
        or cache is None
        or trial.status != Trial.RUNNING
        or trial in staged
        or trial not in getattr(controller, "_trial_to_actor", {})
    ):
        return False
    staged.add(trial)
    cache.increase_max(trial.placement_group_factory)
    return True


def unstage(controller: Any, trial: Any) -> None:
    """Undoes ``stage_for_reuse``."""
    controller._staged_trials.discard(trial)
    controller._actor_cache.decrease_max(trial.placement_group_factory)


class NoIdlePause:
    """Mixin for PBT and PB2: no fair-share pause when every trial runs at once.

    Asynchronous PBT pauses a trial at each perturbation point whenever another trial is
    PAUSED or PENDING, so that a population larger than the cluster gets a fair share of
    it (Tune, PopulationBasedTraining.on_trial_result). A trial PBT has just exploited is
    PAUSED until it restarts from its donor, so in a population that fits the cluster
    the donor was paused at nearly every decision too: its checkpoint restored, its
    episodes in flight thrown away. With 64 steps per env between restarts CartPole's
    episodes longer than about 128 steps never ended, no score moved past 100 and a
    population of 2 trained for 10 minutes without reaching its target of 120. When
    ``all_run_at_once`` (the plan: the population fits the cluster), the pause is a
    CONTINUE; synchronous PBT's pauses at its sync point stay.
    """

    all_run_at_once: bool = False
    _synch: bool

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> str:
        decision: str = super().on_trial_result(  # type: ignore[misc]
            tune_controller, trial, result
        )
        if (
            decision == TrialScheduler.PAUSE
            and self.all_run_at_once
            and not self._synch
            and trial.status == Trial.RUNNING
        ):
            return str(TrialScheduler.CONTINUE)
        return decision
