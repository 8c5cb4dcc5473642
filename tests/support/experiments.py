"""Experiment files for the tests: the smallest valid experiment, the small PBT population
built on it, and the YAML files a test hands to `load_and_resolve` or `workbench run`.

A builder returns a new dict each call; its ``fields`` replace top-level sections
(``None`` removes one), so that a test names only what it is about.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

CARTPOLE = "sim_ext/CartPole-v1"
# A small PPO: an iteration is 256 env steps and two short epochs.
SMALL_PPO: dict[str, Any] = {
    "train_batch_size_per_learner": 256,
    "minibatch_size": 128,
    "num_epochs": 2,
}


def tiny_ppo(tmp_path: Path | None = None, **fields: Any) -> dict[str, Any]:
    """PPO on sim_ext CartPole for 5 iterations, named "probe", its results under
    ``tmp_path / "results"`` (no storage without ``tmp_path``)."""
    data: dict[str, Any] = {
        "name": "probe",
        "algorithm": "PPO",
        "env": {"id": CARTPOLE},
        "stop": {"iterations": 5},
    }
    if tmp_path is not None:
        data["storage"] = str(tmp_path / "results")
    for key, value in fields.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = copy.deepcopy(value)
    return data


def small_pbt(tmp_path: Path | None = None, **fields: Any) -> dict[str, Any]:
    """A PBT population of small PPO trials named "pop": a decision every 2 iterations
    (the bottom half clones the top half), a checkpoint every iteration with 3 kept,
    half a CPU for the main process and for the learner, 4 envs per runner, no
    end-of-run evaluation (tests/unit/test_evaluate.py's subject) and no short
    evaluations while it trains (a third of a small trial's time; the subject of
    tests/integration/test_population_result_integration.py and of the killed-driver
    drill, which ask for them). Its search space, size and stop rule are the caller's."""
    population = {
        "name": "pop",
        "training": SMALL_PPO,
        "scheduler": {"type": "pbt", "perturbation_interval": 2, "quantile_fraction": 0.5},
        "checkpoint": {"frequency": 1, "keep": 3},
        "resources": {"cpus_main": 0.5, "cpus_per_learner": 0.5, "envs_per_runner": 4},
        "evaluation": {"at_end": "none", "every": 0},
    }
    merged = {**population, **fields}
    scheduler = merged["scheduler"]
    if isinstance(scheduler, dict) and scheduler.get("type") in ("pbt", "pb2"):
        scheduler = dict(scheduler)
        # Exploits at every decision, as these tests' subjects need them: truncation
        # selection on the training score. The shipped rules (a short evaluation ranks,
        # Welch's test before a clone) are the subject of tests/unit/test_exploit_rules.py
        # and tests/integration/test_population_result_integration.py, which set them.
        scheduler.setdefault("rank_on", "score")
        scheduler.setdefault("exploit_test", "none")
    merged["scheduler"] = scheduler
    return tiny_ppo(tmp_path, **merged)


# tests/conftest.py's pbt_population, shared by the tests whose subject it is: four trials,
# three searched values with resampling, synchronous PBT deciding at iterations 2 and 4
# (the exploits are certain: the bottom two clone the top two each time).
PBT_BOUNDS = {"lr": (1e-5, 1e-2), "clip_param": (0.1, 0.4), "entropy_coeff": (0.0, 0.02)}
PBT_POPULATION = small_pbt(
    name="pbt",
    search_space={
        "params": {
            "lr": {"loguniform": list(PBT_BOUNDS["lr"])},
            "clip_param": {"uniform": list(PBT_BOUNDS["clip_param"])},
            "entropy_coeff": {"uniform": list(PBT_BOUNDS["entropy_coeff"])},
        }
    },
    scheduler={
        "type": "pbt",
        "perturbation_interval": 2,
        "quantile_fraction": 0.5,
        "resample_probability": 0.5,
        "synch": True,
    },
    population=4,
    stop={"iterations": 6},
)


def write_experiment(path: Path, data: Any, *, sort_keys: bool = False) -> Path:
    """``data`` as YAML at ``path`` (a folder: its experiment.yaml), keys in the order
    given unless ``sort_keys``: the order of search-space parameters is the order in
    which Tune samples them."""
    if path.is_dir():
        path = path / "experiment.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=sort_keys))
    return path
