"""Launch: a resolved experiment becomes a Tune run of RLlib trials, and a summary.

Everything that can be wrong with the input was checked by `resolve` before this
module starts Ray.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

from workbench.algorithm_config import algorithm_config, param_space
from workbench.checkpoints import CheckpointGuard
from workbench.progress import ProgressTable, TrialRecord
from workbench.resolve import ResolvedExperiment, describe
from workbench.schedulers import scheduler, search_algorithm
from workbench.schema import RETURN_METRIC
from workbench.stopping import RulesStopper

RESOLVED_FILE = "workbench_experiment.yaml"


def trial_seed(base_seed: int, trial_id: str) -> int:
    """A trial's seed from the experiment seed and the trial's index in the run.

    Tune's trial ids end in the trial's index (``a1b2c_00003``), which is the same
    in every run of the same experiment and survives restores and PBT exploits.
    """
    try:
        index = int(str(trial_id).rsplit("_", 1)[-1])
    except ValueError:
        index = 0
    return (base_seed * 0x9E3779B1 + index * 0x85EBCA77 + 0x165667B1) % (2**31 - 1)


@cache
def seeded_trainable(algo_class: type) -> type:
    """The algorithm class with a per-trial seed set before RLlib builds anything."""
    from ray.tune.result import TRIAL_INFO

    class Seeded(algo_class):  # type: ignore[misc,valid-type]
        def __init__(self, config: Any = None, **kwargs: Any) -> None:
            if isinstance(config, dict) and config.get(TRIAL_INFO) is not None:
                config = dict(config)
                seed = trial_seed(int(config.get("seed") or 0), config[TRIAL_INFO].trial_id)
                config["seed"] = seed
            super().__init__(config=config, **kwargs)

    Seeded.__name__ = Seeded.__qualname__ = algo_class.__name__
    return Seeded


def trial_name(trial: Any) -> str:
    """PPO_00003: the algorithm and the trial's index (Tune's default repeats the env id)."""
    return f"{trial.trainable_name}_{str(trial.trial_id).rsplit('_', 1)[-1]}"


@dataclass
class RunSummary:
    name: str
    results_dir: Path
    trials: list[TrialRecord] = field(default_factory=list)
    best: TrialRecord | None = None
    errors: int = 0

    def lines(self) -> list[str]:
        out = [f"Experiment {self.name}: {len(self.trials)} trials, {self.errors} errored"]
        if self.best is not None:
            out.append(
                f"Best trial {self.best.name}: return {self.best.best_return:.1f} "
                f"(last {self.best.last_return:.1f}) after {self.best.iteration} iterations, "
                f"{self.best.env_steps} env steps"
            )
            if self.best.schedule:
                out.append("Its hyperparameters over time (iteration: values):")
                for iteration, values in self.best.schedule:
                    shown = ", ".join(f"{k}={_short(v)}" for k, v in values.items())
                    out.append(f"  {iteration:>4}: {shown}")
        else:
            out.append("No trial reported a return (no episode finished).")
        out.append(f"Results: {self.results_dir}")
        return out


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def prepare_results_dir(resolved: ResolvedExperiment) -> None:
    """Creates the experiment folder and saves the resolved experiment in it."""
    resolved.results_dir.mkdir(parents=True, exist_ok=True)
    (resolved.results_dir / RESOLVED_FILE).write_text(
        yaml.safe_dump(describe(resolved), sort_keys=False)
    )


def start_ray(address: str | None) -> None:
    import ray

    if ray.is_initialized():
        return
    if address or os.environ.get("RAY_ADDRESS"):
        ray.init(address=address or os.environ["RAY_ADDRESS"], log_to_driver=False)
    else:
        ray.init(log_to_driver=False, include_dashboard=False)


def run(
    resolved: ResolvedExperiment,
    *,
    address: str | None = None,
    progress_interval_s: float = 15.0,
    configure: Callable[[AlgorithmConfig], AlgorithmConfig] | None = None,
) -> RunSummary:
    """Runs the population to its stop rules and returns what a person wants to know.

    ``configure`` may adjust the RLlib config beyond what experiment files say (a
    custom learner class or callbacks, from Python).
    """
    from ray import tune

    # RLlib reports the episode return only once an episode has ended: without this,
    # Tune's strict metric check fails the whole run on the first iteration.
    os.environ["TUNE_DISABLE_STRICT_METRIC_CHECKING"] = "1"
    exp = resolved.experiment
    if exp.tracking.uri or exp.tracking.experiment:
        print(
            "note: tracking.uri/tracking.experiment are accepted but not used yet: MLflow "
            "tracking is not implemented in this version; results are in the results folder."
        )
    start_ray(address)
    prepare_results_dir(resolved)

    config = algorithm_config(resolved)
    if configure is not None:
        config = configure(config)
    table = ProgressTable(
        {key: name for name, key in resolved.tune_keys.items()}, interval_s=progress_interval_s
    )
    trial_scheduler = scheduler(resolved)
    tuner = tune.Tuner(
        seeded_trainable(config.algo_class),
        param_space=param_space(resolved, config),
        tune_config=tune.TuneConfig(
            scheduler=trial_scheduler,
            search_alg=search_algorithm(resolved),
            num_samples=exp.population,
            time_budget_s=exp.stop.wall_time_s,
            max_concurrent_trials=exp.max_concurrent,
            # Algorithm has no reset_config: reusing actors errors at the first exploit.
            reuse_actors=False,
            trial_name_creator=trial_name,
            trial_dirname_creator=trial_name,
        ),
        run_config=tune.RunConfig(
            name=exp.name,
            storage_path=str(resolved.results_dir.parent),
            stop=RulesStopper(
                exp.stop.tune_stop(),
                all_at_return=exp.stop.all_at_return
                if exp.stop.all_at_return is not None
                else exp.scheduler.type in ("pbt", "pb2"),
            ),
            checkpoint_config=tune.CheckpointConfig(
                # Pruned by CheckpointGuard instead: Tune's own pruning deletes PBT donors'
                # checkpoints before their clones restore them.
                num_to_keep=None,
                checkpoint_frequency=exp.checkpoint.frequency,
                checkpoint_at_end=exp.checkpoint.at_end,
            ),
            failure_config=tune.FailureConfig(max_failures=exp.failure.max_failures),
            callbacks=[table, CheckpointGuard(exp.checkpoint.keep, trial_scheduler)],
            verbose=0,
        ),
    )
    results = tuner.fit()
    return summarize(resolved, table, errors=len(results.errors))


def summarize(resolved: ResolvedExperiment, table: ProgressTable, errors: int) -> RunSummary:
    trials = list(table.records.values())
    scored = [t for t in trials if not math.isnan(t.best_return)]
    best = max(scored, key=lambda t: t.best_return) if scored else None
    return RunSummary(
        name=resolved.experiment.name,
        results_dir=resolved.results_dir,
        trials=trials,
        best=best,
        errors=errors,
    )


__all__ = ["RETURN_METRIC", "RunSummary", "run", "seeded_trainable", "trial_seed"]
