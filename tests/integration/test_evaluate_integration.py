"""The evaluation at the end of a real run: the population's result (the best of the
policies the trial kept and its final one, confirmed), its deterministic rollout logged to
MLflow, and `workbench eval` finding it there (the rollout itself is
tests/unit/test_evaluate.py's subject; how the result is chosen,
tests/unit/test_population_result.py's)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support.experiments import tiny_ppo, write_experiment
from tests.support.policies import plain_rollout
from workbench.cli import main


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
    evaluation, result = summary.evaluation, summary.result
    assert evaluation is not None and result is not None, summary.evaluation_note
    assert result.trial_name == summary.best.name == "PPO_00000"
    assert evaluation.training_iteration == result.iteration and evaluation.seed == 4

    # The policy's own deterministic rollout, from the checkpoint it evaluated: the result's,
    # a policy the trial kept (evaluation.every: 2) or its final checkpoint (iteration 4).
    checkpoint = result.checkpoint_path(resolved.results_dir)
    newest = resolved.results_dir / summary.best.name / "checkpoint_000001"
    if result.final:
        assert checkpoint == newest and result.iteration == 4
    else:
        assert checkpoint.parent.name == "candidates"
    assert evaluation.checkpoint == checkpoint.resolve()
    assert (evaluation.returns, evaluation.lengths) == plain_rollout(checkpoint, 5, seed=4)
    assert any(line.startswith("The population's result: PPO_00000") for line in summary.lines())

    # Logged to the trial's MLflow run as eval/*, at the checkpoint's iteration.
    store = tmp_path / "results" / "mlflow.db"
    client = MlflowClient(f"sqlite:///{store}")
    run_data = client.get_run(evaluation.run_id).data
    assert run_data.tags["mlflow.runName"] == "PPO_00000"
    stats = evaluation.stats()
    for key in ("return_mean", "return_std", "return_min", "return_max", "len_mean", "episodes"):
        assert run_data.metrics[f"eval/{key}"] == pytest.approx(stats[key])
    history = client.get_metric_history(evaluation.run_id, "eval/return_mean")
    assert [m.step for m in history] == [result.iteration]

    # The evaluated policy is an MLflow model of the trial's run, acting as export-policy's
    # files; the population's parent run carries its summary (workbench.tracking).
    import mlflow
    import numpy as np
    import torch

    from workbench.policy.export import load_exported, sample_observations

    (model,) = client.search_logged_models(
        experiment_ids=[client.get_run(evaluation.run_id).info.experiment_id]
    )
    assert model.source_run_id == evaluation.run_id
    assert main(["export-policy", str(checkpoint), "--no-log", "-o", str(tmp_path / "p")]) == 0
    observations = sample_observations("sim_ext/CartPole-v1", {}, n=64, seed=9)
    with torch.no_grad():
        exported = load_exported(tmp_path / "p" / "policy.pt2")(torch.from_numpy(observations))
    mlflow.set_tracking_uri(f"sqlite:///{store}")
    try:
        actions = mlflow.pyfunc.load_model(f"models:/{model.model_id}").predict(observations)
    finally:
        mlflow.set_tracking_uri(None)  # type: ignore[arg-type]
    np.testing.assert_array_equal(actions, exported.numpy())
    parent = client.get_run(run_data.tags["mlflow.parentRunId"]).data
    assert parent.metrics["population/best_eval_return_mean"] == pytest.approx(stats["return_mean"])
    assert parent.metrics["population/trials"] == 1 and parent.metrics["population/errors"] == 0
    assert parent.tags["mlflow.source.name"] == str((tmp_path / "experiment.yaml").resolve())

    # `workbench eval` with no RUN rolls out the population's result again and logs it
    # beside the run's own evaluation (user_eval/*), which stays what it was.
    capsys.readouterr()
    assert main(["eval", "--store", str(store), "--episodes", "5", "--seed", "4"]) == 0
    out = capsys.readouterr().out
    assert f"checkpoint {checkpoint.resolve()}" in out
    assert f"return {stats['return_mean']:.1f}" in out
    assert f"logged to MLflow run {evaluation.run_id} as user_eval/*" in out
    assert len(client.get_metric_history(evaluation.run_id, "eval/return_mean")) == 1
    assert len(client.get_metric_history(evaluation.run_id, "user_eval/return_mean")) == 1
    # By trial name: that member's newest checkpoint, logged to the same run.
    assert main(["eval", "PPO_00000", "--store", str(store), "--episodes", "2", "--seed", "4"]) == 0
    out = capsys.readouterr().out
    assert f"checkpoint {newest.resolve()}" in out
    assert f"logged to MLflow run {evaluation.run_id}" in out
    assert len(client.get_metric_history(evaluation.run_id, "user_eval/return_mean")) == 2
    metrics = client.get_run(evaluation.run_id).data.metrics
    assert metrics["eval/episodes"] == stats["episodes"]  # not the user's 2
    assert metrics["user_eval/episodes"] == 2
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
