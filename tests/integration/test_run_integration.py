"""Small real Ray runs of `workbench.launch.run` on sim_ext (2 CPUs, tens of seconds each)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.support.experiments import PBT_BOUNDS, SMALL_PPO, tiny_ppo, write_experiment
from tests.support.results import result_rows
from workbench.experiment.resolve import load_and_resolve
from workbench.run.launch import run
from workbench.tune_ext.pb2_explore import crowded

pytestmark = pytest.mark.usefixtures("local_ray")


def _experiment(tmp_path: Path, **fields: Any) -> Path:
    data = tiny_ppo(tmp_path, **{"name": "it", "resources": {"envs_per_runner": 4}, **fields})
    return write_experiment(tmp_path, data, sort_keys=True)


def _exploits(rows: list[dict[str, Any]], keys: list[str]) -> list[int]:
    """Rows right after an exploit: the searched values changed between two results."""
    return [
        i
        for i in range(1, len(rows))
        if any(rows[i]["config"][k] != rows[i - 1]["config"][k] for k in keys)
    ]


def test_pbt_exploits_use_the_new_hyperparameters_from_the_first_update(
    pbt_population: SimpleNamespace,
) -> None:
    # tests/conftest.py's population: the probe learner, resampling, a checkpoint every
    # iteration and three kept, so Tune prunes while clones restore donors' checkpoints.
    bounds = PBT_BOUNDS
    resolved, summary = pbt_population.resolved, pbt_population.summary
    assert summary.errors == 0, "a clone could not restore its donor's checkpoint"

    rows = result_rows(resolved.results_dir)
    after_exploit = [(t, i) for t, r in rows.items() for i in _exploits(r, list(bounds))]
    assert after_exploit, "PBT never exploited: the test checks nothing"
    # A result carries the values it was trained with, not RLlib's whole config (which
    # is the trial's params.json).
    reported = {*resolved.tune_keys.values(), "seed"}
    for trial, trial_rows in rows.items():
        for row in trial_rows:
            config, learners = row["config"], row["learners"]
            assert set(config) == reported, (trial, sorted(config))
            # Inside the first gradient step of every iteration, exploits included.
            assert learners["probe_first_lr"] == pytest.approx(config["lr"], rel=1e-6), (
                trial,
                row["training_iteration"],
            )
            assert learners["probe_first_clip_param"] == pytest.approx(config["clip_param"])
            assert learners["probe_first_entropy_coeff"] == pytest.approx(config["entropy_coeff"])
            assert learners["probe_lean_steps"] > 0  # the lean learner's loop made the updates
            for key, (low, high) in bounds.items():
                assert low <= config[key] <= high, (key, config[key])
    # Checkpoints are pruned to `keep` per trial, except those still needed.
    for trial in rows:
        assert len(list((resolved.results_dir / trial).glob("checkpoint_*"))) <= 3 + 2
    # ... all of it in reused actors: Tune restarted trials (PBT's pauses and exploits)
    # in processes that had served before, through the workbench's reset_config. With a
    # new actor per start, there would be as many processes as starts.
    starts = sum(1 for r in rows.values() for row in r if row["iterations_since_restore"] == 1)
    processes = {row["pid"] for r in rows.values() for row in r}
    assert len(processes) < starts, (processes, starts)


def test_asha_with_optuna_stops_weak_trials_early(tmp_path: Path) -> None:
    path = _experiment(
        tmp_path,
        training=SMALL_PPO,
        search_space={"params": {"lr": {"loguniform": [1e-6, 1e-2]}}},
        # Rungs at 1, 2, 4 and 8, each cut at the median: early scores are mostly noise, and
        # with a cut at two thirds over two rungs, all six trials passed once in CI.
        scheduler={"type": "asha", "max_t": 9, "grace_period": 1, "reduction_factor": 2},
        search={"type": "optuna", "seed": 3},
        population=6,
        max_concurrent=2,
        stop={"iterations": 9},
    )
    resolved = load_and_resolve(path)
    summary = run(resolved, progress_interval_s=1e9)
    assert summary.errors == 0
    iterations = sorted(t.iteration for t in summary.trials)
    assert len(iterations) == 6
    assert iterations[0] < 9, f"ASHA stopped no trial early: {iterations}"
    assert iterations[-1] == 9
    # Optuna suggested the configurations: all different, all inside the block.
    lrs = {t.hyperparameters["lr"] for t in summary.trials}
    assert len(lrs) == 6 and all(1e-6 <= lr <= 1e-2 for lr in lrs)
    # Each trial's results in the workbench's result.json and progress.csv, and no
    # TensorBoard event files (Tune's third logger, off: MLflow holds the same).
    trial_dirs = [p for p in resolved.results_dir.iterdir() if (p / "params.json").is_file()]
    assert len(trial_dirs) == 6
    for trial_dir in trial_dirs:
        assert (trial_dir / "result.json").is_file() and (trial_dir / "progress.csv").is_file()
    assert not list(resolved.results_dir.rglob("events.out.tfevents*"))


def test_an_env_step_budget_ends_a_search_with_trials_still_to_run(tmp_path: Path) -> None:
    # stop.population_env_steps: six trials, two at a time, 20 iterations each; the budget
    # is about 8 iterations of 256 env steps in all, so the search ends early, whole.
    from mlflow.tracking import MlflowClient

    from workbench.names import ROLE_TAG

    budget = 2000
    path = _experiment(
        tmp_path,
        training=SMALL_PPO,
        search_space={"params": {"lr": {"loguniform": [1e-4, 1e-2]}}},
        scheduler={"type": "fifo"},
        population=6,
        max_concurrent=2,
        stop={"iterations": 20, "population_env_steps": budget},
    )
    resolved = load_and_resolve(path)
    summary = run(resolved, progress_interval_s=1e9)
    assert summary.errors == 0 and not summary.interrupted
    assert summary.stop_reason.startswith("the env-step budget (2,000) was spent"), summary
    rows = result_rows(resolved.results_dir)
    sampled = sum(
        row["env_runners"]["num_env_steps_sampled"] for trial in rows.values() for row in trial
    )
    # Spent, and overshot by at most the iterations in flight (two trials' last ones).
    assert budget <= sampled <= budget + 2 * 2 * SMALL_PPO["train_batch_size_per_learner"]
    assert f"the trials sampled {sampled:,} env steps" in summary.stop_reason
    assert max(row["training_iteration"] for r in rows.values() for row in r) < 20
    # The population's runs end FINISHED: a budget is a stop rule, not an interruption.
    client = MlflowClient(f"sqlite:///{tmp_path / 'results' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name(resolved.experiment.name)
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id])
    parent = [r for r in runs if r.data.tags.get(ROLE_TAG) == "population"]
    assert [r.info.status for r in parent] == ["FINISHED"]
    assert {r.info.status for r in runs} == {"FINISHED"}


def test_pb2_explores_inside_its_bounds(tmp_path: Path) -> None:
    path = _experiment(
        tmp_path,
        training=SMALL_PPO,
        search_space={
            "params": {
                "lr": {"loguniform": [1e-4, 1e-2]},
                "clip_param": {"uniform": [0.1, 0.3]},
            }
        },
        # Synchronous: at iterations 2 and 4 the worse trial is always explored.
        scheduler={
            "type": "pb2",
            "perturbation_interval": 2,
            "quantile_fraction": 0.5,
            "synch": True,
            # Truncation selection on the score: an exploit at every decision.
            "rank_on": "score",
            "exploit_test": "none",
        },
        population=2,
        stop={"iterations": 6},
        checkpoint={"frequency": 1, "keep": 3},
    )
    resolved = load_and_resolve(path)
    summary = run(resolved, progress_interval_s=1e9)
    assert summary.errors == 0
    rows = result_rows(resolved.results_dir)
    assert any(_exploits(r, ["lr", "clip_param"]) for r in rows.values()), "PB2 never explored"
    for trial_rows in rows.values():
        for row in trial_rows:
            assert 1e-4 <= row["config"]["lr"] <= 1e-2
            assert 0.1 <= row["config"]["clip_param"] <= 0.3
    # The clone never runs on the donor's point (lr in log10 space, as PB2 explores it).
    points: dict[int, list[list[float]]] = {}
    for trial_rows in rows.values():
        for row in trial_rows:
            config = row["config"]
            point = [math.log10(config["lr"]), config["clip_param"]]
            points.setdefault(row["training_iteration"], []).append(point)
    for members in points.values():
        assert len(members) == 2 and not crowded(members[0], members[1:], [2.0, 0.2]), members


@pytest.mark.parametrize(
    ("algorithm", "training", "iterations", "threshold"),
    [
        ("APPO", {"train_batch_size_per_learner": 500, "lr": 5e-4}, 25, 40.0),
        (
            "DQN",
            {
                "train_batch_size_per_learner": 32,
                "lr": 5e-4,
                "num_steps_sampled_before_learning_starts": 500,
                "target_network_update_freq": 200,
            },
            30,
            40.0,
        ),
    ],
)
def test_other_algorithms_train(
    tmp_path: Path, algorithm: str, training: dict[str, Any], iterations: int, threshold: float
) -> None:
    # Random CartPole play returns about 22: these must learn past it (and stop soon after).
    path = _experiment(
        tmp_path,
        algorithm=algorithm,
        training=training,
        scheduler={"type": "fifo"},
        population=1,
        stop={"iterations": iterations, "return_mean": 60},
    )
    summary = run(load_and_resolve(path), progress_interval_s=1e9)
    assert summary.errors == 0
    (trial,) = summary.trials
    assert not math.isnan(trial.best_return)
    assert trial.best_return > threshold, f"{algorithm} did not learn: {trial.best_return:.1f}"


@pytest.mark.parametrize(
    ("algorithm", "env_id", "training"),
    [
        ("IMPALA", "sim_ext/CartPole-v1", {"train_batch_size_per_learner": 500}),
        (
            "SAC",
            "sim_ext/Pendulum-v1",
            {"train_batch_size_per_learner": 64, "num_steps_sampled_before_learning_starts": 200},
        ),
    ],
)
def test_every_algorithm_runs_with_its_own_search_space(
    tmp_path: Path, algorithm: str, env_id: str, training: dict[str, Any]
) -> None:
    # IMPALA and SAC with their shipped search spaces (search_spaces/impala.yaml,
    # sac.yaml) under FIFO: they build, sample, learn and report. Iterations of at
    # least 2 s, not IMPALA's own 10 s.
    path = _experiment(
        tmp_path,
        algorithm=algorithm,
        env={"id": env_id},
        training=training,
        search_space={"file": f"{algorithm.lower()}.yaml"},
        scheduler={"type": "fifo"},
        population=1,
        stop={"iterations": 3},
        reporting={"min_time_s_per_iteration": 2},
    )
    resolved = load_and_resolve(path)
    summary = run(resolved, progress_interval_s=1e9)
    (trial_dir,) = [d for d in resolved.results_dir.iterdir() if (d / "result.json").is_file()]
    times = [
        json.loads(line)["time_this_iter_s"]
        for line in (trial_dir / "result.json").read_text().splitlines()
    ]
    # The reporting section reached RLlib: every iteration took at least its 2 s floor (SAC's
    # own is 1 s), and one ended well before IMPALA's own 10 s. Only one: on a busy machine a
    # single iteration (SAC's first update, say) can run long by itself.
    assert min(times) >= 2 and min(times) < 9, times
    assert summary.errors == 0
    (trial,) = summary.trials
    assert trial.iteration == 3 and trial.env_steps > 0
    rows = result_rows(resolved.results_dir)
    (trial_rows,) = rows.values()
    assert "learners" in trial_rows[-1]
