"""When trials stop: the experiment's stop rules as one Tune Stopper."""

from __future__ import annotations

import numbers
from typing import Any

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
    env steps.

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
    ) -> None:
        self.rules = dict(rules)
        self.all_at_return = all_at_return and any(k in self.rules for k in RETURN_RULES)
        self.reached_by: str | None = None
        self.reached: dict[str, float] = {}
        # stop.population_env_steps: the env steps every result so far sampled, together.
        self.env_step_budget = env_step_budget
        self.env_steps_spent = 0
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
        return self.return_reached() or self.budget_spent()

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
) -> RulesStopper:
    stopper = _LIVE.get(key) if key else None
    if stopper is None:
        stopper = RulesStopper(rules, all_at_return, key, env_step_budget)
    if stopper.reached_by is None:
        stopper.reached_by = reached_by  # reached before the snapshot: still reached
        stopper.reached = dict(reached or {})
    # A resumed driver counts on from the snapshot's spend (the iterations sampled after
    # it are sampled again from the trials' checkpoints, and counted again).
    stopper.env_steps_spent = max(stopper.env_steps_spent, env_steps_spent)
    return stopper


def _reached(value: Any, threshold: float) -> bool:
    # RLlib reports some means as numpy.float32, which is not a Python float.
    if not isinstance(value, numbers.Real):
        return False
    number = float(value)
    return number == number and number >= threshold
