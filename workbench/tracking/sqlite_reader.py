"""A read-only reader of MLflow's sqlite store, for the inspection commands.

Importing MLflow takes 1.5-2.5 s on a quiet machine (its client pulls in pandas, alembic,
SQLAlchemy and its GenAI modules), longer than the whole of what `workbench runs`, `show`
or `lineage` then read. For an sqlite store whose schema is one MLflow writes today (its
alembic revision is in ``KNOWN_REVISIONS``), these commands read the database with
Python's own sqlite3 instead, read-only, through the few calls of ``MlflowClient`` they
use, answered the same way (`tests/unit/test_sqlite_reader.py` compares both on one
store). Any other store, or a revision not listed (an MLflow upgrade that migrated the
schema), is read by MLflow's client: slower, never wrong.

What it answers, as MLflow's SqlAlchemyStore does: active experiments (newest first) and
runs only in searches (``get_run`` finds a deleted one too); a run's metrics are its latest values
(``latest_metrics``), NaN where MLflow stored ``is_nan``; runs ordered by start time,
newest first, then run id; filters are tag comparisons (``tags.`key` = 'value'``,
``LIKE``, case-sensitive, in sqlite's own words, as MLflow's query puts them) joined by
``and``, the only filters the workbench writes.
"""

from __future__ import annotations

import re
import shutil
import sqlite3
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The alembic revisions of MLflow's tracking schema this reader was checked against
# (MLflow 3.x, as pinned in pyproject.toml): 3.17's head, and 3.18's, whose three new
# revisions add the skill registry's tables, columns of the issues' tables and the MCP
# servers' version collation, none of them a table this reader reads.
KNOWN_REVISIONS = frozenset({"dc11669786a5", "f4a9b2c7d1e6"})
DEFAULT_WORKSPACE = "default"

_CONDITION = re.compile(
    r"\s*tags\.`(?P<key>[^`]+)`\s*(?P<op>=|LIKE)\s*'(?P<value>(?:[^']|'')*)'\s*", re.IGNORECASE
)


class RunNotFound(LookupError):
    """No run with that id (MLflow's RESOURCE_DOES_NOT_EXIST)."""


@dataclass(frozen=True)
class Experiment:
    experiment_id: str
    name: str
    artifact_location: str | None
    lifecycle_stage: str


@dataclass(frozen=True)
class Metric:
    key: str
    value: float
    timestamp: int
    step: int


@dataclass(frozen=True)
class RunInfo:
    run_id: str
    run_name: str | None
    experiment_id: str
    status: str
    start_time: int | None
    end_time: int | None
    lifecycle_stage: str
    artifact_uri: str | None

    @property
    def run_uuid(self) -> str:
        return self.run_id


@dataclass(frozen=True)
class RunData:
    metrics: dict[str, float] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Run:
    info: RunInfo
    data: RunData


@dataclass(frozen=True)
class FileInfo:
    path: str  # relative to the run's artifact root, as MLflow lists it
    is_dir: bool
    file_size: int | None


