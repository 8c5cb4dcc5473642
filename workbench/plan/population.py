"""A population's pace before it runs: its train() calls, iterations per second and the
share of its trials' time outside ``train()``, forecast from one trial's costs and the cores
the trials share.

The model (docs/resources.md, "The population forecast") simulates the run result by result
(``workbench.plan.simulate``). A trial's processes start (``start`` CPU seconds each: they
import torch and RLlib and build their part of the algorithm; with the plan's probe, priced
from a fresh process's start measured here; dearer by a share that grows with the trial
processes per core starting and running alongside), then it loops: ``train()``
(sampling and learning, at the cost its drawn hyperparameters give, dearer by a share that
grows with the trial processes per core of the trials then under way), the driver handles
the result (``driver`` CPU seconds on one core, taken before the trials': Ray runs its
workers at niceness 15), and the trial does its own work for the result before its next
``train()``: ``result_cpu`` CPU seconds on the shared cores (handing the result over, the
checkpoint Tune asks for), which stretch with the crowd as a ``train()`` does, and a wait
that takes no CPU (``result`` seconds, and a part that grows with the crowd). A member that has its
iterations leaves the crowd: the last members run on emptier cores. The trials share what
the driver leaves of the cores equally, none faster than its own time with a core per
process.

The trials differ: each draws its hyperparameters, and ``num_epochs`` or ``minibatch_size``
can make one ``train()`` ten times another's. The population's ``n`` trials take what
their own first draws cost, in the order the run starts them, where the plan draws them
as the run's seeded searcher will; otherwise ``n`` evenly spaced quantiles of the
iteration's cost over the searched distribution, in several orders. The forecast is the
mean of those runs. Under PBT or PB2 the simulated trials
decide as ``workbench.tune_ext.pbt`` does, ranked by how far they have trained plus a
noise, among the members not yet finished (Ray's PBT ranks no other): a trial behind
mostly restarts from a leader's checkpoint, skipping iterations and taking the leader's
values, which PBT's explore then perturbs (``CostExplore``: a clone pays its new values'
cost), and some restart from one behind them.

The constants (``workbench.plan.constants``) were measured or fitted on this project's machine
with ``benchmarks/population_scale.py --calibrate`` (docs/benchmarks/population-scale.md: the
runs, and the rounds reported on after); the iteration's cost comes from the plan's
throughput figures (documented rates, or ``--probe``'s measurement). With ``--probe`` a
crowded ``train()`` and the short evaluations inside it are priced from the machine at hand
(``workbench.plan.start_probe``): a ``train()`` among two trial processes a core costs what
the probe measured there, in proportion below that crowd and no more above it, and each
``train()`` pays its share of the evaluations at the env's step limit."""

from __future__ import annotations

import math
import random
import statistics
import zlib
from dataclasses import asdict, dataclass, replace
from typing import Any

from workbench.experiment.resolve import ResolvedExperiment
from workbench.experiment.schema import StopSection
from workbench.experiment.search_space import ParamSpec, SearchSpace
from workbench.plan.constants import MEASURED, Constants
from workbench.plan.simulate import Costs, Exploits, simulate
from workbench.plan.throughput import Throughput
from workbench.trial.draws import draw_trials, random_search

# The values that set a train()'s cost: the batch, the epochs and the minibatch.
Point = tuple[float, float, float]
_COST_KEYS = ("train_batch_size_per_learner", "num_epochs", "minibatch_size")

# Draws from the search space's initial distribution for the iteration's cost.
_DRAWS = 2000
_DEFAULT_ITERATIONS = 100
# Simulated runs a forecast averages (fewer for large populations: at most about this
# many results simulated in all), and the busy share of the driver or of the cores above
# which it is what sets the pace.
_ROUNDS = 8
_RESULTS_SIMULATED = 200_000
_BOUND = 0.9


