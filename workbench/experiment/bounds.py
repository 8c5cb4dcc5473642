"""The values a hyperparameter can take, by RLlib's public name.

RLlib takes ``train_batch_size_per_learner: -100`` or ``lr: .nan`` without a word and
fails (or silently trains nothing) deep inside a trial; the workbench checks every fixed
value of ``training`` and every value a search-space block can produce against these
rules before anything starts. A name without a rule is only required to be finite when it
is a number (RLlib has hundreds of settings; the rules cover those people tune).
"""

from __future__ import annotations

import itertools
import math
import numbers
from dataclasses import dataclass
from typing import Any

# The largest count anyone means (env steps in one batch, epochs, ...): a bigger number
# is a typo (10**12 ran until it was killed).
_HUGE = 10**9


@dataclass(frozen=True)
class Bound:
    """An integer or a real number in [low, high] (``open_low``: low itself excluded)."""

    integer: bool = False
    low: float = -math.inf
    high: float = math.inf
    open_low: bool = False
    none_ok: bool = False  # None is a valid setting (grad_clip: no clipping)
    schedule_ok: bool = False  # a schedule [[timestep, value], ...] is valid (lr: decay)

    def describe(self) -> str:
        kind = "an integer" if self.integer else "a number"
        if self.low == -math.inf and self.high == math.inf:
            return f"{kind}"
        if self.high == math.inf:
            return f"{kind} {'>' if self.open_low else '>='} {self.low:g}"
        low = f"({self.low:g}" if self.open_low else f"[{self.low:g}"
        return f"{kind} in {low}, {self.high:g}]"

    def problem(self, value: Any) -> str | None:
        """Why ``value`` is not valid here, or None."""
        if value is None and self.none_ok:
            return None
        if self.schedule_ok and isinstance(value, list | tuple):
            return self.schedule_problem(value)
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return f"{value!r} is not {self.describe()}"
        number = float(value)
        if not math.isfinite(number):
            return f"{value!r} is not a finite number; valid: {self.describe()}"
        if self.integer and not number.is_integer():
            return f"{value!r} is not an integer; valid: {self.describe()}"
        below = number <= self.low if self.open_low else number < self.low
        if below or number > self.high:
            return f"{value!r} is out of range; valid: {self.describe()}"
        return None

    def schedule_problem(self, value: list[Any] | tuple[Any, ...]) -> str | None:
        """Why ``value`` is not a schedule RLlib's Scheduler takes (linear between
        [timestep, value] points from timestep 0 on, env steps sampled), or None. A
        schedule may end at the bound itself (a learning rate decaying to 0)."""
        shape = "a schedule [[0, value], [timestep, value], ...] (2 points or more)"
        if len(value) < 2 or not all(
            isinstance(point, list | tuple) and len(point) == 2 for point in value
        ):
            return f"{value!r} is neither {self.describe()} nor {shape}"
        steps = [point[0] for point in value]
        if any(isinstance(t, bool) or not isinstance(t, numbers.Integral) for t in steps):
            return f"{value!r}: a schedule's timesteps must be integers; valid: {shape}"
        if steps[0] != 0 or any(b < a for a, b in itertools.pairwise(steps)):
            return f"{value!r}: a schedule starts at timestep 0 and never goes back"
        closed = Bound(integer=self.integer, low=self.low, high=self.high, open_low=False)
        for point in value:
            why = closed.problem(point[1])
            if why is not None:
                return f"{value!r}: the value at timestep {point[0]}: {why}"
        return None


_COUNT = Bound(integer=True, low=1, high=_HUGE)
_COUNT_OR_ZERO = Bound(integer=True, low=0, high=_HUGE)
_POSITIVE = Bound(low=0, open_low=True)
_NON_NEGATIVE = Bound(low=0)
_FRACTION = Bound(low=0, high=1)
_DISCOUNT = Bound(low=0, high=1, open_low=True)

BOUNDS: dict[str, Bound] = {
    # How much data, how often.
    "train_batch_size_per_learner": _COUNT,
    "train_batch_size": _COUNT,
    "minibatch_size": _COUNT,
    "num_epochs": Bound(integer=True, low=1, high=100_000),
    "num_sgd_iter": Bound(integer=True, low=1, high=100_000),
    "n_step": Bound(integer=True, low=1, high=10_000),
    "num_steps_sampled_before_learning_starts": _COUNT_OR_ZERO,
    "target_network_update_freq": _COUNT_OR_ZERO,
    "broadcast_interval": _COUNT,
    "learner_queue_size": _COUNT,
    "circular_buffer_num_batches": _COUNT,
    "circular_buffer_iterations_per_batch": _COUNT,
    "training_intensity": Bound(low=0, open_low=True, none_ok=True),
    # Optimisation.
    "lr": Bound(low=0, open_low=True, schedule_ok=True),  # RLlib's lr schedules
    "actor_lr": _POSITIVE,
    "critic_lr": _POSITIVE,
    "alpha_lr": _POSITIVE,
    "_lr_vf": _POSITIVE,
    "grad_clip": Bound(low=0, open_low=True, none_ok=True),
    "adam_epsilon": _POSITIVE,
    # Returns and advantages.
    "gamma": _DISCOUNT,
    "lambda_": _FRACTION,
    "tau": _DISCOUNT,
    # Losses.
    "clip_param": Bound(low=0, open_low=True, schedule_ok=True),  # the lean learner's
    "vf_clip_param": _POSITIVE,
    "entropy_coeff": Bound(low=0, schedule_ok=True),  # RLlib's entropy schedules
    "vf_loss_coeff": _NON_NEGATIVE,
    "kl_coeff": _NON_NEGATIVE,
    "kl_target": _POSITIVE,
    "initial_alpha": _POSITIVE,
    "vtrace_clip_rho_threshold": _POSITIVE,
    "vtrace_clip_pg_rho_threshold": _POSITIVE,
    "replay_proportion": _NON_NEGATIVE,
    "num_atoms": _COUNT,
    "sigma0": _NON_NEGATIVE,
}


def value_problem(name: str, value: Any) -> str | None:
    """Why ``value`` cannot be hyperparameter ``name``, or None (nested values of a
    setting without a rule are walked for NaN and infinity)."""
    bound = BOUNDS.get(name)
    if bound is not None:
        return bound.problem(value)
    return not_finite(value)


def not_finite(value: Any) -> str | None:
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value!r} is not a finite number"
    if isinstance(value, dict):
        for item in value.values():
            if found := not_finite(item):
                return found
    if isinstance(value, list | tuple):
        for item in value:
            if found := not_finite(item):
                return found
    return None


INT64 = (-(2**63), 2**63 - 1)


def not_int64(value: Any) -> str | None:
    """An integer, anywhere in ``value``, that no 64-bit integer holds (an environment's
    C++ side, numpy's int64): pybind11 refuses it with "Unable to cast"."""
    if isinstance(value, int) and not isinstance(value, bool):
        low, high = INT64
        if not low <= value <= high:
            return f"{value} does not fit a 64-bit integer ({low}..{high})"
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list | tuple):
        for item in value:
            if found := not_int64(item):
                return found
    return None
