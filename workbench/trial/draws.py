"""The trials a run starts, drawn as its searcher draws them, without running anything:
`workbench run --dry-run`'s list and the plan's forecast of what the population pays."""

from __future__ import annotations

from typing import Any

from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.tune.search import BasicVariantGenerator, SearchAlgorithm, Searcher, SearchGenerator

from workbench.experiment.resolve import ResolvedExperiment
from workbench.experiment.schema import Experiment
from workbench.names import trial_name
from workbench.trial.config import param_space


def search_seed(exp: Experiment) -> int:
    """The searcher's seed: the search section's own, else the experiment's."""
    return exp.search.seed if exp.search.seed is not None else exp.seed


def random_search(exp: Experiment) -> BasicVariantGenerator:
    """Random (or grid) search, seeded by the experiment: the same draws on every start."""
    return BasicVariantGenerator(
        random_state=search_seed(exp),
        max_concurrent=exp.max_concurrent or 0,
        constant_grid_search=False,
    )


def draw_trials(
    resolved: ResolvedExperiment,
    config: AlgorithmConfig,
    algorithm: SearchAlgorithm | Searcher,
) -> list[tuple[str, dict[str, Any]]]:
    """(name, searched values by their public names) of each trial ``algorithm`` starts
    over the run's param_space of ``config``, in the run's order. Starts no Ray and
    writes nothing."""
    space = param_space(resolved.tune_space, config)
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
