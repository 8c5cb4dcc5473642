"""Tune's result.json and progress.csv stay whole across a trial's restarts.

Ray's JSON logger keeps a trial's rows in the driver's staging folder, a background
thread copies that folder into the results folder now and then, and each time a trial
with a checkpoint starts an actor (PBT exploits and pauses, restores, reused actors) the
logger copies the results folder's file back over its own: rows written since the last
sync were lost, and a sync that caught a row half written had the next row appended to
it (two rows spliced into one line). The scenario here is that one, step by step, with
the loggers the workbench hands Tune (Tune's own if it hands none)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pyarrow.fs
import pytest
from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback

from tests.support.experiments import small_pbt, write_experiment
from workbench.experiment.resolve import load_and_resolve
from workbench.run.launch import _session
from workbench.trial.config import build_config


class _Storage:
    def __init__(self, path: Path) -> None:
        self.trial_fs_path = str(path)
        self.storage_filesystem = pyarrow.fs.LocalFileSystem()


class _Trial:
    """What Tune's loggers read of a trial: its staging and storage folders."""

    def __init__(self, staging: Path, storage: Path) -> None:
        staging.mkdir(parents=True, exist_ok=True)  # Tune makes it when it adds the trial
        self.config = {"lr": 0.001}
        self.local_path = str(staging)
        self.path = str(storage)
        self.storage = _Storage(storage)
        self.checkpoint: Any = None

    def init_local_path(self) -> None:
        Path(self.local_path).mkdir(parents=True, exist_ok=True)


def _loggers(tmp_path: Path) -> tuple[Any, Any]:
    """The JSON and CSV loggers a workbench run hands Tune (Tune adds its own when a
    run gives none of a kind)."""
    path = write_experiment(
        tmp_path, small_pbt(tmp_path, search_space={"params": {"lr": {"loguniform": [1e-4, 1e-2]}}})
    )
    resolved = load_and_resolve(path)
    callbacks = _session(
        resolved, build_config(resolved.experiment, resolved.defaults), progress_interval_s=1e9
    )
    given = callbacks.run_config.callbacks
    json_logger = next((c for c in given if isinstance(c, JsonLoggerCallback)), None)
    csv_logger = next((c for c in given if isinstance(c, CSVLoggerCallback)), None)
    return json_logger or JsonLoggerCallback(), csv_logger or CSVLoggerCallback()


def _sync(staging: Path, storage: Path, *, cut: int = 0) -> None:
    """Ray's syncer: the staging folder's files copied into the results folder; `cut`
    bytes short when it catches a file being written."""
    storage.mkdir(parents=True, exist_ok=True)
    for file in staging.iterdir():
        data = file.read_bytes()
        (storage / file.name).write_bytes(data[: len(data) - cut] if cut else data)


def test_rows_survive_restarts_from_checkpoints_whole_and_in_order(tmp_path: Path) -> None:
    json_logger, csv_logger = _loggers(tmp_path)
    staging, storage = tmp_path / "staging" / "PPO_00000", tmp_path / "results" / "PPO_00000"
    trial = _Trial(staging, storage)
    row = {"config": {"model": {"lstm_cell_size": 256}}, "env_runners": {"episode_return_mean": 1}}

    def result(iteration: int) -> None:
        data = {**row, "training_iteration": iteration}
        for logger in (json_logger, csv_logger):
            logger.on_trial_result(iteration, [trial], trial, data)

    for logger in (json_logger, csv_logger):
        logger.on_trial_start(0, [trial], trial)
    result(1)
    _sync(staging, storage)
    result(2)
    result(3)
    _sync(staging, storage, cut=20)  # caught iteration 3's row half written
    # PBT exploits the trial: it starts again from a checkpoint (a reused actor or a new one).
    trial.checkpoint = object()
    for logger in (json_logger, csv_logger):
        logger.on_trial_start(0, [trial], trial)
    result(3)
    result(4)
    for logger in (json_logger, csv_logger):
        logger.on_trial_complete(0, [trial], trial)
    _sync(staging, storage)

    lines = (storage / "result.json").read_text().splitlines()
    rows = [json.loads(line) for line in lines]  # none spliced
    assert [r["training_iteration"] for r in rows] == [1, 2, 3, 3, 4]  # none lost
    csv_lines = (storage / "progress.csv").read_text().splitlines()
    assert len(csv_lines) == 1 + 5  # the header and every row
    shutil.rmtree(staging)  # a new driver's staging folder: empty
    staging.mkdir()
    trial.checkpoint = object()
    for logger in (json_logger, csv_logger):
        logger.on_trial_start(0, [trial], trial)
    result(5)
    for logger in (json_logger, csv_logger):
        logger.on_trial_complete(0, [trial], trial)
    rows = [json.loads(x) for x in (storage / "result.json").read_text().splitlines()]
    assert [r["training_iteration"] for r in rows] == [1, 2, 3, 3, 4, 5]


