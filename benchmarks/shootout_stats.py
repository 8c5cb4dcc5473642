"""The statistics of the scheduler shoot-out's report: few seeds, reported as rliable
(Agarwal et al. 2021) recommends, computed with scipy (rliable pins an old ``arch``
that does not install beside this project's numpy).

* The interquartile mean (IQM): the mean of the middle half of the seeds' figures
  (``scipy.stats.trim_mean`` at 25%), robust to one outlying seed yet using more of the
  data than the median.
* Paired differences against the anchor (random search): per seed, arm minus anchor, on
  the same seed; their median and mean with 95% percentile bootstrap intervals over
  seeds. With one task, resampling seeds is rliable's stratified bootstrap (its strata
  are tasks).
* Probability of improvement, P(X > Y): the chance that the arm's figure on a random
  seed beats the anchor's on a random seed (ties count half), rliable's definition,
  with a 95% percentile bootstrap interval resampling each arm's seeds.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

RESAMPLES = 10_000
CONFIDENCE = 0.95


def iqm(values: Sequence[float]) -> float:
    from scipy.stats import trim_mean

    data = np.asarray([v for v in values if math.isfinite(v)], dtype=np.float64)
    return float(trim_mean(data, 0.25)) if data.size else math.nan


def probability_of_improvement(x: Sequence[float], y: Sequence[float]) -> float:
    """P(X > Y) + P(X = Y) / 2 over every pair of one figure of ``x`` and one of ``y``."""
    a = np.asarray(x, dtype=np.float64)[:, None]
    b = np.asarray(y, dtype=np.float64)[None, :]
    if a.size == 0 or b.size == 0:
        return math.nan
    return float(np.mean((a > b) + 0.5 * (a == b)))


@dataclass(frozen=True)
class Interval:
    value: float
    low: float
    high: float

    def text(self, fmt: str = ".1f") -> str:
        if not math.isfinite(self.value):
            return "-"
        if not (math.isfinite(self.low) and math.isfinite(self.high)):
            return f"{self.value:{fmt}} [-]"
        return f"{self.value:{fmt}} [{self.low:{fmt}}, {self.high:{fmt}}]"


def _bootstrap(
    data: tuple[np.ndarray, ...],
    statistic: Callable[..., float],
    *,
    paired: bool,
    seed: int,
) -> Interval:
    from scipy.stats import bootstrap

    value = statistic(*data)
    if any(d.size < 2 for d in data):
        return Interval(value, math.nan, math.nan)
    with warnings.catch_warnings():
        # Every resample alike (all seeds tied): the interval is the value itself.
        warnings.simplefilter("ignore")
        found = bootstrap(
            data,
            statistic,
            paired=paired,
            vectorized=False,
            n_resamples=RESAMPLES,
            confidence_level=CONFIDENCE,
            method="percentile",
            random_state=np.random.default_rng(seed),
        )
    low, high = found.confidence_interval
    low = value if not math.isfinite(low) else float(low)
    high = value if not math.isfinite(high) else float(high)
    return Interval(value, low, high)


def paired_differences(arm: Sequence[float], anchor: Sequence[float]) -> list[float]:
    return [a - b for a, b in zip(arm, anchor, strict=True)]


def median_difference(arm: Sequence[float], anchor: Sequence[float], seed: int = 0) -> Interval:
    diffs = np.asarray(paired_differences(arm, anchor), dtype=np.float64)
    return _bootstrap((diffs,), lambda d: float(np.median(d)), paired=False, seed=seed)


def mean_difference(arm: Sequence[float], anchor: Sequence[float], seed: int = 0) -> Interval:
    diffs = np.asarray(paired_differences(arm, anchor), dtype=np.float64)
    return _bootstrap((diffs,), lambda d: float(np.mean(d)), paired=False, seed=seed)


def iqm_interval(values: Sequence[float], seed: int = 0) -> Interval:
    data = np.asarray(values, dtype=np.float64)
    return _bootstrap((data,), iqm, paired=False, seed=seed)


def improvement(arm: Sequence[float], anchor: Sequence[float], seed: int = 0) -> Interval:
    x = np.asarray(arm, dtype=np.float64)
    y = np.asarray(anchor, dtype=np.float64)
    return _bootstrap((x, y), probability_of_improvement, paired=False, seed=seed)
