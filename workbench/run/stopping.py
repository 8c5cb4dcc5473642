"""When trials stop: the experiment's stop rules as one Tune Stopper."""

from __future__ import annotations

import numbers
from typing import Any

from ray.tune.stopper import Stopper
from ray.tune.utils import flatten_dict

from workbench.names import RETURN_METRIC


class RulesStopper(Stopper):  # type: ignore[misc]
    """Stops a trial at the first rule met (metric >= threshold). With ``all_at_return``
    the whole experiment ends once any trial reaches the return threshold: a
    population searches together, and once one member has solved the task the
    others' remaining budget buys nothing."""

    def __init__(self, rules: dict[str, float], all_at_return: bool) -> None:
        self.rules = dict(rules)
        self.all_at_return = all_at_return and RETURN_METRIC in self.rules
        self.reached_by: str | None = None

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        flat = flatten_dict(result, delimiter="/")
        met = [k for k, threshold in self.rules.items() if _reached(flat.get(k), threshold)]
        if RETURN_METRIC in met and self.reached_by is None:
            self.reached_by = trial_id
        return bool(met)

    def stop_all(self) -> bool:
        return self.all_at_return and self.reached_by is not None


def _reached(value: Any, threshold: float) -> bool:
    # RLlib reports some means as numpy.float32, which is not a Python float.
    if not isinstance(value, numbers.Real):
        return False
    number = float(value)
    return number == number and number >= threshold
