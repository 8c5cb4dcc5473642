"""When trials stop: the experiment's stop rules as one Tune Stopper."""

from __future__ import annotations

import numbers
import time
from collections.abc import Sequence
from typing import Any

from ray.tune import Callback
from ray.tune.stopper import Stopper
from ray.tune.utils import flatten_dict

from workbench.names import (
    EVAL_EPISODES_METRIC,
    EVAL_RETURN_METRIC,
    EVAL_STD_METRIC,
    ITERATION_ENV_STEPS_METRIC,
    RETURN_METRIC,
    SCORE_EPISODES_METRIC,
    SCORE_METRIC,
)

# The stopper of each population this process runs, by results folder (see __reduce__).
_LIVE: dict[str, RulesStopper] = {}
# Trial statuses a budget does not end (Tune's words).
_ENDED = ("TERMINATED", "ERROR")
# A return target's rule, by what meets it: a trial's confirming evaluation, its score
# (stop.eval_episodes: 0), or the per-iteration mean (snapshots from before the score).
RETURN_RULES = (EVAL_RETURN_METRIC, SCORE_METRIC, RETURN_METRIC)
# What the stop that reached the target saw (for the summary): the trial's evaluation
# and the score that asked for it.
_CONFIRMATION_KEYS = (
    EVAL_RETURN_METRIC,
    EVAL_STD_METRIC,
    EVAL_EPISODES_METRIC,
    SCORE_METRIC,
    SCORE_EPISODES_METRIC,
    "training_iteration",
)


class RulesStopper(Stopper):  # type: ignore[misc]
    """Stops a trial at the first rule met (metric >= threshold). With ``all_at_return``
    the whole experiment ends once any trial reaches the return threshold: a
    population searches together, and once one member has solved the task the
    others' remaining budget buys nothing. With ``env_step_budget``
    (stop.population_env_steps) it ends once the trials together have sampled that many
    env steps; with ``wall_budget_s`` (stop.wall_time_s) once the driver has run that
    long, counted across a resume's sessions (Tune's own TimeoutStopper is not used: its
    count is hidden in its snapshot, so a resume could neither report nor extend it).
    ``budget_stopped`` keeps the trials a budget ended (see `watch`): a resume with a
    larger budget opens them again.

    A return target is met by the evaluation the trial runs when its score reaches the
    target (``eval/return_mean``, in the result of that iteration only: see
    `workbench.trial.score`): a trial whose evaluation falls short is not stopped, and
    the population goes on. ``reached`` keeps what the stop that met it saw.

    Tune pickles the stopper into its experiment snapshot and, on resume, puts the
    unpickled copy in place of the one the run config hands it (TuneController's
    ``__setstate__``): the launcher would then ask a stopper Tune never calls whether the
    target was reached, and a resumed population that reached it reported itself
    interrupted. Unpickled in a process where the population's stopper already lives
    (``key``: its results folder), a stopper is that live one.
    """

    def __init__(
        self,
        rules: dict[str, float],
        all_at_return: bool,
        key: str = "",
        env_step_budget: int | None = None,
        wall_budget_s: float | None = None,
    ) -> None:
        self.rules = dict(rules)
        self.all_at_return = all_at_return and any(k in self.rules for k in RETURN_RULES)
        self.reached_by: str | None = None
        self.reached: dict[str, float] = {}
        # stop.population_env_steps: the env steps every result so far sampled, together.
        self.env_step_budget = env_step_budget
        self.env_steps_spent = 0
        # stop.wall_time_s: the driver's time in earlier sessions, and since this one's
        # first check (Tune asks stop_all at every step of its loop).
        self.wall_budget_s = wall_budget_s
        self.wall_spent_before_s = 0.0
        self._since: float | None = None
        # The trials Tune runs (its own list, handed over each step by StopperWatch), and
        # those still open when a budget ran out.
        self._trials: Sequence[Any] = ()
        self.budget_stopped: list[str] = []
        # Which budget ended this session's loop ("env_steps", "wall_time"), as Tune's
        # loop saw it: time that passes after the loop ends changes nothing.
        self.ran_out: str | None = None
        self.key = key
        if key:
            _LIVE[key] = self

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _unpickle,
            (
                self.key,
                self.rules,
                self.all_at_return,
                self.reached_by,
                self.reached,
                self.env_step_budget,
                self.env_steps_spent,
                self.wall_budget_s,
                self.wall_time_spent(),
                list(self.budget_stopped),
            ),
        )

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        flat = flatten_dict(result, delimiter="/")
        sampled = flat.get(ITERATION_ENV_STEPS_METRIC)
        if isinstance(sampled, numbers.Real) and sampled == sampled:
            self.env_steps_spent += int(float(sampled))
        met = [k for k, threshold in self.rules.items() if _reached(flat.get(k), threshold)]
        if any(k in RETURN_RULES for k in met) and self.reached_by is None:
            self.reached_by = trial_id
            self.reached = {
                k: float(flat[k])
                for k in _CONFIRMATION_KEYS
                if isinstance(flat.get(k), numbers.Real)
            }
        return bool(met)

    def stop_all(self) -> bool:
        if self._since is None:
            self._since = time.monotonic()
        if self.return_reached():
            return True
        if self.budget_spent() or self.wall_budget_spent():
            if self.ran_out is None:
                self.ran_out = "env_steps" if self.budget_spent() else "wall_time"
                still_open = [str(t.trial_id) for t in self._trials if t.status not in _ENDED]
                # (None open: a resume of a population whose budget had ended it.)
                self.budget_stopped = still_open or self.budget_stopped
            return True
        return False

    def watch(self, trials: Sequence[Any]) -> None:
        """Tune's list of trials (kept, not copied: Tune adds to it), read when a budget
        runs out for the trials it ends."""
        self._trials = trials

    def wall_time_spent(self) -> float:
        """The driver's seconds under this budget, this session's and earlier ones'."""
        now = time.monotonic()
        return self.wall_spent_before_s + (now - self._since if self._since is not None else 0.0)

    def wall_budget_ended(self) -> bool:
        """stop.wall_time_s ended this session's loop."""
        return self.ran_out == "wall_time"

    def wall_budget_spent(self) -> bool:
        """stop.wall_time_s has run out, counted across sessions."""
        return self.wall_budget_s is not None and self.wall_time_spent() >= self.wall_budget_s

    def return_reached(self) -> bool:
        """A trial met the return target, which ends the whole experiment."""
        return self.all_at_return and self.reached_by is not None

    def budget_spent(self) -> bool:
        """The trials together have sampled the experiment's env-step budget."""
        return self.env_step_budget is not None and self.env_steps_spent >= self.env_step_budget


