"""PB2's explore step in the search space's own scale, and never two members on one point.

Tune's PB2 fits its Gaussian process over each bound linearly, so a log-uniform ``lr`` in
[1e-5, 1e-3] spends 90% of its range above 1e-4. It penalises (hallucinates) the points
of the members already placed only while no result newer than the last explore has
arrived, which in an asynchronous population is almost never. On LunarLander, with one
decision's data, it gave all three members cloned at one decision the same point, at
the bottom of the lr range, and the population became four copies of one policy
learning at a near-frozen rate (docs/benchmarks/scheduler-shootout.md).

``SpreadPB2Explore`` keeps Tune's acquisition (``_explore``: the time-varying GP, UCB)
and changes what it is given and what it may return:

- log-uniform keys are explored in log10 space (``explore_in_log``);
- every other live member's present point is hallucinated, at every decision;
- a suggestion within ``MIN_SEPARATION`` of another live member's point (in every
  dimension, as a fraction of the range) is replaced by a draw from the bounds (log
  keys log-uniformly): with nothing to tell two points apart, PB2 explores.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

import numpy as np
import pandas as pd
from ray.tune.experiment import Trial
from ray.tune.schedulers.pb2 import _explore
from ray.tune.schedulers.pbt import _PBTTrialState
from ray.tune.utils import flatten_dict
from ray.tune.utils.util import unflatten_dict  # type: ignore[attr-defined]


class Uniform(Protocol):
    def uniform(self, a: float, b: float) -> float: ...


# Closer than this fraction of every dimension's range is the same point.
MIN_SEPARATION = 0.05


def crowded(
    point: Sequence[float], others: Iterable[Sequence[float]], spans: Sequence[float]
) -> bool:
    """Whether ``point`` lies within MIN_SEPARATION of the span in every dimension of one
    of ``others`` (all in the GP's space)."""
    for other in others:
        if all(
            abs(p - o) <= MIN_SEPARATION * span
            for p, o, span in zip(point, other, spans, strict=True)
        ):
            return True
    return False


def spread_point(
    point: Sequence[float],
    others: Sequence[Sequence[float]],
    bounds: Sequence[tuple[float, float]],
    rng: Uniform,
    tries: int = 100,
) -> list[float]:
    """``point``, or a uniform draw within ``bounds`` (the GP's space) that no member of
    ``others`` crowds when ``point`` is crowded (the last draw after ``tries``)."""
    spans = [hi - lo for lo, hi in bounds]
    chosen = list(point)
    for _ in range(tries):
        if not crowded(chosen, others, spans):
            break
        chosen = [rng.uniform(lo, hi) for lo, hi in bounds]
    return chosen


class SpreadPB2Explore:
    """Mixin for Tune's PB2: its explore step as the module says."""

    data: pd.DataFrame
    current: Any
    _hyperparam_bounds_flat: dict[str, Any]
    _trial_state: dict[Any, Any]
    _custom_explore_fn: Any
    _burn_in_period: float
    _time_attr: str
    _metric: str | None
    _save_trial_state: Any
    # Keys of log-uniform blocks (explore_in_log).
    _log_keys: frozenset[str] = frozenset()

    def burn_in(self, iterations: int) -> None:
        """No decision before this iteration (Tune's PBT has it; its PB2 does not take it).
        PB2 still gathers its Gaussian process's data during the burn-in: from every
        result with the ranked metric, so the first decision has members' gains to fit."""
        self._burn_in_period = iterations

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> str:
        time = result.get(self._time_attr)
        value = result.get(self._metric) if self._metric else None
        if (
            isinstance(time, int | float)
            and time < self._burn_in_period
            and isinstance(value, int | float)
            and math.isfinite(value)
        ):
            # PB2's own row for the result, on a scratch state: the trial's PBT state
            # (its score, clock, last result) is left to its decisions.
            self._save_trial_state(_PBTTrialState(trial), time, result, trial)
        decision: str = super().on_trial_result(tune_controller, trial, result)  # type: ignore[misc]
        return decision

    def explore_in_log(self, keys: Iterable[str]) -> None:
        """Explore these keys (log-uniform blocks, positive bounds) in log10 space."""
        self._log_keys = frozenset(keys)

    def _to_gp(self, key: str, value: float) -> float:
        return math.log10(value) if key in self._log_keys else float(value)

    def _from_gp(self, key: str, value: float) -> float:
        return float(10.0**value) if key in self._log_keys else float(value)

    def _get_new_config(
        self, trial: Any, trial_to_clone: Any
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        keys = list(self._hyperparam_bounds_flat)
        bounds = []
        for k in keys:
            lo, hi = self._hyperparam_bounds_flat[k]
            bounds.append((self._to_gp(k, float(lo)), self._to_gp(k, float(hi))))
        live = [
            flatten_dict(t.config)
            for t in self._trial_state
            if t is not trial and getattr(t, "status", None) not in (Trial.TERMINATED, Trial.ERROR)
        ]
        others = [[self._to_gp(k, float(config[k])) for k in keys] for config in live]
        data = self.data.copy()
        for key in self._log_keys & set(data.columns):
            data[key] = np.log10(data[key].astype(float))
        donor = flatten_dict(trial_to_clone.config)
        config = {k: (self._to_gp(k, float(v)) if k in keys else v) for k, v in donor.items()}
        rows = len(data)
        new_flat, data = _explore(
            data,
            dict(zip(keys, bounds, strict=True)),
            np.array(others) if others else None,  # type: ignore[arg-type]
            trial_to_clone,
            trial,
            config,  # type: ignore[arg-type]
        )
        suggested = [float(new_flat[k]) for k in keys]
        point = spread_point(suggested, others, bounds, random)
        if point != suggested and len(data) > rows:
            # The row _explore added for this member: its new point, as it will run.
            for key, value in zip(keys, point, strict=True):
                data.loc[data.index[-1], key] = value
        for key in self._log_keys & set(data.columns):
            data[key] = np.power(10.0, data[key].astype(float))
        self.data = data.reset_index(drop=True)
        self.current = None  # Tune's batch bookkeeping: the live members replace it
        new_config = unflatten_dict(
            {
                **donor,
                **{
                    k: type(donor[k])(self._from_gp(k, v)) for k, v in zip(keys, point, strict=True)
                },
            }
        )
        if self._custom_explore_fn:
            new_config = self._custom_explore_fn(new_config)
        return new_config, {}
