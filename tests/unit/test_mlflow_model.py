"""A policy as an MLflow model: `workbench export-policy` logs it to its trial run and
registers it; `mlflow.pyfunc.load_model` gives the same actions as the exported files, in
a Python that has neither Ray nor the workbench (the end of a real run logs it too:
tests/integration/test_evaluate_integration.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlflow
import numpy as np
import pytest
import torch

from tests.support.policies import learner_group_checkpoint, rllib_actor
from tests.support.stores import Store, new_store
from workbench.cli import main
from workbench.policy.export import load_exported, sample_observations

CASES = [("PPO", "sim_ext/CartPole-v1"), ("PPO", "sim_ext/Pendulum-v1")]


@dataclass
class Tracked:
    store: Store
    population: str
    trial_dir: Path
    run_id: str

    def args(self, *more: str) -> list[str]:
        """export-policy of the trial by name in its population's store."""
        return [
            "export-policy",
            "PPO_00000",
            "--store",
            self.store.uri,
            "--population",
            self.population,
            *more,
        ]

    def models(self) -> list[Any]:
        """The MLflow models logged to the trial's run."""
        experiment = self.store.client.get_run(self.run_id).info.experiment_id
        found = self.store.client.search_logged_models(experiment_ids=[experiment])
        return [m for m in found if m.source_run_id == self.run_id]


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> tuple[Store, dict[str, Path]]:
    """One store and one checkpoint per env for the module (building either takes seconds)."""
    root = tmp_path_factory.mktemp("mlflow_model")
    checkpoints = {
        env_id: learner_group_checkpoint(root / env_id.split("/")[1], algorithm, env_id)
        for algorithm, env_id in CASES
    }
    return new_store(root / "results"), checkpoints


@pytest.fixture(params=CASES, ids=[e.split("/")[1] for _, e in CASES])
def tracked_trial(
    request: pytest.FixtureRequest, shared: tuple[Store, dict[str, Path]], tmp_path: Path
) -> Tracked:
    """A new population's trial run whose folder holds a copy of the env's checkpoint."""
    store, checkpoints = shared
    name = f"pop_{tmp_path.name}"
    results_dir = tmp_path / name
    parent = store.population(name, results_dir=results_dir)
    run_id = store.trial(parent, "PPO_00000", returns=[10.0, 20.0], status="KILLED")
    trial_dir = results_dir / "PPO_00000"
    shutil.copytree(checkpoints[request.param[1]], trial_dir / "checkpoint_000000")
    return Tracked(store, name, trial_dir, run_id)