@dataclass(frozen=True)
class TrialCosts:
    """One trial's costs in CPU seconds (see the module's docstring)."""

    processes: int  # main process, env runners, learners: each starts torch and RLlib
    start_s: float  # per process, with no other trial processes running
    # One train() over the searched hyperparameters, cheapest first: (CPU s of all the
    # trial's processes, wall s with a core per process).
    iterations: tuple[tuple[float, float], ...]
    result_s: float
    result_s_per_process: float
    crowd_exponent: float
    train_per_process: float
    driver_s: float
    ray_cores_per_node: float
    clone_share: float
    source: str  # where the iteration's cost comes from
    score_noise: float = 0.0
    learn_exponent: float = 0.0  # a train()'s progress: (its CPU / the draws' mean) ** this
    score_ceiling: float = math.inf  # the progress past which a score rises no further
    result_cpu_s: float = 0.0  # the trial's CPU for each result outside train()
    start_alone_s: float = 0.0  # the constants' fresh process alone (start_s's reference)
    start_per_process: float = 0.0  # a start's CPU more per trial process a core
    end_s: float = 0.0  # the run's end after the population's last result, wall s
    # The trial processes a core past which a train() costs no more (the probe's crowd,
    # where it measured train_per_process; inf: the constants' line, without a bound).
    crowd_saturation: float = math.inf
    evaluation_s: float = 0.0  # the short evaluations' CPU a train(), in iterations' costs
    # The probe's fresh process alone, CPU s, that start_s was priced from (None: start_s is
    # the documented constant, measured on another day).
    start_measured_s: float | None = None
    # One train() of each of the population's own first draws, in the order the run starts
    # them (the seeded searcher's; None where not drawn): what the trials pay, rather than
    # evenly spaced quantiles of the distribution, which a small population rarely meets.
    drawn: tuple[tuple[float, float], ...] | None = None
    # The values each of ``iterations`` and of ``drawn`` costs, and PBT's explore of them:
    # a clone then pays its explored values' cost, not its donor's (None: not known).
    points: tuple[Point, ...] | None = None
    drawn_points: tuple[Point, ...] | None = None
    explore: CostExplore | None = None

    @property
    def crowd_measured(self) -> bool:
        """train_per_process and crowd_saturation are the probe's crowd (a bound)."""
        return math.isfinite(self.crowd_saturation)

    @property
    def crowd_ratio(self) -> float:
        """A train()'s cost among the probe's crowd over its cost alone (inf: no crowd)."""
        return 1.0 + self.train_per_process * self.crowd_saturation

    @property
    def iteration_cpu_s(self) -> float:
        return sum(c for c, _ in self.iterations) / len(self.iterations)

    @property
    def iteration_wall_s(self) -> float:
        return sum(w for _, w in self.iterations) / len(self.iterations)

    def quantiles(self, n: int) -> list[tuple[float, float]]:
        """n evenly spaced quantiles of the iteration's cost: the trials of a wave."""
        return _spaced(self.iterations, n)

    def trial_draws(self, n: int) -> tuple[list[tuple[float, float]], bool]:
        """The train() cost of each of ``n`` trials, and whether in the run's own order:
        the population's own first draws where they are known for ``n`` trials, else
        evenly spaced quantiles (to be shuffled)."""
        if self.drawn is not None and len(self.drawn) == n:
            return list(self.drawn), True
        return self.quantiles(n), False

    def trial_points(self, n: int) -> list[Point] | None:
        """The values of each of ``trial_draws(n)``'s costs (None: not known)."""
        if self.drawn is not None and len(self.drawn) == n:
            return list(self.drawn_points) if self.drawn_points is not None else None
        return None if self.points is None else _spaced(self.points, n)


def _spaced(sorted_items: tuple[Any, ...], n: int) -> list[Any]:
    """n evenly spaced quantiles of items sorted by cost."""
    count = len(sorted_items)
    return [sorted_items[min(int((i + 0.5) / n * count), count - 1)] for i in range(n)]


