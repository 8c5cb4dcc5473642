"""The trial scheduler and the searcher of an experiment (PBT/PB2/ASHA/FIFO; random/grid/Optuna).

The classes are Tune's with the workbench's fixes (``workbench.tune_ext``); this module
builds them from the experiment's sections.
"""

from __future__ import annotations

import random
from functools import partial
from pathlib import Path
from typing import Any

from ray.tune.schedulers import TrialScheduler
from ray.tune.search import ConcurrencyLimiter, SearchAlgorithm, Searcher

from workbench.experiment.schema import Experiment, SchedulerSection
from workbench.experiment.search_space import ParamSpec, clamp_config
from workbench.names import SCORE_METRIC
from workbench.trial.candidates import CANDIDATE_BEST_METRIC, CANDIDATE_RETURN_METRIC
from workbench.trial.draws import random_search, search_seed
from workbench.tune_ext.optuna_study import StudySearch
from workbench.tune_ext.pbt import WorkbenchASHA, WorkbenchFIFO, WorkbenchPBT
from workbench.tune_ext.replay import replay_scheduler
from workbench.tune_ext.scheduler_state import TIME_ATTR


def __getattr__(name: str) -> Any:
    """Tune's scheduler classes lived here before ``workbench.tune_ext.pbt``: a results
    folder from then names them here in its pickled tuner."""
    from workbench.tune_ext import pbt

    if name.startswith("__") or not hasattr(pbt, name):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(pbt, name)


def _clamped(config: dict[str, Any], space: dict[str, ParamSpec]) -> dict[str, Any]:
    return clamp_config(config, space)


def scheduler(
    section: SchedulerSection,
    space: dict[str, ParamSpec],
    *,
    seed: int,
    keys: dict[str, str],
) -> TrialScheduler:
    """The experiment's trial scheduler: its scheduler ``section`` over the search
    ``space`` keyed as Tune's param_space spells it (``keys``: public name -> that key,
    which a replay's schedule needs), with the experiment's ``seed``."""
    # PBT's exploit/explore choices use Python's global random module.
    random.seed(seed)
    if section.type in ("pbt", "pb2"):
        # Decisions wait for a result with the metric: with rank_on: evaluation, one
        # with a fresh short evaluation of the member's policy.
        ranked = CANDIDATE_RETURN_METRIC if section.rank_on == "evaluation" else SCORE_METRIC
        alpha = section.exploit_alpha if section.exploit_test == "welch" else None
    if section.type == "pbt":
        pbt = WorkbenchPBT(
            time_attr=TIME_ATTR,
            metric=ranked,
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
        pbt.configure(
            hyperparam_keys=tuple(space),
            exploit_alpha=alpha,
            exploit_min_gain=section.exploit_min_gain,
            spare_improving=section.spare_improving,
        )
        pbt.explore_by(space)
        return pbt
    if section.type == "pb2":
        from workbench.tune_ext.pb2_scheduler import WorkbenchPB2  # scikit-learn: PB2's own

        pb2 = WorkbenchPB2(
            time_attr=TIME_ATTR,
            metric=ranked,
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
            synch=section.synch,
        )
        pb2.configure(
            hyperparam_keys=tuple(space),
            exploit_alpha=alpha,
            exploit_min_gain=section.exploit_min_gain,
            spare_improving=section.spare_improving,
        )
        pb2.burn_in(section.burn_in_period)
        pb2.explore_in_log(key for key, spec in space.items() if "log" in spec.kind)
        return pb2
    if section.type == "replay":
        return replay_scheduler(section, keys)
    if section.type == "asha":
        return WorkbenchASHA(
            time_attr=TIME_ATTR,
            metric=SCORE_METRIC,
            mode="max",
            max_t=section.max_t,
            grace_period=section.grace_period,
            reduction_factor=section.reduction_factor,
            brackets=section.brackets,
        )
    return WorkbenchFIFO()


def search_algorithm(
    exp: Experiment, results_dir: Path, keys: dict[str, str]
) -> SearchAlgorithm | Searcher:
    """How the experiment's trials are drawn: Optuna's study in ``results_dir`` (its
    parameters by public name, ``keys`` mapping them to Tune's), or random search."""
    if exp.search.type == "optuna":
        # Its study in the results folder (optuna.db), which Optuna's tools open.
        # The study's value of a trial: its best short evaluation, the figure that
        # nominates the population's result (its training score without evaluations).
        metric = CANDIDATE_BEST_METRIC if exp.evaluation.every else SCORE_METRIC
        searcher: Searcher = StudySearch(
            results_dir,
            exp.name,
            metric=metric,
            mode="max",
            seed=search_seed(exp),
            n_startup_trials=exp.search.startup_trials,
            names={key: name for name, key in keys.items() if key != name},
        )
        if exp.max_concurrent:
            return ConcurrencyLimiter(searcher, max_concurrent=exp.max_concurrent)
        return searcher
    return random_search(exp)
