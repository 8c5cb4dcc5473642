"""Which MLflow store: where a run writes (the default sqlite store beside the results,
or a tracking URI) and which store an inspection command means (a results folder, a
population folder, a ``.db`` file or a tracking URI). A wrong path fails with the paths
it tried instead of MLflow silently creating an empty ``./mlflow.db``."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from workbench.errors import ExperimentError
from workbench.names import STORE_FILE


def default_tracking_uri(storage_root: Path) -> str:
    """MLflow's own default backend, sqlite, in the storage folder next to the results."""
    return f"sqlite:///{(storage_root / STORE_FILE).resolve()}"


def tracking_uri_for(uri: str | None, storage_root: Path) -> str:
    return uri or os.environ.get("MLFLOW_TRACKING_URI") or default_tracking_uri(storage_root)


DEFAULT_STORE = Path("results") / STORE_FILE


ENV_VAR = "MLFLOW_TRACKING_URI"


# scheme://..., as in sqlite:///x.db, http://host:5000, postgresql+psycopg://u@h/db.
_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")


_SQLITE_MAGIC = b"SQLite format 3\x00"


_VALID = (
    "valid: a .db file, a results folder holding mlflow.db, a population folder inside one, "
    "or a tracking URI such as sqlite:///abs/path/mlflow.db or http://host:5000"
)


def _is_uri(value: str) -> bool:
    return bool(_URI.match(value))


def _is_sqlite_file(path: Path) -> bool:
    if path.suffix == ".db":
        return True
    try:
        with path.open("rb") as f:
            return f.read(len(_SQLITE_MAGIC)) == _SQLITE_MAGIC
    except OSError:
        return False


def _sqlite_uri(path: Path) -> str:
    return f"sqlite:///{path.resolve().as_posix()}"


def _resolve_path(value: str, source: str, field: str) -> str:
    """A path (file or folder) to a sqlite URI; `source`/`field` name where it came from."""
    path = Path(value).expanduser()
    if path.is_file():
        if _is_sqlite_file(path):
            return _sqlite_uri(path)
        raise ExperimentError.single(
            source, field, f"{value!r} is not an MLflow sqlite store (.db file); {_VALID}"
        )
    if path.is_dir():
        tried = [path / STORE_FILE, path.parent / STORE_FILE]
        if path.resolve().parent == path.resolve():  # the root folder has no parent
            tried = tried[:1]
        for candidate in tried:
            if candidate.is_file():
                return _sqlite_uri(candidate)
        shown = ", ".join(str(p) for p in tried)
        raise ExperimentError.single(
            source, field, f"no MLflow store in folder {value!r}: tried {shown}; {_VALID}"
        )
    raise ExperimentError.single(source, field, f"{value!r} does not exist; {_VALID}")


def resolve_store(store: str | None) -> str:
    """The MLflow tracking URI for what a user passes as ``--store``.

    None: ``$MLFLOW_TRACKING_URI`` if set, else ``results/mlflow.db`` (the store `make
    run` and a plain ``workbench run`` write). A URI with a scheme is returned as is. A
    ``.db`` file becomes ``sqlite:///<absolute path>``; a folder is a results folder
    (``<folder>/mlflow.db``) or a population folder inside one (``<folder>/../mlflow.db``).
    A path that leads to no store raises `ExperimentError` naming the paths tried:
    MLflow itself would silently create an empty store there.
    """
    if store is None:
        env = os.environ.get(ENV_VAR)
        if env:
            return env if _is_uri(env) else _resolve_path(env, ENV_VAR, "")
        if DEFAULT_STORE.is_file():
            return _sqlite_uri(DEFAULT_STORE)
        raise ExperimentError.single(
            str(DEFAULT_STORE),
            "--store",
            f"no MLflow store: tried {DEFAULT_STORE} (relative to {Path.cwd()}) and "
            f"${ENV_VAR} is not set; pass --store, run from the folder that holds results/, "
            f"or run an experiment first; {_VALID}",
        )
    if _is_uri(store):
        return store
    return _resolve_path(store, store, "--store")


def client_for(uri: str) -> Any:
    from mlflow.tracking import MlflowClient  # heavy: only when a command reads a store

    # Artifact downloads would draw a progress bar into the tables.
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    return MlflowClient(tracking_uri=uri)
