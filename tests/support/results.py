"""Reading what a real run left: Tune's result rows and the MLflow store's result count."""

from __future__ import annotations

import contextlib
import json
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