def test_export_policy_logs_a_pyfunc_that_acts_as_the_exported_files(
    tracked_trial: Tracked, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store, trial_dir, run_id = tracked_trial.store, tracked_trial.trial_dir, tracked_trial.run_id
    out = tmp_path / "policy"
    assert main(tracked_trial.args("-o", str(out))) == 0
    printed = capsys.readouterr().out
    spec = json.loads((out / "policy.json").read_text())
    observations = sample_observations(spec["env_id"], spec["env_config"], n=200, seed=5)
    with torch.no_grad():
        exported = load_exported(out / "policy.pt2")(torch.from_numpy(observations)).numpy()

    logged = tracked_trial.models()
    assert len(logged) == 1
    model_uri = f"models:/{logged[0].model_id}"
    assert model_uri in printed
    mlflow.set_tracking_uri(store.uri)
    try:
        model = mlflow.pyfunc.load_model(model_uri)
    finally:
        mlflow.set_tracking_uri(None)  # type: ignore[arg-type]
    actions = model.predict(observations)
    np.testing.assert_array_equal(actions, exported)
    np.testing.assert_allclose(
        actions, rllib_actor(trial_dir / "checkpoint_000000")(observations), atol=1e-6
    )
    # Its signature: the observation and action tensors.
    inputs = model.metadata.get_input_schema().inputs[0]
    assert inputs.shape == (-1, *observations.shape[1:]) and inputs.type == np.dtype("float32")
    # Logging reopened the trial run: it keeps the status it had.
    assert store.client.get_run(run_id).info.status == "KILLED"


@pytest.mark.parametrize("tracked_trial", [CASES[0]], indirect=True, ids=["CartPole-v1"])
def test_the_model_loads_and_predicts_without_ray_or_the_workbench(
    tracked_trial: Tracked, tmp_path: Path
) -> None:
    store, trial_dir = tracked_trial.store, tracked_trial.trial_dir
    out = tmp_path / "policy"
    assert main(["export-policy", str(trial_dir), "--store", store.uri, "-o", str(out)]) == 0
    logged = tracked_trial.models()
    assert len(logged) == 1
    # A fresh Python where importing ray or workbench fails, as on a serving host without them.
    script = f"""
import sys, json
class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("ray", "workbench", "sim_ext", "gymnasium"):
            raise ImportError("not installed here: " + name)
sys.meta_path.insert(0, Refuse())
import mlflow, numpy as np
mlflow.set_tracking_uri({store.uri!r})
model = mlflow.pyfunc.load_model("models:/{logged[0].model_id}")
obs = np.asarray(json.load(sys.stdin), dtype=np.float32)
print(json.dumps(np.asarray(model.predict(obs)).tolist()))
"""
    spec = json.loads((out / "policy.json").read_text())
    observations = sample_observations(spec["env_id"], spec["env_config"], n=20, seed=2)
    done = subprocess.run(
        [sys.executable, "-c", script],
        input=json.dumps(observations.tolist()),
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    with torch.no_grad():
        exported = load_exported(out / "policy.pt2")(torch.from_numpy(observations)).numpy()
    np.testing.assert_allclose(np.asarray(json.loads(done.stdout)), exported, atol=1e-6)


@pytest.mark.parametrize("tracked_trial", [CASES[0]], indirect=True, ids=["CartPole-v1"])
def test_register_makes_a_new_version_in_the_registry(
    tracked_trial: Tracked, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tracked_trial.store
    for n in (1, 2):
        args = tracked_trial.args("-o", str(tmp_path / f"p{n}"))
        assert main([*args, "--register", "cartpole-ppo"]) == 0
        assert f"Registered as models:/cartpole-ppo/{n}" in capsys.readouterr().out
    versions = store.client.search_model_versions("name='cartpole-ppo'")
    assert sorted(int(v.version) for v in versions) == [1, 2]
    mlflow.set_tracking_uri(store.uri)
    try:
        model = mlflow.pyfunc.load_model("models:/cartpole-ppo/2")
    finally:
        mlflow.set_tracking_uri(None)  # type: ignore[arg-type]
    observations = sample_observations("sim_ext/CartPole-v1", {}, n=16, seed=0)
    with torch.no_grad():
        exported = load_exported(tmp_path / "p2" / "policy.pt2")(torch.from_numpy(observations))
    np.testing.assert_array_equal(model.predict(observations), exported.numpy())


@pytest.mark.parametrize("tracked_trial", [CASES[0]], indirect=True, ids=["CartPole-v1"])
def test_register_without_a_trial_run_is_refused_before_anything_is_written(
    tracked_trial: Tracked, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint = (
        tracked_trial.trial_dir / "checkpoint_000000"
    )  # no --store, no experiment file: no run
    out = tmp_path / "policy"
    assert main(["export-policy", str(checkpoint), "-o", str(out), "--register", "x"]) == 2
    err = capsys.readouterr().err
    assert "--register" in err and "needs the policy's MLflow trial run" in err
    assert not out.exists()
    # Without --register the files are written and the summary says why nothing was logged.
    assert main(["export-policy", str(checkpoint), "-o", str(out)]) == 0
    assert "Not logged to MLflow" in capsys.readouterr().out


@pytest.mark.parametrize("tracked_trial", [CASES[0]], indirect=True, ids=["CartPole-v1"])
def test_no_log_writes_the_files_only(tracked_trial: Tracked, tmp_path: Path) -> None:
    out = tmp_path / "policy"
    assert main(tracked_trial.args("-o", str(out), "--no-log")) == 0
    assert (out / "policy.pt2").is_file()
    assert tracked_trial.models() == []


def test_the_model_code_and_the_logger_agree_on_the_artifact() -> None:
    from workbench.policy import mlflow_model, pyfunc_model

    assert Path(pyfunc_model.__file__) == mlflow_model.PYFUNC_FILE
    assert pyfunc_model.ARTIFACT == mlflow_model.PROGRAM_ARTIFACT
