"""The Ray this driver starts or joins, and the cleanup after a killed driver."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import ray

from workbench.errors import ExperimentError
from workbench.names import SESSION_FILE
from workbench.tune_ext.ray_private import dashboard_dependency_error, local_head_node


def dashboard_missing() -> str | None:
    """Why Ray's dashboard cannot start here (its packages, ray[default], are missing), or None."""

    error = dashboard_dependency_error()
    if error is None:
        return None
    return (
        f"Ray's dashboard needs the packages of ray[default] ({error}); install them with "
        f"`pip install -e '.[dashboard]'` or `pip install 'ray[default]=={ray.__version__}'`"
    )


def check_dashboard(address: str | None, dashboard: bool) -> None:
    """ExperimentError (exit 2) when --dashboard asks for what cannot start here: told
    before anything is written or started."""
    joining = bool(address or os.environ.get("RAY_ADDRESS"))
    if dashboard and not joining and not ray.is_initialized() and (missing := dashboard_missing()):
        raise ExperimentError.single("--dashboard", "", missing)


def start_ray(address: str | None, dashboard: bool = False) -> None:
    if ray.is_initialized():
        return
    check_dashboard(address, dashboard)
    joining = bool(address or os.environ.get("RAY_ADDRESS"))
    if joining:
        context = ray.init(address=address or os.environ["RAY_ADDRESS"], log_to_driver=False)
    else:
        # "local": a fresh Ray of our own, even when another (a `ray start`, or the
        # leftovers of a killed run) is around; joining one is what --address is for.
        context = ray.init(
            address="local",
            log_to_driver=False,
            include_dashboard=dashboard,
            dashboard_host="127.0.0.1",  # this machine only (Ray's default, said aloud)
        )
    if dashboard:
        url = context.dashboard_url
        # Ray 2.60 starts local clusters with token authentication, the dashboard included.
        token = " (it asks for the token `ray get-auth-token` prints)"
        token = token if os.environ.get("RAY_AUTH_MODE", "").lower() == "token" else ""
        print(
            f"Ray dashboard: http://{url}{token}" if url else "Ray dashboard: the cluster runs none"
        )


# The records of the local Rays this process started (record_ray_session), for the wait
# at its exit (await_ray_exit).
_STARTED: list[dict[str, Any]] = []


def record_ray_session(results_dir: Path) -> None:
    """Remembers the processes of the local Ray this driver started (pid and start time
    of each), so that a resume after the driver was killed stops exactly those and what
    they started (workers, agents), and nothing else."""
    node = local_head_node()
    if node is None:
        return  # joined a cluster: not ours to clean up
    pids = [
        pid
        for infos in node.all_processes.values()
        for info in infos
        if (pid := getattr(getattr(info, "process", None), "pid", None))
    ]
    # With what they started already (the raylet's DashboardAgent and RuntimeEnvAgent):
    # those outlive a SIGKILLed driver, re-parented to init, where no walk from the
    # raylet finds them later. What the raylet starts later is found by the raylet's
    # mark in its environment (see leftover_processes).
    raylets = [
        [pid, ticks]
        for info in node.all_processes.get("raylet", [])
        if (pid := getattr(getattr(info, "process", None), "pid", None))
        and (ticks := start_time(pid)) is not None
    ]
    children = _children()
    started = []
    for pid in _with_descendants(pids, children):
        if (ticks := start_time(pid)) is not None:
            started.append([pid, ticks])
    record = {
        "driver_pid": os.getpid(),
        "driver_start": start_time(os.getpid()),
        # Read by `workbench diagnose --timeline` to reach the running Ray; never used to
        # choose what to stop.
        "session_dir": node.get_session_dir_path(),
        "processes": started,
        "raylets": raylets,
    }
    _STARTED.append(record)
    (results_dir / SESSION_FILE).write_text(json.dumps(record))


