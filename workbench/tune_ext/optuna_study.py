"""The Optuna study of a population Optuna drives, in an sqlite file of its results folder.

Ray's ``OptunaSearch`` keeps its study in memory unless handed a storage, and when handed
one it pickles the storage with the searcher's state: the study's absolute database URL.
A population resumed where it lies now (a copied or moved results folder, which the
workbench resumes where it lies) would then write its study into the database of the
folder it came from, or fail when that is gone. `StudySearch` saves what the database
does not hold (the sampler, Tune's trial ids against Optuna's) and, on restore,
reconnects to the study in the results folder where it lies now.

The study is ``optuna.db`` in the results folder, named as the population: Optuna's
tools open it while the run goes on and after it::

    optuna-dashboard sqlite:///results/<population>/optuna.db
    optuna.load_study(study_name="<population>", storage="sqlite:///.../optuna.db")
"""

from __future__ import annotations

import math
import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import optuna
from ray.tune.search.optuna import OptunaSearch

STUDY_FILE = "optuna.db"
TRIAL_ID_ATTR = "tune_trial_id"  # each study trial's user attribute: Tune's trial id


def study_url(results_dir: Path) -> str:
    """The study's storage URL: the sqlite file in the results folder, where it lies now."""
    return f"sqlite:///{(results_dir / STUDY_FILE).resolve()}"


class StudySearch(OptunaSearch):  # type: ignore[misc]
    """``OptunaSearch`` with its study in ``<results folder>/optuna.db``, under the
    population's name, which a resume reopens where the folder lies now (in memory when
    the folder does not exist)."""

    def __init__(
        self,
        results_dir: Path,
        study_name: str,
        *,
        metric: str,
        mode: str,
        seed: int | None,
        n_startup_trials: int = 10,
        names: Mapping[str, str] | None = None,
    ) -> None:
        # A folder not there yet (`workbench run --dry-run` draws the trials before any
        # is made) keeps the study in memory: the searcher writes no folder of its own.
        storage = (
            optuna.storages.RDBStorage(study_url(results_dir)) if results_dir.is_dir() else None
        )
        # TPE models the study after n_startup_trials random ones (Optuna's default 10:
        # more than a small population ever runs, which would make TPE a random search).
        sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=n_startup_trials)
        super().__init__(
            metric=metric, mode=mode, sampler=sampler, study_name=study_name, storage=storage
        )
        # Tune's param_space spells some hyperparameters as RLlib's to_dict() does
        # (``lambda``, ``_train_batch_size_per_learner``); the study names them as the
        # experiment file, `workbench show` and MLflow do (``lambda_``). Tune's key ->
        # the user's name, for the searched ones that differ.
        self._names = dict(names or {})

    def set_search_properties(
        self, metric: str | None, mode: str | None, config: dict[str, Any], **spec: Any
    ) -> bool:
        """Ray's, over a param_space whose searched keys carry the user's names, in the
        same order (the order Optuna draws them in: a seed draws the same values)."""
        taken = {self._names[k] for k in config if k in self._names}
        renamed = {
            self._names.get(k, k): v
            for k, v in config.items()
            if k in self._names or k not in taken  # the searched value wins a clash
        }
        return bool(super().set_search_properties(metric, mode, renamed, **spec))

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        """Intermediate scores for Optuna's pruners; a result without one (no episode has
        ended yet: MountainCar's first 999-step episodes) tells it nothing. Ray's
        OptunaSearch raised KeyError on it, which ended the whole run."""
        value = result.get(self.metric)
        if isinstance(value, int | float) and not math.isnan(value):
            super().on_trial_result(trial_id, result)

    def suggest(self, trial_id: str) -> dict[str, Any] | None:
        """Ray's suggestion; the study's trial is tagged with Tune's trial id (the trial
        ``PPO_<id>`` of the results folder and of MLflow)."""
        config: dict[str, Any] | None = super().suggest(trial_id)
        trial = self._ot_trials.get(trial_id)
        if trial is not None and self._storage is not None:
            trial.set_user_attr(TRIAL_ID_ATTR, trial_id)
        if not isinstance(config, dict):
            return config  # None, or Ray's FINISHED marker
        keys = {name: key for key, name in self._names.items()}  # back to Tune's keys
        return {keys.get(k, k): v for k, v in config.items()}

    def save(self, checkpoint_path: str) -> None:
        """What the study's database does not hold: no storage and no study (their URL
        is absolute), Optuna's trial ids instead of its trial objects."""
        if self._storage is None:  # a study in memory (restored from before): Ray's way
            super().save(checkpoint_path)
            return
        state = {
            k: v
            for k, v in self.__dict__.items()
            if k not in ("_storage", "_ot_study", "_ot_trials")
        }
        state["_ot_trial_ids"] = {tid: t._trial_id for tid, t in self._ot_trials.items()}
        if self._ot_study is not None:
            state["_study_sampler"] = self._ot_study.sampler  # TPE's RNG goes on
        with open(checkpoint_path, "wb") as f:
            pickle.dump(state, f)

    def restore(self, checkpoint_path: str) -> None:
        """The saved state, and the study reopened in this searcher's storage (the results
        folder where it lies now)."""
        with open(checkpoint_path, "rb") as f:
            state: dict[str, Any] = pickle.load(f)
        if "_ot_trial_ids" not in state:
            # Ray's own format: a population from before, its study in memory; it stays so.
            super().restore(checkpoint_path)
            return
        ids = state.pop("_ot_trial_ids")
        sampler = state.pop("_study_sampler", self._sampler)
        storage = self._storage
        self.__dict__.update(state)
        self._storage = storage
        assert storage is not None
        study = optuna.load_study(study_name=self._study_name, storage=storage, sampler=sampler)
        # Ray infers the attribute None from its __init__.
        self._ot_study = study  # type: ignore[assignment]
        self._ot_trials = {tid: optuna.Trial(study, i) for tid, i in ids.items()}


def close_study(results_dir: Path, study_name: str) -> int:
    """When a population has ended (not interrupted), its trials the population's own rule
    or budget stopped are still RUNNING in the study: Tune tells the searcher only of trials
    that end by themselves. They become PRUNED, with their last reported score as value,
    as Optuna records a trial stopped early. Returns how many."""
    if not (results_dir / STUDY_FILE).is_file():
        return 0
    study = optuna.load_study(study_name=study_name, storage=study_url(results_dir))
    running = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
    for trial in running:
        study.tell(trial.number, state=optuna.trial.TrialState.PRUNED)
    return len(running)


def record_result(results_dir: Path, study_name: str, result: dict[str, Any]) -> bool:
    """The population's result in its study: a study user attribute
    ``population_result`` (the record), and ``population_result: true`` on the study
    trial of the member that produced it. The study's own best trial is the one with the
    best short evaluation (its value); the result is that evaluation confirmed over more
    episodes among the best few. False when there is no study."""
    if not (results_dir / STUDY_FILE).is_file():
        return False
    study = optuna.load_study(study_name=study_name, storage=study_url(results_dir))
    study.set_user_attr("population_result", result)
    for trial in study.get_trials(deepcopy=False):
        if trial.user_attrs.get(TRIAL_ID_ATTR) == result.get("trial_id"):
            study._storage.set_trial_user_attr(trial._trial_id, "population_result", True)
    return True
