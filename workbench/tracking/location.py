"""Where a population's results folder and artifacts lie, for a store that may have moved.

A population folder lives beside the default store: ``<storage>/<name>`` next to
``<storage>/mlflow.db`` and ``<storage>/mlartifacts``. The storage folder is the unit
that can be copied or moved whole, so what the store records about a population beside
it is relative to the store: the population's tag ``workbench.results_dir`` (and the key
that finds its runs again) is its folder's name, and a reader takes it against the
folder the store lies in now. A store elsewhere (a server, or a database shared by
several storage folders) records absolute paths, as it cannot know where its readers
stand.

MLflow itself keeps absolute artifact URIs (``file:///<storage>/mlartifacts/...``,
fixed when an experiment and a run are created). For a store that was moved with its
``mlartifacts`` folder, the readers here take the artifacts beside the store, and a
writer (a run or resume into the moved store) rewrites the URIs of its own experiment
before it writes (`rebase_artifacts`), so that nothing is ever written back into the
folder the store was copied from."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from workbench.names import ARTIFACTS_DIR, RESOLVED_FILE
from workbench.tracking.sqlite_reader import artifact_repository


def sqlite_file(uri: str | None) -> Path | None:
    """The database file of an ``sqlite:///`` tracking URI (None for another store)."""
    if not isinstance(uri, str) or not uri.startswith("sqlite:///"):
        return None
    path = uri.removeprefix("sqlite:///").split("?", 1)[0]
    if path.startswith("file:"):  # SQLite's URI filename (a read-only client's)
        path = unquote(path.removeprefix("file:"))
    return Path(path).resolve() if path and path != ":memory:" else None


def store_folder(uri: str | None) -> Path | None:
    """The folder an sqlite store lies in (None for another store)."""
    db = sqlite_file(uri)
    return db.parent if db is not None else None


def results_dir_tag(results_dir: Path, uri: str) -> str:
    """What the store records as the population's folder: its name when it lies beside
    the store (an sqlite store in its storage folder), else its absolute path."""
    folder = store_folder(uri)
    here = results_dir.resolve()
    if folder is not None and here.parent == folder:
        return here.name
    return str(here)


def results_dir_of(tag: str, uri: str | None) -> str:
    """Where the population a store's tag names lies now ('' if it records none).

    A name is taken against the folder the store lies in. An absolute path from a store
    beside its populations (written before tags were relative) is taken beside the store
    when a population folder of that name lies there: the store and its populations
    were copied or moved together."""
    if not tag:
        return ""
    folder = store_folder(uri)
    path = Path(tag)
    if not path.is_absolute():
        return str(folder / path) if folder is not None else tag
    if folder is not None and path.parent != folder:
        beside = folder / path.name
        if (beside / RESOLVED_FILE).is_file():
            return str(beside)
    return tag


def _local_path(uri: str) -> Path | None:
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return Path(unquote(parsed.path))
    if parsed.scheme == "" and uri.startswith("/"):
        return Path(uri)
    return None


def moved_artifact_uri(artifact_uri: str, uri: str | None) -> str:
    """A run's or experiment's artifact URI, taken beside the store when the store was
    moved with its ``mlartifacts`` folder (else as recorded)."""
    folder = store_folder(uri)
    path = _local_path(artifact_uri) if folder is not None else None
    if folder is None or path is None or ARTIFACTS_DIR not in path.parts:
        return artifact_uri
    parts = path.parts
    at = len(parts) - 1 - parts[::-1].index(ARTIFACTS_DIR)
    root = folder / ARTIFACTS_DIR
    if Path(*parts[: at + 1]) == root:
        return artifact_uri
    here = root.joinpath(*parts[at + 1 :])
    return here.as_uri() if here.exists() else artifact_uri


def _run_artifact_root(client: Any, run_id: str) -> str | None:
    """The run's artifact root where it lies now, when that differs from the record."""
    uri = getattr(client, "tracking_uri", None)
    if store_folder(uri) is None:
        return None
    recorded = client.get_run(run_id).info.artifact_uri
    moved = moved_artifact_uri(recorded, uri)
    return moved if moved != recorded else None


def artifact_names(client: Any, run_id: str) -> set[str]:
    """The paths of a run's top-level artifacts (see `moved_artifact_uri`)."""
    root = _run_artifact_root(client, run_id)
    if root is None:
        return {a.path for a in client.list_artifacts(run_id)}
    return {a.path for a in _repository(root).list_artifacts()}


def download_artifact(client: Any, run_id: str, path: str, dst: str) -> str:
    """One artifact of a run into `dst` (see `moved_artifact_uri`); its local path."""
    root = _run_artifact_root(client, run_id)
    if root is None:
        return str(client.download_artifacts(run_id, path, dst))
    return str(_repository(root).download_artifacts(path, dst))


def _repository(artifact_uri: str) -> Any:
    # A local folder is read without MLflow (workbench.tracking.sqlite_reader); another
    # store through MLflow's repository for it.
    return artifact_repository(artifact_uri)


def rebase_artifacts(uri: str, experiment_id: str, artifact_root: Path) -> bool:
    """Points an experiment of a moved sqlite store, and its runs, at the ``mlartifacts``
    folder beside the store (`artifact_root`) instead of the one it was copied from.

    Only for the workbench's own layout: `artifact_root` is ``<store folder>/mlartifacts``
    and the experiment's recorded location is another folder's ``mlartifacts``. Returns
    whether anything changed."""
    db = sqlite_file(uri)
    root = artifact_root.resolve()
    if db is None or root.parent != db.parent or root.name != ARTIFACTS_DIR or not db.is_file():
        return False
    new = root.as_uri()
    with contextlib.closing(sqlite3.connect(db, timeout=30)) as conn, conn:
        row = conn.execute(
            "SELECT artifact_location FROM experiments WHERE experiment_id = ?",
            (int(experiment_id),),
        ).fetchone()
        old = row[0] if row else None
        path = _local_path(old) if old else None
        if old is None or old == new or path is None or path.name != ARTIFACTS_DIR:
            return False
        conn.execute(
            "UPDATE experiments SET artifact_location = ? WHERE experiment_id = ?",
            (new, int(experiment_id)),
        )
        conn.execute(
            "UPDATE runs SET artifact_uri = ? || substr(artifact_uri, ?) "
            "WHERE experiment_id = ? AND substr(artifact_uri, 1, ?) = ?",
            (new, len(old) + 1, int(experiment_id), len(old) + 1, old + "/"),
        )
    return True
