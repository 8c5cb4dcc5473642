"""Pickles in results folders from before the package's wings name the old modules."""

from __future__ import annotations

import importlib
import pickle

import pytest

from workbench.moved import MOVED
from workbench.run.stopping import RulesStopper
from workbench.tracking.callback import MlflowTracker
from workbench.trial.callbacks import WorkbenchCallbacks
from workbench.trial.fast_runner import FastEnvRunner
from workbench.tune_ext.checkpoints import CheckpointGuard
from workbench.tune_ext.optuna_study import StudySearch
from workbench.tune_ext.pbt import WorkbenchPBT
from workbench.tune_ext.scheduler_state import SchedulerState


@pytest.mark.parametrize(
    ("old", "name", "new"),
    [
        ("workbench.fast_runner", "FastEnvRunner", FastEnvRunner),  # every RLlib config
        ("workbench.rllib_callbacks", "WorkbenchCallbacks", WorkbenchCallbacks),
        ("workbench.stopping", "RulesStopper", RulesStopper),  # tuner.pkl
        ("workbench.schedulers", "SchedulerState", SchedulerState),
        ("workbench.tracking", "MlflowTracker", MlflowTracker),  # a package now
        # Tune's subclasses, from run/ to tune_ext/: a module gone, and one that stayed.
        ("workbench.run.scheduler_state", "SchedulerState", SchedulerState),
        ("workbench.run.checkpoints", "CheckpointGuard", CheckpointGuard),
        ("workbench.run.optuna_study", "StudySearch", StudySearch),
        ("workbench.run.schedulers", "WorkbenchPBT", WorkbenchPBT),
        ("workbench.schedulers", "WorkbenchPBT", WorkbenchPBT),
    ],
)
def test_an_old_pickle_loads_the_class_from_its_new_home(old: str, name: str, new: type) -> None:
    assert pickle.loads(f"c{old}\n{name}\n.".encode()) is new


def test_every_old_module_points_at_modules_that_exist() -> None:
    for old, homes in MOVED.items():
        for home in homes:
            importlib.import_module(home)
        assert importlib.import_module(old) is not None, old


def test_an_unknown_name_of_an_old_module_is_an_attribute_error() -> None:
    module = importlib.import_module("workbench.launch")
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = module.nope