def _unpickle(
    key: str,
    rules: dict[str, float],
    all_at_return: bool,
    reached_by: str | None,
    reached: dict[str, float] | None = None,  # (snapshots from before it have none)
    env_step_budget: int | None = None,
    env_steps_spent: int = 0,
    wall_budget_s: float | None = None,
    wall_time_spent: float = 0.0,
    budget_stopped: list[str] | None = None,
) -> RulesStopper:
    stopper = _LIVE.get(key) if key else None
    if stopper is None:
        stopper = RulesStopper(rules, all_at_return, key, env_step_budget, wall_budget_s)
    if stopper.reached_by is None:
        stopper.reached_by = reached_by  # reached before the snapshot: still reached
        stopper.reached = dict(reached or {})
    # A resumed driver counts on from the snapshot's spend (the iterations sampled after
    # it are sampled again from the trials' checkpoints, and counted again).
    stopper.env_steps_spent = max(stopper.env_steps_spent, env_steps_spent)
    # The live stopper's budget is the resume's (`resume --set stop.wall_time_s=...`);
    # the time spent goes on from the snapshot's.
    stopper.wall_spent_before_s = max(stopper.wall_spent_before_s, wall_time_spent)
    if not stopper.budget_stopped:
        stopper.budget_stopped = list(budget_stopped or [])
    return stopper


class StopperWatch(Callback):  # type: ignore[misc]
    """Hands the stopper Tune's list of trials at each step (a Stopper sees results, not
    trials), so that a budget that runs out knows which trials it ended."""

    def __init__(self, stopper: RulesStopper) -> None:
        self.stopper = stopper

    def on_step_begin(self, iteration: int, trials: list[Any], **info: Any) -> None:
        self.stopper.watch(trials)


def _reached(value: Any, threshold: float) -> bool:
    # RLlib reports some means as numpy.float32, which is not a Python float.
    if not isinstance(value, numbers.Real):
        return False
    number = float(value)
    return number == number and number >= threshold