@dataclass(frozen=True)
class CostExplore:
    """PBT's explore step (``ParamSpec.perturb``, the run's scheduler's) on the searched
    values that set a train()'s cost, and what a train() then costs."""

    specs: tuple[tuple[int, ParamSpec], ...]  # (its place in a Point, its block)
    resample_probability: float
    factors: tuple[float, ...]
    rate: Throughput
    config: Any

    def __call__(self, point: Any, rng: random.Random) -> tuple[Point, tuple[float, float]]:
        values = list(point)
        for k, spec in self.specs:
            values[k] = float(
                spec.perturb(
                    values[k],
                    resample_probability=self.resample_probability,
                    factors=self.factors,
                    rng=rng,
                )[0]
            )
        new: Point = (values[0], values[1], values[2])
        return new, _one_train(self.rate, self.config, *new)


def cost_explore(
    space: SearchSpace, config: Any, rate: Throughput, scheduler: Any
) -> CostExplore | None:
    """PBT's explore of the searched cost values (None: not PBT, or none searched, or
    train()'s cost unknown). PB2 picks its new values from its model of the scores, which
    the plan cannot know: its clones keep their donor's cost."""
    specs = tuple((k, space[name]) for k, name in enumerate(_COST_KEYS) if name in space)
    if scheduler.type != "pbt" or not specs or rate.learner_costs is None or rate.per_core <= 0:
        return None
    return CostExplore(
        specs=specs,
        resample_probability=float(scheduler.resample_probability),
        factors=tuple(float(f) for f in scheduler.perturbation_factors),
        rate=rate,
        config=config,
    )


@dataclass(frozen=True)
class Forecast:
    trials: int
    at_once: int
    cores: float
    iterations: int  # per trial (under a budget alone, the budget's share of a trial)
    iterations_given: bool  # False: no stop rule in iterations; a nominal count
    results: float  # train() calls in all (PBT's clones skip some)
    wall_s: float
    outside: float  # share of the trials' slot time outside train()
    before: float  # the part of it before the trials' first train()
    after: float  # the part after their last result: the first to finish waiting for the last
    bound: str  # what sets the pace of the (first) wave
    costs: TrialCosts
    budget: int | None = None  # train() calls of the whole population (population_env_steps)
    # Under a stop in iterations per trial: the same population with those train() calls as
    # a budget for the whole population instead, and that budget in env steps.
    pooled: Forecast | None = None
    pooled_env_steps: int | None = None
    clones: float = 0.0  # PBT's restarts from a donor (the model's)
    clones_back: float = 0.0  # those to a donor's checkpoint behind the trial's iteration
    # A trial process's start among the first trials, which start together, as the
    # simulated runs priced it (CPU s), and those trials' processes.
    start_s: float = 0.0
    starting: int = 0

    @property
    def iterations_per_s(self) -> float:
        return self.results / self.wall_s if self.wall_s > 0 else 0.0


def iteration_costs(
    space: SearchSpace, config: Any, rate: Throughput
) -> tuple[tuple[float, float], ...] | None:
    """(CPU s, wall s) of one train() of an on-policy learner for draws of the searched
    batch, epochs and minibatch from their initial distribution, cheapest first; None
    where the throughput figures do not give it (a replaying learner). A GPU learner's
    time counts as the CPU time of the process that waits on it."""
    priced = iteration_draws(space, config, rate)
    return None if priced is None else tuple(cost for cost, _ in priced)


def iteration_draws(
    space: SearchSpace, config: Any, rate: Throughput
) -> list[tuple[tuple[float, float], Point]] | None:
    """``iteration_costs`` with the values each is the cost of, in the same order."""
    if rate.learner_costs is None or rate.per_core <= 0:
        return None
    fixed = _fixed(config)
    draws = [_draws(space, name, base) for name, base in fixed.items()]
    points: list[Point] = [(b, e, m) for b, e, m in zip(*draws, strict=True)]
    return sorted((_one_train(rate, config, *point), point) for point in points)