def test_a_row_torn_by_a_killed_driver_is_cut_off_by_the_next(tmp_path: Path) -> None:
    json_logger, _ = _loggers(tmp_path)
    staging, storage = tmp_path / "staging" / "PPO_00000", tmp_path / "results" / "PPO_00000"
    storage.mkdir(parents=True)
    (storage / "result.json").write_text(
        '{"training_iteration": 1}\n{"training_iteration": 2, "config": {"lr": 0.0'
    )
    trial = _Trial(staging, storage)
    trial.checkpoint = object()  # resumed from its checkpoint by a new driver
    json_logger.on_trial_start(0, [trial], trial)
    json_logger.on_trial_result(2, [trial], trial, {"training_iteration": 2})
    json_logger.on_trial_complete(0, [trial], trial)
    _sync(staging, storage)
    rows = [json.loads(x) for x in (storage / "result.json").read_text().splitlines()]
    assert [r["training_iteration"] for r in rows] == [1, 2]


def test_an_experiment_ended_as_a_whole_closes_its_running_trials_files(tmp_path: Path) -> None:
    # A stopper's stop_all (a return target, an env-step budget) ends the experiment
    # without completing its running trials: Tune's loggers left their files open
    # (a ResourceWarning in the test of stop.population_env_steps).
    json_logger, csv_logger = _loggers(tmp_path)
    trial = _Trial(tmp_path / "staging" / "PPO_00000", tmp_path / "results" / "PPO_00000")
    for logger in (json_logger, csv_logger):
        logger.on_trial_start(0, [trial], trial)
        logger.on_trial_result(1, [trial], trial, {"training_iteration": 1})
    assert json_logger._rows and csv_logger._trial_files
    csv_file = csv_logger._trial_files[trial]
    for logger in (json_logger, csv_logger):
        logger.on_experiment_end([trial])
    assert not json_logger._rows and not csv_logger._trial_files and csv_file.closed


def test_tunes_default_loggers_are_off_only_inside_the_workbenchs_fit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ray.tune.utils.callback import _create_default_callbacks

    from workbench.tune_ext.result_files import without_tune_loggers

    def tune_adds() -> set[str]:
        return {type(c).__name__ for c in _create_default_callbacks([], air_verbosity=None)}

    key = "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"
    monkeypatch.delenv(key, raising=False)
    assert "TBXLoggerCallback" in tune_adds()  # the fall: Tune's TensorBoard logger
    with without_tune_loggers():
        assert not {"TBXLoggerCallback", "CSVLoggerCallback"} & tune_adds()
    # After it, a plain Tune run in the same process gets Tune's loggers again.
    assert key not in os.environ and "JsonLoggerCallback" in tune_adds()
    monkeypatch.setenv(key, "0")
    with without_tune_loggers():
        assert os.environ[key] == "1"
    assert os.environ[key] == "0"
