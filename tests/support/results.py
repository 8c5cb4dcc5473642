"""Reading what a real run left: Tune's result rows and the MLflow store's result count."""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
from pathlib import Path
from typing import Any


def result_rows(results_dir: Path) -> dict[str, list[dict[str, Any]]]:
    """Each trial's result.json rows, in order."""
    return {
        trial.name: [json.loads(line) for line in (trial / "result.json").read_text().splitlines()]
        for trial in sorted(results_dir.iterdir())
        if (trial / "result.json").is_file()
    }


def count_results(db: Path) -> dict[str, int]:
    """Trial name -> results in an sqlite store, read with plain SQL while a run writes it
    (an MlflowClient would race the run's own schema creation on a new store)."""
    if not db.exists():
        return {}
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        try:
            rows = conn.execute(
                "SELECT runs.name, COUNT(*) FROM metrics JOIN runs "
                "ON metrics.run_uuid = runs.run_uuid "
                "WHERE metrics.key = 'training_iteration' GROUP BY runs.name"
            ).fetchall()
        except sqlite3.OperationalError:  # tables not created yet, or locked
            return {}
    return {str(name): int(n) for name, n in rows}


def rows_as_ray_reads_them(results_dir: Path) -> tuple[dict[str, int], list[str]]:
    """Trial name -> the rows Ray's own ExperimentAnalysis reads from its folder, and the
    warnings Ray logged on the way (a row it cannot parse drops the trial's rows, with
    a warning)."""
    from ray.tune import ExperimentAnalysis

    warnings: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno >= logging.WARNING:
                warnings.append(record.getMessage())

    handler = Collect()
    ray_logger = logging.getLogger("ray")
    ray_logger.addHandler(handler)
    try:
        analysis = ExperimentAnalysis(str(results_dir))
        frames = analysis.trial_dataframes
    finally:
        ray_logger.removeHandler(handler)
    names = {trial.trial_id: Path(trial.path).name for trial in analysis.trials}
    return {names[trial_id]: len(frame) for trial_id, frame in frames.items()}, warnings