def drawn_costs(
    drawn: list[dict[str, Any]], config: Any, rate: Throughput
) -> tuple[tuple[float, float], ...] | None:
    """(CPU s, wall s) of one train() of each of these trials (their searched values by
    public name; the config's own where not searched), in their order; None as for
    ``iteration_costs``."""
    if rate.learner_costs is None or rate.per_core <= 0:
        return None
    return tuple(_one_train(rate, config, *point) for point in drawn_points(drawn, config))


def drawn_points(drawn: list[dict[str, Any]], config: Any) -> tuple[Point, ...]:
    """The values that set each of these trials' train() cost (``drawn_costs``')."""
    fixed = _fixed(config)
    batch, epochs, minibatch = _COST_KEYS
    return tuple(
        (
            float(values.get(batch, fixed[batch])),
            float(values.get(epochs, fixed[epochs])),
            float(values.get(minibatch, fixed[minibatch])),
        )
        for values in drawn
    )


def _fixed(config: Any) -> dict[str, float]:
    """The config's own batch, epochs and minibatch (what a trial not searching them uses)."""
    return {
        "train_batch_size_per_learner": float(config.train_batch_size_per_learner),
        "num_epochs": float(getattr(config, "num_epochs", 1) or 1),
        "minibatch_size": float(
            getattr(config, "minibatch_size", None) or config.train_batch_size_per_learner
        ),
    }


def _one_train(
    rate: Throughput, config: Any, batch: float, epochs: float, minibatch: float
) -> tuple[float, float]:
    """(CPU s, wall s) of one train() at this batch, epochs and minibatch."""
    assert rate.learner_costs is not None
    per_sample, per_minibatch = rate.learner_costs
    learners = max(int(getattr(config, "num_learners", 0) or 0), 1)
    runners = max(rate.runners, 1)
    sample_s = batch * learners / rate.per_core
    minibatches = math.ceil(batch / min(minibatch, batch))
    learn_s = batch * rate.learner_call_s_per_sample
    learn_s += epochs * (batch * per_sample + minibatches * per_minibatch)
    # The short evaluations, in the trial's main process (rate.evaluation_s: their CPU a
    # train(), the probe's).
    own = rate.evaluation_s
    return (sample_s + learn_s * learners + own, sample_s / runners + learn_s + own)


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
    priced = iteration_draws(space, config, rate)
    if priced is None:
        return None
    measured = rate.start_cpu_s
    constants = start_priced(constants, measured)
    per_core, slope = crowd_priced(rate, constants)
    return TrialCosts(
        processes=processes,
        iterations=tuple(cost for cost, _ in priced),
        points=tuple(point for _, point in priced),
        source="measured by --probe" if rate.measured else "documented rates",
        start_measured_s=measured,
        **{**asdict(constants), "train_per_process": slope},
        crowd_saturation=per_core,
        evaluation_s=rate.evaluation_s,
    )


def crowd_priced(rate: Throughput, constants: Constants = MEASURED) -> tuple[float, float]:
    """(the processes a core past which a train() costs no more, its share dearer a process
    a core below that): from the probe's crowd where it measured one (a train() among that
    many processes a core costs its ratio to one alone, and as much among more), else the
    constants' line."""
    if rate.crowd is None:
        return math.inf, constants.train_per_process
    per_core, ratio = rate.crowd
    return per_core, max(ratio - 1.0, 0.0) / per_core


def start_priced(constants: Constants, alone_s: float | None) -> Constants:
    """``constants`` with a trial's start priced from a fresh process's start measured
    alone here (``alone_s``, the probe's; None: as measured then): ``start_s`` times it over
    the constants' own ``start_alone_s``, so that the start moves with the machine."""
    if alone_s is None or not constants.start_alone_s > 0:
        return constants
    return replace(constants, start_s=constants.start_s * alone_s / constants.start_alone_s)


