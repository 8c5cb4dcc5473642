"""The MLflow UI over a workbench store, started for one person on loopback.

`workbench ui` is what a user runs after a population finished (or while it runs):
it finds the store a results folder uses, starts ``mlflow server`` on a free local
port and prints the address. The launcher is careful about three things MLflow's
own command leaves to the user:

* which store: a results folder, a population folder inside one, a ``.db`` file or a
  tracking URI all work (`resolve_store`), and a wrong path fails with the paths it
  tried instead of MLflow silently creating an empty ``./mlflow.db``;
* artifacts: the tracker creates each experiment with a ``file://`` artifact location
  under the results folder; the server reads those directly, and anything created
  from the UI goes next to the store instead of into the current folder;
* footprint: one worker, no job-execution runner (MLflow 3 starts a runner and three
  queue consumers for its GenAI judges, which the workbench never uses), no
  telemetry, the server's log in a file, and the whole process group stopped at the
  end so that no uvicorn worker outlives the command."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

from workbench.analysis.populations import populations
from workbench.errors import ExperimentError
from workbench.tracking.store import ENV_VAR, client_for


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS has just handed out (another process could take it first; rare)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def experiment_url(ui_url: str, experiment_id: str) -> str:
    """The experiment's runs table in the UI.

    MLflow 3 opens an experiment on its GenAI overview unless told otherwise;
    ``workflowType=machine_learning`` selects the model-training view with the Runs tab.
    """
    return f"{ui_url}/#/experiments/{experiment_id}/runs?workflowType=machine_learning"


def run_url(ui_url: str, experiment_id: str, run_id: str) -> str:
    """One run's page (overview, metrics, params, artifacts)."""
    return f"{ui_url}/#/experiments/{experiment_id}/runs/{run_id}"


class UiServer:
    """A running ``mlflow server``: its address, process and log file."""

    def __init__(
        self, tracking_uri: str, url: str, process: subprocess.Popen[bytes], log_path: Path
    ) -> None:
        self.tracking_uri = tracking_uri
        self.url = url
        self.process = process
        self.log_path = log_path

    def running(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout_s: float = 5.0) -> None:
        """Terminates the server and everything it started (uvicorn, workers), then waits.

        MLflow's CLI forwards SIGTERM to uvicorn, but a worker it started can outlive
        it, so the signal goes to the whole process group (the server runs in its own
        session); whatever is left after `timeout_s` gets SIGKILL.
        """
        deadline = time.monotonic() + timeout_s
        if self.process.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self.process.wait(timeout=timeout_s)
        # The leader is gone; its children may still be shutting down.
        while self._group_alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        self._signal(signal.SIGKILL)

    def _group_alive(self) -> bool:
        if os.name != "posix":
            return False
        try:
            os.killpg(self.process.pid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    def _signal(self, sig: signal.Signals) -> None:
        if os.name == "posix":
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, sig)
        elif self.process.poll() is None:
            if sig == signal.SIGTERM:
                self.process.terminate()
            else:
                self.process.kill()

    def __enter__(self) -> UiServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"UiServer({self.url!r}, store={self.tracking_uri!r}, log={str(self.log_path)!r})"


def _server_command(tracking_uri: str, host: str, port: int) -> list[str]:
    command = [
        sys.executable,
        "-m",
        "mlflow",
        "server",
        "--backend-store-uri",
        tracking_uri,
        "--host",
        host,
        "--port",
        str(port),
        "--workers",
        "1",
    ]
    if tracking_uri.startswith("sqlite:///"):
        # Runs of the workbench's experiments keep their own file:// artifact location,
        # which the server reads directly. This only places what is created from the UI
        # (a new experiment's artifacts) next to the store instead of in ./mlartifacts.
        store_dir = Path(tracking_uri.removeprefix("sqlite:///")).parent
        command += ["--artifacts-destination", (store_dir / "mlartifacts").as_uri()]
    return command


def _server_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop(ENV_VAR, None)  # the server uses --backend-store-uri only
    env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] = "false"
    env["MLFLOW_DISABLE_TELEMETRY"] = "true"
    env["DO_NOT_TRACK"] = "true"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def start_ui(
    tracking_uri: str,
    *,
    host: str = "127.0.0.1",
    port: int | None = None,
    timeout_s: float = 60,
    log_path: Path | None = None,
) -> UiServer:
    """Starts ``mlflow server`` for `tracking_uri` and returns once ``/health`` answers.

    `port` None picks a free one. The server's output goes to `log_path` (default: a
    new file in the temp folder), never to the terminal: MLflow logs every request. It
    raises RuntimeError with the log's tail if the server exits or does not answer
    within `timeout_s` (it takes 5-15 s to import on a small machine).
    """
    if tracking_uri.startswith(("http://", "https://")):
        raise ExperimentError.single(
            tracking_uri,
            "--store",
            "is already an MLflow server with its own UI: open it in a browser; "
            "valid here: a sqlite store or a database URI",
        )
    if port is None:
        port = free_port(host)
    if log_path is None:
        fd, name = tempfile.mkstemp(prefix="workbench-mlflow-ui-", suffix=".log")
        os.close(fd)
        log_path = Path(name)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    url_host = f"[{host}]" if ":" in host else host
    url = f"http://{url_host}:{port}"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            _server_command(tracking_uri, host, port),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=_server_env(),
            start_new_session=os.name == "posix",
        )
    server = UiServer(tracking_uri, url, process, log_path)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            if not server.running():
                raise RuntimeError(
                    f"the MLflow server for {tracking_uri} exited with status "
                    f"{process.returncode} (log {log_path}):\n{server.log_tail()}"
                )
            if _healthy(url):
                return server
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the MLflow server for {tracking_uri} did not answer {url}/health within "
                    f"{timeout_s:g} s (log {log_path}):\n{server.log_tail()}"
                )
            time.sleep(0.25)
    except BaseException:
        server.stop()
        raise


def _population_links(tracking_uri: str, ui_url: str) -> list[str]:
    """Direct links to each experiment's runs table (the UI's front page is MLflow's
    GenAI overview, not the runs)."""
    try:
        found = populations(client_for(tracking_uri))
    except Exception:  # the links are a convenience; the UI works without them
        return []
    seen: dict[str, str] = {}
    for pop in found:
        seen.setdefault(pop.experiment, pop.experiment_id)
    return [f"  {name}: {experiment_url(ui_url, exp_id)}" for name, exp_id in seen.items()]


def serve_forever(
    tracking_uri: str,
    host: str = "127.0.0.1",
    port: int | None = None,
    *,
    log_path: Path | None = None,
) -> int:
    """`workbench ui`: starts the UI, prints its address and waits for Ctrl-C.

    Returns the exit status: 0 after Ctrl-C, 1 if the server died on its own.
    """
    if tracking_uri.startswith(("http://", "https://")):
        print(f"MLflow UI for {tracking_uri}: {tracking_uri} (a running server; nothing to start)")
        return 0
    server = start_ui(tracking_uri, host=host, port=port, log_path=log_path)
    try:
        print(f"MLflow UI for {tracking_uri}: {server.url} (Ctrl-C to stop)", flush=True)
        for line in _population_links(tracking_uri, server.url):
            print(line, flush=True)
        print(f"server log: {server.log_path}", flush=True)
        while server.running():
            time.sleep(0.5)
        print(
            f"the MLflow server exited with status {server.process.returncode} "
            f"(log {server.log_path}):\n{server.log_tail()}",
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        server.stop()
