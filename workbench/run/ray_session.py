"""The Ray this driver starts or joins, and the cleanup after a killed driver."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import ray
from ray._private.utils import get_dashboard_dependency_error

from workbench.errors import ExperimentError
from workbench.names import SESSION_FILE


def dashboard_missing() -> str | None:
    """Why Ray's dashboard cannot start here (its packages, ray[default], are missing), or None."""

    error = get_dashboard_dependency_error()
    if error is None:
        return None
    return (
        f"Ray's dashboard needs the packages of ray[default] ({error}); install them with "
        f"`pip install -e '.[dashboard]'` or `pip install 'ray[default]=={ray.__version__}'`"
    )


def start_ray(address: str | None, dashboard: bool = False) -> None:

    if ray.is_initialized():
        return
    joining = bool(address or os.environ.get("RAY_ADDRESS"))
    if dashboard and not joining and (missing := dashboard_missing()):
        raise ExperimentError.single("--dashboard", "", missing)
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


def record_ray_session(results_dir: Path) -> None:
    """Remembers the local Ray this driver started, so that a resume after the driver
    was killed can clean up what it left behind (and nothing else)."""

    node = getattr(ray._private.worker, "_global_node", None)
    if node is None or not getattr(node, "head", False):
        return  # joined a cluster: not ours to clean up
    (results_dir / SESSION_FILE).write_text(
        json.dumps({"driver_pid": os.getpid(), "session_dir": node.get_session_dir_path()})
    )


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def cleanup_leftover_ray(results_dir: Path) -> list[int]:
    """Kills the Ray processes a killed driver of this population left running.

    Only processes of the recorded Ray session are touched. Refuses (exit 2) when the
    population's driver is still alive: two drivers would write the same trials.
    """

    record = results_dir / SESSION_FILE
    if not record.exists():
        return []
    data = json.loads(record.read_text())
    driver = int(data.get("driver_pid", 0))
    command = _cmdline(driver) if driver and driver != os.getpid() else ""
    if "workbench" in command and (" run " in command or " resume " in command):
        raise ExperimentError.single(
            str(results_dir),
            "",
            f"this population is still running (driver pid {driver}); stop it (Ctrl-C or "
            f"`kill {driver}`) before resuming",
        )
    session = str(data.get("session_dir", ""))
    killed = []
    if session and Path("/proc").is_dir():
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            if session in _cmdline(int(entry.name)):
                try:
                    os.kill(int(entry.name), signal.SIGKILL)
                    killed.append(int(entry.name))
                except OSError:
                    pass
    record.unlink()
    return killed
