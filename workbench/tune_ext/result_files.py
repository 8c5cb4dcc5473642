"""Tune's per-trial result files (``result.json``, ``progress.csv``), written where they last.

Ray's JsonLoggerCallback and CSVLoggerCallback write them in the driver's staging folder
(``/tmp/ray/session_*/artifacts/...``), which a background thread copies into the
results folder now and then. And whenever a trial that has a checkpoint starts an actor
(every PBT exploit and pause, every restore, a reused actor or a new one), the JSON
logger first copies the results folder's ``result.json`` back over the staging one
(``LoggerCallback._restore_from_remote``). That copy is as old as the last sync: the
rows written since are lost (155 rows against 248 results in MLflow); and when the sync
had caught the file in the middle of a row (a row is written in several pieces), the
next row is appended to half a row, two rows spliced into one line, which Ray's own
``ExperimentAnalysis`` cannot read (``JSONDecodeError``: it drops the trial's rows).

The workbench's loggers write each row straight into the trial's folder in the results
storage (a folder on a local or shared filesystem), each row in one write, and never
copy anything back: the results folder holds the only copy, so nothing races. A row torn
by a killed driver (the only way left to leave half a row) is cut off when the next
driver opens the file. Being a JsonLoggerCallback and a CSVLoggerCallback, they take the
place of Tune's own (Tune adds its loggers only when none of their kind is given).

Tune's third logger, TensorBoard's, is left out while the workbench's ``fit()`` sets up
(``without_tune_loggers``): on MountainCar's 0.7 s iterations its event files cost the
driver about 12 ms a result, more than the MLflow tracker, for a copy of what MLflow
holds."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ray.air.constants import EXPR_PROGRESS_FILE, EXPR_RESULT_FILE
from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback
from ray.tune.utils.util import SafeFallbackEncoder  # type: ignore[attr-defined]


def _in_local_storage(trial: Any) -> bool:
    """The trial's results folder is a path on this machine (always for the workbench,
    whose storage is a folder; a cloud URI would be Ray's to sync)."""
    filesystem = getattr(trial.storage, "storage_filesystem", None)
    return filesystem is None or getattr(filesystem, "type_name", "local") == "local"


def drop_torn_line(path: Path) -> None:
    """Cuts a last line that has no newline (a row a killed writer left half written)."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return
    if size == 0:
        return
    with path.open("rb+") as f:
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return
        cut, end = 0, size
        while end > 0:
            start = max(0, end - 65536)
            f.seek(start)
            newline = f.read(end - start).rfind(b"\n")
            if newline >= 0:
                cut = start + newline + 1
                break
            end = start
        f.truncate(cut)


class _Appender:
    """A file opened for appending whole rows, each in one write."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        drop_torn_line(path)
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, text: str) -> None:
        assert self._fd is not None
        data = memoryview(text.encode())
        while data:
            data = data[os.write(self._fd, data) :]

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class ResultJson(JsonLoggerCallback):  # type: ignore[misc]
    """``result.json``: one JSON row per result, appended to the trial's folder in the
    results storage (see the module's doc)."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self._rows: dict[Any, _Appender] = {}

    def log_trial_start(self, trial: Any) -> None:
        if not _in_local_storage(trial):
            super().log_trial_start(trial)
            return
        self.log_trial_end(trial)
        trial.init_local_path()  # params.json goes by the staging folder, whole
        self.update_config(trial, trial.config)
        self._rows[trial] = _Appender(Path(trial.path) / EXPR_RESULT_FILE)

    def log_trial_result(self, iteration: int, trial: Any, result: dict[str, Any]) -> None:
        if trial not in self._rows and trial not in self._trial_files:
            self.log_trial_start(trial)
        if trial in self._trial_files:  # not local storage: Ray's way
            super().log_trial_result(iteration, trial, result)
            return
        self._rows[trial].write(json.dumps(result, cls=SafeFallbackEncoder) + "\n")

    def log_trial_end(self, trial: Any, failed: bool = False) -> None:
        rows = self._rows.pop(trial, None)
        if rows is not None:
            rows.close()
        super().log_trial_end(trial, failed)

    def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
        close_all(self)
        super().on_experiment_end(trials, **info)


class ProgressCsv(CSVLoggerCallback):  # type: ignore[misc]
    """``progress.csv``, appended to the trial's folder in the results storage (see the
    module's doc); Ray's header and columns otherwise."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]

    def _setup_trial(self, trial: Any) -> None:
        if not _in_local_storage(trial):
            super()._setup_trial(trial)
            return
        if trial in self._trial_files:
            self._trial_files[trial].close()
        trial.init_local_path()
        path = Path(trial.path) / EXPR_PROGRESS_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        drop_torn_line(path)
        self._trial_continue[trial] = path.exists() and path.stat().st_size > 0
        self._trial_files[trial] = path.open("at")
        self._trial_csv[trial] = None  # type: ignore[assignment]

    def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
        close_all(self)
        super().on_experiment_end(trials, **info)


def close_all(logger: Any) -> None:
    """Closes the files of the trials that never ended. Tune ends each trial's files when
    the trial completes or fails; an experiment a stopper ends as a whole
    (``stop_all``: a return target, an env-step budget) stops its running trials without
    that, and their files stayed open until the driver exited."""
    for files in (getattr(logger, "_rows", {}), getattr(logger, "_trial_files", {})):
        for trial in list(files):
            files.pop(trial).close()


def result_loggers() -> list[Any]:
    """The loggers to hand Tune in place of its own JSON and CSV loggers."""
    return [ResultJson(), ProgressCsv()]


@contextmanager
def without_tune_loggers() -> Iterator[None]:
    """Tune adds none of its default loggers to a ``fit()`` started inside (it reads
    ``TUNE_DISABLE_AUTO_CALLBACK_LOGGERS`` when it sets up the callbacks). Only for the
    workbench's own ``fit()``: a plain Tune run later in the same process keeps them."""
    key = "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"
    before = os.environ.get(key)
    os.environ[key] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = before
