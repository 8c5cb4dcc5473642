"""The trials a run would start, drawn without running anything (`workbench run --dry-run`)."""

from __future__ import annotations

from typing import Any

from workbench.experiment.resolve import ResolvedExperiment
from workbench.run.schedulers import search_algorithm
from workbench.trial.config import Configure, build_config
from workbench.trial.draws import draw_trials


def planned_trials(
    resolved: ResolvedExperiment, configure: Configure | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """The trials `workbench.run.launch.run` would start: (name, searched values by their
    public names), drawn as the run draws them, by the same searcher seeded the same over
    the same param_space. Starts no Ray and writes nothing."""
    config = build_config(resolved.experiment, resolved.defaults, configure)
    if resolved.experiment.search.type == "optuna":
        import optuna

        # Its study lives in memory for the draw: Optuna's "A new study created" is noise.
        optuna.logging.set_verbosity(optuna.logging.WARNING)
    algorithm = search_algorithm(resolved.experiment, resolved.results_dir, resolved.tune_keys)
    return draw_trials(resolved, config, algorithm)
