"""`workbench ui`: finding the store, the pages' URLs, and a server that cannot start
(a real browser showing a population's runs: tests/browser/test_ui_browser.py)."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

from tests.support.processes import wait_gone
from workbench.analysis.ui import (
    DEFAULT_PORT,
    UiServer,
    default_port,
    experiment_url,
    free_port,
    run_url,
    start_ui,
)
from workbench.errors import ExperimentError
from workbench.tracking.store import resolve_store

# ---------------------------------------------------------------------------------------
# resolve_store


@pytest.fixture
def no_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _touch_db(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"SQLite format 3\x00")
    return path


def test_default_store_is_results_mlflow_db(no_env: Path) -> None:
    db = _touch_db(no_env / "results" / "mlflow.db")
    assert resolve_store(None) == f"sqlite:///{db.resolve()}"


def test_default_store_missing_names_the_path(no_env: Path) -> None:
    with pytest.raises(ExperimentError) as info:
        resolve_store(None)
    assert info.value.exit_code == 2
    message = str(info.value)
    assert str(Path("results") / "mlflow.db") in message
    assert "MLFLOW_TRACKING_URI" in message
    assert "--store" in message


def test_env_uri_wins_over_default(no_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _touch_db(no_env / "results" / "mlflow.db")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://tracking.example:5000")
    assert resolve_store(None) == "http://tracking.example:5000"


def test_env_path_is_resolved_like_an_argument(
    no_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = _touch_db(no_env / "elsewhere" / "mlflow.db")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "elsewhere")
    assert resolve_store(None) == f"sqlite:///{db.resolve()}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "nowhere")
    with pytest.raises(ExperimentError, match=r"MLFLOW_TRACKING_URI.*'nowhere' does not exist"):
        resolve_store(None)


@pytest.mark.parametrize(
    "uri",
    [
        "sqlite:////abs/path/mlflow.db",
        "sqlite:///relative.db",
        "http://127.0.0.1:5000",
        "https://mlflow.example.com/",
        "postgresql://user:pw@db:5432/mlflow",
        "postgresql+psycopg2://user@db/mlflow",
        "mysql+pymysql://user@db/mlflow",
        "file:///abs/mlruns",
    ],
)
def test_uris_are_returned_as_is(no_env: Path, uri: str) -> None:
    assert resolve_store(uri) == uri


def test_db_file_becomes_an_absolute_sqlite_uri(no_env: Path) -> None:
    db = _touch_db(no_env / "results" / "run-1" / "mlflow.db")
    expected = f"sqlite:///{db.resolve()}"
    assert resolve_store("results/run-1/mlflow.db") == expected
    assert resolve_store(str(db)) == expected
    assert expected.startswith("sqlite:////")  # three slashes, then the absolute path


def test_results_folder_uses_its_mlflow_db(no_env: Path) -> None:
    db = _touch_db(no_env / "results" / "run-1" / "mlflow.db")
    assert resolve_store("results/run-1") == f"sqlite:///{db.resolve()}"


def test_population_folder_uses_the_results_folder_store(no_env: Path) -> None:
    db = _touch_db(no_env / "results" / "run-1" / "mlflow.db")
    (no_env / "results" / "run-1" / "cartpole_pbt").mkdir()
    assert resolve_store("results/run-1/cartpole_pbt") == f"sqlite:///{db.resolve()}"


def test_folder_without_store_names_both_paths_tried(no_env: Path) -> None:
    (no_env / "results" / "run-1" / "cartpole_pbt").mkdir(parents=True)
    with pytest.raises(ExperimentError) as info:
        resolve_store("results/run-1/cartpole_pbt")
    assert info.value.exit_code == 2
    (problem,) = info.value.problems
    assert problem.file == "results/run-1/cartpole_pbt"
    assert problem.field == "--store"
    here, above = Path("results/run-1/cartpole_pbt/mlflow.db"), Path("results/run-1/mlflow.db")
    tried = f"tried {here}, {above}"
    assert tried in problem.message
    assert "valid:" in problem.message


def test_missing_path_is_an_error(no_env: Path) -> None:
    with pytest.raises(ExperimentError, match=r"'results/nope\.db' does not exist") as info:
        resolve_store("results/nope.db")
    assert info.value.exit_code == 2


def test_a_file_that_is_no_store_is_an_error(no_env: Path) -> None:
    (no_env / "experiment.yaml").write_text("name: x\n")
    with pytest.raises(ExperimentError, match="not an MLflow sqlite store"):
        resolve_store("experiment.yaml")


def test_start_ui_refuses_a_running_server() -> None:
    with pytest.raises(ExperimentError, match="already an MLflow server"):
        start_ui("http://127.0.0.1:5000")


def test_ui_urls() -> None:
    base = "http://127.0.0.1:5000"
    assert experiment_url(base, "3") == (
        "http://127.0.0.1:5000/#/experiments/3/runs?workflowType=machine_learning"
    )
    assert run_url(base, "3", "abc") == "http://127.0.0.1:5000/#/experiments/3/runs/abc"


def test_start_ui_reports_a_server_that_exits(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match=r"exited with status \d+ \(log .*ui\.log\)"):
        start_ui(
            "nosuchstore://nowhere/db",
            port=free_port(),
            log_path=tmp_path / "ui.log",
            timeout_s=60,
        )
    assert (tmp_path / "ui.log").read_text()
    assert not wait_gone(set(), "nosuchstore://")


def test_the_default_port_is_mlflows_5000_unless_another_program_holds_it() -> None:
    holder = socket.socket()
    try:
        holder.bind(("127.0.0.1", DEFAULT_PORT))
        holder.listen()
    except OSError:  # held already by something else on this machine: never handed out
        holder.close()
        assert default_port() != DEFAULT_PORT
        return
    try:
        assert default_port() != DEFAULT_PORT
    finally:
        holder.close()
    assert default_port() == DEFAULT_PORT


@pytest.mark.parametrize("temporary", [True, False])
def test_a_temporary_log_goes_with_the_server_and_a_chosen_one_stays(
    tmp_path: Path, temporary: bool
) -> None:
    log = tmp_path / "ui.log"
    log.write_text("started\n")
    process = subprocess.Popen(["sleep", "30"], start_new_session=True)
    server = UiServer("sqlite:///x.db", "http://127.0.0.1:1", process, log, temporary_log=temporary)
    server.stop()
    assert process.poll() is not None
    assert log.exists() is not temporary


def test_default_store_is_found_from_inside_results_and_a_population_folder(
    no_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = _touch_db(no_env / "results" / "mlflow.db")
    population = db.parent / "cartpole_pbt_20261203-194953"
    population.mkdir()
    for folder in (db.parent, population):
        monkeypatch.chdir(folder)
        assert resolve_store(None) == f"sqlite:///{db.resolve()}"
