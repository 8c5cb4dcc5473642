"""What MLflow users expect of a real population (the shared PBT population, no new run):
the parent run's population/* summary, MLflow's source tags on every run, and the best
trial's policy registered by `workbench export-policy --register` and loaded back from
the registry."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import mlflow
import numpy as np
import pytest
import torch
from mlflow.tracking import MlflowClient

from workbench.cli import main
from workbench.policy.export import load_exported, sample_observations


def _client(pop: SimpleNamespace) -> tuple[str, MlflowClient]:
    uri = f"sqlite:///{pop.root / 'results' / 'mlflow.db'}"
    return uri, MlflowClient(uri)


def test_the_parent_run_carries_the_population_summary(pbt_population: SimpleNamespace) -> None:
    _, client = _client(pbt_population)
    summary = pbt_population.summary
    (parent,) = client.search_runs(
        [e.experiment_id for e in client.search_experiments()],
        filter_string="tags.`workbench.role` = 'population'",
    )
    metrics = parent.data.metrics
    assert metrics["population/trials"] == len(summary.trials) == 4
    assert metrics["population/errors"] == summary.errors == 0
    assert metrics["population/env_steps"] == sum(t.env_steps for t in summary.trials) > 0
    best = max(t.best_return for t in summary.trials)
    assert metrics["population/best_return"] == pytest.approx(best)
    assert metrics["population/wall_time_s"] > 0
    assert "population/best_eval_return_mean" not in metrics  # evaluation.at_end: none
    # Every run says where it came from (the experiment file lies outside any git repository).
    runs = client.search_runs([parent.info.experiment_id])
    source = str(pbt_population.resolved.file.resolve())
    assert len(runs) == 5
    assert {r.data.tags.get("mlflow.source.name") for r in runs} == {source}
    assert {r.data.tags.get("mlflow.source.type") for r in runs} == {"LOCAL"}


def test_export_policy_registers_the_best_trials_policy(
    pbt_population: SimpleNamespace, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri, client = _client(pbt_population)
    best = pbt_population.summary.best.name
    out = tmp_path / "policy"
    args = ["export-policy", best, "--store", uri, "-o", str(out), "--register", "pbt-best"]
    assert main(args) == 0
    assert "Registered as models:/pbt-best/1" in capsys.readouterr().out
    observations = sample_observations("sim_ext/CartPole-v1", {}, n=128, seed=4)
    with torch.no_grad():
        exported = load_exported(out / "policy.pt2")(torch.from_numpy(observations)).numpy()
    mlflow.set_tracking_uri(uri)
    try:
        model = mlflow.pyfunc.load_model("models:/pbt-best/1")
    finally:
        mlflow.set_tracking_uri(None)  # type: ignore[arg-type]
    np.testing.assert_array_equal(model.predict(observations), exported)
    (version,) = client.search_model_versions("name='pbt-best'")
    trial_run = client.get_run(version.run_id)
    assert trial_run.data.tags["mlflow.runName"] == best
