"""The trials a run would start, drawn without running anything (`workbench run --dry-run`)."""

from __future__ import annotations

from typing import Any

from ray.tune.search import Searcher, SearchGenerator

from workbench.experiment.resolve import ResolvedExperiment
from workbench.names import trial_name
from workbench.run.schedulers import search_algorithm
from workbench.trial.config import Configure, build_config, param_space


def planned_trials(
    resolved: ResolvedExperiment, configure: Configure | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """The trials `workbench.run.launch.run` would start: (name, searched values by their
    public names), drawn as the run draws them, by the same searcher seeded the same over
    the same param_space. Starts no Ray and writes nothing."""
    config = build_config(resolved.experiment, resolved.defaults, configure)
    space = param_space(resolved.tune_space, config)
    if resolved.experiment.search.type == "optuna":
        import optuna

        # Its study lives in memory for the draw: Optuna's "A new study created" is noise.
        optuna.logging.set_verbosity(optuna.logging.WARNING)
    algorithm = search_algorithm(resolved.experiment, resolved.results_dir, resolved.tune_keys)
    if isinstance(algorithm, Searcher):  # as Tune wraps a searcher
        algorithm = SearchGenerator(algorithm)
    algorithm.set_search_properties(None, None, space)
    exp = resolved.experiment
    assert config.algo_class is not None
    algorithm.add_configurations(
        {
            exp.name: {
                "run": config.algo_class,  # named as the run names its trainable
                "config": space,
                "num_samples": exp.population,
            }
        }
    )
    public = {key: name for name, key in resolved.tune_keys.items()}
    out: list[tuple[str, dict[str, Any]]] = []
    while (trial := algorithm.next_trial()) is not None:
        values = {public[k]: v for k, v in trial.config.items() if k in public}
        out.append((trial_name(trial), {n: values[n] for n in resolved.tune_keys if n in values}))
    return out
