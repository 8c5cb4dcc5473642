"""A population's pace before it runs: iterations per second and the share of its trials'
time outside ``train()``, forecast from one trial's costs and the cores the trials share.

The model (docs/resources.md, "The population forecast") counts CPU seconds. A trial costs
``start`` per process before its first result (each process imports torch and RLlib and
builds its part of the algorithm), ``iteration`` per ``train()`` (sampling and learning),
``result`` per result outside ``train()`` (Tune's reporting, checkpoints, the restores of
exploits, Ray's daemons serving the call: it grows with the trials at once), and the driver
spends ``driver`` per result (Tune's loop, the callbacks, MLflow) while the trial waits for
its next ``train()``.

The trials of a wave differ: each draws its hyperparameters, and ``num_epochs`` or
``minibatch_size`` can make one ``train()`` ten times another's. The wave's ``n`` trials take
``n`` evenly spaced quantiles of the iteration's cost over the searched distribution, and
share the ``P`` cores equally (processor sharing: ``P`` cores among the running trials' work,
none faster than its own time with a core per process); a trial that finishes early hands
its share to the others, and the wave ends with the slowest. The driver does every result's
work on one core, so a wave lasts at least ``n x iterations x driver``. Within a trial's
time, ``train()`` takes the share its own costs give it.

The constants were measured on this machine with ``benchmarks/population_scale.py
--calibrate`` on populations of 6 and 12 (the sizes it does not report on; docs/benchmarks/
population-scale.md); the iteration's cost comes from the plan's throughput figures
(documented rates, or ``--probe``'s measurement)."""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, replace
from typing import Any

from workbench.experiment.schema import Experiment
from workbench.experiment.search_space import SearchSpace
from workbench.plan.throughput import Throughput


@dataclass(frozen=True)
class Constants:
    """CPU seconds measured here (see the module's docstring)."""

    # One trial process from its placement to its first train().
    start_s: float = 5.3
    # Per result outside train() and the driver: a fixed part and a part per trial at once
    # (Ray's daemons serve every trial; never below 0 in all).
    result_s: float = 0.0
    result_s_per_trial: float = 0.006
    # The driver per result.
    driver_s: float = 0.12


MEASURED = Constants()

# Draws from the search space's initial distribution for the iteration's cost.
_DRAWS = 2000
_DEFAULT_ITERATIONS = 100


@dataclass(frozen=True)
class TrialCosts:
    """One trial's costs in CPU seconds (see the module's docstring)."""

    processes: int  # main process, env runners, learners: each starts torch and RLlib
    start_s: float  # per process
    # One train() over the searched hyperparameters, cheapest first: (CPU s of all the
    # trial's processes, wall s with a core per process).
    iterations: tuple[tuple[float, float], ...]
    result_s: float
    result_s_per_trial: float
    driver_s: float
    source: str  # where the iteration's cost comes from

    def per_result_s(self, at_once: int) -> float:
        """Outside train() and the driver, a result, with ``at_once`` trials running."""
        return max(0.0, self.result_s + self.result_s_per_trial * at_once)

    @property
    def iteration_cpu_s(self) -> float:
        return sum(c for c, _ in self.iterations) / len(self.iterations)

    @property
    def iteration_wall_s(self) -> float:
        return sum(w for _, w in self.iterations) / len(self.iterations)

    def quantiles(self, n: int) -> list[tuple[float, float]]:
        """n evenly spaced quantiles of the iteration's cost: the trials of a wave."""
        count = len(self.iterations)
        return [self.iterations[min(int((i + 0.5) / n * count), count - 1)] for i in range(n)]


@dataclass(frozen=True)
class Forecast:
    trials: int
    at_once: int
    cores: float
    iterations: int  # per trial
    iterations_given: bool  # False: no stop rule in iterations; a nominal count
    wall_s: float
    outside: float  # share of the trials' slot time outside train()
    bound: str  # what sets the pace of the (first) wave
    costs: TrialCosts

    @property
    def iterations_per_s(self) -> float:
        return self.trials * self.iterations / self.wall_s if self.wall_s > 0 else 0.0


def iteration_costs(
    space: SearchSpace, config: Any, rate: Throughput
) -> tuple[tuple[float, float], ...] | None:
    """(CPU s, wall s) of one train() of an on-policy learner for draws of the searched
    batch, epochs and minibatch from their initial distribution, cheapest first; None
    where the throughput figures do not give it (a replaying learner, a GPU learner not
    probed)."""
    if rate.learner_costs is None or rate.per_core <= 0:
        return None
    per_sample, per_minibatch = rate.learner_costs
    learners = max(int(getattr(config, "num_learners", 0) or 0), 1)
    runners = max(rate.runners, 1)
    fixed = {
        "train_batch_size_per_learner": float(config.train_batch_size_per_learner),
        "num_epochs": float(getattr(config, "num_epochs", 1) or 1),
        "minibatch_size": float(
            getattr(config, "minibatch_size", None) or config.train_batch_size_per_learner
        ),
    }
    draws = [_draws(space, name, base) for name, base in fixed.items()]
    out = []
    for batch, epochs, minibatch in zip(*draws, strict=True):
        sample_s = batch * learners / rate.per_core
        minibatches = math.ceil(batch / min(minibatch, batch))
        learn_s = epochs * (batch * per_sample + minibatches * per_minibatch)
        out.append((sample_s + learn_s * learners, sample_s / runners + learn_s))
    return tuple(sorted(out))


