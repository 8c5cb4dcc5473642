"""When trials stop: the experiment's stop rules as one Tune Stopper."""

from __future__ import annotations

import numbers
from typing import Any

from ray.tune.stopper import Stopper
from ray.tune.utils import flatten_dict

from workbench.names import RETURN_METRIC

# The stopper of each population this process runs, by results folder (see __reduce__).
_LIVE: dict[str, RulesStopper] = {}


class RulesStopper(Stopper):  # type: ignore[misc]
    """Stops a trial at the first rule met (metric >= threshold). With ``all_at_return``
    the whole experiment ends once any trial reaches the return threshold: a
    population searches together, and once one member has solved the task the
    others' remaining budget buys nothing.

    Tune pickles the stopper into its experiment snapshot and, on resume, puts the
    unpickled copy in place of the one the run config hands it (TuneController's
    ``__setstate__``): the launcher would then ask a stopper Tune never calls whether the
    target was reached, and a resumed population that reached it reported itself
    interrupted. Unpickled in a process where the population's stopper already lives
    (``key``: its results folder), a stopper is that live one.
    """

    def __init__(self, rules: dict[str, float], all_at_return: bool, key: str = "") -> None:
        self.rules = dict(rules)
        self.all_at_return = all_at_return and RETURN_METRIC in self.rules
        self.reached_by: str | None = None
        self.key = key
        if key:
            _LIVE[key] = self

    def __reduce__(self) -> tuple[Any, ...]:
        return (_unpickle, (self.key, self.rules, self.all_at_return, self.reached_by))

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        flat = flatten_dict(result, delimiter="/")
        met = [k for k, threshold in self.rules.items() if _reached(flat.get(k), threshold)]
        if RETURN_METRIC in met and self.reached_by is None:
            self.reached_by = trial_id
        return bool(met)

    def stop_all(self) -> bool:
        return self.all_at_return and self.reached_by is not None


def _unpickle(
    key: str, rules: dict[str, float], all_at_return: bool, reached_by: str | None
) -> RulesStopper:
    stopper = _LIVE.get(key) if key else None
    if stopper is None:
        stopper = RulesStopper(rules, all_at_return, key)
    if stopper.reached_by is None:
        stopper.reached_by = reached_by  # reached before the snapshot: still reached
    return stopper


def _reached(value: Any, threshold: float) -> bool:
    # RLlib reports some means as numpy.float32, which is not a Python float.
    if not isinstance(value, numbers.Real):
        return False
    number = float(value)
    return number == number and number >= threshold
