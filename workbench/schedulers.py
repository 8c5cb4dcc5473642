"""The trial scheduler and the searcher of an experiment (PBT/PB2/ASHA/FIFO; random/grid/Optuna)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
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

# (record) -> None; a record describes one exploit (see ExploitRecorder._log_config_on_step).
LineageListener = Callable[[dict[str, Any]], None]


class ExploitRecorder:
    """Mixin for PBT and PB2: tells listeners about every exploit as it happens.

    Tune writes exploits only to text files (pbt_global.txt) that nothing reads back;
    the MLflow tracker needs them live, with the hyperparameters before and after.
    """

    _hyperparam_keys: tuple[str, ...] = ()
    _deciding: tuple[str, int] | None = None

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> str:
        # Which result an exploit is decided on: Tune's own log gives the iteration
        # before it (the trial's last_result is updated only after the decision).
        self._deciding = (trial.trial_id, int(result.get(TIME_ATTR, 0)))
        try:
            decision: str = super().on_trial_result(  # type: ignore[misc]
                tune_controller, trial, result
            )
            return decision
        finally:
            self._deciding = None

    def add_lineage_listener(self, listener: LineageListener) -> None:
        listeners: list[LineageListener] = self.__dict__.setdefault("_lineage_listeners", [])
        listeners.append(listener)

    def _log_config_on_step(
        self,
        trial_state: Any,
        new_state: Any,
        trial: Any,
        trial_to_clone: Any,
        new_config: dict[str, Any],
    ) -> None:
        super()._log_config_on_step(  # type: ignore[misc]
            trial_state, new_state, trial, trial_to_clone, new_config
        )
        keys = self._hyperparam_keys

        def pick(config: dict[str, Any]) -> dict[str, Any]:
            return {k: config.get(k) for k in keys}

        own = self._deciding is not None and self._deciding[0] == trial.trial_id
        record = {
            "time": time.time(),
            # The iteration whose result the exploit was decided on, and whether that
            # was the target's own result (asynchronous PBT) or another trial's
            # (synchronous PBT decides for paused trials at the last one's result).
            "exploit_iteration": self._deciding[1]
            if own and self._deciding is not None
            else int(trial.last_result.get(TIME_ATTR, 0)),
            "decided_on_own_result": own,
            "target": trial.trial_id,
            "source": trial_to_clone.trial_id,
            # The same iterations as Tune's pbt_global.txt.
            "target_iteration": int(trial.last_result.get(TIME_ATTR, 0)),
            "source_iteration": int(trial_to_clone.last_result.get(TIME_ATTR, 0)),
            "old": pick(trial.config),
            "donor": pick(trial_to_clone.config),
            "new": pick(new_config),
        }
        for listener in self.__dict__.get("_lineage_listeners", []):
            listener(record)


class WorkbenchPBT(ExploitRecorder, PopulationBasedTraining):
    pass


class WorkbenchPB2(ExploitRecorder, PB2):
    pass


def _clamped(config: dict[str, Any], space: dict[str, ParamSpec]) -> dict[str, Any]:
    return clamp_config(config, space)


def scheduler(resolved: ResolvedExperiment) -> TrialScheduler:
    exp = resolved.experiment
    section = exp.scheduler
    space = resolved.tune_space
    # PBT's exploit/explore choices use Python's global random module.
    random.seed(exp.seed)
    if section.type == "pbt":
        pbt = WorkbenchPBT(
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
        pbt._hyperparam_keys = tuple(space)
        return pbt
    if section.type == "pb2":
        pb2 = WorkbenchPB2(
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
        pb2._hyperparam_keys = tuple(space)
        return pb2
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