def _draws(space: SearchSpace, name: str, base: float) -> list[float]:
    spec = space.get(name)
    if spec is None:
        return [base] * _DRAWS
    if spec.grid is not None:
        return [float(spec.grid[i % len(spec.grid)]) for i in range(_DRAWS)]
    values = spec.domain().sample(size=_DRAWS, random_state=zlib.crc32(name.encode()))
    return [float(v) for v in values]


def trial_costs(
    space: SearchSpace,
    config: Any,
    rate: Throughput,
    *,
    processes: int,
    constants: Constants = MEASURED,
) -> TrialCosts | None:
    """The costs of one trial of this experiment."""
    iterations = iteration_costs(space, config, rate)
    if iterations is None:
        return None
    return TrialCosts(
        processes=processes,
        start_s=constants.start_s,
        iterations=iterations,
        result_s=constants.result_s,
        result_s_per_trial=constants.result_s_per_trial,
        driver_s=constants.driver_s,
        source="measured by --probe" if rate.measured else "documented rates",
    )


def with_constants(costs: TrialCosts, constants: Constants) -> TrialCosts:
    return replace(
        costs,
        start_s=constants.start_s,
        result_s=constants.result_s,
        result_s_per_trial=constants.result_s_per_trial,
        driver_s=constants.driver_s,
    )


def iterations_of(exp: Experiment, batch: float) -> int | None:
    """Iterations per trial the stop rule sets (None: it sets none)."""
    stop = exp.stop
    counts = []
    if stop.iterations is not None:
        counts.append(stop.iterations)
    if stop.env_steps is not None and batch > 0:
        counts.append(math.ceil(stop.env_steps / batch))
    return min(counts) if counts else None


def forecast(
    costs: TrialCosts,
    *,
    trials: int,
    at_once: int,
    cores: float,
    iterations: int | None,
) -> Forecast:
    """The population's wall time and share outside train(), wave by wave."""
    count = iterations or _DEFAULT_ITERATIONS
    waves = [at_once] * (trials // at_once) + ([trials % at_once] if trials % at_once else [])
    wall = slot = in_train = 0.0
    first_bound = ""
    for n in waves:
        seconds, bound, train = _wave(costs, n, cores, count)
        first_bound = first_bound or bound
        wall += seconds
        slot += n * seconds
        in_train += train
    return Forecast(
        trials=trials,
        at_once=at_once,
        cores=cores,
        iterations=count,
        iterations_given=iterations is not None,
        wall_s=wall,
        outside=max(0.0, 1.0 - in_train / slot) if slot else 0.0,
        bound=first_bound,
        costs=costs,
    )


def _wave(costs: TrialCosts, n: int, cores: float, iterations: int) -> tuple[float, str, float]:
    """(seconds, what bounds it, the n trials' seconds in train()) for n trials at once."""
    per_result = costs.per_result_s(n) + costs.driver_s
    trials = costs.quantiles(n)
    own, work = [], []
    for cpu, wall in trials:
        own.append(costs.start_s + iterations * (wall + per_result))
        work.append(costs.processes * costs.start_s + iterations * (cpu + per_result))
    finish = _processor_sharing(own, work, cores)
    shared = max(finish)
    on_driver = n * iterations * costs.driver_s
    seconds = max(shared, on_driver)
    if on_driver > shared:
        bound = "the driver"
    elif sum(w / o for w, o in zip(work, own, strict=True)) > cores:
        bound = "the cores"
    else:
        bound = "each trial's own time"
    # Waiting on the driver adds to the wave's time, outside train().
    in_train = sum(
        iterations * wall / o * f for (_, wall), o, f in zip(trials, own, finish, strict=True)
    )
    return seconds, bound, in_train


def _processor_sharing(own: list[float], work: list[float], cores: float) -> list[float]:
    """When each job finishes: job i needs ``own[i]`` seconds at full speed, using
    ``work[i] / own[i]`` cores meanwhile; the running jobs slow down alike when together
    they want more than ``cores``."""
    left = list(own)
    width = [w / o if o > 0 else 1.0 for w, o in zip(work, own, strict=True)]
    finish = [0.0] * len(own)
    running = set(range(len(own)))
    now = 0.0
    while running:
        speed = min(1.0, cores / sum(width[i] for i in running))
        step = min(left[i] for i in running) / speed
        now += step
        for i in list(running):
            left[i] -= step * speed
            if left[i] <= 1e-9:
                finish[i] = now
                running.discard(i)
    return finish


def forecast_lines(result: Forecast) -> list[str]:
    """What `workbench plan` prints."""
    c = result.costs
    per = "" if result.iterations_given else f" (no stop in iterations: {result.iterations} shown)"
    cheap, dear = c.iterations[len(c.iterations) // 10], c.iterations[-len(c.iterations) // 10]
    return [
        f"Population forecast ({c.source} for train(); the rest measured here, docs/resources.md):",
        f"  one train(): ~{c.iteration_cpu_s:.3g} CPU s on average over the searched "
        f"hyperparameters ({cheap[0]:.2g}-{dear[0]:.2g} s from the 10th to the 90th percentile)",
        f"  {result.trials} trials x {result.iterations} iterations{per}, {result.at_once} at "
        f"once on {result.cores:g} cores: ~{result.iterations_per_s:.3g} iterations/s, "
        f"~{_minutes(result.wall_s)}; ~{100 * result.outside:.0f}% of the trials' time "
        f"outside train(); the pace is set by {result.bound}",
    ]


def _minutes(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"
