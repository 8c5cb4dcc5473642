"""The trial scheduler and the searcher of an experiment (PBT/PB2/ASHA/FIFO; random/grid/Optuna)."""

from __future__ import annotations

import random
from functools import partial
from typing import Any

from ray.tune.schedulers import (
    ASHAScheduler,
    FIFOScheduler,
    PopulationBasedTraining,
    TrialScheduler,
)
from ray.tune.schedulers.pb2 import PB2
from ray.tune.search import BasicVariantGenerator, ConcurrencyLimiter, SearchAlgorithm, Searcher

from workbench.resolve import ResolvedExperiment
from workbench.schema import RETURN_METRIC
from workbench.search_space import ParamSpec, clamp_config

TIME_ATTR = "training_iteration"


def _clamped(config: dict[str, Any], space: dict[str, ParamSpec]) -> dict[str, Any]:
    return clamp_config(config, space)


def scheduler(resolved: ResolvedExperiment) -> TrialScheduler:
    exp = resolved.experiment
    section = exp.scheduler
    space = resolved.tune_space
    # PBT's exploit/explore choices use Python's global random module.
    random.seed(exp.seed)
    if section.type == "pbt":
        return PopulationBasedTraining(
            time_attr=TIME_ATTR,
            metric=RETURN_METRIC,
            mode="max",
            perturbation_interval=section.perturbation_interval,
            burn_in_period=section.burn_in_period,
            hyperparam_mutations={key: spec.mutation() for key, spec in space.items()},
            quantile_fraction=section.quantile_fraction,
            resample_probability=section.resample_probability,
            perturbation_factors=section.perturbation_factors,
            custom_explore_fn=partial(_clamped, space=space),
            synch=section.synch,
            # RLlib reports the return only once an episode has ended: results without
            # it are skipped instead of failing the trial.
            require_attrs=False,
        )
    if section.type == "pb2":
        return PB2(
            time_attr=TIME_ATTR,
            metric=RETURN_METRIC,
            mode="max",
            perturbation_interval=section.perturbation_interval,
            quantile_fraction=section.quantile_fraction,
            require_attrs=False,
            # PB2 casts new values to the old value's type: bounds as floats.
            hyperparam_bounds={
                key: [float(b) for b in spec.bounds]  # type: ignore[union-attr]
                for key, spec in space.items()
            },
            custom_explore_fn=partial(_clamped, space=space),
        )
    if section.type == "asha":
        return ASHAScheduler(
            time_attr=TIME_ATTR,
            metric=RETURN_METRIC,
            mode="max",
            max_t=section.max_t,
            grace_period=section.grace_period,
            reduction_factor=section.reduction_factor,
            brackets=section.brackets,
        )
    return FIFOScheduler()  # type: ignore[no-untyped-call]


def search_algorithm(resolved: ResolvedExperiment) -> SearchAlgorithm | Searcher:
    exp = resolved.experiment
    seed = exp.search.seed if exp.search.seed is not None else exp.seed
    if exp.search.type == "optuna":
        from ray.tune.search.optuna import OptunaSearch

        searcher: Searcher = OptunaSearch(metric=RETURN_METRIC, mode="max", seed=seed)
        if exp.max_concurrent:
            return ConcurrencyLimiter(searcher, max_concurrent=exp.max_concurrent)
        return searcher
    return BasicVariantGenerator(
        random_state=seed,
        max_concurrent=exp.max_concurrent or 0,
        constant_grid_search=False,
    )
