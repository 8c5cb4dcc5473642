"""The Optuna study of a population lives in its results folder (optuna.db), opens with
`optuna.load_study`, and a resume of the folder where it lies now continues the same
study. Ray's OptunaSearch handed the same storage pickles its absolute URL and fails on
a moved folder (docs/ray-fixes.md). No Ray cluster: the searcher as Tune drives it.
A real run and resume: tests/integration/test_optuna_study_integration.py."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import optuna
import pytest
import sqlalchemy.exc
from ray import tune
from ray.tune.search.optuna import OptunaSearch

from workbench.tune_ext.optuna_study import (
    STUDY_FILE,
    TRIAL_ID_ATTR,
    StudySearch,
    close_study,
    study_url,
)

SPACE = {"lr": tune.loguniform(1e-4, 1e-2), "clip_param": tune.uniform(0.1, 0.3)}
Make = Callable[[Path], OptunaSearch]


def ours(folder: Path) -> OptunaSearch:
    return StudySearch(folder, "pop", metric="score", mode="max", seed=0)


def rays(folder: Path) -> OptunaSearch:
    storage = optuna.storages.RDBStorage(study_url(folder))
    return OptunaSearch(metric="score", mode="max", seed=0, study_name="pop", storage=storage)


def _first_driver(make: Make, folder: Path) -> dict[str, object]:
    """Two trials suggested, one reported and finished, the searcher saved (as Tune does)."""
    folder.mkdir(parents=True)
    searcher = make(folder)
    searcher.set_search_properties("score", "max", SPACE)
    suggested = {"t1": searcher.suggest("t1"), "t2": searcher.suggest("t2")}
    searcher.on_trial_result("t1", {"score": 5.0, "training_iteration": 1})
    searcher.on_trial_complete("t1", {"score": 10.0, "training_iteration": 2})
    searcher.save(str(folder / "searcher-state.pkl"))
    return suggested


def _resumed_driver(make: Make, folder: Path) -> OptunaSearch:
    searcher = make(folder)
    searcher.set_search_properties("score", "max", SPACE)
    searcher.restore(str(folder / "searcher-state.pkl"))
    searcher.on_trial_result("t2", {"score": 15.0, "training_iteration": 1})
    searcher.on_trial_complete("t2", {"score": 20.0, "training_iteration": 2})
    searcher.suggest("t3")
    return searcher


def test_the_study_is_in_the_results_folder_and_opens_with_load_study(tmp_path: Path) -> None:
    folder = tmp_path / "pop"
    suggested = _first_driver(ours, folder)
    study = optuna.load_study(study_name="pop", storage=f"sqlite:///{folder / STUDY_FILE}")
    assert [t.state for t in study.trials] == [
        optuna.trial.TrialState.COMPLETE,
        optuna.trial.TrialState.RUNNING,
    ]
    assert study.trials[0].value == 10.0 and study.trials[0].intermediate_values == {1: 5.0}
    assert [t.params for t in study.trials] == [suggested["t1"], suggested["t2"]]
    assert study.direction == optuna.study.StudyDirection.MAXIMIZE


def test_a_moved_folder_resumes_the_same_study_where_it_lies_now(tmp_path: Path) -> None:
    _first_driver(ours, tmp_path / "a")
    moved = tmp_path / "elsewhere" / "pop"
    moved.parent.mkdir()
    shutil.move(tmp_path / "a", moved)
    _resumed_driver(ours, moved)
    study = optuna.load_study(study_name="pop", storage=study_url(moved))
    states = [(t.number, t.state.name, t.value) for t in study.trials]
    assert states == [(0, "COMPLETE", 10.0), (1, "COMPLETE", 20.0), (2, "RUNNING", None)]
    assert not (tmp_path / "a").exists()  # nothing written where it came from


def test_a_copied_folder_leaves_the_original_study_alone(tmp_path: Path) -> None:
    _first_driver(ours, tmp_path / "a")
    before = (tmp_path / "a" / STUDY_FILE).read_bytes()
    shutil.copytree(tmp_path / "a", tmp_path / "copy")
    _resumed_driver(ours, tmp_path / "copy")
    assert (tmp_path / "a" / STUDY_FILE).read_bytes() == before
    assert (
        len(optuna.load_study(study_name="pop", storage=study_url(tmp_path / "copy")).trials) == 3
    )


def test_rays_searcher_with_a_storage_cannot_resume_a_moved_folder(tmp_path: Path) -> None:
    # The fall StudySearch fixes: Ray pickles the storage, whose URL names the old folder.
    _first_driver(rays, tmp_path / "a")
    moved = tmp_path / "b"
    shutil.move(tmp_path / "a", moved)
    with pytest.raises(sqlalchemy.exc.OperationalError, match="unable to open database file"):
        _resumed_driver(rays, moved)


def test_a_folder_not_made_yet_keeps_the_study_in_memory(tmp_path: Path) -> None:
    # `workbench run --dry-run` draws the trials before the folder exists: nothing written.
    searcher = StudySearch(tmp_path / "not-yet", "pop", metric="score", mode="max", seed=0)
    searcher.set_search_properties("score", "max", SPACE)
    assert searcher.suggest("t1")
    assert not (tmp_path / "not-yet").exists()


def test_a_result_without_a_score_tells_optuna_nothing(tmp_path: Path) -> None:
    searcher = ours(tmp_path)
    searcher.set_search_properties("score", "max", SPACE)
    searcher.suggest("t1")
    # No episode ended yet: no score (Ray's OptunaSearch raised KeyError), or NaN.
    searcher.on_trial_result("t1", {"training_iteration": 1})
    searcher.on_trial_result("t1", {"score": float("nan"), "training_iteration": 2})
    searcher.on_trial_result("t1", {"score": 4.0, "training_iteration": 3})
    trial = searcher._ot_trials["t1"]
    assert trial.storage.get_trial(trial._trial_id).intermediate_values == {3: 4.0}


def test_each_study_trial_names_its_tune_trial(tmp_path: Path) -> None:
    _first_driver(ours, tmp_path / "pop")
    study = optuna.load_study(study_name="pop", storage=study_url(tmp_path / "pop"))
    assert [t.user_attrs[TRIAL_ID_ATTR] for t in study.trials] == ["t1", "t2"]


def test_an_ended_population_leaves_no_trial_running_in_its_study(tmp_path: Path) -> None:
    # t2 was still running when the population's rule ended it: pruned at its last score.
    folder = tmp_path / "pop"
    _first_driver(ours, folder)
    searcher = ours(folder)
    searcher.set_search_properties("score", "max", SPACE)
    searcher.restore(str(folder / "searcher-state.pkl"))
    searcher.on_trial_result("t2", {"score": 7.0, "training_iteration": 1})
    assert close_study(folder, "pop") == 1
    study = optuna.load_study(study_name="pop", storage=study_url(folder))
    assert [(t.state.name, t.value) for t in study.trials] == [("COMPLETE", 10.0), ("PRUNED", 7.0)]
    assert close_study(folder, "pop") == 0
    assert close_study(tmp_path / "no-study", "pop") == 0


def test_the_study_names_hyperparameters_as_the_experiment_file_does(tmp_path: Path) -> None:
    # Tune's param_space keys RLlib's to_dict() names (`lambda`, a leading underscore);
    # the study, which users open in optuna-dashboard, keeps the names they wrote.
    space = {
        "lambda": tune.uniform(0.9, 0.99),
        "_train_batch_size_per_learner": tune.choice([1024, 2048]),
        "lr": tune.loguniform(1e-4, 1e-2),
        "gamma": 0.99,  # fixed: not the study's
    }
    names = {"lambda": "lambda_", "_train_batch_size_per_learner": "train_batch_size_per_learner"}
    folder = tmp_path / "pop"
    folder.mkdir()
    searcher = StudySearch(folder, "pop", metric="score", mode="max", seed=0, names=names)
    searcher.set_search_properties("score", "max", space)
    suggested = searcher.suggest("t1")
    assert set(suggested) == {"lambda", "_train_batch_size_per_learner", "lr"}
    study = optuna.load_study(study_name="pop", storage=study_url(folder))
    (trial,) = study.trials
    assert trial.params == {
        "lambda_": suggested["lambda"],
        "train_batch_size_per_learner": suggested["_train_batch_size_per_learner"],
        "lr": suggested["lr"],
    }
    # The names change nothing else: with the same seed, the same values as without them.
    plain_folder = tmp_path / "plain"
    plain_folder.mkdir()
    plain = StudySearch(plain_folder, "pop", metric="score", mode="max", seed=0)
    plain.set_search_properties("score", "max", space)
    assert plain.suggest("t1") == suggested
