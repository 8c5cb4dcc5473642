"""A compact live table of the population, and the record of each trial's hyperparameters.

Tune's own output dumps whole configs; people want one line per trial: status,
iteration, env steps, return and the searched hyperparameters' current values.
"""

from __future__ import annotations

import math
import numbers
import sys
import time
from dataclasses import dataclass, field
from typing import Any, TextIO

from ray.tune import Callback
from ray.tune.utils import flatten_dict

from workbench.names import RETURN_METRIC, STEPS_METRIC


@dataclass
class TrialRecord:
    name: str
    status: str = "PENDING"
    iteration: int = 0
    env_steps: int = 0
    last_return: float = math.nan
    best_return: float = math.nan
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    # (iteration, values) each time the searched values changed: the trial's schedule.
    schedule: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    error: str | None = None


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        return f"{value:.4g}"
    return str(value)


class ProgressTable(Callback):  # type: ignore[misc]
    """Prints the population every `interval_s` and on every status change."""

    def __init__(
        self,
        hyperparameters: dict[str, str],
        interval_s: float = 15.0,
        stream: TextIO | None = None,
    ) -> None:
        # tune key -> the name the user wrote
        self.hyperparameters = hyperparameters
        self.interval_s = interval_s
        self.stream = stream  # None: sys.stdout at print time (Tune pickles callbacks)
        self.records: dict[str, TrialRecord] = {}
        self._last_print = 0.0
        self._dirty = False

    # --- Tune callback hooks ------------------------------------------------------------
    def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self._record(trial).status = "RUNNING"
        self._changed()

    def on_trial_result(
        self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any], **info: Any
    ) -> None:
        result = flatten_dict(result, delimiter="/")
        record = self._record(trial)
        record.status = "RUNNING"
        record.iteration = int(result.get("training_iteration", record.iteration))
        record.env_steps = int(result.get(STEPS_METRIC, record.env_steps) or 0)
        value = result.get(RETURN_METRIC)
        # numbers.Real: RLlib reports some means as numpy.float32, not a Python float.
        if isinstance(value, numbers.Real) and not math.isnan(float(value)):
            record.last_return = float(value)
            if math.isnan(record.best_return) or record.last_return > record.best_return:
                record.best_return = record.last_return
        self._update_hyperparameters(record, trial.config)
        self._maybe_print()

    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self._record(trial).status = "TERMINATED"
        self._changed()

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        record = self._record(trial)
        record.status = "ERROR"
        record.error = str(getattr(trial, "error_file", "") or "")
        self._changed()

    def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
        for record in self.records.values():
            if record.status in ("RUNNING", "PENDING", "PAUSED"):
                record.status = "STOPPED"  # the experiment ended around it (stop_all)
        self.print_table()

    # --- helpers ----------------------------------------------------------------------
    def _record(self, trial: Any) -> TrialRecord:
        record = self.records.get(trial.trial_id)
        if record is None:
            record = self.records[trial.trial_id] = TrialRecord(name=str(trial))
            self._update_hyperparameters(record, trial.config)
        return record

    def _update_hyperparameters(self, record: TrialRecord, config: dict[str, Any]) -> None:
        values = {name: config.get(key) for key, name in self.hyperparameters.items()}
        if values != record.hyperparameters:
            record.hyperparameters = values
            record.schedule.append((record.iteration, dict(values)))

    def _changed(self) -> None:
        self._dirty = True
        self._maybe_print(force=True)

    def _maybe_print(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self._last_print >= self.interval_s:
            self.print_table()
            self._last_print = now

    def print_table(self) -> None:
        headers = ["trial", "status", "iter", "env steps", "return", *self.hyperparameters.values()]
        rows = [
            [
                r.name,
                r.status,
                str(r.iteration),
                str(r.env_steps),
                _fmt(r.last_return),
                *(_fmt(r.hyperparameters.get(n)) for n in self.hyperparameters.values()),
            ]
            for r in self.records.values()
        ]
        widths = [max([len(h)] + [len(row[i]) for row in rows]) for i, h in enumerate(headers)]
        lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
        lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
        print("\n".join(lines) + "\n", file=self.stream or sys.stdout, flush=True)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["stream"] = None
        return state
