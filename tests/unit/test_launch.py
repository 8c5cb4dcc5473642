"""Launch helpers that need no Ray: per-trial seeds, trial names, the summary."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ray.tune.result import TRIAL_INFO

from workbench.names import trial_name
from workbench.policy.evaluate import Evaluation
from workbench.run.progress import TrialRecord
from workbench.run.summary import RunSummary
from workbench.trial.candidates import PopulationResult
from workbench.trial.trainable import seeded_trainable, trial_seed


class _Recorder:
    def __init__(self, config: Any = None, **kwargs: Any) -> None:
        self.config = config


def test_trial_seeds_differ_per_trial_and_repeat_per_run() -> None:
    seeds = [trial_seed(0, f"abcde_{i:05d}") for i in range(200)]
    assert len(set(seeds)) == 200
    assert seeds == [trial_seed(0, f"zzzzz_{i:05d}") for i in range(200)]  # uuid part ignored
    assert trial_seed(1, "abcde_00003") != trial_seed(0, "abcde_00003")
    assert all(0 <= s < 2**31 for s in seeds)


def test_seeded_trainable_sets_the_trial_seed_before_the_algorithm_sees_the_config() -> None:
    cls = seeded_trainable(_Recorder)
    assert cls.__name__ == "_Recorder"  # Tune names trials after the class
    info = SimpleNamespace(trial_id="abcde_00007")
    algo = cls(config={"seed": 5, "lr": 0.1, TRIAL_INFO: info})
    assert algo.config["seed"] == trial_seed(5, "abcde_00007")
    assert algo.config["lr"] == 0.1
    # Without Tune's trial info (plain use), the config is left alone.
    assert cls(config={"seed": 5}).config == {"seed": 5}


class _FullConfig(_Recorder):
    """RLlib's way: the whole config in every result's auto-filled keys."""

    def get_auto_filled_metrics(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return {"training_iteration": 1, "config": dict(self.config)}


def test_a_result_carries_the_searched_values_and_the_seed_not_the_whole_config() -> None:
    full = {"seed": 3, "lr": 0.1, "lambda": 0.9, "num_epochs": 4, "model_config": {"a": 1}}
    cut = seeded_trainable(_FullConfig, reported=frozenset({"lr", "lambda", "not_in_config"}))
    filled = cut(config=full).get_auto_filled_metrics()
    assert filled == {"training_iteration": 1, "config": {"seed": 3, "lr": 0.1, "lambda": 0.9}}
    # One class for the same keys (Tune's trials of one population share it).
    assert (
        seeded_trainable(_FullConfig, reported=frozenset({"lambda", "lr", "not_in_config"})) is cut
    )
    # Unless asked (plain use), the config is RLlib's, whole.
    assert seeded_trainable(_FullConfig)(config=full).get_auto_filled_metrics()["config"] == full


def test_trial_names_are_the_algorithm_and_the_index() -> None:
    trial = SimpleNamespace(trainable_name="PPO", trial_id="e6513_00003")
    assert trial_name(trial) == "PPO_00003"


def test_summary_names_the_best_trial_and_its_schedule(tmp_path: Path) -> None:
    best = TrialRecord("PPO_00001", "TERMINATED", 20, 40_000, 480.0, 500.0)
    best.schedule = [(0, {"lr": 1e-3}), (8, {"lr": 8e-4})]
    lines = RunSummary(
        "x", tmp_path, [best, TrialRecord("PPO_00000", best_return=math.nan)], best, 0
    ).lines()
    assert lines[0] == "Experiment x: 2 trials, 0 errored"
    assert "Best trial PPO_00001: return 500.0 (last 480.0) after 20 iterations" in lines[1]
    assert "     8: lr=0.0008" in lines
    assert lines[-1] == f"Results: {tmp_path}"


def test_progress_table_reads_numpy_float32_returns() -> None:
    import numpy as np

    from workbench.run.progress import ProgressTable

    table = ProgressTable({"lr": "lr"}, interval_s=1e9)
    trial = SimpleNamespace(trial_id="t_00000", config={"lr": 0.1})
    trial.__str__ = lambda: "t"  # type: ignore[method-assign]
    result = {"training_iteration": 3, "env_runners": {"episode_return_mean": np.float32(-13.0)}}
    table.on_trial_result(0, [trial], trial, result)
    (record,) = table.records.values()
    assert record.best_return == -13.0 and record.last_return == -13.0


def test_summary_says_when_the_result_was_trained_after_the_last_reported_result(
    tmp_path: Path,
) -> None:
    """A stop on the return target ends the population while members are mid-report: a
    member's candidate of its last iteration exists while the table ends one earlier."""
    member = TrialRecord("PPO_00001", "TERMINATED", 21, 42_000, 304.3, 304.3)
    evaluation = Evaluation([500.0] * 3, [500] * 3, "sim_ext/CartPole-v1", {}, 0, True)

    def result_line(iteration: int) -> str:
        result = PopulationResult(
            "t_1", "PPO_00001", iteration, "PPO_00001/candidates/x", 500.0, 0.0, 3, 500.0
        )
        lines = RunSummary(
            "x", tmp_path, [member], member, 0, result=result, evaluation=evaluation
        ).lines()
        return next(line for line in lines if line.startswith("The population's result"))

    late = result_line(22)
    assert "its policy of iteration 22 (trained as the population stopped, after its last" in late
    assert "its policy of iteration 20: " in result_line(20)