def with_constants(costs: TrialCosts, constants: Constants) -> TrialCosts:
    """``costs`` with every constant of ``constants`` (TrialCosts has a field of each): a
    crowded train() priced by their line, not by a crowd the probe measured."""
    return replace(costs, **asdict(constants), crowd_saturation=math.inf)


def iterations_of(stop: StopSection, batch: float) -> int | None:
    """Iterations per trial the stop rule sets (None: it sets none)."""
    counts = []
    if stop.iterations is not None:
        counts.append(stop.iterations)
    if stop.env_steps is not None and batch > 0:
        counts.append(math.ceil(stop.env_steps / batch))
    return min(counts) if counts else None


def budget_of(stop: StopSection, batch: float) -> int | None:
    """The train() calls of the whole population the stop rule allows (None: no budget):
    ``population_env_steps`` counts each result's own sampled steps, one batch a call."""
    if stop.population_env_steps is None or batch <= 0:
        return None
    return math.ceil(stop.population_env_steps / batch)


def exploits_of(section: Any) -> Exploits | None:
    """PBT's or PB2's decision rule from an experiment's scheduler section, for the
    simulated runs (None: no exploits)."""
    if section.type not in ("pbt", "pb2"):
        return None
    return Exploits(
        interval=int(section.perturbation_interval),
        quantile=float(section.quantile_fraction),
        burn_in=int(section.burn_in_period),
        tested=getattr(section, "exploit_test", "none") != "none"
        or float(getattr(section, "exploit_min_gain", 0.0) or 0.0) > 0
        or bool(getattr(section, "spare_improving", False)),
    )


def cores_left(cores: float, nodes: int, ray_cores_per_node: float) -> float:
    """The cores Ray's own processes on ``nodes`` leave the trials (at least half of them):
    the cores the simulated runs share, and those a crowd of trial processes is counted
    against (the start's and a train()'s growth with the processes a core)."""
    return max(cores - nodes * ray_cores_per_node, cores / 2)


