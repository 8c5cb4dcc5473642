"""One writer per results folder, and a cleanup that stops only what the driver started."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.experiments import tiny_ppo, write_experiment
from workbench.cli import main
from workbench.errors import ExperimentError
from workbench.names import RESOLVED_FILE, SESSION_FILE
from workbench.run.folder_lock import FolderLock, lock_path
from workbench.run.ray_session import cleanup_leftover_ray, start_time

HOLD = """
import sys, time
from pathlib import Path
from workbench.run.folder_lock import FolderLock
FolderLock(Path(sys.argv[1]), "run").acquire()
print("held", flush=True)
time.sleep(120)
"""


def _stop(process: subprocess.Popen[str]) -> None:
    process.kill()
    process.wait()
    if process.stdout is not None:
        process.stdout.close()


def _holder(folder: Path) -> subprocess.Popen[str]:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(folder)], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


def test_a_second_writer_is_refused_naming_the_holder_until_the_holder_dies(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "results" / "pop"
    holder = _holder(folder)
    try:
        with pytest.raises(ExperimentError) as info:
            FolderLock(folder, "resume").acquire()
        message = str(info.value)
        assert "another workbench is writing this results folder" in message
        assert f"`workbench run`, pid {holder.pid} on " in message
        assert not folder.exists()  # the lock lies beside the folder, never in it
    finally:
        _stop(holder)
    # The kernel dropped the dead holder's lock: taken over, and it names the new holder.
    with FolderLock(folder, "resume"):
        record = json.loads(lock_path(folder).read_text())
        assert record["pid"] == os.getpid() and record["command"] == "resume"
    # Released: the next writer gets it at once.
    FolderLock(folder, "run").acquire().release()


def test_resume_of_a_folder_whose_driver_runs_exits_2_before_ray(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "results" / "probe"
    folder.mkdir(parents=True)
    write_experiment(folder / RESOLVED_FILE, tiny_ppo(tmp_path))
    (folder / "tuner.pkl").write_bytes(b"")
    holder = _holder(folder)
    try:
        assert main(["resume", str(folder)]) == 2
    finally:
        _stop(holder)
    err = capsys.readouterr().err
    assert f"pid {holder.pid}" in err and "Traceback" not in err
    import ray

    assert not ray.is_initialized()


SPAWN_TREE = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
print(child.pid, flush=True)
time.sleep(120)
"""


def test_cleanup_stops_the_recorded_processes_and_their_children_and_nothing_else(
    tmp_path: Path,
) -> None:
    session_dir = tmp_path / "session_2026"
    # What a killed driver's Ray leaves: a process (raylet, say) and what it started.
    parent = subprocess.Popen([sys.executable, "-c", SPAWN_TREE], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    # An unrelated process that mentions the session's path (a `tail -f` on a Ray log),
    # and one whose pid the record names with another start time (a reused pid).
    bystander = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)", str(session_dir / "logs/raylet.out")]
    )
    reused = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        for _ in range(100):
            if start_time(child) is not None:
                break
            time.sleep(0.02)
        ticks = start_time(parent.pid)
        other = start_time(reused.pid)
        assert ticks is not None and other is not None
        (tmp_path / SESSION_FILE).write_text(
            json.dumps(
                {
                    "driver_pid": 999_999,
                    "session_dir": str(session_dir),
                    "processes": [[parent.pid, ticks], [reused.pid, other + 1]],
                }
            )
        )
        killed = cleanup_leftover_ray(tmp_path)
        assert sorted(killed) == sorted([parent.pid, child])
        assert parent.wait(timeout=10) == -signal.SIGKILL
        assert bystander.poll() is None and reused.poll() is None
        assert not (tmp_path / SESSION_FILE).exists()
    finally:
        for process in (parent, bystander, reused):
            _stop(process)
        with contextlib.suppress(OSError):
            os.kill(child, signal.SIGKILL)


def test_cleanup_leaves_the_processes_of_a_driver_that_still_runs(tmp_path: Path) -> None:
    # A copy of a running population's folder carries its record: resuming the copy
    # must not stop the original's Ray.
    ray_like = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"], stdout=subprocess.PIPE, text=True
    )
    try:
        ticks = start_time(ray_like.pid)
        (tmp_path / SESSION_FILE).write_text(
            json.dumps(
                {
                    "driver_pid": os.getpid(),  # alive: this test is the running driver
                    "driver_start": start_time(os.getpid()),
                    "processes": [[ray_like.pid, ticks]],
                }
            )
        )
        assert cleanup_leftover_ray(tmp_path) == []
        assert ray_like.poll() is None
    finally:
        _stop(ray_like)


def test_cleanup_stops_what_a_dead_raylet_started_after_the_record(tmp_path: Path) -> None:
    # A worker the raylet was starting when the driver died: not in the record, re-parented
    # to init, found by the raylet's pid the raylet put in its environment.
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a raylet pid no process holds now
    sleeper = [sys.executable, "-c", "import time; time.sleep(120)"]
    marked = subprocess.Popen(sleeper, env={**os.environ, "RAY_RAYLET_PID": str(gone.pid)})
    unmarked = subprocess.Popen(sleeper)
    try:
        for _ in range(100):
            if start_time(marked.pid) is not None:
                break
            time.sleep(0.02)
        started = start_time(marked.pid)
        assert started is not None
        record = tmp_path / SESSION_FILE
        # A raylet recorded as started after the marked process: not its child.
        record.write_text(json.dumps({"raylets": [[gone.pid, started + 1]]}))
        assert cleanup_leftover_ray(tmp_path) == []
        record.write_text(json.dumps({"raylets": [[gone.pid, started]]}))
        assert cleanup_leftover_ray(tmp_path) == [marked.pid]
        assert marked.wait(timeout=10) == -signal.SIGKILL
        assert unmarked.poll() is None
    finally:
        for process in (marked, unmarked):
            process.kill()
            process.wait()
