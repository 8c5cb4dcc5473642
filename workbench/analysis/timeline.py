"""A Chrome-trace timeline of a short window of a running population (`ray.timeline`).

`workbench diagnose --timeline FILE` joins the Ray that a running (or resumed)
population started, waits a few seconds while the trials work, and writes the task
and actor-method events that overlap that window: open the file in ``chrome://tracing``
or https://ui.perfetto.dev. Each trial is an actor whose ``train`` calls are bars; with
remote env runners their ``sample`` calls are bars on the runner actors, and a PBT
exploit shows as ``save_checkpoint`` on the donor and ``restore`` on a new actor.

The population's driver records its local Ray in the results folder
(``ray_session.json``: the driver's pid and Ray's session folder); the session folder
holds the GCS port (``gcs_server_port_<node id>``), and the GCS listens on the node's IP
(`ray.util.get_node_ip_address`, which is what a local Ray binds to). A population that
joined a cluster (``--address``) records nothing: pass the same ``--address``.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.analysis.populations import find_target
from workbench.errors import ExperimentError
from workbench.names import RESOLVED_FILE, SESSION_FILE
from workbench.tune_ext.ray_private import enable_local_token_auth


class NothingRunning(ExperimentError):
    """No running population to take a timeline of (exit status 2)."""


@dataclass(frozen=True)
class Capture:
    path: Path
    address: str
    start_s: float  # the window, in seconds since the epoch
    end_s: float
    events: int  # task/actor-method events in the window
    names: dict[str, int]  # event name -> count

    def lines(self) -> list[str]:
        common = ", ".join(f"{name} x{count}" for name, count in list(self.names.items())[:8])
        return [
            f"Timeline of {self.end_s - self.start_s:.1f} s of the running population (Ray at "
            f"{self.address}) written to {self.path}: {self.events} events"
            + (f" ({common})" if common else ""),
            "  open it in chrome://tracing or https://ui.perfetto.dev",
        ]


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def session_address(results_dir: Path) -> str:
    """The GCS address of the population's running local Ray, or NothingRunning saying
    why there is none."""
    record = results_dir / SESSION_FILE
    where = str(results_dir)
    if not record.is_file():
        raise NothingRunning.single(
            where,
            "--timeline",
            f"nothing is running: no {SESSION_FILE} here (the population is not running "
            "on a local Ray of its own: it finished and was cleaned up, never started, or "
            "joined a cluster; for a cluster pass its --address)",
        )
    data = json.loads(record.read_text())
    pid = int(data.get("driver_pid", 0))
    session = Path(str(data.get("session_dir", "")))
    if not _pid_alive(pid):
        raise NothingRunning.single(
            where,
            "--timeline",
            f"nothing is running: the population's driver (pid {pid}) has exited; "
            f"`workbench resume {results_dir}` continues it, and a timeline can be taken "
            "while it runs",
        )
    ports = sorted(session.glob("gcs_server_port_*"))
    port_text = ports[0].read_text().strip() if ports else ""
    if not port_text.isdigit():
        raise NothingRunning.single(
            where,
            "--timeline",
            f"nothing is running: Ray's session folder {session} has no GCS port file "
            "(the session is gone)",
        )
    # Ray takes seconds to import; `workbench diagnose --timeline` says at once when
    # nothing is running, before it is needed.
    import ray

    port = int(port_text)
    node_ip = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
    for host in (node_ip, "127.0.0.1"):
        if _listening(host, port):
            return f"{host}:{port}"
    raise NothingRunning.single(
        where,
        "--timeline",
        f"nothing is running: the population's Ray (session {session.name}, GCS port "
        f"{port}) does not answer",
    )


def _in_window(event: dict[str, Any], start_us: float, end_us: float) -> bool:
    if event.get("ph") == "M":  # metadata: process and thread names
        return True
    ts = event.get("ts")
    if not isinstance(ts, int | float):
        return False
    dur = event.get("dur", 0)
    return ts <= end_us and ts + (dur if isinstance(dur, int | float) else 0) >= start_us


def capture(address: str, path: Path, seconds: float) -> Capture:
    """Joins the Ray at `address` as a second driver, lets the population run for
    `seconds`, and writes the events of that window as a Chrome trace."""
    import ray  # heavy: see session_address

    if ray.is_initialized():
        raise RuntimeError("capture() joins a running Ray; this process already has one")
    enable_local_token_auth()
    ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR)
    try:
        start = time.time()
        time.sleep(seconds)
        end = time.time()
        # Task events reach the GCS in batches, about once a second.
        time.sleep(1.5)
        events = ray.timeline()
    finally:
        ray.shutdown()
    kept = [e for e in events if _in_window(e, start * 1e6, end * 1e6)]
    names: dict[str, int] = {}
    for event in kept:
        if event.get("ph") != "M":
            name = str(event.get("name", "?"))
            names[name] = names.get(name, 0) + 1
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(kept))
    counted = dict(sorted(names.items(), key=lambda item: -item[1]))
    return Capture(path, address, start, end, sum(names.values()), counted)


def population_address(
    target: str | None,
    *,
    address: str | None = None,
    store: str | None = None,
    population_ref: str | None = None,
) -> str:
    """The Ray a `workbench diagnose` TARGET's population runs on: `address` when given,
    else the local Ray its results folder records (the folder itself, or the one MLflow
    records for an experiment, population or trial name; see `find_target`)."""
    if address is not None:
        return address
    folder = Path(target) if target else None
    if folder is None or not (folder / RESOLVED_FILE).is_file():
        # An experiment or run name: its population's results folder, from MLflow.
        found = find_target(target, store=store, population_ref=population_ref)
        population = found.population
        folder = Path(population.results_dir) if population.results_dir else None
        if folder is None:
            raise NothingRunning.single(
                found.uri,
                "--timeline",
                f"population {population.name} records no results folder",
            )
    return session_address(folder)


def capture_population(
    target: str | None,
    path: Path,
    seconds: float,
    *,
    address: str | None = None,
    store: str | None = None,
    population_ref: str | None = None,
) -> Capture:
    """`capture` of the running population a TARGET means (see `population_address`)."""
    where = population_address(target, address=address, store=store, population_ref=population_ref)
    return capture(where, path, seconds)
