"""`workbench eval` and the evaluation at the end of a run: the rollout is the policy's
own deterministic rollout, computed here in a plain loop, episode by episode."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import ray
import torch

from tests.support.experiments import tiny_ppo, write_experiment
from tests.support.policies import learner_group_checkpoint, rllib_actor
from workbench.cli import main
from workbench.errors import ExperimentError
from workbench.policy.checkpoint import find_checkpoint, read_checkpoint
from workbench.policy.evaluate import evaluate_checkpoint


def plain_rollout(checkpoint: Path, episodes: int, seed: int) -> tuple[list[float], list[int]]:
    """One `gym.make` env per episode (episode k from seed + k), one observation at a
    time through RLlib's module: what `evaluate` must reproduce with its batches."""
    info = read_checkpoint(checkpoint)
    act = rllib_actor(checkpoint)
    returns: list[float] = []
    lengths: list[int] = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one observation at a time: threads only wait on each other
    try:
        for k in range(episodes):
            episode_return, length = _episode(act, info.env_id, info.env_config, seed + k)
            returns.append(episode_return)
            lengths.append(length)
    finally:
        torch.set_num_threads(threads)
    return returns, lengths


def _episode(act: Any, env_id: str, env_config: dict[str, Any], seed: int) -> tuple[float, int]:
    env = gym.make(env_id, **env_config)
    obs, _ = env.reset(seed=seed)
    total, length, done = 0.0, 0, False
    while not done:
        action = act(obs[None].astype(np.float32))[0]
        obs, reward, terminated, truncated, _ = env.step(action)
        total += float(reward)
        length += 1
        done = terminated or truncated
    return total, length


@pytest.fixture(scope="module")
def cartpole(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return learner_group_checkpoint(
        tmp_path_factory.mktemp("cartpole"), "PPO", "sim_ext/CartPole-v1"
    )


@pytest.fixture(scope="module")
def pendulum(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return learner_group_checkpoint(
        tmp_path_factory.mktemp("pendulum"), "PPO", "sim_ext/Pendulum-v1"
    )


def test_evaluation_is_the_deterministic_rollout_of_the_module(cartpole: Path) -> None:
    result = evaluate_checkpoint(read_checkpoint(cartpole), episodes=7, seed=3)
    assert (result.returns, result.lengths) == plain_rollout(cartpole, 7, seed=3)
    assert len(set(result.returns)) > 1, "every episode alike: the seeds are not used"
    stats = result.stats()
    assert stats["episodes"] == 7
    assert stats["return_mean"] == pytest.approx(np.mean(result.returns))
    assert stats["return_min"] <= stats["return_mean"] <= stats["return_max"]


def test_continuous_actions_are_unsquashed_to_the_bounds_as_rllib_does(pendulum: Path) -> None:
    # Pendulum torques are in [-2, 2]; RLlib maps the Gaussian's mean from [-1, 1].
    result = evaluate_checkpoint(read_checkpoint(pendulum), episodes=2, seed=11)
    returns, lengths = plain_rollout(pendulum, 2, seed=11)
    assert result.lengths == lengths == [200, 200]
    # A batch of 2 and a batch of 1 go through different float32 matmul paths: the
    # torques differ in the last bits, the returns after 200 steps by about 1e-9.
    assert result.returns == pytest.approx(returns, rel=1e-6)


def test_stochastic_evaluation_samples_and_is_reproducible(cartpole: Path) -> None:
    info = read_checkpoint(cartpole)
    deterministic = evaluate_checkpoint(info, episodes=8, seed=0)
    first = evaluate_checkpoint(info, episodes=8, seed=0, deterministic=False)
    again = evaluate_checkpoint(info, episodes=8, seed=0, deterministic=False)
    assert first.returns == again.returns
    assert first.returns != deterministic.returns
    # The global RNG is left as it was.
    torch.manual_seed(5)
    expected = torch.rand(1)
    torch.manual_seed(5)
    evaluate_checkpoint(info, episodes=1, deterministic=False)
    assert torch.rand(1) == expected


def test_env_config_changes_the_env_but_not_its_spaces(cartpole: Path, tmp_path: Path) -> None:
    info = read_checkpoint(cartpole)
    short = evaluate_checkpoint(info, episodes=4, env_config={"max_episode_steps": 5})
    assert max(short.lengths) <= 5 and short.env_config == {"max_episode_steps": 5}

    maze = learner_group_checkpoint(tmp_path, "PPO", "sim_ext/GridMaze-v0", {"size": 4})
    with pytest.raises(ExperimentError, match=r"observation space .*\(25,\).*\(16,\)"):
        evaluate_checkpoint(read_checkpoint(maze), episodes=1, env_config={"size": 5})
    with pytest.raises(ExperimentError, match="unknown env_config key 'mass'"):
        evaluate_checkpoint(info, episodes=1, env_config={"mass": 2.0})


def test_a_trial_folder_means_its_newest_checkpoint(cartpole: Path, tmp_path: Path) -> None:
    trial = tmp_path / "PPO_00001"
    for index in (2, 10, 9):  # numbered in save order: 10 is the newest, not 9
        shutil.copytree(cartpole, trial / f"checkpoint_{index:06d}")
    assert find_checkpoint(trial) == (trial / "checkpoint_000010").resolve()


def _trial_folder_without_checkpoints(path: Path) -> Path:
    (path / "params.json").write_text("{}")
    return path


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p / "missing", "does not exist"),
        (lambda p: p, "is not a checkpoint"),
        (_trial_folder_without_checkpoints, "holds no checkpoint"),
    ],
)
def test_what_is_not_a_checkpoint_is_named(tmp_path: Path, make: Any, message: str) -> None:
    with pytest.raises(ExperimentError, match=message) as info:
        find_checkpoint(make(tmp_path))
    assert "valid: an algorithm checkpoint folder" in str(info.value)