def forecast(
    costs: TrialCosts,
    *,
    trials: int,
    at_once: int,
    cores: float,
    iterations: int | None,
    exploits: Exploits | None = None,
    nodes: int = 1,
    budget: int | None = None,
) -> Forecast:
    """The population's wall time, train() calls and share outside train(): the mean of
    simulated runs (``workbench.plan.simulate``) over orders of the trials' draws, on what
    Ray's own processes on the ``nodes`` leave of the ``cores``, each trial running
    ``iterations`` or the population ``budget`` train() calls in all, whichever ends first."""
    if iterations is not None:
        count = iterations
    elif budget is not None:
        count = max(1, math.ceil(budget / max(trials, 1)))
    else:
        count = _DEFAULT_ITERATIONS
    slots = min(at_once, trials)
    left = cores_left(cores, nodes, costs.ray_cores_per_node)
    sim_costs = Costs(
        processes=costs.processes,
        start_s=costs.start_s,
        start_per_process=costs.start_per_process,
        end_s=costs.end_s,
        rest_s=costs.result_s,
        driver_s=costs.driver_s,
        train_per_process=costs.train_per_process,
        crowd_saturation=costs.crowd_saturation,
        rest_s_per_process=costs.result_s_per_process,
        crowd_exponent=costs.crowd_exponent,
        result_cpu_s=costs.result_cpu_s,
    )
    draws, in_order = costs.trial_draws(trials)
    points = costs.trial_points(trials)
    rounds = max(1, min(_ROUNDS, _RESULTS_SIMULATED // max(trials * count, 1)))
    runs = []
    for seed in range(rounds):
        order = list(range(trials))
        if not in_order:
            random.Random(seed).shuffle(order)
        runs.append(
            simulate(
                sim_costs,
                [draws[k] for k in order],
                points=None if points is None else [points[k] for k in order],
                explore=costs.explore if points is not None else None,
                at_once=at_once,
                cores=left,
                iterations=count if budget is None or iterations is not None else None,
                exploits=exploits,
                seed=seed,
                clone_share=costs.clone_share,
                score_noise=costs.score_noise,
                learn_exponent=costs.learn_exponent,
                score_ceiling=costs.score_ceiling,
                budget=budget,
            )
        )
    wall = statistics.fmean(r.wall_s for r in runs)
    train = statistics.fmean(r.train_s for r in runs)
    driver = statistics.fmean(r.driver_busy for r in runs)
    busy = statistics.fmean(r.cores_busy for r in runs)
    if driver >= _BOUND:
        bound = "the driver"
    elif busy >= _BOUND:
        bound = "the cores"
    else:
        bound = "each trial's own time"
    return Forecast(
        trials=trials,
        at_once=at_once,
        cores=cores,
        iterations=count,
        iterations_given=iterations is not None or budget is not None,
        results=statistics.fmean(r.results for r in runs),
        wall_s=wall,
        outside=max(0.0, 1.0 - train / (slots * wall)) if wall else 0.0,
        before=statistics.fmean(r.before_s for r in runs) / (slots * wall) if wall else 0.0,
        after=statistics.fmean(r.after_s for r in runs) / (slots * wall) if wall else 0.0,
        bound=bound,
        costs=costs,
        budget=budget,
        clones=statistics.fmean(r.clones for r in runs),
        clones_back=statistics.fmean(r.clones_back for r in runs),
        start_s=sim_costs.start(costs.processes * slots / left),
        starting=costs.processes * slots,
    )


def first_draws(resolved: ResolvedExperiment, config: Any) -> list[dict[str, Any]] | None:
    """Each trial's searched values as the run will draw them (its seeded searcher over
    the same space, as `workbench run --dry-run` draws them), in the run's order; None
    for Optuna, whose later draws follow the results."""
    if resolved.experiment.search.type == "optuna":
        return None
    return [
        values for _, values in draw_trials(resolved, config, random_search(resolved.experiment))
    ]


def forecast_population(
    resolved: ResolvedExperiment,
    config: Any,
    rate: Throughput,
    *,
    processes: int,
    cores: float,
    nodes: int,
    trials: int,
    at_once: int,
) -> Forecast | None:
    """The population's pace on a cluster's ``cores`` (None where train()'s cost is
    unknown), each trial priced at its own first draw where the plan can draw it
    (``first_draws``); under a stop in iterations per trial, with the same train() calls
    as a budget for the whole population beside it (``Forecast.pooled``)."""
    exp = resolved.experiment
    costs = trial_costs(resolved.search_space, config, rate, processes=processes)
    if costs is None:
        return None
    drawn = first_draws(resolved, config)
    if drawn:
        costs = replace(
            costs,
            drawn=drawn_costs(drawn, config, rate),
            drawn_points=drawn_points(drawn, config),
        )
    costs = replace(costs, explore=cost_explore(resolved.search_space, config, rate, exp.scheduler))
    batch = float(config.train_batch_size_per_learner)
    iterations = iterations_of(exp.stop, batch)
    budget = budget_of(exp.stop, batch)
    exploits = exploits_of(exp.scheduler)
    common: dict[str, Any] = {
        "trials": trials,
        "at_once": at_once,
        "cores": cores,
        "nodes": nodes,
        "exploits": exploits,
    }
    each = forecast(costs, iterations=iterations, budget=budget, **common)
    if (
        iterations is None
        or budget is not None
        or not 2 <= trials <= at_once
        or exp.scheduler.type == "asha"
        or cores < at_once * processes
    ):
        return each
    # Where every trial process has a core of its own, the slots of the members that
    # finish first stand idle until the slowest is done; a budget of the same train()
    # calls (PBT's skipped iterations sample nothing) lets them go on instead, and ends
    # every member at once. On shared cores the first to finish hand their cores to the
    # others, and the model does not tell the two apart reliably (docs/resources.md).
    calls = math.ceil(each.results)
    pooled = forecast(costs, iterations=None, budget=calls, **common)
    return replace(each, pooled=pooled, pooled_env_steps=int(calls * batch))
