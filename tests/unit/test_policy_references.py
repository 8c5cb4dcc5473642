"""`workbench eval` and `workbench export-policy` without the CLI: a RUN|CHECKPOINT
reference located, checked against --env, evaluated (and logged to its MLflow trial run)
or exported. Checkpoints are fresh RLlib learner groups (no training, no Ray)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support.policies import learner_group_checkpoint
from tests.support.stores import new_store
from workbench.analysis.populations import find_population
from workbench.errors import ExperimentError
from workbench.names import (
    EVAL_RETURN_METRIC,
    EVAL_TAG_PREFIX,
    USER_EVAL_METRIC_PREFIX,
    USER_EVAL_TAG_PREFIX,
)
from workbench.policy.evaluate import parse_env_config
from workbench.policy.export import export_reference
from workbench.policy.locate import evaluate_reference, locate_checkpoint

CARTPOLE = "sim_ext/CartPole-v1"


@pytest.fixture(scope="module")
def cartpole(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return learner_group_checkpoint(tmp_path_factory.mktemp("cartpole"), "PPO", CARTPOLE)


def test_env_config_options_are_read_as_yaml() -> None:
    assert parse_env_config(None, "x") == {}
    assert parse_env_config(
        ["substeps=2", "gravity=9.8", "name=a b", "on=true", " k =[1"], "x"
    ) == {
        "substeps": 2,
        "gravity": 9.8,
        "name": "a b",
        "on": True,
        "k": "[1",  # not YAML: the text itself
    }
    for bad in ("substeps", "=3"):
        with pytest.raises(ExperimentError, match=f"{bad!r} is not KEY=VALUE") as info:
            parse_env_config([bad], "PPO_00003")
        assert info.value.problems[0].field == "--env-config"


def test_a_checkpoint_folder_is_evaluated_and_not_logged(cartpole: Path) -> None:
    done = evaluate_reference(str(cartpole), episodes=3, seed=2, env_config=["max_episode_steps=5"])
    assert done.source.checkpoint == cartpole.resolve() and done.source.run_id is None
    assert done.checkpoint.env_id == CARTPOLE
    assert done.result.seed == 2 and max(done.result.lengths) <= 5
    assert done.logged == "not logged to MLflow (no trial run found)"
    data = done.to_json()
    assert data["checkpoint"] == str(cartpole.resolve()) and data["env_id"] == CARTPOLE
    assert data["env_config"] == {"max_episode_steps": 5}
    assert data["episodes"] == 3.0 and data["returns"] == done.result.returns
    assert data["deterministic"] is True and data["run_id"] is None

    unlogged = evaluate_reference(str(cartpole), episodes=1, log=False)
    assert unlogged.logged == "not logged to MLflow (--no-log)"


def test_the_wrong_env_or_settings_are_refused_before_a_rollout(cartpole: Path) -> None:
    with pytest.raises(ExperimentError, match="trained on 'sim_ext/CartPole-v1'"):
        evaluate_reference(str(cartpole), env_id="sim_ext/Pendulum-v1")
    with pytest.raises(ExperimentError, match="'substeps' is not KEY=VALUE"):
        evaluate_reference(str(cartpole), env_config=["substeps"])
    source, checkpoint = locate_checkpoint(str(cartpole), env_id=CARTPOLE)
    assert source.label == str(checkpoint.path)


def test_a_trial_run_is_evaluated_from_its_newest_checkpoint_and_logged(
    cartpole: Path, tmp_path: Path
) -> None:
    results = tmp_path / "results"
    trial_dir = results / "pop" / "PPO_00000"
    shutil.copytree(cartpole, trial_dir / "checkpoint_000002")
    store = new_store(results)
    run_id = store.trial(store.population("pop", results_dir=results / "pop"), "PPO_00000")

    done = evaluate_reference("PPO_00000", store=store.uri, episodes=2)
    assert done.source.checkpoint == (trial_dir / "checkpoint_000002").resolve()
    assert done.source.label.startswith("trial PPO_00000 (run ") and "population pop" in (
        done.source.label
    )
    assert done.logged == (
        f"logged to MLflow run {run_id} as user_eval/*, beside its own eval/* ({store.uri})"
    )
    assert done.result.run_id == run_id == done.to_json()["run_id"]
    (trial,) = find_population(store.client, "pop", store.uri).trials
    # A user's evaluation is not the run's own: the run's eval/* (what `runs` shows) is
    # left as it was (here: none).
    assert trial.eval_return is None and EVAL_RETURN_METRIC not in trial.metrics
    user = USER_EVAL_METRIC_PREFIX + "return_mean"
    assert trial.metrics[user] == pytest.approx(done.result.stats()["return_mean"])
    assert trial.tags[f"{USER_EVAL_TAG_PREFIX}seed"] == "0"
    assert trial.tags[f"{USER_EVAL_TAG_PREFIX}deterministic"] == "true"
    assert not any(tag.startswith(EVAL_TAG_PREFIX) for tag in trial.tags)


def test_export_refuses_the_wrong_env_before_writing(cartpole: Path, tmp_path: Path) -> None:
    folder = tmp_path / "policy"
    with pytest.raises(ExperimentError, match="trained on 'sim_ext/CartPole-v1'"):
        export_reference(str(cartpole), folder, env_id="sim_ext/Pendulum-v1")
    assert not folder.exists()


def test_export_of_a_reference_writes_the_files(cartpole: Path, tmp_path: Path) -> None:
    exported = export_reference(str(cartpole), tmp_path / "policy", env_id=CARTPOLE)
    assert exported.spec["env_id"] == CARTPOLE
    assert {"torch_export", "torchscript"} <= set(exported.files)
    assert all(path.is_file() for path in exported.files.values())
