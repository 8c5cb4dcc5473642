"""One writer per results folder: an exclusive lock held for the driver's life.

Two `workbench run`s of one name started together used to both pass the "already holds a
run" check and write one folder (two experiment states, one tuner.pkl, trial folders
holding either population's rows). The driver now takes an advisory lock (``flock``)
before it writes anything, and keeps it until it exits: a second `run` or `resume` of the
folder is refused, naming the holder. The kernel drops the lock when its holder dies, so
a stale lock (a SIGKILLed driver) is taken over without anyone deleting a file.

The lock file lies beside the folder (``<storage>/.<name>.lock``), not in it: a refused
run creates no results folder, and a copy of the folder carries no lock. ``flock`` is
per host: on a volume shared by several hosts (NFS), start a population's driver on one.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import socket
import sys
from pathlib import Path
from types import TracebackType

from workbench.errors import ExperimentError


def lock_path(results_dir: Path) -> Path:
    return results_dir.parent / f".{results_dir.name}.lock"


class FolderLock:
    """``with FolderLock(results_dir, "run"):`` the only writer of ``results_dir``."""

    def __init__(self, results_dir: Path, command: str) -> None:
        self.results_dir = results_dir
        self.command = command
        self.path = lock_path(results_dir)
        self._fd: int | None = None

    def acquire(self) -> FolderLock:
        """Takes the lock or raises ExperimentError (exit 2) naming its holder."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _describe(os.pread(fd, 4096, 0))
            os.close(fd)
            raise ExperimentError.single(
                str(self.results_dir),
                "",
                f"another workbench is writing this results folder ({holder}); wait for it "
                "to end or stop it, then try again",
            ) from None
        record: dict[str, object] = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "command": self.command,
            "since": dt.datetime.now().isoformat(timespec="seconds"),
            "argv": sys.argv[:8],
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(record).encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> FolderLock:
        return self.acquire()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


def _describe(raw: bytes) -> str:
    try:
        holder = json.loads(raw.decode() or "{}")
    except ValueError:
        holder = {}
    if not isinstance(holder, dict) or "pid" not in holder:
        return "a process that did not say who it is"
    return (
        f"`workbench {holder.get('command', '?')}`, pid {holder['pid']} on "
        f"{holder.get('host', '?')}, since {holder.get('since', '?')}"
    )
