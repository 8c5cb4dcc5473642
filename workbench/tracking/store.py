"""Which MLflow store: where a run writes (the default sqlite store beside the results,
or a tracking URI) and which store an inspection command means (a results folder, a
population folder, a ``.db`` file or a tracking URI). A wrong path fails with the paths
it tried instead of MLflow silently creating an empty ``./mlflow.db``.

Inspection commands open a store read-only (`open_store`): it is checked before MLflow
touches it (MLflow's client creates the folder, the database and its tables on first use,
and turns an empty file into a new store), and a missing, empty, damaged or locked store,
or a server that does not answer, is one line naming the store and what is wrong."""

from __future__ import annotations

import contextlib
import http.client
import logging
import os
import re
import sqlite3
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from workbench.errors import ExperimentError
from workbench.names import STORE_FILE
from workbench.tracking.location import sqlite_file
from workbench.tracking.sqlite_reader import SqliteReader, readable


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


# How long a read waits: for a server's first answer (unless MLFLOW_HTTP_REQUEST_TIMEOUT
# says otherwise), and for a writer's lock on an sqlite store to go.
ANSWER_TIMEOUT_S = 5.0
LOCK_WAIT_S = 3.0
# MLflow's HTTP client for the reads: its defaults (120 s a request, 7 retries with
# back-off) leave a command silent for minutes when the server goes away mid-read.
_READ_HTTP_ENV = {"MLFLOW_HTTP_REQUEST_TIMEOUT": "10", "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1"}


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
    run` and a plain ``workbench run`` write), else ``mlflow.db`` or ``../mlflow.db`` (the
    same store seen from inside results/ or from a population folder). A URI with a
    scheme is returned as is. A ``.db`` file becomes ``sqlite:///<absolute path>``; a
    folder is a results folder (``<folder>/mlflow.db``) or a population folder inside one
    (``<folder>/../mlflow.db``).
    A path that leads to no store raises `ExperimentError` naming the paths tried:
    MLflow itself would silently create an empty store there. (Whether the store can be
    read is `check_store`'s question.)
    """
    if store is None:
        env = os.environ.get(ENV_VAR)
        if env:
            return env if _is_uri(env) else _resolve_path(env, ENV_VAR, "")
        # From the project's folder, from inside results/, or from a population folder.
        tried = [DEFAULT_STORE, Path(STORE_FILE), Path("..") / STORE_FILE]
        for candidate in tried:
            if candidate.is_file():
                return _sqlite_uri(candidate)
        shown = ", ".join(str(p) for p in tried)
        raise ExperimentError.single(
            str(DEFAULT_STORE),
            "--store",
            f"no MLflow store: tried {shown} (relative to {Path.cwd()}) and "
            f"${ENV_VAR} is not set; pass --store, run from the folder that holds results/, "
            f"or run an experiment first; {_VALID}",
        )
    if _is_uri(store):
        return store
    return _resolve_path(store, store, "--store")


def client_for(uri: str) -> Any:
    """An MLflow client that may write (a run's tracker, `workbench eval` logging)."""
    from mlflow.tracking import MlflowClient  # heavy: only when a command reads a store

    # Artifact downloads would draw a progress bar into the tables.
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    return MlflowClient(tracking_uri=uri)


# --- reading a store without changing it ----------------------------------------------


def _refused(where: str, message: str) -> ExperimentError:
    return ExperimentError.single(where, "", message)


def _header_problem(path: Path) -> str | None:
    size = path.stat().st_size
    with path.open("rb") as f:
        header = f.read(100)
    if not header.startswith(_SQLITE_MAGIC):
        return "is not an SQLite database (no SQLite header): damaged, or no MLflow store"
    if len(header) < 100:
        return f"is truncated ({size} bytes, less than SQLite's header)"
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    # The page count in the header is valid when its change counter matches (SQLite 3.7+).
    if pages and header[24:28] == header[92:96] and size < page_size * pages:
        return (
            f"is truncated ({size} bytes of the {page_size * pages} its header records); "
            "restore it from a copy"
        )
    return None


def _sqlite_header_problem(path: Path) -> str | None:
    """What SQLite's 100-byte header says is wrong with the file (None: nothing).

    A writer commits the header's new page count before the file has grown to it, so a
    store that a running population writes can look truncated for a moment. What looks
    wrong is read again under SQLite's shared lock, which holds writers off the file.
    """
    problem = _header_problem(path)
    if problem is None or "truncated" not in problem:
        return problem
    try:
        with contextlib.closing(
            sqlite3.connect(
                _sqlite_read_only(path), uri=True, timeout=LOCK_WAIT_S, isolation_level=None
            )
        ) as conn:
            conn.execute("BEGIN")
            conn.execute("SELECT count(*) FROM sqlite_master").fetchall()  # the shared lock
            return _header_problem(path)
    except sqlite3.Error:
        return problem


def _sqlite_error(err: sqlite3.Error | str) -> str:
    text = " ".join(str(err).split())
    if "locked" in text or "busy" in text:
        return f"is locked by another process (sqlite: {text}); try again when the writer is done"
    return f"is damaged (sqlite: {text}); restore it from a copy"


def _check_sqlite(path: Path) -> None:
    where = str(path)
    if not path.exists():
        folder = path.parent
        missing = f"the folder {folder} does not exist" if not folder.is_dir() else "no such file"
        raise _refused(where, f"no MLflow store here ({missing}); a read creates nothing")
    if path.is_dir():
        raise _refused(where, f"is a folder, not an MLflow sqlite store; {_VALID}")
    size = path.stat().st_size
    if size == 0:
        raise _refused(
            where,
            "is empty (0 bytes), not an MLflow store; refused, since MLflow would turn it "
            "into a new, empty store (restore the store, or give the one a run wrote)",
        )
    problem = _sqlite_header_problem(path)
    if problem is not None:
        raise _refused(where, problem)
    try:
        with contextlib.closing(
            sqlite3.connect(_sqlite_read_only(path), uri=True, timeout=LOCK_WAIT_S)
        ) as conn:
            schema = conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
            tables = {name for (name,) in schema}
            if not {"experiments", "runs"} <= tables:
                raise _refused(
                    where, "is an SQLite database but no MLflow store (no experiments, runs tables)"
                )
            conn.execute("SELECT experiment_id FROM experiments LIMIT 1").fetchall()
            conn.execute("SELECT run_uuid FROM runs LIMIT 1").fetchall()
    except sqlite3.Error as err:
        raise _refused(where, _sqlite_error(f"{err}, waited {LOCK_WAIT_S:g} s")) from None


def _sqlite_read_only(path: Path) -> str:
    """SQLite's read-only URI filename for `path`, every ``/`` escaped: MLflow creates the
    parent folders of what follows ``sqlite:///``, and ``file:%2Fa%2Fb.db`` has none."""
    return "file:" + urllib.parse.quote(str(path.resolve()), safe="") + "?mode=ro"


def _answer_timeout() -> float:
    try:
        return float(os.environ.get("MLFLOW_HTTP_REQUEST_TIMEOUT") or ANSWER_TIMEOUT_S)
    except ValueError:
        return ANSWER_TIMEOUT_S


def _check_server(uri: str) -> None:
    """Any HTTP answer from the server (an error status too) within seconds."""
    timeout = _answer_timeout()
    try:
        with urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=timeout):
            return
    except urllib.error.HTTPError:
        return  # it answered
    except TimeoutError:
        reason = f"no answer within {timeout:g} s"
    except urllib.error.URLError as err:
        why = err.reason
        if isinstance(why, TimeoutError):
            reason = f"no answer within {timeout:g} s"
        else:
            reason = getattr(why, "strerror", None) or str(why)
    except (OSError, http.client.HTTPException) as err:
        reason = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
    raise _refused(
        uri,
        f"the MLflow server does not answer ({reason}); start it, or check the address "
        "(MLFLOW_HTTP_REQUEST_TIMEOUT sets how long to wait)",
    )


def check_store(uri: str) -> None:
    """Raises ExperimentError (one line, exit 2) unless the store can be read as it is.

    sqlite: the file exists, is not empty, is a whole SQLite database (header, page
    count) holding MLflow's tables, and no writer holds it locked for `LOCK_WAIT_S`; it
    is opened read-only, so nothing is created. ``file:`` stores: the folder exists.
    ``http(s)``: the server answers within seconds. Other databases are MLflow's to check.
    """
    if uri.startswith("sqlite:"):
        path = sqlite_file(uri)
        if path is None:
            raise _refused(uri, "an in-memory store holds nothing to read; " + _VALID)
        _check_sqlite(path)
    elif uri.startswith("file:"):
        folder = Path(urllib.parse.unquote(urllib.parse.urlparse(uri).path))
        if not folder.is_dir():
            raise _refused(uri, f"no MLflow store here (the folder {folder} does not exist)")
    elif uri.startswith(("http://", "https://")):
        _check_server(uri)


def read_client(uri: str) -> Any:
    """An MLflow client that reads `uri` and cannot change it (after `check_store`).

    sqlite: the connection is read-only (MLflow would otherwise upgrade an older schema
    or add its default experiment on first use), and a schema this MLflow writes is read
    without importing MLflow (`workbench.tracking.sqlite_reader`). HTTP: requests time out
    in seconds.
    """
    check_store(uri)
    path = sqlite_file(uri)
    if path is not None and readable(path):
        return SqliteReader(path, uri)
    if path is not None:
        uri = f"sqlite:///{_sqlite_read_only(path)}&uri=true"
    elif uri.startswith(("http://", "https://")):
        for key, value in _READ_HTTP_ENV.items():
            os.environ.setdefault(key, value)
    client = client_for(uri)
    # A database error is told once by `read_failure`, not also logged by MLflow.
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)
    return client


def open_store(store: str | None) -> tuple[str, Any]:
    """What ``--store`` means (`resolve_store`) and a read-only client for it."""
    uri = resolve_store(store)
    return uri, read_client(uri)


_STORE_ERRORS = ("mlflow", "sqlalchemy", "sqlite3", "requests", "urllib3")


def read_failure(err: BaseException, store: str | None) -> ExperimentError | None:
    """An error MLflow, its database driver or its HTTP client raised while a command read
    `store`, as one line (None: an error of another kind, which stays a traceback)."""
    package = type(err).__module__.split(".")[0]
    if package not in _STORE_ERRORS:
        return None
    where = store or os.environ.get(ENV_VAR) or str(DEFAULT_STORE)
    text = " ".join(str(err).split("[SQL:")[0].split()) or type(err).__name__
    if "readonly database" in text:
        message = (
            "MLflow would have to change this store to read it (a schema of another MLflow "
            "version?); inspection opens stores read-only: back it up, then `mlflow db upgrade`"
        )
    elif package in ("requests", "urllib3") or "max retries" in text.lower():
        message = f"the MLflow server stopped answering ({text[:300]})"
    elif "locked" in text:
        message = _sqlite_error(text)
    else:
        message = f"the MLflow store cannot be read ({text[:300]})"
    return _refused(where, message)
