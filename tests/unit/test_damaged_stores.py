"""Inspection commands on a store that cannot be read: missing, empty, truncated, garbage,
locked, or a server that does not answer. Each is one line on stderr naming the store,
exit 2, no traceback, and a read creates nothing (no folder, no database, no tables)."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.stores import new_store
from workbench.cli.main import main
from workbench.tracking import store as store_module

# Each inspection command as a test runs it (show needs a trial, the others take defaults).
COMMANDS = {
    "runs": ["runs"],
    "show": ["show", "PPO_00000"],
    "lineage": ["lineage"],
}


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small intact store, built once: one population with one trial."""
    folder = tmp_path_factory.mktemp("template")
    store = new_store(folder)
    population = store.population("pop")
    store.trial(population, "PPO_00000", returns=[1.0, 2.0, 3.0])
    return folder / "mlflow.db"


@pytest.fixture
def good_db(template: Path, tmp_path: Path) -> Path:
    """A copy of the template store, the test's own."""
    (tmp_path / "good").mkdir()
    return Path(shutil.copy(template, tmp_path / "good" / "mlflow.db"))


@pytest.fixture(autouse=True)
def _no_env_store(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Unset for the test and as they were after it (read_client sets the HTTP ones).
    for name in (
        "MLFLOW_TRACKING_URI",
        "MLFLOW_HTTP_REQUEST_TIMEOUT",
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES",
    ):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def _one_line(capsys: pytest.CaptureFixture[str], *names: str) -> str:
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    for name in names:
        assert name in lines[0], lines[0]
    return lines[0]


def _damaged(tmp_path: Path, good_db: Path, kind: str) -> Path:
    db = tmp_path / "damaged" / "mlflow.db"
    db.parent.mkdir()
    data = good_db.read_bytes()
    if kind == "empty":
        db.write_bytes(b"")
    elif kind == "truncated":
        db.write_bytes(data[: len(data) // 2])
    elif kind == "garbage":
        db.write_bytes(os.urandom(len(data)))
    elif kind == "garbage pages":  # SQLite's header and schema page intact, the rest not
        page = int.from_bytes(data[16:18], "big")
        db.write_bytes(data[:page] + os.urandom(len(data) - page))
    elif kind == "not mlflow":
        with contextlib.closing(sqlite3.connect(db)) as conn:
            conn.execute("CREATE TABLE notes (text TEXT)")
            conn.commit()
    return db


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(
    ("kind", "said"),
    [
        ("empty", "is empty (0 bytes)"),
        ("truncated", "is truncated"),
        ("garbage", "is not an SQLite database"),
        ("garbage pages", "mlflow.db: "),
        ("not mlflow", "no MLflow store"),
    ],
)
def test_a_damaged_store_is_one_line(
    tmp_path: Path,
    good_db: Path,
    capsys: pytest.CaptureFixture[str],
    command: str,
    kind: str,
    said: str,
) -> None:
    db = _damaged(tmp_path, good_db, kind)
    before = db.read_bytes()
    assert main([*COMMANDS[command], "--store", str(db)]) == 2
    _one_line(capsys, str(db), said)
    assert db.read_bytes() == before  # an empty file is not turned into a store
    assert sorted(p.name for p in db.parent.iterdir()) == ["mlflow.db"]


@pytest.mark.parametrize("command", COMMANDS)
def test_a_store_in_a_missing_folder_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    folder = tmp_path / "nowhere" / "deeper"
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    assert main([*COMMANDS[command], "--store", uri]) == 2
    _one_line(capsys, str(folder / "mlflow.db"), f"the folder {folder} does not exist")
    assert not (tmp_path / "nowhere").exists()


def test_a_missing_file_in_an_existing_folder_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "empty").mkdir()
    db = tmp_path / "empty" / "mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{db}")
    assert main(["runs"]) == 2
    _one_line(capsys, str(db), "no such file")
    assert list((tmp_path / "empty").iterdir()) == []


@pytest.mark.parametrize("command", COMMANDS)
def test_a_locked_store_is_one_line(
    tmp_path: Path,
    good_db: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    command: str,
) -> None:
    monkeypatch.setattr(store_module, "LOCK_WAIT_S", 0.3)
    writer = sqlite3.connect(good_db, isolation_level=None)
    try:
        writer.execute("BEGIN EXCLUSIVE")  # as a writer in the middle of a transaction
        assert main([*COMMANDS[command], "--store", str(good_db)]) == 2
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    _one_line(capsys, str(good_db), "is locked by another process")


def test_an_intact_store_is_read_and_left_as_it_was(
    tmp_path: Path, good_db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = good_db.read_bytes()
    files = sorted(tmp_path.rglob("*"))
    for args in COMMANDS.values():
        assert main([*args, "--store", str(good_db)]) == 0
    out = capsys.readouterr().out
    assert "PPO_00000" in out
    assert good_db.read_bytes() == before
    assert sorted(tmp_path.rglob("*")) == files  # no mlruns/, no journal left


def test_an_error_while_reading_is_one_line(
    good_db: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import workbench.analysis.populations as populations

    def malformed(*args: object, **kwargs: object) -> None:
        raise sqlite3.DatabaseError("database disk image is malformed")

    monkeypatch.setattr(populations, "populations", malformed)
    assert main(["runs", "--store", str(good_db)]) == 2
    _one_line(capsys, str(good_db), "cannot be read (database disk image is malformed)")


# --- a tracking server that does not answer -----------------------------------------------


@contextlib.contextmanager
def _listening(accept: bool) -> Iterator[int]:
    """A port on 127.0.0.1: listening but never answering (`accept`), or with nothing on it."""
    sock = socket.socket()
    try:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        if accept:
            sock.listen(8)  # the kernel completes the handshake; nobody reads or answers
        else:
            sock.close()
        yield port
    finally:
        sock.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("command", COMMANDS)
def test_a_server_with_nothing_listening_is_one_line(
    capsys: pytest.CaptureFixture[str], command: str
) -> None:
    with _listening(accept=False) as port:
        uri = f"http://127.0.0.1:{port}"
        start = time.monotonic()
        assert main([*COMMANDS[command], "--store", uri]) == 2
        assert time.monotonic() - start < 5
    _one_line(capsys, uri, "does not answer (Connection refused)")


@pytest.mark.timeout(60)
def test_a_server_that_never_answers_times_out_in_seconds(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with _listening(accept=True) as port:
        uri = f"http://127.0.0.1:{port}"
        start = time.monotonic()
        assert main(["runs", "--store", uri]) == 2
        elapsed = time.monotonic() - start
    assert store_module.ANSWER_TIMEOUT_S <= elapsed < store_module.ANSWER_TIMEOUT_S + 5
    _one_line(capsys, uri, f"no answer within {store_module.ANSWER_TIMEOUT_S:g} s")


def test_other_inspection_commands_refuse_a_damaged_store_too(
    tmp_path: Path, good_db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = _damaged(tmp_path, good_db, "empty")
    for args in (
        ["diagnose"],
        ["eval", "PPO_00000"],
        ["export-policy", "PPO_00000", "-o", str(tmp_path / "policy")],
        ["export-schedule", "-o", str(tmp_path / "x.yaml")],
        ["ui"],
    ):
        assert main([*args, "--store", str(db)]) == 2, args
        _one_line(capsys, str(db), "is empty")
    assert db.read_bytes() == b""
    assert not (tmp_path / "x.yaml").exists()
    assert not (tmp_path / "policy").exists()


_GROWING_WRITER = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
conn.execute("CREATE TABLE IF NOT EXISTS growth (blob BLOB)")
print("ready", flush=True)
end = time.monotonic() + float(sys.argv[2])  # a cap: the test stops it sooner
while time.monotonic() < end:
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("INSERT INTO growth VALUES (randomblob(20000))")
    conn.execute("COMMIT")
    time.sleep(0.001)
"""


def _rows_in_growth(db: Path) -> int:
    with sqlite3.connect(db, timeout=30) as conn:
        (rows,) = conn.execute("SELECT COUNT(*) FROM growth").fetchone()
    return int(rows)


def test_a_store_growing_under_a_writer_is_not_called_truncated(good_db: Path) -> None:
    # A running population commits to its store while `diagnose` or `runs` reads it. SQLite
    # writes the header's new page count before the file has grown to it, so a header read
    # without SQLite's shared lock sees a store that looks truncated for a moment.
    # A count of header reads, not a time: on a slow machine a few seconds held too few.
    with subprocess.Popen(
        [sys.executable, "-c", _GROWING_WRITER, str(good_db), "120"],
        stdout=subprocess.PIPE,
        text=True,
    ) as writer:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "ready"
        # At least 2000 header reads, and on until the store has grown by 50 commits under
        # them: a busy machine can slow the writer far more than the reader.
        reads, grown = 0, 0
        while reads < 2000 or grown < 50:
            assert store_module._sqlite_header_problem(good_db) is None
            reads += 1
            if reads % 200 == 0:
                assert writer.poll() is None, f"the writer stopped after {grown} commits"
                grown = _rows_in_growth(good_db)
        writer.terminate()
    store_module._check_sqlite(good_db)  # and the whole check, once the writer is done
