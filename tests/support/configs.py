"""The RLlib config a trial of an experiment file gets, as `workbench run` builds it."""

from __future__ import annotations

from pathlib import Path

from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

from workbench.experiment.resolve import load_and_resolve
from workbench.trial.config import algorithm_config


def config_of_file(path: Path, *, check_results: bool = False) -> AlgorithmConfig:
    resolved = load_and_resolve(path, check_results=check_results)
    return algorithm_config(resolved.experiment, resolved.defaults)