def await_ray_exit(
    timeout_s: float = 5.0, records: list[dict[str, Any]] | None = None
) -> list[int]:
    """Waits, up to ``timeout_s``, for the processes of the local Rays this process
    started to end; the pids still running then. Ray's shutdown signals its processes and
    returns: the raylet's agents end only when they next find the raylet gone, about a
    second later, and a command that returned at once left them running."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = [
            pid
            for record in (records or _STARTED)
            for pid in leftover_processes(record)
            if not _exited(pid)
        ]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.05)


def stop_ray_started_here(
    timeout_s: float = 5.0, records: list[dict[str, Any]] | None = None
) -> list[int]:
    """What a command does at its end: waits (``await_ray_exit``) for the processes of the
    local Rays it started, then SIGKILLs those still running (recorded by pid and start
    time, so no other process is touched). On a busy machine an agent can take longer than
    the wait to notice its raylet is gone. The pids it killed."""
    killed = []
    for pid in await_ray_exit(timeout_s, records):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
    return killed


def _stat(pid: int | str) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (which is in parentheses and
    may hold spaces): the state first (field 3). None: no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()


def _exited(pid: int) -> bool:
    """Whether the process has ended and only waits for its parent to reap it (a zombie)."""
    fields = _stat(pid)
    return fields is None or fields[0] == "Z"


def start_time(pid: int) -> int | None:
    """When the process started (clock ticks since boot; /proc/PID/stat field 22): with
    the pid it names one process, never a later one that reuses the pid."""
    fields = _stat(pid)
    return None if fields is None else int(fields[19])


def _children() -> dict[int, list[int]]:
    """Parent pid -> child pids, of every process this user can see."""
    out: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat(entry.name)) is not None:
            out.setdefault(int(fields[1]), []).append(int(entry.name))
    return out


def leftover_processes(record: dict[str, Any]) -> list[int]:
    """The recorded Ray processes that still run (same pid, same start time, ours) and
    everything they started since, children first."""
    if not Path("/proc").is_dir():
        return []
    alive = [
        int(pid)
        for pid, ticks in record.get("processes", [])
        if start_time(int(pid)) == int(ticks) and _ours(int(pid))
    ]
    found = _with_descendants(alive, _children())
    return found + [pid for pid in _spawned_by_dead_raylets(record) if pid not in found]


def _spawned_by_dead_raylets(record: dict[str, Any]) -> list[int]:
    """Processes a recorded raylet started after the record (a worker it was starting
    when the driver died, stuck connecting to it), orphaned since: the raylet puts its pid
    in their environment (RAY_RAYLET_PID). Only while no process holds that pid (else a
    new raylet may have it), only ours, only started after the recorded raylet."""
    out: list[int] = []
    for pid, ticks in record.get("raylets", []):
        if start_time(int(pid)) is not None:
            continue  # alive (its children are walked) or the pid is someone else's now
        mark = f"RAY_RAYLET_PID={int(pid)}".encode()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                environ = (entry / "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            started = start_time(int(entry.name))
            if (
                mark in environ
                and started is not None
                and started >= int(ticks)
                and _ours(int(entry.name))
            ):
                out.append(int(entry.name))
    return out


def _with_descendants(pids: list[int], children: dict[int, list[int]]) -> list[int]:
    """The processes and everything under them, children before parents; never this
    process."""
    found: list[int] = []

    def walk(pid: int) -> None:
        for child in children.get(pid, []):
            if child != os.getpid() and child not in found:
                walk(child)
        if pid not in found and pid != os.getpid():
            found.append(pid)

    for pid in pids:
        walk(pid)
    return found


def _ours(pid: int) -> bool:
    try:
        return os.stat(f"/proc/{pid}").st_uid == os.getuid()
    except OSError:
        return False


def cleanup_leftover_ray(results_dir: Path) -> list[int]:
    """Kills the Ray processes a killed driver of this population left running.

    Only the processes the driver recorded when it started Ray (checked by start time, so
    a reused pid is left alone) and their descendants are touched; no command line is
    matched. The caller holds the folder's lock, so no driver of it is alive."""
    record_file = results_dir / SESSION_FILE
    if not record_file.exists():
        return []
    try:
        record = json.loads(record_file.read_text())
    except (OSError, ValueError):
        record = {}
    if not isinstance(record, dict):
        record = {}
    driver, started = record.get("driver_pid"), record.get("driver_start")
    if isinstance(driver, int) and started is not None and start_time(driver) == started:
        # The driver that started them still runs: not leftovers, but another population's
        # Ray (this folder is a copy of one that runs, or was moved while it ran). Its
        # processes are its own; this record is stale here.
        record_file.unlink()
        return []
    killed = []
    for pid in leftover_processes(record):
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except OSError:
            pass
    record_file.unlink()
    return killed