class LocalArtifacts:
    """A run's artifacts in a local folder, listed and copied as MLflow's local artifact
    repository does (the sqlite store's ``mlartifacts/``), without importing MLflow."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def list_artifacts(self, path: str | None = None) -> list[FileInfo]:
        folder = self.root / path if path else self.root
        if not folder.is_dir():
            return []
        out = []
        for entry in sorted(folder.iterdir()):
            rel = entry.relative_to(self.root).as_posix()
            size = None if entry.is_dir() else entry.stat().st_size
            out.append(FileInfo(rel, entry.is_dir(), size))
        return out

    def download_artifacts(self, artifact_path: str, dst_path: str | None = None) -> str:
        source = self.root / artifact_path
        if not source.exists():
            raise FileNotFoundError(f"no artifact {artifact_path!r} in {self.root}")
        target = Path(dst_path or ".") / artifact_path
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, dirs_exist_ok=True)
        else:
            shutil.copyfile(source, target)
        return str(target)


def local_artifacts(artifact_uri: str | None) -> LocalArtifacts | None:
    """A local artifact root (``file://`` or a plain path) as LocalArtifacts, else None."""
    if not artifact_uri:
        return None
    if artifact_uri.startswith("file:"):
        return LocalArtifacts(Path(urllib.parse.unquote(urllib.parse.urlparse(artifact_uri).path)))
    if "://" not in artifact_uri and ":" not in artifact_uri.split("/", 1)[0]:
        return LocalArtifacts(Path(artifact_uri))
    return None


def artifact_repository(artifact_uri: str) -> Any:
    local = local_artifacts(artifact_uri)
    if local is not None:
        return local
    # heavy (MLflow): a remote artifact store
    from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

    return get_artifact_repository(artifact_uri)


def schema_revision(path: Path) -> str | None:
    """The alembic revision of an MLflow sqlite store (None: not one, or unreadable)."""
    try:
        with _connect(path) as db:
            row = db.execute("SELECT version_num FROM alembic_version").fetchone()
    except sqlite3.Error:
        return None
    return str(row[0]) if row else None


def readable(path: Path) -> bool:
    """The store's schema is one this reader knows."""
    return schema_revision(path) in KNOWN_REVISIONS


def _connect(path: Path) -> sqlite3.Connection:
    uri = "file:" + str(path.resolve()) + "?mode=ro"
    return sqlite3.connect(uri, uri=True, timeout=10)


def _number(value: float, is_nan: Any) -> float:
    return float("nan") if is_nan else float(value)


class SqliteReader:
    """The calls of ``MlflowClient`` the inspection commands make, on an sqlite store."""

    def __init__(self, path: Path, tracking_uri: str) -> None:
        self.path = path
        self.tracking_uri = tracking_uri
        self._db = _connect(path)
        self._db.execute("PRAGMA case_sensitive_like = true")  # as MLflow's sessions set it
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(experiments)")}
        self._workspaces = "workspace" in columns

    # --- experiments ------------------------------------------------------------------
    def _experiments(self, where: str = "", args: tuple[Any, ...] = ()) -> list[Experiment]:
        clauses = ["lifecycle_stage = 'active'"] + ([where] if where else [])
        if self._workspaces:
            clauses.append("workspace = ?")
            args = (*args, DEFAULT_WORKSPACE)
        rows = self._db.execute(
            "SELECT experiment_id, name, artifact_location, lifecycle_stage FROM experiments "
            f"WHERE {' AND '.join(clauses)} ORDER BY creation_time DESC, experiment_id",
            args,
        )
        return [Experiment(str(r[0]), r[1], r[2], r[3]) for r in rows]

    def search_experiments(self) -> list[Experiment]:
        return self._experiments()

    def get_experiment_by_name(self, name: str) -> Experiment | None:
        found = self._experiments("name = ?", (name,))
        return found[0] if found else None

    def get_experiment(self, experiment_id: str) -> Experiment:
        row = self._db.execute(
            "SELECT experiment_id, name, artifact_location, lifecycle_stage FROM experiments "
            "WHERE experiment_id = ?",
            (int(experiment_id),),
        ).fetchone()
        if row is None:
            raise LookupError(f"no experiment with id {experiment_id}")
        return Experiment(str(row[0]), row[1], row[2], row[3])

    # --- runs -------------------------------------------------------------------------
    def get_run(self, run_id: str) -> Run:
        runs = self._runs("run_uuid = ?", (run_id,))
        if not runs:
            raise RunNotFound(f"Run with id={run_id} not found")
        return runs[0]

    def search_runs(
        self,
        experiment_ids: list[str],
        filter_string: str = "",
        order_by: list[str] | None = None,
        max_results: int = 1000,
    ) -> list[Run]:
        conditions = _conditions(filter_string)
        if order_by not in (None, [], ["start_time DESC"]):
            raise NotImplementedError(f"order_by {order_by!r}: only start_time DESC is read")
        if not experiment_ids:
            return []
        marks = ",".join("?" * len(experiment_ids))
        where = f"lifecycle_stage = 'active' AND experiment_id IN ({marks})"
        args: tuple[Any, ...] = tuple(int(e) for e in experiment_ids)
        for key, op, value in conditions:
            # sqlite's own comparison, as MLflow's query runs it.
            where += f" AND run_uuid IN (SELECT run_uuid FROM tags WHERE key = ? AND value {op} ?)"
            args += (key, value)
        return self._runs(where, args, limit=max_results)

    def list_artifacts(self, run_id: str, path: str | None = None) -> list[Any]:
        return list(artifact_repository(self._artifact_uri(run_id)).list_artifacts(path))

    def download_artifacts(self, run_id: str, path: str, dst_path: str | None = None) -> str:
        return str(
            artifact_repository(self._artifact_uri(run_id)).download_artifacts(path, dst_path)
        )

    def _artifact_uri(self, run_id: str) -> str:
        uri = self.get_run(run_id).info.artifact_uri
        if not uri:
            raise LookupError(f"run {run_id} has no artifact location")
        return uri

    def get_metric_history(self, run_id: str, key: str) -> list[Metric]:
        rows = self._db.execute(
            "SELECT key, value, is_nan, timestamp, step FROM metrics "
            "WHERE run_uuid = ? AND key = ? ORDER BY timestamp, step, value",
            (run_id, key),
        )
        return [Metric(r[0], _number(r[1], r[2]), int(r[3]), int(r[4])) for r in rows]

    def _runs(self, where: str, args: tuple[Any, ...], limit: int = -1) -> list[Run]:
        # Only the runs returned have their tags, params and metrics read.
        rows = self._db.execute(
            "SELECT run_uuid, name, experiment_id, status, start_time, end_time, "
            "lifecycle_stage, artifact_uri FROM runs "
            f"WHERE {where} ORDER BY start_time IS NULL, start_time DESC, run_uuid LIMIT ?",
            (*args, limit),
        ).fetchall()
        if not rows:
            return []
        ids = [r[0] for r in rows]
        tags = self._by_run("SELECT run_uuid, key, value FROM tags", ids)
        params = self._by_run("SELECT run_uuid, key, value FROM params", ids)
        metrics = self._by_run("SELECT run_uuid, key, value, is_nan FROM latest_metrics", ids)
        out = []
        for r in rows:
            run_tags = {k: v for k, v in tags.get(r[0], [])}
            info = RunInfo(
                run_id=r[0],
                # A run logged without a name: MLflow reads it from the run-name tag.
                run_name=r[1] or run_tags.get("mlflow.runName"),
                experiment_id=str(r[2]),
                status=r[3],
                start_time=r[4],
                end_time=r[5],
                lifecycle_stage=r[6],
                artifact_uri=r[7],
            )
            data = RunData(
                metrics={k: _number(v, nan) for k, v, nan in metrics.get(r[0], [])},
                params={k: v for k, v in params.get(r[0], [])},
                tags=run_tags,
            )
            out.append(Run(info, data))
        return out

    def _by_run(self, select: str, ids: list[str]) -> dict[str, list[tuple[Any, ...]]]:
        out: dict[str, list[tuple[Any, ...]]] = {}
        for start in range(0, len(ids), 500):  # sqlite's limit on bound parameters
            chunk = ids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            for row in self._db.execute(f"{select} WHERE run_uuid IN ({marks})", chunk):
                out.setdefault(row[0], []).append(tuple(row[1:]))
        return out


def _conditions(filter_string: str) -> list[tuple[str, str, str]]:
    """[(tag key, '=' or 'LIKE', value)] of ``tags.`k` = 'v' and ...``."""
    if not filter_string.strip():
        return []
    out = []
    for part in re.split(r"\s+and\s+", filter_string.strip(), flags=re.IGNORECASE):
        match = _CONDITION.fullmatch(part)
        if match is None:
            raise NotImplementedError(f"filter {part!r}: only tag comparisons are read")
        out.append((match["key"], match["op"].upper(), match["value"].replace("''", "'")))
    return out
