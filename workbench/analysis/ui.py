"""The MLflow UI over a workbench store, started for one person on loopback.

`workbench ui` is what a user runs after a population finished (or while it runs):
it finds the store a results folder uses, starts ``mlflow server`` on MLflow's port 5000
(another free local port when 5000 is taken) and prints the address. The launcher is
careful about three things MLflow's own command leaves to the user:

* which store: a results folder, a population folder inside one, a ``.db`` file or a
  tracking URI all work (`resolve_store`), and a wrong path fails with the paths it
  tried instead of MLflow silently creating an empty ``./mlflow.db``;
* artifacts: the tracker creates each experiment with a ``file://`` artifact location
  under the results folder; the server reads those directly, and anything created
  from the UI goes next to the store instead of into the current folder;
* footprint: one worker, no job-execution runner (MLflow 3 starts a runner and three
  queue consumers for its GenAI judges, which the workbench never uses), no
  telemetry, the server's log in a file (removed afterwards unless the server failed),
  and the whole process group stopped at the
  end so that no uvicorn worker outlives the command: after Ctrl-C, SIGTERM (a service
  manager, `kill`) or SIGHUP (the terminal closed) alike. The server runs in a session
  of its own, so those signals reach only the command, which stops the server's group.

A damaged store, a port out of range or one another program holds is one line and
exit 2, before any server starts."""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from workbench.analysis.populations import populations
from workbench.errors import ExperimentError
from workbench.tracking.store import ENV_VAR, check_store, read_client

# MLflow's own default: bookmarks and habits point at it.
DEFAULT_PORT = 5000


def default_port(host: str = "127.0.0.1") -> int:
    """MLflow's port 5000 when nothing listens there, else one the OS hands out."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        try:
            sock.bind((host, DEFAULT_PORT))
        except OSError:
            return free_port(host)
    return DEFAULT_PORT


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS has just handed out (another process could take it first; rare)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


_FREE = "or leave out --port for a free one"


def check_port(host: str, port: int) -> None:
    """ExperimentError (one line, exit 2) unless `port` is one the server could listen on:
    in range, not held by another program, and allowed to this user."""
    where = f"--port {port}"
    if not 1 <= port <= 65535:
        raise ExperimentError.single(where, "", f"is not a port number; valid: 1-65535, {_FREE}")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        # As uvicorn binds: a port left in TIME_WAIT by an earlier server is free.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                why = f"{host}:{port} is in use by another program"
            elif err.errno == errno.EACCES:
                why = f"listening on {host}:{port} is not allowed to this user (ports below 1024)"
            else:
                why = f"cannot listen on {host}:{port} ({err.strerror})"
            raise ExperimentError.single(where, "", f"{why}; try another port, {_FREE}") from None


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
        self,
        tracking_uri: str,
        url: str,
        process: subprocess.Popen[bytes],
        log_path: Path,
        *,
        temporary_log: bool = False,
    ) -> None:
        self.tracking_uri = tracking_uri
        self.url = url
        self.process = process
        self.log_path = log_path
        # A log the launcher made in the temp folder goes when the server stops well.
        self.temporary_log = temporary_log

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
        session); whatever is left after `timeout_s` gets SIGKILL. Ctrl-C, SIGTERM and
        SIGHUP wait until it is done (a second Ctrl-C must not leave the server behind).
        """
        with _signals(signal.SIG_IGN, ("SIGINT", *_STOP_SIGNALS)):
            self._stop(timeout_s)
        if self.temporary_log:
            self.log_path.unlink(missing_ok=True)

    def _stop(self, timeout_s: float) -> None:
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

    `port` None takes MLflow's 5000 when it is free, else a free one. The server's
    output goes to `log_path` (default: a file in the temp folder, removed when the
    server stops, kept when it failed), never to the terminal: MLflow logs every request. It
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
    if port is not None:
        check_port(host, port)
    check_store(tracking_uri)
    if port is None:
        port = default_port(host)
    temporary_log = log_path is None
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
    server = UiServer(tracking_uri, url, process, log_path, temporary_log=temporary_log)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            if not server.running():
                if "address already in use" in server.log_tail().lower():
                    busy = f"{host}:{port} is in use by another program"
                    raise ExperimentError.single(  # taken since check_port looked
                        f"--port {port}", "", f"{busy}; try another port, {_FREE}"
                    )
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
        server.temporary_log = False  # the error names it
        server.stop()
        raise


def _population_links(tracking_uri: str, ui_url: str) -> list[str]:
    """Direct links to each experiment's runs table (the UI's front page is MLflow's
    GenAI overview, not the runs)."""
    try:
        found = populations(read_client(tracking_uri))
    except Exception:  # the links are a convenience; the UI works without them
        return []
    seen: dict[str, str] = {}
    for pop in found:
        seen.setdefault(pop.experiment, pop.experiment_id)
    return [f"  {name}: {experiment_url(ui_url, exp_id)}" for name, exp_id in seen.items()]


class StopSignal(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where the command is, to end it the way Ctrl-C does."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


_STOP_SIGNALS = ("SIGTERM", "SIGHUP")


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise StopSignal(signum)


@contextlib.contextmanager
def _signals(handler: Any, names: tuple[str, ...]) -> Iterator[None]:
    """`handler` for the named signals this platform has, the previous ones restored at
    the end (nothing when not on the main thread, where Python cannot handle signals)."""
    previous: dict[signal.Signals, Any] = {}
    for name in names:
        sig = getattr(signal, name, None)
        if sig is None:
            continue
        try:
            previous[sig] = signal.signal(sig, handler)
        except ValueError:
            break
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def serve_forever(
    tracking_uri: str,
    host: str = "127.0.0.1",
    port: int | None = None,
    *,
    log_path: Path | None = None,
) -> int:
    """`workbench ui`: starts the UI, prints its address and waits for Ctrl-C.

    SIGTERM and SIGHUP stop it as Ctrl-C does; each stops the server's whole process
    group, also while it is still starting, and a second signal does not interrupt that.
    Returns the exit status: 0 once stopped, 1 if the server died on its own or did not
    start (its log's tail on stderr).
    """
    if tracking_uri.startswith(("http://", "https://")):
        print(f"MLflow UI for {tracking_uri}: {tracking_uri} (a running server; nothing to start)")
        return 0
    server: UiServer | None = None
    with _signals(_raise_stop, _STOP_SIGNALS):
        try:
            server = start_ui(tracking_uri, host=host, port=port, log_path=log_path)
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
        except KeyboardInterrupt:  # Ctrl-C, SIGTERM, SIGHUP
            return 0
        except RuntimeError as err:  # the server did not start (start_ui stopped it)
            print(err, file=sys.stderr)
            return 1
        finally:
            if server is not None:
                server.stop()