def test_cli_eval_of_a_checkpoint_folder(
    cartpole: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["eval", str(cartpole), "--episodes", "3", "--seed", "3", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["returns"] == plain_rollout(cartpole, 3, seed=3)[0]
    assert data["episodes"] == 3 and data["deterministic"] is True and data["run_id"] is None

    assert main(["eval", str(cartpole), "--env", "sim_ext/Pendulum-v1"]) == 2
    err = capsys.readouterr().err
    assert "'sim_ext/Pendulum-v1'" in err and "trained on 'sim_ext/CartPole-v1'" in err

    assert main(["eval", str(cartpole), "--env-config", "substeps"]) == 2
    assert "'substeps' is not KEY=VALUE" in capsys.readouterr().err


# --- a real run --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.mark.slow
def test_a_run_evaluates_its_best_trial_and_eval_finds_it_in_mlflow(
    local_ray: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from mlflow.tracking import MlflowClient

    from workbench.experiment.resolve import load_and_resolve
    from workbench.run.launch import run

    data = tiny_ppo(
        tmp_path,
        name="evaluated",
        training={
            "train_batch_size_per_learner": 512,
            "minibatch_size": 128,
            "num_epochs": 4,
            "lr": 3e-3,
        },
        population=1,
        stop={"iterations": 4},
        checkpoint={"frequency": 2},
        resources={"env_runners": {"envs_per_runner": 8}},
        evaluation={"episodes": 5},
        seed=4,
    )
    resolved = load_and_resolve(write_experiment(tmp_path, data, sort_keys=True))
    summary = run(resolved, progress_interval_s=1e9)
    assert summary.errors == 0 and summary.best is not None
    evaluation = summary.evaluation
    assert evaluation is not None, summary.evaluation_note
    assert evaluation.training_iteration == 4 and evaluation.seed == 4

    # The policy's own deterministic rollout, from the checkpoint it evaluated.
    checkpoint = resolved.results_dir / summary.best.name / "checkpoint_000001"
    assert evaluation.checkpoint == checkpoint.resolve()
    assert (evaluation.returns, evaluation.lengths) == plain_rollout(checkpoint, 5, seed=4)
    assert any(line.startswith("Evaluated PPO_00000") for line in summary.lines())

    # Logged to the trial's MLflow run as eval/*, at the checkpoint's iteration.
    store = tmp_path / "results" / "mlflow.db"
    client = MlflowClient(f"sqlite:///{store}")
    run_data = client.get_run(evaluation.run_id).data
    assert run_data.tags["mlflow.runName"] == "PPO_00000"
    stats = evaluation.stats()
    for key in ("return_mean", "return_std", "return_min", "return_max", "len_mean", "episodes"):
        assert run_data.metrics[f"eval/{key}"] == pytest.approx(stats[key])
    history = client.get_metric_history(evaluation.run_id, "eval/return_mean")
    assert [m.step for m in history] == [4]

    # `workbench eval` by trial name finds the same checkpoint and logs again.
    capsys.readouterr()
    assert main(["eval", "PPO_00000", "--store", str(store), "--episodes", "5", "--seed", "4"]) == 0
    out = capsys.readouterr().out
    assert f"return {stats['return_mean']:.1f}" in out
    assert f"logged to MLflow run {evaluation.run_id}" in out
    assert len(client.get_metric_history(evaluation.run_id, "eval/return_mean")) == 2
    # ... and so does a trial folder, through the store its experiment file names.
    assert main(["eval", str(resolved.results_dir / "PPO_00000"), "--episodes", "2"]) == 0
    assert f"logged to MLflow run {evaluation.run_id}" in capsys.readouterr().out

    # Not PBT: nothing to replay.
    assert main(["export-schedule", "evaluated", "--store", str(store), "-o", "x.yaml"]) == 2
    err = capsys.readouterr().err
    assert "scheduler.type: 'fifo'" in err and "not population-based training" in err

    # A run whose checkpoints are gone.
    for folder in (resolved.results_dir / "PPO_00000").glob("checkpoint_*"):
        shutil.rmtree(folder)
    assert main(["eval", "PPO_00000", "--store", str(store)]) == 2
    err = capsys.readouterr().err
    assert f"trial PPO_00000 (run {evaluation.run_id}) of population evaluated" in err
    assert "saved no checkpoint" in err and "valid:" in err
