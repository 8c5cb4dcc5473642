"""Small MLflow stores laid out as the workbench's tracker writes them, built with a plain
MlflowClient on sqlite in a test's folder (no Ray, no Tune): a population's parent run and
its trial runs, their metric histories, tags and lineage artifact."""

from __future__ import annotations

import functools
import json
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlflow.tracking import MlflowClient

from workbench.names import (
    LINEAGE_FILE,
    PARENT_RUN_TAG,
    RESULTS_DIR_TAG,
    RETURN_METRIC,
    ROLE_TAG,
    RUN_NAME_TAG,
    STEP_METRIC,
    TRIAL_ID_TAG,
)
from workbench.tracking.store import client_for

# PPO_00001 cloned PPO_00000's weights at iteration 1 and went on with lr 0.2.
EXPLOIT = {
    "seq": 0,
    "time": 1.0,
    "target": "abc_00001",
    "target_name": "PPO_00001",
    "source": "abc_00000",
    "source_name": "PPO_00000",
    "target_iteration": 1,
    "source_iteration": 1,
    "old": {"lr": 0.3},
    "new": {"lr": 0.2},
}


@dataclass
class Store:
    uri: str
    client: MlflowClient
    artifacts: Path

    def experiment(self, name: str) -> str:
        """The MLflow experiment's id (created on first use)."""
        found = self.client.get_experiment_by_name(name)
        if found is not None:
            return str(found.experiment_id)
        location = (self.artifacts / name).as_uri()
        return str(self.client.create_experiment(name, artifact_location=location))

    def population(
        self,
        name: str,
        *,
        experiment: str = "exp",
        results_dir: Path | str = "",
        start_ms: int | None = None,
    ) -> str:
        """A population's parent run (started at `start_ms`, else now); its run id."""
        run = self.client.create_run(
            self.experiment(experiment),
            start_time=start_ms,
            run_name=name,
            tags={
                ROLE_TAG: "population",
                RUN_NAME_TAG: name,
                RESULTS_DIR_TAG: str(results_dir),
            },
        )
        return str(run.info.run_id)

    def trial(
        self,
        population: str,
        name: str,
        *,
        returns: Sequence[float] = (),
        metrics: Mapping[str, Sequence[float]] | None = None,
        tags: Mapping[str, str] | None = None,
        params: Mapping[str, str] | None = None,
        status: str = "FINISHED",
    ) -> str:
        """A trial run of `population` (its trial id: ``abc_<index>`` of ``PPO_<index>``):
        one result per return, metrics by step from 1; its run id."""
        parent = self.client.get_run(population)
        run = self.client.create_run(
            parent.info.experiment_id,
            run_name=name,
            tags={
                PARENT_RUN_TAG: population,
                ROLE_TAG: "trial",
                RUN_NAME_TAG: name,
                TRIAL_ID_TAG: "abc_" + name.rsplit("_", 1)[-1],
                **(tags or {}),
            },
        )
        run_id = str(run.info.run_id)
        for key, text in (params or {}).items():
            self.client.log_param(run_id, key, text)
        for step, value in enumerate(returns, 1):
            self.client.log_metric(run_id, RETURN_METRIC, value, step=step)
            self.client.log_metric(run_id, STEP_METRIC, step, step=step)
        for key, values in (metrics or {}).items():
            for step, value in enumerate(values, 1):
                self.client.log_metric(run_id, key, value, step=step)
        self.client.set_terminated(run_id, status)
        return run_id

    def lineage(self, population: str, records: Sequence[Mapping[str, Any]]) -> None:
        """The population's lineage.jsonl artifact."""
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / LINEAGE_FILE
            path.write_text("".join(json.dumps(dict(r)) + "\n" for r in records))
            self.client.log_artifact(population, str(path))


@functools.cache
def _empty_store() -> bytes:
    """The file of an empty store: MLflow's schema migrations take seconds, so they run
    once a test process and every new store starts from a copy."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "mlflow.db"
        client_for(f"sqlite:///{path}").search_experiments()  # creates the schema
        return path.read_bytes()


def seed_store(path: Path) -> None:
    """An empty store's file at ``path`` unless a store is there: what MLflow would create
    on first use, without its migrations."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(_empty_store())


def new_store(folder: Path) -> Store:
    """An empty sqlite store at ``folder / "mlflow.db"``, artifacts beside it."""
    seed_store(folder / "mlflow.db")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    client: MlflowClient = client_for(uri)  # as the commands make it (no progress bars)
    return Store(uri, client, folder / "mlartifacts")
