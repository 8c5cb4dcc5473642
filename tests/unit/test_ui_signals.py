"""`workbench ui` ends with its server: SIGTERM (a service manager, `kill`) and SIGHUP (the
terminal closed) stop the MLflow server's whole process group as Ctrl-C does; a port out
of range or one another program listens on is one line and exit 2, nothing started."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.processes import leftovers, process_table, wait_gone
from tests.support.stores import new_store
from workbench.analysis.ui import free_port
from workbench.cli.main import main


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small store, built once: one population with one trial."""
    folder = tmp_path_factory.mktemp("template")
    store = new_store(folder)
    store.trial(store.population("pop"), "PPO_00000", returns=[1.0])
    return folder / "mlflow.db"


@pytest.fixture
def results(template: Path, tmp_path: Path) -> Path:
    """A results folder holding a copy of the template store."""
    (tmp_path / "results").mkdir()
    shutil.copy(template, tmp_path / "results" / "mlflow.db")
    return tmp_path / "results"


def _one_line(capsys: pytest.CaptureFixture[str], *wanted: str) -> None:
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    for text in wanted:
        assert text in lines[0], lines[0]


@pytest.mark.parametrize("port", ["99999", "0", "65536"])
def test_a_port_out_of_range_is_one_line(
    results: Path, capsys: pytest.CaptureFixture[str], port: str
) -> None:
    assert main(["ui", "--store", str(results), "--port", port]) == 2
    _one_line(capsys, f"--port {port}: is not a port number; valid: 1-65535")
    assert not leftovers(set(), str(results))


def test_a_busy_port_is_one_line(results: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen(1)
        port = other.getsockname()[1]
        start = time.monotonic()
        assert main(["ui", "--store", str(results), "--port", str(port)]) == 2
        assert time.monotonic() - start < 5  # refused before a server starts
    _one_line(capsys, f"--port {port}: 127.0.0.1:{port} is in use by another program")
    assert not leftovers(set(), str(results))


def _server_groups(results: Path) -> set[int]:
    """The process groups of the MLflow servers reading `results`' store."""
    return {
        group
        for _, group, cmd in process_table()
        if "mlflow" in cmd and " server " in cmd and str(results) in cmd
    }


@pytest.mark.timeout(120)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_stop_signal_leaves_no_server_behind(results: Path, sig: signal.Signals) -> None:
    ui = subprocess.Popen(
        # A port of its own: another test's server may hold MLflow's 5000 meanwhile.
        [
            *(sys.executable, "-m", "workbench.cli", "ui"),
            *("--store", str(results), "--port", str(free_port())),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # as a terminal's job: its own group, apart from pytest's
    )
    groups: set[int] = set()
    try:
        assert ui.stdout is not None
        first = ui.stdout.readline()  # printed once the server answers /health
        assert "MLflow UI for" in first, first + ui.stderr.read() if ui.stderr else first
        url = first.split(": ", 1)[1].split()[0]
        groups = _server_groups(results)
        assert groups and ui.pid not in groups  # the server runs in a group of its own
        os.kill(ui.pid, sig)
        ui.wait(timeout=30)
        assert ui.returncode == 0, ui.stderr.read() if ui.stderr else ""
        left = wait_gone(groups, str(results), timeout_s=10)
        assert not left, f"{sig.name} left the server running: {left}"
        port = int(url.rsplit(":", 1)[1])
        with socket.socket() as probe:
            assert probe.connect_ex(("127.0.0.1", port)) != 0  # nothing listens there
    finally:
        for group in [ui.pid, *groups]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signal.SIGKILL)
        ui.wait()
        for pipe in (ui.stdout, ui.stderr):
            if pipe is not None:
                pipe.close()
