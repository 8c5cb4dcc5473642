"""The workbench's PBT, ASHA and FIFO (PB2's in ``pb2_scheduler``): Tune's schedulers with
the fixes of docs/ray-fixes.md ("Population-based training", "Resume") as mixins over their private
methods and state (``_exploit``, ``_checkpoint_or_exploit``, ``_trial_state``, ...).
The lineage recorder and the exploit rules are here; the state kept for a resume is in
``pbt_state``, the fixes to how trials are paused and restarted in ``pbt_pauses``.

Built from an experiment by ``workbench.run.schedulers.scheduler``; ``configure`` takes
what the experiment adds to Tune's own arguments.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ray.tune.experiment import Trial
from ray.tune.schedulers import (
    ASHAScheduler,
    FIFOScheduler,
    PopulationBasedTraining,
    TrialScheduler,
)
from ray.tune.utils import flatten_dict

from workbench.experiment.search_space import ParamSpec, explore
from workbench.lineage_record import ExploitDecision
from workbench.names import (
    SCORE_EPISODES_METRIC,
    SCORE_METRIC,
    SCORE_STD_METRIC,
    trial_name,
)
from workbench.trial.candidates import (
    CANDIDATE_EPISODES_METRIC,
    CANDIDATE_RETURN_METRIC,
    CANDIDATE_STD_METRIC,
)
from workbench.trial.manifest import checkpoint_progress, local_checkpoint_folder
from workbench.tune_ext.pbt_pauses import KeepExploitedActor, NoIdlePause, NoStopAfterSave
from workbench.tune_ext.pbt_state import ResumablePBT
from workbench.tune_ext.scheduler_state import TIME_ATTR, ResumableScheduler, controller_of

logger = logging.getLogger(__name__)

# Told of every exploit as PBT decides it (ExploitRecorder._log_config_on_step).
LineageListener = Callable[[ExploitDecision], None]


class ExploitRecorder:
    """Mixin for PBT and PB2: tells listeners about every exploit as it happens.

    Tune writes exploits only to text files (pbt_global.txt) that nothing reads back;
    the MLflow tracker needs them live, with the hyperparameters before and after.
    """

    _hyperparam_keys: tuple[str, ...] = ()
    _deciding: tuple[str, int] | None = None

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> str:
        # An iteration in which no episode ended reports a NaN return (RLlib 2.60's
        # episode_return_mean is the mean of the episodes finished in that iteration).
        # Tune's PBT would rank the NaN as a score, and a NaN sorts anywhere: a
        # trial whose episodes got long could be cloned over or picked as a donor by
        # chance. A NaN is no score: the result goes by as if it had none (what Tune's
        # PBT does with a missing metric, minus its warning that prints the result).
        metric = getattr(self, "_metric", None)
        value = result.get(metric) if metric else None
        if isinstance(value, float) and math.isnan(value):
            return str(TrialScheduler.CONTINUE)
        # Nor is a result without it (rank_on: evaluation: an iteration without a short
        # evaluation): Tune's PBT would log the whole result each time, then continue.
        # (Tune hands schedulers flattened results, as the NaN check above reads them.)
        if metric and value is None:
            return str(TrialScheduler.CONTINUE)
        if metric:
            found = ranked_stats(result, metric)
            if found is not None:
                self.__dict__.setdefault("_ranked", {})[trial.trial_id] = found
                # A member's first figure is what its first decision sees it improve on.
                self.__dict__.setdefault("_ranked_before", {}).setdefault(trial.trial_id, found)
        # Which result an exploit is decided on: Tune's own log gives the iteration
        # before it (the trial's last_result is updated only after the decision).
        self._deciding = (trial.trial_id, int(result.get(TIME_ATTR, 0)))
        try:
            decision: str = super().on_trial_result(  # type: ignore[misc]
                tune_controller, trial, result
            )
            return decision
        finally:
            self._deciding = None

    def add_lineage_listener(self, listener: LineageListener) -> None:
        listeners: list[LineageListener] = self.__dict__.setdefault("_lineage_listeners", [])
        listeners.append(listener)

    def _log_config_on_step(
        self,
        trial_state: Any,
        new_state: Any,
        trial: Any,
        trial_to_clone: Any,
        new_config: dict[str, Any],
    ) -> None:
        super()._log_config_on_step(  # type: ignore[misc]
            trial_state, new_state, trial, trial_to_clone, new_config
        )
        keys = self._hyperparam_keys

        def pick(config: dict[str, Any]) -> dict[str, Any]:
            return {k: config.get(k) for k in keys}

        own = self._deciding is not None and self._deciding[0] == trial.trial_id
        decision = ExploitDecision(
            time=time.time(),
            # The iteration whose result the exploit was decided on, and whether that
            # was the target's own result (asynchronous PBT) or another trial's
            # (synchronous PBT decides for paused trials at the last one's result).
            exploit_iteration=self._deciding[1]
            if own and self._deciding is not None
            else int(trial.last_result.get(TIME_ATTR, 0)),
            decided_on_own_result=own,
            target=trial.trial_id,
            source=trial_to_clone.trial_id,
            # Named here, where both trials are at hand: a resumed driver's tracker has
            # not seen a donor that finished before the kill start again.
            target_name=trial_name(trial),
            source_name=trial_name(trial_to_clone),
            # The same iterations as Tune's pbt_global.txt.
            target_iteration=int(trial.last_result.get(TIME_ATTR, 0)),
            source_iteration=int(trial_to_clone.last_result.get(TIME_ATTR, 0)),
            # The iteration of the donor checkpoint the target restarts from (the
            # tracker's restored_iteration is what the target showed next).
            checkpoint_iteration=handed_iteration(new_state, trial_to_clone),
            # The iteration of the donor's result its score is from.
            source_score_iteration=int(new_state.last_train_time),
            old=pick(trial.config),
            donor=pick(trial_to_clone.config),
            new=pick(new_config),
        )
        for listener in self.__dict__.get("_lineage_listeners", []):
            listener(decision)


def handed_iteration(state: Any, donor: Any) -> int:
    """The iteration of the donor checkpoint PBT hands over (``state.last_checkpoint``):
    the one its trainable saved it at (its manifest, where this machine can read it), the
    counter the clone restarts from (the trainable's ``restore``); else its own result's,
    from the donor's checkpoint manager, since a paused donor hands over its newest
    checkpoint, which can be an iteration past the result PBT ranked it on; else that
    result's."""
    checkpoint = getattr(state, "last_checkpoint", None)
    folder = local_checkpoint_folder(checkpoint)
    saved_at = (checkpoint_progress(folder) or {}).get(TIME_ATTR) if folder else None
    if isinstance(saved_at, int):
        return saved_at
    path = getattr(checkpoint, "path", None)
    manager = getattr(getattr(donor, "run_metadata", None), "checkpoint_manager", None)
    if path is not None:
        for saved in reversed(getattr(manager, "_checkpoint_results", None) or []):
            if getattr(saved.checkpoint, "path", None) == path:
                iteration = (saved.metrics or {}).get(TIME_ATTR)
                if iteration is not None:
                    return int(iteration)
    return int((state.last_result or {}).get(TIME_ATTR, 0))


def _change(before: Stats | None, now: Stats | None) -> str:
    if before is None or now is None:
        return "unknown"
    return f"{before.mean:.1f} -> {now.mean:.1f}"


def donor_allowed(*, now: int, start: int, checkpoint_at: int, interval: int) -> bool:
    """Whether a trial which last restarted from a checkpoint of iteration ``start`` (0:
    never) may restart from the checkpoint of iteration ``checkpoint_at`` of a donor
    whose last decision, the one its score is from, was at iteration ``now`` (the
    donor's own clock: trials that run at once are not in step, a late starter is
    iterations behind).

    The checkpoint must be no older than the donor's score: a checkpoint from before it
    holds weights that have not learnt from the episodes the score counts. On
    MountainCar, with 999-step episodes ending about every 8 iterations, a checkpoint one
    interval older than the score was from before the first episode that reached the
    flag, so every exploit copied a member that had not found it, with an empty score
    window. And it must lie at least a full interval beyond the trial's own new start:
    the trial is never rolled back into, or before, the interval it has just trained
    from its last exploit. Without that rule an async population of 2 thrashed: the
    weaker trial restarted from the donor's checkpoint, trained its interval, ranked
    below the donor's score of that same checkpoint, and restarted from it again, 16
    times in a row, while the donor (paused, and tied with it on Tune's fair-share
    clock) never ran.
    """
    return checkpoint_at >= now and checkpoint_at >= start + interval


# Defined here, beside the schedulers: they hold its instances (``_ranked``), and Tune
# pickles a scheduler into its experiment state, each class by its module's path.
@dataclass(frozen=True)
class Stats:
    """A ranked figure and what it is the mean of: a short evaluation's episodes, or the
    score window's (``std`` as numpy's, ddof 0)."""

    mean: float
    std: float
    n: int


# The mean a scheduler ranks on, and its std and count, by the metric it ranks.
_STATS_OF = {
    SCORE_METRIC: (SCORE_STD_METRIC, SCORE_EPISODES_METRIC),
    CANDIDATE_RETURN_METRIC: (CANDIDATE_STD_METRIC, CANDIDATE_EPISODES_METRIC),
}


def ranked_stats(result: dict[str, Any], metric: str) -> Stats | None:
    """The mean ``metric`` of a result with its std and count (None: not in it)."""
    flat = flatten_dict(result) if any(isinstance(v, dict) for v in result.values()) else result
    mean = flat.get(metric)
    if not isinstance(mean, int | float) or not math.isfinite(mean):
        return None
    std_key, n_key = _STATS_OF.get(metric, ("", ""))
    std, n = flat.get(std_key, math.nan), flat.get(n_key, 0)
    return Stats(
        float(mean),
        float(std) if isinstance(std, int | float) else math.nan,
        int(n) if isinstance(n, int | float) and math.isfinite(n) else 0,
    )


def clearly_better(
    donor: Stats | None, target: Stats | None, alpha: float, min_gain: float = 0.0
) -> bool:
    """Whether the donor's mean is above the target's by more than ``min_gain`` by
    Welch's one-sided t-test at ``alpha`` (the PBT paper's t-test selection, with a
    margin: H0 is a gain of at most ``min_gain``). Without the figures to test (one
    episode, an unknown std) a mean higher by more than ``min_gain`` is enough, as in
    truncation selection."""
    if donor is None or target is None:
        return True
    if donor.mean - min_gain <= target.mean:
        return False
    if donor.n < 2 or target.n < 2 or not (math.isfinite(donor.std) and math.isfinite(target.std)):
        return True
    # numpy's std (ddof 0) to the sample std the test takes.
    sd = donor.std * math.sqrt(donor.n / (donor.n - 1))
    st = target.std * math.sqrt(target.n / (target.n - 1))
    if sd == 0 and st == 0:
        return True  # the same return every episode, each: the difference is exact
    from scipy.stats import ttest_ind_from_stats

    test = ttest_ind_from_stats(
        donor.mean - min_gain,
        sd,
        donor.n,
        target.mean,
        st,
        target.n,
        equal_var=False,
        alternative="greater",
    )
    return bool(test.pvalue < alpha)


class FreshExploits:
    """Mixin for PBT and PB2: exploits that never thrash.

    - A donor is chosen only among the upper quantile's trials that score strictly
      better and whose checkpoint (PBT's, else its newest periodic one, else one it is
      asked to save now if it runs) ``donor_allowed`` accepts: no older than the
      donor's score; with none, the trial trains on (Tune would pick one at random
      and, without a checkpoint, skip the exploit).
    - An exploited trial's new start is the donor checkpoint's iteration: its next
      decision is a full interval after it (Tune copies the donor's clock, which is
      the same for the checkpoints Tune holds; stated here, not assumed), and until
      then its score is the donor's at that checkpoint (the weights it now has), not its
      own from before the exploit.
    """

    _trial_state: dict[Any, Any]
    _perturbation_interval: float
    _time_attr: str
    # Welch's t-test at this level before a member is cloned over (None: no test).
    exploit_alpha: float | None = None
    # The smallest gain in the ranked metric worth a clone (scheduler.exploit_min_gain).
    exploit_min_gain: float = 0.0
    # Whether a member still improving is spared (scheduler.spare_improving).
    spare_improving: bool = False

    def _checkpoint_or_exploit(
        self,
        trial: Any,
        tune_controller: Any,
        upper_quantile: list[Any],
        lower_quantile: list[Any],
    ) -> None:
        ranked: dict[str, Stats] = self.__dict__.get("_ranked", {})
        before: dict[str, Stats] = self.__dict__.setdefault("_ranked_before", {})
        if trial in lower_quantile and self.spare_improving and self._improving(trial, ranked):
            logger.info(
                "[pbt] %s trains on at iteration %s: its evaluation is still improving "
                "(%s since its last decision)",
                trial,
                self._trial_state[trial].last_train_time,
                _change(before.get(trial.trial_id), ranked.get(trial.trial_id)),
            )
            lower_quantile = [t for t in lower_quantile if t is not trial]
        if trial in lower_quantile:
            state = self._trial_state[trial]
            start = int(getattr(state, "workbench_start", 0) or 0)
            interval = int(self._perturbation_interval)
            donors = []
            for donor in upper_quantile:
                donor_state = self._trial_state[donor]
                # A tie is no evidence: a trial whose score equals the donor's (its
                # copied window, no episode ended since) is not cloned over again.
                # Nor is a gain below the margin (exploit_min_gain).
                if not donor_state.last_score - self.exploit_min_gain > state.last_score:
                    continue
                # Nor is a difference within the evaluations' noise (exploit_test).
                if self.exploit_alpha is not None and not clearly_better(
                    ranked.get(donor.trial_id),
                    ranked.get(trial.trial_id),
                    self.exploit_alpha,
                    self.exploit_min_gain,
                ):
                    continue
                now = int(donor_state.last_train_time)
                checkpoint_at = self._donor_checkpoint_at(donor)
                if checkpoint_at is not None and donor_allowed(
                    now=now, start=start, checkpoint_at=checkpoint_at, interval=interval
                ):
                    donors.append((donor, False))
                elif donor_allowed(now=now, start=start, checkpoint_at=now, interval=interval):
                    # Its checkpoint predates its score; a save now would not.
                    donors.append((donor, True))
            chosen = self._choose_donor(tune_controller, donors)
            if chosen is None:
                logger.info(
                    "[pbt] %s trains on at iteration %s: no donor scores better with a "
                    "checkpoint as new as its score and a full interval past its last "
                    "start",
                    trial,
                    state.last_train_time,
                )
                lower_quantile = [t for t in lower_quantile if t is not trial]
            else:
                upper_quantile = [chosen]
        super()._checkpoint_or_exploit(  # type: ignore[misc]
            trial, tune_controller, upper_quantile, lower_quantile
        )
        # The next decision asks whether it improved on what it is judged by now (after
        # an exploit: the donor's figures, the weights it now has).
        now = self.__dict__.get("_ranked", {}).get(trial.trial_id)
        if now is not None:
            before[trial.trial_id] = now

    def _improving(self, trial: Any, ranked: dict[str, Stats]) -> bool:
        """Whether ``trial``'s ranked figure is clearly above the one it had at its last
        decision (its first, before any): by more than the margin, and with
        exploit_test: welch significantly so. A member still learning is no evidence of
        a worse one: on LunarLander a member behind at 65k env steps was often the best
        at 200k, and cloning over it there ended its line."""
        before = self.__dict__.get("_ranked_before", {}).get(trial.trial_id)
        now = ranked.get(trial.trial_id)
        if before is None or now is None or now is before:
            return False
        if self.exploit_alpha is None:
            return bool(now.mean - self.exploit_min_gain > before.mean)
        return clearly_better(now, before, self.exploit_alpha, self.exploit_min_gain)

    def _choose_donor(self, tune_controller: Any, donors: list[tuple[Any, bool]]) -> Any:
        """One of ``donors`` (trial, whether it must save first) at random, as Tune picks
        one of the upper quantile, with its checkpoint in PBT's state; None if none can
        give one. A donor is asked to save only once it is the one chosen."""
        donors = list(donors)
        while donors:
            donor, must_save = donors.pop(random.randrange(len(donors)))
            if not must_save:
                self._offer_periodic_checkpoint(donor)
                return donor
            if self._save_donor_now(tune_controller, donor):
                return donor
        return None

    def _donor_checkpoint_at(self, donor: Any) -> int | None:
        """The iteration of the checkpoint ``donor`` would be cloned from: the one PBT
        saved at its last decision, else its newest periodic checkpoint (None: none).

        Tune saves a donor's checkpoint only when the donor itself ranked in the upper
        quantile at its own last decision. Trials that run at once decide one after the
        other, each against the others' older scores, so both of two trials can rank
        lower at their own decisions: neither then has a checkpoint, and a population
        of 2 exploited once in 30 iterations. The trial's periodic checkpoints
        (checkpoint.frequency) are as good a start, within the same age limit."""
        if self._trial_state[donor].last_checkpoint is not None:
            return int(self._trial_state[donor].last_train_time)
        latest = getattr(donor, "latest_checkpoint_result", None)
        if latest is None or latest.checkpoint is None:
            return None
        at = (latest.metrics or {}).get(self._time_attr)
        return int(at) if isinstance(at, int | float) else None

    def _offer_periodic_checkpoint(self, donor: Any) -> None:
        """Makes the donor's newest periodic checkpoint the one PBT clones from, with
        the result it was saved with (what Tune does with a checkpoint it saved)."""
        donor_state = self._trial_state[donor]
        if donor_state.last_checkpoint is None:
            latest = donor.latest_checkpoint_result
            donor_state.last_checkpoint = latest.checkpoint
            donor_state.last_result = dict(latest.metrics)

    def _save_donor_now(self, tune_controller: Any, donor: Any) -> bool:
        """Asks a running ``donor`` to save, as Tune's PBT asks a trial of the upper
        quantile at its own decision; the save is of its weights now, no older than its
        score. PBT waits for it before it clones (Tune's ``_FutureTrainingResult``), and
        takes the iteration it was saved at from the save's result. False when the donor
        has no process to save from (paused, pending, stopping)."""
        controller = controller_of(tune_controller)
        schedule = getattr(controller, "_schedule_trial_save", None)
        if schedule is None or getattr(donor, "status", None) != Trial.RUNNING:
            return False
        future = schedule(donor)
        if future is None:
            return False
        self._trial_state[donor].last_checkpoint = future
        return True

    def _exploit(self, tune_controller: Any, trial: Any, trial_to_clone: Any) -> None:
        super()._exploit(tune_controller, trial, trial_to_clone)  # type: ignore[misc]
        state = self._trial_state[trial]
        donor = self._trial_state[trial_to_clone]
        start = int((donor.last_result or {}).get(self._time_attr, donor.last_train_time))
        state.last_perturbation_time = start
        state.last_train_time = start
        state.workbench_start = start
        state.last_score = self._checkpoint_score(donor)
        ranked: dict[str, Stats] = self.__dict__.setdefault("_ranked", {})
        if trial_to_clone.trial_id in ranked:  # the weights it now has were judged so
            ranked[trial.trial_id] = ranked[trial_to_clone.trial_id]

    def _checkpoint_score(self, donor: Any) -> Any:
        """The score of the weights the donor's checkpoint holds: that of the result it
        was saved with (the window it carries), else the donor's last score. A save
        asked for after the donor's decision is iterations newer than that decision's
        score: in a MountainCar population a member whose episodes had since fallen
        back kept the copies of its old score above its own and was cloned over with
        its own checkpoint."""
        metric = getattr(self, "_metric", None)
        if metric and donor.last_result:
            value = flatten_dict(donor.last_result).get(metric)  # a copy: state untouched
            if isinstance(value, int | float) and math.isfinite(value):
                return float(getattr(self, "_metric_op", 1.0)) * value
        return donor.last_score


class PopulationMixins(
    KeepExploitedActor,
    NoIdlePause,
    FreshExploits,
    NoStopAfterSave,
    ExploitRecorder,
    ResumablePBT,
):
    """What the workbench's PBT and PB2 both add to Tune's, in the order they apply."""

    def configure(
        self,
        *,
        hyperparam_keys: tuple[str, ...],
        exploit_alpha: float | None,
        exploit_min_gain: float,
        spare_improving: bool = False,
    ) -> None:
        """What the experiment adds to Tune's arguments: the searched keys the lineage
        records, Welch's test level (None: any higher score clones), the margin, and
        whether a member still improving is spared."""
        self._hyperparam_keys = hyperparam_keys
        self.exploit_alpha = exploit_alpha
        self.exploit_min_gain = exploit_min_gain
        self.spare_improving = spare_improving


# The classes handed to Tune stay in this module: Tune pickles the scheduler into its
# experiment state, and a resume finds the class by its module's path (PB2's moved to
# ``pb2_scheduler``; ``__getattr__`` below still finds it here).
class WorkbenchPBT(PopulationMixins, PopulationBasedTraining):
    # The experiment's search space: explores by its blocks (ParamSpec.perturb: integers
    # and quantized values always move, lists move to a neighbour); Tune's explore
    # without one.
    _space: dict[str, ParamSpec] | None = None

    def explore_by(self, space: dict[str, ParamSpec]) -> None:
        """Explore by the experiment's search space rather than Tune's own explore."""
        self._space = dict(space)

    def _get_new_config(
        self, trial: Any, trial_to_clone: Any
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        if self._space is None:
            return super()._get_new_config(trial, trial_to_clone)  # type: ignore[no-any-return]
        return explore(
            trial_to_clone.config,
            self._space,
            resample_probability=self._resample_probability,
            factors=tuple(self._perturbation_factors),
        )


class WorkbenchASHA(ResumableScheduler, ASHAScheduler):
    """ASHA's rungs (the scores each trial recorded at each milestone) and brackets."""

    _FIELDS = ("_brackets", "_trial_info", "_counter", "_num_stopped")

    def workbench_state(self) -> dict[str, Any]:
        return {**super().workbench_state(), "asha": {f: getattr(self, f) for f in self._FIELDS}}

    def restore_workbench_state(self, state: dict[str, Any]) -> None:
        super().restore_workbench_state(state)
        for name, value in state.get("asha", {}).items():
            setattr(self, name, value)


class WorkbenchFIFO(ResumableScheduler, FIFOScheduler):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]


def __getattr__(name: str) -> Any:
    """PB2 lived here: a results folder from then names it here in its pickled tuner."""
    if name == "WorkbenchPB2":
        from workbench.tune_ext.pb2_scheduler import WorkbenchPB2

        return WorkbenchPB2
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
