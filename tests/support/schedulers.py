"""The scheduler and searcher `workbench run` builds for a resolved experiment."""

from __future__ import annotations

from typing import Any

from workbench.experiment.resolve import ResolvedExperiment
from workbench.run.schedulers import scheduler, search_algorithm


def built_scheduler(resolved: ResolvedExperiment) -> Any:
    exp = resolved.experiment
    return scheduler(exp.scheduler, resolved.tune_space, seed=exp.seed, keys=resolved.tune_keys)


def built_searcher(resolved: ResolvedExperiment) -> Any:
    return search_algorithm(resolved.experiment, resolved.results_dir, resolved.tune_keys)
